"""The PyTorch adapter: tensors in and out without copies, autograd, torch.compile."""

from __future__ import annotations

import array
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cuscan
from tests import reference
from tests.conftest import _gpu_available, assert_close, require, run_in_fresh_process

torch = require("torch")
from cuscan import _torch  # noqa: E402  (needs torch)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param == "cuda" and not (_gpu_available() and torch.cuda.is_available()):
        pytest.skip("needs CuPy, a CUDA build of torch and a GPU")
    return torch.device(request.param)


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_matches_reference(device, dtype, method, reverse):
    generator = torch.Generator().manual_seed(0)
    decays = torch.rand(300, 4, generator=generator, dtype=torch.float64) * 0.5 + 0.5
    impulses = torch.randn(300, 4, generator=generator, dtype=torch.float64)
    state = torch.randn(4, generator=generator, dtype=torch.float64)
    decays, impulses, state = (v.to(dtype).to(device) for v in (decays, impulses, state))
    h = cuscan.linear_recurrence(decays, impulses, state, method=method, reverse=reverse)
    assert isinstance(h, torch.Tensor)
    assert h.dtype == dtype
    assert h.device == impulses.device
    as_numpy = [v.cpu().to(torch.complex128 if dtype.is_complex else torch.float64).numpy()
                for v in (decays, impulses, state)]
    expected = reference.linear_recurrence(*as_numpy, reverse=reverse)
    scale = reference.error_scale(*as_numpy, reverse=reverse)
    numpy_dtype = _torch.to_array(torch.zeros(1, dtype=dtype)).dtype
    actual = h.cpu().to(torch.complex128 if dtype.is_complex else torch.float64).numpy()
    assert_close(actual, expected, scale, numpy_dtype, 300)


def test_layouts_broadcasting_and_scalars(device):
    rng = np.random.default_rng(1)
    base = torch.tensor(rng.standard_normal((4, 50, 6)), device=device)
    impulses = base.transpose(0, 1)[:, ::2]  # (50, 2, 6), non-contiguous
    decays = torch.tensor(rng.uniform(0, 1, 6), device=device)  # time-invariant
    h = cuscan.linear_recurrence(decays, impulses, 1.0, axis=0)
    expected = reference.linear_recurrence(decays.cpu().numpy(), impulses.cpu().numpy(), 1.0)
    np.testing.assert_allclose(h.cpu().numpy(), expected, rtol=1e-12)
    h32 = cuscan.linear_recurrence(0.5, impulses.float(), axis=1)
    assert h32.dtype == torch.float32
    assert cuscan.linear_recurrence(0.5j, impulses.float()).dtype == torch.complex64
    # Sequences beside tensors (typed buffers too) take the tensors' dtype and device.
    for state in ([1.0] * 6, array.array("f", [1.0] * 6), memoryview(np.ones(6))):
        h = cuscan.linear_recurrence(decays, impulses, state, axis=0)
        assert h.dtype == torch.float64
        assert h.device == impulses.device
        np.testing.assert_allclose(h.cpu().numpy(), expected, rtol=1e-12)


def test_any_layout(device):
    """Permuted, strided and expanded (stride 0) tensors of up to six dimensions give the
    reference's result, and autograd gives them the gradients of the same values as
    contiguous NumPy arrays."""
    from tests import test_properties as properties

    hypothesis = properties.hypothesis

    @hypothesis.settings(properties.SETTINGS, max_examples=100)
    @hypothesis.given(problem=properties.laid_out_problems())
    def check(problem):
        values, kwargs = properties.laid_out_values(problem)
        dtype, length = np.dtype(problem["dtype"]), problem["shape"][problem["axis"]]
        views = {}
        for name, value in values.items():
            if value is not None:  # a forward step along each axis, as torch's strides are
                order, steps, broadcast = problem["layouts"][name]
                memory, axes, pick = properties.in_memory(
                    value, (order, [abs(step) for step in steps], broadcast))
                view = torch.from_numpy(memory).to(device).permute(axes)[pick]
                views[name] = view if broadcast is None else view.expand(value.shape)
        inputs = [views.get(name) for name in ("decays", "impulses", "initial_state")]
        for view in inputs:
            if view is not None:
                view.requires_grad_(True)
        h = cuscan.linear_recurrence(*inputs, method=problem["method"], **kwargs)
        expected = reference.linear_recurrence(values["decays"], values["impulses"],
                                               values["initial_state"], **kwargs)
        assert tuple(h.shape) == expected.shape
        if not expected.size:
            return
        scale = reference.error_scale(values["decays"], values["impulses"],
                                      values["initial_state"], **kwargs)
        assert_close(h.detach().cpu().numpy(), expected, scale, dtype, length)
        h.backward(views["grad_output"])
        plain = cuscan.linear_recurrence_vjp(values["grad_output"], values["decays"],
                                             expected.astype(dtype), values["initial_state"],
                                             **kwargs)
        for view, gradient in zip(inputs, plain, strict=True):
            if view is None:
                continue
            assert tuple(view.grad.shape) == gradient.shape
            assert_close(view.grad.cpu().numpy(), gradient, np.abs(gradient).max(), dtype,
                         length)

    check()


def test_conversions_share_memory(device):
    for dtype in (torch.float32, torch.bfloat16, torch.complex64):
        transposed = torch.zeros(7, 5, dtype=dtype, device=device).t()[1:]
        expanded = torch.zeros(5, 1, dtype=dtype, device=device).expand(5, 3)
        for tensor in (transposed, expanded):
            array = _torch.to_array(tensor)
            pointer = array.data.ptr if device.type == "cuda" else array.ctypes.data
            assert pointer == tensor.data_ptr()
            assert array.shape == tuple(tensor.shape)
            assert [s // array.itemsize for s in array.strides] == list(tensor.stride())
            back = _torch.from_array(array)
            assert back.data_ptr() == tensor.data_ptr()
            assert back.dtype == dtype


@pytest.fixture
def cuda():
    if not (_gpu_available() and torch.cuda.is_available()):
        pytest.skip("needs CuPy, a CUDA build of torch and a GPU")
    return torch.device("cuda")


@pytest.mark.gpu
def test_cuda_memory_comes_from_torch(cuda):
    """Outputs and workspaces on CUDA come from torch's caching allocator, not CuPy's pool:
    torch counts them while they live and has them back once they are freed."""
    import cupy

    pool = cupy.get_default_memory_pool()
    generator = torch.Generator(cuda).manual_seed(0)
    decays = torch.rand(3, 100_003, generator=generator, device=cuda)
    impulses = torch.randn(3, 100_003, generator=generator, device=cuda, requires_grad=True)
    torch.cuda.synchronize(cuda)
    pool_bytes, allocated = pool.total_bytes(), torch.cuda.memory_allocated(cuda)
    h = cuscan.linear_recurrence(decays, impulses, axis=-1, method="parallel")
    assert torch.cuda.memory_allocated(cuda) - allocated >= h.nbytes
    h.backward(torch.ones_like(h))
    del h
    torch.cuda.synchronize(cuda)
    assert 0 <= torch.cuda.memory_allocated(cuda) - allocated - impulses.grad.nbytes < 4096
    assert pool.total_bytes() == pool_bytes


@pytest.mark.gpu
def test_cuda_graph_capture(cuda):
    """A forward and backward pass captured in a CUDA graph (as torch.compile's
    "reduce-overhead" mode captures them) replays on new inputs as eager calls compute."""
    generator = torch.Generator(cuda).manual_seed(1)
    decays = torch.empty(2, 5000, device=cuda)
    impulses = torch.empty(2, 5000, device=cuda, requires_grad=True)
    grad_output = torch.empty(2, 5000, device=cuda)

    def step():
        # h is handed back detached, so that no autograd graph outlives its pass: a kept
        # graph would hold the leaf's gradient node, made on the capture's stream, and torch
        # warns when a later pass on another stream feeds it
        h = cuscan.linear_recurrence(decays, impulses, axis=-1, method="parallel")
        return h.detach(), *torch.autograd.grad(h, impulses, grad_output)

    def draw():
        with torch.no_grad():
            decays.uniform_(0.5, 1.0, generator=generator)
            for tensor in (impulses, grad_output):
                tensor.normal_(generator=generator)

    draw()
    side = torch.cuda.Stream(cuda)  # warm-up off the default stream, as torch asks
    side.wait_stream(torch.cuda.current_stream(cuda))
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream(cuda).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for _ in range(2):
        draw()
        graph.replay()
        for mine, eager in zip(captured, step(), strict=True):
            torch.testing.assert_close(mine, eager, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["conj", "neg"])
def test_lazy_conjugates_and_negatives(device, kind):
    """torch's lazy conjugate and negative views (``x.conj()``, ``x.conj().imag``), which
    DLPack cannot carry, give what the resolved tensors give, values and gradients."""
    generator = torch.Generator().manual_seed(5)
    values = [torch.randn(*shape, generator=generator, dtype=torch.complex128).to(device) * 0.5
              for shape in [(13, 3), (13, 3), (3,), (13, 3)]]
    lazy = [v.conj() if kind == "conj" else v.conj().imag for v in values]
    assert all(v.is_conj() if kind == "conj" else v.is_neg() for v in lazy)
    resolved = [v.resolve_conj().resolve_neg() for v in lazy]
    grad_output = lazy.pop()
    resolved_grad_output = resolved.pop()
    for inputs in (lazy, resolved):
        for v in inputs:
            v.requires_grad_()
    h = cuscan.linear_recurrence(*lazy, reverse=True)
    expected = cuscan.linear_recurrence(*resolved, reverse=True)
    torch.testing.assert_close(h, expected, rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(torch.autograd.grad(h, lazy, grad_output),
                            torch.autograd.grad(expected, resolved, resolved_grad_output),
                            strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)
    output = expected.detach()
    for mine, theirs in zip(
            cuscan.linear_recurrence_vjp(grad_output, lazy[0].detach(), output),
            cuscan.linear_recurrence_vjp(resolved_grad_output, resolved[0].detach(), output),
            strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)


def test_inputs_not_modified(device):
    decays = torch.rand(200, 3, dtype=torch.float64, device=device)
    impulses = torch.randn(200, 3, dtype=torch.float64, device=device)
    copies = decays.clone(), impulses.clone()
    h = cuscan.linear_recurrence(decays, impulses, reverse=True)
    cuscan.linear_recurrence_vjp(torch.ones_like(h), decays, h, reverse=True)
    assert torch.equal(decays, copies[0])
    assert torch.equal(impulses, copies[1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_gradcheck(device, dtype, method, reverse):
    generator = torch.Generator().manual_seed(2)
    decays = (torch.rand(3, generator=generator, dtype=torch.float64) * 0.9).to(dtype)
    impulses = torch.randn(17, 2, 3, generator=generator, dtype=torch.float64).to(dtype)
    state = torch.randn(1, 3, generator=generator, dtype=torch.float64).to(dtype)
    inputs = tuple(v.to(device).requires_grad_() for v in (decays, impulses, state))

    def function(a, x, s):
        return cuscan.linear_recurrence(a, x, s, method=method, reverse=reverse)

    assert torch.autograd.gradcheck(function, inputs, check_forward_ad=True,
                                    check_batched_grad=True, check_batched_forward_grad=True)
    assert torch.autograd.gradgradcheck(function, inputs, check_fwd_over_rev=True,
                                        check_batched_grad=True)


def test_real_operands_of_a_complex_recurrence(device):
    """Complex decays with real impulses and state: the real operands' gradients are real
    (the real part, as torch gives for real inputs of complex operations)."""
    generator = torch.Generator().manual_seed(5)
    decays = torch.rand(9, 2, generator=generator, dtype=torch.float64) * 0.9 * (1 + 0.5j)
    impulses = torch.randn(9, 2, generator=generator, dtype=torch.float64)
    state = torch.randn(2, generator=generator, dtype=torch.float64)
    inputs = tuple(v.to(device).requires_grad_() for v in (decays, impulses, state))
    assert torch.autograd.gradcheck(cuscan.linear_recurrence, inputs)
    assert torch.autograd.gradgradcheck(cuscan.linear_recurrence, inputs)


@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("channels", [(2,), ()])
@pytest.mark.parametrize("length", [0, 1, 2, 17])
def test_higher_order_short_sequences(device, length, channels, batch):
    """Second derivatives and forward mode, also of one channel with a 0-d state, which the
    differentiable gradient expands to the shape of a step without channels, and of no
    steps at all; with time the first axis or after a batch axis."""
    generator = torch.Generator().manual_seed(3)
    shape = (*batch, length, *channels)
    decays = torch.rand(shape, generator=generator, dtype=torch.float64)
    impulses = torch.randn(shape, generator=generator, dtype=torch.float64)
    state = torch.randn((*batch, *channels), generator=generator, dtype=torch.float64)
    inputs = tuple(v.to(device).requires_grad_() for v in (decays, impulses, state))
    for reverse in (False, True):
        def function(a, x, s, reverse=reverse):
            return cuscan.linear_recurrence(a, x, s, axis=len(batch), reverse=reverse)

        assert torch.autograd.gradgradcheck(function, inputs, check_fwd_over_rev=True)
        assert torch.autograd.gradcheck(function, inputs, check_forward_ad=True)


def test_torch_func_transforms(device):
    generator = torch.Generator().manual_seed(4)
    decays = torch.rand(9, 3, generator=generator, dtype=torch.float64).to(device)
    impulses = torch.randn(5, 9, 3, generator=generator, dtype=torch.float64).to(device)
    states = torch.randn(5, 3, generator=generator, dtype=torch.float64).to(device)

    def loss(a, x, s):
        return (cuscan.linear_recurrence(a, x, s) ** 2).sum()

    # vmap: any operand batched or not, the batch dimension anywhere
    looped = torch.stack([cuscan.linear_recurrence(decays, x, s)
                          for x, s in zip(impulses, states, strict=True)])
    batched = torch.func.vmap(cuscan.linear_recurrence, in_dims=(None, 0, 0))(
        decays, impulses, states)
    torch.testing.assert_close(batched, looped)
    only_states = torch.func.vmap(lambda s: cuscan.linear_recurrence(decays, impulses[0], s))
    for i, h in enumerate(only_states(states)):
        torch.testing.assert_close(h, cuscan.linear_recurrence(decays, impulses[0], states[i]))
    scales = torch.linspace(0.5, 1.0, 4, dtype=torch.float64, device=device)
    moved = torch.func.vmap(lambda a: cuscan.linear_recurrence(a, impulses[0], axis=-2),
                            in_dims=2)(decays[:, :, None] * scales)
    for i, h in enumerate(moved):
        torch.testing.assert_close(h, cuscan.linear_recurrence(decays * scales[i], impulses[0]))
    # operands of lower rank than the result, batched: a decay per channel, a scalar state
    rates, starts = decays[:5], states[:, 0]
    alone = [cuscan.linear_recurrence(r, x, s)
             for r, x, s in zip(rates, impulses, starts, strict=True)]
    weights = torch.randn(impulses.shape, generator=generator, dtype=torch.float64).to(device)
    for grad_mode in (True, False):  # autograd's path, and the operators' batching rules
        with torch.set_grad_enabled(grad_mode):
            outputs = torch.func.vmap(cuscan.linear_recurrence)(rates, impulses, starts)
            pulled = torch.func.vmap(cuscan.linear_recurrence_vjp)(weights, rates, outputs,
                                                                   starts)
        torch.testing.assert_close(outputs, torch.stack(alone))
        for i in range(5):
            for got, expected in zip(pulled, cuscan.linear_recurrence_vjp(
                    weights[i], rates[i], alone[i], starts[i]), strict=True):
                torch.testing.assert_close(got[i], expected)
    # without grad mode, the operators' own batching rules (with it, autograd's path)
    with torch.no_grad():
        torch.testing.assert_close(torch.func.vmap(cuscan.linear_recurrence, in_dims=(
            None, 0, 0))(decays, impulses, states), looped)
        for dims in ((0, None, 0, 0), (None, None, 0, None), (0, None, 0, None)):
            operands = (impulses if dims[0] == 0 else impulses[0], decays, looped,
                        None if dims[3] is None else states)
            batched = torch.func.vmap(cuscan.linear_recurrence_vjp, in_dims=dims, out_dims=(
                0, 0, None if dims[3] is None else 0))(*operands)
            for i in range(5):
                alone = cuscan.linear_recurrence_vjp(*(
                    None if v is None else v if d is None else v[i]
                    for v, d in zip(operands, dims, strict=True)))
                for got, expected in zip(batched, alone, strict=True):
                    if expected is None:
                        assert got is None
                    else:
                        torch.testing.assert_close(got[i], expected)
    # grad, and per-example gradients of a shared decay
    per_example = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(
        decays, impulses, states)
    for i in range(5):
        a = decays.clone().requires_grad_()
        loss(a, impulses[i], states[i]).backward()
        torch.testing.assert_close(per_example[i], a.grad)
    # grad and vjp outside vmap (ensembles of models): every batched operand differentiated
    ensemble = decays * torch.linspace(0.6, 1.0, 5, dtype=torch.float64,
                                       device=device)[:, None, None]
    separate = [torch.autograd.grad(loss(a.requires_grad_(), x.requires_grad_(), s), (a, x))
                for a, x, s in zip(ensemble.clone(), impulses.clone(), states, strict=True)]
    for argnums in (0, 1):
        together = torch.func.grad(lambda *ax: torch.func.vmap(loss)(*ax, states).sum(),
                                   argnums=argnums)(ensemble, impulses)
        torch.testing.assert_close(together, torch.stack([g[argnums] for g in separate]))
    outputs, pullback = torch.func.vjp(torch.func.vmap(cuscan.linear_recurrence),
                                       ensemble, impulses, states)
    weights = torch.randn(outputs.shape, generator=generator, dtype=torch.float64).to(device)
    for pulled, expected in zip(pullback(weights), torch.func.vmap(cuscan.linear_recurrence_vjp)(
            weights, ensemble, outputs, states), strict=True):
        torch.testing.assert_close(pulled, expected)
    # forward mode, and forward over reverse
    jacobians = [transform(lambda a: cuscan.linear_recurrence(a, impulses[0]))(decays)
                 for transform in (torch.func.jacrev, torch.func.jacfwd)]
    torch.testing.assert_close(*jacobians)
    column = (impulses[0, :, :1], states[0, :1])
    hessians = [hessian(lambda a: loss(a[:, None], *column), decays[:, 0])
                for hessian in (lambda f, a: torch.func.hessian(f)(a),
                                torch.autograd.functional.hessian)]
    torch.testing.assert_close(*hessians)


def test_gradient_matches_the_vjp(device):
    decays = torch.rand(40, 3, dtype=torch.float64, device=device, requires_grad=True)
    impulses = torch.randn(40, 3, dtype=torch.float64, device=device, requires_grad=True)
    h = cuscan.linear_recurrence(decays, impulses)
    weights = torch.randn_like(h)
    (h * weights).sum().backward()
    grad_decays, grad_impulses, grad_state = cuscan.linear_recurrence_vjp(weights, decays,
                                                                          h.detach())
    assert grad_state is None
    torch.testing.assert_close(decays.grad, grad_decays)
    torch.testing.assert_close(impulses.grad, grad_impulses)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing(device, reentrant):
    """Under torch.utils.checkpoint the gradients, first and second order, are those
    computed without it (the backward reads its saved tensors once, as checkpointing
    requires)."""
    generator = torch.Generator().manual_seed(6)
    inputs = [torch.rand(30, 4, generator=generator, dtype=torch.float64),
              torch.randn(30, 4, generator=generator, dtype=torch.float64),
              torch.randn(4, generator=generator, dtype=torch.float64)]

    def block(a, x, s):
        return torch.tanh(cuscan.linear_recurrence(torch.sigmoid(a), x, s))

    def gradients(checkpointed: bool, order: int):
        leaves = [v.to(device).clone().requires_grad_() for v in inputs]  # fresh leaves
        if checkpointed:
            h = torch.utils.checkpoint.checkpoint(block, *leaves, use_reentrant=reentrant)
        else:
            h = block(*leaves)
        if order == 1:  # .backward(), which reentrant checkpointing requires
            (h ** 2).sum().backward()
            return [v.grad for v in leaves]
        grads = torch.autograd.grad((h ** 2).sum(), leaves, create_graph=True)
        return torch.autograd.grad(sum(g.square().sum() for g in grads), leaves)

    for order in (1,) if reentrant else (1, 2):  # reentrant checkpointing is first order only
        for ours, plain in zip(gradients(True, order), gradients(False, order), strict=True):
            torch.testing.assert_close(ours, plain)


# torch 2.10's profiler warns that it keeps one cycle's events, whatever the settings.
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")
def test_operators_are_seen_where_they_must_be():
    """Eager calls on plain tensors run the operators' code directly, but Python dispatch
    modes, torch.device contexts and the profiler see the operators."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    decays, impulses = torch.rand(6, 2, dtype=torch.float64), torch.randn(6, 2,
                                                                          dtype=torch.float64)
    expected = cuscan.linear_recurrence(decays, impulses)
    with Seen() as seen:
        torch.testing.assert_close(cuscan.linear_recurrence(decays, impulses), expected)
        cuscan.linear_recurrence_vjp(expected, decays, expected)
    assert {"cuscan.linear_recurrence.default",
            "cuscan.linear_recurrence_vjp.default"} <= set(seen.names)
    with torch.device("cpu"):
        torch.testing.assert_close(cuscan.linear_recurrence(decays, impulses), expected)
    with torch.profiler.profile() as profile:
        cuscan.linear_recurrence(decays, impulses)
    assert "cuscan::linear_recurrence" in {event.key for event in profile.key_averages()}

    # differentiated: the same, forward and backward
    decays.requires_grad_()
    expected_grad, = torch.autograd.grad(cuscan.linear_recurrence(decays, impulses).sum(),
                                         decays)
    assert "_Eager" in type(cuscan.linear_recurrence(decays, impulses).grad_fn).__name__
    with Seen() as seen:
        grad, = torch.autograd.grad(cuscan.linear_recurrence(decays, impulses).sum(), decays)
    assert {"cuscan.linear_recurrence.default",
            "cuscan.linear_recurrence_vjp.default"} <= set(seen.names)
    torch.testing.assert_close(grad, expected_grad)
    with torch.profiler.profile() as profile:
        torch.autograd.grad(cuscan.linear_recurrence(decays, impulses).sum(), decays)
    assert {"cuscan::linear_recurrence",
            "cuscan::linear_recurrence_vjp"} <= {event.key for event in profile.key_averages()}


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("reverse", [False, True])
def test_vjp_function_is_differentiable(device, dtype, reverse):
    """``linear_recurrence_vjp`` on tensors that require grad is differentiable, to second
    order, with broadcast decays and state, and gives the values it gives without grad."""
    generator = torch.Generator().manual_seed(9)
    shapes = [(6, 2, 3), (1, 3), (6, 2, 3), (3,)]
    operands = [torch.randn(shape, generator=generator, dtype=dtype).to(device)
                for shape in shapes]
    operands[1] = operands[1] * 0.5
    expected = cuscan.linear_recurrence_vjp(*operands, reverse=reverse)
    leaves = [v.clone().requires_grad_() for v in operands]

    def vjp(*values):
        return cuscan.linear_recurrence_vjp(*values, reverse=reverse)

    for mine, theirs in zip(vjp(*leaves), expected, strict=True):
        assert mine.requires_grad
        torch.testing.assert_close(mine.detach(), theirs)
    assert torch.autograd.gradcheck(vjp, leaves)
    assert torch.autograd.gradgradcheck(vjp, leaves)


# torch 2.15's opcheck reads .grad of the non-leaf tensors it makes (test_aot_dispatch_dynamic),
# for any custom operator.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
def test_opcheck(device):
    decays = torch.rand(33, 4, dtype=torch.float64, device=device, requires_grad=True)
    impulses = torch.randn(33, 4, dtype=torch.float64, device=device, requires_grad=True)
    state = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    torch.library.opcheck(_torch._forward, (decays, impulses, state, 0, False, "parallel"))
    column = torch.rand(33, 1, dtype=torch.float64, device=device, requires_grad=True)
    torch.library.opcheck(_torch._forward, (column, impulses, None, 1, True, "auto"))
    h = _torch._forward(decays, impulses, state, 0, False, "auto").detach()
    torch.library.opcheck(_torch._backward, (torch.ones_like(h), decays.detach(), h,
                                             state.detach(), 0, False))


# Inductor's own imports use a deprecated torch.jit decorator.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_compile_fullgraph(device, compiler):
    decays = torch.rand(64, 8, dtype=torch.float32, device=device, requires_grad=True)
    impulses = torch.randn(64, 8, dtype=torch.float32, device=device, requires_grad=True)

    def layer(a, x):
        return torch.tanh(cuscan.linear_recurrence(torch.sigmoid(a), x)).sum()

    compiled = torch.compile(layer, fullgraph=True, backend=compiler)
    loss = compiled(decays, impulses)
    loss.backward()
    expected_grads = torch.autograd.grad(layer(decays, impulses), (decays, impulses))
    torch.testing.assert_close(loss, layer(decays, impulses))
    torch.testing.assert_close(decays.grad, expected_grads[0])
    torch.testing.assert_close(impulses.grad, expected_grads[1])


def test_exported_programs_load_after_importing_cuscan_nn(tmp_path):
    """A program saved by torch.export, with a dynamic batch and time, runs in a new process
    that imports cuscan.nn (which registers torch.ops.cuscan), with the values of the program
    it was exported from at shapes other than those it was exported at."""
    class Model(torch.nn.Module):
        def forward(self, a, x, s):
            return cuscan.linear_recurrence(torch.sigmoid(a), x, s, axis=1, reverse=True)

    generator = torch.Generator().manual_seed(8)

    def inputs(batch, steps):
        return (torch.randn(batch, steps, 3, generator=generator),
                torch.randn(batch, steps, 3, generator=generator),
                torch.randn(batch, 3, generator=generator))

    batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps")
    program = torch.export.export(Model(), inputs(2, 9), dynamic_shapes=(
        {0: batch, 1: steps}, {0: batch, 1: steps}, {0: batch}))
    # the front door leaves nothing in the graph but the operator
    called = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert called == [torch.ops.aten.sigmoid.default, torch.ops.cuscan.linear_recurrence.default]
    torch.export.save(program, tmp_path / "model.pt2")
    cases = [inputs(2, 9), inputs(5, 1), inputs(3, 40)]
    torch.save({"cases": cases, "expected": [Model()(*case) for case in cases]},
               tmp_path / "data.pt")
    run_in_fresh_process(f"""
        import torch
        import cuscan.nn
        program = torch.export.load({str(tmp_path / "model.pt2")!r})
        data = torch.load({str(tmp_path / "data.pt")!r})
        for case, expected in zip(data["cases"], data["expected"], strict=True):
            torch.testing.assert_close(program.module()(*case), expected)
    """)


@pytest.mark.filterwarnings("ignore:`torch.jit.* is deprecated")
def test_traced_modules_save_and_load(tmp_path):
    """torch.jit.trace over parameters that require grad passes its own check (the graph is
    the same with and without grad), records the operator, and the saved trace runs in a
    new process that imports cuscan.nn with the module's values and gradients."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))

        def forward(self, x, s):
            return cuscan.linear_recurrence(torch.sigmoid(self.gate), x, s, axis=1,
                                            reverse=True)

    generator = torch.Generator().manual_seed(9)
    model = Model()

    def inputs(batch, steps):
        return (torch.randn(batch, steps, 3, dtype=torch.float64, generator=generator),
                torch.randn(batch, 3, dtype=torch.float64, generator=generator))

    traced = torch.jit.trace(model, inputs(2, 9))
    assert "cuscan::linear_recurrence" in str(traced.graph)
    traced.save(str(tmp_path / "model.pt"))
    cases = [inputs(2, 9), inputs(4, 17)]
    expected = []
    for case in cases:
        model.zero_grad()
        output = model(*case)
        output.square().sum().backward()
        expected.append((output.detach(), model.gate.grad.clone()))
    torch.save({"cases": cases, "expected": expected}, tmp_path / "data.pt")
    run_in_fresh_process(f"""
        import torch
        import cuscan.nn
        traced = torch.jit.load({str(tmp_path / "model.pt")!r})
        data = torch.load({str(tmp_path / "data.pt")!r})
        for case, (output, grad) in zip(data["cases"], data["expected"], strict=True):
            traced.zero_grad()
            mine = traced(*case)
            mine.square().sum().backward()
            torch.testing.assert_close(mine, output)
            torch.testing.assert_close(traced.gate.grad, grad)
    """)


DTENSOR_SCRIPT = """
import os
import sys
import torch
import torch.distributed as dist
import cuscan
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (2,))
generator = torch.Generator().manual_seed(0)
T, B, D = 9, 4, 6
# operand shapes (decays, impulses, state), axis, placements, and those of the output and
# of the gradients (an operand broadcast along the split axis gets a partial sum)
CASES = [
    ((T, B, D), (T, B, D), (B, D), 0, (Shard(2), Shard(2), Shard(1)), Shard(2),
     (Shard(2), Shard(2), Shard(1))),
    ((D,), (T, B, D), (D,), 0, (Replicate(), Shard(1), Replicate()), Shard(1),
     (Partial(), Shard(1), Partial())),
    ((T, 1, D), (T, B, D), (1, D), 0, (Replicate(), Shard(1), Replicate()), Shard(1),
     (Partial(), Shard(1), Partial())),  # broadcast along the split axis by a length of 1
    ((B, D, T), (B, D, T), (B, D), -1, (Shard(0), Shard(0), Shard(0)), Shard(0),
     (Shard(0), Shard(0), Shard(0))),
    (None, (B, D, T), None, -1, (None, Shard(2), None), None, None),  # split along time
]
for decays_shape, impulses_shape, state_shape, axis, placements, output, grads in CASES:
    operands = [0.5 if shape is None else
                torch.randn(shape, generator=generator, dtype=torch.float64)
                for shape in (decays_shape, impulses_shape, state_shape)]
    weights = torch.randn(impulses_shape, generator=generator, dtype=torch.float64)
    leaves = [v.clone().requires_grad_() if isinstance(v, torch.Tensor) else v
              for v in operands]
    expected = cuscan.linear_recurrence(*leaves, axis=axis, reverse=True)
    (expected * weights).sum().backward()
    split = [distribute_tensor(v, mesh, [p]).requires_grad_() if p is not None else v
             for v, p in zip(operands, placements)]
    h = cuscan.linear_recurrence(*split, axis=axis, reverse=True)
    assert isinstance(h, DTensor)
    if output is not None:
        assert h.placements == (output,), h.placements
    torch.testing.assert_close(h.full_tensor(), expected)
    (h * distribute_tensor(weights, mesh, h.placements)).sum().backward()
    for mine, theirs in zip(split, leaves):
        if isinstance(mine, DTensor):
            torch.testing.assert_close(mine.grad.full_tensor(), theirs.grad)
    if grads is not None:
        vjp = cuscan.linear_recurrence_vjp(distribute_tensor(weights, mesh, h.placements),
                                           split[0], h.detach(), split[2], axis=axis,
                                           reverse=True)
        assert tuple(g.placements[0] for g in vjp) == grads, [g.placements for g in vjp]
        for mine, theirs in zip(vjp, leaves):
            torch.testing.assert_close(mine.full_tensor(), theirs.grad)

# wrong shapes are told in the whole tensors' shapes, as without a mesh
for operands, message in (
        ((torch.ones(T, B, D - 2), torch.ones(T, B, D)),
         "do not broadcast: (9, 4, 4) and (9, 4, 6)"),  # `impulses`, or `output` in the VJP
        ((torch.ones(T, B, D), torch.ones(T, B, D), torch.ones(B, D + 2)),
         "state shape (4, 6) (the result's shape (9, 4, 6) without axis 0); got shape (4, 8)")):
    split = [distribute_tensor(v, mesh, [Shard(v.ndim - 1)]) for v in operands]
    for function in (cuscan.linear_recurrence,
                     lambda *split: cuscan.linear_recurrence_vjp(split[1], *split)):
        try:
            function(*split)
        except ValueError as error:
            assert message in str(error), error
        else:
            raise AssertionError(f"shapes {[v.shape for v in operands]} went unnoticed")

# cuscan.signal, the signal split along channels or along time
import cuscan.signal
sos = [[1, 0.5, 0.2, 1, -0.5, 0.1], [1, -1, 0, 1, 0.3, 0]]
FILTERS = [lambda x: cuscan.signal.sosfilt(sos, x), lambda x: cuscan.signal.sosfiltfilt(sos, x),
           lambda x: cuscan.signal.lfilter([1, 2, 1], [1, -0.3], x),
           lambda x: cuscan.signal.ema(x, 0.3, adjust=True)]
x = torch.randn(5, 50, generator=generator, dtype=torch.float64)  # 3 and 2 channels
for placement in (Shard(0), Shard(1)):
    for f in FILTERS:
        split = distribute_tensor(x, mesh, [placement]).requires_grad_()
        y = f(split)
        leaf = x.clone().requires_grad_()
        expected = f(leaf)
        torch.testing.assert_close(y.full_tensor(), expected)
        y.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(split.grad.full_tensor(), leaf.grad)
# the coefficients DTensors too (constants: gathered whole)
whole = lambda v: distribute_tensor(torch.tensor(v, dtype=torch.float64), mesh, [Replicate()])
for split_by, plain in ((lambda x: cuscan.signal.sosfilt(whole(sos), x), FILTERS[0]),
                        (lambda x: cuscan.signal.sosfiltfilt(whole(sos), x), FILTERS[1]),
                        (lambda x: cuscan.signal.lfilter(whole([1, 2, 1]), whole([1, -0.3]), x),
                         FILTERS[2])):
    for placement in (Shard(0), Shard(1)):
        y = split_by(distribute_tensor(x, mesh, [placement]))
        torch.testing.assert_close(y.full_tensor(), plain(x))
for helper, arguments in ((cuscan.signal.lfilter_zi, ([1, 2, 1], [1, -0.3])),
                          (cuscan.signal.sosfilt_zi, (sos,)),
                          (cuscan.signal.lfiltic, ([1, 2, 1], [1, -0.3], [0.5, -1.0]))):
    mine = helper(*map(whole, arguments))
    mine = mine.full_tensor() if isinstance(mine, DTensor) else torch.as_tensor(mine)
    torch.testing.assert_close(mine, torch.as_tensor(helper(*arguments)))
# ema's alpha a DTensor too, one per sample or per channel, split as the signal or not (its
# values checked on every device alike)
for alpha in (torch.rand(5, 50, generator=generator, dtype=torch.float64) * 0.9 + 0.05,
              torch.tensor([0.1, 0.3, 0.5, 0.7, 1.0], dtype=torch.float64)):
    for x_placement, alpha_placement in ((Shard(0), Shard(0)), (Shard(1), Shard(alpha.ndim - 1)),
                                         (Shard(1), Replicate())):
        for options in ({}, {"adjust": True}, {"nan_policy": "omit"}):
            split = [distribute_tensor(v, mesh, [p]).requires_grad_()
                     for v, p in ((x, x_placement), (alpha, alpha_placement))]
            leaves = [v.clone().requires_grad_() for v in (x, alpha)]
            y = cuscan.signal.ema(*split, **options)
            expected = cuscan.signal.ema(*leaves, **options)
            torch.testing.assert_close(y.full_tensor(), expected)
            y.sum().backward()
            expected.sum().backward()
            for mine, theirs in zip(split, leaves):
                torch.testing.assert_close(mine.grad.full_tensor(), theirs.grad)
    bad = alpha.clone()
    bad[3:] = 2.0  # on the second device only
    bad = distribute_tensor(bad, mesh, [Shard(0)])
    try:
        cuscan.signal.ema(distribute_tensor(x, mesh, [Shard(0)]), bad)
    except ValueError as error:
        assert "every `alpha` must lie in (0, 1]" in str(error), error
    else:
        raise AssertionError("alpha = 2 on one device went unnoticed")

# cuscan.nn under FSDP (fully_shard each layer), made on the meta device: the same training
# from the same parameters as without FSDP (both processes see the same batches, so the
# averaged gradients are the gradients)
from torch.distributed.fsdp import fully_shard
from cuscan.nn import QRNN, GILRLSTM
for make in (lambda: GILRLSTM(3, 4, num_layers=2), lambda: QRNN(3, 4, num_layers=2, window=3)):
    torch.manual_seed(0)
    expected = make().double()
    with torch.device("meta"):
        model = make().double()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    model.reset_parameters()  # draws each shard as DTensor draws, not as torch draws the whole
    with torch.no_grad():
        for mine, theirs in zip(model.parameters(), expected.parameters(), strict=True):
            mine.copy_(distribute_tensor(theirs, mesh, mine.placements))
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, expected)]
    for step in range(2):
        x = torch.randn(7, 2, 3, generator=generator, dtype=torch.float64)
        for m, optimizer in zip((model, expected), optimizers):
            m(x)[0].square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    for mine, theirs in zip(model.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(mine.full_tensor(), theirs)
dist.barrier()  # neither process leaves while the other still talks to it
dist.destroy_process_group()
# Leave without finalising the interpreter: gloo's threads sometimes abort torch's teardown
# ("terminate called without an active exception") after all the work is done and checked.
sys.stdout.flush()
os._exit(0)
"""


def test_dtensor(tmp_path):
    """DTensors split over two processes: along channels each runs its own part, with the
    placements and gradients of the whole; split along time, the result is still right; and
    so for cuscan.signal's filters. cuscan.nn models train under FSDP as without it."""
    if not torch.distributed.is_available():
        pytest.skip("needs torch.distributed")
    script = tmp_path / "dtensor.py"
    script.write_text(DTENSOR_SCRIPT)
    root = Path(__file__).resolve().parents[1]
    processes = [subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path / "store")],
                                  cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=dict(os.environ, PYTHONPATH=str(root)))
                 for rank in range(2)]
    outputs = [process.communicate(timeout=300)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]


MIXED = [(torch.int64, torch.float32), (torch.int16, torch.float16), (torch.bool, torch.bfloat16),
         (torch.float16, torch.bfloat16), (torch.complex64, torch.float64),
         (torch.int32, torch.int64)]


@pytest.mark.parametrize(("first", "second"), MIXED)
def test_mixed_dtypes_follow_torch_promotion(device, first, second):
    """Eagerly, compiled and in the VJP: torch's promotion (where NumPy's can differ), and
    float64 for integers alone."""
    expected_dtype = torch.promote_types(first, second)
    if not (expected_dtype.is_floating_point or expected_dtype.is_complex):
        expected_dtype = torch.float64
    decays = (torch.arange(12, device=device).reshape(6, 2) % 2).to(first)  # 0 and 1
    impulses = torch.arange(12, device=device).reshape(6, 2).to(second)
    h = cuscan.linear_recurrence(decays, impulses)
    assert h.dtype == expected_dtype
    wide = torch.complex128 if expected_dtype.is_complex else torch.float64
    expected = reference.linear_recurrence(decays.cpu().to(wide).numpy(),
                                           impulses.cpu().to(wide).numpy())
    np.testing.assert_array_equal(h.cpu().to(wide).numpy(), expected)  # small integers
    compiled = torch.compile(cuscan.linear_recurrence, fullgraph=True, backend="aot_eager")
    assert compiled(decays, impulses).dtype == expected_dtype
    grads = cuscan.linear_recurrence_vjp(impulses, decays, h)
    assert [g.dtype for g in grads[:2]] == [expected_dtype] * 2
    torch.library.opcheck(_torch._forward, (decays, impulses, None, 0, False, "auto"))


@pytest.mark.parametrize(("decays", "impulses", "expected"), [
    (torch.float64, torch.float16, torch.float16), (torch.float32, torch.bfloat16, torch.bfloat16),
    (torch.float64, torch.int32, torch.float64), (torch.complex128, torch.float32, torch.complex64),
    (torch.int64, torch.float16, torch.float16), (torch.complex64, torch.float64, torch.complex128),
    (torch.float32, torch.int32, torch.float32), (torch.bfloat16, torch.bool, torch.bfloat16),
])
def test_zero_dim_tensors_promote_as_in_torch(device, decays, impulses, expected):
    """A 0-d tensor (a decay made with torch.tensor(0.9), say) changes the dtype of tensors
    with dimensions only from a lower category, as in torch's operators: the result is what
    ``decays * h + impulses`` gives, and each gradient has its input's dtype."""
    decay = torch.tensor(1, dtype=decays, device=device)
    if decays.is_floating_point or decays.is_complex:
        decay = (decay * 0.5).requires_grad_()
    x = torch.arange(6, device=device).reshape(3, 2).to(impulses)
    assert torch.result_type(decay, x) == expected
    h = cuscan.linear_recurrence(decay, x, decay.detach().abs().to(decays))
    assert h.dtype == expected
    assert cuscan.linear_recurrence(decay, x, x[0].to(decays)).dtype == torch.promote_types(
        expected, decays)  # an initial state with dimensions promotes as usual
    if decay.requires_grad:
        h.real.sum().backward()
        assert decay.grad.dtype == decays


@pytest.mark.parametrize(("scalar", "tensor", "expected"), [
    (0.5, torch.float16, torch.float16), (0.5j, torch.float32, torch.complex64),
    (0.5, torch.int32, torch.float64), (2, torch.bool, torch.float64),
    (0.5j, torch.int64, torch.complex128),
])
def test_python_scalars_take_the_tensors_dtype(scalar, tensor, expected):
    """A Python scalar is weak: the tensors' dtype, made complex by a complex scalar, and
    float64 beside integers or bools (torch's operators would give a Python float
    float32 there)."""
    x = torch.ones(4, 2, dtype=tensor)
    h = cuscan.linear_recurrence(scalar, x)
    assert h.dtype == expected
    assert cuscan.linear_recurrence(x.to(expected), scalar).dtype == expected
    decay = np.asarray(scalar, np.complex128)
    np.testing.assert_allclose(h.numpy(), reference.linear_recurrence(
        np.broadcast_to(decay, (4, 2)), x.to(torch.float64).numpy()), rtol=1e-3)


def test_mixing_torch_and_numpy_is_rejected():
    with pytest.raises(TypeError, match="one library"):
        cuscan.linear_recurrence(torch.ones(3), np.ones(3))


def test_devices_as_torch_chooses_them():
    """0-d CPU tensors go to the other tensors' device, as in torch's operators (the meta
    device stands in for a GPU); tensors on two devices are refused."""
    decays = torch.tensor(0.5, requires_grad=True)
    h = cuscan.linear_recurrence(decays, torch.ones(3, device="meta"), torch.tensor(1.0))
    assert h.device.type == "meta"
    assert h.shape == (3,)
    h = cuscan.linear_recurrence(decays, torch.ones(3), torch.tensor(1.0))
    h.sum().backward()
    torch.testing.assert_close(decays.grad, torch.tensor(1 + 2 + 2.75))
    with pytest.raises(TypeError, match=r"one device .*`decays` is on cpu, `impulses` is on meta"):
        cuscan.linear_recurrence(torch.ones(3), torch.ones(3, device="meta"))
    with pytest.raises(TypeError, match="`grad_output` is on meta, `decays` is on cpu"):
        cuscan.linear_recurrence_vjp(torch.ones(3, device="meta"), torch.ones(3),
                                     torch.ones(3, device="meta"))


def test_filters_refuse_mixed_libraries_and_devices():
    """The filters take their arrays (signal, state, past values, alphas) from one library
    and, in torch, one device (0-d CPU tensors aside), as `linear_recurrence` does: an
    alpha of another library was converted, a NumPy signal losing a tensor alpha's
    gradient, and tensors on two devices reached torch's own errors."""
    from cuscan import signal

    meta, cpu = torch.ones(5, 3, device="meta"), torch.ones(5, 3)
    with pytest.raises(TypeError, match="`x` is a numpy array, `alpha` is a torch array"):
        signal.ema(np.ones((5, 3)), torch.full((3,), 0.5, requires_grad=True), axis=0)
    with pytest.raises(TypeError, match="`x` is a torch array, `alpha` is a numpy array"):
        signal.ema(cpu, np.full(3, 0.5), axis=0)
    for call, names in ((lambda: signal.ema(meta, torch.full((3,), 0.5), axis=0), ("x", "alpha")),
                        (lambda: signal.lfilter([1.0], [1.0, -0.5], meta, axis=0,
                                                zi=torch.zeros(1, 3)), ("x", "zi")),
                        (lambda: signal.sosfilt([[1, 0, 0, 1, -0.5, 0]], meta, axis=0,
                                                zi=torch.zeros(1, 1, 3)), ("x", "zi")),
                        (lambda: signal.lfiltic([1.0, 0.5], [1.0, -0.5], meta, cpu, axis=0),
                         ("y", "x"))):
        first, second = names
        with pytest.raises(TypeError, match=f"one device .*`{first}` is on meta, `{second}` is "
                                            "on cpu"):
            call()
    y = signal.ema(meta, torch.tensor(0.5), axis=0)  # a 0-d CPU alpha is a scalar
    assert y.device.type == "meta"
    assert y.shape == (5, 3)
    assert type(signal.ema(cpu, [0.5, 0.2, 0.1], axis=0)) is torch.Tensor  # a list is data


def test_meta_tensors_give_shapes_and_errors():
    """Meta tensors (shapes without data, as in deferred model initialisation) give the
    result's shape and dtype, with or without autograd, in layers and filters too, and
    wrong shapes give the errors of real tensors."""
    import cuscan.nn
    import cuscan.signal

    meta = {"device": "meta", "dtype": torch.float32}
    decays, impulses = torch.rand(20, 3, **meta), torch.randn(20, 3, **meta)
    state = torch.ones(3, **meta)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            h = cuscan.linear_recurrence(decays.requires_grad_(grad), impulses.int(), state,
                                         axis=0, reverse=True)
            assert (h.device.type, h.shape, h.dtype) == ("meta", (20, 3), torch.float32)
            grads = cuscan.linear_recurrence_vjp(h, decays[0], h, state)
            assert [g.shape for g in grads] == [(3,), (20, 3), (3,)]
            assert all(g.device.type == "meta" for g in grads)
    decays.requires_grad_(False)
    with pytest.raises(ValueError, match=r"do not broadcast: \(5, 3\) and \(20, 3\)"):
        cuscan.linear_recurrence(decays[:5], impulses)
    with pytest.raises(np.exceptions.AxisError):
        cuscan.linear_recurrence(decays, impulses, axis=2)
    with pytest.raises(ValueError, match=r"`initial_state` must broadcast .* got shape \(4,\)"):
        cuscan.linear_recurrence(decays, impulses, torch.ones(4, **meta))
    with pytest.raises(ValueError, match="`grad_output` must have the shape of `output`"):
        cuscan.linear_recurrence_vjp(impulses[1:], decays, impulses)
    layer = cuscan.nn.SRU(8, 16, bidirectional=True, device="meta")
    with torch.no_grad():
        output, _ = layer(torch.randn(30, 4, 8, device="meta"))
    assert (output.device.type, output.shape) == ("meta", (30, 4, 32))
    signal = torch.randn(2, 100, device="meta")
    for filtered in (cuscan.signal.lfilter([1.0, 2.0], [1.0, -0.5], signal),
                     cuscan.signal.sosfilt([[1.0, 0.0, 0.0, 1.0, -0.5, 0.0]], signal),
                     cuscan.signal.ema(signal, 0.3)):
        assert (filtered.device.type, filtered.shape) == ("meta", (2, 100))


@pytest.mark.parametrize("dtype", [torch.complex32, torch.float8_e4m3fn])
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_unsupported_dtypes_are_rejected(dtype):
    with pytest.raises(TypeError, match=f"`impulses` has dtype {dtype}, which cuscan does not"):
        cuscan.linear_recurrence(0.5, torch.ones(3).to(dtype))
    with pytest.raises(TypeError, match=f"`grad_output` has dtype {dtype}"):
        cuscan.linear_recurrence_vjp(torch.ones(3).to(dtype), 0.5, torch.ones(3))


def test_sparse_tensors_are_rejected():
    with pytest.raises(TypeError, match=r"`impulses` is a torch\.sparse_coo tensor"):
        cuscan.linear_recurrence(0.5, torch.eye(3).to_sparse())
    nested = torch.nested.nested_tensor([torch.ones(3), torch.ones(4)], layout=torch.jagged)
    with pytest.raises(TypeError, match="`decays` is a nested tensor"):
        cuscan.linear_recurrence(nested, 1.0)
