"""What only the GPU backend has: streams, devices, launch plan choices, 64-bit indexing."""

from __future__ import annotations

import numpy as np
import pytest

import cuscan
from tests import reference
from tests.conftest import _gpu_available

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _gpu_available(), reason="needs CuPy and a CUDA GPU")]


@pytest.fixture
def cupy():
    import cupy

    return cupy


def test_runs_on_the_current_stream(cupy):
    rng = np.random.default_rng(0)
    decays, impulses = rng.uniform(0, 1, (5000, 8)), rng.standard_normal((5000, 8))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a, x = cupy.asarray(decays), cupy.asarray(impulses)
        h = cuscan.linear_recurrence(a, x, method="parallel")
        grads = cuscan.linear_recurrence_vjp(cupy.ones_like(h), a, h)
    stream.synchronize()
    np.testing.assert_allclose(h.get(), reference.linear_recurrence(decays, impulses),
                               rtol=1e-10, atol=1e-12)
    assert grads[1].shape == h.shape


def test_result_is_on_the_input_device(cupy):
    x = cupy.ones((100, 3), np.float32)
    assert cuscan.linear_recurrence(0.5, x).device == x.device


def test_arrays_on_another_device_are_rejected(cupy):
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    with cupy.cuda.Device(1):
        other = cupy.ones(10)
    with cupy.cuda.Device(0), pytest.raises(TypeError, match="device 1"):
        cuscan.linear_recurrence(other, cupy.ones(10))


def test_mixing_numpy_and_cupy_is_rejected(cupy):
    with pytest.raises(TypeError, match="one library"):
        cuscan.linear_recurrence(np.ones(10), cupy.ones(10))


def test_numpy_scalars_go_with_cupy_arrays(cupy):
    h = cuscan.linear_recurrence(np.float32(0.5), cupy.ones(10, np.float32))
    assert isinstance(h, cupy.ndarray)
    assert h.dtype == np.float32


def test_more_than_two_to_the_31_elements(cupy):
    length = 2**31 + 1000  # one channel, so every index passes 2^31
    impulses = cupy.ones(length, np.float16)
    h = cuscan.linear_recurrence(np.float16(0.5), impulses, method="parallel")
    assert h.shape == (length,)
    np.testing.assert_array_equal(h[:3].get().astype(float), [1.0, 1.5, 1.75])
    np.testing.assert_array_equal(h[-3:].get().astype(float), [2.0, 2.0, 2.0])
    del h
    h = cuscan.linear_recurrence(np.float16(0.5), impulses, method="serial")
    np.testing.assert_array_equal(h[-3:].get().astype(float), [2.0, 2.0, 2.0])
