"""cuscan.signal.sosfilt on the CPU: the whole cascade in chunks as matrix products.

On float64 NumPy signals whose samples are adjacent (one channel; (C, T) along axis
-1) `sosfilt` and `sosfiltfilt` run the cascade chunk by chunk as BLAS products
(`cuscan/signal/_chunks.py`), from `_MIN_LENGTH` samples per channel. Without it
each section runs as its own recurrences. Times
both, alternated in one process (so a loaded machine slows both alike), for
Butterworth low-pass designs of orders 2, 8 and 16, then the chunk lengths 32, 64
and 128 on the larger shapes; prints chunks / without and each time beside
`scipy.signal.sosfilt`'s; and (T, C) signals along axis 0, whose steps the cascade
copies to adjacent samples and back (a single section over more than
`_MAX_APART_WIDTH` channels runs without: its time-major recurrences are faster);
and for such signals of more than twice `_SEGMENT_ELEMENTS` samples, and a single
channel's strided view, `sosfilt` and `sosfiltfilt` a segment of time at a time
against the whole signal copied at once:
time, and the most memory a call holds beyond its input (tracemalloc, which NumPy
reports to), beside SciPy's. The chunks run as a user's calls do: a signal of a few
hundred samples called again and again is one product with the cascade's matrices for
its length (`_chunks._direct`). Writes results/sosfilt_chunks.json.

    python -m benchmarks.sosfilt_chunks
"""

from __future__ import annotations

import functools
import math

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
from cuscan.signal import _chunks, _stream

SHAPES = [(1, 10**4), (1, 10**5), (1, 10**6), (1, 10**7), (4, 10**6), (64, 156_250),
          (16, 4096), (256, 256), (1024, 512), (8, 65536)]
ORDERS = (2, 8, 16)
LENGTHS = (32, 64, 128)
APART = [(156_250, 64), (10**6, 4), (10**6, 2), (100_000, 3), (4096, 16), (2048, 512),
         (512, 2048)]
# (T, C) along axis 0; (T,): every other sample of a signal of 2T
SEGMENTED = [(10**6, 64), (10**6, 16), (200_000, 8, 8), (10**7, 2), (10**7,)]


def segments(rng) -> list:
    """(T, C) signals along axis 0, and strided single channels, in segments of time,
    and copied whole."""
    rows = []
    sos = scipy.signal.butter(8, 0.05, output="sos")
    settings = {"segments": _chunks._SEGMENT_ELEMENTS, "whole": math.inf}
    print("\n(T, C) along axis 0 or (T,) strided, order 8: segments / whole, segments / scipy;"
          " memory beyond the input (MiB): segments, whole, scipy")
    for shape in SEGMENTED:
        x = rng.standard_normal(shape) if len(shape) > 1 else rng.standard_normal(2 * shape[0])[::2]
        for name, ours, theirs in (("sosfilt", signal.sosfilt, scipy.signal.sosfilt),
                                   ("sosfiltfilt", signal.sosfiltfilt,
                                    scipy.signal.sosfiltfilt)):
            function = functools.partial(ours, sos, x, axis=0)
            best = alternated(function, _chunks, "_SEGMENT_ELEMENTS", settings, 3)
            reference = functools.partial(theirs, sos, x, axis=0)
            memory = peak_memories(function, _chunks, "_SEGMENT_ELEMENTS", settings)
            row = {"shape": list(shape), "filter": name, "segments_s": best["segments"],
                   "whole_s": best["whole"], "scipy_s": best_time(reference, 3),
                   "segments_bytes": memory["segments"], "whole_bytes": memory["whole"],
                   "scipy_bytes": peak_memory(reference), "input_bytes": x.nbytes}
            rows.append(row)
            print(f"{'x'.join(map(str, shape)):>14} {name:>11} "
                  f"{row['segments_s'] / row['whole_s']:6.2f} "
                  f"{row['segments_s'] / row['scipy_s']:6.2f}   "
                  + " ".join(f"{row[k] / 2**20:7.0f}" for k in
                             ("segments_bytes", "whole_bytes", "scipy_bytes")), flush=True)
    return rows


def _always(x, axis: int, sections: int) -> bool:
    return (type(x) is np.ndarray and x.dtype == np.float64
            and x.shape[axis] >= _chunks._MIN_LENGTH)


def _adjacent(x, axis: int, sections: int) -> bool:
    return _always(x, axis, sections) and abs(x.strides[axis]) == x.itemsize


def main() -> None:
    """Each call with its checks and plans, as a call on new arrays runs (not as a stream's
    run of the same call again: `lfilter_chunks`)."""
    with assigned({(_stream, "_STREAMS_KEPT"): 0}):
        _main()


def _main() -> None:
    rng = np.random.default_rng(0)
    settings = {"chunks": _chunks._MIN_LENGTH, "without": math.inf}
    rows = []
    print("sosfilt along axis -1, float64; chunks / without (< 1: the chunks are faster), "
          "and each / scipy.signal.sosfilt")
    print(f"{'shape':>12} {'order':>5} {'chunks/without':>15} {'chunks/scipy':>13} "
          f"{'without/scipy':>14} {'scipy (ms)':>11}")
    for shape in SHAPES:
        x = rng.standard_normal(shape)
        repeats = max(3, min(30, 3 * 10**6 // x.size))
        for order in ORDERS:
            sos = scipy.signal.butter(order, 0.05, output="sos")
            function = functools.partial(signal.sosfilt, sos, x)
            best = alternated(function, _chunks, "_MIN_LENGTH", settings, repeats)
            theirs = best_time(functools.partial(scipy.signal.sosfilt, sos, x), repeats)
            rows.append({"shape": list(shape), "order": order,
                         "chunk": _chunks._SHORT_CHUNK if order <= 2 else _chunks._CHUNK,
                         "chunks_s": best["chunks"], "without_s": best["without"],
                         "scipy_s": theirs})
            print(f"{'x'.join(map(str, shape)):>12} {order:>5} "
                  f"{best['chunks'] / best['without']:>15.2f} {best['chunks'] / theirs:>13.2f} "
                  f"{best['without'] / theirs:>14.2f} {theirs * 1e3:>11.2f}", flush=True)
    lengths = {str(n): n for n in LENGTHS}
    by_length = []
    print("\nchunk length: time / time at the chosen length "
          f"({_chunks._CHUNK}); the chosen length's time")
    print(f"{'shape':>12} {'order':>5} " + " ".join(f"{n:>6}" for n in LENGTHS) + "   ms")
    short = _chunks._SHORT_WIDTH
    _chunks._SHORT_WIDTH = 0  # every cascade in chunks of _CHUNK
    try:
        for shape in SHAPES[2:6]:
            x = rng.standard_normal(shape)
            for order in ORDERS:
                sos = scipy.signal.butter(order, 0.05, output="sos")
                best = alternated(functools.partial(signal.sosfilt, sos, x), _chunks,
                                  "_CHUNK", lengths, 3)
                base = best[str(_chunks._CHUNK)]
                by_length.append({"shape": list(shape), "order": order, "seconds": best})
                print(f"{'x'.join(map(str, shape)):>12} {order:>5} "
                      + " ".join(f"{best[str(n)] / base:>6.2f}" for n in LENGTHS)
                      + f"   {base * 1e3:.1f}", flush=True)
    finally:
        _chunks._SHORT_WIDTH = short
    apart = []
    print("\n(T, C) along axis 0: chunks (copied) / without (< 1: the chunks are faster), "
          "and chunks / scipy")
    for shape in APART:
        x = rng.standard_normal(shape)
        for order in (2, 8):
            sos = scipy.signal.butter(order, 0.05, output="sos")
            function = functools.partial(signal.sosfilt, sos, x, axis=0)
            best = alternated(function, _chunks, "applies",
                              {"chunks": _always, "without": _adjacent}, 3)
            theirs = best_time(functools.partial(scipy.signal.sosfilt, sos, x, axis=0), 3)
            apart.append({"shape": list(shape), "order": order, "chunks_s": best["chunks"],
                          "without_s": best["without"], "scipy_s": theirs})
            print(f"{'x'.join(map(str, shape)):>12} {order:>5} "
                  f"{best['chunks'] / best['without']:>15.2f} {best['chunks'] / theirs:>13.2f}",
                  flush=True)
    segmented = segments(rng)
    path = write("sosfilt_chunks", {"environment": environment(), "chunk": _chunks._CHUNK,
                                    "short_chunk": _chunks._SHORT_CHUNK,
                                    "min_length": _chunks._MIN_LENGTH,
                                    "max_apart_width": _chunks._MAX_APART_WIDTH,
                                    "rows": rows, "chunk_lengths": by_length,
                                    "apart": apart,
                                    "segment_elements": _chunks._SEGMENT_ELEMENTS,
                                    "segments": segmented})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
