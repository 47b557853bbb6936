"""The NumPy backend's tiles cut to the lines the L1 cache holds.

The chunked scan copies a large operand's chunks into its own layout, each step one
contiguous vector over the chunks (one channel's (C, L) chunks copied to (L, C)), and the
result's back (`_copy_in_order`). NumPy's inner loop runs along the destination's
contiguous axis and reads the source there across a stride: L elements, one line each. A
line serves the tile's next rows only while the L1 cache keeps it, and lines a whole number
k of lines apart fall into 64 / gcd(k, 64) of its 64 sets. So the tile's side along that
loop is cut to `_L1_WAYS` lines a set (`_within_reach`).

Times the forward scan and its vector-Jacobian product with `_L1_WAYS` at 4, the chosen
value, 12, 16 and infinity (tiles as `_tile` makes them, uncut), alternated in one process
(so a loaded machine slows all alike), on one channel of 10^4 to 10^7 steps (powers of two
among them, whose chunks of 64 steps lie 4 lines apart) and on several channels in each
layout, in four dtypes; prints each time over the chosen setting's, then the chosen one's in
milliseconds. Writes results/numpy_reach.json.

    python -m benchmarks.numpy_reach
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import against_chosen, environment, without_options, write
from cuscan import _numpy_backend

# (shape, time axis): one channel, then several, time-contiguous and time-major
SHAPES = [((n,), 0) for n in (10**4, 65536, 10**5, 262144, 10**6, 2**20, 4 * 10**6,
                              2**22, 10**7)] + [
    ((2, 10**6), -1), ((4, 2**20), -1), ((3, 10**6), 0), ((4, 2**20), 0), ((8, 10**6), -1),
    ((16, 2**18), -1), ((32, 32768), -1), ((64, 10**5), -1), ((256, 8192), -1),
    ((1000, 1000), -1), ((4096, 1000), -1), ((4, 16, 65536), -1), ((8, 4096, 16), 1)]
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
VALUES = (4, 8, 12, 16, math.inf)


def calls(rng, shape, axis: int, dtype) -> dict:
    """The forward scan (the parallel method on one channel) and its vector-Jacobian
    product."""
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.9, 0.999, shape).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=axis)
    method = "parallel" if len(shape) == 1 else "auto"
    return {"forward": functools.partial(cuscan.linear_recurrence, a, x, axis=axis,
                                         method=method),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=axis)}


def main() -> None:
    rng = np.random.default_rng(0)
    chosen = _numpy_backend._L1_WAYS
    rows = []
    print(f"time / time with _L1_WAYS = {chosen}: forward, vjp for each value")
    print(f"{'shape':>14} {'axis':>4} {'dtype':>10} " + " ".join(f"{v!s:>11}" for v in VALUES)
          + "   chosen (ms)")
    for shape, axis in SHAPES:
        for dtype in DTYPES:
            row = {"shape": list(shape), "axis": axis, "dtype": np.dtype(dtype).name}
            cells = against_chosen(row, calls(rng, shape, axis, dtype), _numpy_backend,
                                   "_L1_WAYS", VALUES, max(2, min(10, 10**7 // math.prod(shape))))
            rows.append(row)
            times = " ".join(f"{row[f'{name}_s'][str(chosen)] * 1e3:.2f}"
                             for name in ("forward", "vjp"))
            print(f"{'x'.join(map(str, shape)):>14} {axis:>4} {row['dtype']:>10} {cells}   "
                  f"{times}", flush=True)
    path = write("numpy_reach", {"environment": environment(), "chosen_l1_ways": chosen,
                                 "l1_sets": _numpy_backend._L1_SETS, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
