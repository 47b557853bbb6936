"""cuscan.signal.lfilter on the CPU: the whole filter in chunks as matrix products.

On float64 NumPy signals `lfilter`, `filtfilt`, `sosfilt` and `sosfiltfilt` run the
filter chunk by chunk as BLAS products (`cuscan/signal/_chunks.py`), from
`_MIN_LENGTH` samples per channel and, for `lfilter`, up to order `_MAX_ORDER`.
Without it each pole (or pair of poles) runs as its own recurrence after the
numerator's passes. Times both, alternated in one process (so a loaded machine slows
both alike), and prints chunks / without and each time beside `scipy.signal`'s:

1. `lfilter` on Butterworth low-pass designs of orders 2, 4 and 8 in ``(b, a)`` form
   and FIR filters of 17 and 65 taps, over one to 256 channels;
2. a long signal filtered block by block with ``zi`` (streaming), by `lfilter`
   (order 4) and `sosfilt` (order 8), whose initial and final states enter and leave
   the chunks as products, each block the same call again (a stream's run, without
   the call's checks and plans: `_stream._streamed`);
3. the chunk length (`_CHUNK`) for filters of orders 4 and 8, whose pairs of poles run
   among other stages: the time at 16, 32 and 128 samples against that at `_CHUNK`;
4. short signals, 16 to 127 samples (from `_MIN_LENGTH`, in chunks of `_MIN_CHUNK`
   below twice the chunk length), one to 4,096 channels: `lfilter` on Butterworth
   designs of orders 1, 4 and 8, and `sosfilt` on orders 2, 16 and 32 (in chunks, not
   as one product);
5. the same filters with ``zi`` called again and again on blocks of 1 to 256 samples of
   one to 4,096 channels, as a stream is: one product with the cascade's matrices for
   the block's length (`_direct`, for every shape here) against the chunks (below 16
   samples, the recurrences, which also build the matrices there), whether
   `_chunks`' rule takes the product there, and the time of the call that builds the
   matrices (after `_DIRECT_AFTER` calls in chunks); and the product as a stream's
   run against the product through the call's checks and plans.

Sections 1, 3 and 4 time each call with its checks and plans, as a call on new arrays
runs (streams off), short blocks of a stream (section 2) as a stream's runs.

Writes results/lfilter_chunks.json.

    python -m benchmarks.lfilter_chunks
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import scipy.signal

from benchmarks._common import (
    alternated,
    alternated_settings,
    assigned,
    best_time,
    environment,
    without_options,
    write,
)
from cuscan import signal
from cuscan.signal import _chunks, _stream

SHAPES = [(1, 10**4), (1, 10**5), (1, 10**6), (64, 156_250), (16, 4096), (256, 256),
          (8, 65536)]
FILTERS = {"butter 2": scipy.signal.butter(2, 0.05), "butter 4": scipy.signal.butter(4, 0.05),
           "butter 8": scipy.signal.butter(8, 0.05),
           "fir 17": (scipy.signal.firwin(17, 0.2), np.ones(1)),
           "fir 65": (scipy.signal.firwin(65, 0.2), np.ones(1))}
BLOCKS = [(1, 32), (1, 256), (1, 1024), (1, 4096), (8, 1024)]
SHORT_LENGTHS = (16, 24, 32, 48, 64, 96, 127)
SHORT_CHANNELS = (1, 64, 1024, 4096)
SHORT_FILTERS = {**{f"lfilter butter {order}": (signal.lfilter, scipy.signal.lfilter,
                                                scipy.signal.butter(order, 0.1))
                    for order in (1, 4, 8)},
                 **{f"sosfilt butter {order}": (signal.sosfilt, scipy.signal.sosfilt,
                                                (scipy.signal.butter(order, 0.1, output="sos"),))
                    for order in (2, 16, 32)}}
# Each call with its checks and plans, as a call on new arrays runs (streams are off but
# where a setting turns them on): in chunks, and with the stages' recurrences.
STREAMS = _stream._STREAMS_KEPT
SETTINGS = {"chunks": {}, "without": {(_chunks, "_MIN_LENGTH"): math.inf}}
# A stream's blocks as a user's calls run them (the same call again: a stream's run), and
# with the recurrences.
STREAM_SETTINGS = {"chunks": {(_stream, "_STREAMS_KEPT"): STREAMS},
                   "without": {(_chunks, "_MIN_LENGTH"): math.inf}}
DIRECT_LENGTHS = (1, 8, 16, 32, 64, 128, 192, 256)
DIRECT_CHANNELS = (1, 16, 256, 4096)
# Short blocks again and again: a stream's run (`_stream._streamed`), the product
# through the call's checks and plans, and the chunks.
DIRECT_SETTINGS = {"stream": {(_chunks, "_DIRECT_LENGTH"): max(DIRECT_LENGTHS),
                              (_stream, "_STREAMS_KEPT"): STREAMS},
                   "product": {(_chunks, "_DIRECT_LENGTH"): max(DIRECT_LENGTHS)},
                   "chunks": {(_chunks, "_DIRECT_LENGTH"): 0}}


def _streamed(function, blocks: list, zi):
    """Filters the ``blocks`` one after the other, each from the last one's final state."""
    for block in blocks:
        _, zi = function(block, zi=zi)


def _row(label: str, best: dict, theirs: float) -> None:
    print(f"{label:>28} {best['chunks'] / best['without']:>15.2f} "
          f"{best['chunks'] / theirs:>13.2f} {best['without'] / theirs:>14.2f} "
          f"{theirs * 1e3:>11.3f}", flush=True)


def _short(rng, header: str) -> list:
    """Short signals along axis -1: chunks / without, and each / scipy.signal."""
    rows = []
    print("\nshort signals along axis -1: chunks / without, and each / scipy.signal")
    print(header)
    for length in SHORT_LENGTHS:
        for channels in SHORT_CHANNELS:
            x = rng.standard_normal((channels, length))
            repeats = max(5, min(200, 2 * 10**5 // x.size))
            for name, (ours, theirs, design) in SHORT_FILTERS.items():
                best = alternated_settings(functools.partial(ours, *design, x), SETTINGS,
                                           repeats)
                scipy_s = best_time(functools.partial(theirs, *design, x), repeats)
                rows.append({"shape": [channels, length], "filter": name,
                             "chunks_s": best["chunks"], "without_s": best["without"],
                             "scipy_s": scipy_s})
                _row(f"{channels}x{length} {name}", best, scipy_s)
    return rows


def _zi(name: str, design: tuple, channels: int) -> np.ndarray:
    """Zeros in SciPy's zi layout for a filter of `SHORT_FILTERS` over (channels, T)."""
    if name.startswith("sosfilt"):
        return np.zeros((len(design[0]), channels, 2))
    return np.zeros((channels, max(map(len, design)) - 1))


def _direct(rng) -> list:
    """Blocks of a stream: one product against the chunks, each / scipy.signal."""
    rows = []
    print("\nblocks with zi, along axis -1: product / chunks, and each / scipy.signal; "
          "the rule's choice; the call building the matrices / chunks; a stream's product "
          "/ the product through the checks, and / scipy.signal")
    print(f"{'':>28} {'product/chunks':>15} {'product/scipy':>14} {'chunks/scipy':>13} "
          f"{'rule':>8} {'build/chunks':>13} {'stream/product':>15} {'stream/scipy':>13}")
    for length in DIRECT_LENGTHS:
        for channels in DIRECT_CHANNELS:
            x = rng.standard_normal((channels, length))
            repeats = max(5, min(200, 2 * 10**5 // x.size))
            for name, (ours, theirs, design) in SHORT_FILTERS.items():
                zi = _zi(name, design, channels)
                call = functools.partial(ours, *design, x, zi=zi)
                _chunks._direct_kept.clear()
                _stream._streams.clear()
                for _ in range(_chunks._DIRECT_AFTER):
                    call()
                start = time.perf_counter()
                call()
                build_s = time.perf_counter() - start
                rule = bool(_chunks._direct_kept) and all(
                    isinstance(kept, tuple) for kept in _chunks._direct_kept.values())
                with assigned({(_chunks, "_DIRECT_WORK"): math.inf}):  # the product everywhere
                    best = alternated_settings(call, DIRECT_SETTINGS, repeats)
                scipy_s = best_time(functools.partial(theirs, *design, x, zi=zi), repeats)
                rows.append({"shape": [channels, length], "filter": name,
                             "stream_s": best["stream"], "product_s": best["product"],
                             "chunks_s": best["chunks"], "scipy_s": scipy_s, "rule": rule,
                             "build_s": build_s})
                print(f"{channels}x{length} {name:>20} "
                      f"{best['product'] / best['chunks']:>15.2f} "
                      f"{best['product'] / scipy_s:>14.2f} {best['chunks'] / scipy_s:>13.2f} "
                      f"{'product' if rule else 'chunks':>8} "
                      f"{build_s / best['chunks']:>13.1f} "
                      f"{best['stream'] / best['product']:>15.2f} "
                      f"{best['stream'] / scipy_s:>13.2f}", flush=True)
    return rows


def main() -> None:
    """Streams are off but in sections 2 and 5 (`STREAM_SETTINGS`, `DIRECT_SETTINGS`)."""
    with assigned({(_stream, "_STREAMS_KEPT"): 0}):
        _main()


def _main() -> None:
    rng = np.random.default_rng(0)
    header = (f"{'':>28} {'chunks/without':>15} {'chunks/scipy':>13} {'without/scipy':>14} "
              f"{'scipy (ms)':>11}")
    rows = []
    print("lfilter along axis -1, float64; chunks / without (< 1: the chunks are faster), "
          "and each / scipy.signal.lfilter")
    print(header)
    for shape in SHAPES:
        x = rng.standard_normal(shape)
        repeats = max(3, min(30, 3 * 10**6 // x.size))
        for name, (b, a) in FILTERS.items():
            best = alternated_settings(functools.partial(signal.lfilter, b, a, x), SETTINGS,
                                       repeats)
            theirs = best_time(functools.partial(scipy.signal.lfilter, b, a, x), repeats)
            rows.append({"shape": list(shape), "filter": name, "chunks_s": best["chunks"],
                         "without_s": best["without"], "scipy_s": theirs})
            _row(f"{'x'.join(map(str, shape))} {name}", best, theirs)
    streams = []
    print("\nblock by block with zi, 2^16 samples per channel: chunks / without, and each / "
          "scipy.signal (the whole stream)")
    print(header)
    sos = scipy.signal.butter(8, 0.05, output="sos")
    b, a = FILTERS["butter 4"]
    for channels, length in BLOCKS:
        x = rng.standard_normal((channels, 2**16))
        blocks = np.split(x, 2**16 // length, axis=-1)
        for name, ours, theirs, zi in (
                ("lfilter order 4", functools.partial(signal.lfilter, b, a),
                 functools.partial(scipy.signal.lfilter, b, a), np.zeros((channels, 4))),
                ("sosfilt order 8", functools.partial(signal.sosfilt, sos),
                 functools.partial(scipy.signal.sosfilt, sos), np.zeros((4, channels, 2)))):
            best = alternated_settings(functools.partial(_streamed, ours, blocks, zi),
                                       STREAM_SETTINGS, 3)
            scipy_s = best_time(functools.partial(_streamed, theirs, blocks, zi), 3)
            streams.append({"channels": channels, "block": length, "filter": name,
                            "chunks_s": best["chunks"], "without_s": best["without"],
                            "scipy_s": scipy_s})
            _row(f"{channels}x{length} {name}", best, scipy_s)
    by_length = []
    lengths = {str(n): n for n in sorted({16, 32, _chunks._CHUNK, 128})}
    print(f"\npairs among other stages: time at each chunk length / time at "
          f"{_chunks._CHUNK}; that time")
    for shape in ((1, 10**6), (64, 156_250), (16, 4096)):
        x = rng.standard_normal(shape)
        for name in ("butter 4", "butter 8"):
            b, a = FILTERS[name]
            best = alternated(functools.partial(signal.lfilter, b, a, x), _chunks,
                              "_CHUNK", lengths, 3)
            base = best[str(_chunks._CHUNK)]
            by_length.append({"shape": list(shape), "filter": name, "seconds": best})
            print(f"{'x'.join(map(str, shape)):>12} {name:>9} "
                  + " ".join(f"{n}: {best[n] / base:.2f}" for n in lengths)
                  + f"   {base * 1e3:.2f} ms", flush=True)
    with assigned({(_chunks, "_DIRECT_LENGTH"): 0}):  # in chunks
        short = _short(rng, header)
    direct = _direct(rng)
    path = write("lfilter_chunks", {"environment": environment(),
                                    "min_length": _chunks._MIN_LENGTH,
                                    "max_order": _chunks._MAX_ORDER,
                                    "chunk": _chunks._CHUNK, "rows": rows,
                                    "streams": streams, "pair_chunk_lengths": by_length,
                                    "short": short, "direct": direct,
                                    "direct_rule": {"length": _chunks._DIRECT_LENGTH,
                                                    "work": _chunks._DIRECT_WORK,
                                                    "any": _chunks._DIRECT_ANY}})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
