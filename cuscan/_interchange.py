"""Adapter for any other array with ``__dlpack__`` or ``__cuda_array_interface__``.

Such arrays are viewed, without copies, as NumPy arrays (CPU) or CuPy arrays
(CUDA), and the results are NumPy or CuPy arrays. There is no autodiff: a
framework that needs it has its own adapter.
"""

from __future__ import annotations

import numpy as np

from cuscan import _api, _backend

_DLPACK_CPU = 1


def to_array(value):
    """A NumPy or CuPy view of an interchange array; scalars and None pass through."""
    if not _backend.interchangeable(value):
        return value
    if not hasattr(value, "__cuda_array_interface__") and (
            value.__dlpack_device__()[0] == _DLPACK_CPU):
        try:
            return np.from_dlpack(value)
        except (BufferError, TypeError):
            if not hasattr(value, "__array__"):
                raise
            # An array its library cannot export (pyarrow's with nulls, say): NumPy's
            # conversion, a copy, as for any array_like (nulls become NaN).
            return np.asarray(value)
    cupy = _backend.cupy_for(f"a {type(value).__name__}")
    if hasattr(value, "__cuda_array_interface__"):
        return cupy.asarray(value)
    return cupy.from_dlpack(value)


def linear_recurrence(decays, impulses, initial_state, *, axis, reverse, method):
    """``cuscan.linear_recurrence`` for interchange arrays (called by the front door)."""
    return _api.forward(to_array(decays), to_array(impulses), to_array(initial_state),
                        axis=axis, reverse=reverse, method=method)


def linear_recurrence_vjp(grad_output, decays, output, initial_state, *, axis, reverse):
    """``cuscan.linear_recurrence_vjp`` for interchange arrays (called by the front door)."""
    return _api.backward(to_array(grad_output), to_array(decays), to_array(output),
                         to_array(initial_state), axis=axis, reverse=reverse)
