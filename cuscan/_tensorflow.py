"""TensorFlow adapter: tf.Tensor in and out through DLPack, with a custom gradient.

Eager tensors are viewed as NumPy (CPU) or CuPy (GPU) arrays through DLPack
and results are handed back the same way, so nothing is copied. Inside a
``tf.function`` the work runs in a ``tf.py_function``, or, where a graph cannot
call back into Python (XLA, SavedModels), as a scan in TensorFlow's own
operations; ``tf.custom_gradient`` makes it differentiable with the core's VJP
(TensorFlow's complex convention is the core's). Imported only when a
TensorFlow tensor is passed.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from cuscan import _api, _backend, _dtypes

# TensorFlow's own allocator aligns to 64 bytes; outputs it is handed are aligned alike.
_ALIGNMENT = 64
_BFLOAT16_STORAGE = {tf.bfloat16: tf.uint16}


def _on_gpu(tensor: tf.Tensor) -> bool:
    return "GPU" in tensor.device.upper()


def to_array(tensor: tf.Tensor):
    """The NumPy (CPU) or CuPy (GPU) array viewing an eager tensor's memory.

    On a GPU the caller must first wait for TensorFlow's pending work (`_to_arrays`).
    """
    bfloat16 = tensor.dtype == tf.bfloat16
    if bfloat16:  # DLPack consumers lack bfloat16: cross as uint16 and view back
        tensor = tf.bitcast(tensor, tf.uint16)
    if _on_gpu(tensor):
        array = _backend.cupy_for("a TensorFlow tensor").from_dlpack(tensor)
    else:
        array = np.from_dlpack(tensor)
    if bfloat16:
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16)
    return array


def _to_arrays(tensors) -> list:
    """`to_array` of each tensor, all on one device; on a GPU, after waiting once for
    TensorFlow's pending work, since TensorFlow does not expose its stream.

    Tensors on different devices (a Python scalar or a NumPy array converted on the host
    beside GPU tensors, say) are copied to one, as TensorFlow's own operations copy them:
    the first GPU's, if any tensor is on a GPU.
    """
    if len({t.device for t in tensors}) > 1:
        target = next((t for t in tensors if _on_gpu(t)), tensors[0]).device
        with tf.device(target):
            tensors = [t if t.device == target else tf.identity(t) for t in tensors]
    if any(_on_gpu(t) for t in tensors):
        tf.test.experimental.sync_devices()
    return [to_array(t) for t in tensors]


def from_array(array) -> tf.Tensor:
    """The tensor viewing an array's memory (copied only if TensorFlow could not take it)."""
    if not isinstance(array, np.ndarray):  # CuPy: finish before TensorFlow reads
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    bfloat16 = _dtypes.is_bfloat16(array.dtype)
    if bfloat16:
        array = array.view(np.uint16)
    pointer = array.ctypes.data if isinstance(array, np.ndarray) else array.data.ptr
    if array.flags.c_contiguous and array.flags.writeable and pointer % _ALIGNMENT == 0:
        tensor = tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    else:
        tensor = tf.constant(array if isinstance(array, np.ndarray) else array.get())
    return tf.bitcast(tensor, tf.bfloat16) if bfloat16 else tensor


def _empty(shape: tuple[int, ...], dtype: np.dtype, like):
    """An uninitialised C-contiguous array whose data is aligned for TensorFlow."""
    if not isinstance(like, np.ndarray):
        return type(like)(shape, dtype)  # CuPy's pool aligns to 512 bytes
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + _ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(shape)


def _compiled_by_xla() -> bool:
    """Whether the graph being traced is compiled by XLA (TensorFlow's own test; False if
    it cannot be asked, and XLA's own error follows)."""
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - TensorFlow moved it
        return False
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def _in_save_context() -> bool:
    """Whether functions are being traced for a SavedModel (False if it cannot be asked)."""
    try:
        from tensorflow.python.saved_model import save_context
    except ImportError:  # pragma: no cover - TensorFlow moved it
        return False
    return save_context.in_save_context()


def _native() -> bool:
    """Whether the graph being traced cannot call back into Python: compiled by XLA, or
    traced for a SavedModel, which does not keep a py_function's Python code."""
    return not tf.executing_eagerly() and (_compiled_by_xla() or _in_save_context())


def _eager(function, inputs: list[tf.Tensor], outputs: list[tf.DType], shapes):
    """Run ``function`` on eager tensors: directly, or in a py_function inside a graph."""
    if tf.executing_eagerly():
        return function(*inputs)
    results = tf.py_function(function, inputs, outputs)
    for result, shape in zip(results, shapes, strict=True):
        result.set_shape(shape)
    return results


def _scan(decays, impulses, initial_state, axis: int, reverse: bool) -> tf.Tensor:
    """The recurrence in TensorFlow's own operations, for graphs that cannot call back into
    Python (`_native`): Hillis and Steele's scan, ceil(log2 T) steps of ``(a, x)[t] <-
    (a[t] a[t-s], a[t] x[t-s] + x[t])`` for s = 1, 2, 4, ..., with time moved first. Half
    precision accumulates in float32, as in the core. The products of the decays are in
    the carry dtype (`_dtypes.carry`), double precision for single-precision operands, and
    rounded to the accumulator where they meet ``x``: squared in single precision, the
    product over 2^k steps compounds 2^k roundings, which over 2^18 steps of unit complex64
    decays put the result 4e-3 of its RMS off."""
    dtype = impulses.dtype
    accumulator = tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype
    wide = tf.as_dtype(_dtypes.carry(np.dtype(accumulator.as_numpy_dtype)))
    shape = tf.broadcast_dynamic_shape(tf.shape(decays), tf.shape(impulses))
    rank = max(decays.shape.rank, impulses.shape.rank)
    order = [axis, *(d for d in range(rank) if d != axis)]
    a, x = (tf.transpose(tf.cast(tf.broadcast_to(v, shape), cast), order)
            for v, cast in ((decays, wide), (impulses, accumulator)))
    if reverse:
        a, x = tf.reverse(a, [0]), tf.reverse(x, [0])
    if initial_state is not None:  # h[-1] enters as the first step's impulse: x + a * state
        state = tf.broadcast_to(tf.cast(initial_state, accumulator), tf.shape(x)[1:])
        x = tf.concat([x[:1] + tf.cast(a[:1], accumulator) * state[tf.newaxis], x[1:]], 0)
    steps = tf.shape(x)[0]
    time = tf.reshape(tf.range(steps), [-1] + [1] * (rank - 1))

    def step(shift, a, x):
        earlier = time >= shift
        source = tf.maximum(tf.range(steps) - shift, 0)
        x_next = x + tf.cast(a, accumulator) * tf.where(earlier, tf.gather(x, source),
                                                        tf.zeros([], accumulator))
        a_next = a * tf.where(earlier, tf.gather(a, source), tf.ones([], wide))
        return shift * 2, tf.ensure_shape(a_next, a.shape), tf.ensure_shape(x_next, x.shape)

    if x.shape[0] is not None:  # a known length: the steps unrolled
        shift = 1
        while shift < x.shape[0]:
            shift, a, x = step(shift, a, x)
    else:  # (a bound on the steps, which XLA's gradients of the loop need)
        bound = tf.cast(tf.math.ceil(tf.math.log(tf.cast(tf.maximum(steps, 2), tf.float64))
                                     / np.log(2.0)), tf.int32)  # at least 1
        _, _, x = tf.while_loop(lambda shift, a, x: shift < steps, step,
                                (tf.constant(1), a, x), maximum_iterations=bound)
    if reverse:
        x = tf.reverse(x, [0])
    inverse = [order.index(d) for d in range(rank)]
    return tf.cast(tf.transpose(x, inverse), dtype)


def _forward(decays, impulses, initial_state, axis, reverse, method):
    if _native():
        return _scan(decays, impulses, initial_state, axis, reverse)
    dtype = impulses.dtype

    def run(*tensors):
        a, x, *state = _to_arrays(tensors)
        out = _empty(np.broadcast_shapes(a.shape, x.shape), x.dtype, x)
        _api.forward(a, x, state[0] if state else None, axis=axis, reverse=reverse,
                     method=method, out=out)
        return [from_array(out)]

    inputs = [decays, impulses] + ([] if initial_state is None else [initial_state])
    shape = tf.broadcast_static_shape(decays.shape, impulses.shape)
    return _eager(run, inputs, [dtype], [shape])[0]


def _backward(grad_output, decays, output, initial_state, axis, reverse):
    if _native():
        return _differentiable_vjp(grad_output, decays, output, initial_state, axis, reverse)

    def run(*tensors):
        grad, a, h, *state = _to_arrays(tensors)
        state = state[0] if state else None
        out = [_empty(v.shape, h.dtype, h) for v in (a, h, state) if v is not None]
        if state is None:
            out.append(None)
        _api.backward(grad, a, h, state, axis=axis, reverse=reverse, out=tuple(out))
        return [from_array(g) for g in out if g is not None]

    inputs = [grad_output, decays, output] + ([] if initial_state is None else [initial_state])
    targets = inputs[1:]
    return _eager(run, inputs, [output.dtype] * len(targets), [t.shape for t in targets])


def _sum_to(grad: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """``grad`` summed to the shape of ``target``, which it broadcasts from; where either
    shape is not known when tracing, the axes are found when the graph runs."""
    if not (grad.shape.is_fully_defined() and target.shape.is_fully_defined()):
        axes, _ = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(target), s1=tf.shape(grad))
        return tf.reshape(tf.reduce_sum(grad, axes), tf.shape(target))
    axes = list(_api.summed_axes(tuple(grad.shape), tuple(target.shape)))
    return tf.reshape(tf.reduce_sum(grad, axes, keepdims=True), target.shape) if axes else grad


def _along(tensor: tf.Tensor, axis: int, start=None, stop=None) -> tf.Tensor:
    return tensor[(slice(None),) * axis + (slice(start, stop),)]


def _differentiable_vjp(grad_output, decays, output, initial_state, axis: int, reverse: bool):
    """The VJP written with differentiable operations, for tapes that differentiate the
    gradient again (second order, and forward mode, which TensorFlow derives from it).

    ``g[t] = grad_output[t] + conj(decays[t+1]) * g[t+1]`` is the recurrence run
    the other way with the decays shifted one step; ``grad_decays[t] =
    conj(h[t-1]) * g[t]`` with ``h[-1]`` the initial state; ``grad_state =
    conj(decays[0]) * g[0]`` (mirrored when ``reverse``), the decays' and the state's
    summed back to their shapes.
    """
    shape = tf.shape(output)
    length = shape[axis]
    target, decays = decays, tf.broadcast_to(decays, shape)
    # One step of zeros (none if there are no steps, which the slices below cannot tell
    # apart), shaped by a slice where XLA must know shapes when compiling.
    zero = tf.zeros_like(_along(output, axis, 0, 1))
    if initial_state is None:
        first = zero
    else:
        first = tf.broadcast_to(initial_state, tf.concat([shape[:axis], shape[axis + 1:]], 0))
        first = tf.expand_dims(first, axis)
    if reverse:  # decays one step later in the recurrence's direction, states one earlier
        following = _along(tf.concat([zero, decays], axis), axis, None, length)
        previous = _along(tf.concat([output, first], axis), axis, 1, None)
    else:
        following = _along(tf.concat([decays, zero], axis), axis, 1, None)
        previous = _along(tf.concat([first, output], axis), axis, None, length)
    grad = _differentiable(tf.math.conj(following), grad_output, None, axis, not reverse, "auto")
    grads = [_sum_to(tf.math.conj(previous) * grad, target), grad]
    if initial_state is not None:
        ends = (-1, None) if reverse else (0, 1)
        grad_state = tf.math.conj(_along(decays, axis, *ends)) * _along(grad, axis, *ends)
        grads.append(_sum_to(tf.reduce_sum(grad_state, axis), initial_state))
    return grads


def _recording() -> bool:
    """Whether a tape or forward accumulator may record (TensorFlow's own test; True
    if it cannot be asked)."""
    try:
        from tensorflow.python.eager import record
    except ImportError:  # pragma: no cover - TensorFlow moved it
        return True
    return record.could_possibly_record()


def _tangents(tensors) -> bool:
    """Whether a forward accumulator carries tangents of any of ``tensors``."""
    try:
        from tensorflow.python import pywrap_tfe

        return bool(pywrap_tfe.TFE_Py_PackJVPs(list(tensors))[1])
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - TensorFlow moved it
        return False


def _differentiable(decays, impulses, initial_state, axis, reverse, method):
    inputs = [t for t in (decays, impulses, initial_state) if t is not None]
    if not tf.executing_eagerly() and _tangents(inputs):
        raise NotImplementedError(
            "forward-mode AD (tf.autodiff.ForwardAccumulator) through cuscan works eagerly but "
            "not inside tf.function, where TensorFlow cannot derive it from a Python gradient; "
            "run the accumulator eagerly, or use GradientTape")
    if tf.executing_eagerly() and not _recording():
        # Nothing can ask for a gradient: the forward alone, without custom_gradient's
        # bookkeeping (two thirds of the cost of a small eager call).
        return _forward(decays, impulses, initial_state, axis, reverse, method)

    @tf.custom_gradient
    def recurrence(decays, impulses, *state):
        initial_state = state[0] if state else None
        output = _forward(decays, impulses, initial_state, axis, reverse, method)

        def gradient(grad_output):
            if _recording():
                # `output` is not on the tapes (TensorFlow records an identity of it), so
                # the states the gradient reads are recomputed where the tapes see them.
                recorded = _differentiable(decays, impulses, initial_state, axis, reverse, method)
                grads = _differentiable_vjp(grad_output, decays, recorded, initial_state, axis,
                                            reverse)
            else:
                grads = _backward(grad_output, decays, output, initial_state, axis, reverse)
            grad_impulses = _sum_to(grads[1], impulses)
            return [grads[0], grad_impulses, *grads[2:]]

        return output, gradient

    return recurrence(decays, impulses, *([] if initial_state is None else [initial_state]))


def linear_on_host(x: tf.Tensor, f) -> tf.Tensor:
    """``f(x)`` for ``f`` a linear map of NumPy arrays (cuscan.signal's filters on the CPU) on
    a CPU tensor, eagerly or in a py_function, differentiated through its transpose
    ``f.adjoint`` (by this function again, so to any order)."""

    def run(tensor):
        return [from_array(f(to_array(tensor)))]

    def apply(x):
        return _eager(run, [x], [x.dtype], [x.shape])[0]

    if tf.executing_eagerly() and not _recording():
        return apply(x)

    @tf.custom_gradient
    def linear(x):
        return apply(x), lambda grad: linear_on_host(grad, f.adjoint)

    return linear(x)


def _numeric(dtype: tf.DType) -> bool:
    return not dtype.is_quantized and (dtype.is_floating or dtype.is_complex or dtype.is_integer
                                       or dtype.is_bool)


def check(name: str, value) -> None:
    """Refuse a sparse or ragged tensor, which cuscan cannot compute on."""
    if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
        how = "tf.sparse.to_dense" if isinstance(value, tf.SparseTensor) else ".to_tensor()"
        raise TypeError(f"`{name}` is a {type(value).__name__}; cuscan needs dense tensors "
                        f"(convert with {how})")


def constant(name: str, value) -> np.ndarray:
    """The values of ``value`` (a tensor or variable), for a constant that nothing
    differentiates, such as cuscan.signal's filter coefficients: inside `tf.function` those
    TensorFlow knows when tracing (`tf.get_static_value`). Refused where a tape or a forward
    accumulator follows it, whose derivatives would be lost, or where its values are not
    known until the function runs, or where they are not numbers cuscan takes."""
    check(name, value)
    tensor = tf.convert_to_tensor(value)  # a variable read where a watching tape sees it
    if not _numeric(tensor.dtype):  # quantized: their stored integers are not their values
        raise _dtypes.unsupported(name, tensor.dtype.name)
    if _recording() and (_tangents([tensor]) or _watched(tensor)):
        raise TypeError(f"`{name}` is watched by a GradientTape or ForwardAccumulator, but "
                        "filter coefficients are constants to cuscan.signal: pass "
                        f"`tf.stop_gradient({name})`")
    values = tf.get_static_value(tensor)
    if values is None:
        what = ("is a variable, whose value inside tf.function is read when the function runs"
                if isinstance(value, tf.Variable) else "has no values while tf.function traces it")
        raise TypeError(f"`{name}` {what}, but filter coefficients are designed from their "
                        "values when it is traced: pass NumPy arrays, or tensors made outside "
                        "the function (or with tf.constant inside it)")
    return np.asarray(values)


def sizes_unknown(values) -> bool:
    """Whether any of ``values`` is a tensor being traced with a dimension of unknown size
    (None, as Keras' batch) and a known rank."""
    return not tf.executing_eagerly() and any(
        isinstance(v, (tf.Tensor, tf.Variable)) and v.shape.rank is not None
        and None in v.shape.as_list() for v in values)


# An unknown length of the signal is set to this (and one more) in the eager calls that
# `when_run` makes to learn a call's results.
_PROBE_LENGTH = 4096


def when_run(function, bound, data: tuple[str, ...], state=None):
    """``function`` called with the arguments ``bound`` inside tf.function where tensors of
    some sizes unknown (`sizes_unknown`) are among them: run as it runs eagerly, in a
    tf.py_function, where every size is known (or, where the graph cannot call back into
    Python, `_native_call`). Differentiable with respect to the arguments named ``data``
    (the others are constants, as `constant` reads them), to any order, by the eager call's
    own gradients.

    The results' dtypes and static shapes come from eager calls on tensors of 0.5 with the
    unknown sizes set to those other tensors know at the same place, or to 1 and to 2 (an
    unknown length of the first, the signal, along ``axis``, to 4,096 and 4,097): sizes on
    which the two agree are known. An initial state, the second of ``data``, takes its
    unknown sizes from ``state(arguments, shape)`` where given: the shape it must have for a
    signal of ``shape`` (such as its length along ``axis``, the filter's order), or None.
    """
    bound.apply_defaults()
    if _native():
        return _native_call(function, bound, data)
    arguments = dict(bound.arguments)
    for name, value in arguments.items():
        if name not in data and isinstance(value, (tf.Tensor, tf.Variable)):
            arguments[name] = constant(name, value)
    names = [n for n in data if isinstance(arguments.get(n), (tf.Tensor, tf.Variable))]
    tensors = [tf.convert_to_tensor(arguments[n]) for n in names]
    if any(t.shape.rank is None for t in tensors):
        return function(*bound.args, **bound.kwargs)  # its own error for the rank
    if _tangents(tensors):
        raise NotImplementedError(
            "forward-mode AD (tf.autodiff.ForwardAccumulator) through cuscan.signal works "
            "eagerly but not inside tf.function (where every size is known, lfiltic alone takes "
            "it), since TensorFlow cannot derive it from a Python gradient; run the accumulator "
            "eagerly, or use GradientTape")

    def call(*values):
        result = function(**{**arguments, **dict(zip(names, values, strict=True))})
        return list(result) if isinstance(result, tuple) else [result]

    # The sizes the tensors know, by position from the last (as they broadcast): an unknown
    # size takes one another tensor knows there, other than 1.
    known = {}
    for tensor in tensors:
        for k, n in enumerate(reversed(tensor.shape.as_list())):
            if n not in (None, 1):
                known[k] = n
    axis = arguments.get("axis")

    def probe(tensor, size: int, signal: bool, wanted=None):
        shape = tensor.shape.as_list()
        if wanted is not None and len(wanted) == len(shape):  # a state, for the signal's probe
            return tf.fill([w if n is None else n for n, w in zip(shape, wanted, strict=True)],
                           tf.cast(0.5, tensor.dtype))
        time = axis % len(shape) if signal and isinstance(axis, int) and shape else None
        return tf.fill([n if n is not None else _PROBE_LENGTH + size - 1 if k == time
                        else known.get(len(shape) - 1 - k, size) for k, n in enumerate(shape)],
                       tf.cast(0.5, tensor.dtype))

    with_state = state is not None and names[:2] == list(data[:2])
    probes = []
    with tf.init_scope():  # eagerly
        for size in (1, 2):
            try:
                values = [probe(tensors[0], size, True)]
                wanted = state(arguments, values[0].shape.as_list()) if with_state else None
                values += [probe(t, size, False, wanted if k == 1 else None)
                           for k, t in enumerate(tensors[1:], 1)]
                probes.append(call(*values))
            except Exception:
                if not probes:
                    raise
    if len(probes) == 2:
        shapes = [[m if m == n else None for m, n in zip(a.shape, b.shape, strict=True)]
                  for a, b in zip(*probes, strict=True)]
    else:  # sizes of 2 met known ones: those of 1 may stand for unknown sizes
        shapes = [[None if n in (1, _PROBE_LENGTH) else n for n in r.shape] for r in probes[0]]
    results = _in_py_function(call, tensors, [r.dtype for r in probes[0]], shapes)
    return tuple(results) if len(results) > 1 else results[0]  # no filter returns a 1-tuple


def _native_call(function, bound, data: tuple[str, ...]):
    """`when_run`'s call where the graph cannot call back into Python (XLA, SavedModels):
    the filters' own TensorFlow operations, planned on the sizes, which take unknown ones
    but the signal's length (the first of ``data``, along ``axis``); a clear error where
    they cannot."""

    def refused(why: str) -> ValueError:
        return ValueError(
            f"cuscan.signal.{function.__name__} inside tf.function, where the graph is "
            "compiled by XLA or saved, runs TensorFlow's operations, planned on the sizes "
            f"(elsewhere it runs the call in a tf.py_function); {why}. Give the tf.function "
            "an input_signature with sizes, or do not compile it with XLA (Keras compiles "
            "with XLA on a GPU unless model.compile(jit_compile=False))")

    signal, axis = bound.arguments[data[0]], bound.arguments.get("axis")
    if not (isinstance(axis, int) and -signal.shape.rank <= axis < signal.shape.rank):
        return function(*bound.args, **bound.kwargs)  # its own error for the axis
    if signal.shape[axis] is None:
        raise refused("the signal's length must be known")
    try:
        return function(*bound.args, **bound.kwargs)
    except (TypeError, ValueError) as error:
        raise refused(f"with sizes unknown it failed: {error}") from error


def _in_py_function(call, tensors: list, dtypes: list, shapes: list) -> list:
    """``call(*tensors)``, a list of tensors of ``dtypes``, run eagerly in a tf.py_function,
    its results given ``shapes``; differentiable with respect to the floating-point
    ``tensors`` by ``call``'s gradients under an eager tape, computed the same way (so to
    any order)."""

    @tf.custom_gradient
    def run(*tensors):
        results = _eager(call, list(tensors), dtypes, shapes)

        def gradient(*upstream):
            wrt = [k for k, t in enumerate(tensors) if t.dtype.is_floating or t.dtype.is_complex]
            upstream = [tf.zeros_like(r) if u is None else u
                        for r, u in zip(results, upstream, strict=True)]

            def vjp(*values):
                inputs, cotangents = list(values[:len(tensors)]), list(values[len(tensors):])
                with tf.GradientTape() as tape:
                    tape.watch([inputs[k] for k in wrt])
                    outputs = call(*inputs)
                return tape.gradient(outputs, [inputs[k] for k in wrt], cotangents,
                                     unconnected_gradients=tf.UnconnectedGradients.ZERO)

            grads = _in_py_function(vjp, [*tensors, *upstream], [tensors[k].dtype for k in wrt],
                                    [tensors[k].shape for k in wrt])
            full = [None] * len(tensors)
            for k, grad in zip(wrt, grads, strict=True):
                full[k] = grad
            return full

        return results, gradient

    return list(run(*tensors))


def _watched(tensor: tf.Tensor) -> bool:
    """Whether a gradient tape records operations on ``tensor`` (TensorFlow's own test;
    True if it cannot be asked)."""
    try:
        from tensorflow.python.eager import record
    except ImportError:  # pragma: no cover - TensorFlow moved it
        return True
    return bool(record.should_record_backprop([tensor]))


def _as_tensors(operands: dict[str, object]) -> list[tf.Tensor | None]:
    """Operands as tensors of the result dtype (Python scalars are weak, as in the core)."""
    for name, value in operands.items():
        check(name, value)
    tensors = {name: None if v is None or _dtypes.is_python_scalar(v)
               else _api.converted(tf.convert_to_tensor, name, v)
               for name, v in operands.items()}
    for name, t in tensors.items():
        if t is not None and not _numeric(t.dtype):
            raise _dtypes.unsupported(name, t.dtype.name)
    stand_ins = {name: operands[name] if t is None else np.empty(0, t.dtype.as_numpy_dtype)
                 for name, t in tensors.items()}
    dtype = tf.as_dtype(_dtypes.result_dtype(stand_ins))
    return [None if v is None else tf.constant(v, dtype) if t is None else _cast(t, dtype)
            for v, t in zip(operands.values(), tensors.values(), strict=True)]


def _cast(tensor: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """``tensor`` in ``dtype``; a real tensor made complex by tf.complex, whose gradient is
    the real part (tf.cast's warns that it discards the imaginary part)."""
    if dtype.is_complex and not tensor.dtype.is_complex:
        real = tf.cast(tensor, dtype.real_dtype)
        return tf.complex(real, tf.zeros_like(real))
    return tf.cast(tensor, dtype)


def _shape(tensor: tf.Tensor | None):
    """The static shape as a tuple; unknown dimensions are checked when the graph runs."""
    if tensor is None:
        return None
    if tensor.shape.rank is None:
        raise ValueError("cuscan needs tensors of known rank inside tf.function; got a tensor "
                         "of unknown rank (give the tf.function an input_signature with ranks)")
    return tuple(1 if n is None else n for n in tensor.shape)


def linear_recurrence(decays, impulses, initial_state, *, axis, reverse, method):
    """``cuscan.linear_recurrence`` for TensorFlow tensors (called by the front door)."""
    decays, impulses, initial_state = _as_tensors(
        {"decays": decays, "impulses": impulses, "initial_state": initial_state})
    _, axis = _api.forward_shape(_shape(decays), _shape(impulses), _shape(initial_state), axis)
    return _differentiable(decays, impulses, initial_state, axis, reverse, method)


def linear_recurrence_vjp(grad_output, decays, output, initial_state, *, axis, reverse):
    """``cuscan.linear_recurrence_vjp`` for TensorFlow tensors (called by the front door)."""
    grad_output, decays, output, initial_state = _as_tensors(
        {"grad_output": grad_output, "decays": decays, "output": output,
         "initial_state": initial_state})
    _, axis = _api.backward_shape(_shape(grad_output), _shape(decays), _shape(output),
                                  _shape(initial_state), axis)
    if _recording():
        # A tape may differentiate the VJP itself: written with differentiable operations.
        grads = _differentiable_vjp(grad_output, decays, output, initial_state, axis, reverse)
    else:
        grads = _backward(grad_output, decays, output, initial_state, axis, reverse)
    return grads[0], grads[1], grads[2] if initial_state is not None else None
