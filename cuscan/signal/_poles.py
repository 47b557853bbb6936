"""The poles of a filter's denominator, to working precision, as the stages of first-order
recurrences a cascade applies, in the order it applies them."""

from __future__ import annotations

import cmath
import functools
from fractions import Fraction

import numpy as np


def _pole_stages(a: np.ndarray) -> tuple[tuple[complex, ...], ...]:
    """The poles of ``1 / a(z)`` grouped into real poles and conjugate pairs, in the
    order to apply them.

    ``1 / a(z) = prod 1 / (1 - p z^-1)``: each stage is a first-order
    recurrence with decay p. A conjugate pair together gives a real result.
    """
    return _stages(a.tobytes(), a.dtype.str)


@functools.lru_cache(maxsize=256)
def _stages(coefficients: bytes, dtype: str) -> tuple[tuple[complex, ...], ...]:
    a = np.frombuffer(coefficients, dtype)
    poles = _roots(a)
    if a.dtype.kind == "c":
        stages = [(complex(p),) for p in poles]
    else:
        scale = max(1.0, float(np.max(np.abs(poles)))) if poles.size else 1.0
        real = [(complex(p.real),) for p in poles if abs(p.imag) <= 1e-14 * scale]
        upper = [(complex(p), complex(p).conjugate()) for p in poles if p.imag > 1e-14 * scale]
        stages = real + upper
    return tuple(_spread(stages))


def _spread(stages: list) -> list:
    """The stages in an order whose every prefix spreads over the angles of the poles.

    Each stage applied raises the signal near its pole's angle by up to
    ``1 / (1 - |p|)``, and a run of neighbouring angles compounds that, and
    the rounding of the intermediate signal with it: the 100 poles of a
    feedback comb filter (gain 0.999) in angular order take unit white noise
    to a peak of 2e14 on the way to an output peaking at 9. Taken in
    bit-reversed order of angle, the poles applied at any point are spread
    like those of a comb of lower order, and the peak on the way is 6e2.
    """
    ordered = sorted(stages, key=lambda stage: (cmath.phase(stage[0]) % (2 * cmath.pi),
                                                abs(stage[0])))
    bits = max(len(ordered) - 1, 1).bit_length()
    return [ordered[i] for i in sorted(range(len(ordered)),
                                       key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))]


# Orders up to this are polished by `_roots` (an order of 128 takes about 0.1 s, once).
_MAX_POLISHED = 128


def _roots(a: np.ndarray, iterations: int = 50) -> np.ndarray:
    """The roots of the polynomial ``a`` (highest power first), to working precision.

    ``np.roots`` (the companion matrix's eigenvalues) gives the roots of a
    nearby polynomial: for the clustered poles of a high-order or low-cutoff
    filter, relative errors up to 1e-2, which can move a pole across the
    unit circle. Aberth-Ehrlich iterations from there, with ``a(z)`` and
    ``a'(z)`` evaluated exactly in integer arithmetic (every coefficient and
    estimate is a binary fraction), converge to the roots of ``a`` itself.

    Estimates that do not converge belong to a cluster of nearly repeated
    roots, which Aberth steps resolve slowly or, for real estimates of a pair
    just off the real axis, not at all (real arithmetic stays real). Those
    are the roots of the quotient of ``a`` by the converged roots' factors,
    divided out exactly (`_deflated`): a polynomial of the cluster's small
    degree whose coefficients, what a cascade of the roots' stages depends
    on, are accurate. ``np.roots``' own are returned above order
    `_MAX_POLISHED` (where exact evaluation grows slow) and where the
    estimates for a real ``a`` lose their conjugate symmetry.
    """
    start = np.roots(a).astype(complex) if a.size > 1 else np.zeros(0, complex)
    if start.size > _MAX_POLISHED:
        return start
    coefficients = _exact(a)
    z = [complex(p) for p in start]
    active, stuck = set(range(len(z))), set()
    for _ in range(iterations):
        for k in sorted(active):
            try:
                value, slope = _horner(coefficients, z[k])
                if value == 0:
                    active.discard(k)  # an exact root
                    continue
                ratio = value / slope
                repulsion = sum(1 / (z[k] - z[j]) for j in range(len(z)) if j != k)
                step = ratio / (1 - ratio * repulsion)
            except (ZeroDivisionError, OverflowError):
                step = complex("nan")  # a' = 0 at z[k], or estimates that coincide
            if not cmath.isfinite(step):
                active.discard(k)
                stuck.add(k)
                continue
            z[k] -= step
            if abs(step) <= 2 * np.finfo(float).eps * abs(z[k]):
                active.discard(k)
        if not active:
            break
    stuck |= active
    if stuck:
        cluster = _deflated(a, [z[k] for k in range(len(z)) if k not in stuck])
        for k, root in zip(sorted(stuck), np.roots(cluster), strict=True):
            z[k] = complex(root)
    roots = np.array(z, dtype=complex)
    if a.dtype.kind != "c":
        tolerance = 1e-14 * max(1.0, float(np.max(np.abs(roots), initial=0.0)))
        if np.sum(roots.imag > tolerance) != np.sum(roots.imag < -tolerance):
            return start
    return roots


def _deflated(a: np.ndarray, roots: list) -> np.ndarray:
    """The quotient of the polynomial ``a`` by ``prod (z - root)``, computed exactly and
    rounded once (real for a real ``a``); the remainder, small where ``roots`` are roots
    of ``a``, is dropped.

    Synthetic division from the highest power, by the roots in order of increasing
    magnitude (forward deflation, stable for roots inside the unit circle).
    """
    quotient = [(Fraction(float(c.real)), Fraction(float(c.imag))) for c in a.astype(complex)]
    for root in sorted(roots, key=abs):
        r_re, r_im = Fraction(root.real), Fraction(root.imag)
        q_re, q_im = quotient[0]
        divided = [(q_re, q_im)]
        for c_re, c_im in quotient[1:-1]:
            q_re, q_im = c_re + r_re * q_re - r_im * q_im, c_im + r_re * q_im + r_im * q_re
            divided.append((q_re, q_im))
        quotient = divided
    result = np.array([complex(float(re), float(im)) for re, im in quotient])
    return result if a.dtype.kind == "c" else result.real


def _horner(coefficients: tuple, z: complex) -> tuple[complex, complex]:
    """``a(z)`` and ``a'(z)``, computed exactly and rounded once.

    ``coefficients`` is ``_exact(a)``. With ``z = (X + iY) / 2^s`` and the
    coefficients ``C_j / 2^c``, Horner's steps run on Gaussian integers: after
    step j the value is ``N_j / 2^(c + j s)`` and the slope ``M_j / 2^(c + (j - 1) s)``.
    """
    numerators, shift_c = coefficients
    (x_num, x_den), (y_num, y_den) = z.real.as_integer_ratio(), z.imag.as_integer_ratio()
    shift = max(x_den, y_den).bit_length() - 1
    x, y = x_num << (shift - x_den.bit_length() + 1), y_num << (shift - y_den.bit_length() + 1)
    value_re, value_im = numerators[0]
    slope_re = slope_im = 0
    for j, (c_re, c_im) in enumerate(numerators[1:], start=1):
        slope_re, slope_im = (slope_re * x - slope_im * y + value_re,
                              slope_re * y + slope_im * x + value_im)
        value_re, value_im = (value_re * x - value_im * y + (c_re << (j * shift)),
                              value_re * y + value_im * x + (c_im << (j * shift)))
    n = len(numerators) - 1
    value_den, slope_den = 1 << (shift_c + n * shift), 1 << (shift_c + (n - 1) * shift)
    return (complex(value_re / value_den, value_im / value_den),
            complex(slope_re / slope_den, slope_im / slope_den))


def _exact(a: np.ndarray) -> tuple:
    """The coefficients as Gaussian integers over one power of two, for `_horner`."""
    ratios = [(float(c.real).as_integer_ratio(), float(c.imag).as_integer_ratio())
              for c in a.astype(complex)]
    shift = max(den.bit_length() - 1 for pair in ratios for _, den in pair)
    return tuple(tuple(num << (shift - den.bit_length() + 1) for num, den in pair)
                 for pair in ratios), shift
