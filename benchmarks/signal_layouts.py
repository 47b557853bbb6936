"""Time-contiguous signals on the CPU: one time-major copy per filter, or per recurrence.

A signal laid out ``(C, T)`` and filtered along axis -1 has the elements of a
time step a row apart. The NumPy backend scans such operands in time-major
copies (see docs/algorithm.md); ``cuscan.signal`` makes that copy once for a
whole filter and copies the result back once. This times ``sosfilt``,
``lfilter`` and ``sosfiltfilt`` both ways, the one copy disabled for the
other, alternated in rounds in one process so that a loaded machine slows
both alike. Writes results/signal_layouts.json.

    python -m benchmarks.signal_layouts
"""

from __future__ import annotations

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import best_time, environment, write
from cuscan.signal._arrays import _Arrays

SOS = scipy.signal.butter(8, 0.05, output="sos")
B, A = scipy.signal.butter(4, 0.05)
SHAPES = [(64, 10**7 // 64), (12, 10**4), (16, 2**16), (256, 2**13), (1000, 1000)]
FILTERS = {
    "sosfilt": lambda x: cuscan.signal.sosfilt(SOS, x),
    "lfilter": lambda x: cuscan.signal.lfilter(B, A, x),
    "sosfiltfilt": lambda x: cuscan.signal.sosfiltfilt(SOS, x),
}


def main() -> None:
    rng = np.random.default_rng(0)
    rows, copied = [], _Arrays.time_major
    print("copied once / per recurrence; < 1 means the one copy is faster;"
          " * marks the layouts copied")
    print(f"{'C':>5} {'T':>7} " + " ".join(f"{name:>11}" for name in FILTERS))
    try:
        for channels, length in SHAPES:
            x = rng.standard_normal((channels, length))
            chosen = copied(_Arrays(np), x, 1) is not None
            cells = []
            for name, run in FILTERS.items():
                times = {"once": np.inf, "per_recurrence": np.inf}
                for _ in range(3):
                    for way in times:
                        _Arrays.time_major = copied if way == "once" else (
                            lambda self, x, axis: None)
                        times[way] = min(times[way], best_time(lambda x=x, run=run: run(x), 1))
                rows.append({"channels": channels, "length": length, "filter": name,
                             "copied": chosen, "once_s": times["once"],
                             "per_recurrence_s": times["per_recurrence"]})
                cells.append(f"{times['once'] / times['per_recurrence']:10.2f}"
                             f"{'*' if chosen else ' '}")
            print(f"{channels:>5} {length:>7} " + " ".join(cells), flush=True)
    finally:
        _Arrays.time_major = copied
    path = write("signal_layouts", {"environment": environment(), "sos_sections": len(SOS),
                                    "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
