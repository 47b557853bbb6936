"""The NumPy backend on several threads: one large call against its channels split among them.

cuscan computes a call on the thread that makes it (BLAS's own threads aside, in the products
of decays constant in time). NumPy releases the GIL inside its loops, so calls made from several
threads overlap there; but each scan is a sequence of Python-level steps of a few vector
operations each, and those take turns. This times one call against the same work split into K
calls, each on its own thread and on 1/K of the outermost channel axis (K = 2, 4, 8, ... up to
the cores the process may use), alternated in one process so that a loaded machine slows all
alike: the forward scan and its vector-Jacobian product on time-contiguous, time-major and
batch-first shapes of 2^22 elements, in float32 and float64, decays varying in time. Prints the
split's time over the whole call's; writes results/numpy_threads.json.

    python -m benchmarks.numpy_threads
"""

from __future__ import annotations

import functools
import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import cuscan
from benchmarks._common import alternated_calls, environment, without_options, write

# (shape, time axis, channel axis split among the threads)
CASES = [((2, 2**21), -1, 0), ((8, 2**19), -1, 0), ((32, 2**17), -1, 0), ((256, 2**14), -1, 0),
         ((2048, 2**11), -1, 0), ((2**21, 2), 0, 1), ((2**19, 8), 0, 1), ((2**17, 32), 0, 1),
         ((2**14, 256), 0, 1), ((2**11, 2048), 0, 1), ((16, 2**14, 16), 1, 0),
         ((2, 2**14, 128), 1, 0), ((64, 2**10, 64), 1, 0)]
DTYPES = (np.float32, np.float64)
REPEATS = 3


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_counts() -> list[int]:
    """2, 4, 8, ... up to the cores, and the cores themselves."""
    counts, k = [], 2
    while k < cores():
        counts.append(k)
        k *= 2
    return [*counts, cores()] if cores() > 1 else []


def split(pools: dict, count: int, call, arrays, axis: int):
    """``call`` on each of ``count`` slices of ``arrays`` along ``axis``, on ``count``
    threads."""
    bounds = np.linspace(0, arrays[0].shape[axis], count + 1).astype(int)
    parts = []
    for start, stop in itertools.pairwise(bounds):
        index = (slice(None),) * axis + (slice(start, stop),)
        parts.append([v[index] for v in arrays])
    futures = [pools[count].submit(call, *part) for part in parts]
    return [future.result() for future in futures]


def main() -> None:
    without_options(__doc__)
    rng = np.random.default_rng(0)
    counts = thread_counts()
    pools = {k: ThreadPoolExecutor(k) for k in counts}
    rows = []
    print(f"{cores()} cores; time split among K threads / time of one call")
    print(f"{'shape':>14} {'dtype':>8} {'pass':>8} "
          + " ".join(f"{f'K={k}':>6}" for k in counts) + "   one call (ms)")
    for shape, axis, channels in CASES:
        for dtype in DTYPES:
            a = rng.uniform(0.5, 1.0, shape).astype(dtype)
            x = rng.standard_normal(shape).astype(dtype)
            h = cuscan.linear_recurrence(a, x, axis=axis)
            passes = {
                "forward": (functools.partial(cuscan.linear_recurrence, axis=axis), (a, x)),
                "vjp": (functools.partial(cuscan.linear_recurrence_vjp, axis=axis), (x, a, h)),
            }
            for name, (call, arrays) in passes.items():
                calls = {1: functools.partial(call, *arrays)}
                calls |= {k: functools.partial(split, pools, k, call, arrays, channels)
                          for k in counts}
                best = alternated_calls(calls, REPEATS)
                rows.append({"shape": list(shape), "axis": axis, "split_axis": channels,
                             "dtype": np.dtype(dtype).name, "pass": name,
                             "seconds": {str(k): best[k] for k in calls}})
                print(f"{'x'.join(map(str, shape)):>14} {np.dtype(dtype).name:>8} {name:>8} "
                      + " ".join(f"{best[k] / best[1]:>6.2f}" for k in counts)
                      + f"   {best[1] * 1e3:.1f}", flush=True)
    for pool in pools.values():
        pool.shutdown()
    path = write("numpy_threads", {"environment": environment(), "cores": cores(),
                                   "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
