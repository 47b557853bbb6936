"""PyTorch adapter: torch tensors in and out, through DLPack, with autograd.

Two custom operators, ``cuscan::linear_recurrence`` and
``cuscan::linear_recurrence_vjp``, wrap the core functions; the first is made
differentiable with the second through ``register_autograd``, and both have
fake implementations, so ``torch.compile(fullgraph=True)`` traces through them.
Imported only when a tensor is passed.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from cuscan import _api, _dtypes

_BACKWARD_STATE_ABSENT = (0,)  # shape of the stand-in when there is no initial state


def to_array(tensor: torch.Tensor):
    """The NumPy (CPU) or CuPy (CUDA) array viewing ``tensor``'s memory."""
    tensor = tensor.detach()
    bfloat16 = tensor.dtype == torch.bfloat16
    if bfloat16:  # DLPack consumers may lack bfloat16: cross as uint16 and view back
        tensor = tensor.view(torch.uint16)
    if tensor.device.type == "cuda":
        import cupy

        array = cupy.from_dlpack(tensor)
    elif tensor.device.type == "cpu":
        array = np.from_dlpack(tensor)
    else:
        raise TypeError(f"cuscan runs on CPU and CUDA tensors; got a tensor on {tensor.device}")
    if bfloat16:
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16)
    return array


def from_array(array) -> torch.Tensor:
    """The tensor viewing a NumPy or CuPy array's memory."""
    if array.dtype.name == "bfloat16":
        return torch.from_dlpack(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


def _stream(tensor: torch.Tensor):
    """A context that makes CuPy launch on torch's current stream for ``tensor``'s device."""
    if tensor.device.type != "cuda":
        return contextlib.nullcontext()
    import cupy

    stream = torch.cuda.current_stream(tensor.device)
    return cupy.cuda.ExternalStream(stream.cuda_stream, tensor.device.index)


def _result_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    dtype = None
    for tensor in tensors:
        if tensor is not None:
            dtype = tensor.dtype if dtype is None else torch.promote_types(dtype, tensor.dtype)
    if not (dtype.is_floating_point or dtype.is_complex):
        dtype = torch.float64
    return dtype


@torch.library.custom_op("cuscan::linear_recurrence", mutates_args=())
def _forward(decays: torch.Tensor, impulses: torch.Tensor, initial_state: torch.Tensor | None,
             axis: int, reverse: bool, method: str) -> torch.Tensor:
    with _stream(impulses):
        out = _api.linear_recurrence(
            to_array(decays), to_array(impulses),
            None if initial_state is None else to_array(initial_state),
            axis=axis, reverse=reverse, method=method)
    return from_array(out)


@_forward.register_fake
def _(decays, impulses, initial_state, axis, reverse, method):
    shape = torch.broadcast_shapes(decays.shape, impulses.shape)
    return impulses.new_empty(shape, dtype=_result_dtype(decays, impulses, initial_state))


@torch.library.custom_op("cuscan::linear_recurrence_vjp", mutates_args=())
def _backward(grad_output: torch.Tensor, decays: torch.Tensor, output: torch.Tensor,
              initial_state: torch.Tensor | None, axis: int, reverse: bool
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    with _stream(output):
        grads = _api.linear_recurrence_vjp(
            to_array(grad_output), to_array(decays), to_array(output),
            None if initial_state is None else to_array(initial_state),
            axis=axis, reverse=reverse)
    grad_decays, grad_impulses, grad_state = (None if g is None else from_array(g) for g in grads)
    if grad_state is None:
        grad_state = grad_impulses.new_empty(_BACKWARD_STATE_ABSENT)
    return grad_decays, grad_impulses, grad_state


@_backward.register_fake
def _(grad_output, decays, output, initial_state, axis, reverse):
    dtype = _result_dtype(grad_output, decays, output, initial_state)
    state_shape = _BACKWARD_STATE_ABSENT if initial_state is None else initial_state.shape
    return (output.new_empty(decays.shape, dtype=dtype),
            output.new_empty(output.shape, dtype=dtype),
            output.new_empty(state_shape, dtype=dtype))


def _setup_context(ctx, inputs, output):
    decays, impulses, initial_state, axis, reverse, _method = inputs
    ctx.save_for_backward(decays, output, initial_state)
    ctx.axis, ctx.reverse = axis, reverse
    ctx.impulses_shape, ctx.impulses_dtype = impulses.shape, impulses.dtype


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape)
                                if n == 1 and grad.shape[lead + i] != 1]
    return grad.sum(dims, keepdim=True).reshape(shape)


def _backward_autograd(ctx, grad_output):
    decays, output, initial_state = ctx.saved_tensors
    grad_decays, grad_impulses, grad_state = _backward(
        grad_output, decays, output, initial_state, ctx.axis, ctx.reverse)
    grad_impulses = _sum_to(grad_impulses, ctx.impulses_shape).to(ctx.impulses_dtype)
    grad_state = None if initial_state is None else grad_state.to(initial_state.dtype)
    return grad_decays.to(decays.dtype), grad_impulses, grad_state, None, None, None


_forward.register_autograd(_backward_autograd, setup_context=_setup_context)


# What DLPack carries and the core computes on (bfloat16 crosses as uint16).
_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
})


def _as_tensors(names: tuple[str, ...], *values) -> list[torch.Tensor | None]:
    """Operands as tensors: Python scalars are weak, as in the core, and take the tensors'
    dtype (complex if the scalar is) and device; None stays None."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    for name, value in zip(names, values, strict=True):
        if not isinstance(value, torch.Tensor):
            continue
        if value.layout != torch.strided:
            raise TypeError(f"`{name}` is a {value.layout} tensor; cuscan needs dense (strided) "
                            "tensors (convert with .to_dense())")
        if value.dtype not in _DTYPES:
            raise _dtypes.unsupported(name, value.dtype)
    dtype = _result_dtype(*tensors)
    if any(isinstance(v, complex) for v in values):
        dtype = torch.promote_types(dtype, torch.complex64)
    return [v if v is None or isinstance(v, torch.Tensor)
            else torch.as_tensor(v, dtype=dtype, device=tensors[0].device) for v in values]


def linear_recurrence(decays, impulses, initial_state, *, axis, reverse, method):
    """``cuscan.linear_recurrence`` for torch tensors (called by the front door)."""
    decays, impulses, initial_state = _as_tensors(
        ("decays", "impulses", "initial_state"), decays, impulses, initial_state)
    return _forward(decays, impulses, initial_state, axis, reverse, method)


def linear_recurrence_vjp(grad_output, decays, output, initial_state, *, axis, reverse):
    """``cuscan.linear_recurrence_vjp`` for torch tensors (called by the front door)."""
    grad_output, decays, output, initial_state = _as_tensors(
        ("grad_output", "decays", "output", "initial_state"), grad_output, decays, output,
        initial_state)
    grad_decays, grad_impulses, grad_state = _backward(grad_output, decays, output,
                                                       initial_state, axis, reverse)
    return grad_decays, grad_impulses, None if initial_state is None else grad_state
