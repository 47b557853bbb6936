"""How accurate are cuscan.signal's filters, and SciPy's, on random designs?

Both are compared with the filter the coefficients define, computed by the
transposed direct form in extended precision (``np.longdouble``; the script
refuses to run where that is plain double). Random Butterworth, Chebyshev I
and II, elliptic and Bessel designs, low-pass, high-pass, band-pass and
band-stop, cutoffs from 2e-4 of Nyquist up, each on its own random signal:
``lfilter`` on designs of orders 1 to 6 in ``(b, a)`` form, ``sosfilt`` on
orders 1 to 12 in second-order sections (each section checked in extended
precision, one after the other). ``filtfilt(..., method="gust")`` on the
same ``(b, a)`` designs, those with every pole inside the unit circle, on
short signals (16 to 256 samples, within the filter's response, where the fit
of Gustafsson's states is the least conditioned) is compared with SciPy's fit
to the whole signal computed with 40 digits (mpmath); where either library is
beyond 1e-8, so is the exact result of coefficients rounded once more (each
moved by half an ulp, up or down), to tell the method's error from the data's.
Prints counts within the documented 1e-8 and writes results/signal_accuracy.json.

    python -m benchmarks.signal_accuracy
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import signal as ss

from benchmarks._common import environment, positive, write
from cuscan import signal
from tests.reference import EXTENDED, direct_form_extended, gustafsson_exact

BOUND = 1e-8


def design(rng: np.random.Generator, max_order: int, output: str):
    """A random design: its description and coefficients."""
    family = str(rng.choice(["butter", "cheby1", "cheby2", "ellip", "bessel"]))
    kind = str(rng.choice(["lowpass", "highpass", "bandpass", "bandstop"]))
    order = int(rng.integers(1, max_order + 1))
    if kind in ("lowpass", "highpass"):
        cutoff = float(10 ** rng.uniform(-3.7, -0.005))
    else:
        low = float(10 ** rng.uniform(-3.7, -0.3))
        cutoff = (low, float(min(0.995, low * 10 ** rng.uniform(0.05, 2))))
    ripple = {"cheby1": (float(rng.uniform(0.1, 3)),), "cheby2": (float(rng.uniform(20, 80)),),
              "ellip": (float(rng.uniform(0.1, 3)), float(rng.uniform(20, 80)))}.get(family, ())
    coefficients = getattr(ss, family)(order, *ripple, cutoff, kind, output=output)
    return {"family": family, "kind": kind, "order": order, "ripple": list(ripple),
            "cutoff": cutoff}, coefficients


def relative(result, exact) -> float:
    """Max error over the larger of the input's RMS (1) and the output's."""
    return float(np.max(np.abs(result - exact)) / max(1.0, np.sqrt(np.mean(exact ** 2))))


def sections_extended(sos, x) -> np.ndarray:
    for row in sos:
        x = direct_form_extended(row[:3], row[3:], x)
    return x


def study(name: str, count: int, length: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        if name == "filtfilt gust":
            description, (b, a) = design(rng, 6, "ba")
            while np.max(np.abs(np.roots(a))) >= 1:  # rounded to an unstable filter
                description, (b, a) = design(rng, 6, "ba")
            x = rng.standard_normal(int(rng.integers(16, 257)))
            exact = gustafsson_exact(b, a, x)
            errors = {"cuscan": relative(signal.filtfilt(b, a, x, method="gust"), exact),
                      "scipy": relative(ss.filtfilt(b, a, x, method="gust"), exact)}
            description["signal_length"] = x.size
            if max(errors.values()) > BOUND:
                signs = np.random.default_rng(len(rows)).choice([-1.0, 1.0],
                                                                 (2, max(b.size, a.size)))
                half_ulp = np.finfo(np.float64).eps / 2
                description["coefficients_rounded_error"] = relative(gustafsson_exact(
                    b * (1 + half_ulp * signs[0, :b.size]), a * (1 + half_ulp * signs[1, :a.size]),
                    x), exact)
        elif name == "lfilter":
            description, (b, a) = design(rng, 6, "ba")
            x = rng.standard_normal(length)
            exact = direct_form_extended(b, a, x)
            errors = {"cuscan": relative(signal.lfilter(b, a, x), exact),
                      "scipy": relative(ss.lfilter(b, a, x), exact)}
        else:
            description, sos = design(rng, 12, "sos")
            x = rng.standard_normal(length)
            exact = sections_extended(sos, x)
            errors = {"cuscan": relative(signal.sosfilt(sos, x), exact),
                      "scipy": relative(ss.sosfilt(sos, x), exact)}
        rows.append({**description, **{f"{k}_error": v for k, v in errors.items()}})
    summary = {}
    for who in ("cuscan", "scipy"):
        errors = np.array([row[f"{who}_error"] for row in rows])
        summary[who] = {"within_bound": int(np.sum(errors <= BOUND)),
                        "median": float(np.median(errors))}
    both = [row for row in rows if row["scipy_error"] <= BOUND]
    summary["cuscan_within_bound_where_scipy_is"] = sum(
        row["cuscan_error"] <= BOUND for row in both)
    summary["scipy_within_bound"] = len(both)
    beyond = [row for row in rows if row["cuscan_error"] > BOUND]
    if name == "filtfilt gust":  # how many of cuscan's errors beyond the bound are 100
        summary["cuscan_beyond_bound"] = len(beyond)  # times what the rounding moves
        summary["of_which_100x_the_coefficients_rounded"] = sum(
            row["cuscan_error"] > 100 * row["coefficients_rounded_error"] for row in beyond)
    return {"designs": count, "signal_length": "16 to 256" if name == "filtfilt gust" else length,
            "seed": seed, "summary": summary, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=positive(int), default=300)
    parser.add_argument("--length", type=positive(int), default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not EXTENDED:
        raise SystemExit("needs np.longdouble wider than double (x86-64 or aarch64 Linux)")
    results = {}
    print(f"{'function':<13} {'designs':>7} {'cuscan <= 1e-8':>15} {'scipy <= 1e-8':>14} "
          f"{'cuscan, where scipy is':>23} {'median cuscan':>14} {'median scipy':>13}")
    with np.errstate(all="ignore"):  # unstable designs overflow in every method
        for name in ("lfilter", "sosfilt", "filtfilt gust"):
            result = study(name, args.designs, args.length, args.seed)
            results[name] = result
            s = result["summary"]
            print(f"{name:<13} {args.designs:>7} {s['cuscan']['within_bound']:>15} "
                  f"{s['scipy']['within_bound']:>14} "
                  f"{s['cuscan_within_bound_where_scipy_is']:>16} of {s['scipy_within_bound']:<4} "
                  f"{s['cuscan']['median']:>14.1e} {s['scipy']['median']:>13.1e}")
            if "cuscan_beyond_bound" in s:
                print(f"  cuscan beyond 1e-8: {s['cuscan_beyond_bound']}, of which "
                      f"{s['of_which_100x_the_coefficients_rounded']} are over 100 times the "
                      "change from rounding the coefficients")
    path = write("signal_accuracy", {"environment": environment(), "bound": BOUND, **results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
