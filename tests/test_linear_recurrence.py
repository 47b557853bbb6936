"""linear_recurrence against the float64 reference, on every backend."""

from __future__ import annotations

import array
import math

import numpy as np
import pytest

import cuscan
from tests import reference
from tests.conftest import (
    DTYPES,
    Backend,
    assert_close,
    decays_near_one,
    dtype_of,
    record_results,
    tolerance,
)

METHODS = ["serial", "parallel", "auto"]
# Awkward lengths: tiny, primes, powers of two and their neighbours, chunk edges.
LENGTHS = [1, 2, 3, 4, 5, 7, 13, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129, 1000, 1023, 1024,
           1025, 4099, 65537]


def make(rng, shape, dtype="float64", low=0.0, high=1.0):
    """Random decays-like (uniform) data of ``dtype``, complex with a random phase."""
    dtype = dtype_of(dtype) if isinstance(dtype, str) else dtype
    values = rng.uniform(low, high, shape)
    if dtype.kind == "c":
        values = values * np.exp(1j * rng.uniform(0, 2 * np.pi, shape))
    return values.astype(dtype)


def check(backend, decays, impulses, initial_state=None, *, axis=0, reverse=False,
          method="auto", dtype=None):
    """Run cuscan on ``backend`` and compare with the reference."""
    args = [backend.asarray(v) if isinstance(v, np.ndarray) else v
            for v in (decays, impulses, initial_state)]
    result = cuscan.linear_recurrence(*args, axis=axis, reverse=reverse, method=method)
    assert type(result) is type(backend.xp.empty(0))
    result = backend.to_numpy(result)
    expected = reference.linear_recurrence(decays, impulses, initial_state, axis=axis,
                                           reverse=reverse)
    scale = reference.error_scale(decays, impulses, initial_state, axis=axis, reverse=reverse)
    assert result.shape == expected.shape
    if dtype is not None:
        assert result.dtype == dtype
    length = expected.shape[axis] if expected.ndim else 1
    assert_close(result, expected, scale, dtype or result.dtype, length)
    return result


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("length", LENGTHS)
def test_lengths(backend, method, length):
    rng = np.random.default_rng(length)
    decays = make(rng, (length, 3))
    impulses = make(rng, (length, 3), low=-1.0)
    check(backend, decays, impulses, method=method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 1, 1)])
def test_one_element(backend, method, shape):
    """One step of one channel, from a state: the one element is computed, never left
    as allocated."""
    rng = np.random.default_rng(len(shape))
    for reverse in (False, True):
        check(backend, make(rng, shape, low=-1.0), make(rng, shape, low=-1.0),
              make(rng, shape[1:], low=-1.0), axis=len(shape) - 1, reverse=reverse,
              method=method)


@pytest.mark.parametrize("method", METHODS)
def test_one_channel_long(backend, method):
    rng = np.random.default_rng(0)
    length = 2**20 if method != "serial" else 2**14
    check(backend, make(rng, length), make(rng, length, low=-1.0), method=method)


@pytest.mark.parametrize("method", METHODS)
def test_empty_time_axis(backend, method):
    result = cuscan.linear_recurrence(backend.asarray(np.ones((0, 4))),
                                      backend.asarray(np.ones((0, 4))), method=method)
    assert result.shape == (0, 4)
    result = cuscan.linear_recurrence(backend.asarray(np.ones((3, 0))),
                                      backend.asarray(np.ones((3, 0))), method=method)
    assert result.shape == (3, 0)


@pytest.mark.parametrize("shape", [(37,), (29, 5), (3, 41, 4), (2, 3, 67, 2)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("method", METHODS)
def test_every_axis(backend, shape, reverse, method):
    rng = np.random.default_rng(len(shape))
    decays, impulses = make(rng, shape), make(rng, shape, low=-1.0)
    for axis in range(-len(shape), len(shape)):
        state = make(rng, shape[:axis % len(shape)] + shape[axis % len(shape) + 1:], low=-1)
        check(backend, decays, impulses, state, axis=axis, reverse=reverse, method=method)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("reverse", [False, True])
def test_dtypes(backend, dtype, method, reverse):
    rng = np.random.default_rng(7)
    shape = (517, 6)
    decays = make(rng, shape, dtype, 0.5, 1.0)
    impulses = make(rng, shape, dtype, -1.0)
    state = make(rng, (6,), dtype, -1.0)
    check(backend, decays, impulses, state, reverse=reverse, method=method,
          dtype=dtype_of(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_each_channels_state_reaches_every_chunk(backend, dtype, reverse):
    """Decays near one keep each channel's own initial state (of a contiguous state and of a
    strided view) in every chunk of the parallel scan, whose chunk level starts from those
    states in its wider dtype."""
    rng = np.random.default_rng(8)
    decays = make(rng, (517, 6), dtype, 0.999, 1.0)
    impulses = make(rng, (517, 6), dtype, -0.01, 0.01)
    for state in (make(rng, (6,), dtype, -1.0), make(rng, (12,), dtype, -1.0)[::2]):
        check(backend, decays, impulses, state, reverse=reverse, method="parallel",
              dtype=dtype_of(dtype))


# (decays shape, impulses shape, initial_state shape or None, axis)
BROADCASTS = [
    ((), (50, 4), None, 0),                # scalar decay
    ((4,), (50, 4), None, 0),              # time-invariant decays
    ((50, 1), (50, 4), (4,), 0),           # one decay per step, shared by channels
    ((50, 4), (4,), None, 0),              # constant impulses
    ((50, 4), (), (), 0),                  # scalar impulse and scalar state
    ((3, 1, 4), (1, 50, 4), (3, 1), 1),    # batch x time x channels, both broadcast
    ((1, 4, 1), (2, 4, 50), (2, 1), -1),   # time last
    ((50, 1, 4), (50, 3, 1), (1, 4), 0),   # outer product of channel sets
    ((30, 1, 3, 1, 5), (30, 2, 3, 4, 5), (2, 1, 4, 1), 0),  # four channel axes, none merge
]


@pytest.mark.parametrize(("decays_shape", "impulses_shape", "state_shape", "axis"), BROADCASTS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("reverse", [False, True])
def test_broadcasting(backend, decays_shape, impulses_shape, state_shape, axis, method, reverse):
    rng = np.random.default_rng(3)
    decays = make(rng, decays_shape, low=0.5)
    impulses = make(rng, impulses_shape, low=-1.0)
    state = None if state_shape is None else make(rng, state_shape, low=-1.0)
    check(backend, decays, impulses, state, axis=axis, method=method, reverse=reverse)


@pytest.mark.parametrize("method", METHODS)
def test_python_scalars_and_lists(backend, method):
    result = cuscan.linear_recurrence(0.5, backend.asarray(np.ones(70, np.float32)),
                                      initial_state=2, method=method)
    assert result.dtype == np.float32
    expected = reference.linear_recurrence(0.5, np.ones(70), 2)
    np.testing.assert_allclose(backend.to_numpy(result), expected, rtol=1e-6)
    if backend.name == "numpy":
        np.testing.assert_allclose(
            cuscan.linear_recurrence([0.5, 0.5, 0.5], [1, 2, 3], method=method),
            [1.0, 2.5, 4.25])
        np.testing.assert_allclose(
            cuscan.linear_recurrence((0.5, 0.5, 0.5), range(1, 4), method=method),
            [1.0, 2.5, 4.25])
        # Typed buffers are sequences too, and keep their type's dtype, as NumPy reads them.
        result = cuscan.linear_recurrence(0.5, array.array("f", [1, 2, 3]), method=method)
        assert result.dtype == np.float32
        np.testing.assert_allclose(result, [1.0, 2.5, 4.25])
        impulses = np.arange(12.0).reshape(4, 3)[::2, ::-1]
        result = cuscan.linear_recurrence(memoryview(np.full(3, 0.5)), memoryview(impulses),
                                          axis=0, method=method)
        np.testing.assert_allclose(result, reference.linear_recurrence(0.5, impulses))


@pytest.mark.parametrize("method", METHODS)
def test_non_contiguous_inputs(backend, method):
    rng = np.random.default_rng(11)
    base = make(rng, (200, 12, 6), low=0.3)
    views = {
        "strided": base[::2, ::3, 1],
        "transposed": base[:, :, 0].T,
        "fortran": np.asfortranarray(base[:, :, 2]),
        "negative": base[::-1, ::-2, 3],
    }
    for decays in views.values():
        for impulses in views.values():
            for axis in (0, 1):
                if decays.shape != impulses.shape:
                    continue
                check(backend, decays, impulses - 0.5, axis=axis, method=method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("reverse", [False, True])
def test_inputs_not_modified(backend, method, reverse):
    rng = np.random.default_rng(5)
    decays, impulses, state = make(rng, (300, 3)), make(rng, (300, 3)), make(rng, (3,))
    arrays = [backend.asarray(v) for v in (decays, impulses, state)]
    cuscan.linear_recurrence(*arrays, method=method, reverse=reverse)
    for before, after in zip((decays, impulses, state), arrays, strict=True):
        np.testing.assert_array_equal(before, backend.to_numpy(after))


@pytest.mark.parametrize("method", METHODS)
def test_zero_decays_reset(backend, method):
    rng = np.random.default_rng(2)
    decays = make(rng, (5000, 2), low=0.9)
    decays[rng.random(decays.shape) < 0.01] = 0.0
    decays[:, 1] = 0.0
    result = check(backend, decays, make(rng, (5000, 2), low=-1), method=method)
    assert np.isfinite(result).all()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_underflowing_products(backend, method, dtype):
    # Products of many small decays underflow to zero; the state must not.
    rng = np.random.default_rng(4)
    decays = np.full((20000, 2), 1e-3, dtype)
    impulses = make(rng, (20000, 2), dtype, -1.0)
    result = check(backend, decays, impulses, method=method)
    assert np.isfinite(result).all()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("channels", [1, 3])  # three: time contiguous along axis -1
def test_zero_state_through_overflowing_products(backend, method, dtype, channels):
    # Serially, 0 * huge stays 0; chunk products overflow to infinity, and a
    # zero carry times an infinite product must not become NaN.
    length = 6000
    decays = np.full((channels, length), np.sqrt(np.finfo(dtype).max), dtype)
    impulses = np.zeros((channels, length), dtype)
    decays[:, 4000:], impulses[:, 4000:] = 0.5, 1.0
    decays[1:, 100] = 0.5  # other channels overflow later
    result = backend.to_numpy(cuscan.linear_recurrence(
        backend.asarray(decays), backend.asarray(impulses), axis=-1, method=method))
    expected = reference.linear_recurrence(decays, impulses, axis=-1)
    assert not np.isnan(result).any()
    np.testing.assert_allclose(result, expected, rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("axis", [0, -1])  # channels contiguous, time contiguous
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_nan_and_inf_propagate_as_serially(backend, method, axis, dtype):
    length = 3000
    rng = np.random.default_rng(9)
    decays = make(rng, (length, 8), dtype, low=0.5)  # channels 6 and 7 stay finite
    impulses = make(rng, (length, 8), dtype, low=-1)
    impulses[1234, 0] = np.nan          # NaN impulse: NaN from there on
    decays[1500, 1] = np.nan            # NaN decay: likewise
    impulses[700, 2] = np.inf           # infinity decays but stays infinite
    impulses[700, 3] = np.inf           # ... until a zero decay makes it NaN
    decays[900, 3] = 0.0
    decays[2000, 4] = np.inf            # infinite decay times a finite state
    impulses[10, 5] = -np.inf           # -inf then +inf: NaN
    impulses[20, 5] = np.inf
    if axis:
        decays, impulses = decays.T.copy(), impulses.T.copy()
    check(backend, decays, impulses, method=method, axis=axis)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("axis", [0, -1])  # channels contiguous, time contiguous
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_overflow_persists_as_serially(backend, method, axis, dtype):
    """A state that overflows stays infinite in the serial loop, even where later decays
    would bring it back into range; so it does in every method, forward and backward. The
    chunked scans can see it finite: their carries, in double precision, hold a single-
    precision state past its largest value (channels 0 and 1, which climb by ``r`` per step
    and come down again), and a chunk's product and reduction stay finite over a jump up and
    straight down again at its start (at its end, backwards), while its state overflows
    there (channels 2 and on, the jump one step later in each). Elsewhere results match the
    reference."""
    check_overflow_persists(backend, method, axis, dtype)


def check_overflow_persists(backend, method, axis, dtype):
    """`test_overflow_persists_as_serially` on ``backend``."""
    largest = float(np.finfo(dtype).max)
    big = np.sqrt(largest)
    length, channels, rng = 4096, 130, np.random.default_rng(17)
    decays = np.full((length, channels), 0.5)
    impulses = rng.uniform(0.5, 1, (length, channels)) * big / 4
    grad_output = rng.uniform(0.5, 1, (length, channels)) * big / 4
    r = np.exp((np.log(largest) + 16) / 2000)
    climb = np.concatenate([np.full(2000, r), np.full(2000, 1 / r), np.ones(length - 4000)])
    decays[:, 0], impulses[:, 0], grad_output[:, 0] = climb, 0, 0
    impulses[0, 0] = 1
    decays[:, 1], impulses[:, 1], grad_output[:, 1] = climb[::-1], 0, 0
    grad_output[-1, 1] = 1  # the gradient climbs backwards in time
    for c in range(2, 66):  # at every offset from chunk boundaries up to 64 steps apart
        decays[3000 + c:3002 + c, c] = 16 * big, 1 / (16 * big)  # up and down: forward
        decays[3000 + c:3002 + c, c + 64] = 1 / (16 * big), 16 * big  # backward
    decays, impulses, grad_output = (v.astype(dtype) for v in (decays, impulses, grad_output))
    shifted = np.concatenate([decays[1:], np.zeros((1, channels), dtype)])  # a[t + 1]
    if axis:
        decays, impulses, grad_output, shifted = (np.ascontiguousarray(v.T) for v in
                                                  (decays, impulses, grad_output, shifted))
    h = cuscan.linear_recurrence(backend.asarray(decays), backend.asarray(impulses), axis=axis,
                                 method=method)
    grad = cuscan.linear_recurrence_vjp(backend.asarray(grad_output), backend.asarray(decays),
                                        h, axis=axis)[1]
    for result, a, x, reverse in ((h, decays, impulses, False),
                                  (grad, shifted, grad_output, True)):
        result = backend.to_numpy(result)
        expected = reference.linear_recurrence(a, x, axis=axis, reverse=reverse)
        scale = reference.error_scale(a, x, axis=axis, reverse=reverse)
        over = np.abs(expected) > largest
        over = np.flip(over, axis) if reverse else over
        over = np.logical_or.accumulate(over, axis=axis)  # a non-finite state persists
        over = np.flip(over, axis) if reverse else over
        assert over.any(axis=axis).sum() == channels - 1  # all but channel 1, or 0
        assert np.isposinf(result[over]).all()
        assert_close(result[~over], expected[~over], scale[~over], dtype, length)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("length", [33, 200, 1000])  # short scans: whole-array steps
def test_short_scans_carry_non_finite_values_as_serially(backend, method, length):
    rng = np.random.default_rng(length)
    decays, impulses = make(rng, (length, 7), low=0.5), make(rng, (length, 7), low=-1)
    impulses[length // 3, 0] = np.nan
    decays[length // 2, 1] = np.nan
    impulses[length // 4, 2] = np.inf
    impulses[length // 4, 3] = np.inf
    decays[length // 2, 3] = 0.0
    decays[length // 2, 4] = np.inf
    # Serially 0 * huge stays 0 until the decays shrink; products over a span overflow.
    decays[:length // 2, 5] = np.sqrt(np.finfo(np.float64).max)
    impulses[:length // 2, 5] = 0.0  # channel 6 stays finite
    state = make(rng, (7,), low=-1)  # re-run channels start from theirs
    state[5] = 0.0
    result = check(backend, decays, impulses, state, method=method)
    assert np.isfinite(result[:, 5:]).all()


@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("axis", [0, -1])  # channels contiguous, time contiguous
@pytest.mark.parametrize("dtype", ["float32", "complex64"])
@pytest.mark.parametrize("length", [2**12, 2**18])  # short: Hillis and Steele's (NumPy)
def test_single_precision_decays_near_one(backend, method, axis, dtype, length):
    """Over 2^12 and 2^18 steps of decays of modulus 1 (complex rotations, as in state-space
    models) or 1 - 10^-5, in single precision, forward and backward stay within ``eps *
    sqrt(T)`` of the result's RMS, as the serial loop's rounding does. The chunked scans'
    chunk-level recurrence runs in double precision: its decay over a chunk, rounded once in
    single precision, entered every later chunk and drifted the result by up to 44 times
    that (NumPy) and 90 times (the kernels, on the host), the gradient's too, whatever the
    method. So do the products of the decays in the NumPy backend's scan of short arrays
    (2^12 steps): squared in single precision, they drifted it by 14 times the bound."""
    decays, impulses, bound = decays_near_one(dtype, length)
    if axis:
        decays, impulses = decays[:, None], np.ascontiguousarray(impulses.T)
    h = cuscan.linear_recurrence(backend.asarray(decays), backend.asarray(impulses),
                                 axis=axis, method=method)
    expected = reference.linear_recurrence(decays, impulses, axis=axis)
    assert reference.relative_error(backend.to_numpy(h), expected) <= bound
    # grad_impulses: the same recurrence backwards in time, with the conjugate decays
    grad = cuscan.linear_recurrence_vjp(backend.asarray(impulses), backend.asarray(decays), h,
                                        axis=axis)[1]
    expected = reference.linear_recurrence(np.conj(decays), impulses, axis=axis, reverse=True)
    assert reference.relative_error(backend.to_numpy(grad), expected) <= bound


@pytest.mark.parametrize("method", METHODS)
def test_matches_across_methods(backend, method):
    rng = np.random.default_rng(12)
    decays, impulses = make(rng, (3001, 5), "float32"), make(rng, (3001, 5), "float32", -1)
    serial = cuscan.linear_recurrence(backend.asarray(decays), backend.asarray(impulses),
                                      method="serial")
    other = cuscan.linear_recurrence(backend.asarray(decays), backend.asarray(impulses),
                                     method=method)
    np.testing.assert_allclose(backend.to_numpy(other), backend.to_numpy(serial),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("reverse", [False, True])
def test_numpy_serial_is_the_loop(dtype, axis, reverse):
    """The NumPy backend's ``method="serial"`` is the recurrence taken step by step in the
    dtype its arithmetic runs in (`_dtypes.accumulator`), from the initial state, rounded
    once to the result's dtype: bit for bit, on scans long enough for the parallel
    methods (which round otherwise) to be taken where the method is not heeded. (Real
    dtypes: NumPy's complex product rounds by its operands' strides, within an ulp.)"""
    from cuscan import _dtypes

    rng = np.random.default_rng(40)
    dtype = dtype_of(dtype)
    shape = [3, 5]
    shape.insert(axis, 4099)
    decays, impulses = make(rng, shape, dtype), make(rng, shape, dtype, -1.0)
    state = make(rng, [n for k, n in enumerate(shape) if k != axis], dtype, -1.0)
    result = cuscan.linear_recurrence(decays, impulses, state, axis=axis, reverse=reverse,
                                      method="serial")
    expected = reference.linear_recurrence(decays, impulses, state, axis=axis, reverse=reverse,
                                           dtype=_dtypes.accumulator(dtype))
    np.testing.assert_array_equal(result, expected.astype(dtype))


@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "int64", "uint16"])
def test_integer_inputs_promote_to_float64(backend, dtype):
    decays = np.ones((9, 2), dtype)
    impulses = np.ones((9, 2), dtype)
    result = cuscan.linear_recurrence(backend.asarray(decays), backend.asarray(impulses))
    assert result.dtype == np.float64
    np.testing.assert_array_equal(backend.to_numpy(result)[:, 0], np.arange(1, 10))


def test_promotion_follows_numpy(backend):
    f32 = backend.asarray(np.ones(5, np.float32))
    f64 = backend.asarray(np.ones(5, np.float64))
    c64 = backend.asarray(np.ones(5, np.complex64))
    assert cuscan.linear_recurrence(f32, f64).dtype == np.float64
    assert cuscan.linear_recurrence(f32, c64).dtype == np.complex64
    assert cuscan.linear_recurrence(f64, c64).dtype == np.complex128
    assert cuscan.linear_recurrence(0.5, f32).dtype == np.float32
    assert cuscan.linear_recurrence(0.5j, f32).dtype == np.complex64
    assert cuscan.linear_recurrence(f32, f32, 2.0).dtype == np.float32
    # NumPy scalars are strong, as in NumPy 2.
    assert cuscan.linear_recurrence(np.float64(0.5), f32).dtype == np.float64
    assert cuscan.linear_recurrence(np.float16(0.5), f32).dtype == np.float32


@pytest.mark.parametrize(("other", "expected"), [
    ("float16", "float32"),  # neither half type holds the other
    ("bool", "bfloat16"), ("int8", "bfloat16"), ("uint8", "bfloat16"),  # as float16 does
    ("int16", "float32"), ("int32", "float64"), ("float32", "float32"),
    ("complex64", "complex64"), ("bfloat16", "bfloat16"),
])
def test_bfloat16_promotes_as_float16(backend, other, expected):
    """bfloat16 beside another array promotes as float16 would, except that with float16 it
    gives float32; a complex scalar makes it complex64, a float scalar leaves it. The
    values are the reference's in that dtype, whichever operand is which."""
    rng = np.random.default_rng(59)
    half = make(rng, (70, 3), "bfloat16", 0.5, 1.0)
    if other[0] in "biu":  # small integers; as decays, ones
        values, decays = rng.integers(0, 2, (70, 3)).astype(other), np.ones((70, 3), other)
    else:
        values = decays = make(rng, (70, 3), other, 0.5, 1.0)
    check(backend, half, values, dtype=dtype_of(expected))
    check(backend, decays, half, dtype=dtype_of(expected))
    f = backend.asarray(half)
    assert cuscan.linear_recurrence(0.5, f).dtype == dtype_of("bfloat16")
    assert cuscan.linear_recurrence(f, f, 0.5j).dtype == np.complex64


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
def test_numpy_non_native_byte_order(method, dtype):
    """Big-endian operands (as read from files) give native-order results and gradients,
    as NumPy's ufuncs do, with the values of the same data in native order."""
    rng = np.random.default_rng(7)
    native = np.dtype(dtype)
    swapped = native.newbyteorder("S")
    decays, impulses = make(rng, (37, 3), native), make(rng, (37, 3), native, -1.0)
    state = make(rng, (3,), native)
    expected = cuscan.linear_recurrence(decays, impulses, state, method=method)
    result = cuscan.linear_recurrence(decays.astype(swapped), impulses.astype(swapped),
                                      state.astype(swapped), method=method)
    assert result.dtype.str == native.str
    np.testing.assert_array_equal(result, expected)
    grads = cuscan.linear_recurrence_vjp(np.ones_like(expected).astype(swapped),
                                         decays.astype(swapped), result, state.astype(swapped))
    for grad, want in zip(grads, cuscan.linear_recurrence_vjp(np.ones_like(expected), decays,
                                                              expected, state), strict=True):
        assert grad.dtype.str == native.str
        np.testing.assert_array_equal(grad, want)


@pytest.mark.parametrize("layout", ["copies", "views"])
def test_numpy_time_contiguous(monkeypatch, layout):
    """The NumPy backend scans time-contiguous operands, such as (C, T) along axis -1,
    in time-major copies when they are long (or as they are): forward and backward give
    the reference's results and those of the same data laid out time-major, for every
    method, broadcast operands, half precision and complex data."""
    from cuscan import _numpy_backend

    monkeypatch.setattr(_numpy_backend, "_MIN_SCATTERED_LENGTH",
                        1 if layout == "copies" else np.inf)
    # Operands and results copied in many tiles
    monkeypatch.setattr(_numpy_backend, "_TILE_BYTES", 7 * 7 * 4)
    monkeypatch.setattr(_numpy_backend, "_MIN_TILE", 1)
    numpy = Backend("numpy")
    rng = np.random.default_rng(37)
    for shape in ((40, 257), (3, 20, 1031), (70, 300)):  # the last copied time-major
        for dtype in ("float16", "float32", "complex128"):
            check_time_contiguous(numpy, rng, shape, dtype)


def check_time_contiguous(numpy, rng, shape, dtype) -> None:
    """Random operands of ``shape`` along axis -1 on ``numpy``: the forward scan by every
    method, reversed, time-invariant, broadcast along channels and strided, against the
    reference; the vector-Jacobian product against that of the same data time-major."""
    decays = make(rng, shape, dtype)
    impulses = make(rng, shape, dtype, low=-1.0)
    state = make(rng, shape[:-1], dtype, low=-1.0)
    for method in METHODS:
        check(numpy, decays, impulses, state, axis=-1, method=method)
    check(numpy, decays, impulses, axis=-1, reverse=True)
    check(numpy, decays[..., :1], impulses, state, axis=-1)  # time-invariant
    check(numpy, decays[..., :1, :], impulses, axis=-1)  # broadcast along channels
    check(numpy, decays[::2, ..., ::3], impulses[::2, ..., ::3], axis=-1)  # strided
    output = cuscan.linear_recurrence(decays, impulses, state, axis=-1)
    weights = make(rng, shape, dtype, low=-1.0)
    grads = cuscan.linear_recurrence_vjp(weights, decays, output, state, axis=-1)
    major = cuscan.linear_recurrence_vjp(
        *(np.ascontiguousarray(np.moveaxis(v, -1, 0)) for v in (
            weights, decays, output)), state, axis=0)
    # The same arithmetic, but for the order of the chunked scan's products.
    limit = tolerance(dtype_of(dtype), shape[-1])
    for grad, expected in ((grads[0], np.moveaxis(major[0], 0, -1)),
                           (grads[1], np.moveaxis(major[1], 0, -1)),
                           (grads[2], major[2])):
        expected = expected.astype(np.complex128)
        np.testing.assert_allclose(grad, expected, rtol=0,
                                   atol=limit * np.abs(expected).max())


@pytest.mark.parametrize("layout", ["copies", "views"])
def test_numpy_runs(monkeypatch, layout):
    """Steps in several runs ((B, T, D) along axis 1) are scanned in time-major copies, a
    segment at a time, or as they lie: forward and backward give the reference's results
    and those of the same data laid out time-major, for every method, half precision and
    complex data, reversed, broadcast and strided operands."""
    from cuscan import _numpy_backend

    monkeypatch.setattr(_numpy_backend, "_MIN_RUNS_BYTES", 0)
    monkeypatch.setattr(_numpy_backend, "_MAX_RUNS_ROW", np.inf if layout == "copies" else -1)
    monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 4096)  # segments of 256 steps
    copied = record_results(monkeypatch, _numpy_backend, "_scattered")
    numpy = Backend("numpy")
    rng = np.random.default_rng(47)
    for shape in ((3, 300, 5), (2, 1031, 2, 3)):
        for dtype in ("float16", "float32", "complex128"):
            decays = make(rng, shape, dtype)
            impulses = make(rng, shape, dtype, low=-1.0)
            state = make(rng, (shape[0], *shape[2:]), dtype, low=-1.0)
            for method in METHODS:
                check(numpy, decays, impulses, state, axis=1, method=method)
            check(numpy, decays, impulses, axis=1, reverse=True)
            check(numpy, decays[:, :1], impulses, state, axis=1)  # time-invariant
            check(numpy, decays[:1], impulses, axis=1)  # broadcast along the batch
            check(numpy, decays[..., ::2], impulses[..., ::2], axis=1)  # strided
            output = cuscan.linear_recurrence(decays, impulses, state, axis=1)
            weights = make(rng, shape, dtype, low=-1.0)
            grads = cuscan.linear_recurrence_vjp(weights, decays, output, state, axis=1)
            major = cuscan.linear_recurrence_vjp(
                *(np.ascontiguousarray(np.moveaxis(v, 1, 0)) for v in (
                    weights, decays, output)), state, axis=0)
            limit = tolerance(dtype_of(dtype), shape[1])
            for grad, expected in ((grads[0], np.moveaxis(major[0], 0, 1)),
                                   (grads[1], np.moveaxis(major[1], 0, 1)),
                                   (grads[2], major[2])):
                expected = expected.astype(np.complex128)
                np.testing.assert_allclose(grad, expected, rtol=0,
                                           atol=limit * np.abs(expected).max())
    assert any(copied) == (layout == "copies")


def test_numpy_runs_rule():
    """Steps in runs are copied time-major from 64 KiB, or below it where the scan would run
    on them as they lie (the serial loop), not where it copies them itself."""
    from cuscan import _numpy_backend

    def runs(batch, length, features, method="auto"):  # (B, T, D) float32 along axis 1
        return _numpy_backend._in_runs((length, batch, features),  # time first
                                       (4 * features, 4 * length * features, 4), np.float32,
                                       method)

    assert runs(8, 1024, 256)  # 8 MiB
    assert runs(16, 64, 8)  # 32 KiB in steps of 512 bytes: the serial loop
    assert not runs(2, 64, 16)  # 8 KiB in steps of 128 bytes: Hillis and Steele's scan
    assert runs(2, 64, 16, "serial")
    assert not runs(2, 2047, 4)  # 64 KiB less a step, Hillis and Steele's: from 64 KiB
    assert runs(2, 2048, 4)
    assert not runs(8, 16, 256)  # too short
    assert not runs(1, 4096, 64)  # one run


@pytest.mark.parametrize("as_they_lie", [True, False])
def test_numpy_chunk_order(monkeypatch, as_they_lie):
    """The chunked scan's copies of narrow steps lay out each step's chunks and channels as
    the operand does (time-contiguous channels: the chunks innermost, one channel's run of
    chunks at a time where the runs lie pages apart) or the chunks outermost: forward and
    backward give the reference's results and those of the same data laid out time-major,
    for every method, half precision and complex data, reversed, broadcast and strided
    operands, whole and in segments of time."""
    from cuscan import _numpy_backend

    monkeypatch.setattr(_numpy_backend, "_CHUNKS_AS_THEY_LIE", as_they_lie)
    monkeypatch.setattr(_numpy_backend, "_MIN_CHUNK_RUN_BYTES", 0)
    apart = record_results(monkeypatch, _numpy_backend, "_runs_apart")
    numpy = Backend("numpy")
    rng = np.random.default_rng(53)

    def chunked(view, chunk):  # time-first (T, C) as (chunk, count, C)
        return np.swapaxes(view.reshape(-1, chunk, view.shape[1]), 0, 1)

    contiguous = _numpy_backend._chunk_order(chunked(np.empty((4, 1000)).T, 10))
    assert contiguous == ((1, 0) if as_they_lie else (0, 1))
    assert _numpy_backend._chunk_order(chunked(np.empty((1000, 4)), 10)) == (0, 1)
    for segment in (2**20, 4096):
        monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", segment)
        # (3, 2048): runs a multiple of a page apart; (2, 3, 1031): neither.
        for shape in ((3, 2048), (2, 3, 1031)):
            for dtype in ("float16", "float32", "complex128"):
                check_time_contiguous(numpy, rng, shape, dtype)
    assert any(apart) == as_they_lie


def test_numpy_work_buffer():
    """A result of lower precision than the scan's is scanned into a buffer laid out as the
    result where the scan works in copies of its own (Hillis and Steele's scan, the chunked
    scan on narrow steps), from 256 steps, else (the serial loop, short scans) time-major;
    a result scattered for its layout always time-major."""
    from cuscan import _numpy_backend
    from cuscan._scratch import Scratch

    def buffer(shape, method, dtype="float16"):
        target = np.empty(shape, dtype).T  # time-first, time-contiguous
        with Scratch() as scratch:
            work = _numpy_backend._buffer(target, np.float32, scratch, method=method)
            return work.dtype, work.strides[0] < work.strides[1]

    for method in ("auto", "parallel"):
        assert buffer((4, 4096), method) == (np.float32, True)  # Hillis and Steele's
        assert buffer((2, 65536), method) == (np.float32, True)  # chunks copied
        assert buffer((1024, 4096), method) == (np.float32, False)  # scattered
    assert buffer((4, 4096), "serial") == (np.float32, False)
    assert buffer((16, 100), "auto") == (np.float32, False)  # short
    assert buffer((4, 4096), "auto", "float32") == (np.float32, True)  # the result itself


@pytest.mark.parametrize("laid_out", [True, False])
def test_numpy_serial_broadcast_rows(monkeypatch, laid_out):
    """The serial loop's decays constant in time and broadcast over some channels ((D,)
    decays of (B, T, D) along axis 1) run as one row laid out as the result's steps, or
    broadcast as given: forward and backward give the reference's results and those of
    the decays written out in full, for every method, half precision and complex data,
    reversed and strided operands."""
    from cuscan import _numpy_backend

    monkeypatch.setattr(_numpy_backend, "_ROW_STEPS", 2 if laid_out else np.inf)
    rows = record_results(monkeypatch, _numpy_backend, "_laid_out")
    numpy = Backend("numpy")
    rng = np.random.default_rng(59)
    row = _numpy_backend._broadcast_row  # of time-first decays
    assert row(np.broadcast_to(np.ones(5), (7, 4, 5)))
    assert not row(np.broadcast_to(np.ones((4, 5)), (7, 4, 5)))  # a whole row already
    assert not row(np.broadcast_to(np.ones(1), (7, 4, 5)))  # one decay
    assert not row(np.ones((7, 4, 5)))  # varying in time
    for shape, decay_shape in (((3, 70, 40), (40,)), ((2, 50, 3, 30), (2, 1, 1, 30))):
        for dtype in ("float16", "float32", "complex128"):
            decays = make(rng, decay_shape, dtype)
            full = np.ascontiguousarray(np.broadcast_to(decays, shape))
            impulses = make(rng, shape, dtype, low=-1.0)
            state = make(rng, (shape[0], *shape[2:]), dtype, low=-1.0)
            for method in METHODS:
                check(numpy, decays, impulses, state, axis=1, method=method)
            check(numpy, decays, impulses, axis=1, reverse=True, method="serial")
            check(numpy, decays, impulses[:, ::-1], axis=1, method="serial")  # reversed
            check(numpy, decays[..., ::2], impulses[..., ::2], axis=1, method="serial")
            output = cuscan.linear_recurrence(decays, impulses, state, axis=1)
            weights = make(rng, shape, dtype, low=-1.0)
            grads = cuscan.linear_recurrence_vjp(weights, decays, output, state, axis=1)
            expected = cuscan.linear_recurrence_vjp(weights, full, output, state, axis=1)
            summed = tuple(range(full.ndim - len(decay_shape)))
            kept = tuple(i for i, n in enumerate(decay_shape, full.ndim - len(decay_shape))
                         if n == 1 and full.shape[i] > 1)
            limit = tolerance(dtype_of(dtype), shape[1])
            terms = math.prod(shape) // math.prod(decay_shape)  # summed into each decay's
            for grad, want, count in (
                    (grads[0], expected[0].sum(summed + kept, keepdims=True)
                     .reshape(decay_shape), terms),
                    (grads[1], expected[1], 1), (grads[2], expected[2], 1)):
                want = want.astype(np.complex128)
                np.testing.assert_allclose(grad, want, rtol=0,
                                           atol=limit * count * np.abs(want).max())
    assert bool(rows) == laid_out


def test_numpy_tiles(monkeypatch):
    """The NumPy backend's tiled copies: square tiles of about 256 KiB, a narrow axis
    leaving the other the rest, sides of at least 64 elements (of the first two axes,
    whose elements may be large blocks), and rows of a few elements from columns copied a
    column at a time; the copies equal NumPy's for awkward shapes, strides, dtypes and tile
    sizes."""
    from cuscan import _numpy_backend

    tile = _numpy_backend._tile
    assert tile((10**6, 10**6), 8) == (181, 181)
    assert tile((10**6, 10**6), 4) == (256, 256)
    assert tile((10**6, 3), 8) == (10922, 3)  # a narrow second axis
    assert tile((2, 10**6), 8) == (2, 16384)  # a narrow first axis
    assert tile((2, 100), 8) == (2, 100)
    assert tile((8, 8), 8 * 32768) == (8, 8)  # large blocks: one tile, not 64
    assert tile((10**6, 10**6), 1024) == (64, 64)
    rng = np.random.default_rng(41)
    for size, least in ((_numpy_backend._TILE_BYTES, _numpy_backend._MIN_TILE), (96, 1)):
        monkeypatch.setattr(_numpy_backend, "_TILE_BYTES", size)
        monkeypatch.setattr(_numpy_backend, "_MIN_TILE", least)
        for shape in ((1, 1), (7, 300), (300, 7), (65, 67, 3), (2, 3, 4099), (4099, 5, 4),
                      (4099, 2), (301, 4), (3, 2)):
            for dtype in (np.float32, np.complex128):
                src = rng.standard_normal(shape).astype(dtype)
                views = (src, src[::-1], np.moveaxis(src, 0, 1).copy().swapaxes(0, 1),
                         np.asfortranarray(src))
                for view in views:
                    for dst in (np.empty(shape, dtype), np.empty(shape[::-1], dtype).T,
                                np.empty(shape, np.float64 if dtype == np.float32 else dtype)):
                        expected = np.empty_like(dst)
                        np.copyto(expected, view, casting="unsafe")
                        assert _numpy_backend._copy(dst, view) is dst
                        np.testing.assert_array_equal(dst, expected)


def test_numpy_tiles_within_reach(monkeypatch):
    """The chunked scan's copies of large operands cut their tiles' side along NumPy's inner
    loop to the lines the L1 cache holds at the source's stride there (64 sets of 8 lines:
    lines k apart fall into 64 / gcd(k, 64) sets), at least 64 elements, the other side
    lengthened; contiguous reads, one tile's bytes and elements over 8 bytes are left as they
    are; the scans equal the float64 reference and the copies NumPy's."""
    from cuscan import _numpy_backend

    reach = _numpy_backend._reach
    assert all(reach(stride) is None for stride in (4, -8, 48))  # lines shared
    assert reach(64 * 4) == 128  # 4 lines apart: 16 sets
    assert reach(-64 * 4) == 128
    assert reach(64 * 8) == 64
    assert reach(64 * 2) == 256
    assert reach(64 * 3) == 512  # an odd number of lines apart: every set
    assert reach(248) == 512  # not a whole number of lines apart
    assert reach(64 * 4096) == 8

    def cut(dst, src):
        rows, columns = _numpy_backend._tile(dst.shape, dst.itemsize)
        return _numpy_backend._within_reach(dst, src, rows, columns)

    chunks = np.empty((16384, 64), np.float32)  # one channel's chunks of 64 steps
    assert _numpy_backend._tile((64, 16384), 4) == (64, 1024)
    assert cut(np.empty((64, 16384), np.float32), chunks.T) == (64, 128)
    assert cut(np.empty((64, 16384), np.float32), np.empty((64, 16384), np.float32)) \
        == (64, 1024)  # read as it lies
    back = np.empty((16384, 62), np.float32)  # 248 bytes apart, into time-contiguous rows
    assert cut(np.empty((62, 16384), np.float32), back.T) == (62, 512)
    assert cut(np.empty((64, 4096), np.float64), np.empty((4096, 64), np.float64).T) \
        == (64, 64)  # 8 lines apart: 8 sets, and no fewer than 64 elements
    square = np.empty((1000, 1000), np.float32)  # 62.5 lines apart: every set
    assert cut(np.empty((1000, 1000), np.float32), square.T) == (256, 256)
    wide = np.empty((1088, 1088), np.float32)  # 68 lines apart: 16 sets
    assert cut(np.empty((1088, 1088), np.float32), wide.T) == (512, 128)

    cuts = record_results(monkeypatch, _numpy_backend, "_within_reach")
    rng = np.random.default_rng(47)
    for length, dtype, taken in ((2**20, np.float32, True), (10**6, np.float64, True),
                                 (2**19, np.complex128, False), (8192, np.float32, False)):
        a = rng.uniform(0.5, 1.0, length).astype(dtype)
        x = rng.standard_normal(length).astype(dtype)
        cuts.clear()
        h = cuscan.linear_recurrence(a, x, method="parallel")
        assert bool(cuts) == taken, (length, dtype)
        expected = reference.linear_recurrence(a.astype(np.complex128), x)
        limit = 8 * np.finfo(dtype).eps * length ** 0.5
        np.testing.assert_allclose(h, expected, rtol=0, atol=limit * np.abs(expected).max())
        go = rng.standard_normal(length).astype(dtype)
        cuts.clear()
        _, gx, _ = cuscan.linear_recurrence_vjp(go, a, h)
        assert bool(cuts) == taken
        after = np.conj(np.r_[a[1:], 0].astype(np.complex128))  # g[t] takes conj(a[t+1])
        want = reference.linear_recurrence(after, go, reverse=True)
        np.testing.assert_allclose(gx, want, rtol=0, atol=limit * np.abs(want).max())

    for shape, view in (((20000, 64), lambda s: s.T), ((20000, 62), lambda s: s.T[::-1]),
                        ((64, 20000), lambda s: s[:, ::-1])):
        for dtype in (np.float32, np.float64):
            src = view(rng.standard_normal(shape).astype(dtype))
            dst = np.empty(src.shape, dtype)
            assert _numpy_backend._copy(dst, src, reach=True) is dst
            np.testing.assert_array_equal(dst, src)


def test_numpy_staged_copies(monkeypatch):
    """Transposed copies whose inner loop would read the source across a multiple of 1,024
    bytes (cache aliasing), or of 256 from 64 elements along that loop, go tile by tile
    through a padded buffer: which ones do, and that they equal NumPy's copies, both ways
    between time-major and time-contiguous arrays, several channel axes merged, reversed
    time, dtype conversions, tiles that do not divide the shape."""
    from cuscan import _numpy_backend
    from cuscan._scratch import Scratch

    with Scratch() as scratch:
        def staged(dst, src) -> bool:
            return _numpy_backend._staged(dst, src, 64, 64, scratch) is not None

        def major(length, width, dtype=np.float32):
            return np.empty((length, width), dtype)

        def contiguous(length, width, dtype=np.float32):  # time-first, time-contiguous
            return np.empty((width, length), dtype).T

        assert staged(major(4096, 64), contiguous(4096, 64))
        assert staged(contiguous(300, 256), major(300, 256))  # rows of 1,024 bytes
        assert staged(major(4096, 64, np.float64), contiguous(4096, 64, np.float32))
        assert not staged(contiguous(300, 200), major(300, 200))  # rows of 800 bytes
        assert not staged(major(4100, 64), contiguous(4100, 64))  # 16,400 bytes apart
        assert not staged(major(4096, 16), contiguous(4096, 16))  # few channels
        assert not staged(major(4096, 64, np.complex128), contiguous(4096, 64, np.complex128))
        assert not staged(major(4096, 64), major(4096, 64))
        assert not staged(major(4096, 64), contiguous(4096 * 16, 64)[::16])  # both apart
        # A multiple of 256 bytes (lines 4 apart, 16 sets), from 64 elements:
        assert staged(major(640, 64), contiguous(640, 64))  # rows of 2,560 bytes
        assert not staged(major(640, 48), contiguous(640, 48))
        assert staged(contiguous(300, 64), major(300, 64))  # rows of 256 bytes
        assert staged(contiguous(300, 96, np.float64), major(300, 96, np.float64))
        assert not staged(contiguous(48, 64), major(48, 64))  # 48 steps along the loop
        assert not staged(contiguous(300, 96), major(300, 96))  # rows of 384 bytes

    taken = record_results(monkeypatch, _numpy_backend, "_staged")
    monkeypatch.setattr(_numpy_backend, "_TILE_BYTES", 7 * 9 * 4)
    monkeypatch.setattr(_numpy_backend, "_MIN_TILE", 1)
    rng = np.random.default_rng(43)
    for shape, into in (((64, 1024), None), ((3, 40, 512), None), ((512, 100), "back"),
                        ((40, 2048), None), ((64, 640), None), ((128, 300), "back")):
        for dtype, to in ((np.float16, np.float16), (np.float32, np.float32),
                          (np.float32, np.float64), (np.float64, np.float32),
                          (np.complex64, np.complex64)):
            data = rng.standard_normal(shape).astype(dtype)
            time_first = np.moveaxis(data, -1, 0)
            if into == "back":  # a time-major source into a time-contiguous array
                pairs = [(np.empty(shape, to), np.ascontiguousarray(time_first))]
                pairs = [(np.moveaxis(dst, -1, 0), src) for dst, src in pairs]
            else:
                pairs = [(np.empty(time_first.shape, to), view)
                         for view in (time_first, time_first[::-1])]
            for dst, src in pairs:
                taken.clear()
                assert _numpy_backend._copy(dst, src) is dst
                assert taken
                assert taken[-1] is not None
                np.testing.assert_array_equal(dst, src.astype(to))


def test_numpy_time_major_rule(monkeypatch):
    """Which time-first views the NumPy backend copies time-major: long, wide and
    time-contiguous ones (narrower ones where the copy goes through a buffer), and steps in
    several runs (as (B, T, D) along axis 1), but for steps scanned serially of elements of
    8 bytes or more, on few pages and strides that spread over the cache; shorter ones from
    32 steps and 2^15 elements; of any size (a segment at a time); a whole copy (cuscan.signal's)
    not over the memory bound."""
    from cuscan import _numpy_backend

    def copied(shape, dtype=np.float32, axis=-1, view=lambda v: v):
        return _numpy_backend._scattered(np.moveaxis(view(np.empty(shape, dtype)), axis, 0),
                                         dtype)

    # Steps of 256 bytes, which the chunked scan copies its chunks from as they lie
    assert not copied((64, 1000))
    assert not copied((8, 8, 1000))
    assert copied((65, 1000))
    assert copied((8, 9, 1000))
    # but from a copy through a buffer (steps of 32 to 64 elements a multiple of 1,024
    # bytes apart) in elements of up to 4 bytes
    assert copied((64, 1024))
    assert copied((8, 6, 4096))
    assert not copied((64, 1040))  # 4,160 bytes apart
    assert not copied((32, 1024), np.float64)
    assert copied((1000, 1000))
    # Steps of 3 KiB, scanned serially, on 384 pages
    assert not copied((384, 1000), np.float64)
    assert copied((384, 1000, 2), np.float64, axis=1)  # pairs of elements: 384 runs
    assert copied((384, 1000))  # float32
    assert copied((384, 1024), np.float64)  # aliasing: rows a multiple of 1024 bytes
    assert not copied((384, 2000), np.float64)  # serially at any length
    assert copied((128, 1000), np.float64)  # steps of 1 KiB: the chunked scan from 341
    assert not copied((128, 340), np.float64)
    assert copied((768, 1000), np.float64)  # on 768 pages
    assert copied((3, 256, 1000), np.float64)  # on 768 pages
    assert not copied((800, 300), np.float64)  # elements 2,400 bytes apart: 469 pages
    assert copied((1000, 300), np.float64)  # 586 pages
    assert not copied((256, 1000), np.complex128)
    assert not copied((1000, 64), axis=0)  # time-major already
    assert copied((8, 1000, 64), axis=1)  # in 8 runs (below)
    assert not copied((16, 1000))  # steps of 64 bytes: the chunked scan copies those
    assert not copied((16, 1000), np.complex128)  # 256 bytes, the chunked scan's
    assert copied((17, 1000), np.complex128)
    assert not copied((64, 255))  # short
    assert copied((1024, 32), np.float64)
    assert copied((8, 32, 128), np.complex128)
    assert not copied((1023, 32), np.float64)
    assert not copied((2048, 31), np.float64)
    # 512 elements a step, but 256 of them broadcast
    assert not copied((2, 256, 64), view=lambda v: np.broadcast_to(v[:1], v.shape))
    assert copied((2, 256, 64))
    assert not copied((64, 1000), view=lambda v: v[:, :1])  # time-invariant
    assert not copied((1, 1000), view=lambda v: np.broadcast_to(v, (64, 1000)))
    # Steps in several contiguous runs, as (B, T, D) along axis 1: of up to 16 KiB, from 32
    # steps and 64 KiB in all
    assert copied((8, 1024, 256), axis=1)
    assert copied((4, 1024, 1024), axis=1)
    assert copied((16, 64, 16), axis=1)
    assert copied((8, 1024, 512), axis=1, view=lambda v: v[..., ::2])  # strided runs
    assert not copied((8, 1024, 1024), axis=1)  # 32 KiB a step
    assert not copied((4, 1024, 1024), np.float64, axis=1)
    assert not copied((8, 31, 256), axis=1)
    assert not copied((2, 512, 4), axis=1)  # 16 KiB in all
    assert not copied((1024, 8, 256), axis=0)  # one run
    assert not copied((1, 1024, 256), axis=1)
    assert not copied((8, 1024, 256), axis=1, view=lambda v: np.broadcast_to(v[:1], v.shape))
    runs = np.empty((8, 1024, 256), np.float32).transpose(1, 0, 2)
    assert not _numpy_backend._scattered_layout(runs.shape, runs.strides, np.float32,
                                                once=False)  # cuscan.signal's whole copies
    monkeypatch.setattr(_numpy_backend, "_MAX_COPY_BYTES", 65 * 1000 * 4 - 1)
    assert copied((65, 1000))
    view = np.empty((65, 1000), np.float32).T
    assert not _numpy_backend._scattered_layout(view.shape, view.strides, np.float32,
                                                _numpy_backend._MAX_COPY_BYTES)
    assert _numpy_backend._scattered_layout(view.shape, view.strides, np.float32,
                                            _numpy_backend._MAX_COPY_BYTES + 1)


def test_numpy_segments(monkeypatch):
    """Operands the NumPy backend would copy whole (time-major, or to float32 from half
    precision, in the blocked scan of time-invariant decays too) are scanned a segment
    of time at a time, each from the state the last one left: forward against the
    reference for every method, full, broadcast and time-invariant decays, initial
    states, reverse and complex data; the vector-Jacobian product against the same call
    scanned whole. A segment that does not divide the length is merged into the last."""
    from cuscan import _numpy_backend

    numpy = Backend("numpy")
    cut = record_results(monkeypatch, _numpy_backend, "_segments")
    monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 2048)
    rng = np.random.default_rng(37)
    for dtype in ("float64", "complex128", "float16"):
        for width, length in ((40, 1500), (3, 2000)):
            decays = make(rng, (width, length), dtype, low=0.5)
            impulses = make(rng, (width, length), dtype, low=-1.0)
            state = make(rng, (width,), dtype, low=-1.0)
            for method in METHODS:
                for reverse in (False, True):
                    cut.clear()
                    check(numpy, decays, impulses, state, axis=-1, reverse=reverse,
                          method=method)
                    # three channels of float64 are scanned as they lie (see _scattered)
                    if dtype == "float16" or width == 40:
                        assert all(c is not None and len(c) > 2 for c in cut), (dtype, cut)
                    else:
                        assert cut == [None]
                    cut.clear()
                    check(numpy, decays[:, :1], impulses, axis=-1, reverse=reverse,
                          method=method)
                    # half precision's float32 copies, in the blocked scan too
                    if dtype == "float16":
                        assert cut, method
                        assert all(c is not None and len(c) > 2 for c in cut), (dtype, cut)
            # 40 channels of time-invariant float64 decays: the blocked scan, which scans
            # the operands as they lie, in one piece
            if dtype == "float64" and width == 40:
                cut.clear()
                check(numpy, decays[:, :1], impulses, axis=-1, method="parallel")
                assert cut == [None]
            weights = make(rng, (width, length), dtype, low=-1.0)
            for constant in (False, True):  # the blocked scan for time-invariant decays
                a = decays[:, :1] if constant else decays
                h = cuscan.linear_recurrence(a, impulses, state, axis=-1)
                cut.clear()
                pieces = cuscan.linear_recurrence_vjp(weights, a, h, state, axis=-1)
                if not constant:
                    assert (cut[-1] is not None) == (dtype == "float16" or width == 40)
                elif dtype == "float16":
                    assert cut[-1] is not None
                monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 2**40)
                whole = cuscan.linear_recurrence_vjp(weights, a, h, state, axis=-1)
                monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 2048)
                for got, want in zip(pieces, whole, strict=True):
                    assert got.dtype == want.dtype
                    want = want.astype(np.complex128)
                    np.testing.assert_allclose(
                        got.astype(np.complex128), want, rtol=0,
                        atol=tolerance(dtype, length) * np.abs(want).max())
    # A time-major result written in place while time-contiguous operands are copied a
    # segment at a time: each segment starts from the state the last one wrote there.
    for dtype in ("float64", "complex128"):
        decays = make(rng, (1500, 40), dtype, low=0.5)
        impulses, weights = (np.asfortranarray(make(rng, (1500, 40), dtype, low=-1.0))
                             for _ in range(2))
        state = make(rng, (40,), dtype, low=-1.0)
        for reverse in (False, True):
            cut.clear()
            h = check(numpy, decays, impulses, state, reverse=reverse)
            assert all(c is not None and len(c) > 2 for c in cut), (dtype, cut)
            cut.clear()
            pieces = cuscan.linear_recurrence_vjp(weights, decays, h, state, reverse=reverse)
            assert all(c is not None and len(c) > 2 for c in cut), (dtype, cut)
            monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 2**40)
            whole = cuscan.linear_recurrence_vjp(weights, decays, h, state, reverse=reverse)
            monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 2048)
            for got, want in zip(pieces, whole, strict=True):
                np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(dtype, 1500)
                                           * np.abs(want).max())
    half = np.empty((870, 4), np.float16)  # 256 steps of 16 bytes, and 102 left
    halves = _numpy_backend._segments((half,), half, np.float32)
    assert [b - a for a, b in halves] == [256, 256, 358]
    assert _numpy_backend._cut(900, 256) == [(0, 256), (256, 512), (512, 768), (768, 900)]
    assert _numpy_backend._cut(300, 256) == [(0, 300)]
    assert _numpy_backend._cut(100, 256) == [(0, 100)]


@pytest.mark.parametrize("layout", ["copies", "views"])
def test_numpy_parallel_layouts(monkeypatch, layout):
    """The NumPy backend's chunked scan runs on contiguous copies for narrow time steps (from
    time-major operands or time-contiguous ones as they lie) and on strided views for wide
    ones: both give the reference's results, for full and
    time-invariant decays, decays broadcast within a step, non-finite values, complex data
    and non-contiguous outputs. Single channels are copied in tiles, here small ones that do
    not divide the chunks."""
    from cuscan import _numpy_backend

    for limit in ("_MAX_STRIDED_ROW", "_MAX_APART_CHUNK_ROW"):
        monkeypatch.setattr(_numpy_backend, limit, np.inf if layout == "copies" else -1)
    monkeypatch.setattr(_numpy_backend, "_TILE_BYTES", 5 * 5 * 8)
    monkeypatch.setattr(_numpy_backend, "_MIN_TILE", 1)
    # Chunks for large arrays from 50,000 elements: (4099, 40) and (65537, 2) take them.
    monkeypatch.setattr(_numpy_backend, "_STEP_ELEMENTS_UP_TO", 50_000)
    monkeypatch.setattr(_numpy_backend, "_MAX_DOUBLING_BYTES", -1)  # chunks at every size
    numpy = Backend("numpy")
    rng = np.random.default_rng(31)
    for length, width in ((5, 3), (1025, 1), (4099, 40), (65537, 2), (30011, 1)):
        for dtype in ("float32", "float64", "complex128"):
            decays = make(rng, (length, width), dtype)
            impulses = make(rng, (length, width), dtype, low=-1.0)
            state = make(rng, (width,), dtype, low=-1.0)
            check(numpy, decays, impulses, state, method="parallel")
            check(numpy, decays[:1], impulses, method="parallel")  # broadcast along time
            check(numpy, decays.T, impulses.T, axis=1, reverse=True, method="parallel")
            # Several channel axes, with decays broadcast along time and within a step,
            # or within a step alone.
            impulses = make(rng, (length, 2, 3), dtype, low=-1.0)
            check(numpy, make(rng, (3,), dtype), impulses, state[:1], method="parallel")
            check(numpy, make(rng, (length, 1, 1), dtype), impulses, method="parallel")
    decays, impulses = make(rng, (3000, 40), low=0.5), make(rng, (3000, 40), low=-1.0)
    impulses[1234, 0], decays[1500, 1], impulses[700, 2] = np.nan, np.nan, np.inf
    check(numpy, decays, impulses, method="parallel")


def record_lengths(monkeypatch, module, name: str) -> list[int]:
    """Patch ``module.<name>`` to record the length of its first argument at every call;
    returns the list it appends to."""
    lengths = []
    original = getattr(module, name)

    def spy(a, *args):
        lengths.append(a.shape[0])
        return original(a, *args)

    monkeypatch.setattr(module, name, spy)
    return lengths


def test_numpy_cache_segments(monkeypatch):
    """The chunked scan runs over segments of time one after the other, each from the state
    the last one left: the reference's results for lengths the segments do not divide, an
    initial state, broadcast decays, reverse, time-contiguous operands, complex data and
    non-finite values (re-run serially within their segment); the vector-Jacobian product
    against the same call scanned whole."""
    from cuscan import _numpy_backend

    monkeypatch.setattr(_numpy_backend, "_CACHE_SEGMENT_BYTES", 1024)
    monkeypatch.setattr(_numpy_backend, "_MIN_CACHE_SEGMENT", 64)
    monkeypatch.setattr(_numpy_backend, "_MAX_DOUBLING_BYTES", -1)
    runs = record_lengths(monkeypatch, _numpy_backend, "_parallel")
    numpy = Backend("numpy")
    rng = np.random.default_rng(43)
    for length, width in ((1000, 1), (2003, 4), (777, 40)):
        for dtype in ("float32", "complex128"):
            decays = make(rng, (length, width), dtype)
            impulses = make(rng, (length, width), dtype, low=-1.0)
            state = make(rng, (width,), dtype, low=-1.0)
            runs.clear()
            check(numpy, decays, impulses, state, method="parallel")
            assert len(runs) > 2  # segments, and the carries of each
            check(numpy, decays[:1], impulses, reverse=True, method="parallel")
            check(numpy, decays.T, impulses.T, state, axis=1, method="parallel")
            weights = make(rng, (length, width), dtype, low=-1.0)
            h = cuscan.linear_recurrence(decays, impulses, state)
            pieces = cuscan.linear_recurrence_vjp(weights, decays, h, state)
            monkeypatch.setattr(_numpy_backend, "_CACHE_SEGMENT_BYTES", 2**62)
            whole = cuscan.linear_recurrence_vjp(weights, decays, h, state)
            monkeypatch.setattr(_numpy_backend, "_CACHE_SEGMENT_BYTES", 1024)
            for got, want in zip(pieces, whole, strict=True):
                np.testing.assert_allclose(got, want, rtol=0,
                                           atol=tolerance(dtype, length) * np.abs(want).max())
    decays, impulses = make(rng, (3000, 8), low=0.5), make(rng, (3000, 8), low=-1.0)
    impulses[1234, 0], decays[1500, 1], impulses[700, 2] = np.nan, np.nan, np.inf
    impulses[10, 3], impulses[2900, 3] = np.inf, -np.inf
    check(numpy, decays, impulses, method="parallel")


def test_numpy_doubling(monkeypatch):
    """Short scans take Hillis and Steele's scan: it gives the reference's results for
    lengths around the powers of two, an initial state, decays broadcast along time or
    within a step, reversed and time-contiguous (strided) operands, every float dtype, and
    runs as the chunked scan's scan of its carries."""
    from cuscan import _numpy_backend

    assert _numpy_backend._doubles(64, 256)  # steps of 256 bytes
    assert not _numpy_backend._doubles(64, 264)
    assert _numpy_backend._doubles(8192, 8)  # 64 KiB
    assert not _numpy_backend._doubles(8193, 8)
    assert not _numpy_backend._doubles(63, 8)
    monkeypatch.setattr(_numpy_backend, "_MAX_DOUBLING_BYTES", 2**20)
    monkeypatch.setattr(_numpy_backend, "_MAX_DOUBLING_ROW", 2**20)
    ran = record_lengths(monkeypatch, _numpy_backend, "_doubling")
    numpy = Backend("numpy")
    rng = np.random.default_rng(41)
    for length, width in ((64, 1), (65, 5), (127, 2), (128, 1), (129, 3), (1023, 4), (4097, 2)):
        for dtype in ("float32", "float64", "complex128"):
            decays = make(rng, (length, width), dtype)
            impulses = make(rng, (length, width), dtype, low=-1.0)
            state = make(rng, (width,), dtype, low=-1.0)
            check(numpy, decays, impulses, state)
            check(numpy, decays[:1], impulses, state, reverse=True)  # broadcast along time
            check(numpy, decays.T, impulses.T, axis=1, method="parallel")
            check(numpy, make(rng, (1, 1), dtype), impulses, axis=0)
            assert length in ran
    ran.clear()
    check(numpy, make(rng, (2**17, 2)), make(rng, (2**17, 2), low=-1.0))
    assert ran  # the carries'
    assert max(ran) < 2**17


def returned(monkeypatch, module, name: str) -> list:
    """What each call of ``module.<name>`` returns, in the list returned, which the calls
    append to (the function spied on for the test)."""
    results = []
    original = getattr(module, name)

    def spy(*args):
        results.append(original(*args))
        return results[-1]

    monkeypatch.setattr(module, name, spy)
    return results


@pytest.mark.parametrize("nested", [False, True])
def test_numpy_nested(monkeypatch, nested):
    """A scan of one decay for every step and channel is one product with the matrix of its
    powers where short (``nested`` False: _MIN_POWERS_LENGTH up to _POWERS_LENGTH steps), and
    products over nested blocks on up to _NESTED_ELEMENTS elements (``nested``, with blocks
    of 4 steps and single products of at most 8, so that the blocks nest several deep): the
    reference's results forward and backward, in every float dtype, along either axis, both
    directions, from an initial state, lengths the blocks do not divide; where a sample is
    not finite, or the state or the decay's powers overflow, the scan carries it as the serial
    loop does."""
    from cuscan import _numpy_backend

    if nested:
        monkeypatch.setattr(_numpy_backend, "_NESTED_BLOCK", 4)
        monkeypatch.setattr(_numpy_backend, "_POWERS_LENGTH", 8)
        lengths = (9, 67, 301)
    else:
        lengths = (_numpy_backend._MIN_POWERS_LENGTH, 17, _numpy_backend._POWERS_LENGTH)
    ran = returned(monkeypatch, _numpy_backend, "_nested")
    numpy = Backend("numpy")
    rng = np.random.default_rng(43)
    for length in lengths:
        for dtype in ("float16", "float32", "float64", "complex64", "complex128"):
            for shape, axis in (((length,), 0), ((3, length), -1), ((length, 4, 2), 0)):
                for reverse in (False, True):
                    impulses = make(rng, shape, dtype, low=-1.0)
                    decays = make(rng, (), dtype, low=0.5)
                    channels = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
                    state = make(rng, channels, dtype, low=-1.0)
                    ran.clear()
                    output = check(numpy, decays, impulses, state, axis=axis, reverse=reverse)
                    assert ran == [True], (length, dtype, shape)
                    weights = make(rng, shape, dtype, low=-1.0)
                    grads = cuscan.linear_recurrence_vjp(weights, decays, output, state,
                                                         axis=axis, reverse=reverse)
                    flipped = dict(axis=axis, reverse=not reverse)
                    expected = reference.linear_recurrence(np.conj(decays), weights, **flipped)
                    scale = reference.error_scale(decays, weights, **flipped)
                    assert_close(grads[1], expected, scale, grads[1].dtype, length)
    # Not finite: a NaN from its step on, a state overflowing as the serial loop's does, and
    # a decay whose powers overflow within the first block (no product is made).
    length = lengths[-1]
    impulses = rng.uniform(-1, 1, (length, 3))
    impulses[length // 2, 1] = np.nan
    for decays, x in ((0.9, impulses), (1e30, np.full((length, 3), 1e30)),
                      (np.float32(1e12), np.ones((length, 3), np.float32))):
        ran.clear()
        result = cuscan.linear_recurrence(decays, x)
        assert ran[0] is False
        np.testing.assert_allclose(result, cuscan.linear_recurrence(decays, x, method="serial"),
                                   rtol=1e-12 if x.dtype == np.float64 else 1e-6)
    # and so whatever the result held before
    out, start = np.zeros((length, 3), np.float32), np.zeros(3, np.float32)
    assert not _numpy_backend._nested(np.float32(1e12), np.ones_like(out), start, out)


def test_numpy_nested_rule(monkeypatch):
    """Which scans take `_nested`: one decay for every step and channel from
    _MIN_POWERS_LENGTH steps, up to _NESTED_ELEMENTS elements or as one product, and up to
    _NESTED_ROWS_ELEMENTS on at most _NESTED_ROWS time-contiguous channels; beyond, the
    blocked scan, whose carries over its chunks take it; a decay per channel never."""
    from cuscan import _numpy_backend

    ran = returned(monkeypatch, _numpy_backend, "_nested")
    numpy = Backend("numpy")
    rng = np.random.default_rng(44)
    most, rows = _numpy_backend._NESTED_ELEMENTS, _numpy_backend._NESTED_ROWS
    rows_most = _numpy_backend._NESTED_ROWS_ELEMENTS
    for decays, shape, axis, taken in (
            (np.full((3, 1), 0.9), (3, 1000), -1, []),
            (0.9, (most // 4, 4), 0, [True]),
            (0.9, (most // 4 + 1, 4), 0, [False]),  # time-major: the chunked scan
            (0.9, (rows, rows_most // rows), -1, [True]),
            (0.9, (rows + 1, most // rows), -1, [False, True]),  # the blocked scan's carries
            (0.9, (1, rows_most + 1), -1, [False, True]),
            (0.9, (3, _numpy_backend._MIN_POWERS_LENGTH - 1), -1, [False])):
        ran.clear()
        check(numpy, decays, rng.uniform(-1, 1, shape), axis=axis)
        assert ran[:len(taken)] == taken, (shape, ran)


def test_numpy_blocked(monkeypatch):
    """Decays constant in time on time-contiguous operands (one channel, (C, T) along
    axis -1) are scanned as matrix products over chunks: forward and backward give the
    reference's results for one decay and a decay per channel, lengths that the chunks do
    not divide, both directions, an initial state, strided channels, every float dtype, and
    results computed a few chunks at a time; complex64 from 2,048 steps, complex128 never."""
    from cuscan import _numpy_backend

    monkeypatch.setattr(_numpy_backend, "_BLOCKED_FROM", 16)
    monkeypatch.setattr(_numpy_backend, "_BLOCKED_ELEMENTS_FROM", 16)
    monkeypatch.setattr(_numpy_backend, "_BLOCK_ELEMENTS", 200)
    monkeypatch.setattr(_numpy_backend, "_BLOCKED_COMPLEX_FROM", {8: 0, 16: 0})
    monkeypatch.setattr(_numpy_backend, "_NESTED_ELEMENTS", 0)  # `test_numpy_nested`'s
    monkeypatch.setattr(_numpy_backend, "_NESTED_ROWS_ELEMENTS", 0)
    monkeypatch.setattr(_numpy_backend, "_POWERS_LENGTH", 0)
    ran = returned(monkeypatch, _numpy_backend, "_blocked")
    numpy = Backend("numpy")
    rng = np.random.default_rng(41)
    for length in (17, 37, 257, 1031):
        for dtype in ("float16", "float32", "float64", "complex64", "complex128"):
            for shape, decays_shape in (((length,), ()), ((5, length), (5, 1)),
                                        ((2, 3, length), (3, 1)), ((2, 3, length), (2, 1, 1))):
                for reverse in (False, True):
                    impulses = make(rng, shape, dtype, low=-1.0)
                    decays = make(rng, decays_shape, dtype, low=0.5)
                    state = make(rng, shape[:-1], dtype, low=-1.0)
                    ran.clear()
                    output = check(numpy, decays, impulses, state, axis=-1, reverse=reverse)
                    assert ran
                    assert all(ran)
                    # Backward: grad_impulses is the recurrence over conj(decays) the other
                    # way; grad_decays sums conj(h[t-1]) * grad_impulses[t] over the steps
                    # and the channels the decays are broadcast over.
                    weights = make(rng, shape, dtype, low=-1.0)
                    ran.clear()
                    grads = cuscan.linear_recurrence_vjp(weights, decays, output, state,
                                                         axis=-1, reverse=reverse)
                    assert ran
                    assert all(ran)
                    flipped = dict(axis=-1, reverse=not reverse)
                    expected = reference.linear_recurrence(np.conj(decays), weights, **flipped)
                    scale = reference.error_scale(decays, weights, **flipped)
                    assert_close(grads[1], expected, scale, grads[1].dtype, length)
                    before = (np.concatenate([output[..., 1:], state[..., None]], axis=-1)
                              if reverse else
                              np.concatenate([state[..., None], output[..., :-1]], axis=-1))
                    summed = tuple(range(len(shape) - len(decays_shape))) + tuple(
                        i + len(shape) - len(decays_shape)
                        for i, n in enumerate(decays_shape) if n == 1)
                    terms = np.conj(before.astype(expected.dtype)) * expected
                    assert_close(grads[0], terms.sum(axis=summed).reshape(decays_shape),
                                 np.abs(terms).sum(axis=summed).reshape(decays_shape)
                                 + np.abs(before).sum(axis=summed).reshape(decays_shape)
                                 * np.abs(scale).max(), grads[0].dtype, length)
            # Time-contiguous but strided channels.
            impulses = make(rng, (6, length), dtype, low=-1.0)[::2]
            ran.clear()
            check(numpy, make(rng, (3, 1), dtype, low=0.5), impulses, axis=-1)
            assert ran
            assert all(ran)
    # Non-finite powers, chunk states, carries or results leave it to the general scan,
    # which propagates them as the serial loop does.
    impulses = make(rng, (3, 100), low=-1.0)
    state = np.zeros(3)
    # Two samples of 1.5e308 in one chunk overflow its state at the second, where the
    # chunk's final state and the carries stay finite: the products' results are not.
    for decays, where, value in ((0.5, (0, 40), np.inf), (0.5, (1, 99), np.nan),
                                 (-0.9, (2, 5), -np.inf), (np.float32(30.0), None, None),
                                 (1e200, None, None), (0.5, (2, slice(40, 42)), 1.5e308),
                                 (0.5, "state", np.nan)):
        data = impulses.astype(np.asarray(decays).dtype)
        if where == "state":
            state[1] = value
        elif where is not None:
            data[where] = value
        else:  # overflowing powers, times zeros: zeros as serially, not NaN
            data[...] = 0
        ran.clear()
        check(numpy, decays, data, state.astype(data.dtype), axis=-1)
        assert ran == [False]
    # Complex operands take the chunked or serial method but complex64 from 2,048 steps
    # (_BLOCKED_COMPLEX_FROM).
    monkeypatch.undo()
    monkeypatch.setattr(_numpy_backend, "_NESTED_ELEMENTS", 0)
    monkeypatch.setattr(_numpy_backend, "_NESTED_ROWS_ELEMENTS", 0)
    ran = returned(monkeypatch, _numpy_backend, "_blocked")
    for dtype, length, expected in (("complex64", 2047, []), ("complex64", 2048, [True]),
                                    ("complex128", 10**5, []), ("float32", 300, [True])):
        ran.clear()  # 65,536 elements or more (_BLOCKED_ELEMENTS_FROM)
        check(numpy, make(rng, (1, 1), dtype, low=0.5),
              make(rng, (-(-65536 // length), length), dtype, low=-1.0), axis=-1)
        assert ran == expected, (dtype, length)
