"""The CUDA kernels compiled for the CPU, behind the same launch plan as on the GPU."""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from cuscan import _kernels, _numpy_backend
from cuscan._kernel_backend import KernelBackend

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parents[1] / "kernels"


def build() -> ctypes.CDLL:
    """Compile host.cpp with the kernel source (cached by content and by the flags of
    CUSCAN_HOST_FLAGS, added to the compiler's: the sanitizers of .ci/sanitizers) and load
    it."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("compiling the kernels for the host needs g++")
    flags = os.environ.get("CUSCAN_HOST_FLAGS", "").split()
    source = (HERE / "host.cpp").read_bytes() + _kernels.source().encode()
    digest = hashlib.sha256(source + " ".join(flags).encode()).hexdigest()[:16]
    library = Path(tempfile.gettempdir()) / f"cuscan-kernel-host-{digest}.so"
    if not library.exists():
        scratch = library.with_suffix(f".{id(source)}.tmp")
        subprocess.run([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-fno-fast-math",
                        "-ffp-contract=off", *flags, "-I", str(KERNELS),
                        str(HERE / "host.cpp"), "-o", str(scratch)],
                       check=True, capture_output=True, text=True)
        scratch.replace(library)
    return ctypes.CDLL(str(library))


def _argument(value):
    if value is None:
        return ctypes.c_void_p(0)
    if isinstance(value, np.ndarray):
        return ctypes.c_void_p(value.ctypes.data)
    return ctypes.c_longlong(value)


def _work_items(kernel: str, args) -> int:
    """A launch's work items, from its arguments as kernels/linear_recurrence.cu declares them:
    one per channel for the serial kernels (whose four channel sizes follow ``length``), one
    per (channel, chunk) pair for the others (``length, chunk, chunks, chunk_major``, then the
    sizes)."""
    integers = [a for a in args if isinstance(a, int)]
    if kernel.endswith("_serial"):
        return math.prod(integers[1:5])
    return integers[2] * math.prod(integers[4:8])


class HostKernels:
    """A launcher with the signature KernelBackend expects."""

    def __init__(self, library: ctypes.CDLL):
        self.library = library
        self.launches: list[str] = []

    def __call__(self, kernel: str, dtype, work: int, *args) -> None:
        self.launches.append(kernel)
        items = _work_items(kernel, args)
        if type(work) is not int or work != items:  # a GPU would run too few or too many threads
            raise AssertionError(f"{kernel} launched over {work!r} threads for {items} work items")
        if work == 0:
            return
        values = [_argument(a) for a in args]
        pointers = (ctypes.c_void_p * len(values))(
            *(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values))
        getattr(self.library, f"{kernel}_{np.dtype(dtype).name}")(pointers)


def backend(library: ctypes.CDLL) -> KernelBackend:
    """The kernel backend on NumPy arrays, chunking even short sequences."""
    return KernelBackend(np, HostKernels(library), target_threads=64, min_chunk=3,
                         min_parallel_length=8, major_chunk=3, min_parallel_length_major=8,
                         min_parallel_elements_major=0)


def install(monkeypatch, backend: KernelBackend) -> KernelBackend:
    """``backend`` in place of the NumPy backend's forward and backward, for one test."""
    monkeypatch.setattr(_numpy_backend, "forward", backend.forward)
    monkeypatch.setattr(_numpy_backend, "backward", backend.backward)
    return backend


def installed(monkeypatch, **settings) -> KernelBackend:
    """The kernels compiled for the host behind a KernelBackend of ``settings`` (its
    defaults: the GPU's plan), installed for one test (`install`); its ``launch`` is a
    `HostKernels`, which records each launch."""
    return install(monkeypatch, KernelBackend(np, HostKernels(build()), **settings))
