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
chosen setting's, then the chosen one's in milliseconds. Writes
results/numpy_serial_rows.json.

    python -m benchmarks.numpy_serial_rows
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import environment, settings_table, without_options, write
from cuscan import _numpy_backend

# shape: (decays' shape, axis)
CASES = {(16, 1024, 64): ((64,), 1), (8, 2048, 256): ((256,), 1), (4, 4096, 1024): ((1024,), 1),
         (32, 100, 128): ((128,), 1), (4, 256, 32): ((32,), 1), (8, 16, 512): ((512,), 1),
         (8, 16, 1000): ((16, 1), -1), (64, 8, 2000): ((8, 1), -1)}
SMALL_CASES = {(2, 64, 16): ((16,), 1), (16, 64, 8): ((8,), 1), (4, 64, 32): ((32,), 1),
               (2, 256, 64): ((64,), 1), (8, 100, 16): ((16,), 1)}
DTYPES = (np.float32, np.float64)


def calls(rng, case, dtype) -> dict:
    """Forward (auto and serial) and the vector-Jacobian product for ``case``."""
    shape, (decay_shape, axis) = case
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.9, 1.0, decay_shape).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=axis)
    return {"auto": functools.partial(cuscan.linear_recurrence, a, x, axis=axis),
            "serial": functools.partial(cuscan.linear_recurrence, a, x, axis=axis,
                                        method="serial"),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=axis)}


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
                                       "rows": steps, "small_rows": small})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
