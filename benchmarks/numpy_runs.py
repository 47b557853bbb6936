"""The NumPy backend on steps in several runs: (B, T, D) along axis 1.

A step of a (B, T, D) array along axis 1 lies in B runs of D contiguous elements; every
vector operation of the scans then costs NumPy an outer loop over the runs. From 32 steps
of at most `_MAX_RUNS_ROW` bytes, `_MIN_RUNS_BYTES` in all, the backend scans time-major
copies instead, a segment of time at a time (`_scattered`).

Times `method="auto"` forward and the vector-Jacobian product with `_MAX_RUNS_ROW` at -1
(never copied), 8 KiB, the chosen value and 32 KiB, alternated in one process (so a loaded
machine slows all alike), on (B, T, D) shapes of 2 to 128 runs of 4 to 4,096 elements in
four dtypes; then `_MIN_RUNS_BYTES` at 0, the chosen value and 256 KiB on small shapes.
Prints each time over the chosen setting's, then the chosen one's. Writes
results/numpy_runs.json.

    python -m benchmarks.numpy_runs
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import environment, settings_table, without_options, write
from cuscan import _numpy_backend

SHAPES = [(8, 1024, 256), (16, 2048, 128), (4, 4096, 512), (32, 512, 64), (8, 4096, 64),
          (2, 8192, 1024), (64, 256, 256), (4, 16384, 16), (16, 4096, 16), (2, 2048, 4096),
          (128, 128, 512), (8, 65536, 4), (4, 1024, 1024), (384, 1000, 2)]
SMALL_SHAPES = [(8, 16, 256), (8, 32, 256), (8, 64, 256), (16, 64, 64), (4, 32, 16),
                (4, 128, 16), (2, 64, 4), (2, 512, 4), (4, 512, 16)]
DTYPES = (np.float16, np.float32, np.float64, np.complex64)
ROWS = (-1, 2**13, 2**14, 2**15)
BYTES = (0, 2**16, 2**18)
REPEATS = 5


def calls(rng, shape, dtype) -> dict:
    """The forward scan along axis 1 and its vector-Jacobian product."""
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.5, 1.0, shape).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=1)
    return {"forward": functools.partial(cuscan.linear_recurrence, a, x, axis=1),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=1)}


def main() -> None:
    rng = np.random.default_rng(0)
    def repeats(shape) -> int:
        return max(3, min(4 * REPEATS, 10**7 // math.prod(shape)))

    make = functools.partial(calls, rng)
    rows = settings_table(SHAPES, DTYPES, make, _numpy_backend, "_MAX_RUNS_ROW", ROWS, repeats)
    small = settings_table(SMALL_SHAPES, DTYPES, make, _numpy_backend, "_MIN_RUNS_BYTES", BYTES,
                           repeats)
    path = write("numpy_runs", {"environment": environment(),
                                "chosen_max_runs_row": _numpy_backend._MAX_RUNS_ROW,
                                "chosen_min_runs_bytes": _numpy_backend._MIN_RUNS_BYTES,
                                "rows": rows, "small_rows": small})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
