"""Time-major NumPy signals in chunks as they lie, or copied to adjacent samples and back.

`cuscan.signal` runs a time-major signal of at least `_chunks._MIN_COLUMNS` adjacent channels,
such as ``(T, C)`` along axis 0, in chunks as it lies: each chunk a block of samples by
channels (`_chunks._in_columns`). Before, every such signal was copied to adjacent samples and
back in tiles around the chunks, and a single section on more than 64 channels ran its own
recurrences. This times `lfilter` (a 4th-order Butterworth filter as ``(b, a)``), `sosfilt`
(an 8th-order one as sections), `filtfilt` and `sosfiltfilt` with them, and a single section
and a first-order `lfilter`, on float64 ``(T, C)`` signals along axis 0, both ways alternated
in one process (``_MIN_COLUMNS`` as set, or beyond any channel count), and SciPy's time.
Then short signals of 4 to 512 channels, which a call after the first few takes as one
product with the filter's matrices for their length: `sosfilt` with zi (a stream's block)
and `lfilter`, the product as they lie (`_chunks._product_of_columns`) or on rows copied
from them (``_MIN_PRODUCT_COLUMNS`` as set, or beyond any channel count).
Writes results/signal_columns.json.

    python -m benchmarks.signal_columns
"""

from __future__ import annotations

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import (
    alternated,
    best_time,
    environment,
    without_options,
    write,
)
from cuscan.signal import _chunks

BA = scipy.signal.butter(4, 0.1)
SOS = scipy.signal.butter(8, 0.1, output="sos")
ONE = scipy.signal.butter(2, 0.1, output="sos")
FIRST = scipy.signal.butter(1, 0.1)
CALLS = {
    "lfilter": (lambda x: cuscan.signal.lfilter(*BA, x, axis=0),
                lambda x: scipy.signal.lfilter(*BA, x, axis=0)),
    "sosfilt": (lambda x: cuscan.signal.sosfilt(SOS, x, axis=0),
                lambda x: scipy.signal.sosfilt(SOS, x, axis=0)),
    "filtfilt": (lambda x: cuscan.signal.filtfilt(*BA, x, axis=0),
                 lambda x: scipy.signal.filtfilt(*BA, x, axis=0)),
    "sosfiltfilt": (lambda x: cuscan.signal.sosfiltfilt(SOS, x, axis=0),
                    lambda x: scipy.signal.sosfiltfilt(SOS, x, axis=0)),
    "one section": (lambda x: cuscan.signal.sosfilt(ONE, x, axis=0),
                    lambda x: scipy.signal.sosfilt(ONE, x, axis=0)),
    "first order": (lambda x: cuscan.signal.lfilter(*FIRST, x, axis=0),
                    lambda x: scipy.signal.lfilter(*FIRST, x, axis=0)),
}
SHAPES = [(4096, 16), (4096, 24), (4096, 64), (4096, 256), (65536, 16), (65536, 24),
          (65536, 32), (65536, 64), (65536, 256), (8192, 1024)]
VALUES = {"as they lie": _chunks._MIN_COLUMNS, "copied": 1 << 62}
SHORT = [(64, 4), (64, 64), (128, 4), (128, 16), (128, 512), (256, 4), (256, 64), (256, 512)]
PRODUCT_VALUES = {"as they lie": _chunks._MIN_PRODUCT_COLUMNS, "rows": 1 << 62}


def repeats(elements: int) -> int:
    """Calls per timing: about 50 ms of them at a few hundred Megasamples a second."""
    return max(1, min(100, 10**7 // elements))


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    print("time as they lie / copied (SciPy's time / as they lie in brackets)")
    print(f"{'T x C':>14} " + " ".join(f"{name:>15}" for name in CALLS))
    for shape in SHAPES:
        x = rng.standard_normal(shape)
        cells = []
        for name, (ours, theirs) in CALLS.items():
            times = alternated(lambda x=x, ours=ours: ours(x), _chunks, "_MIN_COLUMNS", VALUES,
                               repeats(x.size))
            scipy_s = min(best_time(lambda x=x, theirs=theirs: theirs(x), repeats(x.size))
                          for _ in range(3))
            ratio = times["as they lie"] / times["copied"]
            rows.append({"function": name, "length": shape[0], "channels": shape[1],
                         "columns_s": times["as they lie"], "copied_s": times["copied"],
                         "scipy_s": scipy_s, "ratio": ratio,
                         "scipy_ratio": times["as they lie"] / scipy_s})
            cells.append(f"{ratio:5.2f} ({scipy_s / times['as they lie']:5.2f})")
        print(f"{shape[0]:>7} x {shape[1]:<4} " + " ".join(f"{c:>15}" for c in cells),
              flush=True)
    path = write("signal_columns", {"environment": environment(),
                                    "min_columns": _chunks._MIN_COLUMNS, "rows": rows,
                                    "min_product_columns": _chunks._MIN_PRODUCT_COLUMNS,
                                    "products": products(rng)})
    print(f"wrote {path}")


def products(rng) -> list[dict]:
    """Short signals' products with their matrices, as they lie or on rows, and SciPy."""
    rows = []
    print("\nshort signals, one product: as they lie / on rows (SciPy's time / as they lie)")
    for length, channels in SHORT:
        x = rng.standard_normal((length, channels))
        zi = rng.standard_normal((len(SOS), 2, channels))
        cells = []
        for name, ours, theirs in (
                ("sosfilt, zi", lambda x=x, zi=zi: cuscan.signal.sosfilt(SOS, x, axis=0, zi=zi),
                 lambda x=x, zi=zi: scipy.signal.sosfilt(SOS, x, axis=0, zi=zi)),
                ("lfilter", lambda x=x: cuscan.signal.lfilter(*BA, x, axis=0),
                 lambda x=x: scipy.signal.lfilter(*BA, x, axis=0))):
            for _ in range(_chunks._DIRECT_AFTER + 1):  # the last builds the matrices
                ours()
            calls = max(20, min(2000, 2 * 10**6 // x.size))
            times = alternated(ours, _chunks, "_MIN_PRODUCT_COLUMNS", PRODUCT_VALUES, calls)
            scipy_s = min(best_time(theirs, calls) for _ in range(3))
            ratio = times["as they lie"] / times["rows"]
            rows.append({"function": name, "length": length, "channels": channels,
                         "columns_s": times["as they lie"], "rows_s": times["rows"],
                         "scipy_s": scipy_s, "ratio": ratio})
            cells.append(f"{name}: {ratio:5.2f} ({scipy_s / times['as they lie']:5.2f})")
        print(f"{length:>7} x {channels:<4} " + "   ".join(cells), flush=True)
    return rows


if __name__ == "__main__":
    without_options(__doc__)
    main()
