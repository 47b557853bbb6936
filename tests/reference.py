"""The one reference: a float64 (complex128) serial loop, and its error scale."""

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
