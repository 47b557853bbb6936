"""The one kernel loader: CUDA sources as package resources, compiled lazily by NVRTC."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import numpy as np

from cuscan import _dtypes

SOURCE = "linear_recurrence.cu"

# The kernels, each templated on the storage type.
KERNELS = (
    "linear_recurrence_fwd_serial",
    "linear_recurrence_fwd_reduce",
    "linear_recurrence_fwd_rescan",
    "linear_recurrence_bwd_serial",
    "linear_recurrence_bwd_reduce",
    "linear_recurrence_bwd_rescan",
)

# NVRTC options, shared by the loader and the compile check in the test suite.
COMPILE_OPTIONS = ("--std=c++17",)


def source() -> str:
    """The kernel source: inside the installed package, or beside it in a checkout."""
    packaged = resources.files("cuscan").joinpath("kernels", SOURCE)
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parents[1] / "kernels" / SOURCE).read_text()


def name_expression(kernel: str, dtype: np.dtype) -> str:
    """The C++ name of ``kernel`` instantiated for results of ``dtype``."""
    return f"cuscan::{kernel}<{_dtypes.info(dtype).cuda_storage}>"


def name_expressions(dtype: np.dtype) -> list[str]:
    """Every instantiation one dtype needs."""
    return [name_expression(k, dtype) for k in KERNELS]


@functools.cache
def _module(device: int, dtype_name: str):
    import cupy

    with cupy.cuda.Device(device):
        return cupy.RawModule(code=source(), options=COMPILE_OPTIONS,
                              name_expressions=name_expressions(np.dtype(_dtype(dtype_name))))


def _dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return name


@functools.cache
def _function(device: int, kernel: str, dtype_name: str):
    """Remembered: CuPy looks a kernel up by its C++ name anew at every ``get_function``,
    which cost about 10 us a launch on an H100 machine's host."""
    dtype = np.dtype(_dtype(dtype_name))
    return _module(device, dtype_name).get_function(name_expression(kernel, dtype))


def function(kernel: str, dtype: np.dtype):
    """The compiled ``kernel`` for ``dtype`` on the current device (built on first use)."""
    import cupy

    return _function(cupy.cuda.runtime.getDevice(), kernel, np.dtype(dtype).name)
