"""The NumPy backend's blocked scan: decays constant in time as matrix products.

Where the decays are constant in time and every channel's steps lie contiguous in
memory (one channel; (C, T) along axis -1), the backend scans chunks of L steps as
products with one L x L matrix of the decays' powers, run by BLAS on the operands
in place, from 64 steps (`_BLOCKED_FROM`) and 8,192 elements (`_BLOCKED_ELEMENTS_FROM`), or
any number of elements where one decay serves every channel, in real dtypes and complex64
from 2,048 steps (`_BLOCKED_COMPLEX_FROM`).
Without it, such operands are scanned by the chunked or serial method, on
time-major copies where the layout is scattered. Times `method="auto"` forward and
the vector-Jacobian product with and without (the threshold set out of reach),
alternated in one process (so a loaded machine slows both alike), on (channels, T)
arrays along axis -1 with one decay per channel and with a single decay, complex
ones with the products switched on; prints blocked / without and whether the rule
takes the products. Then the chunk length: `_BLOCK_BYTES` of 64, 128 and 256 bytes
on the larger shapes, each time over the chosen one's; and the element threshold: the
products at any size from 64 steps against without them on 64 to 32,768 elements. Writes
results/numpy_blocked.json.

    python -m benchmarks.numpy_blocked
"""

from __future__ import annotations

import functools
import math

import numpy as np

import cuscan
from benchmarks._common import (
    against_chosen,
    alternated_settings,
    assigned,
    environment,
    without_options,
    write,
)
from cuscan import _numpy_backend

SHAPES = [(1, 256), (1, 1024), (1, 10**4), (1, 10**5), (1, 10**6), (1, 10**7), (2, 10**6),
          (8, 10**6), (64, 156_250), (512, 2048), (4096, 256), (2048, 2048), (16, 256)]
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
BLOCK_SHAPES = [(1, 10**6), (1, 10**7), (8, 10**6), (64, 156_250), (512, 2048), (2048, 2048)]
BLOCK_BYTES = (64, 128, 256)
# Around the element threshold (`_BLOCKED_ELEMENTS_FROM`), from `_BLOCKED_FROM` steps.
ELEMENT_SHAPES = [(1, 64), (1, 128), (1, 256), (1, 512), (1, 1024), (1, 2048), (1, 4096),
                  (1, 8192), (1, 16384), (1, 32768), (2, 1024), (2, 4096), (4, 512), (4, 2048),
                  (4, 4096), (8, 64), (8, 1024), (8, 2048), (16, 256), (16, 512), (16, 1024),
                  (32, 256), (64, 128), (64, 256), (128, 256)]


def passes(rng, shape, dtype, single: bool = False) -> dict:
    """The forward scan and its vector-Jacobian product on a (channels, T) array along
    axis -1, with one decay per channel or a single one."""
    x = rng.standard_normal(shape).astype(dtype)
    a = rng.uniform(0.9, 0.999, (1 if single else shape[0], 1)).astype(dtype)
    h = cuscan.linear_recurrence(a, x, axis=-1)
    return {"forward": functools.partial(cuscan.linear_recurrence, a, x, axis=-1),
            "vjp": functools.partial(cuscan.linear_recurrence_vjp, x, a, h, axis=-1)}


def rule(shape, dtype, single: bool = False) -> bool:
    """Whether method auto takes the products on these operands (`_blocked_layout`), with
    a ``single`` decay or one per channel."""
    x = np.empty(shape, dtype).T  # time first
    decays = np.empty((1, 1) if single else (1, shape[0]), dtype)
    return _numpy_backend._blocked_layout(np.broadcast_to(decays, x.shape), x, x)


def repeats(shape) -> int:
    return max(3, min(30, 3 * 10**6 // math.prod(shape)))


def block_lengths(rng) -> list:
    """Each `_BLOCK_BYTES` against the chosen one, forward and backward."""
    chosen = _numpy_backend._BLOCK_BYTES
    rows = []
    print(f"\nchunk length: time / time at the chosen {chosen} bytes, forward and vjp")
    print(f"{'shape':>12} {'dtype':>10} " + " ".join(f"{b:>11}" for b in BLOCK_BYTES)
          + f" {'chosen (ms)':>12}")
    for shape in BLOCK_SHAPES:
        for dtype in DTYPES:
            row = {"shape": list(shape), "dtype": np.dtype(dtype).name}
            ratios = against_chosen(row, passes(rng, shape, dtype), _numpy_backend,
                                    "_BLOCK_BYTES", BLOCK_BYTES, repeats(shape))
            rows.append(row)
            print(f"{'x'.join(map(str, shape)):>12} {np.dtype(dtype).name:>10} {ratios} "
                  f"{row['forward_s'][str(chosen)] * 1e3:>12.2f}", flush=True)
    return rows


def elements(rng) -> list:
    """Operands around the element threshold, and short ones: the products at any size
    from 64 steps against without them (the thresholds out of reach), forward and vjp, one
    decay per channel and a single one; real, and complex64 from the steps it takes the
    products at."""
    settings = {"blocked": {(_numpy_backend, "_BLOCKED_FROM"): 64,
                            (_numpy_backend, "_BLOCKED_ELEMENTS_FROM"): 0},
                "without": {(_numpy_backend, "_BLOCKED_FROM"): math.inf}}
    rows = []
    print("\nelements: blocked (at any size) / without, forward and vjp; rule: whether "
          "method auto takes the products")
    complex_from = _numpy_backend._BLOCKED_COMPLEX_FROM.get(8, math.inf)
    for shape in ELEMENT_SHAPES:
        for dtype in (np.float32, np.float64, np.complex64):
            for single in (False, True):
                if (single and shape[0] == 1) or (dtype == np.complex64
                                                  and shape[1] < complex_from):
                    continue
                rows.append(timed(rng, shape, dtype, single, rule(shape, dtype, single),
                                  settings, 30))
    return rows


def timed(rng, shape, dtype, single: bool, taken: bool, settings: dict, count: int) -> dict:
    """A row: `passes` forward and vjp under each of ``settings`` ("blocked" and "without",
    `alternated_settings`), alternated; printed as blocked / without."""
    row = {"shape": list(shape), "dtype": np.dtype(dtype).name, "single_decay": single,
           "rule": bool(taken)}
    for label, call in passes(rng, shape, dtype, single).items():
        best = alternated_settings(call, settings, count)
        row.update({f"{label}_{s}_s": best[s] for s in settings})
    print(f"{'x'.join(map(str, shape)):>12} {np.dtype(dtype).name:>10} "
          f"{'single' if single else 'channel':>8} "
          f"{row['forward_blocked_s'] / row['forward_without_s']:>8.2f} "
          f"{row['vjp_blocked_s'] / row['vjp_without_s']:>6.2f} "
          f"{row['forward_without_s'] * 1e3:>13.3f} {'yes' if row['rule'] else 'no':>5}",
          flush=True)
    return row


def main() -> None:
    rng = np.random.default_rng(0)
    chosen = _numpy_backend._BLOCKED_FROM
    settings = {"blocked": {(_numpy_backend, "_BLOCKED_FROM"): chosen},
                "without": {(_numpy_backend, "_BLOCKED_FROM"): math.inf}}
    rows = []
    print("method auto, axis -1, time blocked / without; < 1 means the blocked scan is faster;"
          " rule: whether method auto takes it")
    print(f"{'shape':>12} {'dtype':>10} {'decays':>8} {'forward':>8} {'vjp':>6} "
          f"{'without (ms)':>13} {'rule':>5}")
    taken = {(shape, dtype, single): rule(shape, dtype, single) for shape in SHAPES
             for dtype in DTYPES for single in (False, True)}
    # complex operands timed with the products at any length too
    with assigned({(_numpy_backend, "_BLOCKED_COMPLEX_FROM"): {8: 0, 16: 0}}):
        for shape in SHAPES:
            for dtype in DTYPES:
                for single in (False, True):
                    if single and shape[0] == 1:
                        continue
                    rows.append(timed(rng, shape, dtype, single, taken[shape, dtype, single],
                                      settings, repeats(shape)))
        lengths = block_lengths(rng)
    by_elements = elements(rng)
    path = write("numpy_blocked", {
        "environment": environment(), "blocked_from": chosen,
        "blocked_elements_from": _numpy_backend._BLOCKED_ELEMENTS_FROM,
        "blocked_complex_from": {str(size): steps for size, steps
                                 in _numpy_backend._BLOCKED_COMPLEX_FROM.items()},
        "block_bytes": _numpy_backend._BLOCK_BYTES, "rows": rows,
        "block_lengths": lengths, "elements": by_elements})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
