"""lfilter and sosfilt as cascades of first-order linear recurrences, the states they start
from and leave (lfilter_zi, sosfilt_zi, lfiltic), and a real filter as a linear map of NumPy
arrays (`_OnHost`), which autodiff and traces record on the CPU."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import numbers
import sys
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from cuscan import _backend
from cuscan._api import Decorated, check_given, linear_recurrence, public, time_axis
from cuscan._dtypes import unsupported
from cuscan._numpy_backend import _quiet
from cuscan.signal import _chunks, _stream
from cuscan.signal._arrays import _Arrays, namespace, numpy_kind
from cuscan.signal._poles import _pole_stages

ArrayLike = Any


def _front_door(function: Decorated) -> Decorated:
    """``function``, run as Python even when ``torch.compile`` meets it, and with a clear
    error where a symbolic length (JAX's shape polymorphism) is too vague for it. No
    floating-point warnings: infinities and NaN in a signal are data, carried as SciPy
    carries them, whatever the chunks' products meet on the way (`_numpy_backend._quiet`).

    The filters design on the host with NumPy (roots refined in exact
    arithmetic, pseudo-inverses, caches) what torch.compile cannot trace: it
    breaks the graph around the call, which runs as written, its recurrences
    as cuscan's operators. No graph is broken outside torch.compile.
    """
    quiet = _quiet(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        torch = sys.modules.get("torch")
        if torch is not None and torch.compiler.is_compiling():
            return torch.compiler.disable(quiet)(*args, **kwargs)
        try:
            return quiet(*args, **kwargs)
        except Exception as error:
            if "jax" not in sys.modules:
                raise
            jax_core = importlib.import_module("jax.extend.core")  # jax.errors' from 0.10.2
            if not isinstance(error, jax_core.InconclusiveDimensionOperation):
                raise
            raise ValueError(
                f"cuscan.signal.{function.__name__} compares the signal's length with what the "
                "filter needs, and a symbolic length must be known to be long enough: declare "
                "a lower bound (jax.export.symbolic_shape(\"t\", constraints=(\"t >= 64\",))) "
                "or give the time axis a fixed size (with Keras, in the layer's input shape). "
                f"JAX says: {str(error).splitlines()[0]}"
            ) from error

    return cast(Decorated, wrapper)


def _sizes_when_run(*data: str, state=None) -> Callable[[Decorated], Decorated]:
    """Inside tf.function, a call on tensors some of whose sizes are unknown (None, as
    Keras' batch) runs as it runs eagerly, in a tf.py_function, or where the graph cannot
    call back into Python, in the filters' own operations (`_tensorflow.when_run`); it is
    differentiable with respect to the arguments named ``data``. The filters plan their
    work on the sizes. ``state(arguments, shape)``, where given, is the shape the second of
    ``data`` (zi) must have for a signal of ``shape``, for its sizes that are unknown."""

    def decorate(function: Decorated) -> Decorated:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            torch = sys.modules.get("torch")
            if torch is not None and torch.compiler.is_compiling():  # ema's graph: no TensorFlow
                return function(*args, **kwargs)
            if any(_backend.library(v) == "tensorflow" for v in (*args, *kwargs.values())):
                from cuscan import _tensorflow

                bound = signature.bind(*args, **kwargs)
                if _tensorflow.sizes_unknown(bound.arguments.get(name) for name in data):
                    return _tensorflow.when_run(function, bound, data, state)
            return function(*args, **kwargs)

        return cast(Decorated, wrapper)

    return decorate


class _NoSteadyState(ValueError):
    """A filter with a pole at z = 1: a step input has no steady state. Its message says
    where the pole is; `_needs_steady_state` adds what wanted the state."""


def _needs_steady_state(purpose: str) -> Callable[[Decorated], Decorated]:
    """A public function that needs its filter's steady state for a step input: where there
    is none, its ValueError says so and what the function wanted it for, ``purpose``."""

    def decorate(function: Decorated) -> Decorated:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except _NoSteadyState as error:
                raise ValueError(f"{error}: a step input has no steady state, which "
                                 f"`{function.__name__}` {purpose}") from None

        return cast(Decorated, wrapper)

    return decorate


def _host(coefficients, name: str) -> np.ndarray:
    """Filter coefficients as a NumPy array of float64 or complex128: they are small, and
    constants (CuPy arrays and tensors are copied; the filter is not differentiated with
    respect to them)."""
    check_given({name: coefficients})
    lib = _backend.library(coefficients)
    if lib == "torch":
        from cuscan import _torch

        coefficients = _torch.constant(name, coefficients)
    elif lib == "tensorflow":
        from cuscan import _tensorflow

        coefficients = _tensorflow.constant(name, coefficients)
    elif lib == "jax":
        import jax

        if isinstance(coefficients, jax.core.Tracer):
            raise TypeError(
                f"`{name}` is traced by JAX (inside jit, grad, jvp or vmap), but filter "
                "coefficients are constants to cuscan.signal: pass NumPy arrays, or JAX "
                "arrays made outside the traced function (jax.numpy makes tracers inside jit)")
    elif lib == "cupy" or (lib != "numpy" and _backend.interchangeable(coefficients)):
        # on a GPU, or any other library's array that DLPack or CUDA's interface views
        from cuscan import _interchange

        coefficients = _interchange.to_array(coefficients)
        if not isinstance(coefficients, np.ndarray):
            coefficients = coefficients.get()
    coefficients = np.asarray(coefficients)
    kind = numpy_kind(coefficients.dtype)
    _numeric(name, kind, coefficients.dtype.itemsize, coefficients.dtype)
    # In double precision before any arithmetic, as SciPy's: `b / a[0]` in single precision
    # moved the poles of high-order filters (a fifth of the output's RMS at order 6).
    return coefficients.astype(np.complex128 if kind == "c" else np.float64, copy=False)


def _numeric(name: str, kind: str, itemsize: int, dtype) -> None:
    """Refuse data that is not numbers, or that is in extended precision (the filters
    compute in double precision, and would return less than a long double holds)."""
    if kind not in "biufc":
        raise TypeError(f"`{name}` must hold numbers; got dtype {dtype}")
    if itemsize > (16 if kind == "c" else 8):
        raise unsupported(name, dtype)


def _signal(x, axis: int, **others):
    """The namespace of ``x``'s library, ``x`` as a float32/64 or complex64/128 array of
    it, whole along its time axis (see ``whole_along``), and that axis, normalised.
    ``others``, the call's other operands (such as ``zi``; None where not given), must
    come from the same library and device."""
    check_given({"x": x, **others}, optional=tuple(others))
    ns = namespace({"x": x, **others})
    x = _inexact(ns, x, "x")
    axis = time_axis(axis, tuple(x.shape))
    return ns, ns.whole_along(x, axis), axis


def _inexact(ns, value, name: str, like=None):
    """``value`` as a float32/64 or complex64/128 array of ``ns`` (integers and bools as
    float64; half precision and narrower, such as float8, as float32, and torch's
    complex32 as complex64)."""
    value = ns.asarray(ns.dense(value, name), like=like)
    kind, itemsize = ns.kind(value), ns.itemsize(value)
    _numeric(name, kind, itemsize, value.dtype)
    if kind in "biu":
        value = ns.cast(value, np.float64)
    elif itemsize < (8 if kind == "c" else 4):
        value = ns.cast(value, np.complex64 if kind == "c" else np.float32)
    if getattr(value.shape, "rank", 0) is None:  # sizes unknown are `_sizes_when_run`'s
        raise ValueError(f"cuscan.signal needs the rank of `{name}` inside tf.function; got a "
                         "shape of unknown rank (give the tf.function an input_signature "
                         "with ranks)")
    return value


def _dtypes(ns, x, *coefficients: np.ndarray, state=None) -> tuple[np.dtype, np.dtype]:
    """The dtype filters compute in (double precision) and the one they return.

    Poles of low-cutoff designs sit within 1e-4 of the unit circle, where
    single precision loses most digits (scipy.signal's float32 path does too),
    so the recurrences always run in double precision and single-precision
    signals are rounded once at the end.
    """
    complex_ = ns.kind(x) == "c" or any(np.iscomplexobj(c) for c in coefficients) or (
        state is not None and ns.kind(state) == "c")  # a complex zi gives a complex output
    work = np.dtype(np.complex128 if complex_ else np.float64)
    if _single(ns, x):
        return work, np.dtype(np.complex64 if complex_ else np.float32)
    return work, work


def _single(ns, x) -> bool:
    """Whether ``x`` (float32/64 or complex64/128) is in single precision."""
    return ns.itemsize(x) == (8 if ns.kind(x) == "c" else 4)


def _normalized(b, a) -> tuple[np.ndarray, np.ndarray]:
    b, a = np.atleast_1d(_host(b, "b")), np.atleast_1d(_host(a, "a"))
    if b.ndim != 1 or a.ndim != 1 or b.size == 0 or a.size == 0:
        raise ValueError(f"`b` and `a` must be non-empty 1-D; got shapes {b.shape} and {a.shape}")
    if a[0] == 0:
        raise ValueError("`a[0]` must be non-zero")
    if not np.isfinite(a).all():
        raise ValueError(f"`a` must be finite, to be factored into poles; got {a}")
    return b / a[0], a / a[0]


def _time_major(ns, x, axis: int, keep=None):
    """``x`` and its time axis, moved first where ``ns.time_major`` says so and
    ``keep(x, axis)`` does not hold; with functions that move a state laid out like ``x``
    (after ``lead`` leading axes) alike, and that put a result or state back in ``x``'s
    layout."""
    moved = None if keep is not None and keep(x, axis) else ns.time_major(x, axis)
    if moved is None:
        def same(v, lead=0):
            return v

        return x, axis, same, same

    def inward(v, lead=0):
        return ns.moveaxis(v, lead + axis, lead)

    def outward(v, lead=0):
        return ns.contiguous(ns.moveaxis(v, lead, lead + axis))

    return moved, 0, inward, outward


def _along(x, axis: int, index) -> tuple:
    """An indexing tuple selecting ``index`` along ``axis``."""
    key = [slice(None)] * x.ndim
    key[axis] = index
    return tuple(key)


# A long single-precision signal computed on by NumPy is filtered in blocks of time of about
# this many bytes in double precision (and at least _MIN_BLOCK samples long).
_BLOCK_BYTES = 1 << 24
_MIN_BLOCK = 1 << 13


def _blocks(ns, x, axis: int, work: np.dtype, out: np.dtype, zi=None) -> tuple | None:
    """How a signal computed on in ``work`` precision and returned in ``out`` is filtered
    in blocks of time (`_in_blocks`): the blocks' length, and NumPy views of ``x`` and
    ``zi`` (`numpy_views`), where it is in single precision, NumPy computes on it and it
    is at least two blocks long; else None."""
    length = x.shape[axis]
    if out == work or not length or 0 in tuple(x.shape):  # (a length unknown in a trace: None)
        return None
    views = ns.numpy_views(x, zi)
    if views is None:  # (and the shape is known: no trace)
        return None
    block = max(_MIN_BLOCK, _BLOCK_BYTES // (work.itemsize * (math.prod(x.shape) // length)))
    return (block, *views) if length >= 2 * block else None


def _in_blocks(run, ns, x, axis: int, zi, work: np.dtype, out: np.dtype, order: int,
               sections: int | None = None):
    """``run(ns, x, axis, zi)``, a filter's ``(y, zf)`` in ``work`` precision from ``x`` and
    ``zi`` in it (zf None without zi), in ``x``'s layout; returned in ``out``.

    The filters compute in double precision (`_dtypes`). Cast whole, a single-precision
    signal would be copied into double precision and its output made there before being
    rounded: four times its size on top of the result. Where NumPy computes on it
    (`numpy_views`), a long one is filtered instead in blocks of time, each cast on its
    own into a copy whose samples follow one another in time, and its output written
    into the result; the state (``zi``'s layout: ``order`` samples along ``axis``, after
    ``sections``) is carried from block to block in double precision. The copies then
    take a block's memory, and no block is copied again into that layout."""
    blocks = _blocks(ns, x, axis, work, out, zi)
    if blocks is None:
        y, zf = run(ns, ns.cast(x, work), axis, zi)
        return ns.cast(y, out), None if zf is None else ns.cast(zf, out)
    block, x, given = blocks
    length = x.shape[axis]
    head = () if sections is None else (sections,)
    if given is None:
        state = np.zeros((*head, *x.shape[:axis], *x.shape[axis + 1:], order), work)
    else:
        state = np.moveaxis(given, len(head) + axis, -1).astype(work, order="C")
    y = np.empty(x.shape, out)
    for start in range(0, length, block):
        key = _along(x, axis, slice(start, start + block))
        part = np.moveaxis(x[key], axis, -1).astype(work, order="C")
        part, state = run(_NUMPY, part, x.ndim - 1, state)
        np.moveaxis(y[key], axis, -1)[...] = part
    return ns.from_numpy(y), None if given is None else ns.from_numpy(
        np.moveaxis(state, -1, len(head) + axis).astype(out))


def _on_chunks(ns, x, axis: int, zi=None, real: bool = True, **size) -> tuple | None:
    """NumPy views of ``x`` and ``zi`` (`numpy_views`) where a filter of that ``size``
    (`_chunks.applies`' arguments) runs on them in chunks (where it is ``real``, a complex
    signal too, as its two parts: `_chunks.pairs`), else None."""
    views = ns.numpy_views(x, zi)
    if views is None or not _chunks.applies(_chunks.pairs(views[0]) if real else views[0],
                                            axis % x.ndim, **size):
        return None
    return views


def _on_host(ns, x, axis: int, zi, **size) -> bool:
    """Whether a filter of that ``size`` runs on a tensor that autodiff or a trace may
    record as a linear map of its NumPy views (`_OnHost`, through ``ns.linear_on_host``):
    a real signal of fixed shape on the CPU that `_chunks.fits`, and a real zi (if any)
    on the CPU too."""
    shape = tuple(x.shape)
    return ns.kind(x) == "f" and all(type(n) is int for n in shape) \
        and ns.runs_on_host(x) \
        and (zi is None or (ns.kind(zi) != "c" and ns.runs_on_host(zi))) \
        and _chunks.fits(shape, ns.strides(x), ns.itemsize(x), axis, **size)


def _keep(ns, real: bool, **size):
    """`_time_major`'s ``keep`` for a filter of that ``size``, ``real`` or not: whether it
    runs in chunks on the signal as it is laid out (as `_OnHost` too)."""
    return lambda x, axis: (_on_chunks(ns, x, axis, real=real, **size) is not None
                            or _on_host(ns, x, axis, None, **size))


@dataclasses.dataclass(frozen=True)
class _OnHost:
    """A real filter as a function of NumPy arrays, along ``axis`` counted from the end (so
    that leading batch axes may be added), in chunks where they run: `lfilter`'s normalised
    ``(b, a)`` or `sosfilt`'s ``(sos,)``, as float64 bytes. From rest, the map ``F``; where
    ``steady``, from the steady state of the signal's first sample, as each pass of
    `filtfilt` starts: ``F + r e0^T``, with ``r`` the output that state gives with no input
    for a unit first sample (`_steady_response`). Where ``reverse``, the transposed map:
    ``F^T`` (a time-invariant filter from rest run backward in time), plus ``r``'s product
    with the signal added to its first sample where ``steady``. Where ``flipped`` (with
    ``steady``), the pass backward in time from the steady state of the signal's last
    sample, as `filtfilt`'s second pass, without flipping the signal: ``J (F + r e0^T) J =
    F^T + (J r) e_last^T`` (``J`` reverses time), whose transpose is ``F + e_last (J r)^T``.

    Where ``state``, the map of SciPy's zi and the signal together to the output and zf,
    each along the axis: zi's stacked filters one after the other (`_packed`) and then the
    signal, to the output and then zf packed alike; ``y = F x + Z zi`` and ``zf = G x + P
    zi``. Its transpose takes the output's and zf's cotangents ``(gy, gzf)`` to zi's and
    the signal's: ``(Z^T gy + P^T gzf, F^T gy + G^T gzf)``, the small matrices from
    `_state_maps`. Hashable: JAX keys compilations on it."""

    design: tuple[bytes, ...]
    axis: int
    reverse: bool = False
    steady: bool = False
    flipped: bool = False
    state: bool = False

    @property
    def adjoint(self) -> _OnHost:
        """The transposed map."""
        return dataclasses.replace(self, reverse=not self.reverse)

    @property
    def stack(self) -> tuple[int, int]:
        """SciPy's zi stacked by filter: (filters, the length of each one's state)."""
        item = np.dtype(np.float64).itemsize
        if len(self.design) == 1:  # rows of 6
            return len(self.design[0]) // (6 * item), 2
        return 1, max(len(c) for c in self.design) // item - 1

    @property
    def size(self) -> dict:
        """`_chunks.applies`' size of the filter: its sections, or its order."""
        count, order = self.stack
        return {"sections": count} if len(self.design) == 1 else {"order": order}

    def steps(self) -> tuple:
        """The filter as `_chunks` steps it (cached)."""
        if len(self.design) == 1:
            return _section_steps(self.design[0], self.stack[0])
        return _filter_steps(*self.design)

    @_quiet
    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The map of ``x``, contiguous and of its dtype (single precision computed in
        double, as everywhere), without floating-point warnings (`_front_door`)."""
        return np.ascontiguousarray(
            self._map(_NUMPY, np.asarray(x, np.float64), self.axis % x.ndim), x.dtype)

    def recurrences(self, x):
        """The same map of a framework's ``x`` with its stages' recurrences (for programs
        that cannot call back into Python, such as `jax.export`'s)."""
        return self._map(namespace({"x": x}), x, self.axis % x.ndim, chunks=False)

    def _map(self, ns, x, axis: int, chunks: bool = True):
        """The map, in chunks where they run unless not ``chunks``."""
        if self.state:
            return self._with_state(ns, x, axis, chunks)
        if not (self.reverse or self.flipped):
            return self._run(ns, x, axis, self._start(ns, x, axis), chunks)[0]
        y = self._from_rest(ns, x, axis, self.reverse != self.flipped, chunks)
        return self._steady_part(ns, y, x, axis)

    def _from_rest(self, ns, x, axis: int, backward: bool, chunks: bool):
        """``F x``, or where ``backward`` ``F^T x`` (the filter backward in time), as a new
        array: in chunks where they run unless not ``chunks`` (backward, reading ``x`` as
        it lies), else with the recurrences."""
        if not backward:
            y = self._run(ns, x, axis, chunks=chunks)[0]
            return y.copy() if isinstance(y, np.ndarray) and np.may_share_memory(y, x) else y
        if chunks:
            return self._on_numpy(x, axis, backward=True)[0]
        return ns.flip(self._run(ns, ns.flip(x, axis), axis, chunks=False)[0], axis)

    def _steady_part(self, ns, y, x, axis: int):
        """``y`` plus the steady state's part of the map of ``x``, where ``steady`` and the
        map is not ``F + r e0^T`` (which starts from that state): ``r``'s product with the
        first samples added to the first (``e0 r^T``, ``reverse``), ``r`` reversed times the
        last sample added to the last samples (``(J r) e_last^T``, ``flipped``), or both
        (``e_last (J r)^T``)."""
        if not self.steady:
            return y
        length = x.shape[axis]
        response = _steady_response(self.design, length)
        size = response.size
        if not size:
            return y
        if self.flipped:
            response = response[::-1]
        end, last = slice(length - size, length), slice(length - 1, length)
        if not self.reverse:  # flipped
            at, source, matrix = end, last, response[:, None]
        else:
            at, source = (last, end) if self.flipped else (slice(0, 1), slice(0, size))
            matrix = response[None]
        return ns.add_into(y, _along(y, axis, at), ns.apply_along(
            np.ascontiguousarray(matrix), x[_along(x, axis, source)], axis))

    @property
    def _coefficients(self) -> list[np.ndarray]:
        """The design as arrays: ``[sos]`` (rows of 6) or ``[b, a]``."""
        if len(self.design) == 1:
            return [np.frombuffer(self.design[0]).reshape(-1, 6)]
        return [np.frombuffer(c) for c in self.design]

    def _start(self, ns, x, axis: int):
        """The initial state for ``x``, stacked by filter: its first sample's steady state,
        or None (rest)."""
        if not self.steady:
            return None
        coefficients = self._coefficients
        steady = _sections_steady_state(*coefficients) if len(coefficients) == 1 \
            else _steady_state(*coefficients)[None]
        return _steady_start(ns, steady, x, axis)

    def _on_numpy(self, signal: np.ndarray, axis: int, zi=None, backward: bool = False,
                  out: np.ndarray | None = None) -> tuple:
        """The filter over ``signal`` from ``zi`` (stacked by filter) or rest, or where
        ``backward`` run backward in time from rest: ``(y, zf)`` (zf stacked; None without
        zi), y in ``out`` (float64, ``signal``'s shape) or a new array. In chunks where
        they run (`_chunks.cascade`, which reads the signal backward where ``backward``),
        else with the recurrences (on the flipped signal where ``backward``)."""
        done = _chunks.applies(signal, axis, **self.size) and _chunks.cascade(
            self.steps(), signal, axis, zi, reverse=backward, out=out)
        if done:
            return done
        if backward:
            y, zf = np.flip(self._run(_NUMPY, np.flip(signal, axis), axis, chunks=False)[0],
                            axis), None
        else:
            y, zf = self._run(_NUMPY, signal, axis, zi, chunks=False)
        if out is None:
            return np.array(y), zf
        out[...] = y
        return out, zf

    def _run(self, ns, x, axis: int, zi=None, chunks: bool = True):
        """The filter over ``x`` from ``zi`` (stacked by filter) or rest, in chunks where
        they run unless not ``chunks``: ``(y, zf)``, zf stacked (None without zi)."""
        coefficients = self._coefficients
        if len(coefficients) == 1:
            return _cascade(coefficients[0], ns, x, axis, zi, chunks)
        b, a = coefficients
        y, zf = (_chunked if chunks else _filter)(b, a, ns, x, axis,
                                                  None if zi is None else zi[0])
        return y, None if zf is None else ns.expand_dims(zf, 0)

    def _with_state(self, ns, x, axis: int, chunks: bool = True):
        """The map where ``state``: on NumPy arrays in chunks (where they run), its two
        parts written into one new array; on a framework's with the recurrences, its
        parts concatenated."""
        count, order = self.stack
        size, length = count * order, x.shape[axis] - count * order
        cut = length if self.reverse else size  # the input's parts, and the output's
        head, tail = x[_along(x, axis, slice(0, cut))], x[_along(x, axis, slice(cut, None))]
        out = np.empty(x.shape) if chunks else None
        into = (None, None) if out is None else (
            out[_along(out, axis, slice(0, size + length - cut))],
            out[_along(out, axis, slice(size + length - cut, None))])
        if not self.reverse:
            zi = _unpacked(ns, head, axis, count)
            y, zf = self._run(ns, tail, axis, zi, chunks=False) if out is None \
                else self._on_numpy(tail, axis, zi, out=into[0])
            parts = y, _packed(ns, zf, axis)
        else:
            gy, gzf = head, tail
            maps = _state_maps(self.design, length)
            gx = self._from_rest(ns, gy, axis, True, chunks=False) if out is None \
                else self._on_numpy(gy, axis, backward=True, out=into[1])[0]
            ends = len(maps.ends)
            if ends:
                gx = ns.add_into(gx, _along(gx, axis, slice(length - ends, None)),
                                 ns.apply_along(maps.ends, gzf, axis))
            gzi = ns.apply_along(maps.last, gzf, axis)
            if maps.free.shape[1]:
                gzi = gzi + ns.apply_along(
                    maps.free, gy[_along(gy, axis, slice(0, maps.free.shape[1]))], axis)
            parts = gzi, gx
        if out is None:
            return ns.concat(list(parts), axis)
        for part, place in zip(parts, into, strict=True):
            if part is not place:
                place[...] = part
        return out


def _packed(ns, zi, axis: int):
    """A zi stacked by filter (filters, ..., order along ``axis``, ...), its filters one
    after the other along ``axis``: `_OnHost`'s packing where ``state``."""
    return ns.concat([zi[k] for k in range(zi.shape[0])], axis)


def _unpacked(ns, packed, axis: int, count: int):
    """`_packed`'s zi stacked by filter again, from its ``count`` filters along ``axis``."""
    order = packed.shape[axis] // count
    return ns.stack([packed[_along(packed, axis, slice(k * order, (k + 1) * order))]
                     for k in range(count)])


@functools.lru_cache(maxsize=8)
def _steady_response(design: tuple[bytes, ...], length: int) -> np.ndarray:
    """`_OnHost`'s ``r``: the filter's ``length`` outputs from the steady state of a unit
    first sample, with no input, up to the last that is not zero (a decaying response
    underflows to zero within a few thousand samples for most designs: the rest is not
    kept)."""
    f = _OnHost(design, -1, steady=True)
    impulse = np.zeros(length)
    impulse[0] = 1.0
    response = f._run(_NUMPY, np.zeros(length), 0, f._start(_NUMPY, impulse, 0))[0]
    nonzero = np.flatnonzero(response)
    return response[:nonzero[-1] + 1 if nonzero.size else 0].copy()


# `_state_maps` keeps at most _STATE_ELEMENTS numbers in each of its matrices, computing
# them _STATE_BLOCK samples at a time: a response that outlasts that (a pole within about
# 1e-4 of the unit circle, for a design of a few sections) leaves the filter to its
# recurrences.
_STATE_ELEMENTS = 1 << 22
_STATE_BLOCK = 1 << 14


@dataclasses.dataclass(frozen=True)
class _StateMaps:
    """`_OnHost`'s matrices where ``state``, over a signal of some length, on zi and zf
    packed (`_packed`, ``n`` numbers): ``free`` (n, M), the outputs each unit of zi gives
    with no input (``Z^T``, up to its last non-zero sample); ``last`` (n, n), the zf each
    one leaves (``P^T``); ``ends`` (K, n), the zf a unit sample leaves, the last sample's
    in the last row (``G^T``, from the signal's end back to the first non-zero row)."""

    free: np.ndarray
    last: np.ndarray
    ends: np.ndarray


@functools.lru_cache(maxsize=4)
def _state_maps(design: tuple[bytes, ...], length: int) -> _StateMaps | None:
    """`_StateMaps` for the filter `_OnHost` takes as ``design`` over ``length`` samples,
    or None where a response outlasts _STATE_ELEMENTS numbers.

    The responses are cut where the filter's state falls below the smallest normal
    number: what is dropped is below that times the filter's gain, per unit of zi or of
    zf's cotangent. zf from a signal is SciPy's transposed direct form's state: per filter
    of order ``m`` with input ``u`` and output ``v``, ``zf[i] = sum_{j=i+1}^{m} b[j] u[L -
    j + i] - a[j] v[L - j + i]``, with the inputs and outputs of each filter of the
    cascade for a unit sample."""
    f = _OnHost(design, -1)
    count, order = f.stack
    size = count * order
    units = _unpacked(_NUMPY, np.eye(size), 1, count)  # (count, size, order)
    done = _decaying(f, units, length)
    if done is None:
        return None
    free, zf = done
    last = np.concatenate(list(zf), axis=1)
    if len(design) == 1:
        stages = [((row.tobytes(),), *_normalized(row[:3], row[3:]))
                  for row in f._coefficients[0]]
    else:
        stages = [(design, *f._coefficients)]
    u, states = np.ones((1, 1)), []
    for stage, b, a in stages:
        done = _decaying(_OnHost(stage, -1), np.zeros((1, 1, order)), length, u)
        if done is None:
            return None
        v = done[0]
        b, a = (np.pad(c, (0, order + 1 - c.size)) for c in (b, a))
        span = min(length, max(u.shape[1], v.shape[1]) + order - 1)
        state = np.zeros((span, order))
        for i in range(order):
            for j in range(i + 1, order + 1):
                shift = j - i - 1
                state[shift:, i] += b[j] * _window(u[0], span - shift) \
                    - a[j] * _window(v[0], span - shift)
        states.append(state)
        u = v
    span = max(len(state) for state in states)
    ends = np.concatenate([np.pad(state, ((0, span - len(state)), (0, 0))) for state in states],
                          axis=1)
    nonzero = np.flatnonzero(ends.any(axis=1))
    ends = ends[:nonzero[-1] + 1 if nonzero.size else 0]
    if ends.size > _STATE_ELEMENTS:
        return None
    return _StateMaps(free=free, last=last, ends=np.ascontiguousarray(ends[::-1]))


def _window(v: np.ndarray, length: int) -> np.ndarray:
    """``v``'s first ``length`` samples, zeros after its end."""
    return np.pad(v[:length], (0, max(0, length - v.size)))


def _decaying(f: _OnHost, zi: np.ndarray, length: int, signal: np.ndarray | None = None):
    """``f`` over ``length`` samples of ``signal`` (rows, any length; zeros after it) or
    none, from ``zi`` (stacked, one row per signal row), _STATE_BLOCK samples at a time
    until the state falls below the smallest normal number after the signal: ``(y, zf)``,
    y up to its last non-zero sample and zf zero where cut; None where y would hold more
    than _STATE_ELEMENTS numbers first."""
    rows, tiny = zi.shape[1], np.finfo(np.float64).tiny
    given = 0 if signal is None else signal.shape[1]
    pieces, done = [], 0
    while done < length:
        block = np.zeros((rows, min(length - done, _STATE_BLOCK)))
        if done < given:
            part = signal[:, done:done + block.shape[1]]
            block[:, :part.shape[1]] = part
        y, zi = f._run(_NUMPY, block, 1, zi)
        pieces.append(y)
        done += block.shape[1]
        if done >= given and (np.abs(zi) < tiny).all():
            zi = np.zeros_like(zi)
            break
        if rows * done > _STATE_ELEMENTS:
            return None
    y = np.concatenate(pieces, axis=1) if pieces else np.zeros((rows, 0))
    nonzero = np.flatnonzero(y.any(axis=0))
    return np.ascontiguousarray(y[:, :nonzero[-1] + 1 if nonzero.size else 0]), zi


_NUMPY = _Arrays(np)


def _in_chunks(ns, x, axis: int, zi, design: tuple[bytes, ...], out=None) -> tuple | None:
    """The filter `_OnHost` takes as ``design`` over ``x`` in chunks as matrix products,
    from ``zi`` stacked by filter or rest: ``(y, zf)`` as ``ns`` arrays (zf stacked too;
    None without zi), or None where the chunks do not run (`_chunks.applies`, or
    `_chunks.cascade` declining). A NumPy float64 array ``out`` of ``x``'s shape may
    receive y (`_chunks.cascade`'s ``out``). A NumPy signal too short for the chunks
    (`_chunks.short`) is one product with the filter's matrices for its length
    (`_chunks.product`, built from its recurrences). Tensors a trace or autodiff may
    record run it as a linear map (`_OnHost`) where `_on_host` (with zi and x packed into
    one signal, where `_state_maps` has its matrices). A complex128 NumPy signal (through
    a real filter: linear, and real) runs as its real and imaginary parts side by side, a
    real signal with a last axis of 2 (`_chunks.pairs`), the output written into the
    complex result's parts (a real zi's imaginary parts zero); a stream does not keep its
    run (`_stream`), which takes real arrays."""
    f = _OnHost(design, axis - x.ndim)
    size = f.size
    views = ns.numpy_views(x, zi)
    result = None
    if views is not None and views[0].dtype == np.complex128:
        result = np.empty(views[0].shape, np.complex128)
        state = views[1]
        if state is not None:
            state = _chunks.pairs(np.asarray(state, np.complex128)) if np.iscomplexobj(
                state) else np.stack([np.asarray(state, np.float64), np.zeros(state.shape)],
                                     axis=-1)
        views, out, axis = (_chunks.pairs(views[0]), state), _chunks.pairs(result), axis % x.ndim
    run, given = None, {}
    if views is not None and _chunks.applies(views[0], axis, **size):
        run, shape = functools.partial(_chunks.cascade, f.steps()), views[0].shape
        given = {} if out is None else {"out": out}  # not part of the run a stream keeps
    elif views is not None and _chunks.short(views[0], axis, **size):
        length = x.shape[axis]
        run = functools.partial(_chunks.product, (design, length),
                                build=functools.partial(_short_matrices, design, length))
        shape = None  # a product reads any layout: any shape the signal takes
    if run is None:
        length = x.shape[axis]
        if not _on_host(ns, x, axis, zi, **size) \
                or (zi is not None and _state_maps(design, length) is None):
            return None
        if zi is None:
            return ns.linear_on_host(x, f), None
        packed = ns.concat([_packed(ns, ns.cast(zi, _dtypes(ns, x)[0]), axis), x], axis)
        y, zf = ns.split(ns.linear_on_host(packed, dataclasses.replace(f, state=True)),
                         length, axis)
        return y, _unpacked(ns, zf, axis, zi.shape[0])
    done = run(views[0], axis, None if zi is None else np.asarray(views[1], np.float64),
               **given)
    if done is None:
        return None
    y, zf = done
    if result is not None:
        if y is not out:  # a product: a new array
            out[...] = y
        y, zf = result, None if zf is None else zf[..., 0] + 1j * zf[..., 1]
    else:
        _stream._note(run, axis, shape)
    return ns.from_numpy(y), None if zf is None else ns.from_numpy(zf)


def _short_matrices(design: tuple[bytes, ...], length: int) -> tuple | bool:
    """`_chunks.unit_matrices` of the filter `_OnHost` takes as ``design`` over ``length``
    samples, from its recurrences."""
    f = _OnHost(design, -1)
    return _chunks.unit_matrices(
        lambda signal, zi: f._run(_NUMPY, signal, 1, zi, chunks=False), *f.stack, length)


def _design(b: np.ndarray, a: np.ndarray) -> tuple[bytes, bytes] | None:
    """A real filter's normalised ``(b, a)`` as float64 bytes (`_OnHost`'s design, and the
    key of its cached steps), or None for a complex one, which never runs in chunks."""
    if np.iscomplexobj(b) or np.iscomplexobj(a):
        return None
    return b.astype(np.float64).tobytes(), a.astype(np.float64).tobytes()


def _chunked(b: np.ndarray, a: np.ndarray, ns, x, axis: int, zi, out=None):
    """`_filter`, or where they run (on a real filter and signal) the whole filter in
    chunks as matrix products (`_in_chunks`, which may write y into ``out``)."""
    design = _design(b, a)
    if design is not None:
        done = _in_chunks(ns, x, axis, None if zi is None else ns.expand_dims(zi, 0), design,
                          out)
        if done is not None:
            y, zf = done
            return y, None if zf is None else zf[0]
    return _filter(b, a, ns, x, axis, zi)


def _filter(b: np.ndarray, a: np.ndarray, ns, x, axis: int, zi):
    """One IIR filter ``b(z) / a(z)`` (normalised) along ``axis``; returns y and zf."""
    dtype, out_dtype = _dtypes(ns, x, b, a, state=zi)
    order = max(a.size, b.size) - 1
    x = ns.cast(x, dtype)
    stages = _pole_stages(a)
    if dtype.kind != "c" and order == 2 and len(stages) == 1 and len(stages[0]) == 2:
        y = _conjugate_pair(b, a, stages[0][0], ns, x, axis, zi, dtype)
    else:
        y = _numerator_then_poles(b, stages, ns, x, axis, zi, dtype, order)
    y = ns.cast(y, dtype)
    zf = None if zi is None else ns.cast(
        _final_state(b, a, ns, x, y, axis, ns.cast(zi, dtype), dtype), out_dtype)
    return ns.cast(y, out_dtype), zf


def _numerator_then_poles(b: np.ndarray, stages, ns, x, axis: int, zi, dtype: np.dtype,
                          order: int):
    """Any filter: its numerator as passes over ``x`` (of ``dtype``), then its pole
    ``stages`` (`_pole_stages`) one after the other."""
    length = x.shape[axis]
    # The numerator as a moving sum, then the initial state as impulses at the
    # first `order` steps: that is how SciPy's transposed direct form II state
    # enters the output (y[n] = sum b_k x[n-k] - sum a_k y[n-k] + zi[n]).
    w = x * b[0].item()  # Python scalars keep the signal's precision
    for k in range(1, min(b.size, length)):
        w = ns.add_into(w, _along(w, axis, slice(k, None)),
                        x[_along(x, axis, slice(None, -k))] * b[k].item())
    if zi is not None:
        head = min(order, length)
        w = ns.add_into(w, _along(w, axis, slice(0, head)),
                        ns.cast(zi[_along(zi, axis, slice(0, head))], dtype))
    y = w
    for stage in stages:
        if len(stage) == 2 and dtype.kind != "c":
            # A conjugate pair on a real signal in one complex recurrence:
            # 1 / ((1 - p z^-1)(1 - conj(p) z^-1)) = 2 Re(r / (1 - p z^-1)) with the
            # residue r = p / (p - conj(p)), so y = Re(v) + Re(p) / Im(p) Im(v) for
            # v the recurrence with decay p. Im(v) is computed to its own relative
            # precision, so this stays accurate as the pair nears the real axis.
            pole = stage[0]
            v = linear_recurrence(pole, y, axis=axis)
            y = ns.real(v) + (pole.real / pole.imag) * ns.imag(v)
            continue
        for pole in stage:
            y = linear_recurrence(pole if dtype.kind == "c" or pole.imag else pole.real, y,
                                  axis=axis)
    return y


def _conjugate_pair(b: np.ndarray, a: np.ndarray, pole: complex, ns, x, axis: int, zi,
                    dtype: np.dtype):
    """A real second-order filter whose poles are a conjugate pair p, conj(p), in one
    complex recurrence straight on the signal ``x`` of ``dtype`` (no pass for the
    numerator).

    Partial fractions: ``b(z) / a(z) = k + 2 Re(r / (1 - p z^-1))`` with ``k = b2 / a2``
    and, for the remainder ``c0 + c1 z^-1 = b(z) - k a(z)``, the residue
    ``r = (c0 p + c1) / (p - conj(p))``; so ``y = k x + Re(v)`` for ``v`` the
    recurrence with decay p over ``2 r x``. SciPy's zi enters ``1 / a(z)`` as impulses
    at the first two steps (see `_numerator_then_poles`), with residue
    ``p / (p - conj(p))``, so it is added to the same recurrence's impulses. ``Re(r)``
    stays bounded as the pair nears the real axis; ``Im(r)`` grows like ``1 / Im(p)``
    but is multiplied back by ``Im(p)`` inside the recurrence, as in
    `_numerator_then_poles`'s form for a pair.
    """
    k, residue, zi_residue = _pair_form(b, a, pole)
    w = ns.scaled(x, residue)
    if zi is not None:
        head = min(2, x.shape[axis])
        w = ns.add_into(w, _along(w, axis, slice(0, head)),
                        ns.scaled(ns.cast(zi[_along(zi, axis, slice(0, head))], dtype),
                                  zi_residue))
    y = ns.real(linear_recurrence(pole, w, axis=axis))
    return y if k == 0 else y + x * k


def _pair_form(b: np.ndarray, a: np.ndarray, pole: complex) -> tuple[float, complex, complex]:
    """`_conjugate_pair`'s partial fractions: the direct term ``k``, and twice the
    residues of the signal (``2 r``) and of SciPy's zi (``2 p / (p - conj(p))``)."""
    b = np.pad(b, (0, 3 - b.size)).astype(complex)
    k = b[2] / a[2]
    c0, c1 = b[0] - k * a[0], b[1] - k * a[1]
    gap = pole - pole.conjugate()
    return float(k.real), complex(2 * (c0 * pole + c1) / gap), complex(2 * pole / gap)


def _final_state(b, a, ns, x, y, axis, zi, dtype):
    """SciPy's zf: the state the last samples leave (`_past_state`), and the part of zi that
    reaches beyond a signal shorter than the state, ``zf[i] += zi[i+N]``."""
    length, order = x.shape[axis], max(a.size, b.size) - 1
    recent = {name: ns.flip(v[_along(v, axis, slice(max(length - order, 0), length))], axis)
              for name, v in (("y", y), ("x", x))}
    channels = (*x.shape[:axis], 1, *x.shape[axis + 1:])
    states = _past_state(ns, b, a, recent, axis, channels, dtype)
    if a.size > 1 and length:
        # SciPy's direct form updates every state with the newest output, beyond a's
        # length times a zero, so an output that is not finite leaves every state so (0 *
        # inf is NaN); a FIR filter's zf is the tail of a convolution of its taps there.
        newest = recent["y"][_along(recent["y"], axis, slice(0, 1))] * 0.0
        for m in range(a.size - 1, order):
            states[m] = states[m] + newest
    for i in range(max(order - length, 0)):
        states[i] = states[i] + zi[_along(zi, axis, slice(i + length, i + length + 1))]
    return ns.concat(states, axis) if states else zi  # a pure gain has no state


def _past_state(ns, b, a, past, axis: int, channels: tuple, dtype: np.dtype) -> list:
    """The state past samples leave, one ``channels``-shaped array per element of it:
    ``zi[m] = sum_j b[m+1+j] x[-1-j] - sum_j a[m+1+j] y[-1-j]``, the part of later outputs
    that the past contributes (transposed direct form II). ``past`` maps "y" and "x" to
    samples in ``dtype``, most recent first along ``axis``."""
    taps = {"x": b, "y": -a}
    states = []
    for m in range(max(a.size, b.size) - 1):
        terms = [v[_along(v, axis, slice(j, j + 1))] * taps[name][m + 1 + j].item()
                 for name, v in past.items()
                 for j in range(min(taps[name].size - 1 - m, v.shape[axis]))]
        state = sum(terms[1:], terms[0]) if terms else _zeros(ns, channels, dtype, past["y"])
        states.append(ns.broadcast_to(state, channels))
    return states


def _zeros(ns, shape: tuple, dtype: np.dtype, like):
    """Zeros of ``shape`` and ``dtype`` in ``like``'s library and device."""
    return ns.cast(ns.asarray(np.zeros(shape), like=like), dtype)


def _state(ns, zi, x, axis: int, order: int, sections: int | None = None):
    """Validate a zi: x's shape with the axis of length ``order``, after ``sections`` if given.

    Without sections (`lfilter`), dimensions other than the axis may be 1 and
    are broadcast, as SciPy does.
    """
    if zi is None:
        return None
    zi = _inexact(ns, zi, "zi", like=x)
    shape = tuple(zi.shape)
    expected = _zi_shape(order, sections, tuple(x.shape), axis)

    def same(have, want) -> bool:  # an unknown size (None, in TensorFlow's graphs) may be any
        return have == want or None in (have, want)

    if sections is not None:
        if len(shape) != len(expected) or not all(
                same(have, want) for have, want in zip(shape, expected, strict=True)):
            raise ValueError(f"`zi` must have shape {expected} (n_sections, then x's shape with "
                             f"axis {axis} of length {order}); got {shape}")
        return zi
    fits = len(shape) == x.ndim and all(
        same(have, want) or (have == 1 and k != axis)
        for k, (have, want) in enumerate(zip(shape, expected, strict=True)))
    if not fits:
        raise ValueError(f"`zi` must have shape {expected} (x's shape with axis {axis} of "
                         f"length {order}; other dimensions may be 1); got {shape}")
    return zi if shape == expected else ns.broadcast_to(zi, expected, like=x)


def _zi_shape(order: int, sections: int | None, shape, axis) -> tuple | None:
    """The shape of SciPy's zi for a signal of ``shape``: its length along ``axis`` the
    filter's ``order``, after ``sections`` where given; None for an axis out of range (the
    call raises its own error)."""
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        return None
    axis %= len(shape)
    zi = (*shape[:axis], order, *shape[axis + 1:])
    return zi if sections is None else (sections, *zi)


def _lfilter_zi_shape(arguments: dict, shape: list) -> tuple | None:
    """`lfilter`'s zi shape for a signal of ``shape`` (`_sizes_when_run`'s ``state``)."""
    b, a = _normalized(arguments["b"], arguments["a"])
    return _zi_shape(max(a.size, b.size) - 1, None, shape, arguments["axis"])


def _sosfilt_zi_shape(arguments: dict, shape: list) -> tuple | None:
    """`sosfilt`'s zi shape for a signal of ``shape`` (`_sizes_when_run`'s ``state``)."""
    return _zi_shape(2, len(_sections(arguments["sos"])), shape, arguments["axis"])


@public
@_sizes_when_run("x", "zi", state=_lfilter_zi_shape)
@_front_door
def lfilter(b: ArrayLike, a: ArrayLike, x: ArrayLike, axis: int = -1,
            zi: ArrayLike | None = None):
    """Filter `x` with the IIR filter ``b(z) / a(z)``, as ``scipy.signal.lfilter``.

    Parameters
    ----------
    b, a : array_like
        Numerator and denominator coefficients (1-D; ``a[0]`` non-zero);
        constants, not differentiated.
    x : array_like
        The signal, any shape: a NumPy or CuPy array, or a torch, JAX or
        TensorFlow tensor (the result is the same framework's, differentiable).
    axis : int, default -1
        The time axis.
    zi : array_like, optional
        Initial state of the transposed direct form II, SciPy's layout: `x`'s
        shape with `axis` of length ``max(len(a), len(b)) - 1``; other
        dimensions may be 1 and are broadcast, as in SciPy.

    Returns
    -------
    y : ndarray
        The filtered signal, float32/complex64 for single-precision inputs and
        narrower ones (float16, bfloat16, float8, torch's complex32) and
        float64/complex128 otherwise.
    zf : ndarray
        The final state, returned only when `zi` is given: pass it as `zi`
        for the next block to filter a long signal in pieces.

    Notes
    -----
    ``1 / a(z)`` is factored into its poles and applied as a cascade of
    first-order linear recurrences (each parallel over time): one per real
    pole, and on a real signal one complex recurrence per conjugate pair
    ``p, conj(p)``, whose output ``v`` gives the pair's as
    ``Re(v) + Re(p) / Im(p) * Im(v)`` (``Im(v)`` shrinks with ``Im(p)``,
    so this holds its accuracy as the pair nears the real axis). Unlike a
    partial-fraction (parallel) form over all poles, the cascade stays
    accurate for close or repeated poles. The poles are the roots of `a` to
    working precision (refined in exact arithmetic up to order 128), and the
    stages run in an order that keeps the intermediate signal small. Real
    filters up to order 64 on NumPy signals of at least 16 samples (a complex
    one as its real and imaginary parts side by side) and on real CPU
    tensors (differentiated too, with or without `zi`) run chunk by chunk
    as matrix products instead, their states in the same forms solved as
    recurrences over the chunks (docs/signal.md); a short block filtered
    again with the same length, as a stream's blocks are, is one product
    with the filter's matrix for that length. The same call on real NumPy
    arrays again (a stream's next block) runs as the last one did, in chunks
    or as one product, without the checks around it.
    The coefficients of a high-order design rounded to double precision can
    describe a different filter from the one designed, even an unstable one,
    whatever computes it: prefer `sosfilt` for designs above order 4 or so.

    Examples
    --------
    >>> import numpy as np
    >>> from cuscan.signal import lfilter
    >>> lfilter([1.0], [1.0, -0.5], [1.0, 0.0, 0.0, 0.0])
    array([1.   , 0.5  , 0.25 , 0.125])
    """
    return _stream._streamed(_lfilter, (b, a), x, axis, zi, stacked=False)


def _lfilter(b, a, x, axis: int, zi):
    b, a = _normalized(b, a)
    ns, x, axis = _signal(x, axis, zi=zi)
    order = max(a.size, b.size) - 1
    zi = _state(ns, zi, x, axis, order)
    work, out = _dtypes(ns, x, b, a, state=zi)
    real = not (np.iscomplexobj(b) or np.iscomplexobj(a))

    def run(ns, x, axis, zi):
        x, time, inward, outward = _time_major(ns, x, axis, keep=_keep(ns, real, order=order))
        y, zf = _chunked(b, a, ns, x, time, None if zi is None else inward(zi))
        return outward(y), None if zf is None else outward(zf)

    y, zf = _in_blocks(run, ns, x, axis, zi, work, out, order)
    return y if zf is None else (y, zf)


def _sections(sos) -> np.ndarray:
    """``sos`` checked, as float64 (or complex128) rows, which the caches take as bytes."""
    sos = np.atleast_2d(_host(sos, "sos"))
    if sos.ndim != 2 or sos.shape[1] != 6:
        raise ValueError(f"`sos` must have shape (n_sections, 6); got {sos.shape}")
    if np.any(sos[:, 3] == 0):
        raise ValueError("every section's a0 (`sos[:, 3]`) must be non-zero")
    if not np.isfinite(sos[:, 3:]).all():
        raise ValueError("every section's denominator (`sos[:, 3:]`) must be finite, to be "
                         f"factored into poles; got {sos[:, 3:].tolist()}")
    return sos


@public
@_sizes_when_run("x", "zi", state=_sosfilt_zi_shape)
@_front_door
def sosfilt(sos: ArrayLike, x: ArrayLike, axis: int = -1, zi: ArrayLike | None = None):
    """Filter `x` with cascaded second-order sections, as ``scipy.signal.sosfilt``.

    Parameters
    ----------
    sos : array_like
        ``(n_sections, 6)``: each row ``[b0, b1, b2, a0, a1, a2]``; constants,
        not differentiated. A section whose ``a0`` is not 1 is normalised by it
        (SciPy requires 1).
    x : array_like
        The signal, any shape: a NumPy or CuPy array, or a torch, JAX or
        TensorFlow tensor (the result is the same framework's, differentiable).
    axis : int, default -1
        The time axis.
    zi : array_like, optional
        Initial states, SciPy's layout: ``(n_sections, ...)`` where ``...`` is
        `x`'s shape with `axis` of length 2.

    Returns
    -------
    y : ndarray
        The filtered signal (dtypes as in `lfilter`).
    zf : ndarray
        The final states, only when `zi` is given.

    Notes
    -----
    Each section runs as first-order linear recurrences, parallel over time:
    a conjugate pair as one complex recurrence straight on the section's
    input (partial fractions), any other section as its numerator (a
    three-tap moving sum) and a recurrence per real pole; see `lfilter`. A
    real cascade on NumPy arrays of at least 16 samples (a complex signal as
    its real and imaginary parts side by side) and on real CPU tensors
    (differentiated too, with or without `zi`) runs chunk by chunk as matrix
    products instead, its states in the same forms solved as recurrences
    over the chunks (docs/signal.md); a short block filtered again with the
    same length, as a stream's blocks are, is one product with the cascade's
    matrix for that length. The same call on real NumPy arrays again (a
    stream's next block) runs as the last one did, in chunks or as one
    product, without the checks around it. Accuracy against
    ``scipy.signal.sosfilt`` on standard designs (Butterworth, Chebyshev I
    and II, elliptic, Bessel; orders 1 to 12; low-, high-, band-pass and
    band-stop): maximum error over the signal's RMS below 1e-8 in float64
    and 5e-3 in float32.

    Examples
    --------
    >>> import numpy as np
    >>> from cuscan.signal import sosfilt
    >>> sos = [[1.0, 0.0, 0.0, 1.0, -0.5, 0.0]]  # one first-order section
    >>> sosfilt(sos, [1.0, 0.0, 0.0, 0.0])
    array([1.   , 0.5  , 0.25 , 0.125])
    """
    return _stream._streamed(_sosfilt, (sos,), x, axis, zi, stacked=True)


def _sosfilt(sos, x, axis: int, zi):
    sos = _sections(sos)
    ns, x, axis = _signal(x, axis, zi=zi)
    zi = _state(ns, zi, x, axis, 2, sections=sos.shape[0])
    work, out = _dtypes(ns, x, sos, state=zi)
    real = not np.iscomplexobj(sos)

    def run(ns, x, axis, zi):
        x, time, inward, outward = _time_major(ns, x, axis,
                                               keep=_keep(ns, real, sections=len(sos)))
        y, zf = _cascade(sos, ns, x, time, None if zi is None else inward(zi, lead=1))
        return outward(y), None if zf is None else outward(zf, lead=1)

    y, zf = _in_blocks(run, ns, x, axis, zi, work, out, 2, sections=len(sos))
    return y if zi is None else (y, zf)


def _cascade(sos: np.ndarray, ns, x, axis: int, zi, chunks: bool = True, out=None):
    """The sections one after the other, in ``x``'s (double) precision (in chunks where
    they run, unless not ``chunks``, which may write y into ``out``: `_in_chunks`);
    returns y and the stacked zf (None without zi)."""
    design = sos.tobytes()
    real = not np.iscomplexobj(sos)  # a complex cascade never runs in chunks
    done = _in_chunks(ns, x, axis, zi, (design,), out) if chunks and real else None
    if done is not None:
        return done
    if not len(sos):  # the signal itself, in an array of its own (zi is empty)
        return x * 1, zi
    y, finals = x, []
    for s, row in enumerate(sos):
        b, a = _normalized(row[:3], row[3:])
        y, zf = _filter(b, a, ns, y, axis, None if zi is None else zi[s])
        finals.append(zf)
    if zi is None:
        return y, None
    return y, ns.stack(finals)


@functools.lru_cache(maxsize=64)
def _section_steps(coefficients: bytes, count: int) -> tuple:
    """The sections (``count x 6`` float64 bytes) as `_chunks` steps them (`_step`)."""
    steps, offset = [], 0
    for row in np.frombuffer(coefficients).reshape(count, 6):
        step = _step(*_normalized(row[:3], row[3:]), offset)
        steps.append(step)
        offset += step.width
    return tuple(steps)


@functools.lru_cache(maxsize=64)
def _filter_steps(b: bytes, a: bytes) -> tuple:
    """The filter (float64 bytes of its normalised ``b`` and ``a``) as `_chunks` steps it."""
    return (_step(np.frombuffer(b), np.frombuffer(a), 0),)


def _step(b: np.ndarray, a: np.ndarray, offset: int):
    """A real filter (normalised) as a `_chunks.Section` whose state starts at ``offset``,
    in the form `_filter` gives a real signal: a second-order conjugate pair as in
    `_conjugate_pair`, any other filter as in `_numerator_then_poles`."""
    stages = _pole_stages(a)
    if max(a.size, b.size) == 3 and len(stages) == 1 and len(stages[0]) == 2:
        pole = stages[0][0]
        gain, residue, zi_gain = _pair_form(b, a, pole)
        return _chunks.Section("pair", b, a, offset, gain=gain, pole=pole, residue=residue,
                               zi_gain=zi_gain)
    return _chunks.Section("poles", b, a, offset, poles=tuple(
        stage[0] if len(stage) == 2 else float(stage[0].real) for stage in stages))


@public
@_front_door
@_needs_steady_state("returns")
def lfilter_zi(b: ArrayLike, a: ArrayLike) -> np.ndarray:
    """The steady-state initial state of `lfilter` for a step input, as SciPy's.

    Scale it by the first sample, ``zi = lfilter_zi(b, a) * x[0]``, to start
    filtering without a transient.

    Parameters
    ----------
    b, a : array_like
        Numerator and denominator coefficients (1-D; ``a[0]`` non-zero).

    Returns
    -------
    zi : ndarray
        ``(max(len(a), len(b)) - 1,)``, float64 (complex128 for a complex
        filter); empty for a pure gain, which has no state (SciPy raises).

    Raises
    ------
    ValueError
        If the filter has a pole at z = 1 (``a`` sums to zero): a step input
        then has no steady state.

    Examples
    --------
    >>> from cuscan.signal import lfilter, lfilter_zi
    >>> y, _ = lfilter([0.5], [1.0, -0.5], [2.0, 2.0], zi=lfilter_zi([0.5], [1.0, -0.5]) * 2)
    >>> y
    array([2., 2.])
    """
    return _steady_state(*_normalized(b, a))


def _kept(function):
    """``function`` of NumPy arrays, its results kept for the last 64 arguments (by their
    dtypes, shapes and bytes): `filtfilt` and `sosfiltfilt` take their steady states on
    every call, which took 15 us to compute for a filter of order 4 and 55 us for four
    sections on an x86-64 machine of 2 cores, against 1 us kept. Each call returns an
    array of its own."""

    @functools.lru_cache(maxsize=64)
    def kept(*arguments: tuple) -> np.ndarray:
        return function(*(np.frombuffer(data, dtype).reshape(shape)
                          for dtype, shape, data in arguments))

    @functools.wraps(function)
    def wrapper(*arrays: np.ndarray) -> np.ndarray:
        return kept(*((v.dtype.str, v.shape, v.tobytes()) for v in arrays)).copy()

    return wrapper


@_kept
def _steady_state(b: np.ndarray, a: np.ndarray) -> np.ndarray:
    """`lfilter_zi` of a normalised filter (`_normalized`)."""
    order = max(a.size, b.size) - 1
    if order == 0:
        return np.zeros(0)
    b = np.concatenate([b, np.zeros(order + 1 - b.size)])
    a = np.concatenate([a, np.zeros(order + 1 - a.size)])
    if a.sum() == 0:
        raise _NoSteadyState("the filter has a pole at z = 1 (`a` sums to zero)")
    # In steady state y = x = 1 and zf = zi: zi[i] = sum_{k > i} (b_k - a_k * G)
    # with G = sum b / sum a the DC gain, so the state solves a triangular sum.
    gain = b.sum() / a.sum()
    return np.array([np.sum(b[i + 1:] - a[i + 1:] * gain) for i in range(order)])


@public
@_front_door
@_needs_steady_state("returns")
def sosfilt_zi(sos: ArrayLike) -> np.ndarray:
    """The steady-state initial states of `sosfilt` for a step input, as SciPy's.

    Scale them by the first sample, ``zi = sosfilt_zi(sos) * x[0]``, to start
    filtering without a transient.

    Parameters
    ----------
    sos : array_like
        Second-order sections, ``(n_sections, 6)``: ``b0, b1, b2, a0, a1, a2``
        each (``a0`` non-zero; a section is normalised by it).

    Returns
    -------
    zi : ndarray
        ``(n_sections, 2)``, float64 (complex128 for complex sections).

    Raises
    ------
    ValueError
        If a section has a pole at z = 1 (its ``a`` sums to zero): a step
        input then has no steady state.

    Examples
    --------
    >>> from cuscan.signal import sosfilt, sosfilt_zi
    >>> sos = [[0.5, 0.0, 0.0, 1.0, -0.5, 0.0]]
    >>> y, _ = sosfilt(sos, [2.0, 2.0], zi=sosfilt_zi(sos) * 2)
    >>> y
    array([2., 2.])
    """
    return _sections_steady_state(_sections(sos))


@_kept
def _sections_steady_state(sos: np.ndarray) -> np.ndarray:
    """`sosfilt_zi` of checked sections (`_sections`)."""
    states, scale = [], 1.0
    for k, row in enumerate(sos):
        b, a = row[:3] / row[3], row[3:] / row[3]
        try:
            states.append(_steady_state(b, a) * scale)
        except _NoSteadyState:
            raise _NoSteadyState(f"section {k} of `sos` has a pole at z = 1 (`sos[{k}, 3:]` "
                                 "sums to zero)") from None
        scale *= b.sum() / a.sum()
    return np.array(states).reshape(len(sos), 2)


@public
@_sizes_when_run("y", "x")
@_front_door
def lfiltic(b: ArrayLike, a: ArrayLike, y: ArrayLike, x: ArrayLike | None = None,
            axis: int = -1):
    """The `lfilter` state that past outputs and inputs leave, as ``scipy.signal.lfiltic``.

    Parameters
    ----------
    b, a : array_like
        Numerator and denominator coefficients (1-D; ``a[0]`` non-zero);
        constants, not differentiated.
    y : array_like
        Past outputs, most recent first along `axis`: ``y[-1], y[-2], ...``.
        Only the first ``len(a) - 1`` are used; missing ones are zeros.
    x : array_like, optional
        Past inputs, most recent first: ``x[-1], x[-2], ...``. Only the first
        ``len(b) - 1`` are used; missing ones (all by default) are zeros.
    axis : int, default -1
        The axis of `y` and `x` that holds the past samples. Their other
        dimensions broadcast together. For 1-D `y` and `x` this is SciPy's
        function; with more dimensions it gives one state per channel.

    Returns
    -------
    zi : ndarray
        The initial state for ``lfilter(b, a, ..., axis=axis, zi=zi)``: the
        broadcast shape of `y` and `x` with `axis` of length
        ``max(len(a), len(b)) - 1``, in `y`'s library (differentiable with
        respect to `y` and `x`). It is complex if anything given is, and in
        single precision only if `y` and `x` both are.

    Examples
    --------
    >>> from cuscan.signal import lfilter, lfiltic
    >>> b, a = [1.0, 1.0], [1.0, -0.5]
    >>> lfilter(b, a, [1.0, 2.0, 3.0, 4.0])
    array([ 1.   ,  3.5  ,  6.75 , 10.375])
    >>> zi = lfiltic(b, a, y=[3.5, 1.0], x=[2.0, 1.0])  # after the first two samples
    >>> lfilter(b, a, [3.0, 4.0], zi=zi)[0]
    array([ 6.75 , 10.375])
    """
    b, a = _normalized(b, a)
    check_given({"y": y, "x": x}, optional=("x",))
    ns = namespace({"y": y, "x": x})
    past = {"y": _inexact(ns, y, "y")}
    if x is not None:
        past["x"] = _inexact(ns, x, "x", like=past["y"])
    past = {name: v if v.ndim else ns.expand_dims(v, 0) for name, v in past.items()}
    ndim = past["y"].ndim
    if any(v.ndim != ndim for v in past.values()):
        raise ValueError(f"`y` and `x` must have the same number of dimensions; got shapes "
                         f"{tuple(past['y'].shape)} and {tuple(past['x'].shape)}")
    axis = time_axis(axis, tuple(past["y"].shape))
    complex_ = np.iscomplexobj(b) or np.iscomplexobj(a) or any(
        ns.kind(v) == "c" for v in past.values())
    work = np.dtype(np.complex128 if complex_ else np.float64)
    single = all(_single(ns, v) for v in past.values())
    out = np.dtype((np.complex64 if complex_ else np.float32) if single else work)
    past = {name: ns.cast(v, work) for name, v in past.items()}
    try:
        channels = np.broadcast_shapes(*(
            (*v.shape[:axis], 1, *v.shape[axis + 1:]) for v in past.values()))
    except ValueError:
        raise ValueError(f"`y` and `x` must broadcast together beside axis {axis}; got shapes "
                         f"{tuple(past['y'].shape)} and {tuple(past['x'].shape)}") from None
    states = _past_state(ns, b, a, past, axis, channels, work)
    if not states:  # a pure gain has no state
        return ns.cast(_zeros(ns, (*channels[:axis], 0, *channels[axis + 1:]), work, past["y"]),
                       out)
    return ns.cast(ns.concat(states, axis), out)


def _length(name: str, value, minimum: int) -> int:
    """A length argument given as an integer of at least ``minimum`` (0 or 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer or None; got {type(value).__name__}")
    if value < minimum:
        bound = "positive" if minimum else "non-negative"
        raise ValueError(f"`{name}` must be {bound}; got {value}")
    return int(value)


def _steady_start(ns, steady: np.ndarray, x, axis: int):
    """The steady state ``steady`` (`lfilter_zi`, or `sosfilt_zi`'s stacked by section)
    scaled by ``x``'s first sample along ``axis``: an initial state laid out like ``x``
    (after the sections' axis), in its dtype."""
    shape = [1] * x.ndim
    shape[axis] = steady.shape[-1]
    steady = ns.cast(ns.asarray(steady.reshape(*steady.shape[:-1], *shape), like=x),
                     _dtypes(ns, x)[1])
    return steady * x[_along(x, axis, slice(0, 1))]
