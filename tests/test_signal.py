"""cuscan.signal against scipy.signal and pandas, on every backend."""

from __future__ import annotations

import collections
import concurrent.futures
import fractions
import itertools
import math
import sys
import threading
import warnings
from functools import partial

import numpy as np
import pytest

from cuscan import signal
from cuscan.signal import _chunks, _filters, _filtfilt, _poles, _stream
from tests.conftest import record_results, require
from tests.reference import (
    EXTENDED,
    direct_form_extended,
    gustafsson_exact,
    relative_error,
    roots_exact,
)

ss = require("scipy.signal")

DESIGNS = {
    "butter": lambda n, wn, kind: ss.butter(n, wn, kind, output="sos"),
    "cheby1": lambda n, wn, kind: ss.cheby1(n, 1, wn, kind, output="sos"),
    "cheby2": lambda n, wn, kind: ss.cheby2(n, 40, wn, kind, output="sos"),
    "ellip": lambda n, wn, kind: ss.ellip(n, 1, 40, wn, kind, output="sos"),
    "bessel": lambda n, wn, kind: ss.bessel(n, wn, kind, output="sos"),
}
BANDS = [
    ("lowpass", 0.1), ("highpass", 0.3), ("bandpass", (0.1, 0.3)), ("bandstop", (0.1, 0.3)),
    ("lowpass", 0.001), ("highpass", 0.001), ("bandpass", (0.001, 0.002)), ("lowpass", 2e-4),
]
# Documented bounds: max |error| / RMS of the signal.
BOUND = {np.float64: 1e-8, np.float32: 5e-3}
DIRECT_LENGTH = _chunks._DIRECT_LENGTH


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize(("kind", "cutoff"), BANDS)
def test_sosfilt_matches_scipy(backend, design, kind, cutoff):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4000))
    for order in range(1, 13):
        sos = DESIGNS[design](order, cutoff, kind)
        expected = ss.sosfilt(sos, x)
        for dtype in (np.float64, np.float32):
            result = backend.to_numpy(signal.sosfilt(sos, backend.asarray(x.astype(dtype))))
            assert result.dtype == dtype
            error = relative_error(result, expected)
            assert error <= BOUND[dtype], (order, dtype, error)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_sosfilt_any_axis_and_complex(backend, axis):
    rng = np.random.default_rng(1)
    sos = ss.ellip(6, 1, 50, (0.05, 0.2), "bandpass", output="sos")
    x = rng.standard_normal((3, 50, 4)) + 1j * rng.standard_normal((3, 50, 4))
    expected = ss.sosfilt(sos, x, axis=axis)
    result = backend.to_numpy(signal.sosfilt(sos, backend.asarray(x), axis=axis))
    assert result.dtype == np.complex128
    assert relative_error(result, expected) <= 1e-10


@pytest.fixture
def chunk_runs(monkeypatch):
    """Whether each call of `_chunks.cascade` ran (True) or declined (False), with the
    output formed a few chunks at a time and chunk-level scans both as products, in
    blocks of a few chunks, and by `linear_recurrence`; never as one product
    (`test_direct_products`), nor as a stream's run (`test_streams`), nor a zero-phase
    filter as one product (`test_zero_phase_products`)."""
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", 0)
    monkeypatch.setattr(_chunks, "_direct_kept", collections.OrderedDict())
    monkeypatch.setattr(_stream, "_STREAMS_KEPT", 0)
    monkeypatch.setattr(_filtfilt, "_ZERO_PHASE_LENGTH", 0)
    monkeypatch.setattr(_chunks, "_BLOCK_ELEMENTS", 200)
    monkeypatch.setattr(_chunks, "_SCAN_BLOCK", 4)
    monkeypatch.setattr(_chunks, "_MATRIX_SCAN_ELEMENTS", 40)
    monkeypatch.setattr(_chunks, "_SOLVE_SIDE", 0)  # `test_chunk_solver`'s
    ran = []
    cascade = _chunks.cascade

    def spy(*args, **kwargs):
        result = cascade(*args, **kwargs)
        ran.append(result is not None)
        return result

    monkeypatch.setattr(_chunks, "cascade", spy)
    return ran


@pytest.mark.parametrize("decay", [0.93, -0.5, 0.95 * np.exp(0.3j), 1e-300j, 0j, 0.0])
def test_chunk_scan(monkeypatch, decay):
    """The chunks' recurrences: as one product (up to 4 chunks, or 8 on up to 16 rows), as
    products in blocks (nested: 4 ** 3 < 97 chunks) and by `linear_recurrence`, against a
    loop, for real and complex decays (whose powers are cached apart where the values
    compare equal, as 0.0 and 0j do); a pair of poles' real and imaginary parts as
    `_solve` scans them, one real product where the chunks are few."""
    from cuscan._scratch import Scratch
    from cuscan.signal import _chunks

    monkeypatch.setattr(_chunks, "_SCAN_BLOCK", 4)
    rng = np.random.default_rng(17)
    for elements in (0, 10**6):
        monkeypatch.setattr(_chunks, "_MATRIX_SCAN_ELEMENTS", elements)
        for rows, chunks in [(0, 5), (3, 0), (1, 1), (2, 4), (3, 5), (16, 8), (17, 8), (2, 9),
                             (2, 17), (1, 97)]:
            v = rng.standard_normal((rows, chunks)) * (1 + 1j if isinstance(decay, complex)
                                                       else 1)
            expected = v.copy()
            for k in range(1, chunks):
                expected[:, k] += decay * expected[:, k - 1]
            with Scratch() as scratch:
                result = _chunks._scan(decay, v.copy(), scratch)
                assert result.dtype == v.dtype
                assert result.shape == v.shape
                np.testing.assert_allclose(result, expected, rtol=1e-13, atol=1e-13)
            if isinstance(decay, complex):
                ends = np.stack([v.real, v.imag], axis=1)
                _chunks._solve(ends, [(0, 2, None, decay)])
                np.testing.assert_allclose(ends[:, 0] + 1j * ends[:, 1], expected, rtol=1e-13,
                                           atol=1e-13)


def test_chunk_solver(monkeypatch):
    """`_solve` as one product with its matrix (`_solver`): the matrix against the stages on
    random end states, for filters of widths 1 to 12 over 1 to as many chunks as twice
    _SOLVE_SIDE allows (none for a filter of order above 2 whose matrix holds entries beyond
    _SOLVE_GAIN); and the filters on 1 to 3 rows through it, where `_in_rows` takes it,
    against the stages, forward with and without zi, backward in time, and along axis 0."""
    rng = np.random.default_rng(18)
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", 0)
    side, few_rows = _chunks._SOLVE_SIDE, _chunks._FEW_SOLVE_ROWS
    filters = {"first order": ([0.3], [1.0, -0.9]), "order 4": ss.butter(4, 0.1),
               "order 6": ss.ellip(6, 1, 60, 0.3),
               "sections": ss.ellip(8, 1, 60, 0.3, output="sos")}

    def steps(name: str, coefficients):
        """The filter's sections, its width and its chunks' length."""
        if name == "sections":
            sections = _filters._OnHost((coefficients.tobytes(),), -1).steps()
        else:
            b, a = _filters._normalized(*coefficients)
            sections = _filters._OnHost(_filters._design(b, a), -1).steps()
        width = sum(s.width for s in sections)
        return sections, width, _chunks._SHORT_CHUNK if width <= _chunks._SHORT_WIDTH \
            else _chunks._CHUNK

    # entries up to about 1,000: none for a filter of order 4, one for second-order sections
    sections, width, size = steps("low cutoff", ss.butter(4, 0.01))
    assert _chunks._solver(sections, size, 2) is None
    sections, width, size = steps("sections", ss.butter(8, 0.1, output="sos"))
    assert np.abs(_chunks._solver(sections, size, 4)).max() > _chunks._SOLVE_GAIN
    solved = []
    solver = _chunks._solver
    monkeypatch.setattr(_chunks, "_solver", lambda *args: solved.append(args) or solver(*args))
    for name, coefficients in filters.items():
        sections, width, size = steps(name, coefficients)
        most = 2 * side // width
        for chunks in (1, 5, most):
            ends = rng.standard_normal((3, width, chunks))
            expected = ends.copy()
            _chunks._solve(expected, _chunks._matrices(sections, size).stages)
            np.testing.assert_allclose(
                (ends.reshape(3, -1) @ solver(sections, size, chunks)).reshape(ends.shape),
                expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
        # rows, chunks and whether the product solves them
        for rows, chunks, product in [(1, most, True), (few_rows, 3, True),
                                      (few_rows + 1, side // width, True),
                                      (few_rows + 1, side // width + 1, False)]:
            x = rng.standard_normal((rows, size * chunks + (rows == 1)))
            zi = rng.standard_normal((len(sections), rows, sections[0].order))
            runs = {}
            for setting in (side, 0):
                monkeypatch.setattr(_chunks, "_SOLVE_SIDE", setting)
                solved.clear()
                runs[setting] = [_chunks.cascade(sections, x, 1, zi),
                                 _chunks.cascade(sections, x, 1, None, reverse=True),
                                 _chunks.cascade(sections, x.T, 0, zi.transpose(0, 2, 1))]
                assert len(solved) == (3 if product and setting else 0), (name, rows, chunks)
            for with_product, staged in zip(*runs.values(), strict=True):
                for got, want in zip(with_product, staged, strict=True):
                    if want is None:
                        assert got is None
                    else:
                        assert relative_error(got, want) <= 1e-12, (name, rows, chunks)


def test_sosfilt_chunks(monkeypatch, chunk_runs):
    """The NumPy path that runs the whole cascade in chunks as matrix products: every
    standard design and band against SciPy, with and without zi (and zf), lengths the
    chunks do not divide, any axis, reversed views, the one-section chunk length, results
    formed a few chunks at a time (`sosfiltfilt`'s two passes straight through them);
    non-finite samples fall back to the sections' recurrences, which carry them forward as
    SciPy does."""
    ran = chunk_runs
    straight, passes_in_chunks = [], _filtfilt._passes_in_chunks

    def passes(*args):
        straight.append(passes_in_chunks(*args))
        return straight[-1]

    monkeypatch.setattr(_filtfilt, "_passes_in_chunks", passes)
    rng = np.random.default_rng(16)
    x = rng.standard_normal((2, 1000))
    for design in DESIGNS.values():
        for kind, cutoff in BANDS:
            for order in (1, 2, 3, 8, 12):
                sos = design(order, cutoff, kind)
                zi = rng.standard_normal((sos.shape[0], 2, 2))
                expected, expected_zf = ss.sosfilt(sos, x, zi=zi)
                ran.clear()
                y, zf = signal.sosfilt(sos, x, zi=zi)
                plain = signal.sosfilt(sos, x)
                assert ran == [True, True]
                bound = BOUND[np.float64] * np.sqrt(np.mean(expected ** 2))
                assert np.max(np.abs(y - expected)) <= bound, (kind, cutoff, order)
                assert np.max(np.abs(zf - expected_zf)) <= bound, (kind, cutoff, order)
                assert relative_error(plain, ss.sosfilt(sos, x)) <= BOUND[np.float64]
    sos = ss.cheby2(5, 40, 0.1, output="sos")
    for shape, axis in (((130,), 0), ((3, 1031), -1), ((2, 257, 3), 1), ((257, 4), 0)):
        for flip in (False, True):
            x = rng.standard_normal(shape)
            x = np.flip(x, axis) if flip else x
            ran.clear()
            straight.clear()
            for result, want in ((signal.sosfilt(sos, x, axis=axis),
                                  ss.sosfilt(sos, x, axis=axis)),
                                 (signal.sosfiltfilt(sos, x, axis=axis),
                                  ss.sosfiltfilt(sos, x, axis=axis))):
                assert relative_error(result, want) <= 1e-12, (shape, axis)
            assert ran == [True] * 3, (shape, ran)
            assert [y is not None for y in straight] == [True], shape
    one = ss.butter(2, 0.01, output="sos")  # one section: the shorter chunks
    # (the last: 65 time-major channels, not adjacent, would be copied to adjacent samples)
    for shape, axis, runs in (((1000,), 0, True), ((300, 64), 0, True), ((300, 65), 0, True),
                              ((65, 300), -1, True), ((300, 130), 0, False)):
        x = rng.standard_normal(shape) if runs else np.ones(shape)[:, ::2]
        ran.clear()
        result = signal.sosfilt(one, x, axis=axis)
        assert relative_error(result, ss.sosfilt(one, x, axis=axis)) <= 1e-12
        assert result.flags.c_contiguous
        assert ran == ([True] if runs else []), (shape, ran)
    x = rng.standard_normal(1000)
    for at in (0, 1, 500, 998, 999):  # the start, a chunk, the rest, the last samples
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[at] = bad
            zi = rng.standard_normal((4, 2))
            sos = ss.butter(8, 0.1, output="sos")
            ran.clear()
            result, _ = signal.sosfilt(sos, y, zi=zi)  # no warnings (inf - inf), as SciPy
            expected, _ = ss.sosfilt(sos, y, zi=zi)
            assert ran == [False]
            np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
            # (a random zi swings the output to 1e5, and a sample near 0 on the way can be
            # off by more than 1e-10 of itself, by 1e-18 of the swing)
            np.testing.assert_allclose(result[:at], expected[:at], rtol=1e-10,
                                       atol=1e-12 * np.max(np.abs(expected[:at]), initial=0))


def views_taken(monkeypatch, name: str, position: int) -> list:
    """The shapes of the time-major views `_chunks.<name>` takes (its argument at
    ``position``), call by call, into the list returned."""
    shapes, function = [], getattr(_chunks, name)

    def spy(*args):
        shapes.append(args[position].shape)
        return function(*args)

    monkeypatch.setattr(_chunks, name, spy)
    return shapes


def test_time_major_chunks(monkeypatch, chunk_runs):
    """Time-major signals of at least _MIN_COLUMNS adjacent channels run in chunks as they lie
    (`_chunks._in_columns`): `lfilter` (orders 4, a FIR filter whose zi spans two chunks of
    16 on 100 samples, and an integrator, whose pole of 1 decays by 1 a chunk) and `sosfilt`
    with and without zi, `filtfilt` and `sosfiltfilt`, on (T, C) along axis 0, (B, T, C)
    along axis 1 and channels over two axes, forward and reversed in time, in segments of
    time, the chunk-level recurrences as products and by `linear_recurrence`, against SciPy;
    the cascade backward in time (`_OnHost`'s transposed map) against the flipped signal's;
    a non-finite sample, in a chunk or after the last whole one, falls back to the
    recurrences; fewer channels, or channels not adjacent, are copied to adjacent samples
    instead."""
    ran = chunk_runs
    columns = views_taken(monkeypatch, "_in_columns", 1)
    rng = np.random.default_rng(43)
    ba, fir, sos = ss.butter(4, 0.1), (ss.firwin(20, 0.2), [1.0]), ss.butter(8, 0.1,
                                                                             output="sos")
    for shape, axis, segment in (((300, 24), 0, None), ((100, 24), 0, None),
                                 ((3, 1031, 40), 1, None), ((257, 4, 8), 0, None),
                                 ((5000, 30), 0, 10**4)):
        monkeypatch.setattr(_chunks, "_SEGMENT_ELEMENTS", segment or 1 << 21)
        monkeypatch.setattr(_chunks, "_MIN_SEGMENT", 100 if segment else 4096)
        x = rng.standard_normal(shape)
        for signal_x in (x, np.flip(x, axis)):
            for (b, a), order in ((ba, 4), (fir, 19), (([1.0], [1.0, -1.0]), 1)):
                zi = rng.standard_normal((*shape[:axis], order, *shape[axis + 1:]))
                columns.clear()
                y, zf = signal.lfilter(b, a, signal_x, axis=axis, zi=zi)
                want, want_zf = ss.lfilter(b, a, signal_x, axis=axis, zi=zi)
                assert relative_error(y, want) <= 1e-10, (shape, order)  # SciPy's (b, a)
                assert relative_error(zf, want_zf) <= 1e-10, (shape, order)
                assert y.flags.c_contiguous
                assert columns
                assert all(c[2] == math.prod(shape[axis + 1:]) for c in columns)
            zi = rng.standard_normal((len(sos), *shape[:axis], 2, *shape[axis + 1:]))
            columns.clear()
            for result, want in ((signal.sosfilt(sos, signal_x, axis=axis, zi=zi),
                                  ss.sosfilt(sos, signal_x, axis=axis, zi=zi)),
                                 (signal.sosfilt(sos, signal_x, axis=axis),
                                  ss.sosfilt(sos, signal_x, axis=axis)),
                                 (signal.filtfilt(*ba, signal_x, axis=axis),
                                  ss.filtfilt(*ba, signal_x, axis=axis)),
                                 (signal.sosfiltfilt(sos, signal_x, axis=axis),
                                  ss.sosfiltfilt(sos, signal_x, axis=axis))):
                for got, expected in zip(*(v if isinstance(v, tuple) else (v,)
                                           for v in (result, want)), strict=True):
                    assert relative_error(got, expected) <= 1e-10, shape
            assert len(columns) >= 6 * (1 + (segment is not None)), shape
    steps = _filters._section_steps(sos.tobytes(), len(sos))
    x = rng.standard_normal((300, 32))
    out = np.empty_like(x)
    y, zf = _chunks.cascade(steps, x, 0, None, reverse=True, out=out, keep_state=True)
    want, want_zf = ss.sosfilt(sos, x[::-1], axis=0, zi=np.zeros((len(sos), 2, 32)))
    assert y is out
    assert relative_error(y, want[::-1]) <= 1e-12
    assert relative_error(zf, want_zf) <= 1e-12
    for where in (150, -1):  # in a chunk, and in the samples after the last whole chunk
        x = rng.standard_normal((300, 32))
        x[where, 3] = np.nan
        ran.clear()
        y = signal.sosfilt(sos, x, axis=0)
        assert ran == [False]
        np.testing.assert_array_equal(np.isfinite(y), np.isfinite(ss.sosfilt(sos, x, axis=0)))
    monkeypatch.setattr(_chunks, "_MIN_COLUMNS", 24)  # read on each call
    for x in (rng.standard_normal((300, 23)), rng.standard_normal((300, 60))[:, ::2],
              rng.standard_normal((300, 64))):
        if x.shape[1] == 64:
            monkeypatch.setattr(_chunks, "_MIN_COLUMNS", 65)
        columns.clear()
        ran.clear()
        assert relative_error(signal.sosfilt(sos, x, axis=0), ss.sosfilt(sos, x, axis=0)) \
            <= 1e-12
        assert ran == [True]
        assert not columns


def test_time_major_products(monkeypatch, chunk_runs):
    """A short time-major signal of four or more adjacent channels, once its filter's
    matrices are built, is one product as it lies (`_chunks._product_of_columns`: the
    matrices transposed down its channels): `lfilter` with zi and zf, `sosfilt`, on
    (T, C) along axis 0 and (B, T, C) along axis 1, and the cascade backward in time from
    rest, against SciPy; a reversed view, and three channels, take the rows' product."""
    ran = chunk_runs
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", DIRECT_LENGTH)
    products = views_taken(monkeypatch, "_product_of_columns", 2)
    rng = np.random.default_rng(44)
    b, a = ss.butter(4, 0.1)
    sos = ss.butter(8, 0.1, output="sos")
    for shape, axis in (((100, 4), 0), ((150, 40), 0), ((3, 60, 5), 1), ((100, 3), 0)):
        x = rng.standard_normal(shape)
        zi = rng.standard_normal((*shape[:axis], 4, *shape[axis + 1:]))
        zs = rng.standard_normal((len(sos), *shape[:axis], 2, *shape[axis + 1:]))
        calls = ((partial(signal.lfilter, b, a, x, axis=axis, zi=zi),
                  ss.lfilter(b, a, x, axis=axis, zi=zi)),
                 (partial(signal.sosfilt, sos, x, axis=axis, zi=zs),
                  ss.sosfilt(sos, x, axis=axis, zi=zs)),
                 (partial(signal.sosfilt, sos, np.flip(x, axis), axis=axis),
                  ss.sosfilt(sos, np.flip(x, axis), axis=axis)))
        for k, (function, expected) in enumerate(calls):
            for _ in range(_chunks._DIRECT_AFTER + 1):  # the last builds the matrices
                function()
            products.clear()
            ran.clear()
            result = function()
            assert ran == [True], (shape, k)
            assert len(products) == (k < 2 and shape[-1] > 3), (shape, k)  # not reversed
            for got, want in zip(*(v if isinstance(v, tuple) else (v,)
                                   for v in (result, expected)), strict=True):
                assert got.shape == want.shape
                assert got.flags.c_contiguous
                assert relative_error(got, want) <= 1e-10, (shape, k)
    steps = _filters._section_steps(sos.tobytes(), len(sos))
    x = rng.standard_normal((100, 8))
    want = ss.sosfilt(sos, x[::-1], axis=0)[::-1]
    for _ in range(_chunks._DIRECT_AFTER + 1):
        _chunks.cascade(steps, x, 0, None, reverse=True)
    products.clear()
    y, _ = _chunks.cascade(steps, x, 0, None, reverse=True)
    assert len(products) == 1
    assert relative_error(y, want) <= 1e-12


def test_zero_phase_chunks_carry_what_is_not_finite(chunk_runs):
    """`filtfilt` and `sosfiltfilt` on NumPy signals run both passes straight in chunks;
    where a sample is not finite, the first pass declines and both run the recurrences,
    which carry it as SciPy does, the other channels unchanged."""
    ran = chunk_runs
    b, a = ss.butter(4, 0.1)
    sos = ss.butter(4, 0.1, output="sos")
    x = np.random.default_rng(42).standard_normal((2, 1000))
    for at in (0, 500, 999):
        for bad in (np.nan, np.inf):
            y = x.copy()
            y[0, at] = bad
            for mine, scipy_ in ((partial(signal.filtfilt, b, a), partial(ss.filtfilt, b, a)),
                                 (partial(signal.sosfiltfilt, sos),
                                  partial(ss.sosfiltfilt, sos))):
                ran.clear()
                assert relative_error(mine(x), scipy_(x)) <= 1e-12
                assert ran == [True, True]
                ran.clear()
                result, expected = mine(y), scipy_(y)
                assert ran[0] is False
                np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
                assert relative_error(result[1], expected[1]) <= 1e-12


def test_chunks_short_signals(chunk_runs):
    """Short signals run in chunks from 16 samples, in chunks of 16 below twice the usual
    chunk length, and from as many chunks of 16 as SciPy's zi enters for filters above
    order 16: `lfilter` (with zi and zf) and `sosfilt`, `filtfilt` and `sosfiltfilt` (read
    backward in time) against SciPy; shorter signals, and orders whose zi the chunks do
    not cover, run the recurrences."""
    ran = chunk_runs
    rng = np.random.default_rng(23)
    poles = np.exp(1j * np.linspace(0.2, 2.9, 10)) * np.linspace(0.5, 0.9, 10)
    filters = [ss.butter(1, 0.2), ss.butter(4, 0.1), ss.cheby1(8, 1, 0.3),
               (ss.firwin(17, 0.2), [1.0]),
               (rng.standard_normal(3), np.poly(np.concatenate([poles, poles.conj()])).real)]
    for b, a in filters:
        order = max(len(a), len(b)) - 1
        for length in (15, 16, 17, 31, 32, 33, 63, 64, 100, 127):
            x = rng.standard_normal((2, length))
            zi = rng.standard_normal((2, order))
            runs = length >= 16 * max(1, -(-order // 16))
            ran.clear()
            y, zf = signal.lfilter(b, a, x, zi=zi)
            expected, expected_zf = ss.lfilter(b, a, x, zi=zi)
            assert ran == ([True] if runs else []), (order, length, ran)
            scale = np.sqrt(np.mean(expected ** 2))
            assert np.max(np.abs(y - expected)) <= 1e-11 * scale, (order, length)
            assert np.max(np.abs(zf - expected_zf)) <= 1e-11 * scale, (order, length)
            if length > 3 * (order + 1):
                result = signal.filtfilt(b, a, x)
                assert relative_error(result, ss.filtfilt(b, a, x)) <= 1e-11, (order, length)
    sos = ss.butter(8, 0.1, output="sos")
    for length in (15, 16, 17, 40, 127):
        x = rng.standard_normal((3, length))
        zi = rng.standard_normal((4, 3, 2))
        ran.clear()
        y, zf = signal.sosfilt(sos, x, zi=zi)
        expected, expected_zf = ss.sosfilt(sos, x, zi=zi)
        assert ran == ([True] if length >= 16 else []), (length, ran)
        assert relative_error(y, expected) <= 1e-12, length
        assert relative_error(zf, expected_zf) <= 1e-12, length
        result = signal.sosfiltfilt(sos, x, padlen=min(length - 1, 10))
        assert relative_error(result, ss.sosfiltfilt(sos, x, padlen=min(length - 1, 10))) \
            <= 1e-12, length


def test_chunks_take_float64_numpy_arrays():
    """The chunks and the short signals' products take float64 NumPy arrays alone (the
    filters cast signals to float64 first); `_chunks.pairs` views a complex128 array's
    parts in any layout and returns anything else as it is."""
    rng = np.random.default_rng(39)
    x = rng.standard_normal((2, 40))
    assert _chunks.applies(x, 1, order=4)
    assert _chunks.short(x[:, :10], 1, order=4)
    for other in (x.astype(np.float32), x.astype(np.complex128)):
        assert not _chunks.applies(other, 1, order=4)
        assert not _chunks.short(other[:, :10], 1, order=4)
    assert not _chunks.applies(x.tolist(), 1, order=4)
    assert not _chunks.short(x[:, :10].tolist(), 1, order=4)
    for other in (x, x.astype(np.complex64), [1j]):
        assert _chunks.pairs(other) is other
    z = np.flip(rng.standard_normal((3, 8)) + 1j * rng.standard_normal((3, 8)), 1)[:, ::3]
    parts = _chunks.pairs(z)
    np.testing.assert_array_equal(parts, np.stack([z.real, z.imag], axis=-1))
    parts[1, 2] = 5, 7  # a view
    assert z[1, 2] == 5 + 7j


def test_direct_products(monkeypatch, chunk_runs):
    """Once a filter has run twice on a short length, it is one product with its matrices
    for that length (the chunks' steps and the recurrences would fail): `lfilter` with zi
    and zf, `sosfilt`, and `filtfilt` and `sosfiltfilt`, whose backward passes take the
    transposed matrix, along any axis and on reversed views, as the chunks and SciPy give
    them; below 16 samples (a FIR filter's zi reaching past the signal), the matrices come
    from the recurrences. A non-finite sample or state falls back to the recurrences,
    which carry it as SciPy does; many channels of 256 samples, and matrices of more than
    _DIRECT_ELEMENTS numbers, are left to the chunks or the recurrences; the last few
    matrices are kept. (Each product here is taken by the call's checks and plans, not as
    a stream's, `test_streams`.)"""
    ran = chunk_runs
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", DIRECT_LENGTH)
    rng = np.random.default_rng(33)
    b, a = ss.cheby1(6, 1, 0.2)
    fir = ss.firwin(17, 0.2), np.ones(1)
    sos = ss.ellip(6, 1, 60, (0.2, 0.3), "bandstop", output="sos")
    for shape, axis in (((1,), 0), ((7, 3), 0), ((2, 15), -1), ((16,), 0), ((3, 100), -1),
                        ((100, 3), 0), ((2, 37, 3), 1), ((256,), 0), ((2, 150), -1),
                        ((150, 5), 0)):
        x = np.flip(rng.standard_normal(shape), axis)
        zi, zt, zs = (rng.standard_normal(lead + shape[:axis % len(shape)] + (order,)
                                          + shape[axis % len(shape) + 1:])
                      for lead, order in (((), 6), ((), 16), ((len(sos),), 2)))
        calls = {"lfilter": (partial(signal.lfilter, b, a, x, axis=axis, zi=zi),
                             ss.lfilter(b, a, x, axis=axis, zi=zi)),
                 "sosfilt": (partial(signal.sosfilt, sos, x, axis=axis, zi=zs),
                             ss.sosfilt(sos, x, axis=axis, zi=zs)),
                 "fir": (partial(signal.lfilter, *fir, x, axis=axis, zi=zt),
                         ss.lfilter(*fir, x, axis=axis, zi=zt))}
        if 39 < shape[axis] < 200:  # padded to at most 256 samples
            calls["filtfilt"] = (partial(signal.filtfilt, b, a, x, axis=axis),
                                 ss.filtfilt(b, a, x, axis=axis))
            calls["sosfiltfilt"] = (partial(signal.sosfiltfilt, sos, x, axis=axis),
                                    ss.sosfiltfilt(sos, x, axis=axis))
        for name, (function, expected) in calls.items():
            _chunks._direct_kept.clear()
            first = function()
            for _ in range(_chunks._DIRECT_AFTER):
                building = function()  # the last builds the matrices, in chunks
            assert all(isinstance(kept, tuple) for kept in _chunks._direct_kept.values())
            ran.clear()
            with monkeypatch.context() as m:
                m.setattr(_chunks, "_output", None)
                m.setattr(_filters, "linear_recurrence", None)
                product = function()
            assert bool(ran) == (shape[axis] >= 16), (name, shape)
            assert all(ran), (name, shape)
            for got, built, want, chunks in zip(*(v if isinstance(v, tuple) else (v,) for v in
                                                  (product, building, expected, first)),
                                               strict=True):
                assert got.shape == want.shape, (name, shape)
                assert got.flags.c_contiguous or not want.flags.c_contiguous, (name, shape)
                scale = np.sqrt(np.mean(want ** 2))
                assert np.max(np.abs(got - want)) <= 1e-10 * scale, (name, shape, axis)
                assert np.max(np.abs(got - chunks)) <= 1e-12 * scale, (name, shape, axis)
                np.testing.assert_array_equal(got, built)
    x = rng.standard_normal((2, 64))
    zi = rng.standard_normal((len(sos), 2, 2))
    for _ in range(1 + _chunks._DIRECT_AFTER):
        signal.sosfilt(sos, x, zi=zi)
    for bad in (np.nan, np.inf):
        y, state = x.copy(), zi.copy()
        y[1, 5] = bad
        state[0, 0, 1] = bad
        for args in ((y, zi), (x, state)):
            ran.clear()
            result, zf = signal.sosfilt(sos, args[0], zi=args[1])
            expected, expected_zf = ss.sosfilt(sos, args[0], zi=args[1])
            assert ran == [False]
            np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
            np.testing.assert_array_equal(np.isfinite(zf), np.isfinite(expected_zf))
            both = np.isfinite(result)
            np.testing.assert_allclose(result[both], expected[both], rtol=1e-10, atol=1e-12)
    _chunks._direct_kept.clear()
    x = rng.standard_normal((64, 256))  # 64 x 256 ** 2 multiply-adds
    one = ss.butter(2, 0.1, output="sos")  # 2 numbers of state: in chunks
    for _ in range(1 + _chunks._DIRECT_AFTER):
        assert relative_error(signal.sosfilt(one, x), ss.sosfilt(one, x)) <= 1e-10
    assert not _chunks._direct_kept
    for _ in range(1 + _chunks._DIRECT_AFTER):  # 12: one product up to 32 x 12 samples
        assert relative_error(signal.sosfilt(sos, x), ss.sosfilt(sos, x)) <= 1e-10
    assert all(isinstance(kept, tuple) for kept in _chunks._direct_kept.values())
    for length in (10, 100):  # at most _DIRECT_ELEMENTS numbers in the matrices
        x = rng.standard_normal(length)
        for limit, kept in (((length + 12) ** 2 - 1, False), ((length + 12) ** 2, True)):
            _chunks._direct_kept.clear()
            with monkeypatch.context() as m:
                m.setattr(_chunks, "_DIRECT_ELEMENTS", limit)
                for _ in range(1 + _chunks._DIRECT_AFTER):
                    assert relative_error(signal.sosfilt(sos, x), ss.sosfilt(sos, x)) <= 1e-10
            assert [isinstance(v, tuple) for v in _chunks._direct_kept.values()] == (
                [True] if kept else []), (length, limit)
    monkeypatch.setattr(_chunks, "_DIRECT_KEPT", 2)
    for length in (20, 21, 21, 21, 22):  # counted, ..., built; 20's evicted at 22
        signal.sosfilt(sos, rng.standard_normal(length))
    assert [(key[1], kept) if isinstance(kept, collections.Counter) else (key[1], "built")
            for key, kept in _chunks._direct_kept.items()] == [(21, "built"), (22, {False: 1})]
    _chunks._direct_kept.clear()
    x = rng.standard_normal(100)
    signal.sosfiltfilt(sos, x, padlen=20)  # two passes forward, the second on a flipped view
    assert list(_chunks._direct_kept.values()) == [{False: 2}]
    signal.sosfiltfilt(sos, x, padlen=20)
    assert all(isinstance(kept, tuple) for kept in _chunks._direct_kept.values())


@pytest.mark.parametrize(("design", "built"), [
    (ss.butter(2, 0.1), True), (ss.butter(4, 0.05), True), (ss.butter(4, 0.01), False),
    (ss.butter(6, 0.01), False), (ss.bessel(6, 0.01), False), (ss.cheby1(4, 1, 0.002), False)])
def test_direct_products_of_ill_conditioned_states(monkeypatch, design, built):
    """A stream of short blocks through `lfilter` with zi: a filter whose state is
    ill-conditioned in SciPy's form (a unit of zi giving outputs or an end state beyond
    _DIRECT_STATE_GAIN) is not run as a product, whose rounding compounded through the
    state from block to block (2.6 times the RMS off for butter(6, 0.01) in (b, a) form,
    where the chunks are within 1e-7); a well-conditioned one is."""
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", DIRECT_LENGTH)
    monkeypatch.setattr(_chunks, "_direct_kept", collections.OrderedDict())
    b, a = design
    x = np.random.default_rng(36).standard_normal((2, 4000))
    state, pieces = np.zeros((2, a.size - 1)), []
    for block in np.split(x, 20, axis=-1):  # of 200 samples: a product from the third
        y, state = signal.lfilter(b, a, block, zi=state)
        pieces.append(y)
    expected = direct_form_extended(b, a, x)
    assert relative_error(np.concatenate(pieces, axis=-1), expected) <= 1e-6
    assert [isinstance(kept, tuple) for kept in _chunks._direct_kept.values()] == [built]


def test_products_of_few_rows():
    """`_chunks.times` gives ``v @ matrix`` in C order in each of its forms: one row, a
    matrix-vector product per row, the transposed product, and the plain one beyond
    _FEW_ROWS rows or below _FEW_ROWS_SIDE; for C-ordered matrices, transposed ones and
    row slices, real and complex. Each form gives its own rounding: the one taken gives
    its bits."""
    rng = np.random.default_rng(36)
    side = _chunks._FEW_ROWS_SIDE
    forms = {"plain": lambda v, matrix: v @ matrix,
             "vector": lambda v, matrix: np.matmul(v[:, None, :], matrix)[:, 0],
             "transposed": lambda v, matrix: (matrix.T @ v.T).T}
    for rows in (1, 2, _chunks._VECTOR_ROWS, _chunks._VECTOR_ROWS + 1, 17, _chunks._FEW_ROWS,
                 _chunks._FEW_ROWS + 1):
        for n, m in ((side - 1, side + 5), (side, side), (side + 9, side + 3)):
            form = ("plain" if rows in (1, _chunks._FEW_ROWS + 1) or n < side
                    else "vector" if rows <= _chunks._VECTOR_ROWS else "transposed")
            stored = rng.standard_normal((n + 4, m)) + 1j * rng.standard_normal((n + 4, m))
            for matrix in (stored.real[4:], stored.real[:n].T, stored[4:]):
                v = rng.standard_normal((rows, matrix.shape[0]))
                got = _chunks.times(v, matrix)
                want = v @ matrix
                assert got.flags.c_contiguous, (rows, n, m)
                assert got.dtype == want.dtype, (rows, n, m)
                assert relative_error(got, want) <= 1e-14, (rows, n, m)
                np.testing.assert_array_equal(got, forms[form](v, matrix), str((rows, n, m)))


def test_zero_phase_products(monkeypatch):
    """Once `filtfilt` (either method) or `sosfiltfilt` has run twice on NumPy signals of a
    length, it is one product with the whole scheme's matrix for that length (the scheme
    would fail): SciPy's results for every padding, a given padlen and irlen, and a complex
    filter, along any axis, on reversed views, for float32 (rounded once), complex and
    integer signals; within rounding of the scheme's, in C order. A non-finite sample takes
    the scheme, which keeps a FIR filter's NaN where SciPy does, and so does an unstable
    filter whose matrix is not finite (its output for the signal is); signals longer than
    _ZERO_PHASE_LENGTH and empty ones never take a product (tensors:
    `test_framework_zero_phase_products`)."""
    monkeypatch.setattr(_chunks, "_direct_kept", collections.OrderedDict())
    rng = np.random.default_rng(35)
    b, a = ss.cheby1(4, 1, 0.2)
    sos = ss.ellip(6, 1, 60, (0.2, 0.3), "bandstop", output="sos")
    complex_filter = ([0.3 + 0.1j, 0.2], [1.0, -0.5j])
    calls = {
        "odd": ((signal.filtfilt, b, a), (ss.filtfilt, b, a), {}),
        "even, padlen 5": ((signal.filtfilt, b, a), (ss.filtfilt, b, a),
                           {"padtype": "even", "padlen": 5}),
        "constant": ((signal.filtfilt, b, a), (ss.filtfilt, b, a), {"padtype": "constant"}),
        "no padding": ((signal.filtfilt, b, a), (ss.filtfilt, b, a), {"padtype": None}),
        "gust": ((signal.filtfilt, b, a), (ss.filtfilt, b, a), {"method": "gust"}),
        "gust, irlen 20": ((signal.filtfilt, b, a), (ss.filtfilt, b, a),
                           {"method": "gust", "irlen": 20}),
        "complex filter": ((signal.filtfilt, *complex_filter), (ss.filtfilt, *complex_filter),
                           {}),
        "sosfiltfilt": ((signal.sosfiltfilt, sos), (ss.sosfiltfilt, sos), {}),
    }
    for shape, axis in (((60,), 0), ((3, 100), -1), ((100, 3), 0), ((2, 50, 3), 1),
                        ((512,), 0), ((2, 150), -1), ((5, 150), -1)):
        x = np.flip(rng.standard_normal(shape), axis)
        signals = (x, x.astype(np.float32), x + 1j * np.flip(rng.standard_normal(shape), axis),
                   np.round(10 * x).astype(np.int16))
        for name, (ours, theirs, settings) in calls.items():
            for v in signals:
                scheme = ours[0](*ours[1:], v, axis=axis, **settings)
                for _ in range(_chunks._DIRECT_AFTER):
                    ours[0](*ours[1:], v, axis=axis, **settings)  # the last builds the matrix
                with monkeypatch.context() as m:
                    m.setattr(_filtfilt, "_forward_backward", None)
                    m.setattr(_filtfilt, "_gustafsson", None)
                    product = ours[0](*ours[1:], v, axis=axis, **settings)
                expected = theirs[0](*theirs[1:], v.astype(scheme.dtype), axis=axis,
                                     **settings)
                assert product.dtype == scheme.dtype, (name, shape, v.dtype)
                assert product.shape == shape, (name, shape, v.dtype)
                assert product.flags.c_contiguous, (name, shape, v.dtype)
                single = scheme.dtype in (np.float32, np.complex64)
                bound = BOUND[np.float32] if single else 1e-10
                assert relative_error(product, expected) <= bound, (name, shape, v.dtype)
                assert relative_error(product, scheme) <= max(bound / 100, 1e-12), \
                    (name, shape, v.dtype)
    assert all(isinstance(kept, tuple) for kept in _chunks._direct_kept.values())
    # NaN stays where the scheme (and SciPy) leave it: a FIR filter's window
    fir = ss.firwin(9, 0.2), np.ones(1)
    x = rng.standard_normal((2, 100))
    for _ in range(1 + _chunks._DIRECT_AFTER):
        signal.filtfilt(*fir, x)
    for bad in (np.nan, np.inf):
        y = x.copy()
        y[1, 50] = bad
        result, expected = signal.filtfilt(*fir, y), ss.filtfilt(*fir, y)
        np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
        assert np.isfinite(result[1]).sum() > 50
        both = np.isfinite(expected)
        np.testing.assert_allclose(result[both], expected[both], rtol=1e-10, atol=1e-12)
    # nor where the matrix is not finite: an unstable filter's output for a unit signal at
    # the start overflows, for one that starts late it does not
    grows = [1.0], [1.0, -4.0]
    x = np.zeros((2, 300))
    x[:, -10:] = rng.standard_normal((2, 10))
    for _ in range(1 + _chunks._DIRECT_AFTER):
        expected = ss.filtfilt(*grows, x)
        assert np.isfinite(expected).all()
        np.testing.assert_allclose(signal.filtfilt(*grows, x), expected, rtol=1e-10)
    # no product: longer signals, empty ones, tensors
    _chunks._direct_kept.clear()
    longer = rng.standard_normal(_filtfilt._ZERO_PHASE_LENGTH + 1)
    for _ in range(1 + _chunks._DIRECT_AFTER):
        assert relative_error(signal.filtfilt(b, a, longer), ss.filtfilt(b, a, longer)) <= 1e-10
        assert signal.filtfilt(b, a, np.zeros((2, 0)), method="gust").shape == (2, 0)
    assert not any(isinstance(key[0], str) for key in _chunks._direct_kept)


def test_streams(monkeypatch):
    """A stream (the same filter on blocks of one shape, dtype and layout, NumPy arrays with
    or without zi), once a block has run in chunks or as one product, runs so again
    without the call's checks and plans (which would fail here), with their results:
    `lfilter` (a FIR filter's zi reaching past the block; zi broadcast), `sosfilt`, along
    any axis, reversed views, steps apart, float32 and integer blocks, as SciPy gives the
    whole signal block by block. Another layout, dtype, zi, axis or design (changed in
    place) is another call; a non-finite block goes through the checks (the recurrences
    carry an infinity or NaN as SciPy does), and so does a block below 16 samples whose
    matrices are no longer kept (from 16 samples the stream's chunks run, and count and
    build them again); the last _STREAMS_KEPT calls are kept."""
    monkeypatch.setattr(_chunks, "_direct_kept", collections.OrderedDict())
    monkeypatch.setattr(_stream, "_streams", {})
    rng = np.random.default_rng(34)
    b, a = ss.cheby1(6, 1, 0.2)
    fir = ss.firwin(17, 0.2), np.ones(1)
    sos = ss.ellip(6, 1, 60, (0.2, 0.3), "bandstop", output="sos")
    filters = {"lfilter": (signal.lfilter, ss.lfilter, (b, a), ()),
               "fir": (signal.lfilter, ss.lfilter, fir, ()),
               "sosfilt": (signal.sosfilt, ss.sosfilt, (sos,), (len(sos),))}
    for (shape, axis, block), dtype, (name, (ours, scipys, design, lead)), state in \
            itertools.product(
                (((40 * 8,), 0, 8), ((3, 24 * 9), -1, 24), ((24 * 7, 2, 3), 0, 24),
                 ((2, 32 * 6, 3), 1, 32), ((5, 100 * 5), 1, 100), ((600 * 4,), 0, 600),
                 ((2, 300 * 4), -1, 300), ((300 * 4, 3), 0, 300)),
                (np.float64, np.float32, np.int32), filters.items(), (False, True, "ones")):
        axis %= len(shape)
        if state == "ones" and name == "sosfilt":
            continue
        x = np.flip(rng.standard_normal(shape) * 100, -1).astype(dtype)
        order = 2 if lead else max(map(len, design)) - 1
        zshape = [*lead, *shape[:axis], order, *shape[axis + 1:]]
        if state == "ones":  # lfilter broadcasts dimensions of length 1
            zshape = [order if k == len(lead) + axis else 1 for k in range(len(zshape))]
        zi = rng.standard_normal(zshape) if state else None
        kwargs = {"zi": zi} if state else {}
        expected = scipys(*design, x, axis=axis, **kwargs)  # the whole signal
        blocks = []
        for k, start in enumerate(range(0, shape[axis], block)):
            piece = x[(slice(None),) * axis + (slice(start, start + block),)]
            with monkeypatch.context() as m:
                m.setattr(_stream, "_streams", {})
                checked = ours(*design, piece, axis=axis, **kwargs)  # through the checks
            with monkeypatch.context() as m:
                if k > _chunks._DIRECT_AFTER:  # the stream's run, without the checks
                    m.setattr(_filters, "_signal", None)
                got = ours(*design, piece, axis=axis, **kwargs)
            for have, want in zip(*(v if state else (v,) for v in (got, checked)), strict=True):
                np.testing.assert_array_equal(have, want)
            if state:
                got, kwargs["zi"] = got
                assert got.dtype == kwargs["zi"].dtype, (name, shape, dtype)
                assert kwargs["zi"].flags.c_contiguous, (name, shape, dtype)
            else:  # each block from rest
                assert relative_error(got, scipys(*design, piece, axis=axis)) <= (
                    1e-5 if dtype == np.float32 else 1e-10), (name, shape, dtype)
            assert got.dtype == (np.float32 if dtype == np.float32 else np.float64)
            assert got.flags.c_contiguous, (name, shape, dtype)
            blocks.append(got)
        if state:
            bound = BOUND[np.float32 if dtype == np.float32 else np.float64]
            assert relative_error(np.concatenate(blocks, axis), expected[0]) <= bound, (
                name, shape, dtype, state)
            assert relative_error(kwargs["zi"], expected[1]) <= bound, (
                name, shape, dtype, state)
    x, zi = rng.standard_normal(32), rng.standard_normal(6)
    changed = b.copy()
    for _ in range(1 + _chunks._DIRECT_AFTER):
        signal.lfilter(changed, a, x, zi=zi)
    changed[0] *= 2  # another design
    for got, want in zip(signal.lfilter(changed, a, x, zi=zi),
                         ss.lfilter(changed, a, x, zi=zi), strict=True):
        assert relative_error(got, want) <= 1e-10
    with pytest.raises(ValueError, match="`zi` must have shape"):
        signal.lfilter(changed, a, x, zi=zi[:5])
    complex_ = signal.lfilter(changed, a, x, zi=zi * 1j)[0]  # a complex zi: complex y
    assert relative_error(complex_, ss.lfilter(changed, a, x, zi=zi * 1j)[0]) <= 1e-10
    ones = rng.standard_normal((1, 6))  # one zi broadcast over channels, for every block
    for k in range(2 + _chunks._DIRECT_AFTER):
        block = rng.standard_normal((3, 32))
        with monkeypatch.context() as m:
            if k > _chunks._DIRECT_AFTER:  # the stream's run
                m.setattr(_filters, "_signal", None)
            got = signal.lfilter(changed, a, block, zi=ones)
        for have, want in zip(got, ss.lfilter(changed, a, block, zi=ones), strict=True):
            assert have.shape == want.shape, (have.shape, want.shape)
            assert relative_error(have, want) <= 1e-10
    for bad in (np.nan, np.inf):
        for args in ((np.where(np.arange(32) == 5, bad, x), zi), (x, np.where(zi > 1, bad, zi))):
            got, zf = signal.lfilter(changed, a, *args[:1], zi=args[1])
            want, want_zf = ss.lfilter(changed, a, *args[:1], zi=args[1])
            np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
            np.testing.assert_array_equal(np.isfinite(zf), np.isfinite(want_zf))
            both = np.isfinite(want)
            np.testing.assert_allclose(got[both], want[both], rtol=1e-10, atol=1e-12)
    short = x[:8]
    for _ in range(1 + _chunks._DIRECT_AFTER):
        signal.lfilter(changed, a, short, zi=zi)
    _chunks._direct_kept.clear()  # the matrices are gone
    with monkeypatch.context() as m:
        m.setattr(_filters, "_signal", None)
        for _ in range(1 + _chunks._DIRECT_AFTER):  # in chunks, counted and built again
            for got, want in zip(signal.lfilter(changed, a, x, zi=zi),
                                 ss.lfilter(changed, a, x, zi=zi), strict=True):
                assert relative_error(got, want) <= 1e-10
        assert all(isinstance(kept, tuple) for kept in _chunks._direct_kept.values())
        with pytest.raises(TypeError):  # below 16 samples: through the checks
            signal.lfilter(changed, a, short, zi=zi)
    monkeypatch.setattr(_stream, "_STREAMS_KEPT", 2)
    for length in (20, 21, 22):
        for _ in range(1 + _chunks._DIRECT_AFTER):
            signal.sosfilt(sos, rng.standard_normal(length))
    assert [key[1] for key in _stream._streams] == [(21,), (22,)]
    for _ in range(1 + _chunks._DIRECT_AFTER):
        signal.sosfilt(sos, x)
    assert [key[1] for key in _stream._streams] == [(22,), (32,)]
    monkeypatch.setattr(_stream, "_STREAMS_KEPT", 0)  # none taken
    monkeypatch.setattr(_filters, "_signal", None)
    with pytest.raises(TypeError):
        signal.sosfilt(sos, x)


def test_streams_on_threads(monkeypatch):
    """Filters called from several threads at once, each streaming its own signal block by
    block (a cache of one stream, so that each new call replaces another's), give SciPy's
    results; the kept streams and matrices change only under their locks. The record of the
    runs a call takes (`_stream._recording`) holds that thread's runs alone, and a record made
    within another gives the outer one back."""
    class Locked(collections.OrderedDict):
        """A cache that checks its lock is held whenever it changes."""

        def __init__(self, lock):
            super().__init__()
            self.lock = lock

        def __setitem__(self, key, value):
            assert self.lock.locked()
            super().__setitem__(key, value)

        def __delitem__(self, key):
            assert self.lock.locked()
            super().__delitem__(key)

        def popitem(self, last=True):
            assert self.lock.locked()
            return super().popitem(last)

        def move_to_end(self, key, last=True):
            assert self.lock.locked()
            super().move_to_end(key, last)

    monkeypatch.setattr(_stream, "_streams", Locked(_stream._streams_lock))
    monkeypatch.setattr(_chunks, "_direct_kept", Locked(_chunks._direct_lock))
    monkeypatch.setattr(_stream, "_STREAMS_KEPT", 1)
    rng = np.random.default_rng(40)
    cases = (  # (function, design, signal, time axis, block length)
        (signal.sosfilt, (ss.ellip(6, 1, 60, 0.2, output="sos"),),
         rng.standard_normal((3, 20 * 40)), 1, 20),
        (signal.lfilter, ss.cheby1(4, 1, 0.3), rng.standard_normal((24 * 40, 2)), 0, 24),
        (signal.sosfilt, (ss.butter(4, (0.1, 0.4), "bandpass", output="sos"),),
         rng.standard_normal(40 * 40), 0, 40),
        (signal.lfilter, (ss.firwin(9, 0.25), np.ones(1)), rng.standard_normal((2, 17 * 40)), 1,
         17))
    start = threading.Barrier(len(cases))

    def stream(function, design, x, axis, block):
        lead, order = ((len(design[0]),), 2) if function is signal.sosfilt else (
            (), max(map(len, design)) - 1)
        zi = np.zeros((*lead, *x.shape[:axis], order, *x.shape[axis + 1:]))  # from rest
        pieces = []
        start.wait()
        for first in range(0, x.shape[axis], block):
            y, zi = function(*design, np.take(x, range(first, first + block), axis), axis=axis,
                             zi=zi)
            pieces.append(y)
        return np.concatenate(pieces, axis)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often
    try:
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as threads:
            results = list(threads.map(stream, *zip(*cases, strict=True)))
    finally:
        sys.setswitchinterval(interval)
    for (function, design, x, axis, _), got in zip(cases, results, strict=True):
        want = getattr(ss, function.__name__)(*design, x, axis=axis)
        assert relative_error(got, want) <= 1e-12, (function.__name__, x.shape)
    sos = cases[0][1][0]
    x = rng.standard_normal(40)
    with _stream._recording() as runs:
        other = threading.Thread(target=signal.sosfilt, args=(sos, list(x)))  # no stream
        other.start()
        other.join()
        assert runs == []  # the other thread's run is not this one's
        with _stream._recording() as inner:
            signal.sosfilt(sos, list(x))
        assert len(inner) == 1
        assert runs == []  # given back
        signal.sosfilt(sos, list(x))
        assert len(runs) == 1


def test_chunks_in_segments(monkeypatch, chunk_runs):
    """Signals whose steps lie apart ((T, C) along axis 0, reversed views, strided or
    reversed views of one channel) are filtered a segment of time at a time, each from the
    state the last one left (backward in time for the second pass of the zero-phase
    filters), with the results of the whole: from rest and from zi (zf), lengths the
    segments do not divide; a non-finite sample in a later segment sends the whole signal
    to the recurrences. The copies hold less than one and a half segments, of
    _SEGMENT_ELEMENTS samples or _MIN_SEGMENT of each channel."""
    from cuscan.signal import _chunks

    monkeypatch.setattr(_chunks, "_SEGMENT_ELEMENTS", 600)
    monkeypatch.setattr(_chunks, "_MIN_SEGMENT", 128)
    ran = chunk_runs
    cuts = record_results(monkeypatch, _chunks, "_segments")  # each call's segments
    rng = np.random.default_rng(28)
    sos, (b, a) = ss.ellip(6, 1, 50, 0.1, output="sos"), ss.cheby1(3, 1, 0.2)
    for shape, axis in (((1000, 3), 0), ((2, 1500, 2), 1), ((701, 2, 2), 0), ((3001,), 0)):
        for flip in (False, True):
            x = rng.standard_normal(shape)
            if x.ndim == 1:  # one channel: strided, or reversed
                x = x[::-1][:1999] if flip else x[::2]
            else:
                x = np.flip(x, 1 - axis if flip and axis == 0 else axis) if flip else x
            zi = rng.standard_normal((sos.shape[0], *x.shape[:axis], 2, *x.shape[axis + 1:]))
            zi_ba = rng.standard_normal((*x.shape[:axis], 3, *x.shape[axis + 1:]))
            for result, expected in (
                    (signal.sosfilt(sos, x, axis=axis), ss.sosfilt(sos, x, axis=axis)),
                    (signal.sosfilt(sos, x, axis=axis, zi=zi),
                     ss.sosfilt(sos, x, axis=axis, zi=zi)),
                    (signal.lfilter(b, a, x, axis=axis), ss.lfilter(b, a, x, axis=axis)),
                    (signal.lfilter(b, a, x, axis=axis, zi=zi_ba),
                     ss.lfilter(b, a, x, axis=axis, zi=zi_ba)),
                    (signal.sosfiltfilt(sos, x, axis=axis), ss.sosfiltfilt(sos, x, axis=axis)),
                    (signal.filtfilt(b, a, x, axis=axis), ss.filtfilt(b, a, x, axis=axis))):
                for part, want in zip(*(v if isinstance(v, tuple) else (v,)
                                        for v in (result, expected)), strict=True):
                    assert part.shape == want.shape
                    assert relative_error(part, want) <= 1e-12, (shape, axis, flip)
            assert all(ran), (shape, ran)
            assert len(ran) > 12, (shape, ran)  # each call in segments
            assert all(cuts), shape
            rows = x.size // x.shape[axis]  # every channel
            for pieces in cuts:
                longest = max(stop - start for start, stop in pieces)
                assert rows * longest < 1.5 * max(600, 128 * rows), (shape, rows, pieces)
            ran.clear()
            cuts.clear()
    for shape, axis in (((1000, 3), 0), ((2, 1500, 2), 1)):  # backward in time: transposes
        w = rng.standard_normal(shape)
        for design in ((sos.tobytes(),), tuple(np.asarray(c, np.float64).tobytes()
                                               for c in _filters._normalized(b, a))):
            result = _filters._OnHost(design, axis).adjoint(w)
            want = np.flip(scipy_filter(design, np.flip(w, axis), axis), axis)
            assert relative_error(result, want) <= 1e-12, (shape, axis)
            assert all(ran), (shape, ran)
            assert len(ran) > 4, (shape, ran)
            ran.clear()
    cuts.clear()
    x = rng.standard_normal((250, 8))  # over twice 600 samples, under two segments: whole
    assert relative_error(signal.sosfilt(sos, x, axis=0), ss.sosfilt(sos, x, axis=0)) <= 1e-12
    assert cuts == [[]]
    x = rng.standard_normal((1000, 3))
    x[800, 1] = np.nan
    result, expected = signal.sosfilt(sos, x, axis=0), ss.sosfilt(sos, x, axis=0)
    assert ran[-1] is False  # the whole call declined, after its first segments ran
    np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
    np.testing.assert_allclose(result[:800], expected[:800], rtol=1e-10, atol=1e-12)


def test_sosfilt_coefficient_dtypes(chunk_runs):
    """``sos`` given as float32, integers or a list runs the same cascade in chunks as
    float64 (its cached forms are keyed by the float64 bytes); a negative integer once read
    as a float64 NaN, and float32 rows as half as many."""
    ran = chunk_runs
    x = np.random.default_rng(23).standard_normal((2, 700))
    sos = ss.butter(4, 0.1, output="sos")
    for given in (sos.astype(np.float32), np.array([[1, -1, 0, 1, 0, 0], [2, 0, -3, 1, 0, 0]]),
                  sos.astype(np.float32).tolist()):
        expected = ss.sosfilt(np.asarray(given, np.float64), x)
        ran.clear()
        assert relative_error(signal.sosfilt(given, x), expected) <= BOUND[np.float64]
        assert ran == [True]


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_coefficients_in_single_precision(dtype):
    """``b`` and ``a`` in single precision, with ``a[0]`` not 1, give SciPy's filter of the
    same values in double precision: they are normalised there. Normalised in single
    precision, the poles of an order-6 Butterworth design moved `lfilter`'s output by a
    fifth of its RMS."""
    x = np.random.default_rng(24).standard_normal((2, 3000))
    b, a = ss.butter(6, 0.05)
    b, a = (3 * b).astype(dtype), (3 * a).astype(dtype)
    wide = np.complex128 if dtype == np.complex64 else np.float64
    b64, a64 = b.astype(wide), a.astype(wide)
    calls = [(signal.lfilter(b, a, x), ss.lfilter(b64, a64, x)),
             (signal.filtfilt(b, a, x), ss.filtfilt(b64, a64, x)),
             (signal.lfilter_zi(b, a), ss.lfilter_zi(b64, a64)),
             # normalised here: SciPy's lfiltic does so only from 1.16
             (signal.lfiltic(b, a, [1.0, 2.0], [0.5]),
              ss.lfiltic(b64 / a64[0], a64 / a64[0], [1.0, 2.0], [0.5]))]
    if dtype == np.float32:  # SciPy's Gustafsson drops a complex filter's imaginary part
        calls.append((signal.filtfilt(b, a, x, method="gust"),
                      ss.filtfilt(b64, a64, x, method="gust")))
    for ours, theirs in calls:
        assert relative_error(ours, theirs) <= 1e-6


def scipy_filter(design: tuple[bytes, ...], x, axis: int, zi=None):
    """SciPy's filter of the design `_filters._OnHost` takes (float64 bytes of ``sos``, or
    of ``b`` and ``a``)."""
    if len(design) == 1:
        sos = np.frombuffer(design[0]).reshape(-1, 6).copy()  # SciPy writes into it
        return ss.sosfilt(sos, x, axis=axis, zi=zi)
    return ss.lfilter(*(np.frombuffer(c) for c in design), x, axis=axis, zi=zi)


def test_linear_maps_on_host(chunk_runs):
    """The linear maps tensors that autodiff records run on the CPU (`_filters._OnHost`):
    a filter from rest or from its first sample's steady state (`filtfilt`'s first pass),
    or backward in time from its last sample's (its second, without flipping), and their
    transposes: the filter backward in time (the chunks cut from the end, read and written
    in place) or forward, plus the steady state's response's product with the signal added
    to the first or last samples. Against SciPy and by the dot-product test
    ``<F x, w> = <x, F^T w>``, for every design and band, filters in (b, a) form, lengths
    the chunks divide and not, any axis, reversed views and channels apart."""
    ran = chunk_runs
    rng = np.random.default_rng(29)
    designs = [(sos.tobytes(),) for sos in (
        DESIGNS[name](order, cutoff, kind) for name in DESIGNS for kind, cutoff in BANDS
        for order in (1, 3, 8))]
    designs += [tuple(np.asarray(c, np.float64).tobytes() for c in _filters._normalized(b, a))
                for b, a in (ss.cheby1(3, 1, 0.3, "highpass"), ss.bessel(6, 0.2),
                             ([0.5, 0.25, 0.0, -0.125], [1.0, -0.5]), (ss.firwin(33, 0.2), [1.0]))]

    def steady_start(design, x, axis):
        first = np.moveaxis(x, axis, -1)[..., :1]
        if len(design) == 1:
            state = signal.sosfilt_zi(np.frombuffer(design[0]).reshape(-1, 6))
            zi = state.reshape(len(state), *[1] * (x.ndim - 1), 2) * first
            return np.moveaxis(zi, -1, 1 + axis % x.ndim)
        return np.moveaxis(signal.lfilter_zi(*(np.frombuffer(c) for c in design)) * first, -1,
                           axis % x.ndim)

    for d, design in enumerate(designs):
        shape, axis = ((2, (1024, 1000, 130)[d % 3]), -1) if d % 4 else ((257, 3), 0)
        x, w = rng.standard_normal(shape), rng.standard_normal(shape)
        rest, steady = _filters._OnHost(design, axis), _filters._OnHost(design, axis, steady=True)
        ran.clear()
        backward = rest.adjoint(w)
        want = np.flip(scipy_filter(design, np.flip(w, axis), axis), axis)
        assert relative_error(backward, want) <= BOUND[np.float64], d
        assert ran == [True], d
        assert backward.flags.c_contiguous
        forward = steady(x)
        want, _ = scipy_filter(design, x, axis, steady_start(design, x, axis))
        # (the steady states can be far larger than the output, as in narrow bands)
        assert np.max(np.abs(forward - want)) <= 1e-11 * np.sqrt(np.mean(x ** 2)), d
        transposed = steady.adjoint(w)
        assert abs(np.sum(forward * w) - np.sum(x * transposed)) <= 1e-10 * np.sqrt(
            np.sum(forward ** 2) * np.sum(w ** 2)), d
        # The pass backward in time from the last sample's steady state, unflipped.
        flipped = _filters._OnHost(design, axis, steady=True, flipped=True)
        ran.clear()
        backward = flipped(x)
        assert ran == [True], d
        reverse = np.flip(x, axis)
        want = np.flip(scipy_filter(design, reverse, axis, steady_start(design, reverse, axis))[0],
                       axis)
        # (as the sum of the pass from rest and the state's part: up to 1.7e-11 seen)
        assert np.max(np.abs(backward - want)) <= 1e-10 * np.sqrt(np.mean(x ** 2)), d
        transposed = flipped.adjoint(w)
        assert abs(np.sum(backward * w) - np.sum(x * transposed)) <= 1e-10 * np.sqrt(
            np.sum(backward ** 2) * np.sum(w ** 2)), d
    sos = ss.cheby2(5, 40, 0.1, output="sos")
    for shape, axis in (((130,), 0), ((3, 1031), -1), ((2, 257, 3), 1), ((257, 4), 0),
                        ((256, 70), 0)):
        for flip in (False, True):
            w = rng.standard_normal(shape)
            w = np.flip(w, axis) if flip else w
            ran.clear()
            result = _filters._OnHost((sos.tobytes(),), axis - len(shape)).adjoint(w)
            want = np.flip(ss.sosfilt(sos, np.flip(w, axis), axis=axis), axis)
            assert relative_error(result, want) <= 1e-12, (shape, axis, flip)
            assert result.flags.c_contiguous
            assert ran == [True], (shape, ran)
    steady = _filters._OnHost((ss.butter(2, 0.3, output="sos").tobytes(),), -1, steady=True)
    x, w = rng.standard_normal((2, 5000)), rng.standard_normal((2, 5000))
    assert _filters._steady_response(steady.design, 5000).size < 5000  # underflowed: cut
    forward = steady(x)
    assert abs(np.sum(forward * w) - np.sum(x * steady.adjoint(w))) <= 1e-12 * np.sqrt(
        np.sum(forward ** 2) * np.sum(w ** 2))


def test_linear_maps_with_state(monkeypatch, chunk_runs):
    """`_filters._OnHost` where ``state``: SciPy's zi and the signal packed along the time
    axis, to the output and zf packed alike, and its transpose, whose state parts are small
    matrices of responses (`_filters._state_maps`) cut where the state underflows. Against
    the dense matrix of SciPy's filter from its unit inputs, for every design and band and
    filters in (b, a) form (FIR, marginally stable), computed a few blocks at a time; by
    the dot-product test on any axis and layout; a sample that is not finite and a response
    that outlasts the matrices' budget leave the filter to its recurrences, with the same
    values (and gradients)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_filters, "_STATE_BLOCK", 97)
    _filters._state_maps.cache_clear()
    ran = chunk_runs
    rng = np.random.default_rng(31)
    designs = [(sos.tobytes(),) for sos in (
        DESIGNS[name](order, cutoff, kind) for name in DESIGNS for kind, cutoff in BANDS[:5]
        for order in (1, 4))]
    designs += [tuple(np.asarray(c, np.float64).tobytes() for c in _filters._normalized(b, a))
                for b, a in (ss.cheby1(3, 1, 0.3, "highpass"), ss.bessel(6, 0.2),
                             ([0.5, 0.25, 0.0, -0.125], [2.0, -1.0]), (ss.firwin(9, 0.2), [1.0]),
                             ([1.0], [1.0, -1.0]), ([1.0, 0.5], [1.0, 0.0, 0.81]))]

    def packed_scipy(design, p, axis):
        """SciPy's filter of ``p`` = zi's filters, then the signal, along ``axis``."""
        count, order = _filters._OnHost(design, axis).stack
        size = count * order
        p = np.moveaxis(p, axis, -1)
        zi = np.moveaxis(p[..., :size].reshape(*p.shape[:-1], count, order), -2, 0)
        y, zf = scipy_filter(design, p[..., size:], -1, zi if len(design) == 1 else zi[0])
        zf = zf.reshape(count, *p.shape[:-1], order) if len(design) == 1 else zf[None]
        return np.moveaxis(np.concatenate([y, *zf], axis=-1), -1, axis)

    for d, design in enumerate(designs):
        f = _filters._OnHost(design, -1, state=True)
        count, order = f.stack
        size, length = count * order, (300, 130, 1000)[d % 3]
        dense = packed_scipy(design, np.eye(size + length), -1).T  # column j: unit j's map
        q = rng.standard_normal((2, size + length))
        ran.clear()
        forward, transposed = f(q), f.adjoint(q)
        assert ran, d
        assert all(ran), d
        # Within 1e-10 of a product's rounding bound (the forward map runs from zi as
        # `test_sosfilt_chunks` checks: up to 1.5e-11 of it, for band-stop designs).
        assert np.all(np.abs(forward - q @ dense.T) <= 1e-10 * (np.abs(q) @ np.abs(dense).T)), d
        assert np.all(np.abs(transposed - q @ dense) <= 1e-10 * (np.abs(q) @ np.abs(dense))), d
    for shape, axis in (((1031,), 0), ((3, 500), -1), ((2, 257, 3), 1), ((400, 4), 0)):
        for design in designs[2], designs[-6], designs[-2]:
            f = _filters._OnHost(design, axis - len(shape), state=True)
            grown = list(shape)
            grown[axis] += f.stack[0] * f.stack[1]
            p, q = rng.standard_normal(grown), rng.standard_normal(grown)
            q = np.flip(q, axis)  # a reversed view
            forward = f(p)
            assert relative_error(forward, packed_scipy(design, p, axis)) <= 1e-12
            assert abs(np.sum(forward * q) - np.sum(p * f.adjoint(q))) <= 1e-12 * np.sqrt(
                np.sum(forward ** 2) * np.sum(q ** 2)), (shape, axis)
    # A sample that is not finite: the chunks decline, and the recurrences fill the same
    # output as on a framework's tensor.
    for design in designs[2], designs[-6]:
        f = _filters._OnHost(design, -1, state=True)
        p = rng.standard_normal((2, 1000 + f.stack[0] * f.stack[1]))
        p[1, 600] = np.inf
        for g in f, f.adjoint:
            ran.clear()
            got = g(p)
            assert False in ran
            np.testing.assert_allclose(got, g.recurrences(torch.from_numpy(p)).numpy(),
                                       rtol=1e-12, atol=0, equal_nan=True)
            assert np.isfinite(got[0]).all()
            assert not np.isfinite(got[1]).all()
    # A response longer than the budget: the recurrences, as before.
    monkeypatch.setattr(_filters, "_STATE_ELEMENTS", 500)
    _filters._state_maps.cache_clear()
    b, a = ss.butter(2, 0.002)
    assert _filters._state_maps(_filters._design(*_filters._normalized(b, a)), 1000) is None
    x, zi = rng.standard_normal((2, 1000)), rng.standard_normal((2, 2))
    tensors = [torch.tensor(v, requires_grad=True) for v in (x, zi)]
    ran.clear()
    y, zf = signal.lfilter(b, a, *tensors[:1], zi=tensors[1])
    assert not ran
    want_y, want_zf = ss.lfilter(b, a, x, zi=zi)
    assert relative_error(y.detach().numpy(), want_y) <= 1e-12
    assert relative_error(zf.detach().numpy(), want_zf) <= 1e-12
    assert torch.autograd.gradcheck(lambda x, zi: signal.lfilter(b, a, x, zi=zi),
                                    [t[:, :200] if t.shape[1] > 2 else t for t in tensors])


def test_lfilter_chunks(chunk_runs):
    """`lfilter`, `filtfilt` and Gustafsson's `filtfilt` through the whole filter in chunks
    as matrix products on NumPy arrays: designs in (b, a) form, FIR filters, a state
    reaching past the first chunk, zi in SciPy's broadcast shapes and zf, any axis and
    reversed views, float32 and complex signals; declined for complex filters, orders
    above the limit and non-finite samples, which the recurrences carry forward as SciPy
    does."""
    ran = chunk_runs
    rng = np.random.default_rng(17)
    x = rng.standard_normal((2, 1000))
    pairs = np.exp(1j * np.linspace(0.3, 2.8, 9)) * np.linspace(0.6, 0.9, 9)
    filters = [ss.butter(1, 0.2), ss.butter(2, 0.05), ss.cheby1(3, 1, 0.3, "highpass"),
               ss.cheby2(2, 40, (0.1, 0.3), "bandpass"), ss.ellip(3, 1, 40, (0.1, 0.3),
                                                                  "bandstop"),
               ss.bessel(6, 0.2), ([0.5, 0.25, 0.0, -0.125], [1.0, -0.5]),
               (ss.firwin(33, 0.2), [1.0]),  # FIR: the numerator's memory alone
               (rng.standard_normal(5), np.poly(np.concatenate([pairs, pairs.conj()])).real)]
    for b, a in filters:  # the last has order 18, more than its chunks of 16
        order = max(len(a), len(b)) - 1
        for zi_shape in ((2, order), (1, order)):
            zi = rng.standard_normal(zi_shape)
            expected, expected_zf = ss.lfilter(b, a, x, zi=np.broadcast_to(zi, (2, order)))
            ran.clear()
            y, zf = signal.lfilter(b, a, x, zi=zi)
            plain = signal.lfilter(b, a, x)
            assert ran == [True, True], order
            scale = np.sqrt(np.mean(expected ** 2))
            assert np.max(np.abs(y - expected)) <= 1e-12 * scale, order
            assert np.max(np.abs(zf - expected_zf)) <= 1e-12 * scale, order
            assert relative_error(plain, ss.lfilter(b, a, x)) <= 1e-12, order
        single = x.astype(np.float32)  # computed in double precision, rounded once
        result = signal.lfilter(b, a, single)
        assert result.dtype == np.float32
        assert relative_error(result, ss.lfilter(b, a, single.astype(np.float64))) <= \
            4 * np.finfo(np.float32).eps, order
    b, a = ss.cheby1(4, 1, 0.1)
    for shape, axis in (((130,), 0), ((3, 1031), -1), ((2, 257, 3), 1), ((257, 4), 0)):
        for flip in (False, True):
            x = rng.standard_normal(shape)
            x = np.flip(x, axis) if flip else x
            ran.clear()
            for method in ("pad", "gust"):
                result = signal.filtfilt(b, a, x, axis=axis, method=method)
                expected = ss.filtfilt(b, a, x, axis=axis, method=method)
                assert relative_error(result, expected) <= 1e-11, (shape, axis, method)
            result = signal.lfilter(b, a, x, axis=axis)
            assert relative_error(result, ss.lfilter(b, a, x, axis=axis)) <= 1e-12
            assert result.flags.c_contiguous
            assert ran == [True] * 7, (shape, ran)  # pad: 2 passes, gust: 4
    x = rng.standard_normal((3, 500))
    ran.clear()
    for b, a, signal_x, runs in ((ss.firwin(66, 0.2), [1.0], x, []),  # order 65
                                 (ss.firwin(65, 0.2), [1.0], x, [True]),
                                 ([1.0, 0.5j], [1.0, -0.5], x, []),
                                 ([1.0], [1.0, -0.5], x + 0j, [True])):
        ran.clear()
        result = signal.lfilter(b, a, signal_x)
        assert relative_error(result, ss.lfilter(b, a, signal_x)) <= 1e-12
        assert ran == runs, (len(b), ran)
    assert signal.lfilter(b, a, np.zeros((0, 500))).shape == (0, 500)
    pairs = ss.butter(4, 0.1)  # pairs of poles, whose chunk-level scans are real products
    for empty in (partial(signal.lfilter, *pairs), partial(signal.filtfilt, *pairs),
                  partial(signal.sosfiltfilt, ss.butter(4, 0.1, output="sos"))):
        assert empty(np.zeros((0, 500))).shape == (0, 500)
    x = rng.standard_normal(1000)
    for at in (0, 500, 999):
        for bad in (np.nan, np.inf):
            y = x.copy()
            y[at] = bad
            zi = rng.standard_normal(6)
            b, a = ss.butter(6, 0.1)
            ran.clear()
            result, _ = signal.lfilter(b, a, y, zi=zi)
            expected, _ = ss.lfilter(b, a, y, zi=zi)
            assert ran == [False]
            np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
            np.testing.assert_allclose(result[:at], expected[:at], rtol=1e-10,
                                       atol=1e-12 * np.max(np.abs(expected[:at]), initial=0))


def test_complex_signals_in_chunks(chunk_runs, monkeypatch):
    """A complex signal through a real filter runs in chunks as its real and imaginary
    parts side by side (`_chunks.pairs`): `lfilter` from rest, a real zi and a complex one
    (zf too; each in single precision too), `sosfilt` with a complex zi, `filtfilt`
    (either method) and `sosfiltfilt`, along any axis and on reversed views, as SciPy
    gives them; complex64 signals computed in double precision and rounded once. Short
    blocks of a stream, called again and again, are one product with the filter's
    matrices, and agree too (no stream keeps their run: a stream's takes real arrays)."""
    ran = chunk_runs
    rng = np.random.default_rng(38)
    b, a = ss.cheby1(4, 1, 0.1)
    sos = ss.butter(6, 0.15, output="sos")
    for shape, axis in (((1031,), 0), ((3, 1031), -1), ((2, 257, 3), 1), ((257, 4), 0)):
        for flip in (False, True):
            x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
            x = np.flip(x, axis) if flip else x
            state = (*shape[:axis % len(shape)], 4, *shape[axis % len(shape) + 1:])
            real_zi = rng.standard_normal(state)
            complex_zi = real_zi + 1j * rng.standard_normal(state)
            sos_zi = rng.standard_normal((3, *state[:axis % len(shape)], 2,
                                          *state[axis % len(shape) + 1:])) * (1 - 2j)
            ran.clear()
            got = signal.lfilter(b, a, x, axis=axis)
            assert relative_error(got, ss.lfilter(b, a, x, axis=axis)) <= 1e-12, shape
            assert got.dtype == np.complex128
            for zi in (real_zi, complex_zi, complex_zi.astype(np.complex64),
                       real_zi.astype(np.float32)):
                for got, want in zip(signal.lfilter(b, a, x, axis=axis, zi=zi),
                                     ss.lfilter(b, a, x, axis=axis, zi=zi), strict=True):
                    assert relative_error(got, want) <= 1e-11, (shape, axis, flip)
            for got, want in zip(signal.sosfilt(sos, x, axis=axis, zi=sos_zi),
                                 ss.sosfilt(sos, x, axis=axis, zi=sos_zi), strict=True):
                assert relative_error(got, want) <= 1e-11, (shape, axis, flip)
            for method in ("pad", "gust"):
                got = signal.filtfilt(b, a, x, axis=axis, method=method)
                want = ss.filtfilt(b, a, x, axis=axis, method=method)
                assert relative_error(got, want) <= 1e-11, (shape, axis, method)
            got = signal.sosfiltfilt(sos, x, axis=axis)
            assert relative_error(got, ss.sosfiltfilt(sos, x, axis=axis)) <= 1e-11, shape
            assert ran, (shape, axis, flip)
            assert all(ran), (shape, axis, flip, ran)
            single = signal.lfilter(b, a, x.astype(np.complex64), axis=axis)
            assert single.dtype == np.complex64
            assert relative_error(single, ss.lfilter(b, a, x.astype(np.complex64).astype(
                np.complex128), axis=axis)) <= 4 * np.finfo(np.float32).eps, shape
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", DIRECT_LENGTH)
    monkeypatch.setattr(_stream, "_STREAMS_KEPT", 64)
    monkeypatch.setattr(_stream, "_streams", {})
    zi = rng.standard_normal((2, 4)) * (1 + 1j)
    for _ in range(2 + _chunks._DIRECT_AFTER):
        x = rng.standard_normal((2, 100)) + 1j * rng.standard_normal((2, 100))
        ran.clear()
        y, zi_next = signal.lfilter(b, a, x, zi=zi)
        want, want_zf = ss.lfilter(b, a, x, zi=zi)
        assert relative_error(y, want) <= 1e-11
        assert relative_error(zi_next, want_zf) <= 1e-11
        zi = zi_next
    assert ran == [True]
    assert any(isinstance(kept, tuple) for kept in _chunks._direct_kept.values())  # built
    assert not _stream._streams


def test_complex_filters(chunk_runs):
    """Complex filters (sections, and `(b, a)`) on real and complex signals, along any axis
    and on reversed views: SciPy's results, from the stages' recurrences (never the chunks,
    which take real filters alone)."""
    ran = chunk_runs
    rng = np.random.default_rng(39)
    sos = ss.butter(4, 0.1, output="sos").astype(complex)
    sos[0, :3] *= 1 + 0.5j
    b, a = ss.butter(3, 0.2)
    b = b * (1 - 0.25j)
    for shape, axis in (((300,), 0), ((2, 300), -1), ((300, 3), 0)):
        for flip in (False, True):
            x = rng.standard_normal(shape)
            x = np.flip(x, axis) if flip else x
            for v in (x, x + 1j * np.flip(x, axis)):
                ran.clear()
                for ours, theirs in ((signal.sosfilt, ss.sosfilt),
                                     (signal.sosfiltfilt, ss.sosfiltfilt)):
                    got, want = ours(sos, v, axis=axis), theirs(sos, v, axis=axis)
                    assert got.dtype == np.complex128
                    assert relative_error(got, want) <= 1e-12, (ours.__name__, shape, axis)
                for ours, theirs in ((signal.lfilter, ss.lfilter),
                                     (signal.filtfilt, ss.filtfilt)):
                    got, want = ours(b, a, v, axis=axis), theirs(b, a, v, axis=axis)
                    assert relative_error(got, want) <= 1e-12, (ours.__name__, shape, axis)
                assert not any(ran), (shape, axis, ran)


def test_sosfilt_in_blocks_equals_whole(backend):
    rng = np.random.default_rng(2)
    sos = ss.cheby1(8, 0.5, 0.02, output="sos")
    x = rng.standard_normal((3, 3001))
    zi = rng.standard_normal((sos.shape[0], 3, 2))
    expected, expected_zf = ss.sosfilt(sos, x, zi=zi)
    pieces, state = [], backend.asarray(zi)
    for block in np.array_split(x, [1, 2, 700, 701, 2000], axis=-1):
        y, state = signal.sosfilt(sos, backend.asarray(block), zi=state)
        pieces.append(backend.to_numpy(y))
    assert relative_error(np.concatenate(pieces, axis=-1), expected) <= BOUND[np.float64]
    assert relative_error(backend.to_numpy(state), expected_zf) <= BOUND[np.float64]


@pytest.fixture
def small_blocks(monkeypatch):
    """Long single-precision NumPy signals filtered in blocks of 300 samples
    (`_filters._in_blocks`), from 600; the lengths `_chunks.cascade` is called on."""
    monkeypatch.setattr(_filters, "_BLOCK_BYTES", 8 * 300)
    monkeypatch.setattr(_filters, "_MIN_BLOCK", 300)
    lengths = []
    cascade = _chunks.cascade

    def spy(sections, x, axis, *args, **kwargs):
        lengths.append(x.shape[axis])
        return cascade(sections, x, axis, *args, **kwargs)

    monkeypatch.setattr(_chunks, "cascade", spy)
    return lengths


def single_precision_filters(shape, axis):
    """``(name, filter(x, zi=None), zi's shape)``: `lfilter` of order 4 and `sosfilt` of three
    sections along ``axis`` of a signal of ``shape``."""
    b, a = ss.butter(4, 0.02)
    sos = ss.ellip(6, 0.5, 60, 0.05, output="sos")
    state = list(shape)
    state[axis] = 4
    sections = [3, *shape]
    sections[1 + axis % len(shape)] = 2
    return [("lfilter", partial(signal.lfilter, b, a, axis=axis), tuple(state)),
            ("sosfilt", partial(signal.sosfilt, sos, axis=axis), tuple(sections))]


@pytest.mark.parametrize(("shape", "axis"), [((1031,), 0), ((3, 1031), -1), ((1031, 3), 0),
                                             ((2, 1031, 3), 1), ((2, 3, 1031), 2)])
@pytest.mark.parametrize("given", [False, True])
def test_single_precision_in_blocks(small_blocks, shape, axis, given):
    """A long float32 signal is filtered in blocks of time, each cast to float64 on its own,
    with the state carried from block to block in float64: the result is the float64
    filter's rounded once (to within one rounding), and so is zf."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal(shape).astype(np.float32)
    for name, function, state in single_precision_filters(shape, axis):
        zi = rng.standard_normal(state).astype(np.float32) if given else None
        expected = function(x.astype(np.float64),
                            **({} if zi is None else {"zi": zi.astype(np.float64)}))
        small_blocks.clear()
        result = function(x, **({} if zi is None else {"zi": zi}))
        assert small_blocks, name
        assert max(small_blocks) <= 300, (name, small_blocks)
        pairs = zip((result,) if zi is None else result,
                    (expected,) if zi is None else expected, strict=True)
        for mine, theirs in pairs:
            assert mine.dtype == np.float32
            assert mine.shape == theirs.shape
            np.testing.assert_allclose(
                mine, theirs.astype(np.float32), rtol=0,
                atol=2 * np.finfo(np.float32).eps * np.max(np.abs(theirs)), err_msg=name)


@pytest.mark.parametrize(("shape", "axis"), [((1031,), 0), ((3, 901), -1), ((1031, 3), 0),
                                             ((2, 1031, 3), 1)])
@pytest.mark.parametrize("padtype", ["odd", "even", "constant", None])
def test_single_precision_zero_phase_in_blocks(small_blocks, shape, axis, padtype):
    """`filtfilt` (padded) and `sosfiltfilt` on a long float32 signal run both passes in
    blocks, the padding (longer than a block too) made block by block and the forward
    pass kept in float64: the float64 scheme's result, rounded once. Unpadded, 901 samples
    are three blocks and one: the backward pass ends on a block of one sample."""
    x = np.random.default_rng(35).standard_normal(shape).astype(np.float32)
    b, a = ss.butter(4, 0.02)
    sos = ss.ellip(6, 0.5, 60, 0.05, output="sos")
    for padlen in (None, 7, 700):
        for function in (partial(signal.filtfilt, b, a), partial(signal.sosfiltfilt, sos)):
            options = {"axis": axis, "padtype": padtype, "padlen": padlen}
            expected = function(x.astype(np.float64), **options)
            small_blocks.clear()
            result = function(x, **options)
            assert small_blocks, options
            assert max(small_blocks) <= 300, options
            assert result.dtype == np.float32
            np.testing.assert_allclose(
                result, expected.astype(np.float32), rtol=0,
                atol=2 * np.finfo(np.float32).eps * np.max(np.abs(expected)), err_msg=str(options))


@pytest.mark.parametrize(("shape", "axis"), [((1531,), 0), ((3, 1531), -1), ((1530, 3), 0),
                                             ((2, 1531, 3), 1)])
@pytest.mark.parametrize("irlen", [None, 50, 700, "half", 800])
def test_single_precision_gustafsson_in_blocks(small_blocks, shape, axis, irlen):
    """Gustafsson's `filtfilt` on a long float32 (or complex64) signal runs its four passes
    in blocks and corrects the ends it fits in float64: the float64 scheme's result,
    rounded once. States fitted to the whole signal (``irlen`` of half its length or
    more; "half" is the length halved, rounded down) take the whole cast."""
    rng = np.random.default_rng(37)
    length = shape[axis]
    irlen = length // 2 if irlen == "half" else irlen
    for b, a in (ss.butter(4, 0.1), ss.cheby1(3, 1, 0.2), (np.array([0.2, 0.1, 0.3]), [1.0])):
        for complex_ in (False, True):
            x = rng.standard_normal(shape)
            x = (x + 1j * rng.standard_normal(shape) if complex_ else x).astype(
                np.complex64 if complex_ else np.float32)
            options = {"axis": axis, "method": "gust", "irlen": irlen}
            expected = signal.filtfilt(b, a, x.astype(np.complex128 if complex_ else np.float64),
                                       **options)
            small_blocks.clear()
            result = signal.filtfilt(b, a, x, **options)
            assert small_blocks, options
            if irlen is not None and 2 * irlen >= length:
                assert max(small_blocks) == length, options
            else:
                assert max(small_blocks) <= 300, options
            assert result.dtype == x.dtype
            np.testing.assert_allclose(
                result, expected.astype(x.dtype), rtol=0,
                atol=2 * np.finfo(np.float32).eps * np.max(np.abs(expected)), err_msg=str(options))


def test_single_precision_blocks_carry_what_is_not_finite(small_blocks):
    """A NaN or an infinity in one block reaches every later block, as SciPy carries it."""
    rng = np.random.default_rng(32)
    b, a = ss.butter(2, 0.1)
    for bad in (np.nan, np.inf):
        x = rng.standard_normal(1031).astype(np.float32)
        x[450] = bad
        expected = ss.lfilter(b, a, x.astype(np.float64))
        result = signal.lfilter(b, a, x)
        assert len(small_blocks) >= 2
        assert np.array_equal(np.isfinite(result), np.isfinite(expected))
        assert not np.isfinite(result[450:]).any()
        np.testing.assert_allclose(result[:450], expected[:450], rtol=1e-6, atol=1e-6)


def test_single_precision_memory():
    """The double-precision copies of a long float32 signal take a block's memory, not
    the signal's: the filters hold their output and a few blocks, and the zero-phase
    filters (Gustafsson's too) a pass in float64 as well. Cast whole, the filters held
    five times their output's size (160 MiB here) and the zero-phase filters nine (288
    MiB)."""
    tracemalloc = pytest.importorskip("tracemalloc")
    x = np.random.default_rng(33).standard_normal((4, 1 << 21)).astype(np.float32)
    sos = ss.butter(8, 0.05, output="sos")
    b, a = ss.butter(4, 0.05)
    for function, outputs in ((partial(signal.sosfilt, sos), 1), (partial(signal.lfilter, b, a), 1),
                              (partial(signal.sosfiltfilt, sos), 3),
                              (partial(signal.filtfilt, b, a), 3),
                              (partial(signal.filtfilt, b, a, method="gust"), 3)):
        tracemalloc.start()
        try:
            result = function(x)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert result.dtype == np.float32
        assert peak <= outputs * result.nbytes + 4 * _filters._BLOCK_BYTES, (function, peak)


@pytest.mark.parametrize(("b", "a"), [
    ([1.0], [1.0, -0.5]),
    ([0.2, 0.3], [1.0, -0.9, 0.2]),
    ([1.0, 2.0, 1.0], [1.0, -2.7, 2.43, -0.729]),   # a triple pole at 0.9
    ([0.5, 0.1, 0.0, 0.3], [2.0, -1.0]),            # a[0] != 1, longer numerator
    ([1.0, -1.0], [1.0]),                            # FIR only
    ([1.0], [1.0, 0.0, 0.81]),                       # poles at +-0.9j
])
@pytest.mark.parametrize("axis", [0, -1])
def test_lfilter_matches_scipy(backend, b, a, axis):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((257, 3) if axis == 0 else (3, 257))
    expected = ss.lfilter(b, a, x, axis=axis)
    result = backend.to_numpy(signal.lfilter(b, a, backend.asarray(x), axis=axis))
    np.testing.assert_allclose(result, expected, rtol=1e-9, atol=1e-10)
    order = max(len(a), len(b)) - 1
    zi_shape = list(x.shape)
    zi_shape[axis] = order
    zi = rng.standard_normal(zi_shape)
    for length in (0, 1, 2, 257):
        part = x.take(range(length), axis=axis)
        if length:
            expected, expected_zf = ss.lfilter(b, a, part, axis=axis, zi=zi)
        else:  # scipy.signal fails or returns uninitialised memory as zf here
            expected, expected_zf = part, zi
        result, zf = signal.lfilter(b, a, backend.asarray(part), axis=axis,
                                    zi=backend.asarray(zi))
        np.testing.assert_allclose(backend.to_numpy(result), expected, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(backend.to_numpy(zf), expected_zf, rtol=1e-9, atol=1e-10)


NOT_FINITE_DESIGNS = [
    ([1.0, 0.5, 0.25, 0.1, 0.05], [2.0, -0.5]),  # a numerator longer than the denominator
    ([0.0, 1.0, 0.5], [1.0, -0.3]),
    ([1.0], [1.0, -0.5, 0.1]),                  # a denominator longer than the numerator
    ([1.0, 2.0, 3.0], [1.0]),                   # FIR: SciPy's zf is a convolution's tail
    ([0.5, 0.1, 0.0, 0.3], [2.0, -1.0, 0.0]),   # a zero in the denominator, then none
]


@pytest.mark.parametrize(("b", "a"), NOT_FINITE_DESIGNS)
def test_lfilter_state_not_finite_as_scipy(backend, b, a):
    """A sample that is not finite leaves the output and the final state not finite where
    SciPy's are, in every element of the state, on short and long signals: SciPy's direct
    form updates each state with the newest output (times a zero beyond ``a``'s length).
    The other channel is untouched."""
    rng = np.random.default_rng(61)
    order = max(len(a), len(b)) - 1
    for length in (3, 300):
        for at in (0, length // 2, *range(max(length - order - 1, 0), length)):
            for bad in (np.nan, np.inf, -np.inf):
                x = rng.standard_normal((2, length))
                x[0, at] = bad
                zi = rng.standard_normal((2, order))
                y, zf = signal.lfilter(b, a, backend.asarray(x), zi=backend.asarray(zi))
                y, zf = backend.to_numpy(y), backend.to_numpy(zf)
                want, want_zf = ss.lfilter(b, a, x, zi=zi)
                case = (length, at, bad)
                np.testing.assert_array_equal(np.isfinite(y), np.isfinite(want), err_msg=case)
                np.testing.assert_array_equal(np.isfinite(zf), np.isfinite(want_zf), err_msg=case)
                np.testing.assert_allclose(y[1], want[1], rtol=1e-10, atol=1e-12, err_msg=case)
                np.testing.assert_allclose(zf[1], want_zf[1], rtol=1e-10, atol=1e-12,
                                           err_msg=case)


@pytest.mark.parametrize(("b", "a"), NOT_FINITE_DESIGNS[:2])
def test_framework_lfilter_state_not_finite_as_scipy(framework, b, a):
    """`test_lfilter_state_not_finite_as_scipy` on framework tensors."""
    rng = np.random.default_rng(62)
    x, zi = rng.standard_normal((2, 300)), rng.standard_normal((2, max(len(a), len(b)) - 1))
    for at in (0, 297, 299):
        signal_ = x.copy()
        signal_[0, at] = np.nan
        y, zf = signal.lfilter(b, a, framework.tensor(signal_), zi=framework.tensor(zi))
        want, want_zf = ss.lfilter(b, a, signal_, zi=zi)
        np.testing.assert_array_equal(np.isfinite(framework.array(y)), np.isfinite(want))
        np.testing.assert_array_equal(np.isfinite(framework.array(zf)), np.isfinite(want_zf))
        np.testing.assert_allclose(framework.array(zf)[1], want_zf[1], rtol=1e-10, atol=1e-12)


def test_conjugate_pairs_near_the_real_axis(backend):
    """Pairs p, conj(p) with Im(p) from 1e-3 down to the rounding of a double pole: each
    runs as one complex recurrence, with no cancellation as Im(p) -> 0."""
    x = np.random.default_rng(27).standard_normal((2, 3000))
    for radius in (0.5, 0.99, 0.999):
        for offset in (1e-3, 1e-5, 1e-7, 1e-9):
            a = np.poly([radius + 1j * offset, radius - 1j * offset]).real
            poles = np.roots(a)
            expected = ss.lfilter([1.0, 0.5], a, x)
            result = backend.to_numpy(signal.lfilter([1.0, 0.5], a, backend.asarray(x)))
            # the recurrences' own rounding grows as 1 / (1 - radius)
            assert relative_error(result, expected) <= 1e-12 / (1 - radius), (radius, poles)


@pytest.mark.skipif(not EXTENDED, reason="needs an extended-precision long double")
@pytest.mark.parametrize("design", [
    (ss.butter, (4, 0.0018)), (ss.bessel, (4, 0.0018)), (ss.cheby1, (4, 0.83, 0.0044)),
    (ss.ellip, (4, 0.37, 70, 0.0018)), (ss.bessel, (5, (0.053, 0.15), "bandpass")),
    (ss.cheby1, (4, 2, (0.01, 0.19), "bandpass")), (ss.cheby2, (3, 51, (0.0033, 0.15), "bandpass")),
    (ss.ellip, (5, 1.5, 40, (0.034, 0.995), "bandstop")),
], ids=lambda design: f"{design[0].__name__}{design[1]}")
def test_lfilter_transfer_function_designs(backend, design):
    """Designs in (b, a) form of orders 4 to 10, against the direct form in extended
    precision: the poles come from `a` to working precision, so the cascade is the filter
    `b, a` define (SciPy's own float64 direct form is off by up to 1.5e-7 on these)."""
    function, arguments = design
    b, a = function(*arguments)
    x = np.random.default_rng(8).standard_normal((2, 3000))
    result = backend.to_numpy(signal.lfilter(b, a, backend.asarray(x)))
    assert relative_error(result, direct_form_extended(b, a, x)) <= BOUND[np.float64]


@pytest.mark.skipif(not EXTENDED, reason="needs an extended-precision long double")
@pytest.mark.parametrize("length", [16, 32, 64, 128])
def test_lfilter_chunk_lengths(monkeypatch, chunk_runs, length):
    """In chunks of any length, low-cutoff and wide band-stop designs in (b, a) form stay
    within 5e-9 of the RMS of the extended-precision direct form (at most 1.7e-9 measured):
    every chunk applies the same matrices and decays ``p ** L``, so their rounding adds up
    over the chunks of a slowly decaying response; rounded at every step, the band-stop
    design was 2.8e-8 off in chunks of 64. Where NumPy's long double is plain double, a
    filter with pairs of poles among other stages keeps to chunks of 16, within 1e-8."""
    from cuscan.signal import _chunks

    monkeypatch.setattr(_chunks, "_CHUNK", length)
    matrices = _chunks._matrices
    lengths = set()

    def spy(sections, size):
        lengths.add(size)
        return matrices(sections, size)

    monkeypatch.setattr(_chunks, "_matrices", spy)
    x = np.random.default_rng(8).standard_normal((2, 3000))
    designs = (ss.ellip(4, 0.37, 70, 0.0018), ss.cheby1(4, 2, (0.01, 0.19), "bandpass"),
               ss.ellip(5, 1.5, 40, (0.034, 0.995), "bandstop"))
    for b, a in designs:
        result = signal.lfilter(b, a, x)
        assert relative_error(result, direct_form_extended(b, a, x)) <= 5e-9
    assert lengths == {length}
    monkeypatch.setattr(_chunks, "_WIDE", np.float64)
    matrices.cache_clear()
    try:
        for b, a in designs:
            result = signal.lfilter(b, a, x)
            assert relative_error(result, direct_form_extended(b, a, x)) <= BOUND[np.float64]
    finally:
        matrices.cache_clear()
    assert lengths == {length, 16}
    assert chunk_runs == [True] * 6


def test_chunk_decay_power():
    """The chunks' decays: ``p ** n`` correctly rounded (against fractions) for real and
    complex ``p``, where Python's power of a complex number can be off by several ulps;
    infinite beyond the range of a double."""
    from fractions import Fraction

    from cuscan.signal import _chunks

    rng = np.random.default_rng(30)
    for p in [*rng.uniform(-1, 1, 20), *(rng.uniform(-1, 1, 20) + 1j * rng.uniform(-1, 1, 20)),
              0.0, 0j, 1.0, -1.0, 1e-300, 0.9999999, 0.999 + 0.01j]:
        p = complex(p) if isinstance(p, complex) else float(p)
        for n in (1, 16, 37, 64):
            re, im = Fraction(1), Fraction(0)
            for _ in range(n):
                re, im = re * Fraction(p.real) - im * Fraction(p.imag), \
                    re * Fraction(p.imag) + im * Fraction(p.real)
            power = _chunks._power(p, n)
            assert type(power) is (np.float64 if isinstance(p, float) else np.complex128)
            assert complex(power) == complex(float(re), float(im))
    with np.errstate(over="ignore", invalid="ignore"):  # an unstable filter's, overflowing
        assert _chunks._power(-1e5, 64) == np.inf
        assert np.isinf(_chunks._power(1e5 + 1e5j, 64).real)


def test_unstable_filters_overflow_as_scipy(chunk_runs):
    """Poles outside the unit circle: the output grows until it overflows, in chunks (whose
    decays' powers overflow to infinity rather than raising) as in SciPy's loop, within a
    few samples of the same one, and the samples before it equal."""
    x = np.random.default_rng(31).standard_normal((2, 40000))
    for b, a in (([1.0], [1.0, -1.5]), ([1.0], [1.0, 2.5]), ([1.0, 0.5], [1.0, -1e5]),
                 ([1.0], [1.0, -0.5, 3e4]), (ss.butter(3, 0.1)[0], [1.0, -2.9, 2.9, -1.05])):
        sos = ss.tf2sos(b, a)
        for result, expected in ((signal.lfilter(b, a, x), ss.lfilter(b, a, x)),
                                 (signal.sosfilt(sos, x), ss.sosfilt(sos, x))):
            lasts = []  # each row finite up to an overflow, and not from it on
            for row in (result, expected):
                last = np.argmin(np.isfinite(row), axis=-1)
                assert np.all(np.isfinite(row) == (np.arange(row.shape[-1]) < last[:, None]))
                lasts.append(last)
            assert np.all(np.abs(lasts[0] - lasts[1]) <= 8)  # rounding moves it a little
            both = np.isfinite(result) & np.isfinite(expected)
            np.testing.assert_allclose(result[both], expected[both], rtol=1e-9, atol=1e-9)
    assert chunk_runs.count(False) == 10  # each met the chunks, which hand it to recurrences


@pytest.mark.parametrize("poles", [
    [0.75] * 6, [-0.5] * 5 + [0.875] * 3, [0.5 + 0.5j, 0.5 - 0.5j] * 4,
    [0.9375 + 0.25j, 0.9375 - 0.25j] * 3 + [0.96875] * 2,
], ids=["6x0.75", "5x-0.5,3x0.875", "4x(0.5+-0.5j)", "3x(0.94+-0.25j),2x0.97"])
def test_lfilter_repeated_poles(backend, poles):
    """Multiple poles, with `a` exact in binary: its roots are the poles exactly, where the
    companion matrix's eigenvalues (np.roots) are off by up to eps^(1/multiplicity)."""
    a = np.poly(poles).real
    assert np.allclose(np.poly(np.roots(a)), a)  # ... though np.roots is backward stable
    x = np.random.default_rng(9).standard_normal((2, 2000))
    expected = x
    for pole in poles:  # one first-order recurrence per pole: well conditioned
        expected = ss.lfilter([1.0], [1.0, -pole], expected)
    expected = expected.real
    result = backend.to_numpy(signal.lfilter([1.0], a, backend.asarray(x)))
    assert relative_error(result, expected) <= 1e-10


@pytest.mark.parametrize("poles", [
    [0.9] * 2, [0.3] * 2, [-0.7] * 2 + [0.2], [0.95] * 2 + [0.6 + 0.3j, 0.6 - 0.3j],
    [0.1] * 2 + [-0.99] * 2, [0.7 + 0.2j, 0.7 - 0.2j] * 2 + [0.8] * 2,
    [0.9] * 2 + [0.5 + 0.5j, 0.5 - 0.5j], [0.1] * 2 + [0.3 + 0.3j, 0.3 - 0.3j, 0.2],
])
def test_lfilter_nearly_repeated_poles(backend, poles):
    """Multiple poles rounded into `a`: a cluster of roots a few 1e-8 apart, on the real
    axis or just off it, which Aberth steps from np.roots' real estimates cannot reach;
    they come from `a` divided by the other roots' factors instead (complex ones in the
    last two)."""
    a = np.poly(poles).real
    x = np.random.default_rng(11).standard_normal((2, 2000))
    result = backend.to_numpy(signal.lfilter([1.0, -0.3], a, backend.asarray(x)))
    assert relative_error(result, ss.lfilter([1.0, -0.3], a, x)) <= 1e-11


@pytest.mark.parametrize("a", [
    ss.butter(8, 0.01)[1], ss.cheby1(10, 1, 0.02)[1],
    np.poly([0.9] * 3 + [0.5 + 0.5j, 0.5 - 0.5j]).real,
    ss.butter(8, 0.01)[1] * np.exp(0.3j) ** np.arange(9),  # its poles turned by 0.3 radians
    np.poly(np.array([0.95] * 2 + [0.8]) * np.exp(0.7j)),
], ids=["butter8", "cheby10", "3x0.9,(0.5+-0.5j)", "butter8-rotated", "2x0.95,0.8-rotated"])
def test_poles_correctly_rounded(a):
    """The poles are the roots of `a` itself, real or complex, rounded once (against 80
    digits): np.roots' are off by up to 9% of their magnitude on these clusters."""
    pytest.importorskip("mpmath")
    exact = roots_exact(a)
    roots = list(_poles._roots(a))
    assert len(roots) == len(exact)
    for root in exact:
        nearest = min(roots, key=lambda z, root=root: abs(z - root))
        assert abs(nearest - root) <= 2 * np.finfo(float).eps * abs(root)
        roots.remove(nearest)
    assert max(min(abs(z - root) for z in np.roots(a)) for root in exact) > 1e-12


def test_deflated_divides_out_roots():
    """`a` divided by the factors of some of its roots is the polynomial of the others, for
    real and complex coefficients and roots, through quotients of several steps."""
    turns = np.exp(1j * np.random.default_rng(13).uniform(0, 2 * np.pi, 5))
    for kept, removed, dtype in (
            ([0.9, 0.9], [0.5 + 0.5j, 0.5 - 0.5j, -0.3, 0.2 + 0.6j, 0.2 - 0.6j], np.float64),
            ([0.7 + 0.1j, -0.2], list(0.8 * turns), np.complex128)):
        a = np.poly(kept + removed)  # real where the roots come in conjugate pairs
        quotient = _poles._deflated(a, removed)
        assert quotient.dtype == dtype
        np.testing.assert_allclose(quotient, np.poly(kept), rtol=0, atol=1e-14)


def test_sections_with_a_double_pole(backend):
    """Critically damped sections: a double real pole, rounded into a1 and a2."""
    rng = np.random.default_rng(12)
    for pole in (0.99, 0.9, 0.5, -0.3, -0.95):
        sos = np.array([[0.5, 1.0, 0.2, *np.poly([pole, pole])], [1.0, -0.5, 0.0, 1.0, -0.8, 0.0]])
        x = rng.standard_normal((2, 3000))
        result = backend.to_numpy(signal.sosfilt(sos, backend.asarray(x)))
        assert relative_error(result, ss.sosfilt(sos, x)) <= 1e-11, pole


@pytest.mark.parametrize(("delay", "gain"), [(100, 0.999), (130, 0.99)])
def test_lfilter_feedback_comb(backend, delay, gain):
    """``y[n] = x[n] + 2 x[n-1] + g y[n-delay]``: poles spread evenly round the circle, applied
    so that the intermediate signal stays small (in angular order it grows by 1e14). Above
    an order of 128 the roots are the companion matrix's eigenvalues, unrefined."""
    a = np.zeros(delay + 1)
    a[0], a[-1] = 1.0, -gain ** delay
    x = np.random.default_rng(10).standard_normal(3000)
    result = backend.to_numpy(signal.lfilter([1.0, 2.0], a, backend.asarray(x)))
    assert relative_error(result, ss.lfilter([1.0, 2.0], a, x)) <= BOUND[np.float64]


@pytest.mark.skipif(not EXTENDED, reason="needs an extended-precision long double")
@pytest.mark.parametrize("order", [16, 48, 64])
def test_lfilter_autoregressive(backend, order):
    """All-pole filters of high order with poles at random angles, as in linear prediction."""
    rng = np.random.default_rng(order)
    poles = rng.uniform(0.8, 0.99, order // 2) * np.exp(1j * rng.uniform(0, np.pi, order // 2))
    a = np.poly(np.concatenate([poles, poles.conj()])).real
    x = rng.standard_normal((2, 3000))
    result = backend.to_numpy(signal.lfilter([1.0], a, backend.asarray(x)))
    assert relative_error(result, direct_form_extended([1.0], a, x)) <= BOUND[np.float64]


@pytest.mark.parametrize(("b", "a"), [([0.2, 0.3], [1.0, -0.9, 0.2]), ([1.0, 2.0], [3.0, -1.0]),
                                      ([0.5, 0.5, 0.5], [1.0, 0.3])])
def test_lfilter_zi_matches_scipy(b, a):
    np.testing.assert_allclose(signal.lfilter_zi(b, a), ss.lfilter_zi(b, a), rtol=1e-12)


def test_lfilter_zi_of_a_pure_gain():
    """A pure gain has no state: an empty zi, which `lfilter` takes (SciPy's `lfilter_zi`
    raises, its `lfilter` takes the same empty zi)."""
    zi = signal.lfilter_zi([3.0], [2.0])
    assert zi.shape == (0,)
    assert zi.dtype == np.float64
    y, zf = signal.lfilter([3.0], [2.0], np.ones(3), zi=zi * 1.0)
    np.testing.assert_array_equal(y, 1.5)
    assert zf.shape == (0,)


def test_sosfilt_zi_matches_scipy():
    sos = ss.butter(6, 0.1, output="sos")
    np.testing.assert_allclose(signal.sosfilt_zi(sos), ss.sosfilt_zi(sos), rtol=1e-10)
    x = np.full(500, 3.0)
    y, _ = signal.sosfilt(sos, x, zi=signal.sosfilt_zi(sos) * 3.0)
    np.testing.assert_allclose(y, 3.0, rtol=1e-10)


def test_steady_states_of_single_precision_coefficients_are_double():
    """Float32 coefficients give the float64 steady state of the filter they hold (SciPy
    1.17 gives float32), from which a float32 signal still filters in float32."""
    b, a = np.float32([0.2, 0.3]), np.float32([1.0, -0.7])
    sos = ss.butter(4, 0.2, output="sos").astype(np.float32)
    for got, want in ((signal.lfilter_zi(b, a), ss.lfilter_zi(b.astype(float), a.astype(float))),
                      (signal.sosfilt_zi(sos), ss.sosfilt_zi(sos.astype(float)))):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12)
    x = np.full(50, 2.0, np.float32)
    y, zf = signal.lfilter(b, a, x, zi=signal.lfilter_zi(b, a) * x[0])
    assert y.dtype == zf.dtype == np.float32
    gain = b.astype(float).sum() / a.astype(float).sum()
    np.testing.assert_allclose(y, 2.0 * gain, rtol=4 * np.finfo(np.float32).eps)


def test_sections_are_normalised_by_a0(backend):
    """A section whose a0 is not 1 (SciPy raises) filters as the same section divided by a0,
    in every function that takes sections."""
    sos = ss.butter(4, 0.2, output="sos")
    scaled = sos * np.array([[2.0], [-0.5]])
    x = np.random.default_rng(5).standard_normal((2, 64))
    for name in ("sosfilt", "sosfiltfilt"):
        np.testing.assert_allclose(
            backend.to_numpy(getattr(signal, name)(scaled, backend.asarray(x))),
            getattr(ss, name)(sos, x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(signal.sosfilt_zi(scaled), ss.sosfilt_zi(sos), rtol=1e-12)


@pytest.mark.parametrize("adjust", [False, True])
@pytest.mark.parametrize("alpha", [0.5, 0.01, 1.0])
def test_ema_matches_pandas(backend, alpha, adjust):
    pandas = require("pandas")
    x = np.random.default_rng(4).standard_normal(1000)
    expected = pandas.Series(x).ewm(alpha=alpha, adjust=adjust).mean().to_numpy()
    result = backend.to_numpy(signal.ema(backend.asarray(x), alpha, adjust=adjust))
    np.testing.assert_allclose(result, expected, rtol=1e-11, atol=1e-12)
    # A Series is an array_like: the result is NumPy's
    np.testing.assert_allclose(signal.ema(pandas.Series(x), alpha, adjust=adjust), expected,
                               rtol=1e-11, atol=1e-12)
    single = backend.to_numpy(signal.ema(backend.asarray(x.astype(np.float32)), alpha,
                                         adjust=adjust))
    assert single.dtype == np.float32
    np.testing.assert_allclose(single, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nan_policy", ["propagate", "omit"])
@pytest.mark.parametrize("given", ["scalar", "array"])
def test_ema_single_precision_small_alpha(backend, given, nan_policy):
    """A constant signal in single precision keeps its value whatever ``alpha``: the weight
    is the complement of the decay as rounded. ``1 - alpha`` rounded beside ``alpha``
    itself settled 10^6 samples of 3.0 at 2.975 (alpha 10^-6) and 2.9995 (10^-4)."""
    eps = np.finfo(np.float32).eps
    x = np.full((2, 10**6), 3.0, np.float32)
    x[1, ::7] = np.nan if nan_policy == "omit" else 3.0
    for alpha in (1e-4, 1e-6, 0.3):
        weight = alpha if given == "scalar" else backend.asarray(np.full((2, 1), alpha))
        y = backend.to_numpy(signal.ema(backend.asarray(x), weight, nan_policy=nan_policy))
        assert y.dtype == np.float32
        np.testing.assert_allclose(y[:, 1:], 3.0, rtol=100 * eps)


def test_ema_adjusted_per_channel_and_complex(backend):
    """adjust=True with one alpha per channel (along axis 0, and along a middle axis), on a
    complex signal: the weighted means of each channel's samples so far."""
    rng = np.random.default_rng(16)
    x = rng.standard_normal((150, 3)) + 1j * rng.standard_normal((150, 3))
    alpha = np.array([0.02, 0.3, 1.0])
    result = backend.to_numpy(signal.ema(backend.asarray(x), backend.asarray(alpha), axis=0,
                                         adjust=True))
    assert result.dtype == np.complex128
    for channel in range(3):
        for t in (0, 1, 7, 149):
            weights = (1 - alpha[channel]) ** np.arange(t, -1, -1)
            expected = np.sum(weights * x[:t + 1, channel]) / np.sum(weights)
            np.testing.assert_allclose(result[t, channel], expected, rtol=1e-12)
    # alphas of x's shape without a middle time axis: the channels on either side of it
    both = signal.ema(backend.asarray(np.stack([x, x[:, ::-1]])),
                      backend.asarray(np.stack([alpha, alpha[::-1]])), axis=1, adjust=True)
    np.testing.assert_allclose(backend.to_numpy(both), np.stack([result, result[:, ::-1]]),
                               rtol=1e-12)


def test_ema_per_channel_and_time_varying(backend):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 200)).astype(np.float32)
    alpha = np.array([0.1, 0.5, 0.9])
    result = backend.to_numpy(signal.ema(backend.asarray(x), backend.asarray(alpha)))
    assert result.dtype == np.float32
    varying = rng.uniform(0.05, 1.0, 200)
    result_varying = backend.to_numpy(signal.ema(backend.asarray(x), backend.asarray(varying)))
    for channel in range(3):
        for alphas, got in ((np.full(200, alpha[channel]), result), (varying, result_varying)):
            expected = np.empty(200)
            expected[0] = x[channel, 0]
            for t in range(1, 200):
                expected[t] = (1 - alphas[t]) * expected[t - 1] + alphas[t] * x[channel, t]
            np.testing.assert_allclose(got[channel], expected, rtol=2e-5, atol=2e-5)


def pandas_ewm_loop(x, alphas, adjust, ignore_na):
    """pandas' documented ``ewm(...).mean()`` loop over one channel with missing
    values, with one alpha per step (pandas takes one for all)."""
    y, weight, out = np.nan, 1.0, np.empty(len(x), x.dtype)
    for t, value in enumerate(x):
        present = not np.isnan(value)
        if np.isnan(y):
            y = value
        elif present or not ignore_na:
            weight *= 1 - alphas[t]
            if present:
                new = 1.0 if adjust else alphas[t]
                y = (weight * y + new * value) / (weight + new)
                weight = weight + new if adjust else 1.0
        out[t] = y
    return out


def with_gaps(rng, shape, axis=-1):
    """Random samples with missing runs: leading, inside and trailing, and one channel
    with none present (along ``axis``)."""
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.3] = np.nan
    x = np.moveaxis(x, axis, -1)
    x[..., :3][rng.random(x[..., :3].shape) < 0.5] = np.nan
    x[..., 10:16] = np.nan
    x.reshape(-1, x.shape[-1])[0] = np.nan
    return np.moveaxis(x, -1, axis)


@pytest.mark.parametrize("ignore_na", [False, True])
@pytest.mark.parametrize("adjust", [False, True])
@pytest.mark.parametrize("alpha", [0.01, 0.3, 0.77, 1.0])
def test_ema_omits_missing_like_pandas(backend, alpha, adjust, ignore_na):
    """nan_policy="omit": pandas' values, NaN where pandas has NaN (before the first
    sample present). pandas 3.0 and 3.1 differ from their documentation at alpha = 0.5
    (com = 1) with adjust=False (pandas-dev/pandas#66523), so that alpha is not
    compared here."""
    pandas = require("pandas")
    x = with_gaps(np.random.default_rng(17), (200, 4), axis=0)
    for min_periods in (0, 1, 5):
        expected = pandas.DataFrame(x).ewm(alpha=alpha, adjust=adjust, ignore_na=ignore_na,
                                           min_periods=min_periods).mean().to_numpy()
        for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-5)):
            result = backend.to_numpy(signal.ema(backend.asarray(x.astype(dtype)), alpha,
                                                 axis=0, adjust=adjust, nan_policy="omit",
                                                 ignore_na=ignore_na, min_periods=min_periods))
            assert result.dtype == dtype
            np.testing.assert_array_equal(np.isfinite(result), np.isfinite(expected))
            np.testing.assert_allclose(result, expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("adjust", [False, True])
def test_ema_min_periods(backend, adjust):
    """min_periods as in pandas, on signals without missing values (of one sample too),
    where NaN (with the default nan_policy) propagates."""
    pandas = require("pandas")
    x = np.random.default_rng(20).standard_normal((3, 40))
    for length, min_periods in itertools.product((40, 1), (None, 0, 1, 2, 7, 40, 41)):
        expected = pandas.DataFrame(x[:, :length].T).ewm(
            alpha=0.2, adjust=adjust, min_periods=min_periods).mean().to_numpy().T
        result = backend.to_numpy(signal.ema(backend.asarray(x[:, :length]), 0.2,
                                             adjust=adjust, min_periods=min_periods))
        np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
        np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)
    gap = x.copy()
    gap[1, 20] = np.nan
    result = backend.to_numpy(signal.ema(backend.asarray(gap), 0.2, adjust=adjust,
                                         min_periods=3))
    assert np.isnan(result[:, :2]).all()
    assert np.isnan(result[1, 20:]).all()
    assert not np.isnan(np.delete(result[:, 2:], 1, axis=0)).any()


@pytest.mark.parametrize("adjust", [False, True])
def test_ema_of_no_samples(backend, adjust):
    """A signal with no samples along the axis averages to an empty result of its shape and
    dtype, with every option (the first sample, which starts an unadjusted average, is
    not there); an alpha per channel is still checked against the channels."""
    options = ({}, {"nan_policy": "omit"}, {"nan_policy": "omit", "ignore_na": True},
               {"min_periods": 2})
    for shape, axis in (((3, 0), -1), ((0,), 0), ((0, 4, 2), 0)):
        for dtype, given in itertools.product((np.float32, np.complex128), options):
            x = backend.asarray(np.zeros(shape, dtype))
            result = signal.ema(x, 0.25, axis=axis, adjust=adjust, **given)
            assert type(result) is type(x)
            assert backend.to_numpy(result).shape == shape
            assert backend.to_numpy(result).dtype == dtype
    x = backend.asarray(np.zeros((3, 0), np.int64))
    assert backend.to_numpy(signal.ema(x, 0.5, adjust=adjust)).dtype == np.float64
    alpha = backend.asarray(np.array([0.5, 0.2, 0.3]))
    assert backend.to_numpy(signal.ema(x, alpha, adjust=adjust)).shape == (3, 0)
    with pytest.raises(ValueError, match=r"every `alpha` must lie in \(0, 1\]; got values "
                                         r"from 0\.2 to 2\.0"):
        signal.ema(x, backend.asarray(np.array([0.5, 0.2, 2.0])), adjust=adjust)


@pytest.mark.parametrize("nan_policy", ["propagate", "omit"])
@pytest.mark.parametrize("adjust", [False, True])
def test_ema_infinity_is_a_value(backend, adjust, nan_policy):
    """An infinite sample is a value, not a missing one, whatever the nan_policy: the
    average is infinite from there on, and NaN once the other infinity arrives (pandas'
    window functions skip infinities as missing; documented)."""
    x = np.array([[1.0, 2.0, np.inf, 3.0, 4.0, -np.inf, 5.0]])
    result = backend.to_numpy(signal.ema(backend.asarray(x), 0.3, adjust=adjust,
                                         nan_policy=nan_policy))
    np.testing.assert_array_equal(result[0, 2:5], np.inf)
    assert np.isnan(result[0, 5:]).all()
    second = (0.7 * 1.0 + 1.0 * 2.0) / 1.7 if adjust else 0.7 * 1.0 + 0.3 * 2.0
    np.testing.assert_allclose(result[0, :2], [1.0, second])


def test_ema_omits_missing_per_channel_and_time_varying(backend):
    """nan_policy="omit" with one alpha per channel, one per step, complex signals, and
    the documented weights: after a gap, ``(1 - alpha)^2`` and ``alpha`` for [x0, nan, x2]
    with adjust=False, and ``(1 - alpha)^2`` and 1 with adjust=True."""
    rng = np.random.default_rng(18)
    x = with_gaps(rng, (3, 150))
    complex_ = x + 1j * np.where(np.isnan(x), 0, rng.standard_normal(x.shape))
    per_channel, varying = np.array([0.05, 0.5, 1.0]), rng.uniform(0.05, 1.0, 150)
    for adjust in (False, True):
        for ignore_na in (False, True):
            options = {"adjust": adjust, "nan_policy": "omit", "ignore_na": ignore_na}
            for alpha in (per_channel, varying):
                result = backend.to_numpy(signal.ema(backend.asarray(complex_),
                                                     backend.asarray(alpha), **options))
                for channel in range(3):
                    rates = np.broadcast_to(alpha[channel] if alpha.size == 3 else alpha, 150)
                    expected = pandas_ewm_loop(complex_[channel], rates, adjust, ignore_na)
                    np.testing.assert_allclose(result[channel], expected, rtol=1e-12,
                                               atol=1e-12)
        weights = (0.25, 1.0 if adjust else 0.5)
        documented = (weights[0] * 1.0 + weights[1] * 5.0) / sum(weights)
        result = signal.ema(backend.asarray(np.array([1.0, np.nan, 5.0])), 0.5, adjust=adjust,
                            nan_policy="omit")
        np.testing.assert_allclose(backend.to_numpy(result), [1.0, 1.0, documented],
                                   rtol=1e-15)
    # Without missing samples, omitting changes nothing.
    present = rng.standard_normal((2, 50))
    for adjust in (False, True):
        np.testing.assert_allclose(
            backend.to_numpy(signal.ema(backend.asarray(present), 0.3, adjust=adjust,
                                        nan_policy="omit")),
            backend.to_numpy(signal.ema(backend.asarray(present), 0.3, adjust=adjust)),
            rtol=1e-13)


def test_errors():
    with pytest.raises(ValueError, match=r"`sos` must have shape \(n_sections, 6\)"):
        signal.sosfilt(np.ones((2, 5)), np.ones(10))
    with pytest.raises(ValueError, match="a0"):
        signal.sosfilt([[1, 0, 0, 0, 0, 0]], np.ones(10))
    with pytest.raises(ValueError, match=r"`a\[0\]` must be non-zero"):
        signal.lfilter([1.0], [0.0, 1.0], np.ones(10))
    for b, a, shapes in (([], [1.0], r"\(0,\) and \(1,\)"), ([1.0], [], r"\(1,\) and \(0,\)"),
                         ([[1.0, 0.5]], [1.0], r"\(1, 2\) and \(1,\)"),
                         ([1.0], [[1.0, -0.5]], r"\(1,\) and \(1, 2\)")):
        message = f"`b` and `a` must be non-empty 1-D; got shapes {shapes}$"
        for function, rest, options in ((signal.lfilter, (np.ones(10),), {}),
                                        (signal.filtfilt, (np.ones(10),), {}),
                                        (signal.filtfilt, (np.ones(10),), {"method": "gust"}),
                                        (signal.lfilter_zi, (), {}),
                                        (signal.lfiltic, ([1.0],), {})):
            with pytest.raises(ValueError, match=message):
                function(b, a, *rest, **options)
    with pytest.raises(ValueError, match=r"`zi` must have shape \(3, 3\)"):
        signal.lfilter([1.0], [1.0, 0.5, 0.2, 0.1], np.ones((3, 10)), zi=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"`zi` must have shape \(1, 2\)"):
        signal.sosfilt([[1, 0, 0, 1, 0.5, 0]], np.ones(10), zi=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="`alpha` must be a scalar"):
        signal.ema(np.ones((3, 10)), np.ones(4))
    with pytest.raises(ValueError, match=r"`alpha` must be a scalar.*; got \(3, 10\)$"):
        signal.ema(np.ones((3, 4, 10)), np.ones((3, 10)))  # the mismatch not the last axis
    with pytest.raises(TypeError, match="must hold numbers"):
        signal.ema(np.array(["a", "b"]), 0.5)
    with pytest.raises(TypeError, match="`axis` must be an integer; got True"):
        signal.sosfilt([[1, 0, 0, 1, 0.5, 0]], np.ones((2, 3)), axis=True)
    with pytest.raises(TypeError, match=r"`axis` must be an integer; got 1\.0"):
        signal.ema(np.ones((2, 3)), 0.5, axis=1.0)
    for alpha, got in (("0.5", "str"), (None, "NoneType"), (True, "bool"), (0.5 + 0j, "complex"),
                       (np.array([0.5 + 0.1j, 0.3]), "dtype complex128"),
                       (np.array([True, False]), "dtype bool")):
        with pytest.raises(TypeError, match=f"`alpha` must be a real number or an array of "
                                            f"them; got {got}"):
            signal.ema(np.ones((2, 3)), alpha, axis=0)
    with pytest.raises(TypeError, match="`adjust` must be a bool; got str"):
        signal.ema(np.ones(3), 0.5, adjust="yes")
    with pytest.raises(TypeError, match="`ignore_na` must be a bool; got NoneType"):
        signal.ema(np.ones(3), 0.5, nan_policy="omit", ignore_na=None)
    with pytest.raises(ValueError, match="`nan_policy` must be 'propagate' or 'omit'; got "
                                         "'raise'"):
        signal.ema(np.ones(3), 0.5, nan_policy="raise")
    with pytest.raises(ValueError, match="needs `nan_policy='omit'`"):
        signal.ema(np.ones(3), 0.5, ignore_na=True)
    with pytest.raises(ValueError, match="`min_periods` must be non-negative; got -1"):
        signal.ema(np.ones(3), 0.5, min_periods=-1)
    with pytest.raises(TypeError, match="`min_periods` must be an integer or None; got float"):
        signal.ema(np.ones(3), 0.5, min_periods=2.0)
    with pytest.raises(TypeError, match="`x` is a masked array"):
        signal.sosfilt([[1, 0, 0, 1, 0.5, 0]], np.ma.masked_array(np.ones(3), [0, 1, 0]))
    # Masked coefficients and alphas too: their masks would be ignored just the same.
    masked = np.ma.masked_array([1.0, 0.5], [False, True])
    masked_sos = np.ma.masked_array([[1, 0, 0, 1, 0.5, 0]], [[0, 0, 0, 0, 1, 0]])
    for name, call in (("b", lambda: signal.lfilter(masked, [1.0], np.ones(3))),
                       ("a", lambda: signal.filtfilt([1.0], masked, np.ones(9))),
                       ("a", lambda: signal.lfilter_zi([1.0], masked)),
                       ("b", lambda: signal.lfiltic(masked, [1.0], [1.0])),
                       ("sos", lambda: signal.sosfilt(masked_sos, np.ones(3))),
                       ("sos", lambda: signal.sosfiltfilt(masked_sos, np.ones(9))),
                       ("sos", lambda: signal.sosfilt_zi(masked_sos)),
                       ("alpha", lambda: signal.ema(np.ones(3), masked[1:]))):
        with pytest.raises(TypeError, match=f"`{name}` is a masked array"):
            call()
    with pytest.raises(TypeError, match="`b` must be an array or a scalar; got None"):
        signal.lfilter(None, [1.0], np.ones(3))
    with pytest.raises(TypeError, match="`x` must be an array or a scalar; got None"):
        signal.lfilter([1.0], [1.0, -0.5], None)
    # A pole at z = 1: no steady state, named by where it is and what needed it.
    whole = r"the filter has a pole at z = 1 \(`a` sums to zero\): a step input has no " \
        "steady state, which "
    section = r"section 1 of `sos` has a pole at z = 1 \(`sos\[1, 3:\]` sums to zero\): a step " \
        "input has no steady state, which "
    sections = [[1, 0, 0, 1, 0.5, 0], [1, 0, 0, 1, -2, 1]]
    with pytest.raises(ValueError, match=f"^{whole}`lfilter_zi` returns$"):
        signal.lfilter_zi([1.0], [1.0, -1.0])
    with pytest.raises(ValueError, match=f"^{section}`sosfilt_zi` returns$"):
        signal.sosfilt_zi(sections)
    with pytest.raises(ValueError, match=f"^{whole}`filtfilt` starts its passes from, as "
                                         r"SciPy's does \(method=\"gust\" needs none\)$"):
        signal.filtfilt([1.0], [1.0, -1.0], np.ones(10))
    with pytest.raises(ValueError, match=f"^{section}`sosfiltfilt` starts its passes from, as "
                                         "SciPy's does$"):
        signal.sosfiltfilt(sections, np.ones(20))
    np.testing.assert_allclose(signal.filtfilt([1.0], [1.0, -1.0], np.ones(10), method="gust"),
                               ss.filtfilt([1.0], [1.0, -1.0], np.ones(10), method="gust"),
                               atol=1e-12)  # Gustafsson's needs no steady state
    for a in ([1.0, np.nan], [np.inf, 1.0]):
        with pytest.raises(ValueError, match="`a` must be finite, to be factored into poles"):
            signal.lfilter([1.0], a, np.ones(10))
        with pytest.raises(ValueError, match="`a` must be finite"):
            signal.filtfilt([1.0], a, np.ones(10), method="gust")
    with pytest.raises(ValueError, match=r"every section's denominator \(`sos\[:, 3:\]`\) "
                                         r"must be finite, to be factored into poles; got "
                                         r"\[\[1.0, nan, 0.0\]\]"):
        signal.sosfilt([[1, 0, 0, 1, np.nan, 0]], np.ones(10))
    for function in (partial(signal.sosfilt, x=np.ones(10)), signal.sosfilt_zi):  # a0 too
        with pytest.raises(ValueError, match=r"every section's denominator \(`sos\[:, 3:\]`\) "
                                             r"must be finite, to be factored into poles; got "
                                             r"\[\[inf, 1.0, 0.0\]\]"):
            function([[1, 0, 0, np.inf, 1, 0]])
    with pytest.raises(TypeError, match="`b` must hold numbers; got dtype <U1"):
        signal.lfilter(["1"], [1.0], np.ones(10))
    with pytest.raises(TypeError, match="`sos` must hold numbers; got dtype object"):
        signal.sosfilt(np.array([[1, 0, 0, 1, None, 0]], dtype=object), np.ones(10))
    if np.finfo(np.longdouble).nmant > 52:
        for args in (([1.0], [1.0, -0.5], np.ones(4, np.longdouble)),
                     (np.ones(2, np.longdouble), [1.0, -0.5], np.ones(4)),
                     ([1.0], np.array([1.0, -0.5], np.clongdouble), np.ones(4))):
            with pytest.raises(TypeError, match="which cuscan does not support"):
                signal.lfilter(*args)
        with pytest.raises(TypeError, match="`x` has dtype float128"):
            signal.ema(np.ones(4, np.longdouble), 0.5)
        with pytest.raises(TypeError, match="`zi` has dtype float128"):
            signal.sosfilt([[1, 0, 0, 1, 0.5, 0]], np.ones(4), zi=np.zeros((1, 2), np.longdouble))
    with pytest.raises(TypeError, match="`zi` must hold numbers; got dtype <U1"):
        signal.lfilter([1.0], [1.0, -0.5], np.ones(4), zi=np.array(["a"]))
    # A non-finite numerator is data, as in SciPy: it reaches the output.
    np.testing.assert_array_equal(signal.lfilter([np.nan], [1.0, -0.5], np.ones(4)),
                                  np.full(4, np.nan))


def test_coefficients_from_any_array_like():
    pandas = require("pandas")
    expected = ss.lfilter([1.0, 0.5], [1.0, -0.5], np.arange(5.0))
    for b, a in (((1, 0.5), [1, -0.5]), (pandas.Series([1.0, 0.5]), pandas.Series([1.0, -0.5])),
                 (np.array([2, 1], np.float32), np.array([2, -1]))):
        np.testing.assert_allclose(signal.lfilter(b, a, np.arange(5.0)), expected, rtol=1e-12)


@pytest.mark.parametrize("alpha", [0.0, -0.5, 1.5, float("nan")])
def test_ema_alpha_out_of_range(backend, alpha):
    x = backend.asarray(np.ones((2, 5)))
    with pytest.raises(ValueError, match=r"`alpha` must lie in \(0, 1\]"):
        signal.ema(x, alpha)
    with pytest.raises(ValueError, match=r"every `alpha` must lie in \(0, 1\]"):
        signal.ema(x, backend.asarray(np.array([0.5, alpha])))
    with pytest.raises(ValueError, match=r"every `alpha` must lie in \(0, 1\]"):
        signal.ema(x, backend.asarray(np.array([0.5, 0.5, alpha, 0.5, 0.5])))


def test_stateless_filters_with_zi(backend):
    """A pure gain (order 0) and a cascade of no sections have empty states; the latter's
    output is the signal, in an array of its own."""
    x = np.arange(5.0)
    y, zf = signal.lfilter([2.0], [1.0], backend.asarray(x), zi=backend.asarray(np.zeros(0)))
    np.testing.assert_array_equal(backend.to_numpy(y), 2 * x)
    assert backend.to_numpy(zf).shape == (0,)
    y, zf = signal.sosfilt(np.zeros((0, 6)), backend.asarray(x),
                           zi=backend.asarray(np.zeros((0, 2))))
    np.testing.assert_array_equal(backend.to_numpy(y), x)
    assert backend.to_numpy(zf).shape == (0, 2)
    y = signal.sosfilt(np.zeros((0, 6)), x)
    assert not np.shares_memory(y, x)  # an array of its own, as every filter's output


def test_empty_signal_keeps_its_state(backend):
    """A signal with no samples along the axis leaves the state as it was: zf is zi, in the
    signal's precision (SciPy 1.17 returns an uninitialised array), along either axis."""
    rng = np.random.default_rng(23)
    b, a = ss.butter(3, 0.2)
    sos = ss.butter(5, 0.2, output="sos")
    for dtype in (np.float64, np.float32, np.complex64):
        for axis in (0, 1):
            shape = [4, 4]
            shape[axis] = 0
            x = backend.asarray(np.zeros(shape, dtype))
            zi = rng.standard_normal((3, 4) if axis == 0 else (4, 3))
            zs = rng.standard_normal((3, 2, 4) if axis == 0 else (3, 4, 2))
            for (y, zf), state in ((signal.lfilter(b, a, x, axis=axis, zi=backend.asarray(zi)),
                                    zi),
                                   (signal.sosfilt(sos, x, axis=axis, zi=backend.asarray(zs)),
                                    zs)):
                assert backend.to_numpy(y).shape == tuple(shape)
                zf = backend.to_numpy(zf)
                assert zf.dtype == dtype, (zf.dtype, dtype)
                np.testing.assert_array_equal(zf, state.astype(dtype))


def test_complex_state_of_a_real_signal(backend):
    """A complex zi makes the output complex, as in SciPy (not its imaginary part dropped)."""
    rng = np.random.default_rng(19)
    x = rng.standard_normal((2, 30))
    zi = rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2))
    b, a = [0.2, 0.3, 0.1], [1.0, -0.9, 0.2]
    expected, expected_zf = ss.lfilter(b, a, x, zi=zi)
    for dtype, tolerance in ((np.float64, 1e-12), (np.float32, 1e-6)):
        y, zf = signal.lfilter(b, a, backend.asarray(x.astype(dtype)), zi=backend.asarray(zi))
        assert backend.to_numpy(y).dtype == np.result_type(dtype, np.complex64)
        assert relative_error(backend.to_numpy(y), expected) < tolerance
        assert relative_error(backend.to_numpy(zf), expected_zf) < tolerance
    sos = ss.butter(4, 0.2, output="sos")
    szi = rng.standard_normal((2, 2, 2)) + 1j * rng.standard_normal((2, 2, 2))
    y, zf = signal.sosfilt(sos, backend.asarray(x), zi=backend.asarray(szi))
    expected, expected_zf = ss.sosfilt(sos, x, zi=szi)
    assert relative_error(backend.to_numpy(y), expected) < 1e-12
    assert relative_error(backend.to_numpy(zf), expected_zf) < 1e-12


def test_lfilter_zi_broadcasts_as_scipy(backend):
    rng = np.random.default_rng(6)
    b, a = [0.2, 0.3, 0.1], [1.0, -0.9, 0.2]
    x = rng.standard_normal((3, 4, 50))
    for zi_shape in [(1, 4, 2), (3, 1, 2), (1, 1, 2)]:
        zi = rng.standard_normal(zi_shape)
        expected, expected_zf = ss.lfilter(b, a, x, zi=zi)
        result, zf = signal.lfilter(b, a, backend.asarray(x), zi=backend.asarray(zi))
        np.testing.assert_allclose(backend.to_numpy(result), expected, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(backend.to_numpy(zf), expected_zf, rtol=1e-9, atol=1e-10)
    with pytest.raises(ValueError, match="other dimensions may be 1"):
        signal.lfilter(b, a, backend.asarray(x), zi=backend.asarray(np.zeros((3, 4, 1))))
    with pytest.raises(ValueError, match="other dimensions may be 1"):
        signal.lfilter(b, a, backend.asarray(x), zi=backend.asarray(np.zeros((4, 2))))


LFILTIC_FILTERS = [
    ([1.0, 1.0], [1.0, -0.5]),
    ([0.2, 0.3, 0.1], [2.0, -0.9, 0.2, 0.1]),       # a[0] != 1, a longer than b
    ([0.5, 0.1, 0.0, 0.3, 0.2], [1.0, -0.4]),       # b longer than a
    ([1.0], [1.0, 0.0, 0.81]),
    ([1.0, -1.0], [1.0]),                            # FIR: the state holds past inputs only
    ([0.3 + 0.1j, 0.2], [1.0, -0.5j]),               # complex coefficients
]


@pytest.mark.parametrize(("b", "a"), LFILTIC_FILTERS)
def test_lfiltic_matches_scipy(backend, b, a):
    """Past outputs and inputs shorter than, as long as and longer than the filter needs,
    and the default of no past inputs."""
    rng = np.random.default_rng(21)
    for y_length, x_length in [(1, None), (5, None), (1, 1), (2, 7), (7, 2), (0, 3)]:
        y = rng.standard_normal(y_length)
        x = None if x_length is None else rng.standard_normal(x_length)
        # SciPy before 1.16 left the state of a filter with a[0] != 1 unscaled by 1/a[0]
        # (scipy/scipy#22470); the normalized filter's state is right in every version.
        expected = ss.lfiltic(np.divide(b, a[0]), np.divide(a, a[0]), y, x)
        result = backend.to_numpy(signal.lfiltic(
            b, a, backend.asarray(y), None if x is None else backend.asarray(x)))
        assert result.dtype == np.result_type(np.float64, *map(np.asarray, (b, a)))
        np.testing.assert_allclose(result, expected, rtol=1e-13, atol=1e-15)
    single = signal.lfiltic(b, a, backend.asarray(y.astype(np.float32)),
                            backend.asarray(x.astype(np.float32)))
    assert backend.to_numpy(single).dtype == (np.complex64 if np.iscomplexobj(b) else np.float32)
    mixed = signal.lfiltic(b, a, backend.asarray(y.astype(np.float32)), backend.asarray(x))
    assert backend.to_numpy(mixed).dtype == expected.dtype  # double unless both are single
    complex_y = y + 1j
    np.testing.assert_allclose(backend.to_numpy(signal.lfiltic(b, a, backend.asarray(complex_y),
                                                               backend.asarray(x))),
                               ss.lfiltic(np.divide(b, a[0]), np.divide(a, a[0]), complex_y, x),
                               rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lfiltic_continues_a_filtered_signal(backend, axis):
    """The state made from the last outputs and inputs, most recent first along the time
    axis, continues the filter exactly: filtering the rest from it gives the rest of the
    whole signal's output, channel by channel."""
    rng = np.random.default_rng(22)
    b, a = ss.cheby1(3, 1, 0.2)
    shape = [3, 4, 5]
    shape[axis] = 120
    x = rng.standard_normal(shape)
    whole = ss.lfilter(b, a, x, axis=axis)
    split = 50
    before = np.flip(x.take(range(split), axis=axis), axis)  # x[split-1], x[split-2], ...
    past = np.flip(whole.take(range(split), axis=axis), axis)
    zi = signal.lfiltic(b, a, backend.asarray(past), backend.asarray(before), axis=axis)
    assert backend.to_numpy(zi).shape == tuple(3 if k == axis % 3 else n
                                               for k, n in enumerate(shape))
    rest, _ = signal.lfilter(b, a, backend.asarray(x.take(range(split, 120), axis=axis)),
                             axis=axis, zi=zi)
    np.testing.assert_allclose(backend.to_numpy(rest), whole.take(range(split, 120), axis=axis),
                               rtol=1e-10, atol=1e-12)
    # Channel dimensions of y and x broadcast together: one past input for every channel.
    shared = np.take(before, [0], axis=(axis + 1) % 3)
    broadcast = signal.lfiltic(b, a, backend.asarray(past), backend.asarray(shared), axis=axis)
    expected = signal.lfiltic(b, a, past, np.broadcast_to(shared, before.shape), axis=axis)
    np.testing.assert_allclose(backend.to_numpy(broadcast), expected, rtol=1e-14)


def test_lfiltic_edges_and_errors(backend):
    zi = signal.lfiltic([2.0], [1.0], backend.asarray(np.ones(3)))  # a pure gain: no state
    assert backend.to_numpy(zi).shape == (0,)
    for axis, shape in ((0, (0, 4, 2)), (1, (3, 0, 2)), (-1, (3, 4, 0))):  # and its channels
        zi = signal.lfiltic([2.0], [1.0], backend.asarray(np.ones((3, 4, 2))), axis=axis)
        assert backend.to_numpy(zi).shape == shape, axis
    zi = signal.lfiltic([1.0], [1.0, -0.5], backend.asarray(np.float64(4.0)))  # a scalar y[-1]
    np.testing.assert_allclose(backend.to_numpy(zi), [2.0])
    with pytest.raises(ValueError, match=r"`y` and `x` must have the same number of dimensions; "
                                         r"got shapes \(2, 3\) and \(3,\)"):
        signal.lfiltic([1.0, 1.0], [1.0, -0.5], backend.asarray(np.ones((2, 3))),
                       backend.asarray(np.ones(3)))
    with pytest.raises(ValueError, match=r"`y` and `x` must broadcast together beside axis 0; "
                                         r"got shapes \(2, 3\) and \(2, 5\)"):
        signal.lfiltic([1.0, 1.0], [1.0, -0.5], backend.asarray(np.ones((2, 3))),
                       backend.asarray(np.ones((2, 5))), axis=0)
    with pytest.raises(ValueError, match=r"`a\[0\]` must be non-zero"):
        signal.lfiltic([1.0], [0.0, 1.0], backend.asarray(np.ones(1)))
    with pytest.raises(TypeError, match="`y` must be an array or a scalar; got None"):
        signal.lfiltic([1.0], [1.0, 0.5], None)
    with pytest.raises(TypeError, match="`x` must hold numbers"):
        signal.lfiltic([1.0], [1.0, 0.5], np.ones(1), np.array(["a"]))
    with pytest.raises(ValueError, match="axis"):
        signal.lfiltic([1.0], [1.0, 0.5], backend.asarray(np.ones((2, 1))), axis=2)


PADS = [("odd", None), ("even", None), ("constant", None), (None, None), ("odd", 0),
        ("even", 1), ("constant", 37), ("odd", 299)]


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize(("kind", "cutoff"), [BANDS[1], BANDS[2], BANDS[4], BANDS[7]])
def test_sosfiltfilt_matches_scipy(backend, design, kind, cutoff):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 300))
    for order in (1, 2, 5, 8, 12):
        sos = DESIGNS[design](order, cutoff, kind)
        for padtype, padlen in PADS:
            expected = ss.sosfiltfilt(sos, x, padtype=padtype, padlen=padlen)
            for dtype in (np.float64, np.float32):
                result = backend.to_numpy(signal.sosfiltfilt(
                    sos, backend.asarray(x.astype(dtype)), padtype=padtype, padlen=padlen))
                assert result.dtype == dtype
                error = relative_error(result, expected)
                assert error <= BOUND[dtype], (order, padtype, padlen, dtype, error)


@pytest.mark.parametrize(("b", "a"), [
    ([0.2, 0.3, 0.1], [1.0, -0.9, 0.2]),   # real poles
    ([1.0, 0.5], [2.0, -1.0, 0.8]),        # a conjugate pair, a[0] != 1
    ([0.25, 0.25, 0.25, 0.25], [1.0]),     # FIR
    ([3.0], [2.0]),                        # a pure gain (SciPy raises)
    ([1.0, 2.0, 3.0, 4.0], [1.0, -0.5]),   # b longer than a
])
@pytest.mark.parametrize(("padtype", "padlen"), PADS[:6])
def test_filtfilt_matches_scipy(backend, b, a, padtype, padlen):
    x = np.random.default_rng(13).standard_normal((3, 300))
    if len(a) == len(b) == 1:
        expected = (b[0] / a[0]) ** 2 * x
    else:
        expected = ss.filtfilt(b, a, x, padtype=padtype, padlen=padlen)
    result = backend.to_numpy(signal.filtfilt(b, a, backend.asarray(x), padtype=padtype,
                                              padlen=padlen))
    np.testing.assert_allclose(result, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_integer_signals_padded_without_wrapping(backend, dtype):
    """An integer signal is padded in float64: SciPy's odd extension ``2 x[0] - x[k]`` is
    computed in the signal's own type, and wraps around beyond its range."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(52)
    x = rng.integers(info.min, info.max, (2, 40), endpoint=True).astype(dtype)
    x[:, 0], x[:, 1] = info.max, info.min  # 2 x[0] - x[1] is three times the range
    b, a = ss.butter(3, 0.2)
    sos = ss.butter(3, 0.2, output="sos")
    exact = x.astype(np.float64)
    for padtype in ("odd", "even", "constant"):
        for result, expected in (
                (signal.filtfilt(b, a, backend.asarray(x), padtype=padtype),
                 ss.filtfilt(b, a, exact, padtype=padtype)),
                (signal.sosfiltfilt(sos, backend.asarray(x), padtype=padtype),
                 ss.sosfiltfilt(sos, exact, padtype=padtype))):
            result = backend.to_numpy(result)
            assert result.dtype == np.float64
            np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12 * info.max)


def test_padding_into_scratch():
    """A NumPy signal's padding, written into a pooled array, is the padding the frameworks'
    signals get (by flips and a concatenation): every padtype and length, along every axis,
    on reversed views, up to one sample short of the signal."""
    from cuscan._scratch import Scratch
    from cuscan.signal._filters import _NUMPY

    rng = np.random.default_rng(41)
    for shape, axis in (((20,), 0), ((5, 7), 1), ((7, 5), 0), ((3, 4, 9), 1), ((3, 4, 9), 2)):
        x = rng.standard_normal(shape)
        for signal_x in (x, np.flip(x)):
            for padtype in ("odd", "even", "constant"):
                for edge in range(1, shape[axis]):
                    expected = _filtfilt._padded(_NUMPY, signal_x, axis, padtype, edge)
                    with Scratch() as scratch:
                        padded = _filtfilt._padded(_NUMPY, signal_x, axis, padtype, edge, scratch)
                        np.testing.assert_array_equal(padded, expected)


def gustafsson(b, a, x):
    """Gustafsson's method from its definition, with explicit matrices, for a 1-D ``x``:
    the states ``s = (s0, s1)`` of the forward and backward passes minimise the distance
    between forward-backward and backward-forward filtering started from them."""
    n, order = x.size, max(len(a), len(b)) - 1
    forward = ss.lfilter(b, a, np.eye(n), axis=0)
    states = np.array([ss.lfilter(b, a, np.zeros(n), zi=np.eye(order)[k])[0]
                       for k in range(order)]).reshape(order, n).T  # each unit state's output
    flip = np.eye(n)[::-1]
    backward = flip @ forward @ flip
    fb_effect = np.hstack([backward @ states, flip @ states])
    bf_effect = np.hstack([states, forward @ flip @ states])
    fb, bf = backward @ forward @ x, forward @ backward @ x
    s = np.linalg.lstsq(fb_effect - bf_effect, bf - fb, rcond=None)[0]
    return fb + fb_effect @ s


GUST_FILTERS = [
    ([0.2, 0.3, 0.1], [1.0, -0.9, 0.2]),        # real poles
    ([1.0, 0.5], [2.0, -1.0, 0.8]),             # a conjugate pair, a[0] != 1
    ([0.25, 0.25, 0.25, 0.25], [1.0]),          # FIR
    ([3.0], [2.0]),                             # a pure gain
    ([1.0, 2.0, 3.0, 4.0], [1.0, -0.5]),        # b longer than a
    ss.cheby1(4, 1, 0.05),                      # slow decay: the fit spans the signal
    ss.butter(6, 0.2),                          # more states than samples or than irlen
]


def test_filtfilt_gust_long_signal(backend):
    """On a signal much longer than the filter's response, the states are fitted to its
    ends only, with the result of SciPy's fit to the whole signal."""
    x = np.random.default_rng(26).standard_normal((2, 50_000))
    for b, a in (ss.butter(2, 0.01), ss.cheby1(2, 1, 0.002)):
        expected = ss.filtfilt(b, a, x, method="gust")
        result = backend.to_numpy(signal.filtfilt(b, a, backend.asarray(x), method="gust"))
        assert relative_error(result, expected) <= 1e-9


def test_response_length_to_rounding():
    """Gustafsson's default ``irlen`` (`_response_length`): the samples until the response
    to the first state stays below double precision's rounding of its peak, then the
    filter's order (the last state enters that much later), at most the signal's length;
    against the response computed over 400,000 samples, for a pole, a FIR filter (b longer
    than a), a resonant pair whose peak is 86 times its first sample, and designs of order
    4 and 6. A pole on the unit circle never decays: the whole length."""
    r, theta = 0.999, 0.01
    filters = [([1.0], [1.0, -0.5]), ([1.0, 2.0, 3.0, 4.0], [1.0, -0.9]), ([0.2] * 5, [1.0]),
               ([1.0], [1.0, -2 * r * np.cos(theta), r * r]), ss.cheby1(4, 1, 0.05),
               ss.butter(6, 0.2)]
    impulse = np.zeros(400_000)
    impulse[0] = 1
    for b, a in filters:
        b, a = np.asarray(b, np.float64), np.asarray(a, np.float64)
        response = np.abs(ss.lfilter([1.0], a, impulse))
        last = np.flatnonzero(response > np.finfo(np.float64).eps * response.max())[-1] + 1
        for length in (10, 1000, 200_000):
            expected = min(length, last + max(a.size, b.size) - 1)
            assert _filtfilt._response_length(b, a, length) == expected, (b, a, length)
    assert _filtfilt._response_length(np.ones(1), np.array([1.0, -1.0]), 5000) == 5000


@pytest.mark.parametrize(("b", "a"), GUST_FILTERS)
def test_filtfilt_gust_matches_scipy(backend, b, a):
    """Lengths from 1 (fewer samples than states) up, with the whole signal fitted and
    with the impulse response cut at irlen (fitted at both ends, or whole when at most
    2 irlen long, as SciPy); a channel holding an infinity or NaN (SciPy's fit raises) is
    not finite where it reaches, and the other is SciPy's alone."""
    rng = np.random.default_rng(24)
    for length, irlen in [(1, None), (2, None), (3, None), (7, None), (257, None), (257, 1),
                          (257, 3), (257, 20), (257, 128), (257, 129), (256, 128), (1000, 300)]:
        for dtype in (np.float64, np.float32):
            x = rng.standard_normal((2, length)).astype(dtype)
            expected = ss.filtfilt(b, a, x.astype(np.float64), method="gust", irlen=irlen)
            result = backend.to_numpy(signal.filtfilt(b, a, backend.asarray(x), method="gust",
                                                      irlen=irlen))
            assert result.dtype == dtype
            # few samples can be filtered to (almost) nothing: relative to the larger scale
            scale = max(np.sqrt(np.mean(x.astype(np.float64) ** 2)), np.max(np.abs(expected)))
            error = np.max(np.abs(result - expected)) / scale
            assert error <= (1e-9 if dtype == np.float64 else 1e-6), (length, irlen, dtype)
    for length in (1, 3, 30):  # against the definition
        x = rng.standard_normal(length)
        result = signal.filtfilt(b, a, backend.asarray(x), method="gust")
        np.testing.assert_allclose(backend.to_numpy(result), gustafsson(b, a, x), rtol=0,
                                   atol=1e-9 * np.sqrt(np.mean(x ** 2)))
    for length, at in ((30, 0), (300, 150), (300, 299)):  # SciPy's fit raises here
        x = rng.standard_normal((2, length))
        for bad in (np.nan, np.inf):
            x[0, at] = bad
            result = backend.to_numpy(signal.filtfilt(b, a, backend.asarray(x), method="gust"))
            # every output of a recursive filter's channel; a FIR filter's near the sample
            spread = result[0] if len(a) > 1 else result[0, at]
            assert not np.isfinite(spread).any(), (length, at, bad)
            np.testing.assert_allclose(result[1], ss.filtfilt(b, a, x[1], method="gust"),
                                       rtol=0, atol=1e-9 * np.sqrt(np.mean(x[1] ** 2)))


@pytest.mark.parametrize(("b", "a"), [ss.butter(4, 0.02), ss.butter(2, [0.01, 0.03], "bandpass"),
                                    ss.bessel(4, 0.02), ss.cheby1(4, 1, 0.05),
                                    ss.ellip(2, 1, 40, [0.02, 0.05], "bandpass")])
def test_filtfilt_gust_exact(backend, b, a):
    """On signals shorter than the filter's response, where the least-squares fit of the
    states is ill-conditioned, against the fit computed with 40 digits (SciPy's own
    float64 result is off by up to 5e-8 of the output's RMS on these; cuscan's by 2e-10)."""
    pytest.importorskip("mpmath")
    rng = np.random.default_rng(27)
    for length in (100, 250):
        x = rng.standard_normal(length)
        result = backend.to_numpy(signal.filtfilt(b, a, backend.asarray(x), method="gust"))
        assert relative_error(result, gustafsson_exact(b, a, x)) <= BOUND[np.float64]


def test_filtfilt_gust_complex(backend):
    """Complex filters (whose states SciPy's implementation truncates to real, warning) and
    complex signals, on every axis, against the definition."""
    rng = np.random.default_rng(25)
    for b, a in (([0.3 + 0.1j, 0.2], [1.0, -0.5j]), ss.butter(3, 0.3)):
        x = rng.standard_normal((5, 3, 23)) + 1j * rng.standard_normal((5, 3, 23))
        expected = np.apply_along_axis(lambda v, b=b, a=a: gustafsson(b, a, v), -1, x)
        for axis in (0, 1, 2):
            moved = np.moveaxis(x, -1, axis)
            result = backend.to_numpy(signal.filtfilt(b, a, backend.asarray(moved), axis=axis,
                                                      method="gust"))
            assert result.dtype == np.complex128
            np.testing.assert_allclose(np.moveaxis(result, axis, -1), expected, rtol=1e-9,
                                       atol=1e-12)
    empty = signal.filtfilt(b, a, backend.asarray(np.zeros((2, 0))), method="gust")
    assert backend.to_numpy(empty).shape == (2, 0)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_zero_phase_any_axis_and_complex(backend, axis):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((31, 40, 33)) + 1j * rng.standard_normal((31, 40, 33))
    sos = ss.cheby2(5, 50, 0.2, output="sos")
    b, a = ss.butter(3, 0.3)
    for name, result, expected in [
            ("sosfiltfilt", signal.sosfiltfilt(sos, backend.asarray(x), axis=axis),
             ss.sosfiltfilt(sos, x, axis=axis)),
            ("filtfilt", signal.filtfilt(b, a, backend.asarray(x), axis=axis),
             ss.filtfilt(b, a, x, axis=axis)),
            ("filtfilt complex64", signal.filtfilt(b, a, backend.asarray(
                x.astype(np.complex64)), axis=axis, padtype="even", padlen=5),
             ss.filtfilt(b, a, x, axis=axis, padtype="even", padlen=5))]:
        result = backend.to_numpy(result)
        assert result.dtype == (np.complex64 if "64" in name else np.complex128)
        assert relative_error(result, expected) <= (1e-6 if "64" in name else 1e-10), name


@pytest.mark.parametrize(("shape", "axis"), [((12, 300), -1), ((2, 9, 301), 2),
                                           ((3, 30011), -1), ((257, 20, 3), 0), ((5, 300), 1)])
def test_time_contiguous_layouts(backend, shape, axis):
    """Long time-contiguous signals, which the NumPy backend filters in a time-major copy
    (each filter copying once each way) where the filter does not run in chunks (as a
    complex filter's), and layouts it filters as they are (few channels of many steps by
    the blocked scan): results, states and errors as SciPy's, in the caller's layout."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal(shape)
    if len(shape) == 3:
        x = x + 1j * rng.standard_normal(shape)
    sos = ss.cheby1(6, 0.5, 0.1, output="sos")
    b, a = ss.ellip(3, 1, 40, 0.2)
    complex_sos = sos * np.array([1 - 0.3j, 1 - 0.3j, 1 - 0.3j, 1, 1, 1])
    state = list(shape)
    state[axis] = 3
    zi = rng.standard_normal(state)
    sos_zi = rng.standard_normal((3, *state[:axis % x.ndim], 2, *state[axis % x.ndim + 1:]))
    cases = [
        ("lfilter", signal.lfilter(b, a, backend.asarray(x), axis=axis, zi=backend.asarray(zi)),
         ss.lfilter(b, a, x, axis=axis, zi=zi)),
        ("sosfilt", signal.sosfilt(sos, backend.asarray(x), axis=axis,
                                   zi=backend.asarray(sos_zi)),
         ss.sosfilt(sos, x, axis=axis, zi=sos_zi)),
        ("complex lfilter", signal.lfilter(b * (1 + 0.5j), a, backend.asarray(x), axis=axis,
                                           zi=backend.asarray(zi)),
         ss.lfilter(b * (1 + 0.5j), a, x, axis=axis, zi=zi)),
        ("complex sosfilt", signal.sosfilt(complex_sos, backend.asarray(x), axis=axis,
                                           zi=backend.asarray(sos_zi)),
         ss.sosfilt(complex_sos, x, axis=axis, zi=sos_zi)),
        ("filtfilt", (signal.filtfilt(b, a, backend.asarray(x), axis=axis),),
         (ss.filtfilt(b, a, x, axis=axis),)),
        ("gust", (signal.filtfilt(b, a, backend.asarray(x), axis=axis, method="gust",
                                  irlen=40),),
         (ss.filtfilt(b, a, x, axis=axis, method="gust", irlen=40),)),
        ("sosfiltfilt", (signal.sosfiltfilt(sos, backend.asarray(x), axis=axis),),
         (ss.sosfiltfilt(sos, x, axis=axis),))]
    for name, results, expected in cases:
        for result, want in zip(results, expected, strict=True):
            result = backend.to_numpy(result)
            assert result.shape == want.shape, name
            assert relative_error(result, want) <= BOUND[np.float64], name
    length = shape[axis]
    with pytest.raises(ValueError, match=f"longer along axis {axis % x.ndim} than the padding, "
                                         f"{length} samples; got {length}"):
        signal.sosfiltfilt(sos, backend.asarray(x), axis=axis, padlen=length)


def test_time_major_copies_where_the_numpy_backend_would():
    """The layouts test_time_contiguous_layouts covers: copied once, or filtered as they are."""
    from cuscan.signal._arrays import _Arrays

    arrays, x = _Arrays(np), np.ones((12, 300))
    moved = arrays.time_major(x, 1)
    assert moved.shape == (300, 12)
    assert moved.flags.c_contiguous
    assert arrays.time_major(np.ones((2, 9, 301)), 2) is not None
    assert arrays.time_major(np.ones((257, 20, 3)), 0) is None  # time is already first
    assert arrays.time_major(np.ones((5, 300)), 1) is None  # rows of 80 bytes: as they are
    assert arrays.time_major(np.ones((12, 255)), 1) is None  # too short to pay for copies


def test_zero_phase_errors(backend):
    sos = ss.butter(4, 0.1, output="sos")  # 2 sections: SciPy's padding is 15 samples
    x = backend.asarray(np.ones((2, 15)))
    with pytest.raises(ValueError, match=r"longer along axis 1 than the padding, 15 samples "
                                         r"\(3 times the filter's 5 taps\); got 15"):
        signal.sosfiltfilt(sos, x)
    with pytest.raises(ValueError, match=r"padding, 15 samples; got 15"):
        signal.sosfiltfilt(sos, x, padlen=15)
    with pytest.raises(ValueError, match="at least one sample along axis 0; got none"):
        signal.filtfilt([1.0], [1.0, -0.5], backend.asarray(np.ones((0, 3))), axis=0,
                        padtype=None)
    with pytest.raises(ValueError, match=r"`padtype` must be 'odd', 'even', 'constant' or "
                                         r"None; got 'zero'"):
        signal.sosfiltfilt(sos, x, padtype="zero")
    with pytest.raises(ValueError, match="`padlen` must be non-negative; got -1"):
        signal.sosfiltfilt(sos, x, padlen=-1)
    with pytest.raises(TypeError, match="`padlen` must be an integer or None; got float"):
        signal.filtfilt([1.0], [1.0, -0.5], x, padlen=2.0)
    with pytest.raises(ValueError, match=r"`method` must be 'pad' or 'gust'; got 'Gust'"):
        signal.filtfilt([1.0], [1.0, -0.5], x, method="Gust")
    for irlen, error, got in ((0, ValueError, "positive; got 0"), (-3, ValueError, "positive"),
                              (2.0, TypeError, "an integer or None; got float"),
                              (True, TypeError, "an integer or None; got bool")):
        with pytest.raises(error, match=f"`irlen` must be {got}"):
            signal.filtfilt([1.0], [1.0, -0.5], x, method="gust", irlen=irlen)
    np.testing.assert_allclose(backend.to_numpy(signal.sosfiltfilt(sos, x, padlen=14)), 1.0)


class Framework:
    """A framework's tensors on one device: conversion both ways and gradients."""

    def __init__(self, name: str, device: str):
        self.name, self.device = name, device
        self.module = require({"torch": "torch", "jax": "jax", "tf": "tensorflow"}[name])

    def tensor(self, array):
        if self.name == "torch":
            return self.module.as_tensor(array, device=self.device)
        if self.name == "jax":
            return self.module.device_put(array, self.module.devices(self.device)[0])
        with self.module.device(self.device):
            return self.module.constant(array)

    def array(self, tensor) -> np.ndarray:
        if self.name == "torch":
            return tensor.detach().cpu().numpy()
        return np.asarray(tensor)

    def is_native(self, value) -> bool:
        kinds = {"torch": "torch.Tensor", "jax": "jax.Array", "tf": "tensorflow.Tensor"}
        module, _, name = kinds[self.name].rpartition(".")
        return isinstance(value, getattr(require(module), name))

    def grad(self, function, *arrays) -> list[np.ndarray]:
        """The gradients of the scalar ``function`` with respect to each array."""
        tensors = [self.tensor(a) for a in arrays]
        if self.name == "torch":
            tensors = [t.requires_grad_() for t in tensors]
            function(*tensors).backward()
            return [self.array(t.grad) for t in tensors]
        if self.name == "jax":
            jax = self.module
            grads = jax.jit(jax.grad(function, argnums=tuple(range(len(tensors)))))(*tensors)
            return [np.asarray(g) for g in grads]
        tf = self.module
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = function(*tensors)
        return [g.numpy() for g in tape.gradient(value, tensors)]

    def where_finite(self, value):
        """``value`` with NaN replaced by zero (and no NaN in its gradient)."""
        if self.name == "torch":
            return self.module.where(self.module.isnan(value), 0.0, value)
        if self.name == "jax":
            return self.module.numpy.where(self.module.numpy.isnan(value), 0.0, value)
        tf = self.module
        return tf.where(tf.math.is_nan(value), tf.zeros_like(value), value)

    def total(self, value):
        return (self.module.reduce_sum if self.name == "tf" else lambda v: v.sum())(value)


FRAMEWORKS = [("torch", "cpu"), ("jax", "cpu"), ("tf", "CPU"),
              pytest.param(("torch", "cuda"), marks=pytest.mark.gpu),
              pytest.param(("jax", "gpu"), marks=pytest.mark.gpu)]


@pytest.fixture(params=FRAMEWORKS, ids=lambda p: "-".join(p))
def framework(request):
    name, device = request.param
    if device in ("cuda", "gpu"):
        from tests.conftest import _gpu_available
        if not _gpu_available():
            pytest.skip("needs CuPy and a CUDA GPU")
    fw = Framework(name, device)
    if name == "jax":
        with fw.module.enable_x64(True):
            yield fw
    else:
        yield fw


def test_framework_tensors_match_scipy(framework):
    """Tensors in, the same framework's tensors out, with SciPy's values and dtypes (integer
    and bool signals filtered in double precision)."""
    pandas = require("pandas")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 500))
    sos = ss.cheby1(6, 1, 0.05, output="sos")
    zi = rng.standard_normal((3, 3, 2))
    y, zf = signal.sosfilt(sos, framework.tensor(x), zi=framework.tensor(zi))
    expected, expected_zf = ss.sosfilt(sos, x, zi=zi)
    assert framework.is_native(y)
    assert framework.is_native(zf)
    assert relative_error(framework.array(y), expected) < BOUND[np.float64]
    assert relative_error(framework.array(zf), expected_zf) < BOUND[np.float64]
    b, a = ss.butter(3, 0.2)
    lzi = rng.standard_normal((3, 1))  # broadcast over the channels, as SciPy does
    y, zf = signal.lfilter(b, a, framework.tensor(x.T), axis=0, zi=framework.tensor(lzi))
    expected, expected_zf = ss.lfilter(b, a, x.T, axis=0, zi=np.broadcast_to(lzi, (3, 3)))
    np.testing.assert_allclose(framework.array(y), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(framework.array(zf), expected_zf, rtol=1e-10, atol=1e-12)
    single = signal.sosfilt(sos, framework.tensor(x.astype(np.float32)))
    assert framework.array(single).dtype == np.float32
    assert relative_error(framework.array(single), ss.sosfilt(sos, x)) < BOUND[np.float32]
    for values in (np.round(100 * x).astype(np.int16), np.round(100 * x).astype(np.int64),
                   np.round(100 * abs(x)).astype(np.uint8), x > 0):  # in double precision
        for got, expected in ((signal.sosfilt(sos, framework.tensor(values)),
                               ss.sosfilt(sos, values)),
                              (signal.lfilter(b, a, framework.tensor(values)),
                               ss.lfilter(b, a, values.astype(np.float64)))):
            assert framework.array(got).dtype == np.float64
            assert relative_error(framework.array(got), expected) < BOUND[np.float64]
    alpha = np.array([0.1, 0.5, 0.9])
    complex_ = x + 1j * x[::-1]
    for given in (0.1, framework.tensor(alpha)):
        rates = np.full(3, 0.1) if isinstance(given, float) else alpha
        for adjust in (False, True):
            result = framework.array(signal.ema(framework.tensor(x), given, adjust=adjust))
            mixed = framework.array(signal.ema(framework.tensor(complex_), given, adjust=adjust))
            for channel in range(3):
                for signal_, got in ((x, result), (complex_, mixed)):
                    ewm = [pandas.Series(part[channel]).ewm(alpha=rates[channel],
                                                            adjust=adjust).mean()
                           for part in (signal_.real, signal_.imag)]
                    np.testing.assert_allclose(got[channel], ewm[0] + 1j * ewm[1], rtol=1e-12,
                                               atol=1e-12)


def test_framework_ema_omits_complex_samples_missing_in_either_part(framework):
    """With nan_policy="omit", a complex sample whose real part, imaginary part or both
    are NaN is missing, in every framework as in NumPy: the average holds its value there."""
    rng = np.random.default_rng(24)
    x = rng.standard_normal((3, 30)) + 1j * rng.standard_normal((3, 30))
    missing = {(0, 5): complex(np.nan, 1.0), (1, 9): complex(2.0, np.nan),
               (2, 20): complex(np.nan, np.nan)}
    for at, value in missing.items():
        x[at] = value
    for adjust in (False, True):
        expected = signal.ema(x, 0.3, adjust=adjust, nan_policy="omit")
        assert np.isfinite(expected).all()
        for channel, step in missing:
            assert expected[channel, step] == expected[channel, step - 1]
        result = signal.ema(framework.tensor(x), 0.3, adjust=adjust, nan_policy="omit")
        np.testing.assert_allclose(framework.array(result), expected, rtol=1e-12, atol=1e-12)


def test_framework_ema_scalar_alphas(framework):
    """``alpha`` as any real scalar (a Python int, a NumPy integer or float of any width, a
    fraction) is the float it equals, on NumPy arrays and tensors alike: the average keeps the
    signal's dtype and gives pandas' values for that float."""
    pandas = require("pandas")
    x = np.random.default_rng(41).standard_normal((2, 40))
    for alpha, adjust in itertools.product(
            (1, np.int64(1), np.uint8(1), np.float32(0.3), np.float16(0.25),
             fractions.Fraction(1, 4)), (False, True)):
        expected = pandas.DataFrame(x.T).ewm(alpha=float(alpha), adjust=adjust).mean()
        for dtype, rtol in ((np.float64, 1e-11), (np.float32, 1e-5)):
            given = x.astype(dtype)
            want = signal.ema(given, float(alpha), adjust=adjust)
            assert want.dtype == dtype
            np.testing.assert_allclose(want, expected.to_numpy().T, rtol=rtol, atol=rtol)
            got = signal.ema(given, alpha, adjust=adjust)
            assert got.dtype == dtype, (alpha, adjust)
            np.testing.assert_array_equal(got, want)
            got = signal.ema(framework.tensor(given), alpha, adjust=adjust)
            assert framework.is_native(got)
            assert framework.array(got).dtype == dtype, (alpha, adjust)
            np.testing.assert_allclose(framework.array(got), want, rtol=rtol / 10, atol=rtol / 10)


def test_framework_ema_alpha_tensor_beside_a_numpy_signal(framework):
    """An alpha tensor with a NumPy signal: the framework's result, differentiable with
    respect to alpha, in JAX and TensorFlow (whose operators take NumPy arrays); refused in
    torch (whose do not), as a tensor decay with NumPy impulses is. The alpha had been
    converted to NumPy, its gradient lost without a word."""
    x = np.random.default_rng(43).standard_normal((2, 30))
    weights = np.random.default_rng(44).standard_normal((2, 30))
    alpha = np.array([[0.2], [0.7]])
    if framework.name == "torch":
        with pytest.raises(TypeError, match="`x` is a numpy array, `alpha` is a torch array"):
            signal.ema(x, framework.tensor(alpha))
        return
    y = signal.ema(x, framework.tensor(alpha), adjust=True)
    assert framework.is_native(y)
    np.testing.assert_allclose(framework.array(y), signal.ema(x, alpha, adjust=True),
                               rtol=1e-12)
    [got] = framework.grad(lambda a: framework.total(signal.ema(x, a, adjust=True) * weights),
                           alpha)
    [want] = framework.grad(lambda v, a: framework.total(
        signal.ema(v, a, adjust=True) * framework.tensor(weights)), x, alpha)[1:]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(got != 0)


@pytest.mark.parametrize("dtype", ["float16", "float32", "complex64", "int16", "uint8", "bool"])
def test_framework_coefficient_dtypes(framework, dtype):
    """Coefficient tensors filter as NumPy coefficients of their dtype do: the same values
    and the same result dtype (single-precision ones are not made complex or wider)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        b, a = np.array([1, 0, 1]), np.array([1])
    elif dtype.kind in "iu":
        b, a = np.array([1, 2, 1]), np.array([1, 1])
    else:
        b, a = ss.butter(2, 0.3)
    b, a = b.astype(dtype), a.astype(dtype)
    sos = np.concatenate([b, np.zeros(3 - b.size, dtype), a, np.zeros(3 - a.size, dtype)])[None]
    x = framework.tensor(np.random.default_rng(12).standard_normal((2, 40)).astype(np.float32))
    for name, coefficients in (("lfilter", (b, a)), ("sosfilt", (sos,)),
                               ("filtfilt", (b, a))):
        function = getattr(signal, name)
        got = framework.array(function(*map(framework.tensor, coefficients), x))
        expected = framework.array(function(*coefficients, x))
        assert got.dtype == expected.dtype, name
        assert np.isfinite(got).all(), name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_framework_gradients(framework):
    """Gradients with respect to the signal and the initial state equal the exact ones
    (the filter is linear in both: unit steps give them), and with respect to ema's alpha
    the central differences."""
    rng = np.random.default_rng(10)
    x, zi = rng.standard_normal((2, 9)), rng.standard_normal((2, 2, 2))
    sos = ss.ellip(4, 1, 40, 0.2, output="sos")
    weights, state_weights = rng.standard_normal((2, 9)), rng.standard_normal((2, 2, 2))

    def loss(y, zf, total=framework.total, mine=True):
        scale = (framework.tensor(weights), framework.tensor(state_weights)) if mine else (
            weights, state_weights)
        return total(y * scale[0]) + total(zf * scale[1])

    grads = framework.grad(lambda x, zi: loss(*signal.sosfilt(sos, x, zi=zi)), x, zi)
    base = loss(*ss.sosfilt(sos, x, zi=zi), total=np.sum, mine=False)
    for index, (array, grad) in enumerate(zip((x, zi), grads, strict=True)):
        exact = np.zeros_like(array)
        for at in np.ndindex(array.shape):
            stepped = [x.copy(), zi.copy()]
            stepped[index][at] += 1.0
            exact[at] = loss(*ss.sosfilt(sos, stepped[0], zi=stepped[1]), total=np.sum,
                             mine=False) - base
        np.testing.assert_allclose(grad, exact, rtol=1e-9, atol=1e-9 * np.abs(exact).max())

    alpha = np.array([0.2, 0.7])
    grad_x, grad_alpha = framework.grad(
        lambda x, alpha: framework.total(signal.ema(x, alpha) * framework.tensor(weights)),
        x, alpha)
    [grad_adjusted] = framework.grad(lambda alpha: framework.total(signal.ema(
        framework.tensor(x), alpha, adjust=True) * framework.tensor(weights)), alpha)

    for adjust, grad in ((False, grad_alpha), (True, grad_adjusted)):
        def numeric(values, adjust=adjust):
            return np.sum(signal.ema(x, values, adjust=adjust) * weights)

        for channel in range(2):
            step = np.zeros(2)
            step[channel] = 1e-6
            central = (numeric(alpha + step) - numeric(alpha - step)) / 2e-6
            np.testing.assert_allclose(grad[channel], central, rtol=1e-6)
    # Omitting missing samples: no NaN reaches the gradients, which are zero for the
    # missing samples and match central differences for alpha.
    gappy = x.copy()
    gappy[:, [0, 3, 4]] = np.nan
    for adjust in (False, True):
        def omitting(x, alpha, adjust=adjust, total=framework.total, mine=True):
            y = signal.ema(x, alpha, adjust=adjust, nan_policy="omit")
            w = framework.tensor(np.where(np.isnan(gappy), 0.0, weights)) if mine else (
                np.where(np.isnan(gappy), 0.0, weights))
            return total(framework.where_finite(y) * w) if mine else np.nansum(y * w)

        grad_gappy, grad_rate = framework.grad(omitting, gappy, alpha)
        assert np.isfinite(grad_gappy).all()
        np.testing.assert_array_equal(grad_gappy[np.isnan(gappy)], 0.0)
        base = omitting(gappy, alpha, total=np.sum, mine=False)
        for at in zip(*np.nonzero(~np.isnan(gappy)), strict=True):  # linear in x
            stepped = gappy.copy()
            stepped[at] += 1.0
            exact = omitting(stepped, alpha, total=np.sum, mine=False) - base
            np.testing.assert_allclose(grad_gappy[at], exact, rtol=1e-9, atol=1e-12)
        for channel in range(2):
            step = np.zeros(2)
            step[channel] = 1e-6
            central = (omitting(gappy, alpha + step, total=np.sum, mine=False)
                       - omitting(gappy, alpha - step, total=np.sum, mine=False)) / 2e-6
            np.testing.assert_allclose(grad_rate[channel], central, rtol=1e-6)
    # ema is linear in x: y = sum_k weight_k x_k
    exact = np.zeros_like(x)
    for at in np.ndindex(x.shape):
        stepped = x.copy()
        stepped[at] += 1.0
        exact[at] = np.sum((signal.ema(stepped, alpha) - signal.ema(x, alpha)) * weights)
    np.testing.assert_allclose(grad_x, exact, rtol=1e-10, atol=1e-12)


def test_tensorflow_variables_are_differentiated():
    """tf.Variable and Keras variables (a learned signal or alpha) are read where the tape
    sees them, not copied into constants."""
    tf = require("tensorflow")
    rng = np.random.default_rng(19)
    x, weights = rng.standard_normal((2, 30)), rng.standard_normal((2, 30))
    sos = ss.butter(2, 0.3, output="sos")
    signal_, alpha = tf.Variable(x), tf.Variable(np.array([0.2, 0.6]))
    learned = [alpha]
    keras = require("keras")
    if keras.backend.backend() == "tensorflow":
        learned.append(keras.Variable(np.array([0.2, 0.6])))
    for rate in learned:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((signal.sosfilt(sos, signal_) + signal.ema(signal_, rate))
                                 * weights)
        watched = rate if isinstance(rate, tf.Variable) else rate.value  # Keras' holds tf's
        grad_x, grad_alpha = tape.gradient(loss, [signal_, watched])
        assert grad_x is not None
        assert grad_alpha is not None
        expected_x, expected_alpha = Framework("tf", "CPU").grad(
            lambda x, a: tf.reduce_sum((signal.sosfilt(sos, x) + signal.ema(x, a)) * weights),
            x, np.array([0.2, 0.6]))
        np.testing.assert_allclose(grad_x.numpy(), expected_x, rtol=1e-12)
        np.testing.assert_allclose(grad_alpha.numpy(), expected_alpha, rtol=1e-12)


@pytest.mark.parametrize(("shape", "axis"), [((12, 300), -1), ((2, 9, 301), 2)])
def test_framework_time_contiguous_layouts(framework, shape, axis):
    """Long time-contiguous signals on the CPU are filtered in one time-major copy, as
    NumPy arrays are: values and states as SciPy's, gradients as those of the same
    signal laid out time-major, and results in the caller's layout."""
    from cuscan.signal import _arrays

    rng = np.random.default_rng(16)
    x = rng.standard_normal(shape)
    tensor = framework.tensor(x)
    moved = _arrays.namespace({"x": tensor}).time_major(tensor, axis % x.ndim)
    assert (moved is not None) == (framework.device.lower() == "cpu")
    sos = ss.cheby1(6, 0.5, 0.1, output="sos")
    b, a = ss.ellip(3, 1, 40, 0.2)
    state = list(shape)
    state[axis] = 2
    zi = rng.standard_normal((3, *state))
    y, zf = signal.sosfilt(sos, tensor, axis=axis, zi=framework.tensor(zi))
    expected, expected_zf = ss.sosfilt(sos, x, axis=axis, zi=zi)
    assert relative_error(framework.array(y), expected) <= BOUND[np.float64]
    assert relative_error(framework.array(zf), expected_zf) <= BOUND[np.float64]
    for name, result, want in (
            ("lfilter", signal.lfilter(b, a, tensor, axis=axis), ss.lfilter(b, a, x, axis=axis)),
            ("filtfilt", signal.filtfilt(b, a, tensor, axis=axis),
             ss.filtfilt(b, a, x, axis=axis)),
            ("gust", signal.filtfilt(b, a, tensor, axis=axis, method="gust", irlen=40),
             ss.filtfilt(b, a, x, axis=axis, method="gust", irlen=40)),
            ("sosfiltfilt", signal.sosfiltfilt(sos, tensor, axis=axis),
             ss.sosfiltfilt(sos, x, axis=axis))):
        assert relative_error(framework.array(result), want) <= BOUND[np.float64], name
    weights = rng.standard_normal(shape)

    def loss(x, zi, axis=axis, weights=weights):
        y, zf = signal.sosfilt(sos, x, axis=axis, zi=zi)
        return framework.total(y * framework.tensor(weights)) + framework.total(zf)

    grads = framework.grad(loss, x, zi)
    first = np.moveaxis(x, axis, 0)
    expected = framework.grad(lambda x, zi: loss(x, zi, 0, np.moveaxis(weights, axis, 0)),
                              first, np.moveaxis(zi, 1 + axis % x.ndim, 1))
    np.testing.assert_allclose(grads[0], np.moveaxis(expected[0], 0, axis), rtol=1e-10,
                               atol=1e-10 * np.abs(expected[0]).max())
    np.testing.assert_allclose(grads[1], np.moveaxis(expected[1], 1, 1 + axis % x.ndim),
                               rtol=1e-10,
                               atol=1e-10 * np.abs(expected[1]).max())


def test_framework_chunks(framework, chunk_runs):
    """On the CPU, torch tensors that nothing differentiates and concrete JAX arrays are
    filtered in chunks on NumPy views of their memory, as NumPy arrays are, and come back
    as the framework's tensors. On tensors that autodiff or a trace may record, filters
    from rest or a given zi and the passes of `filtfilt` and `sosfiltfilt` (from the
    steady state of their first sample) run in chunks as linear operations
    (`test_framework_chunk_gradients`), in TensorFlow too."""
    rng = np.random.default_rng(18)
    x, zi = rng.standard_normal((3, 500)), rng.standard_normal((4, 3, 2))
    sos = ss.butter(8, 0.1, output="sos")
    b, a = ss.butter(4, 0.1)

    def run(x, zi):
        return (*signal.sosfilt(sos, x, zi=zi), signal.lfilter(b, a, x),
                signal.filtfilt(b, a, x), signal.sosfiltfilt(sos, x))

    expected = (*ss.sosfilt(sos, x, zi=zi), ss.lfilter(b, a, x), ss.filtfilt(b, a, x),
                ss.sosfiltfilt(sos, x))
    # From zi, the first map that autodiff or a trace may record computes the matrices of
    # the state's part: its responses in chunks too, one run for zi and one per section;
    # and the second pass of `filtfilt` and of `sosfiltfilt` its steady state's response.
    _filters._state_maps.cache_clear()
    _filters._steady_response.cache_clear()
    maps = 1 + len(sos) + 2
    results = run(framework.tensor(x), framework.tensor(zi))
    for result, want in zip(results, expected, strict=True):
        assert framework.is_native(result)
        assert relative_error(framework.array(result), want) <= 1e-12
    on_cpu = framework.device.lower() == "cpu"
    # TensorFlow: a tape may watch any tensor unseen, so the maps are computed.
    assert chunk_runs == ([True] * (6 + maps * (framework.name == "tf")) if on_cpu else [])
    chunk_runs.clear()
    module = framework.module
    if framework.name == "torch":
        tensor = framework.tensor(x).requires_grad_()
        run(tensor, framework.tensor(zi))[0].sum().backward()
        assert chunk_runs == ([True] * (6 + maps + 1) if on_cpu else [])
        chunk_runs.clear()
        with module.no_grad():
            run(tensor, framework.tensor(zi))
        assert chunk_runs == ([True] * 6 if on_cpu else [])
        chunk_runs.clear()
        import torch.autograd.forward_ad as fwAD

        tangent = rng.standard_normal(x.shape)
        with fwAD.dual_level():
            dual = fwAD.make_dual(framework.tensor(x), framework.tensor(tangent))
            y = signal.sosfilt(sos, dual, zi=framework.tensor(zi))[0]
            np.testing.assert_allclose(framework.array(fwAD.unpack_dual(y).tangent),
                                       ss.sosfilt(sos, tangent), rtol=1e-10, atol=1e-12)
        assert chunk_runs == ([True] * 2 if on_cpu else [])  # the map, and on the tangent
    if framework.name == "jax":
        module.jit(lambda x, zi: run(x, zi))(framework.tensor(x), framework.tensor(zi))
        assert chunk_runs == ([True] * (6 + maps) if on_cpu else [])


def test_framework_single_precision_in_blocks(framework, small_blocks):
    """Tensors filtered on NumPy views of their memory (CPU torch tensors that nothing
    differentiates, concrete JAX arrays) run in blocks as NumPy arrays do, and come back
    as the framework's float32 tensors; the others whole, to the same result."""
    x = np.random.default_rng(34).standard_normal((2, 1031)).astype(np.float32)
    zi = np.zeros((3, 2, 2), np.float32)
    (_, function, _), (_, sections, _) = single_precision_filters(x.shape, -1)
    sos = ss.ellip(6, 0.5, 60, 0.05, output="sos")
    expected = function(x), sections(x, zi=zi), signal.sosfiltfilt(sos, x)
    small_blocks.clear()
    tensor = framework.tensor(x)
    result = (function(tensor), sections(tensor, zi=framework.tensor(zi)),
              signal.sosfiltfilt(sos, tensor))
    if framework.name != "tf" and framework.device.lower() == "cpu":
        assert small_blocks
        assert max(small_blocks) <= 300
    for mine, theirs in zip([result[0], *result[1], result[2]],
                            [expected[0], *expected[1], expected[2]], strict=True):
        assert framework.is_native(mine)
        mine = framework.array(mine)
        assert mine.dtype == np.float32
        np.testing.assert_allclose(mine, theirs, rtol=0,
                                   atol=2 * np.finfo(np.float32).eps * np.max(np.abs(theirs)))


def test_framework_single_precision_without_channels(framework):
    """A float32 signal with an axis of length 0 besides time (a batch of no channels) is
    filtered to an empty float32 result of its shape, as a float64 one is; it was split into
    blocks by its bytes per sample, 0 (a ZeroDivisionError)."""
    b, a = ss.butter(4, 0.1)
    sos = ss.butter(4, 0.1, output="sos")
    for shape, axis in (((700, 0), 0), ((0, 3, 700), -1), ((2, 700, 0), 1)):
        x = np.zeros(shape, np.float32)
        state = list(shape)
        state[axis] = 4
        sections = [2, *shape]
        sections[1 + axis % len(shape)] = 2
        for convert in (np.asarray, framework.tensor):
            tensor = convert(x)
            results = (signal.lfilter(b, a, tensor, axis=axis),
                       *signal.lfilter(b, a, tensor, axis=axis,
                                       zi=convert(np.zeros(state, np.float32))),
                       signal.sosfilt(sos, tensor, axis=axis),
                       *signal.sosfilt(sos, tensor, axis=axis,
                                       zi=convert(np.zeros(sections, np.float32))),
                       signal.filtfilt(b, a, tensor, axis=axis),
                       signal.filtfilt(b, a, tensor, axis=axis, method="gust"),
                       signal.sosfiltfilt(sos, tensor, axis=axis),
                       signal.ema(tensor, 0.1, axis=axis))
            shapes = [shape, shape, tuple(state), shape, shape, tuple(sections), shape, shape,
                      shape, shape]
            for result, expected in zip(results, shapes, strict=True):
                result = framework.array(result) if convert is not np.asarray else result
                assert result.shape == expected
                assert result.dtype == np.float32


def test_framework_zero_phase_products(framework, monkeypatch):
    """On the CPU, a framework's short signals take the zero-phase products too
    (`test_zero_phase_products`), as the framework's own product with the matrix, which its
    autodiff differentiates (JAX's jit and grad trace the signal, whose values are then
    unknown: the scheme); on a GPU never: SciPy's values, and the scheme's gradients."""
    monkeypatch.setattr(_chunks, "_direct_kept", collections.OrderedDict())
    rng = np.random.default_rng(36)
    x, weights = rng.standard_normal((3, 100)), rng.standard_normal((3, 100))
    b, a = ss.cheby1(4, 1, 0.2)
    sos = ss.ellip(4, 1, 60, 0.2, output="sos")
    calls = {"filtfilt": (partial(signal.filtfilt, b, a), partial(ss.filtfilt, b, a)),
             "gust": (partial(signal.filtfilt, b, a, method="gust"),
                      partial(ss.filtfilt, b, a, method="gust")),
             "sosfiltfilt": (partial(signal.sosfiltfilt, sos), partial(ss.sosfiltfilt, sos))}
    on_cpu = framework.device.lower() == "cpu"
    for name, (ours, theirs) in calls.items():
        def total(v, ours=ours):
            return framework.total(ours(v) * framework.tensor(weights))

        with monkeypatch.context() as m:
            m.setattr(_filtfilt, "_ZERO_PHASE_LENGTH", 0)
            expected_grad = framework.grad(total, x)
        for _ in range(1 + _chunks._DIRECT_AFTER):  # the last builds the matrix
            result = ours(framework.tensor(x))
        assert framework.is_native(result)
        assert relative_error(framework.array(result), theirs(x)) <= 1e-10, name
        single = ours(framework.tensor(x.astype(np.float32)))
        assert framework.array(single).dtype == np.float32
        assert relative_error(framework.array(single), theirs(x)) <= BOUND[np.float32], name
        built = [key for key in _chunks._direct_kept if isinstance(key[0], str)]
        assert bool(built) == on_cpu, name
        if on_cpu:
            with monkeypatch.context() as m:
                m.setattr(_filtfilt, "_forward_backward", None)
                m.setattr(_filtfilt, "_gustafsson", None)
                trapped = ours(framework.tensor(x))
            np.testing.assert_array_equal(framework.array(trapped), framework.array(result))
        grads = framework.grad(total, x)
        np.testing.assert_allclose(grads[0], expected_grad[0], rtol=1e-10, atol=1e-12)
        _chunks._direct_kept.clear()
    for length in (1, 2):  # a matrix of one or two samples, built from flipped views
        v = rng.standard_normal((2, length))
        for _ in range(1 + _chunks._DIRECT_AFTER):
            result = signal.filtfilt(b, a, framework.tensor(v), padtype=None)
        assert relative_error(framework.array(result), ss.filtfilt(b, a, v, padtype=None)) \
            <= 1e-10


def test_framework_direct_products(framework, chunk_runs, monkeypatch):
    """On the CPU, a framework's short blocks are one product too (`test_direct_products`),
    plain and recorded by autodiff, the gradient through the transposed matrices: the
    values and gradients of the chunks."""
    if framework.device.lower() != "cpu":
        pytest.skip("the filters run as products on the CPU only")
    monkeypatch.setattr(_chunks, "_DIRECT_LENGTH", DIRECT_LENGTH)
    rng = np.random.default_rng(34)
    x, weights = rng.standard_normal((3, 100)), rng.standard_normal((3, 100))
    sos = ss.cheby2(6, 40, 0.2, output="sos")
    zi, w_zf = rng.standard_normal((3, 3, 2)), rng.standard_normal((3, 3, 2))

    def total(v, state):
        y, zf = signal.sosfilt(sos, v, zi=state)
        return framework.total(y * framework.tensor(weights)) + framework.total(
            zf * framework.tensor(w_zf))

    expected = framework.grad(total, x, zi)  # in chunks, forward and backward in time
    for _ in range(_chunks._DIRECT_AFTER):  # the last builds the matrices
        framework.grad(total, x, zi)
    chunk_runs.clear()
    with monkeypatch.context() as m:
        m.setattr(_chunks, "_output", None)
        grads = framework.grad(total, x, zi)
        y, zf = signal.sosfilt(sos, framework.tensor(x), zi=framework.tensor(zi))
    assert chunk_runs
    assert all(chunk_runs)
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    expected_y, expected_zf = ss.sosfilt(sos, x, zi=zi)
    assert relative_error(framework.array(y), expected_y) <= 1e-10
    assert relative_error(framework.array(zf), expected_zf) <= 1e-10


def test_framework_chunk_gradients(framework, chunk_runs):
    """A filter from rest is linear in the signal, with the same filter run backward in
    time as its transpose: on the CPU, tensors that autodiff records run it in chunks both
    ways (forward mode too), and the gradients are exact; on a GPU the recurrences give the
    same values. Any axis, single precision; zero-phase filtering by Gustafsson's method,
    and by padding, whose passes start from the steady state of their first sample."""
    rng = np.random.default_rng(19)
    x, weights = rng.standard_normal((3, 400)), rng.standard_normal((3, 400))
    sos = ss.cheby2(6, 40, 0.2, output="sos")
    b, a = ss.ellip(3, 1, 40, 0.3)
    on_cpu = framework.device.lower() == "cpu"
    cases = {"sosfilt": (lambda v: signal.sosfilt(sos, v), lambda v: ss.sosfilt(sos, v), -1),
             "lfilter along axis 0": (lambda v: signal.lfilter(b, a, v, axis=0),
                                      lambda v: ss.lfilter(b, a, v, axis=0), 0),
             "filtfilt (gust)": (lambda v: signal.filtfilt(b, a, v, method="gust"),
                                 lambda v: ss.filtfilt(b, a, v, method="gust"), None),
             "filtfilt (pad)": (lambda v: signal.filtfilt(b, a, v, padtype="even"),
                                lambda v: ss.filtfilt(b, a, v, padtype="even"), None),
             "sosfiltfilt": (lambda v: signal.sosfiltfilt(sos, v),
                             lambda v: ss.sosfiltfilt(sos, v), None)}
    for name, (function, scipy_function, axis) in cases.items():
        values, w = (x.T, np.ascontiguousarray(weights.T)) if axis == 0 else (x, weights)
        chunk_runs.clear()
        [grad] = framework.grad(lambda v, f=function, w=w: framework.total(
            f(v) * framework.tensor(w)), values)
        if axis is not None:  # the gradient of a linear map is its transpose: run backward
            exact = np.flip(scipy_function(np.flip(w, axis)), axis)
            np.testing.assert_allclose(grad, exact, rtol=1e-9, atol=1e-12)
        for at in (0, 1, 200, 398, 399) if axis is None else ():  # by unit impulses
            step = np.zeros(values.shape[1])
            step[at] = 1.0
            np.testing.assert_allclose(grad[:, at], scipy_function(step) @ w.T, rtol=1e-9,
                                       atol=1e-12)
        assert (len(chunk_runs) > 0 and all(chunk_runs)) == on_cpu, (name, chunk_runs)
    # From a given zi, the signal and zi together: exact against the dense matrix of
    # SciPy's filter from its unit inputs (rows), lfilter along axis 0 and sosfilt.
    count, length = len(sos), x.shape[1]
    order = max(len(a), len(b)) - 1
    eye = np.eye(order + length)
    y, zf = ss.lfilter(b, a, eye[:, order:], zi=eye[:, :order])
    dense_b = np.concatenate([y, zf], axis=1)
    eye = np.eye(2 * count + length)
    y, zf = ss.sosfilt(sos, eye[:, 2 * count:],
                       zi=eye[:, :2 * count].reshape(-1, count, 2).transpose(1, 0, 2))
    dense_sos = np.concatenate([y, zf.transpose(1, 0, 2).reshape(len(eye), -1)], axis=1)
    zi_b, zi_sos = rng.standard_normal((order, 3)), rng.standard_normal((count, 3, 2))
    w_b, w_sos = rng.standard_normal((order, 3)), rng.standard_normal((count, 3, 2))

    def from_zi_b(v, zi):
        y, zf = signal.lfilter(b, a, v, axis=0, zi=zi)
        return framework.total(y * framework.tensor(weights.T)) + framework.total(
            zf * framework.tensor(w_b))

    def from_zi_sos(v, zi):
        y, zf = signal.sosfilt(sos, v, zi=zi)
        return framework.total(y * framework.tensor(weights)) + framework.total(
            zf * framework.tensor(w_sos))

    chunk_runs.clear()
    grads = framework.grad(from_zi_b, x.T, zi_b)
    exact = np.concatenate([weights, w_b.T], axis=1) @ dense_b.T
    np.testing.assert_allclose(grads[0], exact[:, order:].T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grads[1], exact[:, :order].T, rtol=1e-9, atol=1e-12)
    grads = framework.grad(from_zi_sos, x, zi_sos)
    exact = np.concatenate([weights, w_sos.transpose(1, 0, 2).reshape(3, -1)], axis=1) \
        @ dense_sos.T
    np.testing.assert_allclose(grads[0], exact[:, 2 * count:], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grads[1], exact[:, :2 * count].reshape(3, count, 2).transpose(
        1, 0, 2), rtol=1e-9, atol=1e-12)
    assert (len(chunk_runs) > 0 and all(chunk_runs)) == on_cpu, chunk_runs
    single = signal.sosfilt(sos, framework.tensor(x.astype(np.float32)))
    assert framework.array(single).dtype == np.float32
    assert relative_error(framework.array(single), ss.sosfilt(sos, x)) < BOUND[np.float32]
    module = framework.module
    if framework.name == "torch" and on_cpu:
        tensor = framework.tensor(x[:, :300]).requires_grad_()
        for function in (lambda v: signal.sosfilt(sos, v), lambda v: signal.sosfiltfilt(sos, v)):
            assert module.autograd.gradcheck(function, (tensor,), check_forward_ad=True)
        state = framework.tensor(zi_sos).requires_grad_()
        assert module.autograd.gradcheck(lambda v, zi: signal.sosfilt(sos, v, zi=zi),
                                         (tensor, state), check_forward_ad=True)
        assert module.autograd.gradgradcheck(lambda v: signal.lfilter(b, a, v) ** 2, (tensor,))
    if framework.name == "jax":
        jax = module
        v, t = framework.tensor(x), framework.tensor(weights)
        chunk_runs.clear()
        tangent = jax.jit(lambda v, t: jax.jvp(lambda u: signal.sosfilt(sos, u), (v,), (t,)))(
            v, t)[1]
        np.testing.assert_allclose(np.asarray(tangent), ss.sosfilt(sos, weights), rtol=1e-9,
                                   atol=1e-12)
        batched = jax.vmap(lambda u: signal.lfilter(b, a, u), in_axes=1)(
            framework.tensor(np.stack([x, weights], 1)))
        np.testing.assert_allclose(np.asarray(batched), ss.lfilter(b, a, np.stack([x, weights])),
                                   rtol=1e-9, atol=1e-12)
        assert (len(chunk_runs) > 0 and all(chunk_runs)) == on_cpu
        # Programs for jax.export cannot call back into Python: the recurrences.
        exported = jax.export.export(jax.jit(lambda u: signal.sosfilt(sos, u)))(v)
        chunk_runs.clear()
        np.testing.assert_allclose(np.asarray(exported.call(v)), ss.sosfilt(sos, x),
                                   rtol=1e-9, atol=1e-12)
        assert not chunk_runs
        [grad] = framework.grad(lambda u: framework.total(signal.sosfiltfilt(sos, u) * t), x)
        exported = jax.export.export(jax.jit(jax.grad(lambda u: jax.numpy.sum(
            signal.sosfiltfilt(sos, u) * t))))(v)
        chunk_runs.clear()
        np.testing.assert_allclose(np.asarray(exported.call(v)), grad, rtol=1e-9, atol=1e-12)
        assert not chunk_runs
        exported = jax.export.export(jax.jit(jax.grad(from_zi_sos, argnums=(0, 1))))(
            v, framework.tensor(zi_sos))
        for result, want in zip(exported.call(v, framework.tensor(zi_sos)),
                                framework.grad(from_zi_sos, x, zi_sos), strict=True):
            np.testing.assert_allclose(np.asarray(result), want, rtol=1e-9, atol=1e-12)
    if framework.name == "tf":
        tf = module
        v = framework.tensor(x)

        @tf.function
        def graph(v):
            with tf.GradientTape() as tape:
                tape.watch(v)
                total = tf.reduce_sum(signal.sosfilt(sos, v) * weights)
            return tape.gradient(total, v)

        chunk_runs.clear()
        np.testing.assert_allclose(graph(v).numpy(),
                                   ss.sosfilt(sos, weights[:, ::-1])[:, ::-1], rtol=1e-9,
                                   atol=1e-12)
        assert chunk_runs
        assert all(chunk_runs)
        with tf.autodiff.ForwardAccumulator(v, tf.constant(weights)) as accumulator:
            y = signal.lfilter(b, a, v)
        np.testing.assert_allclose(accumulator.jvp(y).numpy(), ss.lfilter(b, a, weights),
                                   rtol=1e-9, atol=1e-12)
        chunk_runs.clear()
        compiled = tf.function(lambda v: signal.sosfilt(sos, v), jit_compile=True)(v)
        np.testing.assert_allclose(compiled.numpy(), ss.sosfilt(sos, x), rtol=1e-9,
                                   atol=1e-12)
        assert not chunk_runs  # XLA cannot call back into Python: the recurrences


def test_framework_zero_phase(framework):
    """sosfiltfilt and filtfilt on tensors: SciPy's values, and the exact gradient (the
    filter, padding included, is linear in the signal)."""
    rng = np.random.default_rng(15)
    x, weights = rng.standard_normal((2, 40)), rng.standard_normal((2, 40))
    sos = ss.butter(4, 0.2, output="sos")
    b, a = ss.cheby1(2, 1, 0.3)
    y = signal.sosfiltfilt(sos, framework.tensor(x))
    assert framework.is_native(y)
    assert relative_error(framework.array(y), ss.sosfiltfilt(sos, x)) < BOUND[np.float64]
    y = signal.filtfilt(b, a, framework.tensor(x.astype(np.float32)), padtype="even")
    assert framework.array(y).dtype == np.float32
    assert relative_error(framework.array(y), ss.filtfilt(b, a, x, padtype="even")) < 1e-6
    for padtype in ("odd", "constant"):
        [grad] = framework.grad(lambda x, padtype=padtype: framework.total(
            signal.sosfiltfilt(sos, x, padtype=padtype) * framework.tensor(weights)), x)
        exact = np.zeros_like(x)
        for at in np.ndindex(x.shape):
            step = np.zeros_like(x)
            step[at] = 1.0
            exact[at] = np.sum(ss.sosfiltfilt(sos, step, padtype=padtype) * weights)
        np.testing.assert_allclose(grad, exact, rtol=1e-9, atol=1e-12)
    for irlen in (None, 8):  # Gustafsson's method, fitted to the whole signal or its ends
        y = signal.filtfilt(b, a, framework.tensor(x), method="gust", irlen=irlen)
        assert framework.is_native(y)
        expected = ss.filtfilt(b, a, x, method="gust", irlen=irlen)
        assert relative_error(framework.array(y), expected) < 1e-10
        [grad] = framework.grad(lambda x, irlen=irlen: framework.total(signal.filtfilt(
            b, a, x, method="gust", irlen=irlen) * framework.tensor(weights)), x)
        exact = np.zeros_like(x)
        for at in np.ndindex(x.shape):
            step = np.zeros_like(x)
            step[at] = 1.0
            exact[at] = np.sum(ss.filtfilt(b, a, step, method="gust", irlen=irlen) * weights)
        np.testing.assert_allclose(grad, exact, rtol=1e-9, atol=1e-12)
    z = x + 1j * weights  # a complex signal through the real filter
    for irlen in (None, 8):
        y = signal.filtfilt(b, a, framework.tensor(z), method="gust", irlen=irlen)
        expected = ss.filtfilt(b, a, z, method="gust", irlen=irlen)
        assert relative_error(framework.array(y), expected) < 1e-10
    y = signal.sosfiltfilt(sos, framework.tensor(z.astype(np.complex64)))
    assert framework.array(y).dtype == np.complex64
    assert relative_error(framework.array(y), ss.sosfiltfilt(sos, z)) < 1e-6


def test_tensorflow_unknown_sizes():
    """Inside tf.function, signals (and states and alphas) of unknown sizes, as Keras' batch
    and time: the values and gradients, first and second order, of eager calls, the results'
    static shapes known where the inputs' are, the errors of eager calls, and a Keras model
    trained and run on batches of any size."""
    tf = require("tensorflow")
    rng = np.random.default_rng(43)
    x, zi = rng.standard_normal((4, 3, 50)), rng.standard_normal((4, 3, 3))
    alphas = rng.uniform(0.1, 0.9, (4, 3, 1))
    b, a = ss.cheby1(3, 1, 0.2)
    sos = ss.butter(4, 0.1, output="sos")
    calls = {
        "lfilter": (lambda x, z: signal.lfilter(b, a, x, zi=z), (x, zi), (3, 50)),
        "sosfilt": (lambda x: signal.sosfilt(sos, x), (x,), (3, 50)),
        "filtfilt": (lambda x: signal.filtfilt(b, a, x, padtype="even"), (x,), (3, 50)),
        "gust": (lambda x: signal.filtfilt(b, a, x, method="gust", irlen=20), (x,), (3, 50)),
        "sosfiltfilt": (lambda x: signal.sosfiltfilt(sos, x), (x,), (3, 50)),
        "ema": (lambda x, alpha: signal.ema(x, alpha, adjust=True), (x, alphas), (3, 50)),
        "lfiltic": (lambda y, x: signal.lfiltic(b, a, y, x), (x[..., :4], x[..., 4:6]), (3, 3)),
    }

    def losses(function):
        def loss(*values):
            result = function(*values)
            return sum(tf.reduce_sum(r * r * r) for r in (
                result if isinstance(result, tuple) else (result,)))
        return loss

    def derivatives(loss, values, second=True):
        with tf.GradientTape() as outer:
            outer.watch(values)
            with tf.GradientTape() as inner:
                inner.watch(values)
                total = loss(*values)
            first = inner.gradient(total, values)
            projected = sum(tf.reduce_sum(g * tf.ones_like(g)) for g in first)
        return [total, *first, *(outer.gradient(projected, values) if second else [])]

    def unknown(value, dims):
        return tf.TensorSpec([None if k in dims else n for k, n in enumerate(value.shape)],
                             value.dtype)

    for name, (function, arrays, known) in calls.items():
        values = [tf.constant(v) for v in arrays]
        eager = [function(*values), *derivatives(losses(function), values)]
        for dims in ((0,), (0, 2), (0, 1, 2)):  # batch; and time; and channels
            spec = [unknown(v, dims if k == 0 else set(dims) - {2})
                    for k, v in enumerate(values)]
            graph = tf.function(lambda *v, f=function: [f(*v), *derivatives(losses(f), list(v))],
                                input_signature=spec)
            result = graph(*values)
            for got, want in zip(tf.nest.flatten(result), tf.nest.flatten(eager), strict=True):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-11,
                                           err_msg=f"{name} {dims}")
            traced = tf.nest.flatten(graph.get_concrete_function(*spec).structured_outputs)[0]
            want_shape = [None if k in dims else n for k, n in enumerate((4, *known))]
            if name == "lfiltic":  # its length is the filter's order
                want_shape[2] = known[1]
            assert traced.shape.as_list() == want_shape, (name, dims, traced.shape)
        # XLA cannot call back into Python: TensorFlow's operations, sizes but the length
        # unknown, with first derivatives (lfiltic there needs every size)
        graph = tf.function(
            lambda *v, f=function: [f(*v), *derivatives(losses(f), list(v), second=False)],
            input_signature=[unknown(v, (0,)) for v in values], jit_compile=True)
        if name == "lfiltic":
            with pytest.raises(ValueError, match="with sizes unknown it failed"):
                graph(*values)
            continue
        for got, want in zip(tf.nest.flatten(graph(*values)),
                             tf.nest.flatten(eager[:len(eager) - len(values)]), strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-11,
                                       err_msg=f"{name} XLA")
    # sizes one tensor knows and another does not, in either mode
    lfilter = calls["lfilter"][0]
    want = lfilter(tf.constant(x), tf.constant(zi))
    for jit_compile, shapes in ((False, ([None, 3, 50], [4, 3, 3])),
                                (True, ([4, 3, 50], [4, None, 3])),
                                (True, ([4, None, 50], [None, 3, 3]))):
        got = tf.function(lfilter, jit_compile=jit_compile, input_signature=[
            tf.TensorSpec(shape, tf.float64) for shape in shapes])(x, zi)
        for result, expected in zip(got, want, strict=True):
            np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-12,
                                       atol=1e-12, err_msg=str(shapes))
    # every size of zi unknown, its length along the axis too (the filter's order), which
    # the calls that learn the results' shapes take from the filter
    sections_zi = rng.standard_normal((len(sos), 4, 3, 2))
    for function, state, zf_shape in (
            (lfilter, zi, [None, None, 3]),
            (lambda v, z: signal.sosfilt(sos, v, zi=z), sections_zi, [len(sos), None, None, 2])):
        want = function(tf.constant(x), tf.constant(state))
        graph = tf.function(function, input_signature=[
            tf.TensorSpec([None] * x.ndim, tf.float64),
            tf.TensorSpec([None] * state.ndim, tf.float64)])
        for result, expected in zip(graph(x, state), want, strict=True):
            np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-12,
                                       atol=1e-12)
        assert graph.get_concrete_function().structured_outputs[1].shape.as_list() == zf_shape
    # and along the first axis, named from the last
    graph = tf.function(lambda v, z: signal.lfilter(b, a, v, axis=-3, zi=z),
                        input_signature=[tf.TensorSpec([None] * 3, tf.float64)] * 2)
    moved = np.moveaxis(x, -1, 0), np.moveaxis(zi, -1, 0)
    for result, expected in zip(graph(*moved), ss.lfilter(b, a, moved[0], axis=0, zi=moved[1]),
                                strict=True):
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)
    # an axis that is not an integer, where zi's shape is learnt from it: the eager call's error
    for function, state in ((lambda v, z: signal.lfilter(b, a, v, axis=1.0, zi=z), zi),
                            (lambda v, z: signal.sosfilt(sos, v, axis=1.0, zi=z), sections_zi)):
        with pytest.raises(TypeError, match=r"`axis` must be an integer; got 1\.0"):
            tf.function(function, input_signature=[
                tf.TensorSpec([None, 3, 50], tf.float64),
                tf.TensorSpec([None] * state.ndim, tf.float64)])(x, state)
    with pytest.raises(ValueError, match=r"needs the rank of `zi` inside tf\.function"):
        tf.function(lfilter, input_signature=[tf.TensorSpec([None, 3, 50], tf.float64),
                                              tf.TensorSpec(None, tf.float64)])(x, zi)
    with pytest.raises(ValueError, match=r"compiled by XLA .* the signal's length must be known"):
        tf.function(lambda v: signal.sosfilt(sos, v), jit_compile=True,
                    input_signature=[tf.TensorSpec([None, 3, None], tf.float64)])(x)
    with pytest.raises(ValueError, match=r"needs the rank of `x` inside tf\.function"):
        tf.function(lambda v: signal.sosfilt(sos, v),
                    input_signature=[tf.TensorSpec(None, tf.float64)])(x)

    keras = require("keras")
    if keras.backend.backend() != "tensorflow":
        return

    class Filter(keras.layers.Layer):
        def call(self, v):
            return signal.sosfilt(sos, v, axis=1)

    data, target = rng.standard_normal((10, 64, 2)), rng.standard_normal((10, 1))
    for jit_compile in (False, True):  # XLA, as Keras compiles on a GPU
        model = keras.Sequential([keras.Input((64, 2)), Filter(), keras.layers.Flatten(),
                                  keras.layers.Dense(1)])
        model.compile("sgd", "mse", jit_compile=jit_compile)
        model.fit(data, target, batch_size=4, epochs=2, verbose=0)  # batches of 4, 4 and 2
        np.testing.assert_allclose(model.predict(data, batch_size=3, verbose=0),
                                   model(data).numpy(), rtol=1e-5, atol=1e-6)


def test_tensorflow_unknown_sizes_beside_sizes_of_one():
    """Inside tf.function, a size of one beside unknown sizes stays known in the result's
    static shape, as do the signal's sizes beside an alpha of unknown size, one, and an alpha's
    size of one leaves the signal's unknown size unknown; under XLA, an axis along an unknown
    size is refused as an unknown length, and one out of range or not an integer gets the
    eager call's error."""
    tf = require("tensorflow")
    b, a = ss.butter(2, 0.2)
    x = np.random.default_rng(44).standard_normal((4, 1, 50))
    for shape in ([None, 1, 50], [4, 1, None], [None, 1, None]):
        graph = tf.function(lambda v: signal.lfilter(b, a, v),
                            input_signature=[tf.TensorSpec(shape, tf.float64)])
        assert graph.get_concrete_function().structured_outputs.shape.as_list() == shape
        np.testing.assert_allclose(graph(x), ss.lfilter(b, a, x), rtol=1e-12, atol=1e-12)
    # the eager calls that learn the result's shape fail with an alpha of 2 (against 4,097
    # steps): those with sizes of 1 alone tell it, where a size probed as 1 stays unknown
    for shape, signals in (([4, None], x[:, 0]), ([None, None], x[:, 0]), ([4, None, None], x)):
        graph = tf.function(signal.ema, input_signature=[tf.TensorSpec(shape, tf.float64),
                                                         tf.TensorSpec([None], tf.float64)])
        assert graph.get_concrete_function().structured_outputs.shape.as_list() == shape
        np.testing.assert_allclose(graph(signals, [0.3]), signal.ema(signals, 0.3), rtol=1e-12)
    # nor does an alpha's size of 1 stand for the signal's size there, unknown
    graph = tf.function(signal.ema, input_signature=[tf.TensorSpec([None, 3, None], tf.float64),
                                                     tf.TensorSpec([1, 3, 1], tf.float64)])
    assert graph.get_concrete_function().structured_outputs.shape.as_list() == [None, 3, None]
    rng = np.random.default_rng(45)
    wide, alphas = rng.standard_normal((4, 3, 50)), rng.uniform(0.1, 0.9, (1, 3, 1))
    np.testing.assert_allclose(graph(wide, alphas), signal.ema(wide, alphas), rtol=1e-12)
    spec = [tf.TensorSpec([None, 1, 50], tf.float64)]
    for axis, message in ((-3, r"compiled by XLA .* the signal's length must be known"),
                          (3, "axis 3 is out of bounds for array of dimension 3"),
                          (1.0, r"`axis` must be an integer; got 1\.0")):
        graph = tf.function(lambda v, axis=axis: signal.lfilter(b, a, v, axis=axis),
                            jit_compile=True, input_signature=spec)
        with pytest.raises(Exception, match=message):  # TensorFlow re-raises AxisError wrapped
            graph(x)


def test_tensorflow_forward_mode_inside_tf_function():
    """A ForwardAccumulator inside tf.function: refused through the recurrences whatever the
    sizes, and on tensors of unknown sizes, with advice that works (giving the sizes serves
    `lfiltic` alone, which runs no recurrence)."""
    tf = require("tensorflow")
    sos = ss.butter(4, 0.1, output="sos")
    b, a = ss.butter(2, 0.2)
    x, tangent = np.random.default_rng(45).standard_normal((2, 4, 50))

    def forward_mode(function):
        def jvp(v):
            with tf.autodiff.ForwardAccumulator(v, tf.constant(tangent)) as accumulator:
                y = function(v)
            return accumulator.jvp(y)
        return jvp

    sosfilt = forward_mode(lambda v: signal.sosfilt(sos, v))
    lfiltic = forward_mode(lambda v: signal.lfiltic(b, a, v))
    np.testing.assert_allclose(sosfilt(tf.constant(x)), ss.sosfilt(sos, tangent), rtol=1e-10,
                               atol=1e-12)
    advice = (r"works eagerly but not inside tf\.function.*; run the accumulator eagerly, or "
              "use GradientTape")
    for function in (sosfilt, lfiltic):
        with pytest.raises(NotImplementedError, match=advice):
            tf.function(function, input_signature=[tf.TensorSpec([None, 50], tf.float64)])(x)
    with pytest.raises(NotImplementedError, match=advice):
        tf.function(sosfilt, input_signature=[tf.TensorSpec([4, 50], tf.float64)])(x)
    known = tf.function(lfiltic, input_signature=[tf.TensorSpec([4, 50], tf.float64)])(x)
    np.testing.assert_allclose(known, lfiltic(tf.constant(x)), rtol=1e-12, atol=1e-12)


def test_tensorflow_gradient_logs_no_cast_warning(monkeypatch, caplog):
    """A real signal's conjugate pole pairs run as complex recurrences. TensorFlow's gradient
    of a cast from real to complex casts back and logs that it drops the imaginary part;
    the signal is made complex with ``tf.complex`` instead, so the gradient through the
    stages' recurrences logs nothing and is exact."""
    import logging

    from cuscan.signal import _arrays

    tf = require("tensorflow")
    monkeypatch.setattr(_arrays._TensorFlow, "runs_on_host", lambda self, x: False)
    logger = logging.getLogger("tensorflow")
    logger.addHandler(caplog.handler)
    rng = np.random.default_rng(31)
    x, weights = rng.standard_normal((2, 200)), rng.standard_normal((2, 200))
    sos = ss.butter(4, 0.1, output="sos")
    v = tf.constant(x)
    try:
        with tf.GradientTape() as tape:
            tape.watch(v)
            total = tf.reduce_sum(signal.sosfilt(sos, v) * weights)
        gradient = tape.gradient(total, v)
    finally:
        logger.removeHandler(caplog.handler)
    np.testing.assert_allclose(gradient.numpy(), ss.sosfilt(sos, weights[:, ::-1])[:, ::-1],
                               rtol=1e-9, atol=1e-12)
    assert not [r for r in caplog.records if "imaginary" in r.getMessage()]


def test_framework_lfiltic(framework):
    """lfiltic on tensors gives the same framework's state, which lfilter continues from,
    and its exact gradients with respect to the past outputs and inputs."""
    rng = np.random.default_rng(23)
    b, a = ss.butter(3, 0.3)
    y, x, weights = (rng.standard_normal((2, 5)) for _ in range(3))
    zi = signal.lfiltic(b, a, framework.tensor(y), framework.tensor(x))
    assert framework.is_native(zi)
    expected = np.stack([ss.lfiltic(b, a, y[k], x[k]) for k in range(2)])
    np.testing.assert_allclose(framework.array(zi), expected, rtol=1e-13, atol=1e-15)
    out, _ = signal.lfilter(b, a, framework.tensor(np.ones((2, 4))), zi=zi)
    np.testing.assert_allclose(framework.array(out), ss.lfilter(b, a, np.ones((2, 4)),
                                                                zi=expected)[0], rtol=1e-12)
    grads = framework.grad(lambda y, x: framework.total(
        signal.lfiltic(b, a, y, x)[:, :3] * framework.tensor(weights[:, :3])), y, x)
    for taps, grad in ((-a, grads[0]), (b, grads[1])):  # zi[m] = sum_j taps[m+1+j] past[j]
        exact = np.zeros((2, 5))
        for m in range(3):
            for j in range(3 - m):
                exact[:, j] += taps[m + 1 + j] * weights[:, m]
        np.testing.assert_allclose(grad, exact, rtol=1e-13, atol=1e-15)


def test_jax_vmap_over_signals_and_alphas():
    """jax.vmap maps the filters over signals, and ema over one scalar alpha per signal
    (a 0-d tracer, not a Python number)."""
    jax = require("jax")
    x = np.random.default_rng(20).standard_normal((4, 100))
    alphas = np.array([0.1, 0.2, 0.3, 1.0])
    sos = ss.butter(4, 0.1, output="sos")
    with jax.enable_x64(True):
        y = jax.jit(jax.vmap(lambda v: signal.sosfiltfilt(sos, v)))(x)
        np.testing.assert_allclose(np.asarray(y), ss.sosfiltfilt(sos, x), rtol=1e-10,
                                   atol=1e-12)
        y = jax.jit(jax.vmap(lambda v: signal.filtfilt(*ss.butter(2, 0.1), v, method="gust")))(x)
        np.testing.assert_allclose(np.asarray(y), ss.filtfilt(*ss.butter(2, 0.1), x, method="gust"),
                                   rtol=1e-10, atol=1e-12)
        # samples down the columns of each signal: the filter's axis counted past the batch's
        columns = np.random.default_rng(21).standard_normal((4, 100, 3))
        for axis, along in ((0, 1), (-2, 1), (1, 2), (-1, 2)):
            v = np.moveaxis(columns, 1, along)
            y = jax.jit(jax.vmap(lambda v, axis=axis: signal.sosfiltfilt(sos, v, axis=axis)))(v)
            np.testing.assert_allclose(np.asarray(y), ss.sosfiltfilt(sos, v, axis=along),
                                       rtol=1e-10, atol=1e-12)
        for adjust in (False, True):
            y = jax.jit(jax.vmap(lambda v, a, adjust=adjust: signal.ema(v, a, adjust=adjust)))(
                x, alphas)
            np.testing.assert_allclose(np.asarray(y), signal.ema(x, alphas, adjust=adjust),
                                       rtol=1e-12, atol=1e-12)


def test_jax_forward_mode_through_filters():
    """jax.jvp through the filters: their tangent is the filter of the tangent, and ema's
    with respect to alpha matches central differences."""
    jax = require("jax")
    rng = np.random.default_rng(21)
    x, tangent = rng.standard_normal((2, 3, 80))
    sos = ss.cheby1(4, 1, 0.2, output="sos")
    with jax.enable_x64(True):
        for filtered in (lambda v: signal.sosfilt(sos, v), lambda v: signal.sosfiltfilt(sos, v),
                         lambda v: signal.filtfilt(*ss.butter(3, 0.2), v, method="gust")):
            value, derivative = jax.jit(lambda v, t, f=filtered: jax.jvp(f, (v,), (t,)))(
                jax.numpy.asarray(x), jax.numpy.asarray(tangent))
            np.testing.assert_allclose(np.asarray(value), np.asarray(filtered(x)), rtol=1e-12)
            np.testing.assert_allclose(np.asarray(derivative), np.asarray(filtered(tangent)),
                                       rtol=1e-10, atol=1e-12)
        alpha, step = 0.3, 1e-6
        derivative = jax.jvp(lambda a: signal.ema(jax.numpy.asarray(x), a), (alpha,), (1.0,))[1]
        central = (signal.ema(x, alpha + step) - signal.ema(x, alpha - step)) / (2 * step)
        np.testing.assert_allclose(np.asarray(derivative), central, rtol=1e-6, atol=1e-8)


def test_jax_symbolic_lengths():
    """Over a symbolic length known to be long enough every filter gives its shapes; one that
    is not known to be is refused with a ValueError saying how to bound it."""
    jax = require("jax")
    sos = ss.butter(4, 0.2, output="sos")
    b, a = ss.butter(3, 0.2)
    batch, steps = jax.export.symbolic_shape("b, t", constraints=("t >= 4096",))
    x = jax.ShapeDtypeStruct((batch, 2, steps), np.float32)
    filters = {
        "lfilter": lambda v: signal.lfilter(b, a, v),
        "lfilter with zi": lambda v: signal.lfilter(b, a, v, zi=np.zeros((1, 1, 3)))[0],
        "sosfilt": lambda v: signal.sosfilt(sos, v),
        "filtfilt": lambda v: signal.filtfilt(b, a, v),
        "filtfilt gust": lambda v: signal.filtfilt(b, a, v, method="gust", irlen=100),
        "sosfiltfilt": lambda v: signal.sosfiltfilt(sos, v),
        "ema": lambda v: signal.ema(v, 0.1),
        "gradient": jax.grad(lambda v: signal.sosfilt(sos, v).sum()),
    }
    for name, function in filters.items():
        result = jax.eval_shape(function, x)
        assert (result.shape, result.dtype) == (x.shape, x.dtype), name
    unbounded = jax.ShapeDtypeStruct(jax.export.symbolic_shape("t"), np.float32)
    with pytest.raises(ValueError, match=r"lfilter .*symbolic length.* 't' < '4'"):
        jax.eval_shape(filters["lfilter"], unbounded)
    # second-order sections and ema compare nothing with the length
    assert jax.eval_shape(filters["sosfilt"], unbounded).shape == unbounded.shape
    assert jax.eval_shape(filters["ema"], unbounded).shape == unbounded.shape


def test_torch_func_vmap_over_signals_and_alphas():
    """torch.func.vmap maps the filters and ema (per-signal alphas) over a batch, and
    `lfilter` and `sosfilt` over initial states alone (a batch the signal does not have)."""
    torch = require("torch")
    x = torch.randn(4, 100, dtype=torch.float64)
    alphas = torch.tensor([0.1, 0.2, 0.3, 1.0], dtype=torch.float64)
    sos = ss.butter(4, 0.1, output="sos")
    y = torch.func.vmap(lambda v: signal.sosfiltfilt(sos, v))(x)
    np.testing.assert_allclose(y.numpy(), ss.sosfiltfilt(sos, x.numpy()), rtol=1e-10,
                               atol=1e-12)
    columns = torch.randn(4, 100, 3, dtype=torch.float64)
    for axis, along in ((0, 1), (-2, 1), (1, 2), (-1, 2)):
        v = torch.movedim(columns, 1, along)
        y = torch.func.vmap(lambda v, axis=axis: signal.sosfiltfilt(sos, v, axis=axis))(v)
        np.testing.assert_allclose(y.numpy(), ss.sosfiltfilt(sos, v.numpy(), axis=along),
                                   rtol=1e-10, atol=1e-12)
    b, a = ss.cheby1(3, 1, 0.2)
    states = {"lfilter": (partial(signal.lfilter, b, a), partial(ss.lfilter, b, a), (5, 4, 3)),
              "sosfilt": (partial(signal.sosfilt, sos), partial(ss.sosfilt, sos), (5, 2, 4, 2))}
    for name, (mine, scipys, shape) in states.items():
        zi = torch.randn(shape, dtype=torch.float64)
        for out in (0, 1):
            y = torch.func.vmap(lambda z, mine=mine, out=out: mine(x, zi=z)[out])(zi)
            want = np.stack([scipys(x.numpy(), zi=z)[out] for z in zi.numpy()])
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-10, atol=1e-12, err_msg=name)
    for adjust in (False, True):
        y = torch.func.vmap(lambda v, a, adjust=adjust: signal.ema(v, a, adjust=adjust))(
            x, alphas)
        torch.testing.assert_close(y, signal.ema(x, alphas[:, None], adjust=adjust))


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_torch_tensors_cuscan_cannot_compute_on_are_refused():
    """Sparse, nested and quantized tensors, as signals, coefficients, states or alphas:
    a TypeError naming the argument, as the core gives (float8 and complex32 tensors are
    widened: `test_narrow_dtypes_are_widened`)."""
    torch = require("torch")
    sos, x = ss.butter(4, 0.1, output="sos"), torch.ones(3, 300)
    with pytest.raises(TypeError, match=r"`x` is a torch\.sparse_csr tensor; cuscan needs "
                                        r"dense \(strided\) tensors"):
        signal.sosfilt(sos, x.to_sparse_csr())
    with pytest.raises(TypeError, match=r"`x` is a torch\._mkldnn tensor"):
        signal.ema(x.to_mkldnn(), 0.3)
    with pytest.raises(TypeError, match="`x` is a nested tensor"):
        signal.filtfilt([1.0], [1.0, -0.5], torch.nested.nested_tensor(
            [torch.ones(300), torch.ones(200)], layout=torch.jagged))
    with pytest.raises(TypeError, match=r"`sos` is a torch\.sparse_coo tensor"):
        signal.sosfilt(torch.as_tensor(sos).to_sparse(), x)
    with pytest.raises(TypeError, match=r"`zi` is a torch\.sparse_coo tensor"):
        signal.sosfilt(sos, x, zi=torch.zeros(2, 3, 2).to_sparse())
    with pytest.raises(TypeError, match=r"`alpha` has dtype torch\.qint8, which cuscan does not"):
        signal.ema(x, torch.quantize_per_tensor(torch.full((3, 1), 0.3), 0.1, 0, torch.qint8))
    with pytest.raises(TypeError, match=r"`sos` has dtype torch\.qint8, which cuscan does not"):
        signal.sosfilt(torch.quantize_per_tensor(torch.as_tensor(sos).float(), 0.1, 0,
                                                 torch.qint8), x)


def test_torch_lazy_conjugates_and_negations():
    """torch's lazy conjugate and negative views (``z.conj()``, ``z.conj().imag``, which
    NumPy cannot view) as signals, states and alphas: every filter gives the values the
    views show, as SciPy and pandas do."""
    torch = require("torch")
    rng = np.random.default_rng(47)
    sos, (b, a) = ss.butter(4, 0.1, output="sos"), ss.cheby1(3, 1, 0.2)
    z = torch.tensor(rng.standard_normal((3, 300)) + 1j * rng.standard_normal((3, 300)))
    states = torch.tensor(rng.standard_normal((2, 3, 2)) + 1j * rng.standard_normal((2, 3, 2)))
    rates = torch.tensor(rng.uniform(0.1, 0.9, (3, 1)) * -1j).conj().imag  # alphas are real
    assert rates.is_neg()
    for lazy in (lambda v: v.conj(), lambda v: v.conj().imag):
        x, zi = lazy(z), lazy(states)
        assert x.is_conj() or x.is_neg()
        shown = [v.resolve_conj().resolve_neg().numpy() for v in (x, zi, rates)]
        for got, want in (
                (signal.sosfilt(sos, x), ss.sosfilt(sos, shown[0])),
                (signal.sosfilt(sos, x, zi=zi)[0], ss.sosfilt(sos, shown[0], zi=shown[1])[0]),
                (signal.lfilter(b, a, x), ss.lfilter(b, a, shown[0])),
                (signal.filtfilt(b, a, x), ss.filtfilt(b, a, shown[0])),
                (signal.filtfilt(b, a, x, method="gust"),
                 ss.filtfilt(b, a, shown[0], method="gust")),
                (signal.sosfiltfilt(sos, x), ss.sosfiltfilt(sos, shown[0])),
                (signal.ema(x, rates),
                 signal.ema(torch.as_tensor(shown[0]), torch.as_tensor(shown[2])).numpy())):
            assert relative_error(got.resolve_conj().resolve_neg().numpy(), want) <= 1e-12


def test_tensorflow_tensors_cuscan_cannot_compute_on_are_refused():
    """Sparse, ragged, quantized and string tensors, as signals, coefficients, states or
    alphas: a TypeError naming the argument."""
    tf = require("tensorflow")
    sos, x = ss.butter(4, 0.1, output="sos"), tf.ones((3, 300))
    with pytest.raises(TypeError, match=r"`x` is a SparseTensor; cuscan needs dense tensors "
                                        r"\(convert with tf\.sparse\.to_dense\)"):
        signal.sosfilt(sos, tf.sparse.from_dense(x))
    with pytest.raises(TypeError, match="`b` is a RaggedTensor"):
        signal.lfilter(tf.ragged.constant([[1.0], [1.0, 2.0]]), [1.0], x)
    with pytest.raises(TypeError, match="`zi` is a SparseTensor"):
        signal.sosfilt(sos, x, zi=tf.sparse.from_dense(tf.zeros((2, 3, 2))))

    def quantized(values, dtype=tf.qint8):
        return tf.quantization.quantize(tf.constant(values, tf.float32), -2.0, 2.0, dtype).output

    # Quantized tensors store integers that are not their values: refused as the core refuses
    # them, coefficients too (whose values cuscan.signal reads on the host).
    for name, call in (("x", lambda: signal.sosfilt(sos, quantized(np.ones((3, 300))))),
                       ("zi", lambda: signal.sosfilt(sos, x, zi=quantized(np.zeros((2, 3, 2))))),
                       ("alpha", lambda: signal.ema(x, quantized(np.full((3, 1), 0.3),
                                                                 tf.quint8))),
                       ("sos", lambda: signal.sosfilt(quantized(sos), x)),
                       ("b", lambda: signal.lfilter(quantized([1.0]), [1.0, -0.5], x)),
                       ("a", lambda: signal.filtfilt([1.0], quantized([1.0, -0.5]), x))):
        dtype = "quint8" if name == "alpha" else "qint8"
        with pytest.raises(TypeError, match=f"`{name}` has dtype {dtype}, which cuscan does not "
                                            f"support"):
            call()
    with pytest.raises(TypeError, match="`x` must hold numbers; got dtype <dtype: 'string'>"):
        signal.lfilter([1.0], [1.0, -0.5], tf.constant([["a", "b"]]))


def test_jax_random_keys_are_refused():
    jax = require("jax")
    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(TypeError, match="`x` has dtype key<fry>, which cuscan does not"):
        signal.sosfilt(ss.butter(4, 0.1, output="sos"), keys)
    with pytest.raises(TypeError, match="`alpha` has dtype key<fry>"):
        signal.ema(jax.numpy.ones((3, 300)), keys[:, None])


NARROW = {  # dtypes narrower than single precision, by library, beyond float16
    "numpy": ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "int4"),
    "jax": ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4"),
    "tensorflow": ("bfloat16", "float8_e4m3fn", "float8_e5m2"),
    "torch": ("bfloat16", "float8_e4m3fn", "float8_e5m2", "complex32"),
}


def narrow_library(library: str, dtype: str):
    """Functions that round NumPy values to ``dtype`` in ``library``, take such arrays
    back to NumPy exactly (in double precision) and take any of its arrays to NumPy."""
    if library == "torch":
        torch = require("torch")

        def narrow(v):
            return torch.as_tensor(v).to(getattr(torch, dtype))

        def wide(v):
            return v.to(torch.complex128 if v.dtype.is_complex else torch.float64).numpy()

        return narrow, wide, lambda v: v.numpy()
    if library == "tensorflow":
        tf = require("tensorflow")

        def narrow(v):
            return tf.cast(v, getattr(tf.dtypes.experimental, dtype, None) or getattr(tf, dtype))

        return narrow, lambda v: tf.cast(v, tf.float64).numpy(), lambda v: v.numpy()
    ml_dtypes = require("ml_dtypes")
    xp = require("jax").numpy if library == "jax" else np
    if not hasattr(ml_dtypes, dtype):  # float4 came with ml_dtypes 0.5
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {dtype}")

    def narrow(v):
        return xp.asarray(np.asarray(v).astype(getattr(ml_dtypes, dtype)))

    return narrow, lambda v: np.asarray(v).astype(np.float64), np.asarray


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
@pytest.mark.parametrize(("library", "dtype"),
                         [(lib, name) for lib, names in NARROW.items() for name in names])
def test_narrow_dtypes_are_widened(library, dtype):
    """Signals, states and ``alpha`` in bfloat16, float8, float4, int4 or complex32 are
    filtered as the same values in single precision (complex64; integers in double,
    which JAX makes single without x64), as float16 ones are, and coefficients in them as
    the same values in double precision, in every library. The core's dtype table has
    none of them; the filters compute in double precision whatever they are given."""
    narrow, wide, to_numpy = narrow_library(library, dtype)
    rng = np.random.default_rng(31)
    x = rng.standard_normal((2, 200))
    sos = ss.butter(4, 0.1, output="sos")
    b, a = ss.butter(2, 0.2)
    given = narrow(x * (1 + 1j) if dtype == "complex32" else x)
    result_dtype = {"complex32": np.complex64, "int4": np.float32 if library == "jax"
                    else np.float64}.get(dtype, np.float32)
    widened = wide(given).astype(result_dtype)
    for ours, theirs in ((signal.sosfilt(sos, given), ss.sosfilt(sos, widened)),
                         (signal.lfilter(b, a, given), ss.lfilter(b, a, widened)),
                         (signal.filtfilt(b, a, given), ss.filtfilt(b, a, widened)),
                         (signal.ema(given, 0.3), signal.ema(widened, 0.3))):
        assert to_numpy(ours).dtype == result_dtype
        np.testing.assert_allclose(to_numpy(ours), np.asarray(theirs).astype(result_dtype),
                                   rtol=1e-5, atol=1e-6)
    zi = narrow(np.full((2, 2, 2), 0.5))
    y, zf = signal.sosfilt(sos, given, zi=zi)
    expected = ss.sosfilt(sos, widened, zi=wide(zi))
    np.testing.assert_allclose(to_numpy(y), expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_numpy(zf), expected[1], rtol=1e-5, atol=1e-6)
    # Coefficients are constants, read as NumPy arrays: the result is the signal's.
    for ours, theirs in ((signal.sosfilt(narrow(sos), x), ss.sosfilt(wide(narrow(sos)), x)),
                         (signal.lfilter(narrow(b), narrow(a), x),
                          ss.lfilter(wide(narrow(b)), wide(narrow(a)), x))):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    if dtype not in ("int4", "complex32"):  # an alpha is a fraction in (0, 1]
        alpha = narrow(np.full((2, 1), 0.3))
        np.testing.assert_allclose(to_numpy(signal.ema(given, alpha)),
                                   signal.ema(widened, wide(alpha)), rtol=1e-5, atol=1e-6)


def test_framework_compiled(framework):
    """Under jax.jit, tf.function and torch.compile (which graph-breaks around the NumPy
    filter design, warning about it and about its own deprecations)."""
    x = np.random.default_rng(11).standard_normal((2, 300))
    sos = ss.butter(4, 0.1, output="sos")
    compile_ = {"jax": lambda f: framework.module.jit(f),
                "tf": lambda f: framework.module.function(f),
                "torch": lambda f: framework.module.compile(f)}[framework.name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compile_(lambda x: signal.sosfilt(sos, x))(framework.tensor(x))
    np.testing.assert_allclose(framework.array(result), ss.sosfilt(sos, x), rtol=1e-10,
                               atol=1e-12)


# Inductor's own imports use a deprecated torch.jit decorator, and Dynamo reads .grad of
# the tensors a function it does not trace returns in a tuple (any such function).
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
def test_torch_compile():
    """torch.compile breaks the graph around each filter, whose design it cannot trace (cold
    caches included), and runs ema inside the graph (fullgraph=True); values and gradients
    are the uncompiled ones."""
    torch = require("torch")
    _poles._stages.cache_clear()  # the design runs inside the compiled call
    torch._dynamo.reset()
    rng = np.random.default_rng(12)
    b, a = ss.butter(3, 0.2)
    sos = ss.butter(4, 0.1, output="sos")
    zi = rng.standard_normal((2, 3))
    calls = {
        "lfilter": lambda x: signal.lfilter(b, a, x),
        "lfilter, zi, lfiltic": lambda x: signal.lfilter(
            b, a, x, zi=torch.as_tensor(zi + signal.lfiltic(b, a, [1.0, 2.0])))[0],
        "lfilter_zi": lambda x: signal.lfilter(
            b, a, x, zi=torch.as_tensor(signal.lfilter_zi(b, a)) * x[:, :1])[0],
        "sosfilt": lambda x: signal.sosfilt(sos, x),
        "sosfilt_zi": lambda x: signal.sosfilt(
            sos, x, zi=torch.as_tensor(signal.sosfilt_zi(sos))[:, None] * x[:, :1])[0],
        "filtfilt": lambda x: signal.filtfilt(b, a, x),
        "filtfilt, gust": lambda x: signal.filtfilt(b, a, x, method="gust"),
        "sosfiltfilt": lambda x: signal.sosfiltfilt(sos, x),
    }
    x = torch.as_tensor(rng.standard_normal((2, 300)))
    x[0, 7:11] = float("nan")
    alpha = torch.tensor([[0.3], [0.7]], dtype=torch.float64)
    fullgraph = {
        "ema": lambda x: signal.ema(x.nan_to_num(), 0.2),
        "ema, alpha tensor, adjust": lambda x: signal.ema(x.nan_to_num(), alpha, adjust=True),
        "ema, nan_policy='omit'": lambda x: signal.ema(x, alpha, nan_policy="omit",
                                                       min_periods=3),
    }
    for name, call in {**calls, **fullgraph}.items():
        signal_ = x if name in fullgraph else x.nan_to_num()
        results = []
        for function in (call, torch.compile(call, fullgraph=name in fullgraph)):
            leaf = signal_.clone().requires_grad_()
            y = function(leaf)
            y.nan_to_num().square().sum().backward()
            results.append((y.detach(), leaf.grad))
        for compiled, plain in zip(results[1], results[0], strict=True):
            torch.testing.assert_close(compiled, plain, equal_nan=True, msg=name)


def test_torch_coefficients_are_constants():
    """Coefficient tensors are read as constants, under torch.func's transforms too (which
    wrap every tensor made inside them); one whose values autograd, forward-mode AD or a
    transform follows is refused, where its derivatives or batch would be lost."""
    torch = require("torch")
    fw = torch.autograd.forward_ad
    b, a = (torch.tensor(v, dtype=torch.float64) for v in ss.cheby1(3, 1, 0.2))
    sos = torch.from_numpy(ss.butter(4, 0.1, output="sos"))
    x = torch.from_numpy(np.random.default_rng(40).standard_normal((3, 50)))
    nb, na, nsos = b.numpy(), a.numpy(), sos.numpy()

    def losses(b, a, sos):
        return {"lfilter": lambda x: signal.lfilter(b, a, x).square().sum(),
                "sosfilt": lambda x: signal.sosfilt(sos, x).square().sum(),
                "filtfilt": lambda x: signal.filtfilt(b, a, x).square().sum(),
                "sosfiltfilt": lambda x: signal.sosfiltfilt(sos, x).square().sum(),
                "zi": lambda x: signal.lfilter(
                    b, a, x, zi=torch.from_numpy(signal.lfilter_zi(b, a)) * x[..., :1])[0]
                .square().sum(),
                "lfiltic": lambda x: signal.lfiltic(b, a, x[..., :3]).square().sum()}

    expected = {name: (torch.func.grad(loss)(x), torch.func.jacrev(loss)(x[0]))
                for name, loss in losses(nb, na, nsos).items()}
    for name, loss in losses(b, a, sos).items():
        torch.testing.assert_close(torch.func.grad(loss)(x), expected[name][0], msg=name)
        torch.testing.assert_close(torch.func.jacrev(loss)(x[0]), expected[name][1], msg=name)
        def inside(x, name=name):  # the coefficients made under the transform
            return losses(b * 1.0, a.clone(), sos + 0.0)[name](x)

        torch.testing.assert_close(torch.func.grad(inside)(x), expected[name][0], msg=name)
    want = signal.lfilter(nb, na, x)
    for transformed in (torch.func.vmap(lambda x: signal.lfilter(b, a, x)),
                        lambda x: torch.func.jvp(lambda x: signal.lfilter(b, a, x), (x,),
                                                 (x,))[1]):
        torch.testing.assert_close(transformed(x), want)
    with torch.no_grad():  # a parameter that nothing differentiates here
        torch.testing.assert_close(signal.lfilter(torch.nn.Parameter(b), a, x), want)

    def dual(b):
        with fw.dual_level():
            return signal.lfilter(fw.make_dual(b, torch.ones_like(b)), a, x)

    def dual_inside_grad(b):
        with fw.dual_level():
            d = fw.make_dual(b, torch.ones_like(b))
            return torch.func.grad(lambda x: signal.lfilter(d, a, x).sum())(x)

    refused = [
        ("requires grad", lambda: signal.lfilter(b.clone().requires_grad_(), a, x)),
        ("requires grad", lambda: torch.func.grad(lambda b: signal.lfilter(b, a, x).sum())(b)),
        ("is batched by torch.func.vmap", lambda: torch.func.vmap(
            lambda sos: signal.sosfilt(sos, x))(sos.expand(2, -1, -1))),
        ("carries a forward-mode tangent", lambda: torch.func.jvp(
            lambda b: signal.lfilter(b, a, x), (b,), (b,))),
        ("carries a forward-mode tangent", lambda: dual(b)),
        ("may carry a tangent of an enclosing torch.func.jvp", lambda: torch.func.jvp(
            lambda b: torch.func.grad(lambda x: signal.lfilter(b, a, x).sum())(x), (b,), (b,))),
        ("may carry a forward-mode tangent, hidden by torch.func", lambda: dual_inside_grad(b)),
        ("is a meta tensor", lambda: signal.lfilter(b, a.to("meta"), x)),
    ]
    for words, call in refused:
        with pytest.raises(TypeError, match=rf"`(b|a|sos)` {words}"):
            call()


def test_jax_coefficients_are_constants():
    """Concrete JAX coefficients serve under jit and grad; traced ones (jax.numpy's arrays
    made inside jit, or coefficients differentiated or batched) are refused."""
    jax = require("jax")
    b, a = ss.butter(3, 0.2)
    x = np.random.default_rng(41).standard_normal((2, 40))
    with jax.enable_x64(True):
        jb, ja = jax.numpy.asarray(b), jax.numpy.asarray(a)
        want = ss.lfilter(b, a, x)
        np.testing.assert_allclose(jax.jit(lambda x: signal.lfilter(jb, ja, x))(x), want,
                                   rtol=1e-12, atol=1e-12)
        for call in (lambda: jax.jit(lambda x: signal.lfilter(jax.numpy.asarray(b), a, x))(x),
                     lambda: jax.grad(lambda b: signal.lfilter(b, a, x).sum())(jb),
                     lambda: jax.vmap(lambda b: signal.lfilter(b, a, x))(jb[None])):
            with pytest.raises(TypeError, match="`b` is traced by JAX"):
                call()


def test_tensorflow_coefficients_are_constants():
    """TensorFlow coefficients serve where no tape follows them and, inside tf.function,
    where their values are known when it is traced; others are refused."""
    tf = require("tensorflow")
    b, a = ss.butter(3, 0.2)
    x = tf.constant(np.random.default_rng(42).standard_normal(40))
    want = ss.lfilter(b, a, x.numpy())
    variable = tf.Variable(b)
    with tf.GradientTape():
        with pytest.raises(TypeError, match="`b` is watched by a GradientTape"):
            signal.lfilter(variable, a, x)
        np.testing.assert_allclose(signal.lfilter(tf.stop_gradient(variable), a, x), want,
                                   rtol=1e-12, atol=1e-12)
    denominator = tf.constant(a)
    with (tf.autodiff.ForwardAccumulator(denominator, tf.ones(a.size, tf.float64)),
          pytest.raises(TypeError, match="`a` is watched")):
        signal.lfilter(b, denominator, x)
    inside = tf.function(lambda x: signal.lfilter(tf.constant(b), tf.constant(a), x))
    np.testing.assert_allclose(inside(x), want, rtol=1e-12, atol=1e-12)
    # every argument a tensor and the signal's sizes unknown: as with NumPy coefficients
    sos = ss.butter(4, 0.1, output="sos")
    signals = np.random.default_rng(43).standard_normal((3, 50))
    for call, expected in (
            (lambda v: signal.lfilter(tf.constant(b), tf.constant(a), v),
             ss.lfilter(b, a, signals)),
            (lambda v: signal.sosfilt(tf.constant(sos), v), ss.sosfilt(sos, signals)),
            (lambda v: signal.filtfilt(tf.constant(b), tf.constant(a), v),
             ss.filtfilt(b, a, signals)),
            (lambda v: signal.sosfiltfilt(tf.constant(sos), v), ss.sosfiltfilt(sos, signals))):
        graph = tf.function(call, input_signature=[tf.TensorSpec([None, None], tf.float64)])
        np.testing.assert_allclose(graph(signals), expected, rtol=1e-10, atol=1e-12)
        with pytest.raises(ValueError, match=r"compiled by XLA .* the signal's length must be"):
            tf.function(call, jit_compile=True,
                        input_signature=[tf.TensorSpec([3, None], tf.float64)])(signals)
    for function, words in ((tf.function(lambda b: signal.lfilter(b, a, x)), "has no values"),
                            (tf.function(lambda: signal.lfilter(variable, a, x)), "is a variable")):
        with pytest.raises(TypeError, match=f"`b` {words}"):
            function(*([tf.constant(b)] if "values" in words else []))


def test_jax_without_64_bit_mode():
    """float64 coefficients and NumPy states beside float32 JAX signals give float32, as JAX
    gives without its 64-bit mode (and without its warning about float64)."""
    jax = require("jax")
    sos = ss.butter(4, 0.1, output="sos")
    x = np.random.default_rng(12).standard_normal(64)
    with jax.enable_x64(False):
        signal_ = jax.numpy.asarray(x, jax.numpy.float32)
        results = [*signal.lfilter([1.0], [1.0, -0.5], signal_, zi=np.zeros(1)),
                   *signal.sosfilt(sos, signal_, zi=np.zeros((2, 2))),
                   signal.sosfiltfilt(sos, signal_), signal.filtfilt([1.0], [1, -0.5], signal_),
                   signal.filtfilt([1.0], [1, -0.5], signal_, method="gust"),
                   signal.ema(signal_, np.float64(0.3)), signal.ema(signal_, 0.3, adjust=True)]
    assert all(r.dtype == jax.numpy.float32 for r in results)
    np.testing.assert_allclose(np.asarray(results[2]), ss.sosfilt(sos, x), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not EXTENDED, reason="needs an extended-precision long double")
def test_accuracy_benchmark_runs():
    """benchmarks/signal_accuracy.py on a few designs (its numbers are in docs/signal.md)."""
    from benchmarks import signal_accuracy

    for name in ("lfilter", "sosfilt"):
        result = signal_accuracy.study(name, 4, 300, seed=1)
        assert len(result["rows"]) == 4
        assert all(np.isfinite(row["cuscan_error"]) for row in result["rows"])
