"""The NumPy backend's tiled copies between time-major arrays and others.

The chunked scan of one channel copies its chunks, a (C, L) array with time
contiguous, into (L, C) so that each of its steps is one contiguous vector, and
copies the result back; a time-contiguous output of several channels, (C, T)
along axis -1, is scanned in time-major copies and gets its result back from
one. Copied element by element, both sides long, every element read or written
lands on a cache line and a page of its own. The backend copies tiles of about
_TILE_BYTES instead (square, or as long as a narrow axis). Times the
forward scan and its vector-Jacobian product with tiles of 64 KiB to 1 MiB,
with square tiles of 512 x 512 elements whatever their size (the rule before),
and element by element (one tile), alternated in one process (so a loaded
machine slows all alike), and prints each time over the element-by-element
one; writes results/numpy_tiles.json.

    python -m benchmarks.numpy_tiles
"""

from __future__ import annotations

import functools

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, without_options, write
from cuscan import _numpy_backend

# (shape, time axis): one channel, then time-contiguous channels
SHAPES = [((n,), 0) for n in (10**5, 10**6, 4 * 10**6, 10**7, 3 * 10**7)] + [
    ((8, 10**6), -1), ((64, 10**5), -1), ((64, 156250), -1), ((256, 8192), -1),
    ((4, 16, 65536), -1), ((32, 32768), -1), ((256, 5000), -1), ((1000, 1000), -1),
    ((4096, 1000), -1)]
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
BUDGETS = (2**16, 2**17, 2**18, 2**19, 2**20)
# label -> the tile's sides for a shape and an element size; "element": one tile
TILES = {**{f"{size // 1024}K": functools.partial(_numpy_backend._tile, size=size)
            for size in BUDGETS},
         "sq512": lambda shape, itemsize: (512, 512),
         "element": lambda shape, itemsize: shape[:2]}


def main() -> None:
    rng = np.random.default_rng(0)
    chosen = _numpy_backend._TILE_BYTES
    labels = [label for label in TILES if label != "element"]
    rows = []
    print("time with tiles of N bytes (or 512 x 512 elements) / time element by element"
          " (one channel: parallel method)")
    print(f"{'shape':>14} {'dtype':>10} {'pass':>8} " + " ".join(f"{t:>6}" for t in labels)
          + f" {'element (ms)':>13}")
    for shape, axis in SHAPES:
        method = "parallel" if len(shape) == 1 else "auto"
        for dtype in DTYPES:
            x = rng.standard_normal(shape).astype(dtype)
            a = rng.uniform(0.9, 0.999, shape).astype(dtype)
            h = cuscan.linear_recurrence(a, x, axis=axis)
            passes = {"forward": functools.partial(cuscan.linear_recurrence, a, x,
                                                   axis=axis, method=method),
                      "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h,
                                               axis=axis)}
            repeats = max(2, min(10, 10**7 // x.size))
            for name, function in passes.items():
                best = alternated(function, _numpy_backend, "_tile", TILES, repeats)
                rows.append({"shape": list(shape), "axis": axis,
                             "dtype": np.dtype(dtype).name, "pass": name,
                             **{f"tile_{t}_s": best[t] for t in TILES}})
                print(f"{'x'.join(map(str, shape)):>14} {np.dtype(dtype).name:>10} "
                      f"{name:>8} "
                      + " ".join(f"{best[t] / best['element']:>6.2f}" for t in labels)
                      + f" {best['element'] * 1e3:>13.1f}", flush=True)
    path = write("numpy_tiles", {"environment": environment(), "chosen_tile_bytes": chosen,
                                 "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
