"""The NumPy backend's copies through a padded buffer, where cache aliasing slows them.

Time-contiguous operands of many channels ((C, T) or (B, C, T) along axis -1) are scanned
in time-major copies, and their results copied back (`_copy`, tile by tile). NumPy's inner
loop runs along the destination's contiguous axis; reading the source there across a
multiple of 1,024 bytes (a power-of-two number of steps, or of channels) maps every line a
tile touches to the same few cache sets. Such tiles go through a buffer laid out as the
source, its lines padded by a cache line (`_staged`), from `_MIN_STAGED` elements along the
destination's contiguous axis.

Times the time-major copy of the operand, the forward scan and its vector-Jacobian product
with `_MIN_STAGED` at 16, the chosen value, 64 and infinity (never staged), alternated in
one process (so a loaded machine slows all alike), on time-contiguous shapes from 16 to
2,048 channels in four dtypes; prints each time over the chosen setting's, then the
chosen one's in milliseconds. Then the chunked scan's steps of 129 to 256 bytes, which it
copies its chunks from as they lie unless a copy through a buffer makes the operand
time-major in elements of up to `_MAX_STAGED_CHUNK_ITEMSIZE` bytes: the scans with that at
0 (never), the chosen value and 8. Then time-contiguous shapes whose steps or channels lie
an odd multiple of 256 or 512 bytes apart in some dtypes (`_FEW_SETS_STRIDE`), staged from
`_MIN_FEW_SETS_STAGED` elements: 32, the chosen value, 128 and infinity (never). Writes
results/numpy_staged.json.

    python -m benchmarks.numpy_staged
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import environment, settings_table, without_options, write
from cuscan import _numpy_backend

# Time-contiguous shapes along axis -1: the strides of a step are multiples of 1,024 bytes
# but for (300, 10007) and (512, 1000).
SHAPES = [(2048, 4096), (8, 64, 8192), (256, 32768), (1000, 1024), (64, 65536), (64, 8192),
          (48, 65536), (32, 131072), (32, 32768), (16, 262144), (300, 10007), (512, 1000)]
# Steps of 129 to 256 bytes in float32 or float64 (in float16, of half as many).
CHUNK_SHAPES = [(64, 1024), (64, 4096), (64, 8192), (64, 65536), (48, 65536), (40, 16384),
                (8, 6, 32768), (32, 2048), (32, 32768), (32, 131072), (8, 4, 65536),
                (64, 65537)]
# Time-contiguous shapes whose steps (T * itemsize bytes) or, copied back, channels (C *
# itemsize) lie a multiple of 256 bytes apart but not of 1,024 in some of the dtypes.
FEW_SETS_SHAPES = [(32, 65600), (48, 43584), (64, 32832), (128, 16448), (192, 10816),
                   (512, 1088), (1024, 640), (256, 1152), (96, 21824), (4, 16, 32832)]
DTYPES = (np.float16, np.float32, np.float64, np.complex64)
VALUES = (16, 32, 64, math.inf)
CHUNK_VALUES = (0, 4, 8)
FEW_SETS_VALUES = (32, 64, 128, math.inf)
REPEATS = 5


def calls(rng, shape, dtype, copy: bool = True) -> dict:
    """The time-major copy of a time-contiguous operand (with ``copy``), the forward scan and
    its vector-Jacobian product."""
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.5, 1.0, shape).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=-1)
    time_first = np.moveaxis(x, -1, 0)
    major = np.empty(time_first.shape, dtype)
    copies = {"copy": functools.partial(_numpy_backend._copy, major, time_first)} if copy else {}
    return {**copies,
            "forward": functools.partial(cuscan.linear_recurrence, a, x, axis=-1),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=-1)}


def main() -> None:
    rng = np.random.default_rng(0)
    def repeats(shape) -> int:
        return max(2, min(REPEATS, 4 * 10**7 // math.prod(shape)))

    rows = settings_table(SHAPES, DTYPES, functools.partial(calls, rng), _numpy_backend,
                          "_MIN_STAGED", VALUES, repeats)
    chunks = settings_table(CHUNK_SHAPES, DTYPES, functools.partial(calls, rng, copy=False),
                            _numpy_backend, "_MAX_STAGED_CHUNK_ITEMSIZE", CHUNK_VALUES, repeats)
    few_sets = settings_table(FEW_SETS_SHAPES, DTYPES, functools.partial(calls, rng),
                              _numpy_backend, "_MIN_FEW_SETS_STAGED", FEW_SETS_VALUES, repeats)
    path = write("numpy_staged", {
        "environment": environment(), "chosen_min_staged": _numpy_backend._MIN_STAGED,
        "chosen_max_staged_chunk_itemsize": _numpy_backend._MAX_STAGED_CHUNK_ITEMSIZE,
        "chosen_min_few_sets_staged": _numpy_backend._MIN_FEW_SETS_STAGED,
        "rows": rows, "chunk_rows": chunks, "few_sets_rows": few_sets})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
