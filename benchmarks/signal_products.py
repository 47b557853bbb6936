"""Products of a few rows of samples with a filter's matrix: the forms BLAS runs fastest.

`cuscan.signal` filters a short NumPy signal as one product of its rows of samples with the
filter's matrix for that length (`_chunks._product`; `filtfilt` and `sosfiltfilt` up to 512
samples with the whole scheme's matrix, `_filtfilt._zero_phase`). A matrix product of a few
rows with a large matrix can take BLAS much longer than the same work in another form. This
times, first, ``v @ M`` for rows ``v`` and a square matrix ``M`` (C-ordered, and transposed as
the backward pass takes it) in three forms: as written, as ``(M.T @ v.T).T`` copied to C
order, and as a matrix-vector product per row (a stack of one-row matrices); and the form
`_chunks.times` picks. Then `lfilter`, `sosfilt`, `filtfilt` and `sosfiltfilt` (a 4th-order
Butterworth filter as ``(b, a)``, an 8th-order one as sections) on rows of 128 to 512 samples,
with `times` as set and with the plain product (``_FEW_ROWS = 0``), alternated in one process
once the matrices are built, and SciPy's time. Writes results/signal_products.json.

    python -m benchmarks.signal_products
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import alternated, best_time, environment, without_options, write
from cuscan.signal import _chunks

SIDES = [64, 128, 256, 512]
ROWS = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256]
FORMS = {
    "plain": lambda v, m: v @ m,
    "transposed": lambda v, m: np.ascontiguousarray((m.T @ v.T).T),
    "vectors": lambda v, m: np.matmul(v[:, None, :], m)[:, 0],
}
BA = scipy.signal.butter(4, 0.1)
SOS = scipy.signal.butter(8, 0.1, output="sos")
# (name, cuscan's, SciPy's, the longest signal it takes as one product)
CALLS = [
    ("lfilter", lambda x: cuscan.signal.lfilter(*BA, x), lambda x: scipy.signal.lfilter(*BA, x),
     256),
    ("sosfilt", lambda x: cuscan.signal.sosfilt(SOS, x), lambda x: scipy.signal.sosfilt(SOS, x),
     256),
    ("filtfilt", lambda x: cuscan.signal.filtfilt(*BA, x),
     lambda x: scipy.signal.filtfilt(*BA, x), 512),
    ("sosfiltfilt", lambda x: cuscan.signal.sosfiltfilt(SOS, x),
     lambda x: scipy.signal.sosfiltfilt(SOS, x), 512),
]
LENGTHS = [128, 256, 512]
CHANNELS = [1, 2, 3, 4, 8, 16, 64, 256]


def repeats(work: int) -> int:
    """Calls per timing for ``work`` multiply-adds: about 10 ms of them."""
    return max(10, min(2000, 10**7 // max(work, 1)))


def products() -> list[dict]:
    """Each form's best time over each side and row count, both orders of the matrix."""
    rng = np.random.default_rng(0)
    rows = []
    for side in SIDES:
        stored = rng.standard_normal((side, side))
        for order, matrix in (("C", stored), ("F", stored.T)):
            for count in ROWS:
                v = rng.standard_normal((count, side))
                calls = repeats(count * side * side)
                times = {name: min(best_time(functools.partial(form, v, matrix), calls)
                                   for _ in range(3)) for name, form in FORMS.items()}
                picked = min(best_time(functools.partial(_chunks.times, v, matrix), calls)
                             for _ in range(3))
                rows.append({"side": side, "order": order, "rows": count,
                             **{f"{name}_s": t for name, t in times.items()},
                             "times_s": picked})
                best = min(times.values())
                print(f"{side:>5} {order:>5} {count:>5} "
                      + " ".join(f"{t / best:10.2f}" for t in times.values())
                      + f" {picked / best:10.2f} {best * 1e6:9.1f}", flush=True)
    return rows


def filters() -> list[dict]:
    """The filters on short signals with `times` as set and with the plain product."""
    rng = np.random.default_rng(1)
    rows = []
    for name, ours, theirs, longest in CALLS:
        for length in (n for n in LENGTHS if n <= longest):
            for channels in CHANNELS:
                x = rng.standard_normal((channels, length))
                for _ in range(3):  # the matrices are built on the third call
                    ours(x)
                count = repeats(channels * length * length)
                best = alternated(lambda x=x, f=ours: f(x), _chunks, "_FEW_ROWS",
                                  {"forms": _chunks._FEW_ROWS, "plain": 0}, count)
                scipy_s = min(best_time(lambda x=x, f=theirs: f(x), count) for _ in range(3))
                rows.append({"function": name, "length": length, "channels": channels,
                             "forms_s": best["forms"], "plain_s": best["plain"],
                             "scipy_s": scipy_s})
                print(f"{name:>12} {length:>6} {channels:>8} {best['plain'] * 1e6:9.1f} "
                      f"{best['forms'] / best['plain']:8.2f} {best['forms'] / scipy_s:8.2f}",
                      flush=True)
    return rows


def main() -> None:
    print("v @ M: each form's time over the best form's; `times`' pick; the best (us)")
    print(f"{'side':>5} {'order':>5} {'rows':>5} " + " ".join(f"{n:>10}" for n in FORMS)
          + f" {'times':>10} {'best us':>9}")
    forms = products()
    print(f"\n{'function':>12} {'length':>6} {'channels':>8} {'plain us':>9} {'forms':>8} "
          f"{'/ SciPy':>8}   (forms: time with `times` over the plain product's)")
    calls = filters()
    ratios = [r["forms_s"] / r["plain_s"] for r in calls]
    print(f"the filters with `times`: {min(ratios):.2f} to {max(ratios):.2f} of the time with "
          "the plain product")
    path = write("signal_products", {"environment": environment(),
                                     "few_rows": _chunks._FEW_ROWS,
                                     "vector_rows": _chunks._VECTOR_ROWS,
                                     "few_rows_side": _chunks._FEW_ROWS_SIDE,
                                     "products": forms, "filters": calls})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
