"""cuscan.signal on the CPU: single-precision signals filtered in blocks of time.

The filters compute in double precision. A long float32 NumPy signal is filtered in
blocks of time (`_filters._in_blocks`, about `_BLOCK_BYTES` in double precision each),
each cast on its own into a copy whose samples follow one another in time, the state
carried from block to block (`filtfilt` and `sosfiltfilt`: both passes so, the padding
made block by block and the forward pass kept in double precision,
`_filtfilt._in_blocks`; Gustafsson's `filtfilt`: its four passes so, through one
buffer in double precision, `_filtfilt._gustafsson_in_blocks`); cast whole, the signal
would be copied into double precision and its output made there before being rounded.
Times both, alternated in one process (so a loaded machine slows both alike), for
`lfilter` and `filtfilt` (both methods) with an order-4 and `sosfilt` and
`sosfiltfilt` with an order-8 Butterworth design, on one channel, on `(C, T)` along
axis -1 and on `(T, C)` along axis 0; and the most memory a call holds, its output
included (tracemalloc, which NumPy reports to), against the output's size and beside
SciPy's (whose float64 coefficients make a float64 output of a float32 signal). Writes
results/signal_single.json.

    python -m benchmarks.signal_single
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.signal

from benchmarks._common import (
    alternated,
    assigned,
    best_time,
    environment,
    peak_memories,
    peak_memory,
    without_options,
    write,
)
from cuscan import signal
from cuscan.signal import _filters, _stream

# (shape, axis): 2.5 x 10^7 samples (100 MB in float32) in each layout, and 10^7 in fewer
# channels and more
SHAPES = [((25_000_000,), -1), ((8, 3_125_000), -1), ((3_125_000, 8), 0), ((250_000, 100), 0),
          ((10_000_000,), -1), ((64, 156_250), -1), ((1_000_000, 10), 0)]


def main() -> None:
    """Each call with its checks and plans, as a call on new arrays runs."""
    with assigned({(_stream, "_STREAMS_KEPT"): 0}):
        _main()


def _main() -> None:
    rng = np.random.default_rng(0)
    settings = {"blocks": _filters._BLOCK_BYTES, "whole": 1 << 62}  # one block: the whole
    b, a = scipy.signal.butter(4, 0.05)
    sos = scipy.signal.butter(8, 0.05, output="sos")
    filters = {"lfilter": (functools.partial(signal.lfilter, b, a),
                           functools.partial(scipy.signal.lfilter, b, a)),
               "sosfilt": (functools.partial(signal.sosfilt, sos),
                           functools.partial(scipy.signal.sosfilt, sos)),
               "filtfilt": (functools.partial(signal.filtfilt, b, a),
                            functools.partial(scipy.signal.filtfilt, b, a)),
               "gust": (functools.partial(signal.filtfilt, b, a, method="gust"),
                        functools.partial(scipy.signal.filtfilt, b, a, method="gust")),
               "sosfiltfilt": (functools.partial(signal.sosfiltfilt, sos),
                               functools.partial(scipy.signal.sosfiltfilt, sos))}
    rows = []
    print("float32 signals: blocks / whole (< 1: the blocks are faster), blocks / scipy; "
          "the most memory held (MiB, output included): blocks, whole, scipy; output (MiB)")
    for shape, axis in SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        for name, (ours, theirs) in filters.items():
            function = functools.partial(ours, x, axis=axis)
            reference = functools.partial(theirs, x, axis=axis)
            best = alternated(function, _filters, "_BLOCK_BYTES", settings, 3)
            memory = peak_memories(function, _filters, "_BLOCK_BYTES", settings)
            row = {"shape": list(shape), "axis": axis, "filter": name,
                   "blocks_s": best["blocks"], "whole_s": best["whole"],
                   "scipy_s": best_time(reference, 3),
                   "blocks_bytes": memory["blocks"], "whole_bytes": memory["whole"],
                   "scipy_bytes": peak_memory(reference), "output_bytes": x.nbytes}
            rows.append(row)
            print(f"{'x'.join(map(str, shape)):>12} {axis:>2} {name:>11} "
                  f"{row['blocks_s'] / row['whole_s']:6.2f} "
                  f"{row['blocks_s'] / row['scipy_s']:6.2f}   "
                  + " ".join(f"{row[k] / 2**20:6.0f}" for k in
                             ("blocks_bytes", "whole_bytes", "scipy_bytes", "output_bytes")),
                  flush=True)
    path = write("signal_single", {"environment": environment(),
                                   "block_bytes": _filters._BLOCK_BYTES,
                                   "min_block": _filters._MIN_BLOCK, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
