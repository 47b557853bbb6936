"""The NumPy backend's chunked scan over segments of time that stay in cache, or whole.

The chunked scan (the paper's Algorithm 1) reads every operand twice: once to reduce
the chunks, once to re-run them from their carries. Over a whole array larger than
the caches, the second pass reads them from memory again, and the copies it makes of
narrow operands are made far apart. Run over segments of time of about
_CACHE_SEGMENT_BYTES of the result, one after the other from the state the last one
left, the second pass finds them in cache. Times the forward scan and its
vector-Jacobian product with segments of several sizes against the whole
(alternated in one process, so a loaded machine slows all alike) over widths from
one channel to 512, time-major and time-contiguous, in float32, float64, complex64
and complex128; prints each size's time over the whole's, and the most memory a call
holds beyond its inputs, the result included (tracemalloc, which NumPy reports to),
with the rule's segments and whole: the chunked scan's copies of narrow operands hold
a segment each. Writes results/numpy_cache.json.

    python -m benchmarks.numpy_cache
"""

from __future__ import annotations

import functools

import numpy as np

import cuscan
from benchmarks._common import alternated, environment, peak_memories, without_options, write
from cuscan import _numpy_backend

# (T, channels, time axis): time-major (T, C) along axis 0, or time-contiguous (C, T)
# along axis -1; arrays of 2^16 to 2^23 elements.
SHAPES = [(2**16, 1, 0), (2**20, 1, 0), (2**23, 1, 0), (2**21, 2, 0), (2**20, 4, 0),
          (2**18, 16, 0), (2**16, 64, 0), (2**14, 256, 0), (2**13, 512, 0),
          (2**18, 16, -1), (2**16, 64, -1)]
DTYPES = ["float32", "float64", "complex64", "complex128"]
SIZES = {"whole": 2**62, "1 MiB": 2**20, "2 MiB": 2**21, "4 MiB": 2**22, "8 MiB": 2**23}


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    print(f"time over the whole's, by segment size (< 1: segments are faster); the rule uses "
          f"{_numpy_backend._CACHE_SEGMENT_BYTES / 2**20:g} MiB")
    rule = _numpy_backend._CACHE_SEGMENT_BYTES
    memory_settings = {"rule": rule, "whole": SIZES["whole"]}
    print(f"{'T':>8} {'C':>4} {'axis':>4} {'dtype':>10} {'':>7} {'whole ms':>9} "
          + " ".join(f"{size:>6}" for size in SIZES if size != "whole")
          + "   MiB: rule, whole")
    for length, channels, axis in SHAPES:
        shape = (length, channels) if axis == 0 else (channels, length)
        for dtype in DTYPES:
            decays = rng.uniform(0.5, 1.0, shape).astype(dtype)
            impulses = rng.uniform(-1.0, 1.0, shape).astype(dtype)
            weights = rng.uniform(-1.0, 1.0, shape).astype(dtype)
            output = cuscan.linear_recurrence(decays, impulses, axis=axis)
            for name, function in (
                    ("forward", functools.partial(cuscan.linear_recurrence, decays, impulses,
                                                  axis=axis)),
                    ("vjp", functools.partial(cuscan.linear_recurrence_vjp, weights, decays,
                                              output, axis=axis))):
                best = alternated(function, _numpy_backend, "_CACHE_SEGMENT_BYTES", SIZES,
                                  2 if length * channels >= 2**20 else 5)
                memory = peak_memories(function, _numpy_backend, "_CACHE_SEGMENT_BYTES",
                                       memory_settings)
                rows.append({"length": length, "channels": channels, "axis": axis,
                             "dtype": dtype, "function": name,
                             **{f"{size}_s": seconds for size, seconds in best.items()},
                             "rule_bytes": memory["rule"], "whole_bytes": memory["whole"],
                             "operand_bytes": impulses.nbytes})
                print(f"{length:>8} {channels:>4} {axis:>4} {dtype:>10} {name:>7} "
                      f"{best['whole'] * 1e3:9.2f} "
                      + " ".join(f"{best[size] / best['whole']:6.2f}"
                                 for size in SIZES if size != "whole")
                      + f" {memory['rule'] / 2**20:7.0f} {memory['whole'] / 2**20:7.0f}",
                      flush=True)
    chosen = [r[f"{rule / 2**20:g} MiB_s"] / r["whole_s"] for r in rows]
    print(f"with the rule's {rule / 2**20:g} MiB: {min(chosen):.2f} to {max(chosen):.2f} of the"
          " whole's time")
    for name in ("forward", "vjp"):
        held = [(r["rule_bytes"] / r["operand_bytes"], r["whole_bytes"] / r["operand_bytes"])
                for r in rows if r["function"] == name and r["length"] * r["channels"] >= 2**20]
        print(f"{name} from 2^20 elements holds {min(h[0] for h in held):.2f} to "
              f"{max(h[0] for h in held):.2f} operands' sizes beyond its inputs, whole "
              f"{min(h[1] for h in held):.2f} to {max(h[1] for h in held):.2f}")
    path = write("numpy_cache", {"environment": environment(), "cache_segment_bytes": rule,
                                 "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
