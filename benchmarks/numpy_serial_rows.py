"""The NumPy backend's serial loop on decays constant in time and broadcast over some channels.

State-space layers keep one decay per feature: `(D,)` decays for `(B, T, D)` inputs along
axis 1. Broadcast over the batch, each step's multiply runs NumPy's inner loop over the D
features of one batch row at a time. From `_ROW_STEPS` steps of `_ROW_ELEMENTS` elements
the serial loop lays the row of decays out whole, as the result's steps, once a call
(`_broadcast_row`, `_laid_out`).

Times `method="auto"` forward, the serial method forward and the vector-Jacobian product
with `_ROW_STEPS` out of reach (never laid out) and at the chosen value, alternated in one
process (so a loaded machine slows all alike), on batch-first shapes with per-feature
decays and `(B, C, T)` along axis -1 with per-channel decays, in two dtypes; then
`_ROW_ELEMENTS` at 0, the chosen value and 256 on small steps. Prints each time over the
chosen setting's, then the chosen one's in milliseconds.

Then steps in several runs below `_MIN_RUNS_BYTES` in all: time-major copies of them where
the serial loop would run on them as they lie (`_in_runs`, `_copies_steps`) against the
rule before, which copied none (in the same process, as above), with decays per feature
and in full. Writes results/numpy_serial_rows.json.

    python -m benchmarks.numpy_serial_rows
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, settings_table, without_options, write
from cuscan import _numpy_backend

# shape: (decays' shape, axis)
CASES = {(16, 1024, 64): ((64,), 1), (8, 2048, 256): ((256,), 1), (4, 4096, 1024): ((1024,), 1),
         (32, 100, 128): ((128,), 1), (4, 256, 32): ((32,), 1), (8, 16, 512): ((512,), 1),
         (8, 16, 1000): ((16, 1), -1), (64, 8, 2000): ((8, 1), -1)}
SMALL_CASES = {(2, 64, 16): ((16,), 1), (16, 64, 8): ((8,), 1), (4, 64, 32): ((32,), 1),
               (2, 256, 64): ((64,), 1), (8, 100, 16): ((16,), 1)}
DTYPES = (np.float32, np.float64)
# (B, T, D) along axis 1 below 64 KiB in float32, and its decays: per feature, or in full
# (None).
RUNS_CASES = [((16, 64, 8), (8,)), ((16, 64, 8), None), ((4, 64, 32), (32,)),
              ((8, 100, 16), (16,)), ((32, 64, 4), (4,)), ((8, 32, 16), (16,)),
              ((4, 32, 16), None), ((2, 64, 16), (16,)), ((2, 256, 64), (64,)),
              ((16, 64, 64), None), ((4, 128, 16), (16,))]


def calls(rng, case, dtype) -> dict:
    """Forward (auto and serial) and the vector-Jacobian product for ``case``."""
    shape, (decay_shape, axis) = case
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.9, 1.0, shape if decay_shape is None else decay_shape).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=axis)
    return {"auto": functools.partial(cuscan.linear_recurrence, a, x, axis=axis),
            "serial": functools.partial(cuscan.linear_recurrence, a, x, axis=axis,
                                        method="serial"),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=axis)}


def before(shape, strides, dtype) -> bool:
    """`_in_runs` as it was: steps in runs copied from `_MIN_RUNS_BYTES` in all only."""
    row = math.prod(shape[1:]) * np.dtype(dtype).itemsize
    return (shape[0] >= _numpy_backend._MIN_SHORT_SCATTERED_LENGTH
            and row <= _numpy_backend._MAX_RUNS_ROW
            and shape[0] * row >= _numpy_backend._MIN_RUNS_BYTES
            and not _numpy_backend._merge(_numpy_backend._step_axes(shape, strides)))


def runs(rng, repeats_of) -> list:
    """The table of steps in runs below `_MIN_RUNS_BYTES`: the rule before over the chosen."""
    rules = {"before": before, "chosen": _numpy_backend._in_runs}
    print("\ntime / chosen time with steps in runs copied from _MIN_RUNS_BYTES only:"
          " auto, serial, vjp")
    rows = []
    for shape, decay_shape in RUNS_CASES:
        for dtype in DTYPES:
            row = {"shape": list(shape), "dtype": np.dtype(dtype).name,
                   "decays": None if decay_shape is None else list(decay_shape)}
            for label, call in calls(rng, (shape, (decay_shape, 1)), dtype).items():
                row[f"{label}_s"] = alternated(call, _numpy_backend, "_in_runs", rules,
                                               repeats_of(shape), rounds=5)
            rows.append(row)
            ratios = " ".join(f"{row[f'{n}_s']['before'] / row[f'{n}_s']['chosen']:5.2f}"
                              for n in ("auto", "serial", "vjp"))
            times = " ".join(f"{row[f'{n}_s']['chosen'] * 1e3:.3f}"
                             for n in ("auto", "serial", "vjp"))
            decays = "full" if decay_shape is None else "feature"
            print(f"{'x'.join(map(str, shape)):>12} {row['dtype']:>8} {decays:>8} {ratios}"
                  f"   chosen (ms) {times}", flush=True)
    return rows


def main() -> None:
    rng = np.random.default_rng(0)

    def repeats(shape) -> int:
        return max(3, min(50, 10**7 // math.prod(shape)))

    def table(cases, name, values):
        rows = settings_table(list(cases), DTYPES,
                              lambda shape, dtype: calls(rng, (shape, cases[shape]), dtype),
                              _numpy_backend, name, values, repeats)
        for row in rows:
            decay_shape, axis = cases[tuple(row["shape"])]
            row.update(decays=list(decay_shape), axis=axis)
        return rows

    steps = table(CASES, "_ROW_STEPS", (math.inf, _numpy_backend._ROW_STEPS))
    small = table(SMALL_CASES, "_ROW_ELEMENTS", (0, _numpy_backend._ROW_ELEMENTS, 256))
    path = write("numpy_serial_rows", {"environment": environment(),
                                       "chosen_row_steps": _numpy_backend._ROW_STEPS,
                                       "chosen_row_elements": _numpy_backend._ROW_ELEMENTS,
                                       "rows": steps, "small_rows": small,
                                       "runs_rows": runs(rng, repeats)})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
