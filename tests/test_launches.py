"""The launch profile (benchmarks/launches.py): the GPU backend's plan on NumPy arrays, timed
by a stand-in for CuPy's events on the host clock, and on a GPU, is profiled launch by launch
in its order, and the table shows each call and its launches."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

import cuscan
from benchmarks import launches
from cuscan._kernel_backend import KernelBackend
from tests.conftest import _gpu_available


class _Event:
    """A CUDA event's stand-in on the host clock, done as soon as it is recorded unless the
    stand-in GPU is held."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.done = False

    def record(self):
        self.time = time.perf_counter()
        self.done = self.gpu.released

    def synchronize(self):
        pass


def _cupy(released: bool = False):
    """CuPy's events, elapsed times, streams and RawKernel as the profile uses them; the hold
    kernel has ended before the host records anything where ``released``."""
    gpu = SimpleNamespace(released=released, holds=[])
    cuda = SimpleNamespace(
        Event=lambda: _Event(gpu),
        get_elapsed_time=lambda start, stop: (stop.time - start.time) * 1e3,
        get_current_stream=lambda: SimpleNamespace(synchronize=lambda: None))
    kernel = lambda grid, block, args: gpu.holds.append(float(args[0]))  # noqa: E731
    return SimpleNamespace(cuda=cuda, RawKernel=lambda source, name: kernel), gpu


def _plan(backend, call) -> list[tuple]:
    """The launches ``call`` makes: kernel (without its prefix), dtype and threads."""
    original, made = backend.launch, []
    backend.launch = lambda kernel, dtype, work, *args: made.append(
        (kernel.removeprefix("linear_recurrence_"), np.dtype(dtype).name, work))
    try:
        call()
    finally:
        backend.launch = original
    return made


@pytest.mark.parametrize("axis", [0, 1])
def test_profile_times_each_launch_in_order(axis):
    launched = []

    def launch(kernel, *args):
        launched.append(kernel)

    backend = KernelBackend(np, launch)
    shape = (16384, 16) if axis == 0 else (16, 16384)
    a = np.full(shape, 0.5, np.float32)
    out = np.empty_like(a)

    def call():
        backend.forward(a, a, None, out, axis, "auto")

    cupy, gpu = _cupy()
    row = launches.profile(cupy, backend, launches.Hold(cupy), call, repeats=3)
    plan = _plan(backend, call)
    assert [launch["kernel"] for launch in row["launches"]][:1] == ["fwd_reduce"]
    assert [(launch["kernel"], launch["dtype"], launch["threads"])
            for launch in row["launches"]] == plan
    assert any(dtype == "float64" for _, dtype, _ in plan)  # the carries, in double precision
    assert all(launch["seconds"] >= 0 for launch in row["launches"])
    assert row["held"]
    assert row["other_s"] == pytest.approx(
        row["device_s"] - sum(launch["seconds"] for launch in row["launches"]))
    assert row["host_s"] > 0
    assert row["unheld_s"] > 0
    assert backend.launch is launch  # restored
    assert len(launched) == (3 + 3 + 2 * 3) * len(plan)  # warm-up, unheld, held twice a repeat
    assert gpu.holds == [1e6] * 6  # one millisecond held each time, twice a repeat


def test_hold_lengthens_up_to_its_longest():
    cupy, gpu = _cupy(released=True)  # a call that waits for the GPU outlasts any hold
    hold = launches.Hold(cupy, seconds=1e-3, longest=4e-3)
    calls = []
    host, held = hold(lambda: calls.append(1))
    assert not held
    assert host >= 0
    assert gpu.holds == [1e6, 2e6, 4e6]
    assert len(calls) == 3


def test_launch_medians_align_runs():
    runs = [[("fwd_reduce", "float32", 8, t), ("fwd_serial", "float64", 2, 2 * t)]
            for t in (1.0, 3.0, 2.0)]
    assert launches.launch_medians(runs) == [
        {"kernel": "fwd_reduce", "dtype": "float32", "threads": 8, "seconds": 2.0},
        {"kernel": "fwd_serial", "dtype": "float64", "threads": 2, "seconds": 4.0}]
    with pytest.raises(ValueError, match="different kernels"):
        launches.launch_medians([runs[0], runs[1][:1]])


def test_table_shows_each_call_and_its_launches():
    row = {"length": 1024, "channels": 16, "dtype": "float32", "layout": "time-contiguous",
           "direction": "forward", "floor_s": 10e-6, "unheld_s": 40e-6, "device_s": 30e-6,
           "host_s": 20e-6, "held": False, "other_s": 5e-6,
           "launches": [{"kernel": "fwd_reduce", "dtype": "float32", "threads": 2048,
                         "seconds": 25e-6}]}
    text = launches.table({"rows": [row]})
    assert "| 1024 | 16 | float32 | time-contiguous | forward | 10 | 40 | 30 * | 20 | 1 | 25 " \
           "| 5 |" in text
    assert "1024 x 16 float32 time-contiguous forward: device 30 us, floor 10" in text
    assert "fwd_reduce   float32          2048 threads      25 us  83.3%" in text


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("axis", [0, 1])
def test_profile_on_the_gpu(axis):
    import cupy

    from cuscan import _cupy_backend

    shape = (16384, 16) if axis == 0 else (16, 16384)
    a, x = cupy.full(shape, 0.5, cupy.float32), cupy.ones(shape, cupy.float32)

    def call():
        return cuscan.linear_recurrence(a, x, axis=axis, method="parallel")

    backend = _cupy_backend._kernel_backend
    launch = backend.launch
    row = launches.profile(cupy, backend, launches.Hold(cupy), call, repeats=3)
    assert backend.launch is launch
    assert [(launch["kernel"], launch["dtype"], launch["threads"])
            for launch in row["launches"]] == _plan(backend, call)
    assert row["held"]
    # A short kernel may read as 0 at the events' resolution (about half a microsecond).
    assert all(launch["seconds"] >= 0 for launch in row["launches"])
    assert row["device_s"] > 0
    assert row["host_s"] > 0
    np.testing.assert_allclose(cupy.asnumpy(call()[-1] if axis == 0 else call()[:, -1]), 2.0,
                               rtol=1e-6)  # the profiled calls still compute
