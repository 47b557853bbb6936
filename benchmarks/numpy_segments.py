"""The NumPy backend in segments of time: the copies of one segment, or of the whole.

Operands the backend copies before scanning (time-contiguous ``(C, T)`` arrays
along axis -1 copied time-major; half-precision ones converted to float32, in the
blocked scan of decays constant in time too) are copied, scanned and copied back a
segment of time at a time, each from the state the last one left, so that the copies
hold one segment rather than the whole operand. Times the forward scan and its
vector-Jacobian product both ways (the segment size set out of reach for the whole),
alternated in one process (so a loaded machine slows both alike), and the most
memory a call holds beyond its inputs, the result included (tracemalloc, which NumPy
reports to); prints segments / whole and both memories. Operands over 512 MiB, which the backend
scanned as they lie before the segments bounded its copies, are timed in
segments against that: with `_MAX_STRIDED_ROW` out of reach no time-major copy
is made, and the chunked scan copies its chunks from the operand as it lies. Then the
segment's size: `_SEGMENT_BYTES` of 256 KiB to 16 MiB against the chosen one, forward and
backward, on copied operands of 4 to 64 MiB, where smaller segments keep the copies in
cache between the copy, the scan and the copy back. Writes results/numpy_segments.json.

    python -m benchmarks.numpy_segments
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import (
    against_chosen,
    alternated,
    environment,
    peak_memories,
    without_options,
    write,
)
from cuscan import _numpy_backend

# (shape, dtype, time axis, decays constant in time: the blocked scan)
CASES = [((64, 10**6), "float64", -1, False), ((16, 10**6), "complex128", -1, False),
         ((256, 2 * 10**5), "float32", -1, False), ((10**6, 64), "float16", 0, False),
         ((64, 10**6), "float16", -1, True), ((6 * 10**7,), "float16", 0, True)]
LARGE = [(64, 1_100_000), (32, 2_200_000)]  # float64, over 512 MiB
# (shape, dtype, time axis) of copied operands: time-contiguous, or half precision
SIZE_CASES = [((2048, 4096), "float32", -1), ((2048, 4096), "float64", -1),
              ((2048, 1024), "float32", -1), ((1000, 1000), "float32", -1),
              ((256, 32768), "float32", -1), ((256, 32768), "complex64", -1),
              ((8, 64, 8192), "float64", -1), ((512, 8192), "float64", -1),
              ((64, 65536), "float32", -1), ((300, 10007), "float32", -1),
              ((4096, 2048), "float16", 0), ((65536, 64), "float16", 0)]
SIZES = (2**18, 2**19, 2**20, 2**22, 2**24)


def main() -> None:
    rng = np.random.default_rng(0)
    settings = {"segments": _numpy_backend._SEGMENT_BYTES, "whole": math.inf}
    rows = []
    print("segments / whole (< 1: segments are faster); memory beyond the inputs (MiB): "
          "segments, whole")
    for shape, dtype, axis, constant in CASES:
        decays = rng.uniform(0.5, 1.0, (*shape[:-1], 1) if constant else shape).astype(dtype)
        impulses = rng.uniform(-1.0, 1.0, shape).astype(dtype)
        output = cuscan.linear_recurrence(decays, impulses, axis=axis)
        weights = rng.uniform(-1.0, 1.0, shape).astype(dtype)
        for name, function in (
                ("forward", functools.partial(cuscan.linear_recurrence, decays, impulses,
                                              axis=axis)),
                ("vjp", functools.partial(cuscan.linear_recurrence_vjp, weights, decays,
                                          output, axis=axis))):
            best = alternated(function, _numpy_backend, "_SEGMENT_BYTES", settings, 3)
            memory = peak_memories(function, _numpy_backend, "_SEGMENT_BYTES", settings)
            row = {"shape": list(shape), "dtype": dtype, "axis": axis,
                   "constant_decays": constant, "function": name,
                   "segments_s": best["segments"], "whole_s": best["whole"],
                   "segments_bytes": memory["segments"], "whole_bytes": memory["whole"],
                   "operand_bytes": impulses.nbytes}
            rows.append(row)
            print(f"{'x'.join(map(str, shape)):>12} {dtype:>10} {axis:>3} "
                  f"{'constant' if constant else 'full':>8} {name:>8} "
                  f"{row['segments_s'] / row['whole_s']:6.2f} "
                  f"{row['segments_s'] * 1e3:8.1f} ms "
                  f"{memory['segments'] / 2**20:7.0f} {memory['whole'] / 2**20:7.0f}",
                  flush=True)
    large = []
    print("over 512 MiB, float64 along axis -1: segments / as they lie")
    for shape in LARGE:
        decays, impulses = rng.uniform(0.5, 1.0, shape), rng.uniform(-1.0, 1.0, shape)
        function = functools.partial(cuscan.linear_recurrence, decays, impulses, axis=-1)
        best = alternated(function, _numpy_backend, "_MAX_STRIDED_ROW",
                          {"segments": _numpy_backend._MAX_STRIDED_ROW, "as_they_lie": math.inf},
                          2, rounds=2)
        large.append({"shape": list(shape), "segments_s": best["segments"],
                      "as_they_lie_s": best["as_they_lie"], "operand_bytes": impulses.nbytes})
        print(f"{'x'.join(map(str, shape)):>12} {best['segments'] / best['as_they_lie']:6.2f} "
              f"{best['segments'] * 1e3:8.1f} ms", flush=True)
    sizes = segment_sizes(rng)
    path = write("numpy_segments", {"environment": environment(),
                                    "segment_bytes": _numpy_backend._SEGMENT_BYTES,
                                    "rows": rows, "large": large, "sizes": sizes})
    print(f"wrote {path}")


def segment_sizes(rng) -> list:
    """Each of SIZES of `_SEGMENT_BYTES` against the chosen one on SIZE_CASES."""
    chosen = _numpy_backend._SEGMENT_BYTES
    print(f"\ntime / time with segments of {chosen // 1024} KiB, forward and vjp, "
          "for segments of " + ", ".join(f"{size // 1024}" for size in SIZES) + " KiB")
    rows = []
    for shape, dtype, axis in SIZE_CASES:
        decays = rng.uniform(0.5, 1.0, shape).astype(dtype)
        impulses = rng.standard_normal(shape).astype(dtype)
        output = cuscan.linear_recurrence(decays, impulses, axis=axis)
        calls = {"forward": functools.partial(cuscan.linear_recurrence, decays, impulses,
                                              axis=axis),
                 "vjp": functools.partial(cuscan.linear_recurrence_vjp, impulses, decays,
                                          output, axis=axis)}
        row = {"shape": list(shape), "dtype": dtype, "axis": axis}
        cells = against_chosen(row, calls, _numpy_backend, "_SEGMENT_BYTES", SIZES, 4)
        rows.append(row)
        print(f"{'x'.join(map(str, shape)):>12} {dtype:>10} {axis:>3} {cells}   "
              f"{row['forward_s'][str(chosen)] * 1e3:.1f} {row['vjp_s'][str(chosen)] * 1e3:.1f}"
              " ms", flush=True)
    return rows


if __name__ == "__main__":
    without_options(__doc__)
    main()
