"""The exponential moving average, as linear recurrences (pandas' ``ewm(...).mean()``)."""

from __future__ import annotations

import math
import numbers
from typing import Literal

import numpy as np

from cuscan._api import linear_recurrence, public
from cuscan.signal._filters import (
    ArrayLike,
    _along,
    _dtypes,
    _length,
    _signal,
    _single,
    _sizes_when_run,
)


@public
@_sizes_when_run("x", "alpha")
def ema(x: ArrayLike, alpha: ArrayLike, axis: int = -1, adjust: bool = False,
        nan_policy: Literal["propagate", "omit"] = "propagate", ignore_na: bool = False,
        min_periods: int | None = 0):
    """Exponential moving average, as ``pandas.Series.ewm(alpha=alpha, adjust=...).mean()``.

    With ``adjust=False`` (the recursive form), ``y[0] = x[0]`` and
    ``y[t] = (1 - alpha) y[t-1] + alpha x[t]``. With ``adjust=True``
    (pandas' default), ``y[t]`` is the weighted mean of ``x[0..t]`` with
    weights ``(1 - alpha)^i`` for the sample ``i`` steps back, so the first
    values are not biased towards ``x[0]``. By default NaN propagates;
    ``nan_policy="omit"`` skips missing values as pandas does.

    Parameters
    ----------
    x : array_like
        The signal, any shape: a NumPy or CuPy array, or a torch, JAX or
        TensorFlow tensor (the result is the same framework's, differentiable).
    alpha : float or array_like
        Smoothing factor in (0, 1]: a scalar; one per channel (an array of
        `x`'s shape without `axis`); or one per sample (anything that
        broadcasts to `x`'s shape, e.g. varying over time; the weight of a
        sample then decays by ``1 - alpha[t]`` at each later step ``t``).
        An array mixes with `x` as `linear_recurrence`'s operands do (NumPy
        beside JAX or TensorFlow, not beside torch; on `x`'s device); a list or
        a scalar goes with any. Its values are checked where they are at hand: not while traced by
        ``jax.jit``, ``tf.function``, ``torch.compile`` or ``torch.func``.
    axis : int, default -1
        The time axis.
    adjust : bool, default False
        The weighted mean (True) or the recursive form (False); see above.
    nan_policy : {"propagate", "omit"}, default "propagate"
        What NaN (in either part of a complex sample) does. ``"propagate"``:
        it makes every later value of its channel NaN. ``"omit"``: as in
        pandas, it is a missing sample. The average keeps its last value over
        missing samples (NaN before a channel's first sample), and weights
        stay by position: a sample after a gap of ``k`` missing ones meets an
        average decayed by ``k + 1`` steps, not one. An infinite sample is
        not missing (pandas takes it as missing): the average is infinite
        from there on.
    ignore_na : bool, default False
        With ``nan_policy="omit"``, pandas' ``ignore_na=True``: weights by
        the samples present, as if the missing ones were not there.
    min_periods : int or None, default 0
        As in pandas: NaN until a channel has had this many samples present
        (at least one; None is 0).

    Returns
    -------
    y : ndarray
        The moving average, in `x`'s inexact dtype.

    Examples
    --------
    >>> from cuscan.signal import ema
    >>> ema([1.0, 2.0, 3.0, 4.0], 0.5)
    array([1.   , 1.5  , 2.25 , 3.125])
    >>> ema([1.0, 2.0, 3.0, 4.0], 0.5, adjust=True)
    array([1.        , 1.66666667, 2.42857143, 3.26666667])

    Missing samples:

    >>> ema([np.nan, 1.0, np.nan, 4.0], 0.5, nan_policy="omit")
    array([nan,  1.,  1.,  3.])
    >>> ema([np.nan, 1.0, np.nan, 4.0], 0.5, nan_policy="omit", ignore_na=True)
    array([nan, 1. , 1. , 2.5])
    """
    for name, value in (("adjust", adjust), ("ignore_na", ignore_na)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"`{name}` must be a bool; got {type(value).__name__}")
    if nan_policy not in ("propagate", "omit"):
        raise ValueError(f"`nan_policy` must be 'propagate' or 'omit'; got {nan_policy!r}")
    if ignore_na and nan_policy != "omit":
        raise ValueError("`ignore_na=True` says how to weigh around missing samples, so it "
                         "needs `nan_policy='omit'`; NaN propagates with 'propagate'")
    min_periods = 0 if min_periods is None else _length("min_periods", min_periods, 0)
    scalar = alpha is None or isinstance(alpha, (numbers.Number, np.generic, str, bytes))
    ns, x, axis = _signal(x, axis, **({} if scalar else {"alpha": alpha}))
    if scalar:
        if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real):
            raise TypeError(f"`alpha` must be a real number or an array of them; got "
                            f"{type(alpha).__name__}")
        alpha = float(alpha)  # a Python scalar keeps the signal's precision
        if not 0 < alpha <= 1:
            raise ValueError(f"`alpha` must lie in (0, 1]; got {alpha}")
    else:
        alpha = ns.asarray(ns.dense(alpha, "alpha"), like=x)
        if ns.kind(alpha) not in "iuf":
            raise TypeError(f"`alpha` must be a real number or an array of them; got dtype "
                            f"{alpha.dtype}")
        alpha = ns.cast(alpha, np.float32 if _single(ns, x) else np.float64)
        if alpha.ndim == x.ndim:
            alpha = ns.whole_along(alpha, axis)
        channel_shape = x.shape[:axis] + x.shape[axis + 1:]
        shape = tuple(alpha.shape)
        if len(shape) == x.ndim - 1 and shape == tuple(channel_shape) and shape:
            alpha = ns.expand_dims(alpha, axis)
        if not all(m == n or 1 in (m, n) or None in (m, n)  # None: unknown in TensorFlow
                   for m, n in zip(tuple(alpha.shape)[::-1], tuple(x.shape)[::-1], strict=False)):
            raise ValueError(f"`alpha` must be a scalar, have x's shape without axis "
                             f"{tuple(channel_shape)}, or broadcast to x's shape "
                             f"{tuple(x.shape)}; got {shape}")
        if ns.concrete(alpha):  # values being traced are not checked
            values = ns.host(alpha)
            if not ((values > 0) & (values <= 1)).all():
                raise ValueError(f"every `alpha` must lie in (0, 1]; got values from "
                                 f"{values.min()} to {values.max()}")
    if x.shape[axis] == 0:
        return x * 1
    _, dtype = _dtypes(ns, x)  # x's own
    if nan_policy == "omit" or min_periods > 1:
        present = ~ns.isnan(x)
        ones = ns.cast(present, np.finfo(dtype).dtype)
        if nan_policy == "omit":
            y = _ema_omitting(ns, x, alpha, axis, adjust, ignore_na, dtype, present, ones)
        else:
            y = _ema(ns, x, alpha, axis, adjust, dtype)
        # NaN before the first sample present (for "omit"), or the min_periods-th.
        counts = linear_recurrence(1.0, ones, axis=axis)
        return ns.where(counts >= max(min_periods, 1), y, np.nan)
    return _ema(ns, x, alpha, axis, adjust, dtype)


def _rounded(value: float) -> float:
    """``value``, a positive float, rounded to single precision (to nearest, ties to even) in
    Python's arithmetic, which torch.compile traces where it cannot make NumPy arrays."""
    mantissa, exponent = math.frexp(value)
    return math.ldexp(round(mantissa * 2**24), exponent - 24)


def _ema(ns, x, alpha, axis: int, adjust: bool, dtype: np.dtype):
    if not adjust:
        # The weight is the decay's complement in the signal's precision, so that the
        # weights sum to 1: beside 1 - alpha rounded, alpha itself moved the average of a
        # constant signal (by 1.3% at alpha = 1e-6 in single precision).
        if isinstance(alpha, float):
            decay = _rounded(1 - alpha) if _single(ns, x) else 1 - alpha
            weight = 1 - decay
        else:
            decay = 1 - alpha
            weight = ns.cast(1 - decay, dtype)  # TF mixes no dtypes
        return linear_recurrence(decay, weight * x, x[_along(x, axis, 0)], axis=axis)
    # Sums of the weighted samples and of the weights, both linear recurrences.
    steps = [1] * x.ndim
    steps[axis] = x.shape[axis]
    ones = ns.cast(ns.asarray(np.ones(steps), like=x), dtype)
    return linear_recurrence(1 - alpha, x, axis=axis) / linear_recurrence(1 - alpha, ones,
                                                                          axis=axis)


def _ema_omitting(ns, x, alpha, axis: int, adjust: bool, ignore_na: bool, dtype: np.dtype,
                  present, ones):
    """``ema`` skipping missing (NaN) samples, as pandas' ``ewm(...).mean()`` does.

    pandas keeps the average ``y`` and the weight ``u`` it carries: at each step
    after the first sample ``u`` decays by ``1 - alpha`` (at missing samples too,
    unless ``ignore_na``), and a sample ``x`` present makes
    ``y = (u y + c x) / (u + c)``, then ``u = u + c``, with ``c = 1`` (adjusted)
    or ``c = alpha`` and ``u = 1`` after (recursive). The weights do not depend
    on ``x``: ``u`` is a linear recurrence over which samples are present, and
    then ``y`` one with decays ``1 - e`` and impulses ``e x``, ``e = c / (u + c)``
    where a sample is present and 0 where one is missing. ``y`` is zero before
    the first sample (the caller makes it NaN). ``present`` says where samples
    are present, and ``ones`` is it in the real dtype.
    """
    values = ns.where(present, x, 0.0)  # before any arithmetic: no NaN reaches a gradient
    # Weight decays: every step (once started), or only where a sample is present.
    decay = 1 - alpha * ones if ignore_na else 1 - alpha
    if adjust:
        # u after each step, zero before the first sample: e = 1 / u after it.
        after = linear_recurrence(decay, ones, axis=axis)
        share = ones / ns.where(present, after, 1.0)
    else:
        # u after each step: 1 where a sample is present (and zero before the first),
        # else decayed; u before each step is (1 - alpha) times the u after the last.
        after = linear_recurrence(decay * (1 - ones), ones, axis=axis)
        length = x.shape[axis]
        last = ns.concat([after[_along(x, axis, slice(0, 1))] * 0,
                          after[_along(x, axis, slice(0, length - 1))]], axis)
        share = ones * alpha / ((1 - alpha) * last + alpha)
    keep = 1 - share  # and its complement as the weight, as in `_ema`
    return linear_recurrence(keep, ns.cast(1 - keep, dtype) * values, axis=axis)
