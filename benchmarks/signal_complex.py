"""Complex signals through real filters: in chunks as their two parts, or the recurrences.

A real filter is linear and real, so on a complex signal it filters the real and the
imaginary parts apart: `cuscan.signal` runs such a NumPy signal in chunks as matrix
products, its parts side by side as a real signal with a last axis of 2
(`_chunks.pairs`), where it ran each stage's complex recurrence before. This times
`lfilter` and `filtfilt` of a 4th-order Butterworth filter as `(b, a)`, and `sosfilt` and
`sosfiltfilt` of an 8th-order one as sections, on complex128 signals (one channel of
10^4 to 10^6 samples, 8 time-contiguous channels and 8 time-major ones of 65,536) and a
complex64 one, both ways alternated in one process (the recurrences as before, by
`_chunks.pairs` taking nothing apart), with SciPy's time and the largest difference from
SciPy's result over its RMS. Writes results/signal_complex.json.

    python -m benchmarks.signal_complex
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import alternated, best_time, environment, without_options, write
from cuscan.signal import _chunks

BA = scipy.signal.butter(4, 0.1)
SOS = scipy.signal.butter(8, 0.1, output="sos")
FUNCTIONS = {"lfilter": BA, "sosfilt": (SOS,), "filtfilt": BA, "sosfiltfilt": (SOS,)}
# (T, channels, time axis, dtype)
SHAPES = [(10**4, 1, 0, "complex128"), (10**5, 1, 0, "complex128"),
          (10**6, 1, 0, "complex128"), (65536, 8, -1, "complex128"),
          (65536, 8, 0, "complex128"), (10**5, 1, 0, "complex64")]
SETTINGS = {"pairs": _chunks.pairs, "recurrences": lambda x: x}


def measure(length: int, channels: int, axis: int, dtype: str) -> list[dict]:
    """Each function's row on one signal."""
    rng = np.random.default_rng(0)
    shape = (length, channels) if axis == 0 else (channels, length)
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    repeats = max(3, min(50, 2 * 10**6 // x.size))
    rows = []
    for name, coefficients in FUNCTIONS.items():
        ours = functools.partial(getattr(cuscan.signal, name), *coefficients, x, axis=axis)
        theirs = functools.partial(getattr(scipy.signal, name), *coefficients, x, axis=axis)
        best = alternated(ours, _chunks, "pairs", SETTINGS, repeats)
        expected = theirs()
        error = float(np.max(np.abs(ours() - expected)) / np.sqrt(np.mean(np.abs(expected) ** 2)))
        scipy_s = min(best_time(theirs, repeats) for _ in range(3))
        rows.append({"function": name, "length": length, "channels": channels, "axis": axis,
                     "dtype": dtype, **{f"{label}_s": t for label, t in best.items()},
                     "scipy_s": scipy_s, "max_error_over_rms": error})
        print(f"{name:>12} {length:>8} {channels:>3} {axis:>4} {dtype:>10} "
              f"{best['recurrences'] * 1e3:11.3f} {best['pairs'] * 1e3:9.3f} "
              f"{best['pairs'] / best['recurrences']:7.2f} {best['pairs'] / scipy_s:7.2f} "
              f"{error:9.1e}", flush=True)
    return rows


def main() -> None:
    print(f"{'function':>12} {'T':>8} {'C':>3} {'axis':>4} {'dtype':>10} "
          f"{'recurr. ms':>11} {'pairs ms':>9} {'ratio':>7} {'/ SciPy':>7} {'error':>9}")
    rows = [row for shape in SHAPES for row in measure(*shape)]
    ratios = [r["pairs_s"] / r["recurrences_s"] for r in rows]
    against = [r["pairs_s"] / r["scipy_s"] for r in rows]
    print(f"in chunks: {min(ratios):.2f} to {max(ratios):.2f} of the recurrences' time, "
          f"{min(against):.2f} to {max(against):.2f} of SciPy's")
    path = write("signal_complex", {"environment": environment(), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
