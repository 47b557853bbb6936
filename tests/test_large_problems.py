"""Random problems of thousands to about a million elements against the reference, values
and gradients: the sizes at which the backends take their chunked, multi-level, staged and
blocked paths, which the small problems of test_properties.py do not reach. Every dtype,
broadcast decays, strided, transposed and reversed views, both directions and every method;
on every backend, and through the PyTorch adapter and autograd."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

import cuscan
from cuscan import _dtypes
from tests import reference
from tests.conftest import DTYPES, IN_CI, Backend, _gpu_available, dtype_of, require, tolerance
from tests.test_properties import in_memory, laid_out

PROBLEMS = 24
DECAYS = ["full", "per channel", "per step", "scalar"]
OPERANDS = ("decays", "impulses", "initial_state")  # the order of the gradients


def problem(seed: int) -> dict:
    """A random problem: its operands' values (NumPy), their layouts, the keyword arguments,
    and the reference's results and error scales."""
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    total = 2 ** rng.uniform(16, 20)
    length = total if ndim == 1 else total ** rng.uniform(0.2, 1)
    length = min(int(length), 2**17)
    if rng.random() < 0.3:  # a power of two or a neighbour of one
        length = 2 ** round(math.log2(length)) + int(rng.integers(-1, 2))
    side = (total / length) ** (1 / max(ndim - 1, 1))
    shape = [int(rng.integers(1, max(2 * side, 2))) for _ in range(ndim - 1)]
    axis = int(rng.integers(0, ndim))
    shape.insert(axis, length)
    dtype = dtype_of(DTYPES[seed % len(DTYPES)])
    decays_kind = DECAYS[int(rng.integers(0, len(DECAYS)))]
    decays_shape = {"full": shape, "scalar": [],
                    "per channel": [1 if d == axis else n for d, n in enumerate(shape)],
                    "per step": [n if d == axis else 1 for d, n in enumerate(shape)]}[decays_kind]

    def values(shape, low=-1.0):
        v = rng.uniform(low, 1, shape)
        if dtype.kind == "c":
            v = v * np.exp(1j * rng.uniform(0, 2 * np.pi, shape))
        return v.astype(dtype)

    state_shape = shape[:axis] + shape[axis + 1:]
    operands = {
        # decays near one keep a long memory, which the chunks' carries must pass on
        "decays": values(decays_shape, float(rng.choice([-1.0, 0.5, 0.99]))),
        "impulses": values(shape),
        "initial_state": values(state_shape) if rng.random() < 0.5 else None,
        "grad_output": values(shape),
    }
    layouts = {name: None if v is None or v.ndim == 0 else
               (list(rng.permutation(v.ndim)), [int(rng.choice([1, 1, 2, -1, -3]))
                                                for _ in range(v.ndim)], None)
               for name, v in operands.items()}
    kwargs = {"axis": axis if rng.random() < 0.5 else axis - ndim,
              "reverse": bool(rng.random() < 0.5)}
    method = str(rng.choice(["auto", "parallel", "serial"]))
    decays, impulses, state = (operands[k] for k in ("decays", "impulses", "initial_state"))
    output = reference.linear_recurrence(decays, impulses, state, **kwargs)
    rounded = output.astype(dtype)
    return {
        "operands": operands, "layouts": layouts, "kwargs": kwargs, "method": method,
        "dtype": dtype, "length": length, "output": output,
        "output_scale": reference.error_scale(decays, impulses, state, **kwargs),
        "grads": reference.linear_recurrence_vjp(operands["grad_output"], decays, rounded,
                                                 state, **kwargs),
        "grad_scales": gradient_scales(operands, np.abs(rounded.astype(output.dtype)), kwargs),
    }


def gradient_scales(operands: dict, output_scale, kwargs: dict) -> tuple:
    """The scales of the gradients' rounding errors: the gradient over the operands'
    magnitudes, with ``output_scale`` for the output's."""
    def magnitude(v):
        return None if v is None else np.abs(reference._wide(v))

    return reference.linear_recurrence_vjp(
        magnitude(operands["grad_output"]), magnitude(operands["decays"]), output_scale,
        magnitude(operands["initial_state"]), **kwargs)


def summed_to(terms: np.ndarray, shape) -> np.ndarray:
    """``terms`` summed over the axes broadcasting added to ``shape`` (or stretched in it)."""
    terms = terms.sum(axis=tuple(range(terms.ndim - len(shape))))
    stretched = tuple(d for d, n in enumerate(shape) if n == 1 and terms.shape[d] != 1)
    return terms.sum(axis=stretched, keepdims=True)


def assert_within(actual, expected, scale, dtype, length: int, name: str) -> None:
    """``|actual - expected| <= tolerance * scale``, in which a half type's result may also
    be off by its smallest subnormal (a value that underflowed when rounded to it), and may
    be infinite where the exact value lies beyond its range (summed gradients overflow as
    the documented arithmetic says)."""
    actual = np.asarray(actual).astype(expected.dtype)
    limit = tolerance(dtype, length) * scale + np.finfo(np.float64).tiny
    with np.errstate(invalid="ignore"):
        error = np.abs(actual - expected)
    if dtype.itemsize == 2:
        info = require("ml_dtypes").finfo(dtype)
        limit = limit + float(info.smallest_subnormal)
        edge = float(info.max) * (1 - _dtypes.epsilon(dtype))
        # beyond the range: infinite (or NaN, where such terms have both signs), or the
        # largest value, where rounding brings it back
        beyond = (np.abs(expected) > edge) & ~(np.abs(actual) < edge)
        error = np.where(beyond, 0.0, error)
    bad = ~(error <= limit)
    assert not bad.any(), (
        f"{name}: {bad.sum()} of {bad.size} elements off; worst {(error / limit).max():.3g} "
        f"times the limit")


def check(backend: Backend, p: dict) -> None:
    dtype, kwargs, length = p["dtype"], p["kwargs"], p["length"]
    views = {name: None if v is None else
             backend.asarray(v) if p["layouts"][name] is None else
             laid_out(backend, v, p["layouts"][name])
             for name, v in p["operands"].items()}
    h = cuscan.linear_recurrence(views["decays"], views["impulses"], views["initial_state"],
                                 method=p["method"], **kwargs)
    assert h.dtype == dtype
    assert h.shape == p["output"].shape
    assert_within(backend.to_numpy(h), p["output"], p["output_scale"], dtype, length, "output")

    output = laid_out(backend, p["output"].astype(dtype), p["layouts"]["impulses"])
    grads = cuscan.linear_recurrence_vjp(views["grad_output"], views["decays"], output,
                                         views["initial_state"], **kwargs)
    for name, grad, scale in zip(OPERANDS, grads, p["grad_scales"], strict=True):
        if p["operands"][name] is None:
            assert grad is None
        else:
            assert_gradient(p, name, backend.to_numpy(grad), scale)


def assert_gradient(p: dict, name: str, grad: np.ndarray, scale: np.ndarray) -> None:
    """The gradient of the operand ``name`` against the reference's, within its error
    ``scale`` (unsummed, as `gradient_scales` gives it)."""
    operand = p["operands"][name]
    expected = p["grads"][OPERANDS.index(name)]
    assert grad.shape == operand.shape
    summed = expected.shape != operand.shape
    # a sum's terms' errors add up, and its own rounding grows with the number of terms
    assert_within(grad, summed_to(expected, operand.shape), 2 * summed_to(scale, operand.shape),
                  p["dtype"], p["output"].size if summed else p["length"],
                  f"the gradient of the {name}")


@pytest.fixture(scope="module", params=range(PROBLEMS), ids=lambda seed: f"seed{seed}")
def large(request) -> dict:
    """One problem and its reference results, for every backend in turn: a parameter of
    the module's scope groups the tests by problem, so one is held at a time."""
    return problem(request.param)


def test_large_problems(backend, large):
    check(backend, large)


def test_large_problems_gpu_plan(monkeypatch, large):
    """The CUDA kernels compiled for the CPU under the GPU backend's own launch plan (the
    suite's host-kernels backend chunks at test sizes instead)."""
    if not (IN_CI or shutil.which("g++")):
        pytest.skip("needs g++ to compile the kernels for the host")
    from tests import kernel_host

    kernel_host.installed(monkeypatch)
    check(Backend("numpy"), large)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_large_problems_torch(large, device):
    """The PyTorch adapter on the same problems, its operands strided and permuted views
    of tensors (torch has no negative strides, so the steps' signs are dropped): values,
    and the gradients autograd takes through the views."""
    torch = require("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    p = large
    dtype = getattr(torch, p["dtype"].name)
    wide = np.complex128 if p["dtype"].kind == "c" else np.float64

    def view(values, layout):
        if layout is None:  # a scalar
            memory, axes, pick = np.asarray(values), (), ()
        else:
            order, steps, broadcast = layout
            memory, axes, pick = in_memory(values, (order, [abs(s) for s in steps], broadcast))
        leaf = torch.from_numpy(memory.astype(wide)).to(device, dtype).requires_grad_()
        return leaf.permute(axes)[pick]

    names = [k for k in OPERANDS if p["operands"][k] is not None]
    views = {k: view(p["operands"][k], p["layouts"][k]) for k in names}
    h = cuscan.linear_recurrence(views["decays"], views["impulses"], views.get("initial_state"),
                                 method=p["method"], **p["kwargs"])
    assert h.dtype == dtype
    assert h.device.type == device

    def to_numpy(tensor):
        return tensor.detach().cpu().to(torch.promote_types(tensor.dtype, torch.float64)).numpy()

    assert_within(to_numpy(h), p["output"], p["output_scale"], p["dtype"], p["length"], "output")
    grad_output = view(p["operands"]["grad_output"], p["layouts"]["grad_output"]).detach()
    loss = (h * grad_output.conj()).real.sum() if h.is_complex() else (h * grad_output).sum()
    grads = torch.autograd.grad(loss, [views[k] for k in names])
    # autograd's backward reads the computed output, whose error is relative to the forward
    # pass's error scale rather than to the output itself
    scales = gradient_scales(p["operands"], p["output_scale"], p["kwargs"])
    for name, grad in zip(names, grads, strict=True):
        assert_gradient(p, name, to_numpy(grad), scales[OPERANDS.index(name)])


BEYOND_INT32 = 2**31 + 7  # elements, past the largest 32-bit index


def check_beyond_int32(backend: Backend) -> None:
    """Float16 operands of more than 2^31 elements (one channel, two time-contiguous ones,
    four time-major ones), both directions: one impulse nine steps before the run's end,
    halved at every step, and the gradient of the step three further on, halved at every step
    back. Every value is exact (powers of two down to float16's smallest, 2^-24), and the
    count of nonzeros says that all the others are zero."""
    xp = backend.xp
    halved = 0.5 ** np.arange(25)
    for shape, axis in [((BEYOND_INT32,), 0), ((2, BEYOND_INT32 // 2), 1),
                        ((BEYOND_INT32 // 4, 4), 0)]:
        length, channels = shape[axis], math.prod(shape) // shape[axis]
        for reverse in (False, True):
            step = -1 if reverse else 1
            at = 8 if reverse else length - 9  # the impulse
            seen = at + 3 * step  # the step whose gradient is taken

            def values(start, count, step=step, shape=shape, axis=axis, array=None):
                """``count`` steps from ``start`` on in time's direction (as run), each
                channel's along the last axis."""
                picked = start + step * np.arange(count)
                taken = array[(slice(None),) * axis + (slice(picked.min(), picked.max() + 1),)]
                got = np.moveaxis(backend.to_numpy(taken), axis, -1).astype(np.float64)
                return got[..., ::step]

            def one_hot(index, shape=shape, axis=axis):
                array = xp.zeros(shape, np.float16)
                array[(slice(None),) * axis + (index,)] = 1
                return array

            h = cuscan.linear_recurrence(np.float16(0.5), one_hot(at), axis=axis,
                                         reverse=reverse)
            np.testing.assert_array_equal(values(at, 9, array=h), np.broadcast_to(
                halved[:9], (*shape[:axis], *shape[axis + 1:], 9)))
            assert int(xp.count_nonzero(h)) == 9 * channels

            grad_decays, grad_impulses, _ = cuscan.linear_recurrence_vjp(
                one_hot(seen), np.float16(0.5), h, axis=axis, reverse=reverse)
            del h
            # back from the step seen: 2^-k at k steps before it, to 2^-24
            np.testing.assert_array_equal(values(seen - 24 * step, 25, array=grad_impulses),
                                          np.broadcast_to(halved[::-1], (
                                              *shape[:axis], *shape[axis + 1:], 25)))
            assert int(xp.count_nonzero(grad_impulses)) == 25 * channels
            del grad_impulses
            # the three steps after the impulse up to the one seen: 1/4 each, in every channel
            assert float(grad_decays) == 0.75 * channels


@pytest.mark.gpu
def test_beyond_int32_indices():
    """Operands of more than 2^31 elements on the GPU (8 GiB of float16 at a time)."""
    if not _gpu_available():
        pytest.skip("needs CuPy and a CUDA GPU")
    check_beyond_int32(Backend("cupy"))
