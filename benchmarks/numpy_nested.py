"""The NumPy backend's nested products: scans of one decay on few elements.

A scan whose decay is one number for every step and channel (an exponential moving
average, a time-invariant filter's pole) is, from `_MIN_POWERS_LENGTH` steps up to
`_NESTED_ELEMENTS` elements (`_NESTED_ROWS_ELEMENTS` on at most `_NESTED_ROWS`
time-contiguous channels), products with the matrices of the decay's powers over blocks
of `_NESTED_BLOCK` steps, the blocks' end states scanned the same way in turn
(`_nested`); scans of at most `_POWERS_LENGTH` steps and `_POWERS_WORK` multiply-adds
are one such product. Without the nested products, the others take the blocked scan
(time-contiguous operands) or the chunked, doubling or serial scan.

Times `method="auto"` forward and the vector-Jacobian product with the nested products
at any size against without them (both element thresholds 0: the single products stay),
alternated in one process (so a loaded machine slows both alike), on (channels, T)
arrays along axis -1 and (T, channels) along axis 0 of 1,024 to 65,536 elements in four
dtypes, and of 2^17 to 2^19 elements on few and more channels; prints nested / without
and whether the rule takes the products. Then the block length: `_NESTED_BLOCK` of 8, 16
and 32 steps, each over the chosen one's, where the rule takes them; and the most
multiply-adds of an inner level's single product (`_NESTED_WORK`, where a level of blocks
costs a dozen NumPy steps), 2^14 to 2^20, in real dtypes. Writes
results/numpy_nested.json.

    python -m benchmarks.numpy_nested
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import (
    against_chosen,
    alternated_settings,
    environment,
    without_options,
    write,
)
from cuscan import _numpy_backend

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
# (channels, steps) and the time axis: -1 for (channels, T), 0 for (T, channels).
SHAPES = [((1, 1024), -1), ((1, 4096), -1), ((1, 8192), -1), ((1, 16384), -1),
          ((1, 32768), -1), ((1, 65536), -1), ((2, 8192), -1), ((4, 2048), -1),
          ((4, 4096), -1), ((4, 8192), -1), ((8, 2048), -1), ((16, 1024), -1),
          ((64, 256), -1), ((2, 2048), 0), ((4, 4096), 0), ((4, 8192), 0), ((8, 1024), 0),
          ((16, 1024), 0), ((32, 512), 0), ((64, 256), 0)]
# Beyond _NESTED_ELEMENTS: few time-contiguous channels (`_NESTED_ROWS_ELEMENTS`), more, and
# time-major ones.
LARGE_SHAPES = [((1, 131072), -1), ((1, 262144), -1), ((1, 524288), -1), ((2, 131072), -1),
                ((8, 32768), -1), ((16, 16384), -1), ((32, 4096), -1), ((32, 8192), -1),
                ((64, 4096), -1), ((2, 65536), 0), ((4, 32768), 0), ((8, 16384), 0),
                ((32, 4096), 0)]
BLOCKS = (8, 16, 32)
WORKS = (1 << 14, 1 << 16, 1 << 18, 1 << 20)
REPEATS = 20


def passes(rng, shape, axis: int, dtype) -> dict:
    """The forward scan and its vector-Jacobian product with one decay, on a (channels, T)
    array along axis -1 or its (T, channels) transpose along axis 0."""
    x = rng.standard_normal(shape).astype(dtype)
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    a = np.asarray(rng.uniform(0.9, 0.999), dtype)
    h = cuscan.linear_recurrence(a, x, axis=axis)
    return {"forward": functools.partial(cuscan.linear_recurrence, a, x, axis=axis),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=axis)}


def rule(shape, axis: int, dtype) -> bool:
    """Whether method auto takes the nested products (`_nests`) for the result of this shape
    (channels, T) along ``axis``."""
    out = np.empty(shape, dtype)
    return _numpy_backend._nests(out.size, out.T if axis == -1 else out)


def repeats(shape) -> int:
    return max(5, min(REPEATS, 2 * 10**6 // math.prod(shape)))


def label(shape, axis: int) -> str:
    channels, steps = shape
    return f"{channels}x{steps}" if axis == -1 else f"{steps}x{channels} ax0"


def threshold(rng) -> list:
    """The nested products at any size against without them, forward and vjp."""
    settings = {"nested": {(_numpy_backend, "_NESTED_ELEMENTS"): math.inf},
                "without": {(_numpy_backend, "_NESTED_ELEMENTS"): 0,
                            (_numpy_backend, "_NESTED_ROWS_ELEMENTS"): 0}}
    print("nested (at any size) / without, forward and vjp; < 1 means the nested products "
          "are faster; rule: whether method auto takes them")
    print(f"{'shape':>14} {'dtype':>10} {'forward':>8} {'vjp':>6} {'without (us)':>13} "
          f"{'rule':>5}")
    rows = []
    for shape, axis in SHAPES + LARGE_SHAPES:
        for dtype in DTYPES:
            row = {"shape": list(shape), "axis": axis, "dtype": np.dtype(dtype).name,
                   "rule": rule(shape, axis, dtype)}
            for name, call in passes(rng, shape, axis, dtype).items():
                best = alternated_settings(call, settings, repeats(shape))
                row.update({f"{name}_{s}_s": best[s] for s in settings})
            rows.append(row)
            print(f"{label(shape, axis):>14} {np.dtype(dtype).name:>10} "
                  f"{row['forward_nested_s'] / row['forward_without_s']:>8.2f} "
                  f"{row['vjp_nested_s'] / row['vjp_without_s']:>6.2f} "
                  f"{row['forward_without_s'] * 1e6:>13.0f} {'yes' if row['rule'] else 'no':>5}",
                  flush=True)
    return rows


def chosen_table(rng, name: str, values: tuple, dtypes, title, heads: list) -> list:
    """Each of ``values`` of ``_numpy_backend.<name>`` against the chosen one, forward and
    backward, where the rule takes the nested products; printed under ``title`` (given the
    chosen value) with a column head per value."""
    chosen = getattr(_numpy_backend, name)
    print(f"\n{title(chosen)}: time / time at the chosen one, forward and vjp")
    print(f"{'shape':>14} {'dtype':>10} " + " ".join(f"{h:>11}" for h in heads)
          + f" {'chosen (us)':>12}")
    rows = []
    for shape, axis in SHAPES:
        if math.prod(shape) > _numpy_backend._NESTED_ELEMENTS:
            continue
        for dtype in dtypes:
            row = {"shape": list(shape), "axis": axis, "dtype": np.dtype(dtype).name}
            ratios = against_chosen(row, passes(rng, shape, axis, dtype), _numpy_backend, name,
                                    values, REPEATS)
            rows.append(row)
            print(f"{label(shape, axis):>14} {np.dtype(dtype).name:>10} {ratios} "
                  f"{row['forward_s'][str(chosen)] * 1e6:>12.0f}", flush=True)
    return rows


def main() -> None:
    rng = np.random.default_rng(0)
    rows = threshold(rng)
    # The block length, and the most multiply-adds of an inner level's single product.
    lengths = chosen_table(rng, "_NESTED_BLOCK", BLOCKS, DTYPES,
                             lambda chosen: f"block length ({chosen} steps chosen)",
                             [str(b) for b in BLOCKS])
    works = chosen_table(rng, "_NESTED_WORK", WORKS, (np.float32, np.float64),
                           lambda chosen: "inner single products' multiply-adds (2^"
                           f"{chosen.bit_length() - 1} chosen)",
                           [f"2^{w.bit_length() - 1}" for w in WORKS])
    path = write("numpy_nested", {
        "environment": environment(), "nested_elements": _numpy_backend._NESTED_ELEMENTS,
        "nested_rows_elements": _numpy_backend._NESTED_ROWS_ELEMENTS,
        "nested_rows": _numpy_backend._NESTED_ROWS, "nested_block": _numpy_backend._NESTED_BLOCK,
        "powers_length": _numpy_backend._POWERS_LENGTH,
        "powers_work": _numpy_backend._POWERS_WORK, "nested_work": _numpy_backend._NESTED_WORK,
        "rows": rows, "block_lengths": lengths, "inner_work": works})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
