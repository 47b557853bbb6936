"""The NumPy backend against scipy.signal.lfilter([1], [1, -a]) on constant decays.

lfilter runs the recurrence as a compiled serial loop: the speed a CPU user
gets today. Target: cuscan within 3x of it. Prints a table and writes
results/numpy_vs_lfilter.json.

    python benchmarks/numpy_vs_lfilter.py
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

import cuscan
from benchmarks._common import best_time, environment, without_options, write

# (name, shape, time axis)
CASES = [
    ("T=10^6, 1 channel", (10**6,), 0),
    ("T=10^7, 1 channel", (10**7,), 0),
    ("T=10^5, 64 channels, time-major (T, C)", (10**5, 64), 0),
    ("T=10^5, 64 channels, time-contiguous (C, T)", (64, 10**5), 1),
]


def main() -> None:
    rng = np.random.default_rng(0)
    decay = 0.99
    rows = []
    print(f"{'case':<46} {'lfilter ms':>11} {'cuscan ms':>10} {'ratio':>7}  method")
    for name, shape, axis in CASES:
        x = rng.standard_normal(shape)
        expected = lfilter([1.0], [1.0, -decay], x, axis=axis)
        result = cuscan.linear_recurrence(decay, x, axis=axis)
        np.testing.assert_allclose(result, expected, rtol=1e-9, atol=1e-9)
        t_lfilter = best_time(lambda x=x, k=axis: lfilter([1.0], [1.0, -decay], x, axis=k), 7)
        t_cuscan = best_time(lambda x=x, k=axis: cuscan.linear_recurrence(decay, x, axis=k), 7)
        rows.append({"case": name, "shape": list(shape), "axis": axis, "dtype": "float64",
                     "lfilter_s": t_lfilter, "cuscan_s": t_cuscan,
                     "ratio": t_cuscan / t_lfilter})
        print(f"{name:<46} {t_lfilter * 1e3:11.2f} {t_cuscan * 1e3:10.2f} "
              f"{t_cuscan / t_lfilter:6.2f}x  auto")
    path = write("numpy_vs_lfilter", {"environment": environment(), "decay": decay,
                                      "target_ratio": 3.0, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
