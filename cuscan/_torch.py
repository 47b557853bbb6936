"""PyTorch adapter: torch tensors in and out, through DLPack, with autograd.

Two custom operators, ``cuscan::linear_recurrence`` and
``cuscan::linear_recurrence_vjp``, wrap the core functions, with fake
implementations (so ``torch.compile(fullgraph=True)`` traces through them) and
batching rules (so ``torch.func.vmap`` runs one call, not one per example).
The forward is made differentiable by ``_Recurrence``, an autograd function
whose backward is the second operator, or, when a graph of the backward is
being built (double backward), the same VJP written with differentiable
operations. Under forward-mode AD (``torch.func.jvp``, dual tensors) a subclass
with the tangent recurrence takes its place. Imported only when a tensor is
passed.
"""

from __future__ import annotations

import contextlib
import functools
import sys

import numpy as np
import torch
import torch.autograd.forward_ad
from torch.utils import _python_dispatch

from cuscan import _api, _backend, _dtypes

_BACKWARD_STATE_ABSENT = (0,)  # shape of the stand-in when there is no initial state


def to_array(tensor: torch.Tensor):
    """The NumPy (CPU) or CuPy (CUDA) array viewing ``tensor``'s memory (a conjugate or
    negative view, which neither DLPack nor `Tensor.numpy` carries, resolved first)."""
    tensor = tensor.detach().resolve_conj().resolve_neg()
    bfloat16 = tensor.dtype == torch.bfloat16
    if bfloat16:  # DLPack consumers may lack bfloat16: cross as uint16 and view back
        tensor = tensor.view(torch.uint16)
    if tensor.device.type == "cuda":
        array = _backend.cupy_for("a torch tensor").from_dlpack(tensor)
    elif tensor.device.type == "cpu":
        array = tensor.numpy()  # a view, as through DLPack, for a third of its cost
    else:
        raise TypeError(f"cuscan runs on CPU and CUDA tensors; got a tensor on {tensor.device}")
    if bfloat16:
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16)
    return array


def _core(tensor: torch.Tensor):
    """The backend computing on `to_array`'s views of ``tensor``'s memory."""
    return _backend.backend_of("cupy" if tensor.device.type == "cuda" else "numpy")


def from_array(array) -> torch.Tensor:
    """The tensor viewing a NumPy or CuPy array's memory."""
    bfloat16 = _dtypes.is_bfloat16(array.dtype)
    if bfloat16:
        array = array.view(np.uint16)
    if isinstance(array, np.ndarray) and array.flags.writeable:
        tensor = torch.from_numpy(array)  # as through DLPack, for half its cost
    else:
        tensor = torch.from_dlpack(array)
    return tensor.view(torch.bfloat16) if bfloat16 else tensor


def _on_device(tensor: torch.Tensor):
    """A context that makes CuPy run on ``tensor``'s device (as torch's operators do,
    whichever device is current), launch on torch's current stream for it and take its
    memory from torch's caching allocator (`_torch_allocator`). The outputs pass to torch
    (`from_array`) inside it too: with CuPy's current stream other than torch's, CuPy's
    ``__dlpack__`` would record an event on its own (null) stream for torch's to wait on,
    which a CUDA graph capture on torch's stream forbids."""
    if tensor.device.type != "cuda":
        return contextlib.nullcontext()
    device = tensor.device.index
    return _on_stream(device, torch.cuda.current_stream(device).cuda_stream)


@contextlib.contextmanager
def _on_stream(device: int, stream: int):
    cupy = _backend.cupy_for("a torch tensor")
    with (cupy.cuda.Device(device), _backend.external_stream("a torch tensor", stream),
          cupy.cuda.using_allocator(_torch_allocator())):
        yield


def _torch_malloc(size: int, device: int) -> int:
    """``size`` bytes from torch's caching allocator on ``device``, for CuPy's current
    stream (torch's, in `_on_device`)."""
    stream = _backend.cupy_for("a torch tensor").cuda.get_current_stream().ptr
    return torch.cuda.caching_allocator_alloc(size, device, stream)


def _torch_free(pointer: int, device: int) -> None:
    torch.cuda.caching_allocator_delete(pointer)


@functools.cache
def _torch_allocator():
    """A CuPy allocator drawing on torch's caching allocator, so that the outputs and
    workspaces of a call on CUDA tensors are memory torch can reuse once freed, count in
    `torch.cuda.memory_allocated`, and raise `torch.OutOfMemoryError` when short (from
    CuPy's own pool they would stay cached where torch cannot reach them)."""
    cupy = _backend.cupy_for("a torch tensor")
    return cupy.cuda.memory.PythonFunctionAllocator(_torch_malloc, _torch_free).malloc


def _result_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype torch's operators give ``tensors`` (`torch.result_type`'s rule: 0-d tensors
    promote the others only from a higher category of bool, integer, float and complex),
    float64 where that is a bool or integer type."""
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) == 1:  # one dtype: nothing to promote
        (dtype,) = dtypes
        if dtype.is_floating_point or dtype.is_complex:
            return dtype

    def promoted(dtypes):
        dtype = None
        for other in dtypes:
            dtype = other if dtype is None else _promote(dtype, other)
        return dtype

    dimensioned = promoted(t.dtype for t in tensors if t is not None and t.ndim)
    dtype = _combined(dimensioned, promoted(t.dtype for t in tensors if t is not None
                                            and not t.ndim))
    if not (dtype.is_floating_point or dtype.is_complex):
        dtype = torch.float64
    return dtype


def _promote(first: torch.dtype, second: torch.dtype) -> torch.dtype:
    """``torch.promote_types``, called only for two different dtypes (torch.export records each
    call in its graph)."""
    return first if first == second else torch.promote_types(first, second)


def _combined(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype:
    """The dtype of tensors with dimensions promoted to ``higher`` beside 0-d tensors
    promoted to ``lower`` (c10's ``combine_categories``); complex32 becomes complex64."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        if higher.is_floating_point:
            return _promote(higher, torch.complex64)
        return lower
    if higher.is_floating_point:
        return higher
    if higher == torch.bool or lower.is_floating_point:
        return _promote(higher, lower)
    return higher


def _promoted(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The tensors cast to `_result_dtype`, as the fake implementations promise (the core
    would promote as NumPy does, which differs for integers with floats)."""
    dtype = _result_dtype(*tensors)
    return [tensor if tensor is None or tensor.dtype == dtype else tensor.to(dtype)
            for tensor in tensors]


def _differentiated(*tensors) -> bool:
    """Whether autograd may record a call on ``tensors``: inside torch.func's transforms
    always (with grad mode on), since the batched tensors of a ``vmap`` inside ``grad``
    or ``vjp`` do not report that the transform outside tracks them."""
    return torch.is_grad_enabled() and (
        torch._C._functorch.peek_interpreter_stack() is not None
        or any(t is not None and t.requires_grad for t in tensors))


def _forward_mode() -> bool:
    """Whether a forward-mode AD level is open (dual tensors may flow)."""
    return getattr(torch.autograd.forward_ad, "_current_level", 0) >= 0


def _untracked(*tensors) -> bool:
    """Whether nothing records a call on ``tensors``: no autograd in either mode, and
    eagerly (`_eager`), so that it may be computed outside torch altogether."""
    return not _forward_mode() and not _differentiated(*tensors) and _eager(*tensors)


def _plain(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds its data itself: of a type that overrides no operation,
    not a meta tensor, and not wrapped by torch.func's or autograd's batching (as in
    ``torch.autograd.grad(..., is_grads_batched=True)``)."""
    return (type(tensor) in (torch.Tensor, torch.nn.Parameter) and not tensor.is_meta
            and not torch._C._functorch.is_functorch_wrapped_tensor(tensor)
            and not torch._C._functorch.is_legacy_batchedtensor(tensor))


def _eager(*tensors) -> bool:
    """Whether a call on ``tensors`` may run the operators' code without torch's dispatcher
    (which costs as much as a small recurrence): plain tensors with data (meta tensors
    have only shapes, which the operator's fake implementation gives), outside
    torch.compile, tracing, torch.func's transforms, Python modes and the profiler, all of
    which must see the operator."""
    return (not torch.compiler.is_compiling()
            and all(t is None or _plain(t) for t in tensors)
            and not torch._C._is_torch_function_mode_enabled()
            and _python_dispatch._get_current_dispatch_mode() is None
            and torch._C._functorch.peek_interpreter_stack() is None
            and not torch.autograd._profiler_enabled()
            and not torch.jit.is_tracing())


def _forward_impl(decays, impulses, initial_state, axis, reverse, method) -> torch.Tensor:
    """The forward operator's code (`_forward`)."""
    decays, impulses, initial_state = _promoted(decays, impulses, initial_state)
    _api.check_method(method)  # the operator is public too (torch.ops.cuscan)
    with _on_device(impulses):
        out = _api.forward(
            to_array(decays), to_array(impulses),
            None if initial_state is None else to_array(initial_state),
            axis=axis, reverse=reverse, method=method, backend=_core(impulses))
        return from_array(out)


@torch.library.custom_op("cuscan::linear_recurrence", mutates_args=())
def _forward(decays: torch.Tensor, impulses: torch.Tensor, initial_state: torch.Tensor | None,
             axis: int, reverse: bool, method: str) -> torch.Tensor:
    return _forward_impl(decays, impulses, initial_state, axis, reverse, method)


@_forward.register_fake
def _(decays, impulses, initial_state, axis, reverse, method):
    shape = torch.broadcast_shapes(decays.shape, impulses.shape)
    return impulses.new_empty(shape, dtype=_result_dtype(decays, impulses, initial_state))


def _backward_impl(grad_output, decays, output, initial_state, axis, reverse):
    """The VJP operator's code (`_backward`)."""
    grad_output, decays, output, initial_state = _promoted(grad_output, decays, output,
                                                           initial_state)
    with _on_device(output):
        grads = _api.backward(
            to_array(grad_output), to_array(decays), to_array(output),
            None if initial_state is None else to_array(initial_state),
            axis=axis, reverse=reverse, backend=_core(output))
        grad_decays, grad_impulses, grad_state = (None if g is None else from_array(g)
                                                  for g in grads)
    if grad_state is None:
        grad_state = grad_impulses.new_empty(_BACKWARD_STATE_ABSENT)
    return grad_decays, grad_impulses, grad_state


@torch.library.custom_op("cuscan::linear_recurrence_vjp", mutates_args=())
def _backward(grad_output: torch.Tensor, decays: torch.Tensor, output: torch.Tensor,
              initial_state: torch.Tensor | None, axis: int, reverse: bool
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward_impl(grad_output, decays, output, initial_state, axis, reverse)


@_backward.register_fake
def _(grad_output, decays, output, initial_state, axis, reverse):
    dtype = _result_dtype(grad_output, decays, output, initial_state)
    state_shape = _BACKWARD_STATE_ABSENT if initial_state is None else initial_state.shape
    return (output.new_empty(decays.shape, dtype=dtype),
            output.new_empty(output.shape, dtype=dtype),
            output.new_empty(state_shape, dtype=dtype))


# ---- batching rules (torch.func.vmap): one call over the whole batch ----------------------


def _logical_shape(tensor: torch.Tensor | None, batch_dim: int | None):
    if tensor is None:
        return None
    shape = list(tensor.shape)
    if batch_dim is not None:
        del shape[batch_dim]
    return tuple(shape)


def _batch_first(tensor, batch_dim, rank: int, size: int, expand: bool = False):
    """``tensor`` with its batch dimension first and ``rank`` dimensions after it.

    An unbatched tensor is left to broadcast, or, with ``expand``, given a batch
    dimension of stride 0 (so the core sees it, without a copy).
    """
    if tensor is None or (batch_dim is None and not expand):
        return tensor
    tensor = tensor.movedim(batch_dim, 0) if batch_dim is not None else tensor[None]
    tensor = tensor.reshape(tensor.shape[0], *(1,) * (rank + 1 - tensor.ndim), *tensor.shape[1:])
    return tensor.expand(size, *tensor.shape[1:])


@torch.library.register_vmap("cuscan::linear_recurrence")
def _(info, in_dims, decays, impulses, initial_state, axis, reverse, method):
    decays_dim, impulses_dim, state_dim = in_dims[:3]
    shape, axis = _api.forward_shape(
        _logical_shape(decays, decays_dim), _logical_shape(impulses, impulses_dim),
        _logical_shape(initial_state, state_dim), axis)
    rank, size = len(shape), info.batch_size
    out = _forward(_batch_first(decays, decays_dim, rank, size),
                   _batch_first(impulses, impulses_dim, rank, size, expand=True),
                   _batch_first(initial_state, state_dim, rank - 1, size),
                   axis + 1, reverse, method)
    return out, 0


@torch.library.register_vmap("cuscan::linear_recurrence_vjp")
def _(info, in_dims, grad_output, decays, output, initial_state, axis, reverse):
    grad_dim, decays_dim, output_dim, state_dim = in_dims[:4]
    decays_shape = _logical_shape(decays, decays_dim)
    state_shape = _logical_shape(initial_state, state_dim)
    shape, axis = _api.backward_shape(_logical_shape(grad_output, grad_dim), decays_shape,
                                      _logical_shape(output, output_dim), state_shape, axis)
    rank, size = len(shape), info.batch_size
    grad_decays, grad_impulses, grad_state = _backward(
        _batch_first(grad_output, grad_dim, rank, size, expand=True),
        _batch_first(decays, decays_dim, rank, size, expand=True),
        _batch_first(output, output_dim, rank, size, expand=True),
        _batch_first(initial_state, state_dim, rank - 1, size, expand=True),
        axis + 1, reverse)
    grad_decays = grad_decays.reshape(size, *decays_shape)
    if initial_state is None:
        return (grad_decays, grad_impulses, grad_state), (0, 0, None)
    return (grad_decays, grad_impulses, grad_state.reshape(size, *state_shape)), (0, 0, 0)


# ---- autograd ----------------------------------------------------------------------------


def _setup_context(ctx, inputs, output):
    decays, impulses, initial_state, axis, reverse, _method = inputs
    ctx.save_for_backward(decays, output, initial_state)
    ctx.axis, ctx.reverse = axis, reverse
    ctx.impulses_shape, ctx.impulses_dtype = impulses.shape, impulses.dtype


def _sum_to(grad: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """The gradient of an operand of ``shape`` and ``dtype`` broadcast and promoted to
    ``grad``'s: summed back, and its real part for a real operand of a complex result."""
    if grad.shape != shape:
        grad = grad.sum(_api.summed_axes(grad.shape, shape), keepdim=True).reshape(shape)
    if grad.is_complex() and not dtype.is_complex:
        grad = grad.real
    return grad.to(dtype)


def _operand_gradients(ctx, decays, initial_state, grads) -> tuple:
    """Autograd's gradients of the forward's inputs from the VJP's ``grads``, each summed
    back and cast to its operand's shape and dtype."""
    grad_decays, grad_impulses, grad_state = grads
    grad_state = None if initial_state is None else _sum_to(grad_state, initial_state.shape,
                                                            initial_state.dtype)
    return (_sum_to(grad_decays, decays.shape, decays.dtype),
            _sum_to(grad_impulses, ctx.impulses_shape, ctx.impulses_dtype), grad_state,
            None, None, None)


def _backward_autograd(ctx, grad_output):
    # ctx.saved_tensors is read once per backward: activation checkpointing
    # (torch.utils.checkpoint) allows no more.
    decays, output, initial_state = ctx.saved_tensors
    operator = _backward_impl if _eager(grad_output, decays, output, initial_state) else _backward
    return _operand_gradients(ctx, decays, initial_state, operator(
        grad_output, decays, output, initial_state, ctx.axis, ctx.reverse))


_forward.register_autograd(_backward_autograd, setup_context=_setup_context)


def _shift(tensor: torch.Tensor, boundary: torch.Tensor, axis: int, later: bool):
    """``tensor`` moved one step along ``axis`` (towards later steps when ``later``), with
    ``boundary`` (one step long) filling the step left empty."""
    length = tensor.shape[axis]
    if later:
        return torch.cat([boundary, tensor.narrow(axis, 0, length - 1)], axis)
    return torch.cat([tensor.narrow(axis, 1, length - 1), boundary], axis)


def _previous_states(output, initial_state, axis: int, reverse: bool) -> torch.Tensor:
    """``h[t-1]`` at every step t (``h[t+1]`` when ``reverse``), the initial state first."""
    step_shape = list(output.shape)
    step_shape[axis] = 1
    if initial_state is None:
        first = output.new_zeros(step_shape)
    else:
        first = initial_state.expand(step_shape[:axis] + step_shape[axis + 1:])  # () in 1-D
        first = first.unsqueeze(axis).to(output.dtype)
    return _shift(output, first, axis, later=not reverse)


def _differentiable_vjp(grad_output, decays, output, initial_state, axis: int, reverse: bool):
    """The VJP of `_forward` written with differentiable operations (for double backward).

    ``g[t] = grad_output[t] + conj(decays[t+1]) * g[t+1]`` is the recurrence
    run the other way with the decays shifted one step; ``grad_decays[t] =
    conj(h[t-1]) * g[t]`` with ``h[-1]`` the initial state; ``grad_state =
    conj(decays[0]) * g[0]`` (mirrored when ``reverse``). Returns them at the
    output's shape (the state's without the axis).
    """
    axis %= output.ndim  # checked by the front door
    decays = decays.expand(output.shape)
    if output.shape[axis] == 0:
        grad, grad_decays = grad_output, output.new_zeros(output.shape)
        grad_state = output.new_zeros(output.shape[:axis] + output.shape[axis + 1:])
        return grad_decays, grad, None if initial_state is None else grad_state
    following = _shift(decays, torch.zeros_like(decays.narrow(axis, 0, 1)), axis, later=reverse)
    grad = _recurrence(following.conj(), grad_output, None, axis, not reverse, "auto")
    grad_decays = _previous_states(output, initial_state, axis, reverse).conj() * grad
    grad_state = None
    if initial_state is not None:
        first = output.shape[axis] - 1 if reverse else 0
        grad_state = (decays.narrow(axis, first, 1).conj() * grad.narrow(axis, first, 1))
        grad_state = grad_state.squeeze(axis)
    return grad_decays, grad, grad_state


class _Recurrence(torch.autograd.Function):
    """`_forward`, differentiable to any order; vmap through the operators' batching rules."""

    generate_vmap_rule = True

    @staticmethod
    def forward(decays, impulses, initial_state, axis, reverse, method):
        return _forward(decays, impulses, initial_state, axis, reverse, method)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], output, inputs[2])

    @staticmethod
    def backward(ctx, grad_output):
        if not torch.is_grad_enabled():  # the fused kernels
            return _backward_autograd(ctx, grad_output)
        decays, output, initial_state = ctx.saved_tensors
        return _operand_gradients(ctx, decays, initial_state, _differentiable_vjp(
            grad_output, decays, output, initial_state, ctx.axis, ctx.reverse))


class _EagerRecurrence(torch.autograd.Function):
    """`_Recurrence` for eager calls on plain tensors (see `_eager`): the forward
    operator's code called directly, and no ``setup_context``, whose binding of the
    arguments costs as much as a small recurrence. torch.func's transforms and
    forward-mode AD, which need ``setup_context``, take `_Recurrence`."""

    @staticmethod
    def forward(ctx, decays, impulses, initial_state, axis, reverse, method):
        output = _forward_impl(decays, impulses, initial_state, axis, reverse, method)
        _setup_context(ctx, (decays, impulses, initial_state, axis, reverse, method), output)
        return output

    backward = staticmethod(_Recurrence.backward)


class _DualRecurrence(_Recurrence):
    """`_Recurrence` with forward-mode AD: the tangent is the same recurrence,
    ``dh[t] = decays[t] * dh[t-1] + ddecays[t] * h[t-1] + dimpulses[t]``,
    ``dh[-1] = dinitial_state``."""

    @staticmethod
    def jvp(ctx, decays_tangent, impulses_tangent, state_tangent, *_):
        decays, output, initial_state = ctx.saved_tensors
        axis = ctx.axis % output.ndim  # checked by the front door
        impulses = output.new_zeros(()) if impulses_tangent is None else impulses_tangent
        if decays_tangent is not None and output.shape[axis] > 0:
            previous = _previous_states(output, initial_state, axis, ctx.reverse)
            impulses = impulses + decays_tangent * previous
        tangent = _recurrence(decays, impulses.expand(output.shape), state_tangent, axis,
                              ctx.reverse, "auto")
        return tangent.to(output.dtype)


def _recurrence(decays, impulses, initial_state, axis, reverse, method) -> torch.Tensor:
    """`_forward`, differentiable: with forward-mode AD when a dual level is open (the
    plain function otherwise, which is what torch.compile can trace)."""
    forward_mode = _forward_mode()
    if torch.jit.is_tracing():
        # A trace records the operator, whose registered derivative is the VJP operator:
        # the same graph whether or not the inputs require grad (an autograd function
        # would be recorded as Python code, which a saved trace cannot hold).
        return _forward(decays, impulses, initial_state, axis, reverse, method)
    if not forward_mode and not _differentiated(decays, impulses, initial_state):
        # Nothing to differentiate: the operator alone, without autograd's bookkeeping
        # (a third of the cost of a small call), and eagerly its code alone.
        operator = _forward_impl if _eager(decays, impulses, initial_state) else _forward
        return operator(decays, impulses, initial_state, axis, reverse, method)
    if forward_mode:
        function = _DualRecurrence
    elif _eager(decays, impulses, initial_state):
        function = _EagerRecurrence
    else:
        function = _Recurrence
    return function.apply(decays, impulses, initial_state, axis, reverse, method)


class _LinearOnHost(torch.autograd.Function):
    """A linear map of NumPy arrays ``f`` (``cuscan.signal``'s filters on the CPU) on a
    tensor's memory, differentiated in either mode as a linear map: its transpose
    ``f.adjoint`` for reverse mode and ``f`` itself for forward mode, each through this
    function again, so to any order."""

    @staticmethod
    def forward(ctx, x, f):
        ctx.f = f
        return torch.from_numpy(f(x.detach().numpy()))

    @staticmethod
    def backward(ctx, grad):
        return linear_on_host(grad, ctx.f.adjoint), None

    @staticmethod
    def jvp(ctx, tangent, _):
        return linear_on_host(tangent, ctx.f)


def linear_on_host(x: torch.Tensor, f) -> torch.Tensor:
    """``f(x)`` (`_LinearOnHost`) on a CPU tensor, as a tensor that autograd differentiates."""
    return _LinearOnHost.apply(x.resolve_conj().resolve_neg(), f)


# What DLPack carries and the core computes on (bfloat16 crosses as uint16).
_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
})


def check(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor cuscan cannot compute on: nested, not dense, or of a dtype it does
    not support."""
    check_layout(name, tensor)
    if tensor.dtype not in _DTYPES:
        raise _dtypes.unsupported(name, tensor.dtype)


def check_layout(name: str, tensor: torch.Tensor) -> None:
    """Refuse a nested or sparse tensor (or another layout than strided)."""
    if tensor.is_nested:
        raise TypeError(f"`{name}` is a nested tensor; cuscan needs dense (strided) "
                        "tensors (pad with torch.nested.to_padded_tensor, or run each "
                        "sequence in turn)")
    if tensor.layout != torch.strided:
        raise TypeError(f"`{name}` is a {tensor.layout} tensor; cuscan needs dense (strided) "
                        "tensors (convert with .to_dense())")


def _followed(tensor: torch.Tensor) -> str | None:
    """What follows ``tensor``'s values beyond them (a gradient, a tangent or a batch of
    torch.func's transforms, at any of their levels), in words; None if nothing does."""
    functorch = torch._C._functorch
    levels = {layer.level(): layer.key() for layer in functorch.get_interpreter_stack() or ()}
    # a forward-mode level opened outside torch.func's transforms, whose tangents they hide
    hidden = bool(levels) and _forward_mode() and functorch.TransformType.Jvp not in levels.values()
    while True:
        if tensor.requires_grad and torch.is_grad_enabled():
            return "requires grad"
        if torch.autograd.forward_ad.unpack_dual(tensor).tangent is not None:
            return "carries a forward-mode tangent"
        if not functorch.is_functorch_wrapped_tensor(tensor):
            return "may carry a forward-mode tangent, hidden by torch.func" if hidden else None
        if functorch.is_batchedtensor(tensor) or functorch.is_legacy_batchedtensor(tensor):
            return "is batched by torch.func.vmap"
        level = functorch.maybe_get_level(tensor)
        if levels.get(level) == functorch.TransformType.Jvp and level != max(levels):
            # a tangent of an enclosing jvp is hidden by the transforms inside it
            return "may carry a tangent of an enclosing torch.func.jvp"
        tensor = functorch.get_unwrapped(tensor)


def constant(name: str, tensor: torch.Tensor) -> np.ndarray:
    """``tensor``'s values as a NumPy array (float32 or wider), for a constant that
    nothing differentiates, such as cuscan.signal's filter coefficients; also under
    torch.func's transforms, which wrap every tensor made inside them. A tensor whose
    values something follows beyond them is refused: its derivatives would be lost."""
    check_layout(name, tensor)
    followed = _followed(tensor)
    if followed is not None:
        raise TypeError(f"`{name}` {followed}, but filter coefficients are constants to "
                        f"cuscan.signal: pass values that nothing differentiates or batches "
                        f"(`{name}.detach()`, or a tensor made outside the transforms)")
    if tensor.is_meta:
        raise TypeError(f"`{name}` is a meta tensor, which has no values; filter "
                        "coefficients must have them")
    while torch._C._functorch.is_functorch_wrapped_tensor(tensor):
        tensor = torch._C._functorch.get_unwrapped(tensor)
    if _distributed(tensor):  # a DTensor: the values of all its parts, on every device
        tensor = tensor.full_tensor()
    dtype = tensor.dtype
    if dtype not in _DTYPES and not dtype.is_floating_point and not dtype.is_complex:
        raise _dtypes.unsupported(name, dtype)  # quantized, bit and packed types
    with torch._C._DisableFuncTorch():  # no transform wraps the copies
        tensor = tensor.detach().cpu().resolve_conj().resolve_neg()
        if dtype.is_complex and dtype.itemsize < 8:  # complex32, which NumPy lacks
            tensor = tensor.to(torch.complex128)
        elif dtype.is_floating_point and dtype.itemsize < 4:  # bfloat16 and float8 too
            tensor = tensor.double()
        return tensor.numpy()


def _as_tensors(names: tuple[str, ...], *values) -> list[torch.Tensor | None]:
    """Operands as tensors: Python scalars are weak, as in the core, and take the tensors'
    dtype (complex if the scalar is) and device; None stays None."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    for name, value in zip(names, values, strict=True):
        if isinstance(value, torch.Tensor):
            check(name, value)
    dtype = _result_dtype(*tensors)
    if any(isinstance(v, complex) for v in values):
        dtype = _promote(dtype, torch.complex64)
    device = _device(names, values)
    if _distributed(*tensors):
        _register_sharding()
    return [None if v is None else
            _api.converted(torch.as_tensor, name, v, dtype=dtype, device=device)
            if not isinstance(v, torch.Tensor)
            else v.to(device) if v.device != device else v
            for name, v in zip(names, values, strict=True)]


def _device(names: tuple[str, ...], values) -> torch.device:
    """The device of the call, as torch's operators choose it: 0-d CPU tensors (like Python
    scalars) go to the device of the other tensors; tensors on two other devices are an
    error."""
    placed = {}
    for name, value in zip(names, values, strict=True):
        if isinstance(value, torch.Tensor) and not (value.ndim == 0
                                                     and value.device.type == "cpu"):
            placed.setdefault(value.device, name)
    if len(placed) > 1:
        described = ", ".join(f"`{name}` is on {device}" for device, name in placed.items())
        raise TypeError(f"all tensors in one call must be on one device (0-d CPU tensors "
                        f"aside); {described}")
    return next(iter(placed), torch.device("cpu"))


# ---- DTensor: how the operators split over a device mesh ---------------------------------


def _distributed(*tensors) -> bool:
    """Whether any of ``tensors`` is a DTensor (whose module is then already imported)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and any(isinstance(t, module.DTensor) for t in tensors)


@functools.cache
def _register_sharding() -> None:
    """Tell DTensor how the operators split (once, on the first DTensor seen).

    Channels are independent: split along any axis but time, each device runs
    the recurrence on its own channels. An operand broadcast along that axis
    is read whole on every device, and its gradient, a sum over the axis, is
    left partial (summed when next needed). Split along time, DTensor first
    gathers or splits the operands along another axis, as it chooses.
    """
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    def own(spec, dim: int, rank: int):
        """Which axis of an operand of ``spec`` (broadcast to ``rank`` axes) is ``dim``;
        None where it is broadcast along ``dim``."""
        index = dim - (rank - spec.ndim)
        return index if index >= 0 and spec.shape[index] != 1 else None

    def split(spec, dim: int, rank: int):
        if spec is None:
            return None
        index = own(spec, dim, rank)
        return Replicate() if index is None else Shard(index)

    def gradient(spec, dim: int, rank: int):
        index = own(spec, dim, rank)
        return Partial() if index is None else Shard(index)

    def channels(output_shape, axis: int):
        """The axes the output splits along, each with its index in the state's shape
        (the output's without the time axis)."""
        axis %= len(output_shape)
        return [(dim, dim if dim < axis else dim - 1) for dim, size in enumerate(output_shape)
                if dim != axis and size > 1]

    @register_sharding(torch.ops.cuscan.linear_recurrence.default)
    def _(decays, impulses, initial_state, axis, reverse, method):
        shape = torch.broadcast_shapes(decays.shape, impulses.shape)
        rank = len(shape)
        options = [([Replicate()], [Replicate(), Replicate(),
                                    None if initial_state is None else Replicate()])]
        for dim, state_dim in channels(shape, axis):
            options.append(([Shard(dim)], [split(decays, dim, rank), split(impulses, dim, rank),
                                           split(initial_state, state_dim, rank - 1)]))
        return options

    @register_sharding(torch.ops.cuscan.linear_recurrence_vjp.default)
    def _(grad_output, decays, output, initial_state, axis, reverse):
        rank = output.ndim
        options = [([Replicate()] * 3, [Replicate()] * 3 + [
            None if initial_state is None else Replicate()])]
        for dim, state_dim in channels(output.shape, axis):
            state = (Replicate() if initial_state is None
                     else gradient(initial_state, state_dim, rank - 1))
            options.append((
                [gradient(decays, dim, rank), Shard(dim), state],
                [split(grad_output, dim, rank), split(decays, dim, rank), Shard(dim),
                 split(initial_state, state_dim, rank - 1)]))
        return options


def linear_recurrence(decays, impulses, initial_state, *, axis, reverse, method):
    """``cuscan.linear_recurrence`` for torch tensors (called by the front door)."""
    decays, impulses, initial_state = _as_tensors(
        ("decays", "impulses", "initial_state"), decays, impulses, initial_state)
    if impulses.is_meta or _distributed(decays, impulses, initial_state):
        # The fake implementation checks no shapes, and over a device mesh each device
        # would check only its own part's: the whole shapes are checked here.
        _api.forward_shape(_shape(decays), _shape(impulses), _shape(initial_state), axis)
    return _recurrence(decays, impulses, initial_state, axis, reverse, method)


def linear_recurrence_vjp(grad_output, decays, output, initial_state, *, axis, reverse):
    """``cuscan.linear_recurrence_vjp`` for torch tensors (called by the front door)."""
    grad_output, decays, output, initial_state = _as_tensors(
        ("grad_output", "decays", "output", "initial_state"), grad_output, decays, output,
        initial_state)
    operands = (grad_output, decays, output, initial_state)
    if output.is_meta or _distributed(*operands):  # as in `linear_recurrence`
        _api.backward_shape(_shape(grad_output), _shape(decays), _shape(output),
                            _shape(initial_state), axis)
    if _differentiated(*operands):
        return _vjp_composite(*operands, axis, reverse)
    operator = _backward_impl if _eager(*operands) else _backward
    grad_decays, grad_impulses, grad_state = operator(grad_output, decays, output,
                                                       initial_state, axis, reverse)
    return grad_decays, grad_impulses, None if initial_state is None else grad_state


def _shape(tensor: torch.Tensor | None) -> tuple[int, ...] | None:
    return None if tensor is None else tuple(tensor.shape)


def _vjp_composite(grad_output, decays, output, initial_state, axis, reverse):
    """`linear_recurrence_vjp` with differentiable operations, for autograd to record (the
    operator has no derivative): `_differentiable_vjp`, each gradient summed to its operand's
    shape."""
    grad_output, decays, output, initial_state = _promoted(grad_output, decays, output,
                                                           initial_state)
    _, axis = _api.backward_shape(grad_output.shape, decays.shape, output.shape,
                                  _shape(initial_state), axis)
    grads = _differentiable_vjp(grad_output, decays, output, initial_state, axis, reverse)
    targets = (decays, output, initial_state)
    return tuple(None if target is None else _sum_to(grad, target.shape, target.dtype)
                 for grad, target in zip(grads, targets, strict=True))
