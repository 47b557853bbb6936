"""Drives the CUDA kernels: layouts, chunking and the recursive carry scan.

Independent of CuPy: an array module and a kernel launcher are passed in, so
the same plan runs on the GPU (``_cupy_backend``) and, in the test suite, on
the kernels compiled for the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cuscan import _dtypes

CHANNEL_DIMS = 4  # channel dimensions the kernels index (kernels/linear_recurrence.cu)
KEPT_LAUNCHES = 256  # serial launches kept by layout (see KernelBackend._serial)


@dataclass(frozen=True)
class Operand:
    """An array and its strides in elements: time first, then one per channel dimension."""

    array: object
    strides: tuple[int, ...]


def _merge(sizes: Sequence[int], strides: Sequence[Sequence[int]]):
    """Merge adjacent channel dimensions that every operand steps through evenly.

    ``strides[k][d]`` is operand k's stride along dimension d. Returns the
    merged sizes and each operand's merged strides, innermost dimension last.
    """
    merged: list[tuple[int, list[int]]] = []  # innermost first
    for d in reversed(range(len(sizes))):
        if sizes[d] == 1:
            continue
        column = [s[d] for s in strides]
        if merged:
            size, inner = merged[-1]
            if all(c == i * size for c, i in zip(column, inner, strict=True)):
                merged[-1] = (size * sizes[d], inner)
                continue
        merged.append((sizes[d], column))
    merged.reverse()
    return [m[0] for m in merged], [[m[1][k] for m in merged] for k in range(len(strides))]


class KernelBackend:
    """Runs linear recurrences with the kernels of kernels/linear_recurrence.cu.

    Parameters
    ----------
    xp : module
        The array module of the operands (CuPy, or NumPy on the host).
    launch : callable
        ``launch(kernel, dtype, work_items, *args)`` runs a kernel over
        ``work_items`` threads; arrays pass as pointers to their first element,
        None as a null pointer and ints as 64-bit integers.
    target_threads : int
        How many (channel, chunk) threads the chunked kernels aim for where the
        channels are contiguous in memory.
    min_chunk : int
        The shortest chunk there.
    min_parallel_length, max_parallel_channels : int
        ``method="auto"`` runs the chunked kernels on such layouts for sequences
        at least this long with fewer channels than this, and the serial kernel
        otherwise.
    major_chunk : int
        The chunk length where time steps are contiguous in memory: short, so
        that the chunks of one warp share cache lines (see ``owner`` in the
        kernels).
    min_parallel_length_major, min_parallel_elements_major, always_parallel_length_major : int
        ``method="auto"`` chunks those layouts for sequences at least
        ``min_parallel_length_major`` long holding at least
        ``min_parallel_elements_major`` elements in all, and for any sequence at
        least ``always_parallel_length_major`` long: there the serial kernel's
        cost per step grows with the channel count.

    The defaults of the thresholds are the crossovers measured on an H100
    (benchmarks/table1.py, both layouts; results in benchmarks/results/), where
    a chunked call costs a few hundred microseconds of launches more than a
    serial one.
    """

    def __init__(self, xp, launch: Callable[..., None], *, target_threads: int = 1 << 17,
                 min_chunk: int = 16, min_parallel_length: int = 4096,
                 max_parallel_channels: int = 1 << 16, major_chunk: int = 8,
                 min_parallel_length_major: int = 1024,
                 min_parallel_elements_major: int = 1 << 17,
                 always_parallel_length_major: int = 8192):
        self.xp = xp
        self.launch = launch
        self.target_threads = target_threads
        self.min_chunk = min_chunk
        self.min_parallel_length = min_parallel_length
        self.max_parallel_channels = max_parallel_channels
        self.major_chunk = major_chunk
        self.min_parallel_length_major = min_parallel_length_major
        self.min_parallel_elements_major = min_parallel_elements_major
        self.always_parallel_length_major = always_parallel_length_major

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name != "_kept":  # the kept launches follow from every setting
            super().__setattr__("_kept", {})

    # ---- entry points, as every backend has them --------------------------

    def forward(self, decays, impulses, initial_state, out, axis: int, method: str) -> None:
        """Compute ``out[t] = decays[t] * out[t-1] + impulses[t]`` along ``axis``."""
        if out.size == 0:
            return
        arrays = (decays, impulses, initial_state, out)
        key = ("forward", axis, method, *map(_signature, arrays))
        if self._run_kept(key, arrays):
            return
        sizes, operands = self._layout(axis, list(arrays), outputs=1)
        a, x, h0, o = operands
        length = out.shape[axis]
        if self._parallel(length, math.prod(sizes), method, _chunk_major(o, sizes)):
            self._forward(a, x, h0, o, length, sizes, out.dtype, method)
        else:
            self._serial("linear_recurrence_fwd_serial", key, arrays, operands, length, sizes,
                         out.dtype)

    def backward(self, grad_output, decays, output, initial_state, grad_decays, grad_impulses,
                 grad_initial_state, axis: int) -> None:
        """The vector-Jacobian product, written into the three ``grad_*`` buffers."""
        if grad_impulses.size == 0:
            if grad_initial_state is not None:
                grad_initial_state[...] = 0
            return
        arrays = (grad_output, decays, output, initial_state, grad_decays, grad_impulses,
                  grad_initial_state)
        key = ("backward", axis, *map(_signature, arrays))
        if self._run_kept(key, arrays):
            return
        sizes, operands = self._layout(axis, list(arrays), outputs=3)
        go, a, h, h0, ga, gx, gh0 = operands
        length, dtype = output.shape[axis], grad_impulses.dtype
        if self._parallel(length, math.prod(sizes), "auto", _chunk_major(gx, sizes)):
            self._backward_chunked(go, a, h, h0, ga, gx, gh0, length, sizes, dtype)
        else:
            self._serial("linear_recurrence_bwd_serial", key, arrays, operands, length, sizes,
                         dtype)

    # ---- serial launches kept by layout ---------------------------------------

    def _serial(self, kernel: str, key, arrays, operands, length: int, sizes, dtype) -> None:
        """Launch a serial kernel over ``operands`` (the laid-out ``arrays``), and keep the
        launch for arrays of the same layout, ``key``: a small call then skips the layout,
        its plan and the argument list, which cost more on the host than the launch itself.
        Kept only where the layout took the arrays as given (no copies)."""
        count = math.prod(sizes)
        rest = (None, length, *sizes, *_strides(*operands))
        if all(operand is None if array is None else operand.array is array
               for array, operand in zip(arrays, operands, strict=True)):
            if len(self._kept) >= KEPT_LAUNCHES:
                self._kept.clear()
            self._kept[key] = (kernel, dtype, count, rest)
        self.launch(kernel, dtype, count, *_pointers(*operands), *rest)

    def _run_kept(self, key, arrays) -> bool:
        """Run the serial launch kept for ``key`` on ``arrays``; False if there is none."""
        kept = self._kept.get(key)
        if kept is None:
            return False
        kernel, dtype, count, rest = kept
        self.launch(kernel, dtype, count, *arrays, *rest)
        return True

    # ---- layouts -----------------------------------------------------------

    def _layout(self, axis: int, arrays: list, outputs: int):
        """Channel sizes and one Operand per array (None stays None).

        ``arrays`` hold full-shape views, or state views (the shape without
        ``axis``) that have one dimension fewer; the last ``outputs`` are
        written. Channel dimensions are merged across all operands; only if more
        than four remain are the inputs copied to contiguous memory.
        """
        full = max(a.ndim for a in arrays if a is not None)
        for attempt in range(2):
            present, strides = [], []
            for array in arrays:
                if array is None:
                    continue
                elements = self._elements(array)
                if array.ndim == full:
                    time = elements[axis]
                    channel = elements[:axis] + elements[axis + 1:]
                else:
                    time, channel = 0, elements
                present.append((array, time))
                strides.append(channel)
            reference = next(a for a in arrays if a is not None and a.ndim == full)
            shape = reference.shape[:axis] + reference.shape[axis + 1:]
            sizes, merged = _merge(shape, strides)
            if len(sizes) <= CHANNEL_DIMS:
                break
            if attempt:
                raise RuntimeError(f"cannot lay out {shape} in {CHANNEL_DIMS} dimensions")
            inputs = len(arrays) - outputs
            arrays = [None if a is None else self.xp.ascontiguousarray(a) if k < inputs else a
                      for k, a in enumerate(arrays)]
        pad = CHANNEL_DIMS - len(sizes)
        sizes = [1] * pad + sizes
        operands = iter(Operand(array, (time, *[0] * pad, *channel))
                        for (array, time), channel in zip(present, merged, strict=True))
        return sizes, [None if a is None else next(operands) for a in arrays]

    @staticmethod
    def _elements(array) -> list[int]:
        itemsize = array.dtype.itemsize
        if any(s % itemsize for s in array.strides):  # pragma: no cover - not from NumPy/CuPy
            raise ValueError("strides must be whole elements")
        return [s // itemsize for s in array.strides]

    def _scratch(self, chunks: int, sizes: list[int], dtype, major: bool) -> Operand:
        """A contiguous work array, slot w of the chunked kernels' item w: (chunks,
        channels), or (channels, chunks) when ``major`` (chunk-major items)."""
        count = math.prod(sizes)
        if major:
            return Operand(self.xp.empty((count, chunks), dtype),
                           (1, *[chunks * s for s in _contiguous(sizes)]))
        return Operand(self.xp.empty((chunks, count), dtype), (count, *_contiguous(sizes)))

    @staticmethod
    def _reversed(scratch: Operand, major: bool) -> Operand:
        """The work array read backwards in time."""
        array = scratch.array[:, ::-1] if major else scratch.array[::-1]
        return Operand(array, (-scratch.strides[0], *scratch.strides[1:]))

    def _as(self, state: Operand | None, sizes: list[int], dtype) -> Operand | None:
        """A state in ``dtype`` (the carry dtype), copied only if it is not already."""
        if state is None or state.array.dtype == dtype:
            return state
        itemsize = state.array.dtype.itemsize
        view = self.xp.lib.stride_tricks.as_strided(
            state.array, shape=tuple(sizes), strides=tuple(s * itemsize for s in state.strides[1:]))
        return Operand(self.xp.ascontiguousarray(view, dtype=dtype), (0, *_contiguous(sizes)))

    # ---- the plan ------------------------------------------------------------

    def _parallel(self, length: int, channels: int, method: str, major: bool) -> bool:
        if length <= 1:  # nothing to chunk (and where the carries' recursion ends)
            return False
        if method == "auto":
            if major:
                return length >= self.always_parallel_length_major or (
                    length >= self.min_parallel_length_major
                    and length * channels >= self.min_parallel_elements_major)
            return (length >= self.min_parallel_length
                    and channels < self.max_parallel_channels)
        return method == "parallel"

    def _chunking(self, length: int, channels: int, major: bool) -> tuple[int, int]:
        """Chunk length and count: at least two steps a chunk, so that the carries' scan
        (over the chunks) is shorter than the scan it serves, whatever the settings."""
        if major:
            chunk = self.major_chunk
        else:
            chunk = max(self.min_chunk, -(-length * channels // self.target_threads))
        chunk = min(max(chunk, 2), length)
        return chunk, -(-length // chunk)

    def _forward(self, a, x, h0, out, length, sizes, dtype, method) -> None:
        count = math.prod(sizes)
        major = _chunk_major(out, sizes)
        if not self._parallel(length, count, method, major):
            self.launch("linear_recurrence_fwd_serial", dtype, count, *_pointers(a, x, h0, out),
                        None, length, *sizes, *_strides(a, x, h0, out))
            return
        wide = _dtypes.carry(dtype)
        chunk, chunks = self._chunking(length, count, major)
        products, reduced, carries = (self._scratch(chunks, sizes, wide, major) for _ in range(3))
        flags = self.xp.zeros(count, np.int32)  # channels to re-run serially
        self.launch("linear_recurrence_fwd_reduce", dtype, count * chunks, a.array, x.array,
                    products.array, reduced.array, flags, length, chunk, chunks, major, *sizes,
                    *_strides(a, x))
        # carries[k]: the state at the end of chunk k, by the same algorithm in the
        # carry dtype.
        self._forward(products, reduced, self._as(h0, sizes, wide), carries, chunks, sizes,
                      wide, "auto")
        self.launch("linear_recurrence_fwd_rescan", dtype, count * chunks, a.array, x.array,
                    _pointer(h0), carries.array, out.array, flags, length, chunk, chunks,
                    major, *sizes, *_strides(a, x, h0, out))
        self.launch("linear_recurrence_fwd_serial", dtype, count, *_pointers(a, x, h0, out),
                    flags, length, *sizes, *_strides(a, x, h0, out))

    def _backward_chunked(self, go, a, h, h0, ga, gx, gh0, length, sizes, dtype) -> None:
        count = math.prod(sizes)
        wide = _dtypes.carry(dtype)
        major = _chunk_major(gx, sizes)
        chunk, chunks = self._chunking(length, count, major)
        products, reduced, starts = (self._scratch(chunks, sizes, wide, major) for _ in range(3))
        flags = self.xp.zeros(count, np.int32)  # channels to re-run serially
        self.launch("linear_recurrence_bwd_reduce", dtype, count * chunks, go.array, a.array,
                    products.array, reduced.array, flags, length, chunk, chunks, major, *sizes,
                    *_strides(go, a))
        # starts[k] = products[k] * starts[k + 1] + reduced[k]: the gradient at
        # the start of chunk k, a forward scan over the chunks read backwards.
        self._forward(self._reversed(products, major), self._reversed(reduced, major), None,
                      self._reversed(starts, major), chunks, sizes, wide, "auto")
        self.launch("linear_recurrence_bwd_rescan", dtype, count * chunks, go.array, a.array,
                    h.array, _pointer(h0), starts.array, ga.array, gx.array, _pointer(gh0),
                    flags, length, chunk, chunks, major, *sizes,
                    *_strides(go, a, h, h0, ga, gx, gh0))
        self.launch("linear_recurrence_bwd_serial", dtype, count,
                    *_pointers(go, a, h, h0, ga, gx, gh0), flags, length, *sizes,
                    *_strides(go, a, h, h0, ga, gx, gh0))


def _signature(array) -> tuple | None:
    """What a serial launch's arguments other than its pointers follow from."""
    return None if array is None else (array.shape, array.strides, array.dtype)


def _chunk_major(written: Operand, sizes: list[int]) -> bool:
    """Whether the chunked kernels take chunk-major items for this written operand:
    where it steps through time faster than through any of its channels."""
    channel = [abs(s) for s, size in zip(written.strides[1:], sizes, strict=True) if size > 1]
    return abs(written.strides[0]) < min(channel, default=math.inf)


def _contiguous(sizes: list[int]) -> list[int]:
    """The channel strides, in elements, of C-contiguous channels of these sizes."""
    return [math.prod(sizes[d + 1:]) for d in range(CHANNEL_DIMS)]


def _pointer(operand: Operand | None):
    return None if operand is None else operand.array


def _pointers(*operands: Operand | None) -> list:
    return [_pointer(op) for op in operands]


def _strides(*operands: Operand | None) -> list[int]:
    return [s for op in operands for s in (op.strides if op else (0,) * (1 + CHANNEL_DIMS))]
