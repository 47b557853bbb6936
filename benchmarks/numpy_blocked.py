"""The NumPy backend's blocked scan: decays constant in time as matrix products.

Where the decays are constant in time and every channel's steps lie contiguous in
memory (one channel; (C, T) along axis -1), the backend scans chunks of L steps as
products with one L x L matrix of the decays' powers, run by BLAS on the operands
in place, from 256 steps (`_BLOCKED_FROM`). Without it, such operands are scanned
by the chunked or serial method, on time-major copies where the layout is
scattered. Times `method="auto"` forward and the vector-Jacobian product with and
without (the threshold set out of reach), alternated in one process (so a loaded
machine slows both alike), on (channels, T) arrays along axis -1 with one decay
per channel and with a single decay; prints blocked / without; writes
results/numpy_blocked.json.

    python -m benchmarks.numpy_blocked
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, write
from cuscan import _numpy_backend

SHAPES = [(1, 256), (1, 1024), (1, 10**4), (1, 10**5), (1, 10**6), (1, 10**7), (2, 10**6),
          (8, 10**6), (64, 156_250), (512, 2048), (4096, 256), (2048, 2048), (16, 256)]
DTYPES = (np.float32, np.float64, np.complex128)


def main() -> None:
    rng = np.random.default_rng(0)
    chosen = _numpy_backend._BLOCKED_FROM
    settings = {"blocked": chosen, "without": math.inf}
    rows = []
    print("method auto, axis -1, time blocked / without; < 1 means the blocked scan is faster")
    print(f"{'shape':>12} {'dtype':>10} {'decays':>8} {'forward':>8} {'vjp':>6} "
          f"{'without (ms)':>13}")
    for shape in SHAPES:
        for dtype in DTYPES:
            for single in (False, True):
                if single and shape[0] == 1:
                    continue
                x = rng.standard_normal(shape).astype(dtype)
                a = rng.uniform(0.9, 0.999, (1 if single else shape[0], 1)).astype(dtype)
                h = cuscan.linear_recurrence(a, x, axis=-1)
                passes = {"forward": functools.partial(cuscan.linear_recurrence, a, x, axis=-1),
                          "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h,
                                                   axis=-1)}
                repeats = max(3, min(30, 3 * 10**6 // x.size))
                row = {"shape": list(shape), "dtype": np.dtype(dtype).name,
                       "single_decay": single}
                for name, function in passes.items():
                    best = alternated(function, _numpy_backend, "_BLOCKED_FROM", settings,
                                      repeats)
                    row.update({f"{name}_{s}_s": best[s] for s in settings})
                rows.append(row)
                print(f"{'x'.join(map(str, shape)):>12} {np.dtype(dtype).name:>10} "
                      f"{'single' if single else 'channel':>8} "
                      f"{row['forward_blocked_s'] / row['forward_without_s']:>8.2f} "
                      f"{row['vjp_blocked_s'] / row['vjp_without_s']:>6.2f} "
                      f"{row['forward_without_s'] * 1e3:>13.2f}", flush=True)
    path = write("numpy_blocked", {"environment": environment(), "blocked_from": chosen,
                                   "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
