"""The NumPy backend's chunked scan on narrow steps: the layout of its copies.

Steps of at most `_MAX_STRIDED_ROW` bytes (a few channels) are scanned chunk by chunk from
copies in which each position of every chunk lies contiguous (`_chunked`). Each step of
those copies lays out the chunks and the channels; with the chunks outermost, a step of a
few time-contiguous channels ((C, T) or (B, C, T) along axis -1) gathers runs of C
elements far apart; laid out as the operand lies (`_chunk_order`), the chunks innermost,
the copy is one transposed matrix over the chunks and channels merged.

Times `method="auto"` forward and the vector-Jacobian product with `_CHUNKS_AS_THEY_LIE`
False (chunks outermost) and True (the chosen layout), alternated in one process (so a
loaded machine slows all alike), on time-contiguous shapes of 1 to 32 channels of 4,096 to
1,048,576 steps, batch-first (B, T, D) shapes along axis 1 and time-major shapes along
axis 0 (where the two layouts agree), in four dtypes; prints each time over the chosen
setting's, then the chosen one's in milliseconds. Then half-precision results of a few
time-contiguous channels, which are scanned in float32 buffers: time-major (`_in_copies`
never) against the chosen rule, laid out as the result where the scan works in copies of
its own, so that the buffer converts into the result without a transpose. Writes
results/numpy_chunk_order.json.

    python -m benchmarks.numpy_chunk_order
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, settings_table, without_options, write
from cuscan import _numpy_backend

# (shape, axis): time-contiguous along -1, batch-first along 1, time-major along 0.
CASES = [((1, 65536), -1), ((2, 65536), -1), ((4, 4096), -1), ((4, 16384), -1),
         ((4, 65536), -1), ((4, 262144), -1), ((4, 1048576), -1), ((8, 65536), -1),
         ((16, 16384), -1), ((32, 65536), -1), ((32, 4099), -1), ((4, 65521), -1),
         ((2, 3, 20011), -1), ((1, 1048576), -1),
         ((2, 8192, 4), 1), ((4, 4096, 8), 1), ((65536, 4), 0), ((16384, 16), 0)]
DTYPES = (np.float16, np.float32, np.float64, np.complex64)
VALUES = (False, True)
# Time-contiguous float16 shapes along axis -1, short and long, few and many channels.
BUFFER_SHAPES = [(16, 100), (64, 100), (32, 200), (8, 500), (4, 1000), (16, 1024), (2, 4096),
                 (4, 4096), (1, 8192), (8, 16384), (2, 65536), (4, 65536), (16, 16384),
                 (32, 4099), (4, 262144), (1, 1048576)]


def calls(rng, case, dtype) -> dict:
    """The forward scan along the case's axis and its vector-Jacobian product."""
    shape, axis = case
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.5, 1.0, shape).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=axis)
    return {"forward": functools.partial(cuscan.linear_recurrence, a, x, axis=axis),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=axis)}


def buffers(rng, repeats_of) -> list:
    """The table of float16 results' buffers: time-major against the chosen rule."""
    choices = {"time-major": lambda *args: False, "chosen": _numpy_backend._in_copies}
    print("\ntime / chosen time with float16 results scanned in time-major buffers:"
          " forward, vjp")
    rows = []
    for shape in BUFFER_SHAPES:
        row = {"shape": list(shape), "dtype": "float16"}
        for label, call in calls(rng, (shape, -1), np.float16).items():
            row[f"{label}_s"] = alternated(call, _numpy_backend, "_in_copies", choices,
                                           repeats_of(shape), rounds=5)
        rows.append(row)
        ratios = " ".join(f"{row[f'{label}_s']['time-major'] / row[f'{label}_s']['chosen']:5.2f}"
                          for label in ("forward", "vjp"))
        times = " ".join(f"{row[f'{label}_s']['chosen'] * 1e3:.3f}" for label in ("forward", "vjp"))
        print(f"{'x'.join(map(str, shape)):>14} {ratios}   chosen (ms) {times}", flush=True)
    return rows


def main() -> None:
    rng = np.random.default_rng(0)
    cases = {shape: (shape, axis) for shape, axis in CASES}

    def repeats(shape) -> int:
        return max(3, min(100, 10**7 // math.prod(shape)))

    rows = settings_table(list(cases), DTYPES,
                          lambda shape, dtype: calls(rng, cases[shape], dtype),
                          _numpy_backend, "_CHUNKS_AS_THEY_LIE", VALUES, repeats)
    for row in rows:
        row["axis"] = cases[tuple(row["shape"])][1]
    path = write("numpy_chunk_order", {"environment": environment(), "rows": rows,
                                       "buffer_rows": buffers(rng, repeats)})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
