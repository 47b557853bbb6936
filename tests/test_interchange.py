"""Arrays of other libraries, through ``__dlpack__``: viewed as NumPy arrays, never copied."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import cuscan
from cuscan import _api
from tests import reference
from tests.conftest import require


class Exported:
    """An array of a library cuscan does not know, offering only DLPack."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_forward_and_vjp_through_dlpack(monkeypatch):
    rng = np.random.default_rng(0)
    decays = rng.uniform(0, 1, (40, 3))
    impulses = rng.standard_normal((40, 3))
    seen = []
    original = _api.forward

    def record(*arrays, **kwargs):
        seen.extend(a for a in arrays if isinstance(a, np.ndarray))
        return original(*arrays, **kwargs)

    monkeypatch.setattr(_api, "forward", record)
    h = cuscan.linear_recurrence(Exported(decays), Exported(impulses), 1.0, reverse=True)
    assert isinstance(h, np.ndarray)
    np.testing.assert_allclose(h, reference.linear_recurrence(decays, impulses, 1.0,
                                                              reverse=True), rtol=1e-12)
    assert [a.ctypes.data for a in seen] == [decays.ctypes.data, impulses.ctypes.data]
    grads = cuscan.linear_recurrence_vjp(Exported(np.ones_like(h)), Exported(decays), Exported(h),
                                         reverse=True)
    expected = cuscan.linear_recurrence_vjp(np.ones_like(h), decays, h, reverse=True)
    for mine, theirs in zip(grads[:2], expected[:2], strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_objects_without_an_interface_are_rejected():
    with pytest.raises(TypeError, match="__dlpack__"):
        cuscan.linear_recurrence(0.5, object())


def test_gpu_arrays_without_cupy_say_what_to_install(monkeypatch):
    """A CUDA array (DLPack device type 2) where CuPy is missing: a clear error."""
    class OnGPU(Exported):
        def __dlpack_device__(self):
            return (2, 0)

    monkeypatch.setitem(sys.modules, "cupy", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"a OnGPU on a GPU needs CuPy: install "
                                                  r"cuscan\[cuda13\] or cuscan\[cuda12\]"):
        cuscan.linear_recurrence(0.5, OnGPU(np.ones(3)))


def test_signal_filters_through_dlpack():
    """cuscan.signal takes such arrays too (as NumPy arrays), zi included."""
    ss = require("scipy.signal")
    from cuscan import signal

    x = np.random.default_rng(3).standard_normal((2, 300))
    sos = ss.butter(4, 0.1, output="sos")
    zi = np.ones((2, 2, 2))
    y, zf = signal.sosfilt(sos, Exported(x), zi=Exported(zi))
    expected, expected_zf = ss.sosfilt(sos, x, zi=zi)
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(zf, expected_zf, rtol=1e-10, atol=1e-12)
    for adjust in (False, True):
        np.testing.assert_allclose(signal.ema(Exported(x), 0.5, adjust=adjust),
                                   signal.ema(x, 0.5, adjust=adjust))
    np.testing.assert_allclose(signal.sosfiltfilt(sos, Exported(x)), ss.sosfiltfilt(sos, x),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(signal.filtfilt(*ss.butter(2, 0.2), Exported(x)),
                               ss.filtfilt(*ss.butter(2, 0.2), x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(signal.filtfilt(*ss.butter(2, 0.2), Exported(x), method="gust"),
                               ss.filtfilt(*ss.butter(2, 0.2), x, method="gust"), rtol=1e-10,
                               atol=1e-12)
    past = x[0, :5]
    np.testing.assert_allclose(signal.lfiltic(*ss.butter(2, 0.2), Exported(past), Exported(past)),
                               ss.lfiltic(*ss.butter(2, 0.2), past, past), rtol=1e-13)
    # Coefficients too (NumPy took them as objects: "`sos` must hold numbers").
    b, a = ss.butter(3, 0.2)
    np.testing.assert_allclose(signal.sosfilt(Exported(sos), x), ss.sosfilt(sos, x),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(signal.lfilter(Exported(b), Exported(a), x), ss.lfilter(b, a, x),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(signal.lfilter_zi(Exported(b), Exported(a)), ss.lfilter_zi(b, a),
                               rtol=1e-12)


def test_numpy_array_interface():
    """Objects offering only NumPy's array interface (``__array_interface__``, as PIL images,
    or ``__array_struct__``) are NumPy's arrays, as for NumPy itself."""
    from cuscan import signal

    class Interface:
        def __init__(self, array):
            self.__array_interface__ = array.__array_interface__
            self.array = array  # kept alive

    class Struct:
        def __init__(self, array):
            self.__array_struct__ = array.__array_struct__
            self.array = array

    rng = np.random.default_rng(8)
    x, decays = rng.standard_normal((30, 2)), rng.uniform(0, 1, (30, 2))
    for wrap in (Interface, Struct):
        np.testing.assert_array_equal(cuscan.linear_recurrence(wrap(decays), wrap(x)),
                                      cuscan.linear_recurrence(decays, x))
        np.testing.assert_array_equal(signal.ema(wrap(x), wrap(np.full(2, 0.3)), axis=0),
                                      signal.ema(x, np.full(2, 0.3), axis=0))
        np.testing.assert_array_equal(signal.lfilter(wrap(np.ones(2)), [1.0, -0.5], wrap(x),
                                                     axis=0),
                                      signal.lfilter(np.ones(2), [1.0, -0.5], x, axis=0))
    with pytest.raises(TypeError, match="__array_interface__, or a Python scalar"):
        cuscan.linear_recurrence(0.5, object())


def test_arrays_their_library_cannot_export_convert_as_array_likes():
    """An array whose ``__dlpack__`` refuses (pyarrow's with nulls, say) but that NumPy can
    convert is NumPy's array_like, as without DLPack; with no ``__array__`` the refusal
    stands."""
    from cuscan import signal

    class WithNulls(Exported):
        def __dlpack__(self, **kwargs):
            raise BufferError("Can only use DLPack on arrays with no nulls.")

    class Convertible(WithNulls):
        def __array__(self, dtype=None, copy=None):
            return self.array

    values = np.array([1.0, np.nan, 3.0, 4.0])
    np.testing.assert_array_equal(cuscan.linear_recurrence(0.5, Convertible(values)),
                                  [1.0, np.nan, np.nan, np.nan])
    np.testing.assert_allclose(signal.ema(Convertible(values), 0.5, nan_policy="omit"),
                               signal.ema(values, 0.5, nan_policy="omit"), rtol=1e-15)
    with pytest.raises(BufferError, match="no nulls"):
        cuscan.linear_recurrence(0.5, WithNulls(values))
