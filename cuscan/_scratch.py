"""Temporary arrays for the CPU scans, kept between calls in one pool.

A scan's temporaries (the chunked scan's copies of its chunks, time-major copies of
operands, work arrays in the accumulator's dtype) are as large as a segment of the
operands. Memory of that size fresh from ``numpy.empty`` is often new to the process,
and the first write to each of its 4 KiB pages is a page fault: glibc maps allocations
above its threshold (128 KiB at first) anew, and gives freed memory at the top of its
heap back to the system beyond twice the threshold. (Freeing a mapped block raises the
threshold to its size, up to 32 MiB, so a process that has freed a large array faults
less.) In a new process, on one channel of 2^16 to 2^22 float64 steps and on 64
time-contiguous channels, those faults took up to half a forward call's time and
three quarters of a gradient's (``benchmarks/numpy_scratch.py``).

A `Scratch` scope takes its temporaries from a pool of buffers that earlier scopes gave
back, and gives them back when it closes: at most _POOL_BYTES in all, buffers of
_MIN_POOLED to _MAX_POOLED bytes. Smaller arrays come from ``numpy.empty``, below
glibc's first threshold. The limits are glibc's own once a process has freed a block of
32 MiB: its highest threshold, and twice that kept at the top of its heap. Below them,
what glibc keeps depends on what the process freed before. As a process starts, a loop
of `cuscan.signal.filtfilt` or `sosfiltfilt` calls whose temporaries are 8 MiB each (one
channel of 2^20 samples, 8 of 131,072) takes 0.57 to 0.63 of the time with them pooled
that it takes with them allocated afresh; with the pool's buffers at most 4 MiB, it took
0.95 to 1.07 (``benchmarks/numpy_scratch.py``).
The pool keeps only what calls used, up to its limit. It is shared by all threads, under
a lock; a buffer belongs to one scope at a time, so nothing taken from a scope may
outlive it.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

_MIN_POOLED = 2**17
_MAX_POOLED = 2**25
_POOL_BYTES = 2**26
# Buffers start on a cache line, and their sizes are rounded up to _GRAIN bytes, so that
# segments of slightly different lengths share them.
_ALIGN = 64
_GRAIN = 2**16


class _Pool:
    """Free buffers (1-D uint8 arrays), at most _POOL_BYTES in all."""

    def __init__(self):
        self.lock = threading.Lock()
        self.free: list[np.ndarray] = []
        self.bytes = 0

    def take(self, size: int) -> np.ndarray:
        """A buffer of at least ``size`` bytes: the smallest free one of at most twice
        that, or a new one."""
        with self.lock:
            fits = [i for i, b in enumerate(self.free) if size <= b.nbytes <= 2 * size]
            if fits:
                buffer = self.free.pop(min(fits, key=lambda i: self.free[i].nbytes))
                self.bytes -= buffer.nbytes
                return buffer
        size = -(-size // _GRAIN) * _GRAIN
        raw = np.empty(size + _ALIGN, np.uint8)
        start = -raw.ctypes.data % _ALIGN
        return raw[start:start + size]

    def give(self, buffer: np.ndarray) -> None:
        """Keep ``buffer`` for later scopes, dropping the oldest kept beyond _POOL_BYTES."""
        if buffer.nbytes > _POOL_BYTES:
            return
        with self.lock:
            while self.bytes + buffer.nbytes > _POOL_BYTES:
                self.bytes -= self.free.pop(0).nbytes
            self.free.append(buffer)
            self.bytes += buffer.nbytes


_pool = _Pool()


def _reset_in_child() -> None:
    """A forked child starts with an empty pool (its lock may have been held)."""
    global _pool
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


class Scratch:
    """A scope whose temporaries (`empty`) go back to the pool when it closes."""

    __slots__ = ("taken",)

    def __init__(self):
        self.taken: list[np.ndarray] | None = None  # made at the first buffer taken

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc) -> None:
        if self.taken:
            for buffer in self.taken:
                _pool.give(buffer)
            self.taken = None

    def empty(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An uninitialised C-ordered array, valid until the scope closes."""
        dtype = np.dtype(dtype)
        size = math.prod(shape) * dtype.itemsize
        if not _MIN_POOLED <= size <= _MAX_POOLED:
            return np.empty(shape, dtype)
        buffer = _pool.take(size)
        if self.taken is None:
            self.taken = []
        self.taken.append(buffer)
        return buffer[:size].view(dtype).reshape(shape)

    def like(self, array: np.ndarray, dtype) -> np.ndarray:
        """`empty` with ``array``'s shape and the order of its axes in memory (as
        ``numpy.empty_like``), ascending."""
        order = axis_order(array)
        if order == list(range(array.ndim)):
            return self.empty(array.shape, dtype)
        stored = self.empty(tuple(array.shape[axis] for axis in order), dtype)
        return stored.transpose([order.index(axis) for axis in range(array.ndim)])


def axis_order(array) -> list[int]:
    """The axes of ``array`` from the outermost in memory to the innermost."""
    return sorted(range(array.ndim), key=lambda axis: -abs(array.strides[axis]))
