"""The NumPy backend's whole rows: inner loops over more than one row of channels.

A step of the chunked scan is one NumPy operation over position j of every chunk,
a (C, channels) array. Where the decays are constant in time they arrive
broadcast over the chunks too (stride 0), and NumPy's inner loop then runs over
the channels of one chunk at a time: two elements at a time for two channels.
Narrow rows are also copied into and out of the scan's layout, where the same
happens. From 4,096 rows (steps times chunks) the backend builds the row of
decays over the chunks once and copies a contiguous row of channels as one
opaque element. Times the forward scan and its vector-Jacobian product with
and without both (the threshold set out of reach), alternated in one process
(so a loaded machine slows both alike), on time-major (T, channels) arrays with
decays constant in time (one per channel) and varying; prints whole / without;
writes results/numpy_rows.json.

    python -m benchmarks.numpy_rows
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, without_options, write
from cuscan import _numpy_backend

SHAPES = [(48, 16), (1024, 4), (10**5, 2), (10**6, 1), (10**6, 2), (10**6, 4),
          (3 * 10**5, 8), (3 * 10**5, 16), (10**5, 64)]
DTYPES = (np.float32, np.float64, np.complex128)


def main() -> None:
    rng = np.random.default_rng(0)
    chosen = _numpy_backend._WHOLE_ROWS_FROM
    settings = {"whole": chosen, "without": math.inf}
    rows = []
    print("parallel method (vjp: auto), time with whole rows / without; < 1 means whole rows "
          "are faster")
    print(f"{'shape':>12} {'dtype':>10} {'decays':>8} {'forward':>8} {'vjp':>6} "
          f"{'without (ms)':>13}")
    for shape in SHAPES:
        for dtype in DTYPES:
            for varying in (False, True):
                x = rng.standard_normal(shape).astype(dtype)
                a = rng.uniform(0.9, 0.999, shape if varying else shape[1:]).astype(dtype)
                h = cuscan.linear_recurrence(a, x)
                passes = {"forward": functools.partial(cuscan.linear_recurrence, a, x,
                                                       method="parallel"),
                          "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h)}
                repeats = max(3, min(30, 3 * 10**6 // x.size))
                row = {"shape": list(shape), "dtype": np.dtype(dtype).name,
                       "varying_decays": varying}
                for name, function in passes.items():
                    best = alternated(function, _numpy_backend, "_WHOLE_ROWS_FROM", settings,
                                      repeats)
                    row.update({f"{name}_{s}_s": best[s] for s in settings})
                rows.append(row)
                print(f"{'x'.join(map(str, shape)):>12} {np.dtype(dtype).name:>10} "
                      f"{'varying' if varying else 'fixed':>8} "
                      f"{row['forward_whole_s'] / row['forward_without_s']:>8.2f} "
                      f"{row['vjp_whole_s'] / row['vjp_without_s']:>6.2f} "
                      f"{row['forward_without_s'] * 1e3:>13.2f}", flush=True)
    path = write("numpy_rows", {"environment": environment(), "whole_rows_from": chosen,
                                "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
