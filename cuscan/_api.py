"""The public functions: docstrings, validation and normalisation, then a backend."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import numpy as np

from cuscan import _backend, _dtypes
from cuscan._scratch import Scratch

METHODS = ("auto", "serial", "parallel")

Method = Literal["auto", "serial", "parallel"]
ArrayLike = Any
Decorated = TypeVar("Decorated", bound=Callable[..., Any])  # a decorator keeps its type


def public(function: Decorated) -> Decorated:
    """Mark a public function to be called as it is by TensorFlow's AutoGraph.

    Inside ``tf.function``, AutoGraph otherwise rewrites the source of every
    function it meets, cuscan's included, which costs most of a trace and
    gains nothing: TensorFlow tensors reach the kernels through
    ``tf.py_function``. The attribute is the one
    ``tf.autograph.experimental.do_not_convert`` sets on its wrappers; the
    function itself is returned unchanged.
    """
    function.autograph_info__ = {}
    return function


@public
def linear_recurrence(
    decays: ArrayLike,
    impulses: ArrayLike,
    initial_state: ArrayLike | None = None,
    *,
    axis: int = 0,
    reverse: bool = False,
    method: Method = "auto",
) -> Any:
    """Compute the linear recurrence ``h[t] = decays[t] * h[t-1] + impulses[t]``.

    Parameters
    ----------
    decays : array_like
        Multipliers of the previous state. Broadcasts against `impulses`: a
        scalar or a time-invariant ``(D,)`` array against ``(T, D)`` impulses
        is read in place, never copied.
    impulses : array_like
        Inputs added at each step.
    initial_state : array_like, optional
        The state before the first step, ``h[-1]``; broadcasts to the result's
        shape with `axis` removed. Zero when omitted.
    axis : int, default 0
        The time axis of the broadcast shape.
    reverse : bool, default False
        Run from the last element to the first:
        ``h[t] = decays[t] * h[t+1] + impulses[t]``, with `initial_state` as
        ``h[T]``.
    method : {"auto", "serial", "parallel"}, default "auto"
        ``"serial"`` steps through time; ``"parallel"`` is the chunked scan
        (see Notes); ``"auto"`` picks the faster for the shape. All agree to
        within rounding.

    Returns
    -------
    h : ndarray or Tensor
        The states, with the broadcast shape of `decays` and `impulses`, the
        dtype NumPy promotion gives them and `initial_state` (bool and integer
        inputs give float64), of the inputs' library (NumPy, CuPy, or torch,
        JAX or TensorFlow, differentiable) and on their device.

    Raises
    ------
    ValueError
        If the shapes do not broadcast, the broadcast shape has no axis,
        `initial_state` does not broadcast to the state shape, `method` is
        unknown, or an input is a ragged list or tuple.
    numpy.exceptions.AxisError
        If `axis` is out of range.
    TypeError
        If an input has an unsupported dtype (object, string, datetime...),
        arrays from different libraries or devices are mixed, `axis` is not an
        integer or `reverse` not a bool.

    Notes
    -----
    Supported dtypes are float16, bfloat16 (from ``ml_dtypes``), float32,
    float64, complex64 and complex128. Half types are accumulated in float32
    and rounded once when stored.

    The parallel method is Algorithm 1 of [1]_: the sequence is cut into
    chunks, each chunk is reduced to the product of its decays and its final
    state from zero, the chunk carries are scanned (recursively, with the same
    algorithm), and each chunk is re-run from its carry. Within a chunk the
    arithmetic is exactly the serial recurrence's, so a decay of 0 resets the
    state and NaN or infinity propagates as it does serially; carries only
    differ from the serial loop by rounding. On the CPU, short scans of narrow
    steps take Hillis and Steele's scan [2]_ instead, re-running serially any
    channel whose result is not finite, and long ones run over segments of
    time that stay in cache (``docs/algorithm.md``).

    References
    ----------
    .. [1] E. Martin and C. Cundy, "Parallelizing Linear Recurrent Neural Nets
       Over Sequence Length", ICLR 2018.
    .. [2] W. D. Hillis and G. L. Steele, "Data Parallel Algorithms",
       Communications of the ACM 29(12), 1986.

    Examples
    --------
    >>> import numpy as np
    >>> import cuscan
    >>> cuscan.linear_recurrence(0.5, [1.0, 1.0, 1.0, 1.0])
    array([1.   , 1.5  , 1.75 , 1.875])

    A decay per channel, time along axis 0, and a starting state:

    >>> decays = np.array([0.5, 1.0])
    >>> impulses = np.ones((3, 2))
    >>> cuscan.linear_recurrence(decays, impulses, initial_state=[4.0, 0.0])
    array([[3.  , 1.  ],
           [2.5 , 2.  ],
           [2.25, 3.  ]])

    Running backwards:

    >>> cuscan.linear_recurrence(0.5, [1.0, 1.0, 1.0], reverse=True)
    array([1.75, 1.5 , 1.  ])
    """
    check_method(method)
    reverse = check_reverse(reverse)
    operands = {"decays": decays, "impulses": impulses, "initial_state": initial_state}
    check_given(operands)
    lib = _backend.which(operands)
    adapter = _backend.adapter_of(lib)
    if adapter is not None:
        return adapter.linear_recurrence(decays, impulses, initial_state, axis=axis,
                                         reverse=reverse, method=method)
    return forward(decays, impulses, initial_state, axis=axis, reverse=reverse, method=method,
                   backend=_backend.backend_of(lib))


def forward(decays, impulses, initial_state=None, *, axis=0, reverse=False, method="auto",
            out=None, backend=None):
    """`linear_recurrence` on NumPy or CuPy arrays, into ``out`` when given (for adapters);
    on ``backend`` when the caller has found it."""
    operands = {"decays": decays, "impulses": impulses, "initial_state": initial_state}
    backend = backend or _backend.select(operands)
    dtype, arrays = _as_arrays(backend, operands)
    decays, impulses, initial_state = arrays["decays"], arrays["impulses"], arrays["initial_state"]
    shape, axis = forward_shape(decays.shape, impulses.shape,
                                None if initial_state is None else initial_state.shape, axis)
    xp = backend.xp
    out = _output(xp, out, shape, dtype)
    if math.prod(shape) == 0:
        return out
    state = None if initial_state is None else _state(xp, initial_state, shape, axis)
    views = [_broadcast(xp, decays, shape), _broadcast(xp, impulses, shape), out]
    if reverse:
        views = [xp.flip(v, axis) for v in views]
    backend.forward(views[0], views[1], state, views[2], axis, method)
    return out


@public
def linear_recurrence_vjp(
    grad_output: ArrayLike,
    decays: ArrayLike,
    output: ArrayLike,
    initial_state: ArrayLike | None = None,
    *,
    axis: int = 0,
    reverse: bool = False,
) -> tuple[Any, Any, Any | None]:
    """Vector-Jacobian product of :func:`linear_recurrence`.

    Parameters
    ----------
    grad_output : array_like
        Gradient of the loss with respect to the output ``h``; same shape as
        `output`.
    decays : array_like
        The decays of the forward call; broadcasts to `output`'s shape.
    output : array_like
        The forward result ``h``.
    initial_state : array_like, optional
        The initial state of the forward call, if one was given.
    axis : int, default 0
        The time axis.
    reverse : bool, default False
        Whether the forward call ran in reverse.

    Returns
    -------
    grad_decays : ndarray
        Gradient with respect to `decays`, summed back to its shape.
    grad_impulses : ndarray
        Gradient with respect to the impulses, with `output`'s shape. Sum it
        yourself if the impulses were broadcast.
    grad_initial_state : ndarray or None
        Gradient with respect to `initial_state`, summed back to its shape;
        None when `initial_state` is None.

    Raises
    ------
    ValueError
        If `grad_output` and `output` differ in shape, `decays` or
        `initial_state` do not broadcast to it, there is no time axis, or an
        input is a ragged list or tuple.
    numpy.exceptions.AxisError
        If `axis` is out of range.
    TypeError
        For unsupported dtypes, mixed libraries, a non-integer `axis` or a
        non-bool `reverse`, as in :func:`linear_recurrence`.

    Notes
    -----
    These are the backpropagation equations of [1]_, section 2.2: with
    ``g = grad_impulses``,

    - ``g[t] = grad_output[t] + conj(decays[t+1]) * g[t+1]``, a linear
      recurrence run in reverse, and ``g[T-1] = grad_output[T-1]``;
    - ``grad_decays[t] = conj(h[t-1]) * g[t]``, with ``h[-1] = initial_state``;
    - ``grad_initial_state = conj(decays[0]) * g[0]``.

    For complex dtypes this is PyTorch's convention: the gradient is the
    conjugate Wirtinger derivative, so for a real loss ``L`` it is
    ``dL/d(re z) + 1j * dL/d(im z)``. For real dtypes ``conj`` does nothing.

    The three gradients share one dtype: the promotion of the four inputs'
    dtypes, by the rules of :func:`linear_recurrence`. So real `decays` of a
    complex `output` get a complex `grad_decays`; keep its real part (as
    autodiff frameworks do) for the gradient of a real parameter.

    References
    ----------
    .. [1] E. Martin and C. Cundy, "Parallelizing Linear Recurrent Neural Nets
       Over Sequence Length", ICLR 2018.

    Examples
    --------
    >>> import numpy as np
    >>> import cuscan
    >>> h = cuscan.linear_recurrence(0.5, [1.0, 2.0, 3.0])
    >>> grad_decays, grad_impulses, _ = cuscan.linear_recurrence_vjp(
    ...     np.ones(3), 0.5, h)
    >>> grad_impulses
    array([1.75, 1.5 , 1.  ])
    >>> float(grad_decays)
    4.0
    """
    reverse = check_reverse(reverse)
    operands = {"grad_output": grad_output, "decays": decays, "output": output,
                "initial_state": initial_state}
    check_given(operands)
    lib = _backend.which(operands)
    adapter = _backend.adapter_of(lib)
    if adapter is not None:
        return adapter.linear_recurrence_vjp(grad_output, decays, output, initial_state,
                                             axis=axis, reverse=reverse)
    return backward(grad_output, decays, output, initial_state, axis=axis, reverse=reverse,
                    backend=_backend.backend_of(lib))


def backward(grad_output, decays, output, initial_state=None, *, axis=0, reverse=False,
             out=None, backend=None):
    """`linear_recurrence_vjp` on NumPy or CuPy arrays (for adapters); on ``backend`` when
    the caller has found it.

    ``out``, when given, is ``(grad_decays, grad_impulses, grad_initial_state)``:
    arrays each gradient is summed into (over the dimensions where theirs is 1
    or missing), the last None without an initial state.
    """
    operands = {"grad_output": grad_output, "decays": decays, "output": output,
                "initial_state": initial_state}
    backend = backend or _backend.select(operands)
    dtype, arrays = _as_arrays(backend, operands)
    grad_output, decays, output = arrays["grad_output"], arrays["decays"], arrays["output"]
    initial_state = arrays["initial_state"]
    state_shape = None if initial_state is None else initial_state.shape
    shape, axis = backward_shape(grad_output.shape, decays.shape, output.shape, state_shape, axis)
    if out is None:
        out = (decays.shape, shape, state_shape)
    else:
        out = tuple(out)
        if (out[2] is None) != (initial_state is None):
            raise ValueError("`out` must hold a gradient of `initial_state` exactly when one "
                             "is given")
    xp = backend.xp
    full_shapes = (shape, shape, shape[:axis] + shape[axis + 1:])
    with Scratch() as scratch:  # for the NumPy backend's gradients summed after
        full = tuple(None if target is None else
                     _full(xp, target, full_shape, dtype, scratch if xp is np else None)
                     for target, full_shape in zip(out, full_shapes, strict=True))
        state = None if initial_state is None else _state(xp, initial_state, shape, axis)
        grad_decays, grad_impulses, grad_state = full
        if math.prod(shape) > 0:
            views = [_broadcast(xp, grad_output, shape), _broadcast(xp, decays, shape), output,
                     grad_decays, grad_impulses]
            if reverse:
                views = [xp.flip(v, axis) for v in views]
            go, a, h, ga, gx = views
            backend.backward(go, a, h, state, ga, gx, grad_state, axis)
        else:
            for grad in (grad_decays, grad_state):
                if grad is not None:
                    grad[...] = 0
        return tuple(None if target is None else _sum_into(xp, grad, target)
                     for grad, target in zip(full, out, strict=True))


def check_given(operands: dict[str, object], optional: tuple[str, ...] = ("initial_state",)):
    """Raise TypeError for a masked array, or None where an operand is not `optional`."""
    for name, value in operands.items():
        if value is None and name not in optional:
            raise TypeError(f"`{name}` must be an array or a scalar; got None")
        if isinstance(value, np.ma.MaskedArray):
            raise TypeError(
                f"`{name}` is a masked array, whose mask cuscan would ignore; pass "
                f"`{name}.filled(value)` or `{name}.data` to say what masked elements hold"
            )


def check_reverse(reverse) -> bool:
    """``reverse`` as a bool; raise TypeError unless it is a bool (or 0 or 1)."""
    if isinstance(reverse, (bool, np.bool_)) or (
            isinstance(reverse, (int, np.integer)) and reverse in (0, 1)):
        return bool(reverse)
    raise TypeError(f"`reverse` must be a bool; got {reverse!r}{_static_hint(reverse)}")


def _static_hint(value) -> str:
    """For an array or tensor where a Python value is needed, how to pass one when tracing."""
    if getattr(value, "shape", None) != () or isinstance(value, np.generic):
        return ""
    return (", an array; it chooses the computation, so it must be a Python value (under "
            "jax.jit, a static argument)")


def check_method(method: str) -> None:
    """Raise unless ``method`` is one of `METHODS`."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(map(repr, METHODS))}; got {method!r}")


def forward_shape(decays_shape, impulses_shape, state_shape, axis) -> tuple[tuple, int]:
    """The result's shape and the normalised time axis of a forward call, or the error."""
    shape = _broadcast_shape(("decays", decays_shape), ("impulses", impulses_shape))
    axis = time_axis(axis, shape)
    if state_shape is not None:
        _check_state(state_shape, shape, axis)
    return shape, axis


def backward_shape(grad_shape, decays_shape, output_shape, state_shape, axis):
    """The output's shape and the normalised time axis of a VJP call, or the error."""
    shape = tuple(output_shape)
    if tuple(grad_shape) != shape:
        raise ValueError(
            f"`grad_output` must have the shape of `output`; got {grad_shape} and {shape}"
        )
    _broadcast_shape(("decays", decays_shape), ("output", shape), into=shape)
    axis = time_axis(axis, shape)
    if state_shape is not None:
        _check_state(state_shape, shape, axis)
    return shape, axis


def _as_arrays(backend, operands: dict[str, object]):
    """The result dtype, and every operand as an array of it (None stays None)."""
    xp = backend.xp
    arrays = {
        name: value if value is None or _dtypes.is_python_scalar(value)
        else converted(xp.asarray, name, value)
        for name, value in operands.items()
    }
    dtype = _dtypes.result_dtype(arrays)
    if hasattr(backend, "check_devices"):
        backend.check_devices(arrays)
    return dtype, {name: None if v is None else xp.asarray(v, dtype=dtype)
                   for name, v in arrays.items()}


def converted(convert, name: str, value, **options):
    """``convert(value, **options)`` (an array library's conversion), its failure on a
    ragged list or tuple naming the operand."""
    try:
        return convert(value, **options)
    except ValueError as error:
        if not isinstance(value, list | tuple):
            raise
        raise ValueError(f"`{name}` is a ragged {type(value).__name__}: expected nested "
                         f"sequences of equal lengths at each depth ({error})") from error


def _broadcast_shape(first, second, into=None) -> tuple[int, ...]:
    (name1, shape1), (name2, shape2) = first, second
    shape = broadcast_shapes(shape1, shape2)
    if shape is None or (into is not None and shape != into):
        raise ValueError(f"`{name1}` and `{name2}` do not broadcast: {shape1} and {shape2}")
    return shape


def broadcast_shapes(*shapes) -> tuple | None:
    """The shape ``shapes`` broadcast to, or None where they do not broadcast.

    Sizes are only compared, so the symbolic sizes of JAX's shape polymorphism work too: like
    JAX, a symbolic size broadcasts with 1 and with itself only.
    """
    ndim = max(map(len, shapes))
    result = []
    for sizes in zip(*((1,) * (ndim - len(s)) + tuple(s) for s in shapes), strict=True):
        size = 1
        for n in sizes:
            if size == 1:
                size = n
            elif n != 1 and n != size:
                return None
        result.append(size)
    return tuple(result)


def time_axis(axis: int, shape: tuple[int, ...]) -> int:
    """``axis`` checked (an integer, not a bool) and made non-negative for ``shape``."""
    if not shape:
        raise ValueError(
            "the inputs are 0-d, so there is no time axis; expected at least 1 dimension"
        )
    try:
        if isinstance(axis, (bool, np.bool_)):
            raise TypeError
        index = operator.index(axis)
    except TypeError:
        raise TypeError(f"`axis` must be an integer; got {axis!r}{_static_hint(axis)}") from None
    if not -len(shape) <= index < len(shape):  # in Python, which torch.compile traces
        raise np.exceptions.AxisError(index, len(shape))
    return index % len(shape)


def _check_state(state_shape, shape: tuple[int, ...], axis: int) -> None:
    """Raise unless `initial_state` broadcasts to the state shape (``shape`` without ``axis``)."""
    state_shape = tuple(state_shape)
    target = shape[:axis] + shape[axis + 1:]
    if broadcast_shapes(state_shape, target) != target:
        raise ValueError(
            f"`initial_state` must broadcast to the state shape {target} (the result's "
            f"shape {shape} without axis {axis}); got shape {state_shape}"
        )


def _broadcast(xp, array, shape: tuple[int, ...]):
    """``array`` read at ``shape`` (a view; itself where it has that shape already)."""
    return array if array.shape == shape else xp.broadcast_to(array, shape)


def _state(xp, initial_state, shape: tuple[int, ...], axis: int):
    """`initial_state` broadcast to the state shape (checked by `_check_state`)."""
    return _broadcast(xp, initial_state, shape[:axis] + shape[axis + 1:])


def _output(xp, out, shape, dtype):
    """``out``, checked against the shape and dtype it must have, or a new array."""
    if out is None:
        return xp.empty(shape, dtype)
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"`out` must be a {dtype} array of shape {shape}; "
                         f"got {out.dtype} and {out.shape}")
    return out


def _full(xp, target, shape, dtype, scratch: Scratch | None = None):
    """Where a gradient of ``shape`` is computed: ``target`` itself if it has that shape, or
    the new array returned where ``target`` is that shape; else an array to be summed into
    ``target`` (from ``scratch`` where given)."""
    given = not isinstance(target, tuple)
    if given and target.dtype != dtype:
        raise ValueError(f"`out` must hold {dtype} arrays; got {target.dtype}")
    if (target.shape if given else target) == shape:
        return target if given else xp.empty(shape, dtype)
    return xp.empty(shape, dtype) if scratch is None else scratch.empty(shape, dtype)


def _sum_into(xp, grad, target):
    """``grad`` summed to ``target``: a shape, or an array to write into."""
    if isinstance(target, tuple):
        return _sum_to_shape(xp, grad, target)
    if grad is not target:
        target[...] = _sum_to_shape(xp, grad, target.shape)
    return target


def summed_axes(grad_shape, shape) -> tuple[int, ...]:
    """The axes a gradient of ``grad_shape`` is summed over to give an operand of the
    ``shape`` that was broadcast to it (unknown dimensions, None, are summed if 1 in ``shape``)."""
    lead = len(grad_shape) - len(shape)
    return tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad_shape[lead + i] != 1
    )


def _sum_to_shape(xp, array, shape: tuple[int, ...]):
    """Sum a broadcast gradient back to the operand's ``shape``, accumulating as the scan does."""
    if array.shape == shape:
        return array
    axes = summed_axes(array.shape, shape)
    # A sum beyond a half type is infinite, as in the scan, and terms of both signs that
    # overflowed it are NaN, as torch's own broadcast products' gradients: quietly.
    with np.errstate(over="ignore", invalid="ignore"):
        total = xp.sum(array, axis=axes, keepdims=True, dtype=_dtypes.accumulator(array.dtype))
        return total.reshape(shape).astype(array.dtype, copy=False)
