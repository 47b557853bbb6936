"""The NumPy backend's temporaries, kept between calls in a pool or allocated afresh.

A scan's temporaries (the chunked scan's copies of its chunks, time-major copies of
time-contiguous operands, Hillis and Steele's work arrays in double precision) are the
size of a segment of the operands. Freshly allocated, memory of that size is often new
to the process, and the first write to each of its pages is a page fault: glibc maps
allocations above its threshold (128 KiB at first) anew, and returns freed memory at the
top of its heap beyond twice that to the system. Freeing a mapped block raises the
threshold to the block's size (up to 32 MiB), so whether a call's temporaries fault
depends on what the process freed before. Times the forward scan and its
vector-Jacobian product with the pool (`cuscan._scratch`) as set and with it keeping
nothing (every temporary allocated afresh, as before the pool), alternated, each shape
in a new process: as it starts, and after it has freed a 16 MiB array. From one
channel to 64, time-major and time-contiguous, in float32, float64 and complex64, with
decays that change in time (and one row of decays constant in time, whose blocked scan
takes no temporaries from the pool); then `cuscan.signal.filtfilt` and `sosfiltfilt`
(the padded signal, the first pass, and the second's copy of its reversed input from
the pool), and `lfilter` and `sosfilt` (time-major signals' copies, and their output
rows before they are put back time-major), on one channel, 8 and 64, time-last and
time-major, with SciPy's time in the same process. Prints the pool's time over the
fresh allocations', and the most the pool kept. Writes results/numpy_scratch.json.

    python -m benchmarks.numpy_scratch
"""

from __future__ import annotations

import functools
import multiprocessing

import numpy as np

import cuscan
from benchmarks._common import alternated, best_time, environment, without_options, write
from cuscan import _scratch

# (T, channels, time axis, decays constant in time): time-major (T, C) along axis 0, or
# time-contiguous (C, T) along axis -1.
SHAPES = [(2**12, 1, 0, False), (2**14, 1, 0, False), (2**16, 1, 0, False),
          (2**17, 1, 0, False), (2**19, 1, 0, False), (2**20, 1, 0, False),
          (2**22, 1, 0, False), (2**12, 4, 0, False), (2**16, 4, 0, False),
          (2**18, 4, 0, False), (2**14, 64, 0, False), (2**11, 64, -1, False),
          (2**13, 64, -1, False), (2**16, 16, -1, False), (2**17, 64, -1, False),
          (2**19, 1, 0, True)]
DTYPES = ["float32", "float64", "complex64"]


# The filters' rows: (T, channels, time axis), float64.
FILTER_SHAPES = [(2**12, 1, 0), (2**16, 1, 0), (2**18, 1, 0), (2**20, 1, 0), (2**15, 8, -1),
                 (2**15, 8, 0), (2**16, 8, -1), (2**17, 8, -1), (2**17, 8, 0), (2**12, 64, 0),
                 (2**14, 64, 0)]
FILTERS = ("filtfilt", "sosfiltfilt", "lfilter", "sosfilt")


def timed(functions: dict, repeats: int) -> dict:
    """Best times of each of ``functions`` (name -> function) with the pool as set and
    keeping nothing, alternated, and the bytes the pool keeps after each."""
    settings = {"fresh": 0, "pool": _scratch._POOL_BYTES}
    row = {}
    for name, function in functions.items():
        best = alternated(function, _scratch, "_POOL_BYTES", settings, repeats)
        function()
        row |= {f"{name}_{label}_s": seconds for label, seconds in best.items()}
        row[f"{name}_kept_bytes"] = _scratch._pool.bytes
    return row


def free_a_block(freed: bool) -> None:
    """Free a 16 MiB array where ``freed``: glibc then maps and trims less."""
    if freed:
        block = np.ones(2**21)
        del block


def measure(length: int, channels: int, axis: int, constant: bool, dtype: str,
            freed: bool) -> dict:
    """A scan's row, in a process of its own (after freeing 16 MiB where ``freed``)."""
    free_a_block(freed)
    rng = np.random.default_rng(0)
    shape = (length, channels) if axis == 0 else (channels, length)
    impulses = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    decays = rng.uniform(0.5, 1.0, shape).astype(dtype)
    if constant:
        decays = decays[:1] if axis == 0 else decays[:, :1]
    weights = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    output = cuscan.linear_recurrence(decays, impulses, axis=axis)
    return timed({"forward": functools.partial(cuscan.linear_recurrence, decays, impulses,
                                               axis=axis),
                  "vjp": functools.partial(cuscan.linear_recurrence_vjp, weights, decays,
                                           output, axis=axis)},
                 3 if length * channels >= 2**20 else 7)


def measure_filters(length: int, channels: int, axis: int, freed: bool) -> dict:
    """The filters' row, in a process of its own (after freeing 16 MiB where ``freed``):
    `filtfilt` and `lfilter` of a 4th-order Butterworth filter, and `sosfiltfilt` and
    `sosfilt` of an 8th-order one, the zero-phase filters padded as SciPy pads."""
    import scipy.signal

    from cuscan import signal

    free_a_block(freed)
    shape = (length, channels) if axis == 0 else (channels, length)
    x = np.random.default_rng(0).standard_normal(shape)
    b, a = scipy.signal.butter(4, 0.1)
    sos = scipy.signal.butter(8, 0.1, output="sos")
    repeats = 3 if length * channels >= 2**20 else 7
    coefficients = {"filtfilt": (b, a), "sosfiltfilt": (sos,), "lfilter": (b, a),
                    "sosfilt": (sos,)}
    row = timed({name: functools.partial(getattr(signal, name), *coefficients[name], x,
                                         axis=axis) for name in FILTERS}, repeats)
    for name in FILTERS:
        function = functools.partial(getattr(scipy.signal, name), *coefficients[name], x,
                                     axis=axis)
        row[f"{name}_scipy_s"] = min(best_time(function, repeats) for _ in range(3))
    return row


def in_new_processes(function, *args) -> dict:
    """``function(*args, freed)`` in a new process as it starts and in another after it
    freed 16 MiB, the latter's keys prefixed with ``freed_``."""
    row = {}
    spawn = multiprocessing.get_context("spawn")
    for freed in (False, True):
        with spawn.Pool(1) as pool:
            result = pool.apply(function, (*args, freed))
        row |= {(f"freed_{k}" if freed else k): v for k, v in result.items()}
    return row


def cells(row: dict, names, width: int = 11) -> str:
    """Each of ``names``' fresh time (ms), and the pool's time over it, as a process starts
    and after it freed 16 MiB."""
    return " ".join(f"{row[f'{name}_fresh_s'] * 1e3:{width}.3f} "
                    f"{row[f'{name}_pool_s'] / row[f'{name}_fresh_s']:6.2f} "
                    f"{row[f'freed_{name}_pool_s'] / row[f'freed_{name}_fresh_s']:6.2f}"
                    for name in names)


def main() -> None:
    print("time with the pool over the time with every temporary allocated afresh "
          "(< 1: the pool is faster), each shape in a new process: as it starts, and "
          "after it freed 16 MiB")
    print(f"{'T':>8} {'C':>3} {'axis':>4} {'decays':>8} {'dtype':>10} "
          f"{'forward ms':>11} {'ratio':>6} {'freed':>6} {'vjp ms':>11} {'ratio':>6} "
          f"{'freed':>6}")
    rows = []
    for length, channels, axis, constant in SHAPES:
        for dtype in DTYPES:
            rows.append({"length": length, "channels": channels, "axis": axis,
                         "constant_decays": constant, "dtype": dtype,
                         **in_new_processes(measure, length, channels, axis, constant, dtype)})
            print(f"{length:>8} {channels:>3} {axis:>4} {'constant' if constant else 'varying':>8} "
                  f"{dtype:>10} " + cells(rows[-1], ("forward", "vjp")), flush=True)
    print(f"\n{'T':>8} {'C':>3} {'axis':>4} "
          + " ".join(f"{name + ' ms':>15} {'ratio':>6} {'freed':>6}" for name in FILTERS)
          + "   pool over SciPy: " + ", ".join(FILTERS))
    filters = []
    for length, channels, axis in FILTER_SHAPES:
        filters.append({"length": length, "channels": channels, "axis": axis,
                        **in_new_processes(measure_filters, length, channels, axis)})
        row = filters[-1]
        print(f"{length:>8} {channels:>3} {axis:>4} " + cells(row, FILTERS, 15)
              + "".join(f" {row[f'{name}_pool_s'] / row[f'{name}_scipy_s']:8.2f}"
                        for name in FILTERS), flush=True)
    for prefix, label in (("", "as a process starts"), ("freed_", "after it freed 16 MiB")):
        for what, table, names in (("scans", rows, ("forward", "vjp")),
                                   ("filters", filters, FILTERS)):
            ratios = [r[f"{prefix}{name}_pool_s"] / r[f"{prefix}{name}_fresh_s"]
                      for r in table for name in names]
            print(f"{label}, {what}: the pool took {min(ratios):.2f} to {max(ratios):.2f} of "
                  "the time")
    kept = max(r[key] for r in rows + filters for key in r if key.endswith("_kept_bytes"))
    print(f"the pool kept at most {kept / 2**20:.1f} MiB (its limit: "
          f"{_scratch._POOL_BYTES / 2**20:g} MiB)")
    path = write("numpy_scratch", {"environment": environment(),
                                   "pool_bytes": _scratch._POOL_BYTES,
                                   "min_pooled": _scratch._MIN_POOLED,
                                   "max_pooled": _scratch._MAX_POOLED, "rows": rows,
                                   "filters": filters})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
