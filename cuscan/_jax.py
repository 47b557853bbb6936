"""JAX adapter: jax.Array in and out through XLA buffer callbacks, as JAX primitives.

The forward and the fused VJP each run as a ``jax.experimental.buffer_callback``:
XLA hands over its own buffers, inputs and outputs, and the core computes in
place on them (NumPy on CPU; CuPy on GPU, on XLA's stream), so nothing is
copied. Primitives with JVP, transpose and batching rules (below) carry them
through ``jit``, ``vmap`` and both modes of differentiation, to any order. In
programs for ``jax.export``, which cannot hold a callback into Python, they are
lowered to XLA's own scans instead.
Imported only when a JAX array is passed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import jet
from jax.experimental.buffer_callback import buffer_callback
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

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
    cupy = _backend.cupy_for("a JAX array")
    interface = buffer.__cuda_array_interface__
    dtype = np.dtype(buffer.dtype)
    # Built from the pointer so that bfloat16 needs no support in the interface.
    storage = np.dtype(np.uint16) if _dtypes.is_bfloat16(dtype) else dtype
    size = math.prod(buffer.shape) * storage.itemsize
    # The device is named, as XLA hands empty buffers over with a null pointer, whose device
    # CuPy cannot look up (the state's gradient of no steps has empty operands).
    memory = cupy.cuda.UnownedMemory(interface["data"][0], size, buffer,
                                     buffer.__dlpack_device__()[1])
    array = cupy.ndarray(buffer.shape, storage, cupy.cuda.MemoryPointer(memory, 0))
    return array.view(dtype) if storage != dtype else array


def _core(buffer):
    """The backend computing on `_view`'s views of XLA's buffers (NumPy, or CuPy on GPU)."""
    return _backend.backend_of("cupy" if _on_gpu(buffer) else "numpy")


def _stream(ctx, buffer):
    """A context launching CuPy on XLA's stream when the buffers are on a GPU."""
    if not _on_gpu(buffer):
        return contextlib.nullcontext()
    return _backend.external_stream("a JAX array", ctx.stream)


@functools.cache
def _forward_callback(axis: int, reverse: bool, method: str):
    """The forward as a buffer callback (cached: one compiled callback per variant)."""

    def callback(ctx, out, decays, impulses, initial_state):
        with _stream(ctx, out):
            backend = _core(out)
            out, impulses = _view(out, writeable=True), _view(impulses)
            if impulses.shape != out.shape:
                # vmap batched only the decays or the initial state: the output has a
                # batch dimension the impulses lack, so they are read with stride 0 along it
                impulses = backend.xp.broadcast_to(impulses, out.shape)
            _api.forward(_view(decays), impulses, _view(initial_state), axis=axis,
                         reverse=reverse, method=method, out=out, backend=backend)

    return callback


@functools.cache
def _backward_callback(axis: int, reverse: bool, holomorphic: bool):
    """The VJP as a buffer callback. JAX's VJP of a holomorphic function is the
    core's (PyTorch's) with every input conjugated: ``holomorphic`` makes it so."""

    def callback(ctx, out, grad_output, decays, output, initial_state):
        with _stream(ctx, grad_output):
            backend = _core(grad_output)
            grad_output, output = _view(grad_output), _view(output)
            if grad_output.shape != output.shape:
                # vmap batched the cotangent (jacrev) or the output alone: the other has
                # a batch dimension of 1, read with stride 0
                grad_output, output = backend.xp.broadcast_arrays(grad_output, output)
            operands = [_view(decays), output, _view(initial_state)]
            if holomorphic:
                operands = [None if v is None else v.conj() for v in operands]
            _api.backward(grad_output, *operands, axis=axis, reverse=reverse,
                          out=tuple(_view(o, writeable=True) for o in out), backend=backend)

    return callback


# ---- varying manual axes ------------------------------------------------------------------
#
# Inside ``jax.shard_map`` JAX types each value with the mesh axes it varies over. Operands
# are cast to vary over the same axes before a primitive is bound (as JAX's own operations
# do, so the gradient of an operand that does not vary is summed over the devices), and
# results vary over those axes.


def _varying(aval) -> frozenset:
    """The manual mesh axes an abstract value varies over (empty outside ``shard_map``)."""
    mat = getattr(aval, "mat", None)
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


# ---- explicit sharding ---------------------------------------------------------------------
#
# Over a mesh with explicit axes (``jax.make_mesh``'s default) JAX types each value with its
# sharding, and a gradient must have its operand's. cuscan's callbacks run on whole arrays,
# so `_bind` gathers sharded operands whole first, by ``jax.sharding.reshard`` (which JAX
# differentiates: the gradients come back in the operands' shardings), and the front door
# gives the results the shardings of the operands they match.


def _sharding(value):
    """``value``'s sharding over explicit mesh axes, or None where it has none."""
    sharding = getattr(jax.typeof(value), "sharding", None)
    if sharding is None or all(entry is None for entry in getattr(sharding, "spec", ())):
        return None
    return sharding


def _reshard(value, sharding):
    """``value`` laid out as ``sharding`` says (unchanged where ``sharding`` is None)."""
    if sharding is None or value is None:
        return value
    return jax.sharding.reshard(value, sharding)


def _whole(value):
    """``value`` replicated whole on every device of its mesh, where it is sharded."""
    sharding = _sharding(value)
    if sharding is None:
        return value
    return _reshard(value, sharding.update(
        spec=jax.sharding.PartitionSpec(*(None,) * len(sharding.spec))))


def _bind(primitive, *operands, **params):
    """``primitive.bind`` with every operand whole and made to vary over the same manual
    axes."""
    operands = [_whole(v) for v in operands]
    varying = [_varying(jax.typeof(v)) for v in operands]
    axes = frozenset().union(*varying)
    if axes:
        cast = (functools.partial(jax.lax.pcast, to="varying") if hasattr(jax.lax, "pcast")
                else jax.lax.pvary)
        operands = [v if axes == own else cast(v, tuple(sorted(axes - own)))
                    for v, own in zip(operands, varying, strict=True)]
    return primitive.bind(*operands, **params)


def _result(shape, dtype, avals):
    """The abstract value of a result: ``shape`` and ``dtype``, varying over the manual axes
    of the operands (which `_bind` made equal)."""
    if not _varying(avals[0]):
        return jax.core.ShapedArray(shape, dtype)
    return avals[0].update(shape=shape, dtype=dtype)


# ---- primitives ---------------------------------------------------------------------------
#
# Three primitives carry the recurrence through every JAX transformation:
#
# - `_forward_p(a, x[, s])`: the recurrence, a buffer callback on the core's forward;
# - `_tangent_p(a, h[, s], da, dx[, ds])`: its JVP at the output h, the recurrence over
#   ``dx + da * h[t-1]`` from ``ds``; linear in ``(da, dx, ds)``;
# - `_vjp_p(g, a, h[, s])`: the transpose of `_tangent_p`, the core's fused backward.
#
# Forward mode runs `_tangent_p`; reverse mode transposes it into `_vjp_p`, one fused pass;
# each is the other's transpose, and their own JVPs come from compositions of `_forward_p`
# and jax.numpy, so derivatives of any order mix forward and reverse mode freely. The
# batching rules put a batch dimension first (the axis counts from the end, so it stays
# right), and the core reads operands without one with stride 0.


def _with_state(args, count: int):
    """``args`` split after ``count`` leading operands, the optional state padded with None."""
    return [*args[:count], args[count] if len(args) > count else None]


def _state_slot(state, axis: int, ndim: int):
    """An initial state's shape with a 1 at the time axis, to broadcast with the output."""
    if state is None:
        return (1,) * ndim
    return (*state.shape[:ndim + axis], 1, *state.shape[ndim + axis:])


def _forward_shape(decays, impulses, state, axis: int):
    ndim = impulses.ndim
    return jnp.broadcast_shapes(decays.shape, impulses.shape, _state_slot(state, axis, ndim))


def _forward_impl(*args, axis, reverse, method):
    decays, impulses, state = _with_state(args, 2)
    result = jax.ShapeDtypeStruct(_forward_shape(decays, impulses, state, axis), impulses.dtype)
    function = buffer_callback(_forward_callback(axis, reverse, method), result)
    return function(decays, impulses, state)


def _combine(earlier, later):
    """The scan's operator: two steps ``h -> a h + x`` composed, ``earlier`` first. The
    decays may be wider than the impulses: they meet them rounded to their dtype."""
    (a1, x1), (a2, x2) = earlier, later
    return a1 * a2, a2.astype(x1.dtype) * x1 + x2


def _forward_scan(*args, axis, reverse, method):
    """`_forward_impl` in XLA's own operations, for programs that leave the process
    (`jax.export`), which cannot hold a callback into Python: `jax.lax.associative_scan`,
    or over a symbolic length (which it cannot take) `jax.lax.scan`'s serial loop. Half
    precision accumulates in float32, as in the core. The associative scan's products of
    decays are in the carry dtype (`_dtypes.carry`) where 64-bit types are enabled: squared
    in single precision, the product over 2^k steps compounds 2^k roundings, which over 2^18
    steps of unit complex64 decays put the result 4e-3 of its RMS off. (Without them JAX has
    no wider type, and the products stay in single precision.)"""
    decays, impulses, state = _with_state(args, 2)
    shape = _forward_shape(decays, impulses, state, axis)
    axis %= len(shape)
    dtype, steps = impulses.dtype, shape[axis]
    accumulator = _dtypes.accumulator(dtype)
    decays = jnp.broadcast_to(decays, shape).astype(accumulator)
    impulses = jnp.broadcast_to(impulses, shape).astype(accumulator)
    if state is not None:  # h[-1] enters as the first step's impulse: x + a * state
        impulses = impulses + decays * _previous(jnp.zeros(shape, accumulator), state, axis,
                                                 reverse)
    if not isinstance(steps, int):
        def step(h, operands):
            h = operands[0] * h + operands[1]
            return h, h

        _, output = jax.lax.scan(step, jnp.zeros(shape[:axis] + shape[axis + 1:], accumulator),
                                 (jnp.moveaxis(decays, axis, 0), jnp.moveaxis(impulses, axis, 0)),
                                 reverse=reverse)
        return jnp.moveaxis(output, 0, axis).astype(dtype)
    if steps == 0:
        return jnp.zeros(shape, dtype)
    wide = jax.dtypes.canonicalize_dtype(_dtypes.carry(accumulator))
    _, output = jax.lax.associative_scan(_combine, (decays.astype(wide), impulses),
                                         reverse=reverse, axis=axis)
    return output.astype(dtype)


def _lowering(native, portable, multiple_results: bool):
    """Lower through ``native`` (the buffer callbacks), or through ``portable`` (XLA's own
    operations) for `jax.export`."""
    rules = [mlir.lower_fun(f, multiple_results=multiple_results) for f in (native, portable)]

    def rule(ctx, *args, **params):
        return rules[ctx.module_context.lowering_parameters.for_export](ctx, *args, **params)

    return rule


def _forward_abstract(*avals, axis, reverse, method):
    decays, impulses, state = _with_state(avals, 2)
    return _result(_forward_shape(decays, impulses, state, axis), impulses.dtype, avals)


def _previous(output, state, axis: int, reverse: bool):
    """The step before each: ``h[t-1]`` (``h[t+1]`` when ``reverse``), the initial state (or
    zeros) before the first."""
    steps = output.shape[axis]
    if steps == 0:
        return jnp.zeros_like(output)
    earlier = jax.lax.slice_in_dim(output, 1 if reverse else 0,
                                   steps if reverse else steps - 1, axis=axis)
    start = jax.lax.slice_in_dim(output, 0, 1, axis=axis)
    start = (jnp.zeros_like(start) if state is None else
             jnp.broadcast_to(jnp.expand_dims(state, axis), start.shape).astype(output.dtype))
    pieces = [earlier, start] if reverse else [start, earlier]
    return jnp.concatenate(pieces, axis)


def _tangent_composite(*args, axis, reverse, method, has_state, present):
    """`_tangent_p` from `_forward_p` and jax.numpy: ``dh = forward(a, dx + da * h[t-1], ds)``.

    ``args`` are the residuals ``a, h[, s]`` and then the tangents that ``present`` (three
    bools, for ``da, dx, ds``) says are given; the others are zero.
    """
    count = 3 if has_state else 2
    decays, output, state = _with_state(args[:count], 2)
    given = iter(args[count:])
    tangent_decays, tangent_impulses, tangent_state = (next(given) if known else None
                                                       for known in present)
    impulses = jnp.zeros_like(output) if tangent_impulses is None else tangent_impulses
    if tangent_decays is not None:
        impulses = impulses + tangent_decays * _previous(output, state, axis, reverse)
    operands = (decays, impulses) + (() if tangent_state is None else (tangent_state,))
    return _bind(_forward_p, *operands, axis=axis, reverse=reverse, method=method)


def _vjp_impl(*args, axis, reverse, shapes):
    grad_output, decays, output, state = _with_state(args, 3)
    results = tuple(jax.ShapeDtypeStruct(shape, output.dtype) for shape in shapes)
    if state is None:
        results += (None,)
    holomorphic = jnp.issubdtype(output.dtype, jnp.complexfloating)
    function = buffer_callback(_backward_callback(axis, reverse, holomorphic), results)
    return [g for g in function(grad_output, decays, output, state) if g is not None]


def _vjp_abstract(*avals, axis, reverse, shapes):
    return [_result(shape, avals[2].dtype, avals) for shape in shapes]


def _adjoint(decays, grad_output, axis: int, reverse: bool):
    """The transpose of the recurrence with respect to its impulses and its initial state.

    ``g[t] = grad_output[t] + decays[t+1] * g[t+1]`` is the recurrence the other way in
    time over the decays shifted one step; the initial state's share is ``decays[0] *
    g[0]`` (with time flipped when ``reverse``). ``decays`` has the output's shape.
    Returns ``g`` and that share, which has the output's shape without the axis.
    """
    shape, steps = grad_output.shape, grad_output.shape[axis]
    if steps == 0:
        return grad_output, jnp.zeros(shape[:len(shape) + axis] + shape[len(shape) + axis + 1:],
                                      grad_output.dtype)
    later = _previous(decays, None, axis, not reverse)  # decays[t+1], 0 past the end
    grad = _bind(_forward_p, later, grad_output, axis=axis, reverse=not reverse, method="auto")
    first = steps - 1 if reverse else 0
    share = jnp.squeeze(jax.lax.slice_in_dim(decays * grad, first, first + 1, axis=axis), axis)
    return grad, share


def _vjp_composite(*args, axis, reverse, shapes):
    """`_vjp_p` from `_forward_p` and jax.numpy, for JAX to differentiate (JAX's convention):
    `_adjoint`, and ``grad_decays[t] = output[t-1] * g[t]`` with ``output[-1] =
    initial_state``; each summed to its shape in ``shapes``."""
    grad_output, decays, output, state = _with_state(args, 3)
    grad_output, output = jnp.broadcast_arrays(grad_output, output)
    grad, grad_state = _adjoint(jnp.broadcast_to(decays, output.shape), grad_output, axis,
                                reverse)
    grad_decays = _previous(output, state, axis, reverse) * grad
    grads = (grad_decays, grad, grad_state)[:len(shapes)]
    return [_sum_to(g, target) for g, target in zip(grads, shapes, strict=True)]


def _forward_transpose(cotangent, *args, axis, reverse, method):
    """The recurrence is linear in its impulses and initial state (for jax.linear_transpose)."""
    decays, impulses, state = _with_state(args, 2)
    if ad.is_undefined_primal(decays):
        raise NotImplementedError("cuscan's recurrence is linear in its impulses and initial "
                                  "state, not in its decays")
    if type(cotangent) is ad.Zero:
        return [None] * len(args)
    grad, grad_state = _adjoint(jnp.broadcast_to(decays, cotangent.shape), cotangent, axis,
                                reverse)
    grads = [None, _sum_to(grad, impulses.aval.shape) if ad.is_undefined_primal(impulses)
             else None]
    if state is not None:
        grads.append(_sum_to(grad_state, state.aval.shape) if ad.is_undefined_primal(state)
                     else None)
    return grads


def _by_jvp(composite):
    """A JVP rule differentiating ``composite`` (written with differentiable operations)."""
    def rule(primals, tangents, **params):
        tangents = tuple(ad.instantiate_zeros(t) for t in tangents)
        return jax.jvp(functools.partial(composite, **params), tuple(primals), tangents)
    return rule


def _forward_jvp(primals, tangents, *, axis, reverse, method):
    output = _bind(_forward_p, *primals, axis=axis, reverse=reverse, method=method)
    # Zero tangents stay symbolic: none is made, and none is transposed.
    present = tuple(type(t) is not ad.Zero for t in tangents) + (False,) * (3 - len(tangents))
    residuals = (primals[0], output, *primals[2:])
    tangent = _bind(_tangent_p, *residuals, *(t for t in tangents if type(t) is not ad.Zero),
                    axis=axis, reverse=reverse, method=method, has_state=len(primals) == 3,
                    present=present)
    return output, tangent


# jet's rules see plain Taylor coefficients since JAX 0.7 (``jet(..., factorial_scaled=False)``
# exists), derivatives (the coefficients times k!) before.
_JET_PLAIN = "factorial_scaled" in inspect.signature(jet.jet).parameters


def _forward_jet(primals, series, *, axis, reverse, method):
    """Taylor mode (``jax.experimental.jet``). The k-th coefficient is the recurrence again,
    with the same decays: ``h_k[t] = a[t] h_k[t-1] + x_k[t] + sum_{j=1}^k c(k, j) a_j[t]
    h_{k-j}[t-1]`` from the state's k-th coefficient, with ``c = 1`` for plain coefficients
    (the Cauchy product) and ``C(k, j)`` for derivatives (Leibniz's rule)."""
    decays, _, state = _with_state(primals, 2)
    decay_terms, impulse_terms, state_terms = _with_state(series, 2)
    params = {"axis": axis, "reverse": reverse, "method": method}
    outputs = [_bind(_forward_p, *primals, **params)]
    decay_terms = [decays, *decay_terms]
    states = [None] * (len(impulse_terms) + 1) if state is None else [state, *state_terms]
    for k in range(1, len(impulse_terms) + 1):
        impulses = impulse_terms[k - 1]
        for j in range(1, k + 1):
            weight = 1 if _JET_PLAIN else math.comb(k, j)
            impulses = impulses + weight * decay_terms[j] * _previous(
                outputs[k - j], states[k - j], axis, reverse)
        operands = (decays, impulses) + (() if state is None else (states[k],))
        outputs.append(_bind(_forward_p, *operands, **params))
    return outputs[0], outputs[1:]


def _by_jet(composite):
    """A Taylor-mode rule expanding ``composite`` (written with operations jet knows)."""
    options = {"factorial_scaled": False} if _JET_PLAIN else {}

    def rule(primals, series, **params):
        return jet.jet(functools.partial(composite, **params), tuple(primals), tuple(series),
                       **options)
    return rule


def _tangent_transpose(cotangent, *args, axis, reverse, method, has_state, present):
    count = 3 if has_state else 2
    residuals, linear = args[:count], args[count:]
    if any(ad.is_undefined_primal(r) for r in residuals):
        raise NotImplementedError("the tangent of cuscan's recurrence is linear in the "
                                  "tangents only")
    if type(cotangent) is ad.Zero:
        return [None] * len(args)
    # The VJP gives all three gradients; those of absent tangents take their residual's shape.
    given = iter(linear)
    slots = [next(given) if known else None for known in present]
    shapes = tuple(residual.shape if v is None else v.aval.shape if ad.is_undefined_primal(v)
                   else v.shape for v, residual in zip(slots[:count], residuals, strict=True))
    output = residuals[1]
    cotangent = jnp.broadcast_to(cotangent, output.shape)
    grads = _bind(_vjp_p, cotangent, *residuals, axis=axis, reverse=reverse, shapes=shapes)
    return [None] * count + [g if ad.is_undefined_primal(v) else None
                             for g, v in zip(grads, slots[:len(grads)], strict=True)
                             if v is not None]


def _vjp_transpose(cotangents, *args, axis, reverse, shapes):
    grad_output, residuals = args[0], args[1:]
    if not ad.is_undefined_primal(grad_output) or any(ad.is_undefined_primal(r)
                                                      for r in residuals):
        raise NotImplementedError("the VJP of cuscan's recurrence is linear in the cotangent "
                                  "only")
    present = tuple(type(c) is not ad.Zero for c in cotangents) + (False,) * (3 - len(shapes))
    if not any(present):
        return [None] * len(args)
    tangent = _bind(_tangent_p, *residuals, *(c for c in cotangents if type(c) is not ad.Zero),
                    axis=axis, reverse=reverse, method="auto", has_state=len(residuals) == 3,
                    present=present)
    return [_sum_to(tangent, grad_output.aval.shape)] + [None] * len(residuals)


def _batch_first(args, dims):
    """Every operand with its batch dimension first (size 1 where it has none)."""
    return [jnp.expand_dims(v, 0) if d is None else jnp.moveaxis(v, d, 0)
            for v, d in zip(args, dims, strict=True)]


def _batch_size(args, dims) -> int:
    return next(v.shape[d] for v, d in zip(args, dims, strict=True) if d is not None)


def _like(results, operands):
    """Each result in the sharding of its operand, where they have one shape (see
    `_whole`); None stays None."""
    return [_reshard(r, _sharding(v) if r is not None and v.shape == r.shape else None)
            for r, v in zip(results, operands, strict=True)]


def _forward_batch(args, dims, **params):
    args = _batch_first(args, dims)
    return _like([_bind(_forward_p, *args, **params)], args[1:2])[0], 0


def _tangent_batch(args, dims, **params):
    composite = functools.partial(_tangent_composite, **params)
    return jax.vmap(composite, in_axes=list(dims))(*args), 0


def _vjp_batch(args, dims, *, axis, reverse, shapes):
    size = _batch_size(args, dims)
    shapes = tuple((size, *shape) for shape in shapes)
    args = _batch_first(args, dims)
    if dims[0] is None and dims[2] is None:
        # Only the decays or the state are batched; the core reads the output at the full
        # shape, so it takes the batch dimension (the cotangent is then read with stride 0).
        args[2] = jnp.broadcast_to(args[2], (size, *args[2].shape[1:]))
    grads = _bind(_vjp_p, *args, axis=axis, reverse=reverse, shapes=shapes)
    return _like(grads, args[1:1 + len(grads)]), [0] * len(grads)


def _primitive(name: str, impl, abstract, *, jvp, transpose, batch, taylor, portable,
               multiple_results=False):
    primitive = Primitive(name)
    primitive.multiple_results = multiple_results
    # Eagerly, through a cached compilation: JAX's eager dispatch of the callback
    # otherwise costs more than the recurrence itself on small inputs.
    compiled = functools.cache(lambda params: jax.jit(functools.partial(impl, **dict(params))))
    primitive.def_impl(lambda *args, **params: compiled(tuple(sorted(params.items())))(*args))
    primitive.def_abstract_eval(abstract)
    mlir.register_lowering(primitive, _lowering(impl, portable, multiple_results))
    ad.primitive_jvps[primitive] = jvp
    ad.primitive_transposes[primitive] = transpose
    batching.primitive_batchers[primitive] = batch
    jet.jet_rules[primitive] = taylor
    return primitive


def _tangent_abstract(*avals, **params):
    result = jax.eval_shape(functools.partial(_tangent_composite, **params), *avals)
    return _result(result.shape, result.dtype, avals)


_forward_p = _primitive("cuscan_linear_recurrence", _forward_impl, _forward_abstract,
                        jvp=_forward_jvp, transpose=_forward_transpose, batch=_forward_batch,
                        taylor=_forward_jet, portable=_forward_scan)
_tangent_p = _primitive("cuscan_linear_recurrence_tangent", _tangent_composite,
                        _tangent_abstract, jvp=_by_jvp(_tangent_composite),
                        transpose=_tangent_transpose, batch=_tangent_batch,
                        taylor=_by_jet(_tangent_composite), portable=_tangent_composite)
_vjp_p = _primitive("cuscan_linear_recurrence_vjp", _vjp_impl, _vjp_abstract,
                    jvp=_by_jvp(_vjp_composite), transpose=_vjp_transpose, batch=_vjp_batch,
                    taylor=_by_jet(_vjp_composite), portable=_vjp_composite,
                    multiple_results=True)


# ---- a linear map on the host --------------------------------------------------------------
#
# `_linear_p(x, f=...)`: ``f(x)`` for ``f`` a linear map of NumPy arrays along an axis counted
# from the end (cuscan.signal's filters on the CPU, `_filters._OnHost`), called back on the
# host. Linear: its JVP is itself on the tangent and its transpose is ``f.adjoint``, so
# derivatives of any order follow; batching puts the batch dimension first. Programs for
# ``jax.export`` take ``f.recurrences``, in XLA's own operations.


@functools.lru_cache(maxsize=64)
def _linear_buffers(f):
    """``f`` as a buffer callback (cached: one compiled callback per map)."""

    def callback(ctx, out, x):
        np.copyto(_view(out, writeable=True), f(_view(x)))

    return callback


def _linear_callback(x, *, f):
    return buffer_callback(_linear_buffers(f), jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _linear_portable(x, *, f):
    return f.recurrences(x)


def _linear_batch(args, dims, *, f):
    return _bind(_linear_p, jnp.moveaxis(args[0], dims[0], 0), f=f), 0


_linear_p = Primitive("cuscan_linear_on_host")
_linear_p.def_impl(lambda x, *, f: jnp.asarray(f(np.asarray(x))))
_linear_p.def_abstract_eval(lambda x, *, f: _result(x.shape, x.dtype, [x]))
mlir.register_lowering(_linear_p, _lowering(_linear_callback, _linear_portable, False))
ad.deflinear2(_linear_p, lambda cotangent, x, *, f: [_bind(_linear_p, cotangent, f=f.adjoint)])
batching.primitive_batchers[_linear_p] = _linear_batch


def linear_on_host(x, f):
    """``f(x)`` (`_linear_p`) on a JAX array on the CPU, eagerly or traced."""
    return _like([_bind(_linear_p, x, f=f)], [x])[0]


def _sum_to(grad, shape):
    """A broadcast operand's gradient: ``grad`` summed back to ``shape``."""
    axes = _api.summed_axes(grad.shape, shape)
    return jnp.sum(grad, axis=axes, keepdims=True).reshape(shape) if axes else grad.reshape(shape)


def _as_jax(operands: dict[str, object]) -> list[jax.Array | None]:
    """Every operand as a JAX array of the result dtype: Python scalars are weak, as in
    the core; sequences are converted as ``jnp.asarray`` converts them; float64 becomes
    float32 unless JAX's 64-bit mode is on."""
    operands = {name: v if v is None or _dtypes.is_python_scalar(v) or hasattr(v, "dtype")
                else _api.converted(jnp.asarray, name, v) for name, v in operands.items()}
    dtype = jax.dtypes.canonicalize_dtype(_dtypes.result_dtype(operands))
    # (jnp.asarray costs tens of microseconds even when it has nothing to do)
    return [v if v is None or (isinstance(v, jax.Array) and v.dtype == dtype)
            else jnp.asarray(v, dtype=dtype) for v in operands.values()]


def _with_rank(array, ndim: int):
    """``array`` with leading 1s up to ``ndim`` dimensions (so ``vmap`` adds a new axis)."""
    if array is None or array.ndim == ndim:
        return array
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
    if impulses.shape != shape:
        impulses = jnp.broadcast_to(impulses, shape)
    initial_state = _with_rank(initial_state, ndim - 1)
    # A negative axis stays right when vmap adds leading dimensions.
    operands = (decays, impulses) + (() if initial_state is None else (initial_state,))
    output = _bind(_forward_p, *operands, axis=axis - ndim, reverse=reverse, method=method)
    return _like([output], [impulses])[0]


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
    operands = [grad_output, _with_rank(decays, ndim), output]
    if initial_state is not None:
        operands.append(_with_rank(initial_state, ndim - 1))
    grads = _bind(_vjp_p, *operands, axis=axis - ndim, reverse=reverse,
                  shapes=tuple(v.shape for v in operands[1:]))
    grad_decays, grad_impulses, grad_state = _with_state(grads, 2)
    return tuple(_like([grad_decays.reshape(decays.shape), grad_impulses,
                        None if initial_state is None else
                        grad_state.reshape(initial_state.shape)],
                       [decays, output, initial_state]))
