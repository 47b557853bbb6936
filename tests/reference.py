"""The one reference: a float64 (complex128) serial loop, its gradient and its error scale;
and for filters whose float64 results (SciPy's among them) are themselves inexact, their
direct form in extended precision; and a denominator's roots to many digits."""

from __future__ import annotations

import numpy as np


def _wide(value, dtype=None) -> np.ndarray:
    array = np.asarray(value)
    if dtype is not None:
        return array.astype(dtype)
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


@np.errstate(all="ignore")
def linear_recurrence(decays, impulses, initial_state=None, *, axis=0, reverse=False,
                      dtype=None):
    """``h[t] = decays[t] * h[t-1] + impulses[t]``, one step at a time, in float64.

    The state starts at ``initial_state`` (zero when None) and is multiplied,
    never skipped, so NaN and infinity propagate as IEEE arithmetic dictates.
    With ``dtype``, the operands are cast to it and every step is rounded in it.
    """
    decays, impulses = _wide(decays, dtype), _wide(impulses, dtype)
    shape = np.broadcast_shapes(decays.shape, impulses.shape)
    decays = np.moveaxis(np.broadcast_to(decays, shape), axis, 0)
    impulses = np.moveaxis(np.broadcast_to(impulses, shape), axis, 0)
    h = np.zeros(impulses.shape[1:], np.result_type(decays, impulses))
    if initial_state is not None:
        h = h + _wide(initial_state, dtype)
    out = np.empty(impulses.shape, h.dtype)
    steps = range(out.shape[0])
    for t in reversed(steps) if reverse else steps:
        h = decays[t] * h + impulses[t]
        out[t] = h
    return np.moveaxis(out, 0, axis)


def linear_recurrence_vjp(grad_output, decays, output, initial_state=None, *, axis=0,
                          reverse=False):
    """The gradients of `linear_recurrence` from its adjoint, in float64 (complex128): with
    ``g`` run the other way, ``g[t] = grad_output[t] + conj(decays[t+1]) * g[t+1]``, returns
    the terms ``conj(h[t-1]) * g[t]`` of the decays' gradient and ``g``, both of the output's
    shape, and ``conj(decays[0]) * g[0]``, the initial state's gradient (None when the state
    is), of the state's full shape; the first and last are not summed back to their
    operands' shapes. (For ``reverse=True``, ``t+1`` and ``t-1`` trade places.)"""
    decays = np.moveaxis(np.broadcast_to(_wide(decays), np.shape(output)), axis, 0)
    h = np.moveaxis(_wide(output), axis, 0)
    grad_output = np.moveaxis(_wide(grad_output), axis, 0)
    state = np.zeros(h.shape[1:], h.dtype) if initial_state is None else _wide(initial_state)
    state = np.broadcast_to(state, h.shape[1:])[None]
    if reverse:  # time runs backwards: the same equations over the reversed steps
        decays, h, grad_output = decays[::-1], h[::-1], grad_output[::-1]
    follow = np.concatenate([decays[1:], np.zeros_like(decays[:1])])
    before = np.concatenate([state, h[:-1]])
    g = linear_recurrence(np.conj(follow), grad_output, reverse=True)
    grad_state = None if initial_state is None else np.conj(decays[0]) * g[0]
    if reverse:
        g, before = g[::-1], before[::-1]
    return (np.moveaxis(np.conj(before) * g, 0, axis), np.moveaxis(g, 0, axis), grad_state)


def relative_error(actual, expected) -> float:
    """The largest error of ``actual`` relative to the RMS of ``expected``."""
    actual = np.asarray(actual)
    return float(np.abs(actual - expected).max() / np.sqrt(np.mean(np.abs(expected) ** 2)))


def error_scale(decays, impulses, initial_state=None, *, axis=0, reverse=False):
    """The recurrence over magnitudes: what rounding errors are relative to."""
    def magnitude(v):
        return None if v is None else np.abs(_wide(v))

    return linear_recurrence(magnitude(decays), magnitude(impulses), magnitude(initial_state),
                             axis=axis, reverse=reverse)


# np.longdouble is the 80-bit x87 format on x86-64 Linux, quadruple precision on
# aarch64 Linux, and plain double elsewhere (Windows, macOS on Apple silicon).
EXTENDED = np.finfo(np.longdouble).eps < 1e-18


def direct_form_extended(b, a, x) -> np.ndarray:
    """``scipy.signal.lfilter(b, a, x)`` along the last axis (its transposed direct form II,
    one step at a time) in ``np.longdouble``, rounded to float64 at the end."""
    b, a = np.asarray(b, np.longdouble), np.asarray(a, np.longdouble)
    order = max(a.size, b.size) - 1
    b, a = (np.concatenate([c / a[0], np.zeros(order + 1 - c.size, np.longdouble)])
            for c in (b, a))
    x = np.asarray(x, np.longdouble)
    state = np.zeros((order + 1, *x.shape[:-1]), np.longdouble)
    y = np.empty_like(x)
    for t in range(x.shape[-1]):
        y[..., t] = b[0] * x[..., t] + state[0]
        state[:-1] = (np.multiply.outer(b[1:], x[..., t]) + state[1:]
                      - np.multiply.outer(a[1:], y[..., t]))
    return y.astype(np.float64)


def roots_exact(a, digits: int = 80) -> list[complex]:
    """The roots of the polynomial ``a`` (highest power first), real or complex, computed with
    ``digits`` decimal digits (mpmath) and rounded once."""
    import mpmath

    context = mpmath.mp.clone()
    context.dps = digits
    coefficients = [context.mpc(complex(c)) for c in a]
    try:
        found = context.polyroots(coefficients[::-1], maxsteps=500, extraprec=400, asc=True)
    except TypeError:  # mpmath before 1.4 takes the highest power first, and only so
        found = context.polyroots(coefficients, maxsteps=500, extraprec=400)
    return [complex(z) for z in found]


def gustafsson_exact(b, a, x, digits: int = 40) -> np.ndarray:
    """``scipy.signal.filtfilt(b, a, x, method="gust")`` for a 1-D ``x``, the states fitted to
    the whole signal, computed exactly enough (``digits`` decimal digits, with mpmath) that
    its rounding to double is the result the coefficients and ``x`` define: the fit's
    least-squares problem can be too ill-conditioned for extended precision on short
    signals. Slow: for a few hundred samples."""
    import mpmath

    context = mpmath.mp.clone()
    context.dps = digits
    complex_ = np.iscomplexobj(b) or np.iscomplexobj(a) or np.iscomplexobj(x)
    number = context.mpc if complex_ else context.mpf

    def exact(values):
        return [number(complex(v) if complex_ else float(v)) for v in np.ravel(values)]

    b, a, x = exact(b), exact(a), exact(x)
    order, n = max(len(a), len(b)) - 1, len(x)
    if order == 0:
        return np.array([complex(v) if complex_ else float(v)
                         for v in (u * (b[0] / a[0]) ** 2 for u in x)])
    b = [v / a[0] for v in b] + [number(0)] * (order + 1 - len(b))
    a = [v / a[0] for v in a] + [number(0)] * (order + 1 - len(a))

    def filtered(values, state=None):
        """The transposed direct form II from ``state``, as `scipy.signal.lfilter`."""
        state = list(state) if state is not None else [number(0)] * order
        out = []
        for value in values:
            y = b[0] * value + state[0]
            state = [b[k + 1] * value + (state[k + 1] if k + 1 < order else 0) - a[k + 1] * y
                     for k in range(order)]
            out.append(y)
        return out

    states = [filtered([number(0)] * n, [number(int(j == k)) for j in range(order)])
              for k in range(order)]  # each unit state's output, a column
    again = [filtered(column[::-1]) for column in states]
    # forward-backward adds [R S, R O] s to its zero-state output, backward-forward [O, S] s
    effect = context.matrix(n, 2 * order)
    fit = context.matrix(n, 2 * order)
    for i in range(n):
        for k in range(order):
            effect[i, k], effect[i, order + k] = again[k][n - 1 - i], states[k][n - 1 - i]
            fit[i, k] = effect[i, k] - states[k][i]
            fit[i, order + k] = effect[i, order + k] - again[k][i]
    fb = filtered(filtered(x)[::-1])[::-1]
    bf = filtered(filtered(x[::-1])[::-1])
    # the least-squares states of least norm, as SciPy's lstsq: through the eigenvalues of
    # the normal matrix, those at the precision's rounding taken as zero (a state that
    # reaches no sample, or more states than samples)
    gram = fit.H * fit
    values, vectors = context.eighe(gram)
    largest = max(abs(v) for v in values)
    inverse = context.matrix(2 * order, 2 * order)
    for k, value in enumerate(values):
        if abs(value) > largest * context.mpf(10) ** (8 - digits):
            column = vectors[:, k]
            inverse += column * column.H / value
    s = inverse * (fit.H * context.matrix([p - q for p, q in zip(bf, fb, strict=True)]))
    y = effect * s
    return np.array([complex(fb[i] + y[i]) if complex_ else float(fb[i] + y[i])
                     for i in range(n)])
