"""Wrong input gets a clear error that names what was expected and what was given."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cuscan
from cuscan import linear_recurrence, linear_recurrence_vjp
from tests.conftest import require


def test_shapes_do_not_broadcast(backend):
    a, x = backend.asarray(np.ones((4, 8))), backend.asarray(np.ones((4, 9)))
    with pytest.raises(ValueError, match=r"`decays` and `impulses` do not broadcast: "
                                         r"\(4, 8\) and \(4, 9\)"):
        linear_recurrence(a, x)


def test_axis_out_of_range(backend):
    x = backend.asarray(np.ones((4, 8)))
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence(x, x, axis=2)
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence(x, x, axis=-3)
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence_vjp(x, x, x, axis=5)


def test_axis_must_be_an_integer(backend):
    x = backend.asarray(np.ones((4, 8)))
    for axis in (1.0, True, None, "1"):
        # the message ends there: no hint for arrays, which a Python value is not
        with pytest.raises(TypeError,
                           match=rf"`axis` must be an integer; got {re.escape(repr(axis))}$"):
            linear_recurrence(x, x, axis=axis)
    with pytest.raises(TypeError, match="`axis` must be an integer"):
        linear_recurrence_vjp(x, x, x, axis=np.True_)
    assert linear_recurrence(x, x, axis=np.int64(1)).shape == (4, 8)


def test_reverse_must_be_a_bool(backend):
    x = backend.asarray(np.ones((4, 8)))
    for reverse in ("no", None, 2, 0.0):
        with pytest.raises(TypeError,
                           match=rf"`reverse` must be a bool; got {re.escape(repr(reverse))}$"):
            linear_recurrence(x, x, reverse=reverse)
        with pytest.raises(TypeError, match="`reverse` must be a bool"):
            linear_recurrence_vjp(x, x, x, reverse=reverse)
    for flag, same in ((True, (1, np.True_)), (False, (0, np.False_))):
        expected = backend.to_numpy(linear_recurrence(x, x, reverse=flag))
        for reverse in same:
            np.testing.assert_array_equal(
                backend.to_numpy(linear_recurrence(x, x, reverse=reverse)), expected)


def test_zero_dimensional(backend):
    with pytest.raises(ValueError, match="0-d"):
        linear_recurrence(0.5, 1.0)
    with pytest.raises(ValueError, match="0-d"):
        linear_recurrence(backend.asarray(np.float64(0.5)), backend.asarray(np.float64(1.0)))


@pytest.mark.parametrize("state_shape", [(5,), (4, 8), (3, 1), (2, 8)])
def test_wrong_initial_state_shape(backend, state_shape):
    x = backend.asarray(np.ones((4, 8)))
    with pytest.raises(ValueError, match=r"`initial_state` must broadcast to the state shape "
                                         r"\(8,\)"):
        linear_recurrence(x, x, backend.asarray(np.ones(state_shape)))


def test_unknown_method(backend):
    x = backend.asarray(np.ones(4))
    with pytest.raises(ValueError, match="'auto', 'serial', 'parallel'; got 'fast'"):
        linear_recurrence(x, x, method="fast")


@pytest.mark.parametrize("values", [
    np.array(["a", "b"]),
    np.array([b"a", b"b"]),
    np.array([1, 2], dtype=object),
    np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]"),
    np.array([1, 2], dtype="timedelta64[s]"),
])
def test_unsupported_dtypes(values):
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64, complex64"):
        linear_recurrence(values, np.ones(2))
    with pytest.raises(TypeError, match="`impulses` has dtype"):
        linear_recurrence(np.ones(2), values)


def test_long_double_is_rejected():
    if np.dtype(np.longdouble) == np.float64:
        pytest.skip("long double is float64 on this platform")
    with pytest.raises(TypeError, match="`decays` has dtype"):
        linear_recurrence(np.ones(2, np.longdouble), np.ones(2))


def test_mixed_libraries():
    class Foreign:
        __module__ = "otherlib.arrays"

        def __dlpack__(self, **kwargs):
            raise AssertionError("never converted")

    with pytest.raises(TypeError, match="`decays` is a numpy array, `impulses` is a otherlib"):
        cuscan.linear_recurrence(np.ones(3), Foreign())


@pytest.mark.parametrize("alone", [True, False])
def test_unknown_library(alone):
    """An unsupported operand is named as such, alone or beside a supported array."""
    class Foreign:
        pass

    Foreign.__module__ = "otherlib"
    with pytest.raises(TypeError, match="is a Foreign from otherlib, which cuscan does not "
                                        "support; expected a NumPy or CuPy array"):
        cuscan.linear_recurrence(Foreign(), 1.0 if alone else np.ones(3))
    with pytest.raises(TypeError, match="`impulses` is a str from builtins, which cuscan"):
        cuscan.linear_recurrence(1.0 if alone else np.ones(3), "1.0")


def test_objects_numpy_converts_are_array_likes():
    """``__array__`` without DLPack (pandas, array wrappers) is NumPy's array_like."""
    class Wrapper:
        __module__ = "otherlib"

        def __array__(self, dtype=None, copy=None):
            return np.ones((3, 2))

    result = cuscan.linear_recurrence(0.5, Wrapper())
    assert type(result) is np.ndarray
    np.testing.assert_array_equal(result, [[1, 1], [1.5, 1.5], [1.75, 1.75]])
    cuscan.linear_recurrence(np.full(2, 0.5), Wrapper())  # mixes with NumPy arrays
    pandas = require("pandas")
    series = pandas.Series([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(cuscan.linear_recurrence(0.5, series), [1.0, 2.5, 4.25])
    with pytest.raises(TypeError, match="dtype object"):
        cuscan.linear_recurrence(0.5, pandas.Series(["a", "b"]))


@pytest.mark.parametrize("ragged", [[[1.0, 2.0], [3.0]], ([1.0], [2.0, 3.0])])
def test_ragged_sequences(ragged):
    kind = type(ragged).__name__
    with pytest.raises(ValueError, match=f"`decays` is a ragged {kind}: expected nested"):
        linear_recurrence(ragged, np.ones((3, 2)))
    with pytest.raises(ValueError, match=f"`initial_state` is a ragged {kind}"):
        linear_recurrence(0.5, np.ones((3, 2)), ragged)
    with pytest.raises(ValueError, match=f"`output` is a ragged {kind}"):
        linear_recurrence_vjp(np.ones((2, 2)), 0.5, ragged)


def test_conversion_errors_of_other_objects_pass_through():
    """Only a list or tuple is called ragged; another object's own ValueError is kept."""
    class Unconvertible:
        def __array__(self, dtype=None, copy=None):
            raise ValueError("this object has no array")

    with pytest.raises(ValueError, match=r"^this object has no array$"):
        linear_recurrence(Unconvertible(), np.ones(3))


@pytest.mark.parametrize("framework", ["torch", "jax.numpy", "tensorflow"])
def test_ragged_sequences_beside_tensors(framework):
    """Each adapter converts sequences with its framework, and names a ragged one too."""
    ones = require(framework).ones((3, 2))
    with pytest.raises(ValueError, match="`decays` is a ragged list: expected nested"):
        linear_recurrence([[0.5], [0.5, 0.5]], ones)
    with pytest.raises(ValueError, match="`initial_state` is a ragged tuple"):
        linear_recurrence(0.5, ones, ([1.0], [2.0, 3.0]))
    result = linear_recurrence([0.5, 0.5], ones, (1.0, 2.0))  # rectangular ones convert
    np.testing.assert_allclose(np.asarray(result), [[1.5, 2.0], [1.75, 2.0], [1.875, 2.0]])


def test_vjp_shapes(backend):
    x = backend.asarray(np.ones((4, 8)))
    with pytest.raises(ValueError, match=r"`grad_output` must have the shape of `output`"):
        linear_recurrence_vjp(backend.asarray(np.ones((4, 7))), x, x)
    with pytest.raises(ValueError, match=r"`decays` and `output` do not broadcast"):
        linear_recurrence_vjp(x, backend.asarray(np.ones((2, 8))), x)
    with pytest.raises(ValueError, match=r"`decays` and `output` do not broadcast"):
        linear_recurrence_vjp(x, backend.asarray(np.ones((2, 4, 8))), x)
    with pytest.raises(ValueError, match="`initial_state` must broadcast"):
        linear_recurrence_vjp(x, x, x, backend.asarray(np.ones(4)))


@pytest.mark.parametrize("missing", ["decays", "impulses"])
def test_missing_operand(missing):
    arguments = {"decays": 0.5, "impulses": np.ones(3), missing: None}
    with pytest.raises(TypeError, match=f"`{missing}` must be an array or a scalar; got None"):
        linear_recurrence(**arguments)
    with pytest.raises(TypeError, match="`output` must be an array or a scalar; got None"):
        linear_recurrence_vjp(np.ones(3), 0.5, None)


def test_masked_arrays_are_rejected():
    masked = np.ma.masked_array(np.ones(3), [False, True, False])
    with pytest.raises(TypeError, match="`impulses` is a masked array"):
        linear_recurrence(0.5, masked)
    with pytest.raises(TypeError, match="`grad_output` is a masked array"):
        linear_recurrence_vjp(masked, 0.5, np.ones(3))
