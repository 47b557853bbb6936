"""The one reference: a float64 (complex128) serial loop, and its error scale; and for
filters whose float64 results (SciPy's among them) are themselves inexact, their direct
form in extended precision."""

from __future__ import annotations

import numpy as np


def _wide(value) -> np.ndarray:
    array = np.asarray(value)
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


@np.errstate(all="ignore")
def linear_recurrence(decays, impulses, initial_state=None, *, axis=0, reverse=False):
    """``h[t] = decays[t] * h[t-1] + impulses[t]``, one step at a time, in float64.

    The state starts at ``initial_state`` (zero when None) and is multiplied,
    never skipped, so NaN and infinity propagate as IEEE arithmetic dictates.
    """
    decays, impulses = _wide(decays), _wide(impulses)
    shape = np.broadcast_shapes(decays.shape, impulses.shape)
    decays = np.moveaxis(np.broadcast_to(decays, shape), axis, 0)
    impulses = np.moveaxis(np.broadcast_to(impulses, shape), axis, 0)
    dtype = np.result_type(decays, impulses)
    h = np.zeros(impulses.shape[1:], dtype)
    if initial_state is not None:
        h = h + _wide(initial_state)
    out = np.empty(impulses.shape, np.result_type(h, dtype))
    steps = range(out.shape[0])
    for t in reversed(steps) if reverse else steps:
        h = decays[t] * h + impulses[t]
        out[t] = h
    return np.moveaxis(out, 0, axis)


def error_scale(decays, impulses, initial_state=None, *, axis=0, reverse=False):
    """The recurrence over magnitudes: what rounding errors are relative to."""
    def magnitude(v):
        return None if v is None else np.abs(_wide(v))

    return linear_recurrence(magnitude(decays), magnitude(impulses), magnitude(initial_state),
                             axis=axis, reverse=reverse)


# np.longdouble is the 80-bit x87 format on x86-64 Linux, quadruple precision on
# aarch64 Linux, and plain double elsewhere (Windows, macOS on Apple silicon).
EXTENDED = np.finfo(np.longdouble).eps < 1e-18


def direct_form_extended(b, a, x) -> np.ndarray:
    """``scipy.signal.lfilter(b, a, x)`` along the last axis (its transposed direct form II,
    one step at a time) in ``np.longdouble``, rounded to float64 at the end."""
    b, a = np.asarray(b, np.longdouble), np.asarray(a, np.longdouble)
    order = max(a.size, b.size) - 1
    b, a = (np.concatenate([c / a[0], np.zeros(order + 1 - c.size, np.longdouble)])
            for c in (b, a))
    x = np.asarray(x, np.longdouble)
    state = np.zeros((order + 1, *x.shape[:-1]), np.longdouble)
    y = np.empty_like(x)
    for t in range(x.shape[-1]):
        y[..., t] = b[0] * x[..., t] + state[0]
        state[:-1] = (np.multiply.outer(b[1:], x[..., t]) + state[1:]
                      - np.multiply.outer(a[1:], y[..., t]))
    return y.astype(np.float64)
