"""Serial against parallel on the NumPy backend: where "auto" should switch.

Times both methods on (T, width) arrays of each dtype over a grid and prints
the serial/parallel time ratio; cuscan._numpy_backend's "auto" rule is drawn
from it. Then times Hillis and Steele's scan against the method "auto" chose
without it, over short scans of each dtype, which sets its _MIN_DOUBLING_LENGTH,
_MAX_DOUBLING_ROW and _MAX_DOUBLING_BYTES; the parallel method's two layouts
(contiguous copies, or strided views of the arrays) over widths, for float64 and complex128, which
sets its _MAX_STRIDED_ROW; and time-contiguous operands, (C, T) along axis -1,
scanned in time-major copies or as they are, which sets the rule of its
_scattered. Writes results/numpy_methods.json.

    python -m benchmarks.numpy_methods
"""

from __future__ import annotations

import numpy as np

import cuscan
from benchmarks._common import alternated, best_time, environment, without_options, write
from cuscan import _numpy_backend

CROSSOVER_DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
LENGTHS = [32, 48, 64, 96, 128, 192, 256, 1024, 4096, 16384]
WIDTHS = [1, 16, 64, 128, 192, 256, 384, 512, 768, 1024, 2048]
DOUBLING_LENGTHS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DOUBLING_WIDTHS = [1, 2, 4, 8, 16, 32, 64, 256]
SCATTERED_CHANNELS = [2, 8, 12, 16, 24, 32, 64, 128, 192, 256, 384, 512, 768, 1000, 1500,
                      2048, 4096, 8192]
SCATTERED_LENGTHS = [32, 64, 128, 256, 300, 700, 1000, 2048, 3000, 4096, 10000, 32768, 65536,
                     100000, 2**20]
LAYOUT_SHAPES = [(1024, 1), (65536, 1), (2**22, 1), (1024, 4), (65536, 4), (1024, 16),
                 (65536, 16), (2**20, 16), (1024, 32), (65536, 32), (1024, 64), (65536, 64),
                 (8192, 256), (65536, 256), (4096, 1024)]


def crossovers(rng) -> list[dict]:
    """Serial and parallel times over (T, width), alternated in rounds, for each dtype."""
    rows = []
    for dtype in CROSSOVER_DTYPES:
        print(f"\n{np.dtype(dtype).name}: serial / parallel time; > 1 means parallel is faster;"
              " * marks auto's choice of parallel")
        print(f"{'T':>7} " + " ".join(f"{w:>6}" for w in WIDTHS))
        for length in LENGTHS:
            cells = []
            for width in WIDTHS:
                if length * width > 2**22:
                    cells.append(f"{'':>6}")
                    continue
                x = rng.standard_normal((length, width)).astype(dtype)
                a = rng.uniform(0, 1, (length, width)).astype(dtype)
                if np.iscomplexobj(x):
                    x += 1j * rng.standard_normal((length, width))
                    a *= np.exp(1j * rng.uniform(0, 2 * np.pi, (length, width)))
                calls = max(3, min(50, 200_000 // (length * width)))
                times = {"serial": np.inf, "parallel": np.inf}
                for _ in range(3):  # alternated, so that a drifting machine slows both alike
                    for method in times:
                        times[method] = min(times[method], best_time(
                            lambda m=method, a=a, x=x: cuscan.linear_recurrence(a, x, method=m),
                            calls))
                chosen = (_numpy_backend._doubles(length, _numpy_backend._row(x))
                          or _numpy_backend._parallel_wins(length, _numpy_backend._row(x)))
                rows.append({"length": length, "width": width, "dtype": np.dtype(dtype).name,
                             "chosen": "parallel" if chosen else "serial",
                             **{f"{m}_s": t for m, t in times.items()}})
                cells.append(f"{times['serial'] / times['parallel']:5.2f}{'*' if chosen else ' '}")
            print(f"{length:>7} " + " ".join(cells), flush=True)

    def loss(row):  # auto's time over the better method's
        return row[f"{row['chosen']}_s"] / min(row["serial_s"], row["parallel_s"])

    worst = max(rows, key=loss)
    print(f"auto's worst choice: {loss(worst):.2f}x the better method's time at"
          f" T = {worst['length']}, width {worst['width']}, {worst['dtype']}")
    return rows


def doubling(rng) -> list[dict]:
    """Hillis and Steele's scan over the method "auto" chose without it, alternated in
    rounds, over short (T, width) scans of each dtype."""
    rows = []
    variants = {"doubling": lambda length, row: True, "without": lambda length, row: False}
    for dtype in CROSSOVER_DTYPES:
        print(f"\n{np.dtype(dtype).name}: Hillis and Steele's scan / auto without it;"
              " < 1 means it is faster; * marks the rule's choice of it")
        print(f"{'T':>7} " + " ".join(f"{w:>6}" for w in DOUBLING_WIDTHS))
        for length in DOUBLING_LENGTHS:
            cells = []
            for width in DOUBLING_WIDTHS:
                if length * width > 2**20:
                    cells.append(f"{'':>6}")
                    continue
                x = rng.standard_normal((length, width)).astype(dtype)
                a = rng.uniform(0, 1, (length, width)).astype(dtype)
                times = alternated(lambda a=a, x=x: cuscan.linear_recurrence(a, x),
                                   _numpy_backend, "_doubles", variants,
                                   max(3, min(200, 200_000 // (length * width))))
                chosen = _numpy_backend._doubles(length, _numpy_backend._row(x))
                rows.append({"length": length, "width": width, "dtype": np.dtype(dtype).name,
                             "chosen": chosen, "doubling_s": times["doubling"],
                             "without_s": times["without"]})
                cells.append(f"{times['doubling'] / times['without']:5.2f}"
                             f"{'*' if chosen else ' '}")
            print(f"{length:>7} " + " ".join(cells), flush=True)
    chosen = [r["doubling_s"] / r["without_s"] for r in rows if r["chosen"]]
    print(f"where chosen, Hillis and Steele's scan took {min(chosen):.2f} to {max(chosen):.2f}"
          " of the time of auto without it")
    return rows


def layouts(rng) -> list[dict]:
    """Parallel-method time with contiguous copies over time with strided views."""
    rows = []
    print("\ncontiguous copies / strided views, parallel method; < 1 means copies are faster;"
          " * marks the rule's choice of copies")
    print(f"{'T':>8} {'width':>6} {'float64':>8} {'complex128':>10}")
    saved = _numpy_backend._MAX_STRIDED_ROW
    try:
        for length, width in LAYOUT_SHAPES:
            cells = []
            for dtype in (np.float64, np.complex128):
                x = rng.standard_normal((length, width)).astype(dtype)
                a = rng.uniform(0, 1, (length, width)).astype(dtype)
                times = {}
                for layout, limit in (("copies", np.inf), ("views", -1)):
                    _numpy_backend._MAX_STRIDED_ROW = limit
                    times[layout] = best_time(
                        lambda a=a, x=x: cuscan.linear_recurrence(a, x, method="parallel"), 5)
                ratio = times["copies"] / times["views"]
                chosen = width * np.dtype(dtype).itemsize <= saved
                rows.append({"length": length, "width": width, "dtype": np.dtype(dtype).name,
                             "copies_s": times["copies"], "views_s": times["views"]})
                cells.append(f"{ratio:.2f}{'*' if chosen else ' '}")
            print(f"{length:>8} {width:>6} {cells[0]:>8} {cells[1]:>10}")
    finally:
        _numpy_backend._MAX_STRIDED_ROW = saved
    return rows


def scattered(rng) -> list[dict]:
    """Time-major copies over the operands as they are, for (C, T) along axis -1."""
    rows = []
    print("\ntime-major copies / as they are, (C, T) along axis -1, auto method; < 1 means"
          " copies are faster; * marks the rule's choice of copies")
    dtypes = (np.float32, np.float64, np.complex64, np.complex128)
    print(f"{'C':>5} {'T':>8} " + " ".join(f"{np.dtype(d).name:>10}" for d in dtypes))
    layouts = {"copies": lambda view, dtype: True, "views": lambda view, dtype: False}
    for channels in SCATTERED_CHANNELS:
        for length in SCATTERED_LENGTHS:
            if not 2**15 <= channels * length <= 2**22:
                continue
            cells = []
            for dtype in dtypes:
                x = rng.standard_normal((channels, length)).astype(dtype)
                a = rng.uniform(0, 1, (channels, length)).astype(dtype)
                chosen = _numpy_backend._scattered(np.moveaxis(x, -1, 0), dtype)
                times = alternated(lambda a=a, x=x: cuscan.linear_recurrence(a, x, axis=-1),
                                   _numpy_backend, "_scattered", layouts, 3, 2)
                rows.append({"channels": channels, "length": length,
                             "dtype": np.dtype(dtype).name, "chosen": bool(chosen),
                             "copies_s": times["copies"], "views_s": times["views"]})
                cells.append(f"{times['copies'] / times['views']:.2f}"
                             f"{'*' if chosen else ' '}")
            print(f"{channels:>5} {length:>8} " + " ".join(f"{c:>10}" for c in cells),
                  flush=True)
    return rows


def main() -> None:
    rng = np.random.default_rng(0)
    rows = crossovers(rng)
    doubling_rows = doubling(rng)
    layout_rows = layouts(rng)
    scattered_rows = scattered(rng)
    path = write("numpy_methods", {"environment": environment(), "crossovers": rows,
                                   "doubling": doubling_rows, "layouts": layout_rows,
                                   "scattered": scattered_rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
