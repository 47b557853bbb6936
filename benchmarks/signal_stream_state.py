"""cuscan.signal.lfilter on a stream of short blocks: one product per block, or the chunks.

A short block filtered again and again with `zi` is one product with the filter's matrices
for its length (`_chunks._direct`), which carry SciPy's state (the transposed direct form
II) from block to block. Where the filter's poles cluster near the unit circle, that state
is ill-conditioned: a unit of it gives outputs and end states far larger than the states a
signal leaves (the gain, `_chunks._DIRECT_STATE_GAIN`), and the product's rounding of the
end state is magnified as much again by the next block. For Butterworth, Chebyshev I,
elliptic and Bessel designs of orders 1 to 8 in ``(b, a)`` form at cutoffs of 0.002 to 0.2
of Nyquist, filters 20 blocks of 200 samples from rest, block by block, as products (the
gain's limit lifted) and in chunks, and prints each design's gain and the largest error of
each over the RMS, against the filter stepped in extended precision
(`tests/reference.direct_form_extended`), with SciPy's own block-by-block error. Writes
results/signal_stream_state.json.

    python -m benchmarks.signal_stream_state
"""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import scipy.signal

from benchmarks._common import assigned, environment, without_options, write
from cuscan import signal
from cuscan.signal import _chunks, _filters, _stream
from tests.reference import direct_form_extended

DESIGNS = {"butter": lambda order, cutoff: scipy.signal.butter(order, cutoff),
           "cheby1": lambda order, cutoff: scipy.signal.cheby1(order, 1, cutoff),
           "ellip": lambda order, cutoff: scipy.signal.ellip(order, 1, 60, cutoff),
           "bessel": lambda order, cutoff: scipy.signal.bessel(order, cutoff)}
ORDERS = (1, 2, 3, 4, 6, 8)
CUTOFFS = (0.002, 0.01, 0.05, 0.2)
BLOCKS, LENGTH = 20, 200


def streamed(function, b, a, x) -> np.ndarray:
    """``x`` filtered block by block from rest, each block from the state the last left."""
    state, pieces = np.zeros(max(a.size, b.size) - 1), []
    for block in np.split(x, BLOCKS):
        y, state = function(b, a, block, zi=state)
        pieces.append(y)
    return np.concatenate(pieces)


def gain(b, a) -> float:
    """The largest output or end state that a unit of SciPy's state gives over a block."""
    b, a = _filters._normalized(b, a)
    steps = _filters._OnHost(_filters._design(b, a), -1).steps()
    order = max(a.size, b.size) - 1
    with assigned({(_chunks, "_DIRECT_STATE_GAIN"): math.inf}):
        y, finals, _ = _chunks.unit_matrices(
            lambda x, zi: _chunks.cascade(steps, x, 1, zi, direct=False), 1, order, LENGTH)
    return float(max(np.abs(y[:order]).max(), np.abs(finals[:order]).max()))


def main() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(BLOCKS * LENGTH)
    rows = []
    print(f"{BLOCKS} blocks of {LENGTH} samples, largest error / RMS: gain, as products, "
          "in chunks, SciPy")
    for (kind, design), order, cutoff in itertools.product(DESIGNS.items(), ORDERS, CUTOFFS):
        b, a = design(order, cutoff)
        exact = direct_form_extended(b, a, x)
        scale = np.sqrt(np.mean(exact ** 2))
        errors = {}
        for label, settings in (("product", {(_chunks, "_DIRECT_STATE_GAIN"): math.inf}),
                                ("chunks", {(_chunks, "_DIRECT_LENGTH"): 0})):
            with assigned({**settings, (_stream, "_STREAMS_KEPT"): 0,
                           (_chunks, "_direct_kept"): collections.OrderedDict()}):
                errors[label] = float(np.max(np.abs(streamed(signal.lfilter, b, a, x) - exact))
                                      / scale)
        errors["scipy"] = float(np.max(np.abs(streamed(scipy.signal.lfilter, b, a, x) - exact))
                                / scale)
        row = {"design": kind, "order": order, "cutoff": cutoff, "gain": gain(b, a), **errors}
        rows.append(row)
        print(f"{kind:>7} {order} {cutoff:>6} {row['gain']:9.2e} {row['product']:9.2e} "
              f"{row['chunks']:9.2e} {row['scipy']:9.2e}", flush=True)
    path = write("signal_stream_state", {"environment": environment(), "blocks": BLOCKS,
                                         "length": LENGTH,
                                         "state_gain": _chunks._DIRECT_STATE_GAIN,
                                         "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
