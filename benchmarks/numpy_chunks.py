"""The NumPy backend's chunk length: its rule against the square root of the length.

The chunked scan takes two passes of L Python-level steps, each over one position
of every chunk, and scans the chunks' carries by the same algorithm. With
L = sqrt(T) (the rule before), a sequence of 10^4 steps took 200 steps whose
vectors held 100 elements: Python's per-step cost dominated. The rule takes the
fewest steps whose vectors hold about 4,096 elements below 2^19 elements in all,
and about 16,384 above (at least 4 steps, at most sqrt(T)); one channel of 10^6
steps takes 62 steps of 16,129 elements. Times both, alternated
in one process (so a loaded machine slows both alike), with time-invariant and
time-varying decays, over lengths, widths and dtypes, and prints rule / sqrt;
writes results/numpy_chunks.json.

    python -m benchmarks.numpy_chunks
"""

from __future__ import annotations

import math

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, without_options, write
from cuscan import _numpy_backend

SHAPES = [(300, 1), (1000, 1), (10**4, 1), (10**5, 1), (10**6, 1), (4 * 10**6, 1), (10**7, 1),
          (10**4, 4), (10**5, 4), (10**6, 2), (10**6, 4), (10**6, 8), (10**4, 16), (10**5, 16),
          (3 * 10**5, 16), (10**5, 100)]
DTYPES = (np.float32, np.float64, np.complex128)


def square_root(length: int, width: int) -> int:
    return max(2, math.isqrt(length))


def main() -> None:
    rng = np.random.default_rng(0)
    rules = {"rule": _numpy_backend._chunk_length, "sqrt": square_root}
    rows = []
    print("parallel method, rule / sqrt(T) time; < 1 means the rule is faster")
    print(f"{'T':>8} {'width':>6} {'dtype':>10} {'decays':>8} {'L rule':>7} {'L sqrt':>7} "
          f"{'ratio':>6}")
    for length, width in SHAPES:
        for dtype in DTYPES:
            for varying in (False, True):
                x = rng.standard_normal((length, width)).astype(dtype)
                a = rng.uniform(0.9, 0.999, (length, width) if varying else width)
                a = a.astype(dtype)
                repeats = max(3, min(30, 3_000_000 // (length * width)))
                best = alternated(lambda a=a, x=x: cuscan.linear_recurrence(
                    a, x, method="parallel"), _numpy_backend, "_chunk_length", rules, repeats)
                chunks = {name: rule(length, width) for name, rule in rules.items()}
                rows.append({"length": length, "width": width,
                             "dtype": np.dtype(dtype).name, "varying_decays": varying,
                             "chunk_rule": chunks["rule"], "chunk_sqrt": chunks["sqrt"],
                             "rule_s": best["rule"], "sqrt_s": best["sqrt"]})
                print(f"{length:>8} {width:>6} {np.dtype(dtype).name:>10} "
                      f"{'varying' if varying else 'fixed':>8} {chunks['rule']:>7} "
                      f"{chunks['sqrt']:>7} {best['rule'] / best['sqrt']:>6.2f}", flush=True)
    path = write("numpy_chunks", {"environment": environment(), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
