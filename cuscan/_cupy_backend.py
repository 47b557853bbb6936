"""CuPy backend: the CUDA kernels on CuPy arrays, on the current device and stream."""

from __future__ import annotations

import numpy as np

try:
    import cupy as xp
except ImportError as error:  # pragma: no cover - only without CuPy
    raise ImportError(
        "CuPy arrays need CuPy: install cuscan[cuda13] or cuscan[cuda12]"
    ) from error

from cuscan import _kernels
from cuscan._kernel_backend import KernelBackend

_BLOCK = 256
_MAX_BLOCKS = 1 << 20  # the kernels loop over any further work


def _argument(value):
    if value is None:
        return np.uint64(0)  # a null pointer
    if isinstance(value, int):
        return np.int64(value)
    return value


def _launch(kernel: str, dtype, work: int, *args) -> None:
    """Launch ``kernel`` for ``dtype`` over ``work`` threads on the current stream."""
    if work == 0:
        return
    function = _kernels.function(kernel, dtype)
    blocks = min(-(-work // _BLOCK), _MAX_BLOCKS)
    function((blocks,), (_BLOCK,), tuple(_argument(a) for a in args))


def check_devices(arrays: dict[str, object]) -> None:
    """Raise TypeError unless every CuPy array is on the current device."""
    current = xp.cuda.runtime.getDevice()
    for name, value in arrays.items():
        if isinstance(value, xp.ndarray) and value.device.id != current:
            raise TypeError(
                f"`{name}` is on CUDA device {value.device.id} but the current device is "
                f"{current}; move it, or call inside `with cupy.cuda.Device({value.device.id}):`"
            )


_kernel_backend = KernelBackend(xp, _launch)
forward = _kernel_backend.forward
backward = _kernel_backend.backward
