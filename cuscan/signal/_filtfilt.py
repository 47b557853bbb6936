"""filtfilt and sosfiltfilt: zero-phase filtering, forward and backward in time."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Literal

import numpy as np

from cuscan._api import public
from cuscan._scratch import Scratch
from cuscan.signal import _chunks
from cuscan.signal._filters import (
    _NUMPY,
    ArrayLike,
    _along,
    _blocks,
    _cascade,
    _chunked,
    _design,
    _dtypes,
    _filter,
    _front_door,
    _keep,
    _length,
    _needs_steady_state,
    _normalized,
    _on_chunks,
    _on_host,
    _OnHost,
    _sections,
    _sections_steady_state,
    _signal,
    _sizes_when_run,
    _steady_start,
    _steady_state,
    _time_major,
)

PadType = Literal["odd", "even", "constant"] | None


def _edge(x, axis: int, padtype, padlen, taps: int) -> int:
    """How far SciPy's filtfilt extends ``x`` at each end, checked against its length."""
    if padtype not in ("odd", "even", "constant", None):
        raise ValueError(f"`padtype` must be 'odd', 'even', 'constant' or None; got {padtype!r}")
    if padtype is None:
        edge = 0
    elif padlen is None:
        edge = 3 * taps
    else:
        edge = _length("padlen", padlen, minimum=0)
    length = x.shape[axis]
    if length == 0:
        raise ValueError(f"`x` must have at least one sample along axis {axis}; got none")
    if length <= edge:
        why = f" (3 times the filter's {taps} taps)" if padlen is None else ""
        raise ValueError(f"`x` must be longer along axis {axis} than the padding, {edge} "
                         f"samples{why}; got {length} (pass a smaller `padlen`, or "
                         f"padtype=None)")
    return edge


def _padded(ns, x, axis: int, padtype, edge: int, scratch: Scratch | None = None):
    """``x`` extended by ``edge`` samples at both ends as SciPy's filtfilt does (for a NumPy
    ``x``, into an array from ``scratch`` where given: `_padded_into`)."""
    if edge == 0:
        return x
    length = x.shape[axis]
    if scratch is not None:
        return _padded_into(x, axis, padtype, edge, scratch)
    first = x[_along(x, axis, slice(0, 1))]
    last = x[_along(x, axis, slice(length - 1, length))]
    if padtype == "constant":
        shape = (*x.shape[:axis], edge, *x.shape[axis + 1:])
        before, after = (ns.broadcast_to(end, shape, like=x) for end in (first, last))
    else:  # the samples next to each end, mirrored about it
        before = ns.flip(x[_along(x, axis, slice(1, edge + 1))], axis)
        after = ns.flip(x[_along(x, axis, slice(length - 1 - edge, length - 1))], axis)
        if padtype == "odd":  # and negated about the end's value
            before, after = 2 * first - before, 2 * last - after
    return ns.concat([before, x, after], axis)


def _padded_into(x: np.ndarray, axis: int, padtype, edge: int, scratch: Scratch) -> np.ndarray:
    """`_padded` for a NumPy ``x`` (``edge`` > 0), written into an array from ``scratch``
    (without the flipped copies and the concatenation)."""
    axis %= x.ndim
    length = x.shape[axis]
    shape = (*x.shape[:axis], length + 2 * edge, *x.shape[axis + 1:])
    into = scratch.empty(shape, x.dtype)
    into[_along(into, axis, slice(edge, edge + length))] = x
    # Per end: where its padding goes, its sample, and the ``edge`` samples next to it
    # from the nearest (samples edge to 1, and length - 2 down to length - 1 - edge, the
    # first sample included where edge is length - 1).
    stop = length - 2 - edge
    ends = ((slice(0, edge), slice(0, 1), slice(edge, 0, -1)),
            (slice(edge + length, None), slice(length - 1, length),
             slice(length - 2, stop if stop >= 0 else None, -1)))
    for at, end, mirrored in ends:
        part, end = into[_along(into, axis, at)], x[_along(x, axis, end)]
        if padtype == "constant":
            part[...] = end
        elif padtype == "even":
            part[...] = x[_along(x, axis, mirrored)]
        else:  # odd: negated about the end's value
            np.subtract(2 * end, x[_along(x, axis, mirrored)], out=part)
    return into


# `filtfilt` and `sosfiltfilt` over a signal on the CPU of at most _ZERO_PHASE_LENGTH samples
# along time run as one product with their matrix for that length (`_zero_phase`): 0.02 to
# 0.90 of the time of the scheme itself on 1 to 1,024 channels of 32 to 512 samples, where
# from 768 samples `filtfilt` (padded) took up to 2.2 times as long (benchmarks/zero_phase.py).
# Each matrix kept holds at most 512 ** 2 numbers (2 MiB).
_ZERO_PHASE_LENGTH = 512


def _zero_phase(key: tuple, ns, x, axis: int, work, out, dtype, whole):
    """A zero-phase filter over a short, finite signal on the CPU as one product, else
    ``whole(ns, x, axis, work, out)``, the scheme itself computing in ``work`` and returning
    ``out``. With its padding, the steady states it starts from and both passes, `filtfilt`
    (either method) and `sosfiltfilt` are linear in the signal: for a filter, its settings
    (``key``) and a length, a square matrix of ``dtype`` (the filter's), which the scheme
    gives on the unit signals (as NumPy arrays). It is built once `_chunks._direct` has seen
    the calls it waits for, and kept with the filters' own matrices. A NumPy signal's
    product is a NumPy array in C order; a CPU tensor's, the framework's product with the
    matrix (so its autodiff differentiates it). The scheme runs where the signal is empty,
    longer than _ZERO_PHASE_LENGTH, not on the CPU or being traced (values unknown), a
    sample is not finite (the scheme carries it as SciPy does, where the product would
    spread it), or the matrix is not built yet."""
    matrix = _zero_phase_kept(key, ns, x, axis, dtype, whole)
    if matrix is None:
        return whole(ns, x, axis, work, out)
    length = x.shape[axis]
    if type(x) is not np.ndarray:
        matrix = matrix.T.astype(work, copy=False)  # the framework's product mixes no dtypes
        y = ns.contiguous(ns.apply_along(matrix, ns.cast(x, work), axis))
    elif axis == x.ndim - 1:  # rows of samples: y = x M
        y = _chunks.times(x.reshape(-1, length), matrix).reshape(x.shape)
    else:  # samples down the columns of (before, length, after) blocks: y = M^T x
        blocks = x.reshape(math.prod(x.shape[:axis]), length, -1)
        y = np.matmul(matrix.T, blocks).reshape(x.shape)
    return ns.cast(y, out)


def _zero_phase_kept(key: tuple, ns, x, axis: int, dtype, whole) -> np.ndarray | None:
    """`_zero_phase`'s matrix for ``x``'s length, where the product applies and the
    matrix is built; else None."""
    numpy = type(x) is np.ndarray
    if not (numpy or (ns.on_host(x) and ns.concrete(x))) or math.prod(x.shape) == 0:
        return None
    length = x.shape[axis]
    if length > _ZERO_PHASE_LENGTH or not np.isfinite(x if numpy else ns.host(x)).all():
        return None
    kept = _chunks._direct((*key, length), False,
                           functools.partial(_zero_phase_matrix, whole, length, dtype))
    return None if kept is None else kept[0]


def _zero_phase_matrix(whole, length: int, dtype) -> tuple | bool:
    """`_zero_phase`'s matrix: row j the scheme's output for the unit signal at sample j
    (on NumPy arrays); False where it is not finite."""
    # a copy of its own (a view of one sample may keep a negative stride, which torch refuses)
    matrix = np.array(whole(_NUMPY, np.eye(length, dtype=dtype), 1, dtype, dtype), order="C")
    return (matrix,) if np.isfinite(matrix).all() else False


def _forward_backward(run, steady: np.ndarray, design: tuple[bytes, ...] | None, ns, x,
                      axis: int, padtype, edge: int, **size):
    """SciPy's zero-phase scheme: pad by ``edge`` samples (`_edge`), filter forward from the
    steady state of the first sample, filter the result backward from the steady state of
    its last, and cut the padding off. ``run(x, zi)`` filters forward in ``x``'s (double)
    precision and returns ``(y, zf)``; tensors that autodiff or a trace records run the
    filter's ``design`` (None for a complex one) of that ``size`` as `_OnHost` maps from
    the steady state where `_on_host` (each pass is linear in its signal, the state
    included), the second backward in time on the signal as it lies (``flipped``). On
    NumPy arrays, the padded signal is a temporary from `Scratch`; float64 ones in chunks
    run both passes straight through the chunks (`_passes_in_chunks`, whose first pass's
    output is one too)."""
    numpy = type(x) is np.ndarray
    with Scratch() as scratch:
        x = _padded(ns, x, axis, padtype, edge, scratch if numpy else None)
        length = x.shape[axis]
        y = None
        if numpy and x.dtype == np.float64 and design is not None \
                and _chunks.applies(x, axis, **size):
            y = _passes_in_chunks(_OnHost(design, -1).steps(), steady, x, axis, scratch)
        if y is None and design is not None and _on_chunks(ns, x, axis, **size) is None \
                and _on_host(ns, x, axis, None, **size):
            f = _OnHost(design, axis - x.ndim, steady=True)
            y = ns.linear_on_host(ns.linear_on_host(x, f), dataclasses.replace(f, flipped=True))
        elif y is None:
            y, _ = run(x, _steady_start(ns, steady, x, axis))
            y = ns.flip(y, axis)
            y, _ = run(y, _steady_start(ns, steady, y, axis))
            y = ns.flip(y, axis)
    return y[_along(y, axis, slice(edge, length - edge))]


def _passes_in_chunks(sections: tuple, steady: np.ndarray, x: np.ndarray, axis: int,
                      scratch: Scratch) -> np.ndarray | None:
    """`_forward_backward`'s two passes over a padded float64 NumPy signal ``x`` that
    `_chunks.applies` to, straight through `_chunks.cascade` (the filter's ``sections``),
    without the zf each pass leaves: the result, flipped back in time, or None where a
    sample or state is not finite (the passes then run as SciPy's carry it). The first
    pass's output is a temporary from ``scratch``."""
    axis %= x.ndim
    shape = [1] * (x.ndim + 1)
    shape[0], shape[1 + axis] = steady.size // steady.shape[-1], steady.shape[-1]
    steady = steady.reshape(shape)  # stacked by filter, laid out along the time axis
    first = x[_along(x, axis, slice(0, 1))]
    done = _chunks.cascade(sections, x, axis, steady * first, keep_state=False,
                           out=scratch.empty(x.shape, np.float64))
    if done is None:
        return None
    y = np.flip(done[0], axis)
    done = _chunks.cascade(sections, y, axis, steady * y[_along(y, axis, slice(0, 1))],
                           keep_state=False)
    return None if done is None else np.flip(done[0], axis)


def _in_blocks(run, steady: np.ndarray, ns, x, axis: int, padtype, edge: int, work, out):
    """`_forward_backward` over a long single-precision signal that NumPy computes on, in
    blocks of time (`_filters._blocks`) as `_filters._in_blocks` filters one, returned in
    ``out``; None where the signal is not such a one.

    Each block of the padded signal is cast on its own into a copy whose samples follow
    one another in time, and ``run(x, zi)`` filters it along its last axis from the state
    the block before left (the first from the steady state of its first sample). The
    forward pass's output is kept in ``work`` precision for the backward pass, which runs
    over it block by block from its end and writes the result: cast whole, the padded
    signal, both passes and the flips held eight times the result's size beyond it."""
    blocks = _blocks(ns, x, axis, work, out)
    if blocks is None:
        return None
    block, signal, _ = blocks
    result = np.empty(signal.shape, out)
    signal, target = np.moveaxis(signal, axis, -1), np.moveaxis(result, axis, -1)
    length, time = signal.shape[-1], signal.ndim - 1
    total = length + 2 * edge
    # the padding alone, from the samples next to each end
    before = _padded(_NUMPY, signal[..., :edge + 1].astype(work), time, padtype, edge)[..., :edge]
    after = _padded(_NUMPY, signal[..., length - 1 - edge:].astype(work), time, padtype,
                    edge)[..., 2 * edge + 1:]

    def padded(start: int, stop: int):
        """Samples ``start`` to ``stop`` of the padded signal, in ``work`` precision."""
        parts = (before[..., start:stop],
                 signal[..., max(start - edge, 0):max(stop - edge, 0)],
                 after[..., max(start - edge - length, 0):max(stop - edge - length, 0)])
        return np.concatenate(parts, axis=-1, dtype=work)

    forward, state = np.empty((*signal.shape[:-1], total), work), None
    for start in range(0, total, block):
        part = padded(start, min(start + block, total))
        if state is None:
            state = _steady_start(_NUMPY, steady, part, time)
        forward[..., start:start + block], state = run(part, state)
    state = None
    for stop in range(total, 0, -block):
        start = max(stop - block, 0)
        part = np.ascontiguousarray(forward[..., start:stop][..., ::-1])
        if state is None:
            state = _steady_start(_NUMPY, steady, part, time)
        part, state = run(part, state)
        part = part[..., ::-1]  # in time order: samples start to stop of the padded signal
        first, last = max(start, edge), min(stop, edge + length)  # the signal's own samples
        if first < last:
            target[..., first - edge:last - edge] = part[..., first - start:last - start]
    return ns.from_numpy(result)


@public
@_sizes_when_run("x")
@_front_door
@_needs_steady_state("starts its passes from, as SciPy's does (method=\"gust\" needs none)")
def filtfilt(b: ArrayLike, a: ArrayLike, x: ArrayLike, axis: int = -1,
             padtype: PadType = "odd", padlen: int | None = None,
             method: Literal["pad", "gust"] = "pad", irlen: int | None = None):
    """Filter `x` forward and backward (zero phase), as ``scipy.signal.filtfilt``.

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
    padtype : {'odd', 'even', 'constant', None}, default 'odd'
        With ``method='pad'``, how `x` is extended at both ends before
        filtering, as in SciPy: its point reflection, its mirror image, its
        end values, or not at all.
    padlen : int, optional
        With ``method='pad'``, the length of each extension; by default
        ``3 * max(len(a), len(b))``. `x` must be longer than it.
    method : {'pad', 'gust'}, default 'pad'
        How the ends are handled: padding, or Gustafsson's method, which
        chooses the initial states of both passes so that filtering forward
        then backward gives what filtering backward then forward does (in the
        least-squares sense), without padding.
    irlen : int, optional
        With ``method='gust'``, the length after which the filter's impulse
        response is taken as zero: the initial states are then fitted to the
        first and last `irlen` samples only (to the whole signal if it is at
        most ``2 * irlen`` long). By default, the length after which the
        response stays below double precision's rounding of its peak, which
        gives SciPy's fit to the whole signal to rounding; a filter whose
        response does not decay (a pole on or outside the unit circle) is
        fitted to the whole signal, at a cost in memory and time of the
        signal's length times twice the filter's order, as in SciPy.

    Returns
    -------
    y : ndarray
        The filtered signal, `x`'s shape; dtypes as in `lfilter`.

    Notes
    -----
    With padding, both passes start from the filter's steady state for the
    end value they start at (`lfilter_zi`). With Gustafsson's method, the
    four passes (forward-backward and backward-forward, from zero states)
    run over the signal; the least-squares fit depends on the filter and the
    signal's length only, so it is computed once per call on the host and
    applied to every channel as a matrix product. Both run as in `lfilter`,
    in double precision, with single-precision signals rounded once at the
    end. Either is linear in the signal: on finite signals of at most 512
    samples on the CPU (NumPy arrays, and tensors not being traced), a
    filter and its settings called a third time with the same length run as
    one product with the whole scheme's matrix for that length (built on
    that call, and kept for the last few). Use `sosfiltfilt` for filters of
    order above about 4.

    Examples
    --------
    >>> from cuscan.signal import filtfilt
    >>> filtfilt([0.5], [1.0, -0.5], [1.0, 1.0, 1.0, 1.0, 1.0], padlen=2)
    array([1., 1., 1., 1., 1.])
    >>> filtfilt([0.5], [1.0, -0.5], [1.0, 1.0, 1.0, 1.0, 1.0], method="gust")
    array([1., 1., 1., 1., 1.])
    """
    if method not in ("pad", "gust"):
        raise ValueError(f"`method` must be 'pad' or 'gust'; got {method!r}")
    if irlen is not None:
        irlen = _length("irlen", irlen, minimum=1)
    b, a = _normalized(b, a)
    ns, x, axis = _signal(x, axis)
    work, out = _dtypes(ns, x, b, a)
    order = max(a.size, b.size) - 1
    edge = _edge(x, axis, padtype, padlen, order + 1) if method == "pad" else irlen

    def whole(ns, x, axis: int, work, out):
        steady = _steady_state(b, a) if method == "pad" else None
        if method == "pad":
            done = _in_blocks(lambda x, zi: _chunked(b, a, _NUMPY, x, x.ndim - 1, zi),
                              steady, ns, x, axis, padtype, edge, work, out)
        else:
            done = _gustafsson_in_blocks(b, a, ns, x, axis, irlen, work, out)
        if done is not None:
            return done
        design = _design(b, a)
        x, axis, _, outward = _time_major(ns, ns.cast(x, work), axis,
                                          keep=_keep(ns, design is not None, order=order))
        if method == "gust":
            return outward(ns.cast(_gustafsson(b, a, ns, x, axis, irlen), out))

        def run(x, zi):
            return _chunked(b, a, ns, x, axis, zi)

        y = _forward_backward(run, steady, design, ns, x, axis, padtype, edge, order=order)
        return outward(ns.cast(y, out))

    key = ("filtfilt", method, padtype, edge, b.dtype.str, b.tobytes(), a.dtype.str, a.tobytes())
    return _zero_phase(key, ns, x, axis, work, out, np.result_type(b, a, np.float64), whole)


def _gustafsson(b: np.ndarray, a: np.ndarray, ns, x, axis: int, irlen: int | None):
    """Zero-phase filtering with the initial states of F. Gustafsson, "Determining the
    initial states in forward-backward filtering", IEEE Trans. Signal Processing 44(4),
    1996, fitted over ``irlen`` samples at each end (all of them if None). On a float64
    NumPy signal, the passes but the one that gives the result write into temporaries
    from `Scratch`."""
    order = max(a.size, b.size) - 1
    if order == 0:  # a pure gain, applied twice
        return x * (b[0] * b[0]).item()

    def forward(v, out=None):
        return _chunked(b, a, ns, v, axis, None, out)[0]

    def backward(v, out=None):
        return ns.flip(forward(ns.flip(v, axis), None if out is None else ns.flip(out, axis)),
                       axis)

    length = x.shape[axis]
    if irlen is None:  # where the response to a state has decayed to rounding, if it does
        irlen = _response_length(b, a, length)
    span = length if length <= 2 * irlen else irlen
    fit, effect = _gustafsson_operators(b, a, span, whole=span == length)
    if ns.kind(x) == "c":  # a complex signal through a real filter: torch and TF mix no dtypes
        fit, effect = fit.astype(complex), effect.astype(complex)
    with Scratch() as scratch:
        pooled = type(x) is np.ndarray and x.dtype == np.float64
        first, second = ((scratch.like(x, np.float64), scratch.like(x, np.float64)) if pooled
                         else (None, None))
        y = backward(forward(x, first))  # from zero states
        mismatch = forward(backward(x, second), first)
        if pooled:
            mismatch -= y
        else:
            mismatch = mismatch - y
        return _gustafsson_corrected(ns, y, mismatch, fit, effect, axis, span)


def _gustafsson_corrected(ns, y, mismatch, fit: np.ndarray, effect: np.ndarray, axis: int,
                          span: int):
    """Gustafsson's result: ``y``, both passes from zero states, with the states fitted to
    the ``mismatch`` of the passes the other way round over ``span`` samples at each end
    (`_gustafsson_operators`' ``fit``) applied (``effect``); never a view of ``mismatch``."""
    length = y.shape[axis]
    if span == length:
        return y + ns.apply_along(effect, ns.apply_along(fit, mismatch, axis), axis)
    head, tail = _along(y, axis, slice(0, span)), _along(y, axis, slice(length - span, length))
    states = ns.apply_along(fit, ns.concat([mismatch[head], mismatch[tail]], axis), axis)
    correction = ns.apply_along(effect, states, axis)
    y = ns.add_into(y, head, correction[_along(correction, axis, slice(0, span))])
    return ns.add_into(y, tail, correction[_along(correction, axis, slice(span, 2 * span))])


def _gustafsson_in_blocks(b: np.ndarray, a: np.ndarray, ns, x, axis: int, irlen, work, out):
    """`_gustafsson` over a long single-precision signal that NumPy computes on, in blocks
    of time (`_filters._blocks`) as `_in_blocks` runs the padded scheme, returned in
    ``out``; None where the signal is not such a one, or the states are fitted to the
    whole of it.

    The four passes run block by block from zero states, through one buffer in ``work``
    precision: the forward pass, then the backward pass over it, which writes the result
    (rounded) and keeps its first and last ``span`` samples; then the backward pass over
    the signal, and the forward pass over that, of which only those ends are kept. The
    fitted states' corrections, which reach only the ends, are added there before they
    are rounded."""
    blocks = _blocks(ns, x, axis, work, out)
    order = max(a.size, b.size) - 1
    if blocks is None or order == 0:
        return None
    length = x.shape[axis]
    span = _response_length(b, a, length) if irlen is None else irlen
    if length <= 2 * span:
        return None
    block, signal, _ = blocks
    result = np.empty(signal.shape, out)
    signal, target = np.moveaxis(signal, axis, -1), np.moveaxis(result, axis, -1)
    time, rest = signal.ndim - 1, signal.shape[:-1]
    buffer = np.empty((*rest, length), work)
    starts = range(0, length, block)

    def run(part, state):
        """``part`` (time last, in ``work``) filtered from ``state`` (zeros for None)."""
        zi = np.zeros((*rest, order), work) if state is None else state
        return _chunked(b, a, _NUMPY, np.ascontiguousarray(part, work), time, zi)

    def ends(values, start: int, into: np.ndarray) -> None:
        """Samples ``start`` on of ``values`` that fall in the first or last ``span``
        samples, into ``into`` (the first ``span``, then the last)."""
        for first, offset in ((0, 0), (length - span, span)):
            lo, hi = max(start, first), min(start + values.shape[-1], first + span)
            if lo < hi:
                into[..., offset + lo - first:offset + hi - first] = values[..., lo - start:
                                                                           hi - start]

    state = None
    for start in starts:  # forward
        buffer[..., start:start + block], state = run(signal[..., start:start + block], state)
    forward_backward, state = np.empty((*rest, 2 * span), work), None
    for start in reversed(starts):  # backward over it: the result, and its ends kept
        part, state = run(buffer[..., start:start + block][..., ::-1], state)
        part = part[..., ::-1]
        target[..., start:start + block] = part
        ends(part, start, forward_backward)
    state = None
    for start in reversed(starts):  # backward over the signal
        part, state = run(signal[..., start:start + block][..., ::-1], state)
        buffer[..., start:start + block] = part[..., ::-1]
    backward_forward, state = np.empty((*rest, 2 * span), work), None
    for start in starts:  # forward over that: its ends
        part, state = run(buffer[..., start:start + block], state)
        ends(part, start, backward_forward)
    fit, effect = _gustafsson_operators(b, a, span, whole=False)
    states = _NUMPY.apply_along(fit, backward_forward - forward_backward, time)
    corrected = forward_backward + _NUMPY.apply_along(effect, states, time)
    target[..., :span], target[..., length - span:] = corrected[..., :span], corrected[..., span:]
    return ns.from_numpy(result)


def _state_response(b: np.ndarray, a: np.ndarray, length: int) -> np.ndarray:
    """The filter's output from the unit first state and no input: ``1 / a``'s impulse
    response (the first state enters the output as an impulse at the first sample)."""
    impulse = np.zeros(length, np.result_type(b, a, np.float64))
    impulse[:1] = 1
    return _filter(np.ones(1), a, _NUMPY, impulse, 0, None)[0]


def _response_length(b: np.ndarray, a: np.ndarray, length: int) -> int:
    """How long the filter's output from any initial state stays above double precision's
    rounding of its peak: at most ``length``, reached if the response does not decay
    (poles on or outside the unit circle) or decays slowly."""
    order = max(a.size, b.size) - 1
    window = min(length, 1024)
    while window:
        response = np.abs(_state_response(b, a, window))
        above = np.flatnonzero(response > np.finfo(np.float64).eps * response.max())
        last = int(above[-1]) + 1 if above.size else 0
        # seen decayed for as long again as it took: the rest is taken as below too
        if 2 * last <= window or window == length:
            return min(length, last + order)  # the last state enters `order` samples later
        window = min(2 * window, length)
    return 0


def _gustafsson_operators(b: np.ndarray, a: np.ndarray, span: int, whole: bool):
    """The least-squares fit of the two initial states and their effect on the output.

    With ``O`` the output of the filter from each unit initial state (zero
    input; ``span`` samples, one column per state), ``R`` time reversal and
    ``S = F R O`` those outputs reversed and filtered again, forward-backward
    filtering from states ``(s0, s1)`` adds ``[R S, R O] (s0; s1)`` to its
    zero-state output and backward-forward filtering adds ``[O, S]``: Gustafsson's
    states make the two agree, ``[R S - O, R O - S] (s0; s1) = bf - fb`` in the
    least-squares sense. Returns the pseudo-inverse of that matrix (``fit``,
    ``(2 order, rows)``) and ``[R S, R O]`` (``effect``, ``(rows, 2 order)``), where the
    rows are the whole signal (``whole``), or its first and last ``span`` samples,
    the states of each end reaching only that end.
    """
    order = max(a.size, b.size) - 1
    response = _state_response(b, a, span)
    dtype = response.dtype
    unit = np.zeros((span, order), dtype)  # the k-th state's output is the first's, k later
    for k in range(min(order, span)):  # states past the span reach none of it
        unit[k:, k] = response[:span - k]
    again = _filter(b, a, _NUMPY, np.ascontiguousarray(unit[::-1].T), 1, None)[0].T

    def columns(first, second):
        """The two states' columns: over the whole signal, or each at its own end."""
        if whole:
            return np.hstack([first, second])
        both = np.zeros((2 * span, 2 * order), dtype)
        both[:span, :order], both[span:, order:] = first, second
        return both

    effect = columns(again[::-1], unit[::-1])  # on forward-backward filtering
    mismatch = effect - columns(unit, again)  # less that on backward-forward filtering
    # Singular values below machine epsilon relative to the largest count as zero, as in
    # LAPACK's least-squares solver by default.
    return np.linalg.pinv(mismatch, rcond=np.finfo(np.float64).eps), effect


@public
@_sizes_when_run("x")
@_front_door
@_needs_steady_state("starts its passes from, as SciPy's does")
def sosfiltfilt(sos: ArrayLike, x: ArrayLike, axis: int = -1, padtype: PadType = "odd",
                padlen: int | None = None):
    """Filter `x` forward and backward in second-order sections, as ``scipy.signal.sosfiltfilt``.

    Parameters
    ----------
    sos : array_like
        ``(n_sections, 6)``: each row ``[b0, b1, b2, a0, a1, a2]``; constants,
        not differentiated.
    x : array_like
        The signal, any shape: a NumPy or CuPy array, or a torch, JAX or
        TensorFlow tensor (the result is the same framework's, differentiable).
    axis : int, default -1
        The time axis.
    padtype : {'odd', 'even', 'constant', None}, default 'odd'
        How `x` is extended at both ends, as in `filtfilt`.
    padlen : int, optional
        The length of each extension; by default SciPy's ``3 * (2 *
        n_sections + 1 - min(z_b, z_a))``, with ``z_b`` and ``z_a`` the counts
        of sections whose ``b2`` and ``a2`` are zero. `x` must be longer than
        it.

    Returns
    -------
    y : ndarray
        The filtered signal, `x`'s shape; dtypes as in `lfilter`.

    Notes
    -----
    As in `filtfilt`: both passes start from the sections' steady state for
    the end value they start at (`sosfilt_zi`), and on finite signals of at
    most 512 samples on the CPU, a third call with the same sections,
    settings and length is one product with the whole scheme's matrix for
    that length.

    Examples
    --------
    >>> import numpy as np
    >>> from cuscan.signal import sosfiltfilt
    >>> sos = [[0.5, 0.0, 0.0, 1.0, -0.5, 0.0]]
    >>> sosfiltfilt(sos, np.ones(8))
    array([1., 1., 1., 1., 1., 1., 1., 1.])
    """
    sos = _sections(sos)
    ns, x, axis = _signal(x, axis)
    work, out = _dtypes(ns, x, sos)
    taps = 2 * len(sos) + 1 - min(np.sum(sos[:, 2] == 0), np.sum(sos[:, 5] == 0))
    edge = _edge(x, axis, padtype, padlen, int(taps))

    def whole(ns, x, axis: int, work, out):
        steady = _sections_steady_state(sos)
        done = _in_blocks(lambda x, zi: _cascade(sos, _NUMPY, x, x.ndim - 1, zi),
                          steady, ns, x, axis, padtype, edge, work, out)
        if done is not None:
            return done
        x, axis, _, outward = _time_major(ns, ns.cast(x, work), axis,
                                          keep=_keep(ns, not np.iscomplexobj(sos),
                                                     sections=len(sos)))

        def run(x, zi):
            return _cascade(sos, ns, x, axis, zi)

        y = _forward_backward(run, steady, (sos.tobytes(),), ns, x, axis, padtype, edge,
                              sections=len(sos))
        return outward(ns.cast(y, out))

    key = ("sosfiltfilt", padtype, edge, sos.dtype.str, sos.tobytes())
    return _zero_phase(key, ns, x, axis, work, out, np.result_type(sos, np.float64), whole)
