"""JAX adapter: jax.Array in and out through XLA buffer callbacks, with a custom VJP.

The forward and the VJP each run as a ``jax.experimental.buffer_callback``:
XLA hands over its own buffers, inputs and outputs, and the core computes in
place on them (NumPy on CPU; CuPy on GPU, on XLA's stream), so nothing is
copied. ``jax.custom_vjp`` ties the two together, so the function works
eagerly and under ``jit``, ``grad`` and ``vmap``; the VJP is a ``custom_vjp``
too, so reverse mode works to any order. Imported only when a JAX array is
passed.
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.buffer_callback import buffer_callback

from cuscan import _api, _backend, _dtypes

_DLPACK_CPU = 1


def _on_gpu(buffer) -> bool:
    """Whether an XLA buffer lives on a GPU (asking for its CUDA interface on CPU raises)."""
    return buffer.__dlpack_device__()[0] != _DLPACK_CPU


def _view(buffer, writeable: bool = False):
    """The NumPy (CPU) or CuPy (GPU) array on an XLA buffer; inputs are made read-only."""
    if buffer is None:
        return None
    if not _on_gpu(buffer):
        array = np.asarray(buffer)
        if not writeable:
            array = array.view()
            array.flags.writeable = False
        return array
    import cupy

    interface = buffer.__cuda_array_interface__
    dtype = np.dtype(buffer.dtype)
    # Built from the pointer so that bfloat16 needs no support in the interface.
    storage = np.dtype(np.uint16) if dtype.name == "bfloat16" else dtype
    size = math.prod(buffer.shape) * storage.itemsize
    memory = cupy.cuda.UnownedMemory(interface["data"][0], size, buffer)
    array = cupy.ndarray(buffer.shape, storage, cupy.cuda.MemoryPointer(memory, 0))
    return array.view(dtype) if storage != dtype else array


def _stream(ctx, buffer):
    """A context launching CuPy on XLA's stream when the buffers are on a GPU."""
    if not _on_gpu(buffer):
        return contextlib.nullcontext()
    import cupy

    return cupy.cuda.ExternalStream(ctx.stream)


@functools.cache
def _forward_callback(axis: int, reverse: bool, method: str):
    """The forward as a buffer callback (cached: one compiled callback per variant)."""

    def callback(ctx, out, decays, impulses, initial_state):
        with _stream(ctx, out):
            out, impulses = _view(out, writeable=True), _view(impulses)
            if impulses.shape != out.shape:
                # vmap batched only the initial state: the output has a batch dimension
                # the impulses lack, so they are read with stride 0 along it
                xp = _backend.select({"impulses": impulses}).xp
                impulses = xp.broadcast_to(impulses, out.shape)
            _api.forward(_view(decays), impulses, _view(initial_state), axis=axis,
                         reverse=reverse, method=method, out=out)

    return callback


@functools.cache
def _backward_callback(axis: int, reverse: bool, holomorphic: bool):
    """The VJP as a buffer callback. JAX's VJP of a holomorphic function is the
    core's (PyTorch's) with every input conjugated: ``holomorphic`` makes it so."""

    def callback(ctx, out, grad_output, decays, output, initial_state):
        with _stream(ctx, grad_output):
            grad_output, output = _view(grad_output), _view(output)
            if grad_output.shape != output.shape:
                # vmap batched the cotangent (jacrev) or the output alone: the other has
                # a batch dimension of 1, read with stride 0
                xp = _backend.select({"output": output}).xp
                grad_output, output = xp.broadcast_arrays(grad_output, output)
            operands = [_view(decays), output, _view(initial_state)]
            if holomorphic:
                operands = [None if v is None else v.conj() for v in operands]
            _api.backward(grad_output, *operands, axis=axis, reverse=reverse,
                          out=tuple(_view(o, writeable=True) for o in out))

    return callback


def _call_forward(decays, impulses, initial_state, axis, reverse, method):
    result = jax.ShapeDtypeStruct(jnp.broadcast_shapes(decays.shape, impulses.shape),
                                  impulses.dtype)
    function = buffer_callback(_forward_callback(axis, reverse, method), result,
                               vmap_method="expand_dims")
    return function(decays, impulses, initial_state)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _recurrence(decays, impulses, initial_state, axis, reverse, method):
    return _call_forward(decays, impulses, initial_state, axis, reverse, method)


def _recurrence_fwd(decays, impulses, initial_state, axis, reverse, method):
    # Through the custom_vjp function itself, so that an outer derivative sees it.
    output = _recurrence(decays, impulses, initial_state, axis, reverse, method)
    return output, (decays, output, initial_state)


def _call_backward(grad_output, decays, output, initial_state, axis, reverse):
    results = tuple(None if v is None else jax.ShapeDtypeStruct(v.shape, output.dtype)
                    for v in (decays, output, initial_state))
    holomorphic = jnp.issubdtype(output.dtype, jnp.complexfloating)
    function = buffer_callback(_backward_callback(axis, reverse, holomorphic), results,
                               vmap_method="expand_dims")
    return function(grad_output, decays, output, initial_state)


def _recurrence_bwd(axis, reverse, _method, residuals, grad_output):
    decays, output, initial_state = residuals
    return _vjp(grad_output, decays, output, initial_state, axis, reverse)


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _vjp(grad_output, decays, output, initial_state, axis, reverse):
    """The VJP by the fused kernel, differentiable in reverse mode through `_composite_vjp`."""
    return _call_backward(grad_output, decays, output, initial_state, axis, reverse)


def _vjp_fwd(grad_output, decays, output, initial_state, axis, reverse):
    grads = _vjp(grad_output, decays, output, initial_state, axis, reverse)
    return grads, (grad_output, decays, output, initial_state)


def _vjp_bwd(axis, reverse, residuals, cotangents):
    composite = functools.partial(_composite_vjp, axis=axis, reverse=reverse)
    return jax.vjp(composite, *residuals)[1](cotangents)


_vjp.defvjp(_vjp_fwd, _vjp_bwd)


def _composite_vjp(grad_output, decays, output, initial_state, *, axis, reverse):
    """`_vjp` from `_recurrence` and jax.numpy, for JAX to differentiate (JAX's convention).

    ``grad_impulses[t] = grad_output[t] + decays[t+1] * grad_impulses[t+1]`` is a reverse
    recurrence over the decays shifted one step earlier; ``grad_decays[t] = output[t-1] *
    grad_impulses[t]`` with ``output[-1] = initial_state``; ``grad_initial_state =
    decays[0] * grad_impulses[0]`` (with time flipped when ``reverse``).
    """
    shape, steps = output.shape, output.shape[axis]
    if steps == 0:
        zeros = [None if v is None else jnp.zeros(v.shape, output.dtype)
                 for v in (decays, output, initial_state)]
        return tuple(zeros)
    a, grad_output, output = (jnp.flip(v, axis) if reverse else v for v in (
        jnp.broadcast_to(decays, shape), grad_output, output))

    def steps_from(array, start, stop):
        return jax.lax.slice_in_dim(array, start, stop, axis=axis)

    later = jnp.concatenate([steps_from(a, 1, steps), jnp.zeros_like(steps_from(a, 0, 1))],
                            axis)
    grad_impulses = _recurrence(later, grad_output, None, axis, True, "auto")
    first = (jnp.zeros_like(steps_from(output, 0, 1)) if initial_state is None else
             jnp.broadcast_to(jnp.expand_dims(initial_state, axis), steps_from(output, 0, 1).shape))
    grad_decays = jnp.concatenate([first, steps_from(output, 0, steps - 1)], axis) * grad_impulses
    grad_state = None if initial_state is None else _sum_to(jnp.squeeze(
        steps_from(a, 0, 1) * steps_from(grad_impulses, 0, 1), axis), initial_state.shape)
    if reverse:
        grad_decays, grad_impulses = jnp.flip(grad_decays, axis), jnp.flip(grad_impulses, axis)
    return _sum_to(grad_decays, decays.shape), grad_impulses, grad_state


def _sum_to(grad, shape):
    """A broadcast operand's gradient: ``grad`` summed back to ``shape``."""
    axes = _api.summed_axes(grad.shape, shape)
    return jnp.sum(grad, axis=axes, keepdims=True).reshape(shape) if axes else grad.reshape(shape)


def _as_jax(operands: dict[str, object]) -> list[jax.Array | None]:
    """Every operand as a JAX array of the result dtype: Python scalars are weak, as in
    the core; float64 becomes float32 unless JAX's 64-bit mode is on."""
    dtype = jax.dtypes.canonicalize_dtype(_dtypes.result_dtype(operands))
    return [None if v is None else jnp.asarray(v, dtype=dtype) for v in operands.values()]


def _with_rank(array, ndim: int):
    """``array`` with leading 1s up to ``ndim`` dimensions (so ``vmap`` adds a new axis)."""
    if array is None:
        return None
    return array.reshape((1,) * (ndim - array.ndim) + array.shape)


def linear_recurrence(decays, impulses, initial_state, *, axis, reverse, method):
    """``cuscan.linear_recurrence`` for JAX arrays (called by the front door)."""
    decays, impulses, initial_state = _as_jax(
        {"decays": decays, "impulses": impulses, "initial_state": initial_state})
    state_shape = None if initial_state is None else initial_state.shape
    shape, axis = _api.forward_shape(decays.shape, impulses.shape, state_shape, axis)
    ndim = len(shape)
    decays = _with_rank(decays, ndim)
    # The impulses' gradient has the output's shape: broadcast impulses (rare) are
    # expanded here, where JAX differentiates the broadcast itself.
    impulses = jnp.broadcast_to(impulses, shape)
    initial_state = _with_rank(initial_state, ndim - 1)
    # A negative axis stays right when vmap adds leading dimensions.
    return _recurrence(decays, impulses, initial_state, axis - ndim, reverse, method)


def linear_recurrence_vjp(grad_output, decays, output, initial_state, *, axis, reverse):
    """``cuscan.linear_recurrence_vjp`` for JAX arrays (called by the front door).

    Returns JAX's convention for complex inputs (the transpose of the Jacobian,
    without conjugation), like ``jax.vjp``.
    """
    grad_output, decays, output, initial_state = _as_jax(
        {"grad_output": grad_output, "decays": decays, "output": output,
         "initial_state": initial_state})
    state_shape = None if initial_state is None else initial_state.shape
    shape, axis = _api.backward_shape(grad_output.shape, decays.shape, output.shape,
                                      state_shape, axis)
    ndim = len(shape)
    grads = _vjp(grad_output, _with_rank(decays, ndim), output,
                 _with_rank(initial_state, ndim - 1), axis - ndim, reverse)
    grad_decays, grad_impulses, grad_state = grads
    return (grad_decays.reshape(decays.shape), grad_impulses,
            None if initial_state is None else grad_state.reshape(initial_state.shape))
