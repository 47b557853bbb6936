"""Serial against parallel on the NumPy backend: where "auto" should switch.

Times both methods on (T, width) float64 arrays over a grid and prints the
parallel/serial time ratio; cuscan._numpy_backend's "auto" rule is drawn from
it. Writes results/numpy_methods.json.

    python benchmarks/numpy_methods.py
"""

from __future__ import annotations

import numpy as np

import cuscan
from benchmarks._common import best_time, environment, write

LENGTHS = [16, 32, 64, 128, 1024, 8192, 65536]
WIDTHS = [1, 16, 64, 256, 512, 1024, 2048, 8192]


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    print("parallel / serial time; < 1 means parallel is faster; * marks auto's choice of parallel")
    print(f"{'T':>7} " + " ".join(f"{w:>7}" for w in WIDTHS))
    for length in LENGTHS:
        cells = []
        for width in WIDTHS:
            if length * width > 2**24:
                cells.append(f"{'':>7}")
                continue
            x = rng.standard_normal((length, width))
            a = rng.uniform(0, 1, (length, width))
            times = {m: best_time(lambda m=m, a=a, x=x: cuscan.linear_recurrence(a, x, method=m), 3)
                     for m in ("serial", "parallel", "auto")}
            ratio = times["parallel"] / times["serial"]
            auto_parallel = abs(times["auto"] - times["parallel"]) < abs(
                times["auto"] - times["serial"])
            rows.append({"length": length, "width": width, **{f"{m}_s": t for m, t in
                                                               times.items()}})
            cells.append(f"{ratio:6.2f}{'*' if auto_parallel else ' '}")
        print(f"{length:>7} " + " ".join(cells))
    path = write("numpy_methods", {"environment": environment(), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
