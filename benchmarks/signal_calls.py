"""What a call of the filters costs on short and mid-length NumPy signals, against SciPy.

Per call, `cuscan.signal` pays Python and NumPy steps whose count does not grow with the
signal: on a few channels of a few thousand samples they are most of its time. This times
`filtfilt` and `sosfiltfilt` (a 4th-order Butterworth filter as ``(b, a)``, an 8th-order one
as sections), and `lfilter` and `sosfilt` with the same filters, on 1, 4 and 16 channels of
1,024 to 16,384 samples (float64, time along the last axis), in two settings alternated in one
process, and SciPy's time:

- "now", as the code stands: the zero-phase filters' two passes run straight in chunks
  without the zf each leaves (`_filtfilt._passes_in_chunks`), their steady states are kept,
  and chunk-level scans of 33 to 64 chunks on up to 16 rows are one product;
- "before": the passes through the filters' general path, zf computed and dropped, the
  steady states computed on every call, and those scans in blocks of 32 chunks (what the
  code did before, but for the padding written in place and a pair of poles' scans over up
  to 32 chunks as one real product, which both settings have).

Writes results/signal_calls.json.

    python -m benchmarks.signal_calls
"""

from __future__ import annotations

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import (
    alternated_settings,
    best_time,
    environment,
    without_options,
    write,
)
from cuscan.signal import _chunks, _filters, _filtfilt

LENGTHS = [1024, 2048, 4096, 16384]
CHANNELS = [1, 4, 16]
BA = scipy.signal.butter(4, 0.1)
SOS = scipy.signal.butter(8, 0.1, output="sos")
CALLS = {
    "filtfilt": (lambda x: cuscan.signal.filtfilt(*BA, x),
                 lambda x: scipy.signal.filtfilt(*BA, x)),
    "sosfiltfilt": (lambda x: cuscan.signal.sosfiltfilt(SOS, x),
                    lambda x: scipy.signal.sosfiltfilt(SOS, x)),
    "lfilter": (lambda x: cuscan.signal.lfilter(*BA, x),
                lambda x: scipy.signal.lfilter(*BA, x)),
    "sosfilt": (lambda x: cuscan.signal.sosfilt(SOS, x),
                lambda x: scipy.signal.sosfilt(SOS, x)),
}
SETTINGS = {
    "now": {},
    "before": {
        (_filtfilt, "_passes_in_chunks"): lambda *arguments: None,
        (_filtfilt, "_steady_state"): _filters._steady_state.__wrapped__,
        (_filtfilt, "_sections_steady_state"): _filters._sections_steady_state.__wrapped__,
        (_filters, "_steady_state"): _filters._steady_state.__wrapped__,
        (_chunks, "_FEW_SCAN_ROWS"): 0,
    },
}


def repeats(elements: int) -> int:
    """Calls per timing: about 50 ms of them at a few hundred Megasamples a second."""
    return max(10, min(300, 10**7 // elements))


def call_table(rng, settings: dict, baseline: str, title: str, lengths, channels,
               repeats) -> list[dict]:
    """`CALLS` on ``channels`` x ``lengths`` signals (float64, time last) under each of
    ``settings`` ("now" and ``baseline``), alternated in one process, and SciPy's time; printed
    under ``title`` as now / baseline, and SciPy's time / now in brackets. A row a call, with
    each setting's time (``<label>_s``); ``repeats`` gives the calls per timing of a signal's
    elements."""
    rows = []
    print(title)
    print(f"{'':>12} {'T':>6} " + " ".join(f"{c:>14}" for c in channels))
    for name, (ours, theirs) in CALLS.items():
        for length in lengths:
            cells = []
            for count in channels:
                x = rng.standard_normal((count, length))
                times = alternated_settings(lambda x=x, ours=ours: ours(x), settings,
                                            repeats(x.size), rounds=5)
                scipy_s = min(best_time(lambda x=x, theirs=theirs: theirs(x), repeats(x.size))
                              for _ in range(3))
                ratio = times["now"] / times[baseline]
                rows.append({"function": name, "channels": count, "length": length,
                             **{f"{label}_s": times[label] for label in settings},
                             "scipy_s": scipy_s, "ratio": ratio,
                             "scipy_ratio": times["now"] / scipy_s})
                cells.append(f"{ratio:5.2f} ({scipy_s / times['now']:5.2f})")
            print(f"{name:>12} {length:>6} " + " ".join(f"{c:>14}" for c in cells), flush=True)
    return rows


def main() -> None:
    rows = call_table(np.random.default_rng(0), SETTINGS, "before",
                      "time now / before, and SciPy's time / now in brackets", LENGTHS, CHANNELS,
                      repeats)
    path = write("signal_calls", {"environment": environment(), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
