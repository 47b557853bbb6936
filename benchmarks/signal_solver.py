"""The chunks' end states solved as one product, against `_solve`'s stages.

`cuscan.signal` filters a NumPy signal in chunks; the chunks' end states (``width x chunks``
numbers a row) are then solved over the chunks, stage by stage (`_chunks._solve`: a coupling
and a scan a stage, two to four NumPy steps each), or as one product with the matrix of that
whole map (`_chunks._solver`) where `_chunks._SOLVE_SIDE` says so. This times, alternated in
one process:

- "solve": the step alone, the stages against the product, for filters of orders 2, 4 and 6
  in ``(b, a)`` form (widths 2, 8 and 12) and 8 in sections (width 8), on 1 to 4,096 rows of
  about 32, 128 and 256 numbers;
- "calls": `lfilter` and `filtfilt` (a 4th-order Butterworth filter as ``(b, a)``), `sosfilt`
  and `sosfiltfilt` (8th-order, sections) on 1, 2 and 16 channels of 300 to 4,096 samples
  (float64, time last), with the product where it applies ("now") and with the stages only,
  and SciPy's time.

Writes results/signal_solver.json.

    python -m benchmarks.signal_solver
"""

from __future__ import annotations

import numpy as np
import scipy.signal

from benchmarks._common import alternated_calls, environment, without_options, write
from benchmarks.signal_calls import call_table  # the same filters and calls, with SciPy's
from cuscan.signal import _chunks, _filters

FILTERS = {
    "order 2": scipy.signal.butter(2, 0.1),
    "order 4": scipy.signal.butter(4, 0.1),
    "order 6": scipy.signal.ellip(6, 1, 60, 0.3),
    "sections": scipy.signal.butter(8, 0.1, output="sos"),
}
SIDES = [32, 128, 256]
ROWS = [1, 2, 3, 4, 16, 256, 4096]
LENGTHS = [300, 1024, 2048, 4096]
CHANNELS = [1, 2, 16]


def sections(coefficients) -> tuple:
    """A filter as `_chunks` steps it."""
    if isinstance(coefficients, np.ndarray):
        return _filters._OnHost((coefficients.tobytes(),), -1).steps()
    return _filters._OnHost(_filters._design(*_filters._normalized(*coefficients)), -1).steps()


def repeats(work: int) -> int:
    """Calls per timing: about 20 ms of them at a few hundred Megaflops a second."""
    return max(5, min(300, 5 * 10**6 // max(work, 1)))


def solve_rows(rng) -> list[dict]:
    rows = []
    print("solve: the product's time / the stages', by rows")
    print(f"{'':>9} {'side':>5} " + " ".join(f"{r:>6}" for r in ROWS))
    for name, coefficients in FILTERS.items():
        steps = sections(coefficients)
        width = sum(s.width for s in steps)
        size = _chunks._SHORT_CHUNK if width <= _chunks._SHORT_WIDTH else _chunks._CHUNK
        stages = _chunks._matrices(steps, size).stages
        for side in SIDES:
            chunks = side // width
            solver = _chunks._solver(steps, size, chunks)
            if solver is None:
                raise RuntimeError(f"{name}: no product over {chunks} chunks (_SOLVE_GAIN)")
            cells = []
            for count in ROWS:
                ends = rng.standard_normal((count, width + 1, chunks))[:, :width]
                times = alternated_calls(
                    {"stages": lambda ends=ends, stages=stages: _chunks._solve(ends.copy(),
                                                                                stages),
                     "product": lambda ends=ends, count=count, solver=solver: _chunks.times(
                         ends.reshape(count, -1), solver)}, repeats(count * side * side))
                ratio = times["product"] / times["stages"]
                rows.append({"filter": name, "width": width, "chunks": chunks,
                             "side": width * chunks, "rows": count, "stages_s": times["stages"],
                             "product_s": times["product"], "ratio": ratio})
                cells.append(f"{ratio:6.2f}")
            print(f"{name:>9} {width * chunks:>5} " + " ".join(cells), flush=True)
    return rows


def call_rows(rng) -> list[dict]:
    side = (_chunks, "_SOLVE_SIDE")
    return call_table(rng, {"now": {side: _chunks._SOLVE_SIDE}, "stages": {side: 0}}, "stages",
                      "calls: time now / with the stages only, and SciPy's time / now in "
                      "brackets", LENGTHS, CHANNELS, lambda elements: repeats(60 * elements))


def main() -> None:
    rng = np.random.default_rng(0)
    record = {"environment": environment(), "solve": solve_rows(rng), "calls": call_rows(rng)}
    path = write("signal_solver", record)
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
