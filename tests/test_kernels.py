"""The CUDA kernels: NVRTC compilation for real GPUs, the launch plan, packaging."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import pathlib
import re
import sys

import numpy as np
import pytest

import cuscan
from cuscan import _dtypes, _kernels
from cuscan._kernel_backend import KEPT_LAUNCHES, KernelBackend, Operand, _chunk_major, _merge
from tests.conftest import IN_CI, dtype_of

# The architectures each CUDA major's NVRTC compiles for: the oldest it supports, those of
# common GPUs (V100; T4; A100; RTX 30 and A10; L4 and RTX 40; H100 and H200; B200; RTX 50).
# The `cuda12` and `cuda13` extras bring NVRTC 12 and 13; the test extra installs both.
ARCHITECTURES = {12: ["sm_50", "sm_70", "sm_90"],
                 13: ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]}


@functools.cache
def _nvrtc(major: int) -> ctypes.CDLL:
    """NVRTC of CUDA ``major``, from its pip wheel (``nvidia-cuda-nvrtc``); skips without it,
    except under CI."""
    name = f"libnvrtc.so.{major}" if sys.platform != "win32" else f"nvrtc64_{major}0_0.dll"
    spec = importlib.util.find_spec("nvidia")
    roots = spec.submodule_search_locations if spec else []
    found = [path for root in roots for path in sorted(pathlib.Path(root).rglob(name))]
    if not found:
        message = f"NVRTC {major} is not installed: no {name} in a pip package `nvidia`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    library = ctypes.CDLL(str(found[0]))
    library.nvrtcGetErrorString.restype = ctypes.c_char_p
    return library


def _nvrtc_compile(major: int, architecture: str, dtype_name: str) -> tuple[str, list[str]]:
    """Compile the kernel source with NVRTC ``major`` for ``architecture`` with every
    instantiation of a dtype; return the log and the lowered names."""
    nvrtc = _nvrtc(major)

    def check(status):
        assert status == 0, nvrtc.nvrtcGetErrorString(status).decode()

    names = _kernels.name_expressions(dtype_of(dtype_name))
    program = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), _kernels.source().encode(),
                                   _kernels.SOURCE.encode(), 0, None, None))
    try:
        for name in names:
            check(nvrtc.nvrtcAddNameExpression(program, name.encode()))
        options = [o.encode() for o in _kernels.COMPILE_OPTIONS] + [
            f"--gpu-architecture={architecture}".encode(), b"--ptxas-options=-v"]
        status = nvrtc.nvrtcCompileProgram(program, len(options),
                                           (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        check(nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        check(nvrtc.nvrtcGetProgramLog(program, log))
        log = log.value.decode(errors="replace")
        assert status == 0, log
        lowered = []
        for name in names:
            pointer = ctypes.c_char_p()
            check(nvrtc.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(pointer)))
            lowered.append(pointer.value.decode())
        check(nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)))
        assert size.value > 0
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return log, lowered


@pytest.mark.parametrize(("major", "architecture"),
                         [(major, a) for major, names in ARCHITECTURES.items() for a in names])
@pytest.mark.parametrize("dtype_name", _dtypes.SUPPORTED_NAMES)
def test_every_kernel_compiles_without_spills(major, architecture, dtype_name):
    log, lowered = _nvrtc_compile(major, architecture, dtype_name)
    assert len(set(lowered)) == len(_kernels.KERNELS)
    compiled = re.findall(r"Compiling entry function '(\w+)'", log)
    assert set(compiled) == set(lowered), log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills, log
    assert all(stores == "0" and loads == "0" for stores, loads in spills), log
    stacks = re.findall(r"(\d+) bytes stack frame", log)
    assert all(size == "0" for size in stacks), log


def test_merge_channel_dimensions():
    # (sizes, strides per operand) -> merged sizes and strides
    assert _merge((3, 4), [(4, 1), (0, 0)]) == ([12], [[1], [0]])
    assert _merge((3, 4), [(4, 1), (0, 1)]) == ([3, 4], [[4, 1], [0, 1]])
    assert _merge((3, 1, 4), [(8, 99, 2)]) == ([12], [[2]])
    assert _merge((1, 1), [(5, 7)]) == ([], [[]])


def test_auto_plan():
    """`method="auto"` chunks channel-contiguous layouts from `min_parallel_length` steps with
    fewer than `max_parallel_channels` channels, and time-contiguous ones (chunk-major) from
    `min_parallel_length_major` steps holding `min_parallel_elements_major` elements, or from
    `always_parallel_length_major` steps; "parallel" chunks any sequence of two steps or more,
    "serial" none."""
    plan = KernelBackend(np, launch=None, min_parallel_length=100, max_parallel_channels=10,
                         min_parallel_length_major=20, min_parallel_elements_major=1000,
                         always_parallel_length_major=300)._parallel
    assert plan(100, 9, "auto", False)
    assert not plan(99, 9, "auto", False)
    assert not plan(100, 10, "auto", False)
    assert plan(20, 50, "auto", True)
    assert not plan(20, 49, "auto", True)
    assert not plan(19, 100, "auto", True)
    assert plan(300, 1, "auto", True)
    assert not plan(299, 1, "auto", True)
    assert plan(2, 1, "parallel", False)
    assert not plan(1, 1, "parallel", True)
    assert not plan(10**6, 1, "serial", True)
    # chunk-major where the written operand steps through time faster than through any
    # channel of two or more; channels of one do not count
    assert _chunk_major(Operand(None, (1, 0, 0, 0, 5)), [1, 1, 1, 2])
    assert not _chunk_major(Operand(None, (2, 0, 0, 0, 1)), [1, 1, 1, 2])
    assert _chunk_major(Operand(None, (-3, 0, 0, 1, 9)), [1, 1, 1, 3])
    assert not _chunk_major(Operand(None, (-3, 0, 0, 9, 1)), [1, 1, 1, 3])


def test_broadcast_operands_are_read_in_place():
    backend = KernelBackend(np, launch=None)
    decays = np.arange(4.0)
    impulses = np.ones((7, 3, 4))
    view = np.broadcast_to(decays, impulses.shape)
    sizes, (a, x, _) = backend._layout(0, [view, impulses, np.empty_like(impulses)], 1)
    assert sizes == [1, 1, 3, 4]
    assert np.shares_memory(a.array, decays)
    assert a.strides == (0, 0, 0, 0, 1)
    assert x.strides == (12, 0, 0, 4, 1)
    reversed_view = np.flip(np.ones((5, 6)), 1)
    sizes, (operand,) = backend._layout(1, [reversed_view], 0)
    assert sizes == [1, 1, 1, 5]
    assert operand.strides == (-1, 0, 0, 0, 6)


def test_layouts_beyond_four_channel_dimensions_copy_inputs_only():
    backend = KernelBackend(np, launch=None)
    base = np.ones((2,) * 6 + (5,)).transpose(5, 4, 3, 2, 1, 0, 6)  # no two axes merge
    out = np.empty(base.shape)
    sizes, (x, o) = backend._layout(6, [base, out], 1)
    assert math.prod(sizes) == base.size // 5
    assert not np.shares_memory(x.array, base)
    assert o.array is out
    four = np.ones((2,) * 4 + (5,)).transpose(3, 2, 1, 0, 4)  # four that do not merge
    sizes, (x, o) = backend._layout(4, [four, np.empty(four.shape)], 1)
    assert sizes == [2, 2, 2, 2]
    assert x.array is four


@pytest.mark.parametrize("backend", ["host-kernels"], indirect=True)
@pytest.mark.parametrize("reverse", [False, True])
def test_states_beyond_four_channel_dimensions_are_inputs(backend, reverse):
    """A state laid out in five channel dimensions that do not merge is copied with the
    other inputs, forward and backward; the outputs, reversed views where ``reverse``, are
    written in place."""
    from tests import reference

    rng = np.random.default_rng(9)
    order = (0, 5, 4, 3, 2, 1)
    decays, impulses, weights = (rng.uniform(-1, 1, (7, 2, 3, 2, 3, 2)).transpose(order)
                                 for _ in range(3))
    state = rng.standard_normal((2, 3, 2, 3, 2)).transpose(4, 3, 2, 1, 0)
    h = cuscan.linear_recurrence(decays, impulses, state, reverse=reverse)
    np.testing.assert_allclose(
        h, reference.linear_recurrence(decays, impulses, state, reverse=reverse), rtol=1e-12,
        atol=1e-12)
    grads = cuscan.linear_recurrence_vjp(weights, decays, h, state, reverse=reverse)
    step = 1e-6  # the loss is affine in any one element: difference quotients are exact
    for channel in [(0, 0, 0, 0, 0), (1, 2, 1, 2, 1), (1, 0, 1, 2, 0)]:
        for k, operand in enumerate((decays, impulses, state)):
            index = (3,) * (operand.ndim - 5) + channel  # at step 3, but for the state
            moved = [decays, impulses, state]
            moved[k] = operand.copy()
            moved[k][index] += step
            change = np.sum(weights * (
                reference.linear_recurrence(*moved, reverse=reverse) - h))
            np.testing.assert_allclose(grads[k][index], change / step, rtol=1e-6)


def test_host_kernels_run_the_chunked_plan(monkeypatch):
    from tests import kernel_host

    launcher = kernel_host.installed(monkeypatch, target_threads=64, min_chunk=3,
                                     min_parallel_length=8).launch
    rng = np.random.default_rng(0)
    decays, impulses = rng.uniform(0, 1, (2, 500, 3)), rng.standard_normal((2, 500, 3))
    h = cuscan.linear_recurrence(decays, impulses, axis=1, method="parallel")
    assert launcher.launches.count("linear_recurrence_fwd_reduce") >= 2  # carries recurse
    assert "linear_recurrence_fwd_rescan" in launcher.launches
    assert launcher.launches[-1] == "linear_recurrence_fwd_serial"  # untrusted channels
    launcher.launches.clear()
    cuscan.linear_recurrence_vjp(np.ones_like(h), decays, h, axis=1)
    assert "linear_recurrence_bwd_reduce" in launcher.launches
    assert "linear_recurrence_bwd_rescan" in launcher.launches
    launcher.launches.clear()
    serial = cuscan.linear_recurrence(decays, impulses, axis=1, method="serial")
    assert launcher.launches == ["linear_recurrence_fwd_serial"]
    np.testing.assert_allclose(serial, h, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [0, -1])  # channel-major items; chunk-major items
def test_host_kernels_re_run_only_channels_with_non_finite_values(monkeypatch, axis):
    """After the chunked kernels, the serial kernel re-runs the channels they flagged (see
    "Untrusted channels" in the kernels): those holding a value that is not finite, and no
    other, forward and backward. A finite channel keeps its chunked result; flagging them all
    would give the same numbers at the cost of a whole serial pass."""
    from tests import kernel_host, reference

    backend = kernel_host.install(monkeypatch, kernel_host.backend(kernel_host.build()))
    launch, re_run = backend.launch, {}

    def recording(kernel, dtype, work, *args):
        if kernel.endswith("_serial"):  # the last one of a call re-runs its flagged channels
            only = args[4 if kernel.startswith("linear_recurrence_fwd") else 7]
            re_run[kernel] = set(np.flatnonzero(only).tolist())
        launch(kernel, dtype, work, *args)

    backend.launch = recording
    rng = np.random.default_rng(3)
    length, channels = 500, 6
    decays = rng.uniform(0.5, 1, (length, channels))
    impulses, grad_output = rng.standard_normal((2, length, channels))
    impulses[250, 1] = np.nan  # forward only: NaN from step 250
    grad_output[300, 2] = np.nan  # backward only: NaN from step 300 back
    decays[100, 3] = np.inf  # both: infinite from step 100 on, and from step 99 back
    impulses[-1, 4] = np.inf  # forward only: the last step
    shifted = np.concatenate([decays[1:], np.zeros((1, channels))])  # a[t + 1]
    arrays = (decays, impulses, grad_output, reference.linear_recurrence(decays, impulses),
              reference.linear_recurrence(shifted, grad_output, reverse=True))
    if axis:
        arrays = tuple(np.ascontiguousarray(v.T) for v in arrays)
    decays, impulses, grad_output, expected_h, expected_grad = arrays
    h = cuscan.linear_recurrence(decays, impulses, axis=axis, method="parallel")
    assert re_run == {"linear_recurrence_fwd_serial": {1, 3, 4}}
    np.testing.assert_allclose(h, expected_h, rtol=1e-12, atol=1e-12)
    grad_impulses = cuscan.linear_recurrence_vjp(grad_output, decays, h, axis=axis)[1]
    assert re_run["linear_recurrence_bwd_serial"] == {2, 3}
    np.testing.assert_allclose(grad_impulses, expected_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [0, 1])  # channels adjacent; steps adjacent (chunk-major)
def test_chunked_plan_ends_whatever_its_settings(monkeypatch, axis):
    """The carries' scan is shorter than the scan it serves even with chunks of one step
    asked for and every length chunked on "auto" (down to a single step, which had
    recursed without end): the plan ends, and gives the NumPy backend's numbers."""
    from tests import kernel_host

    rng = np.random.default_rng(7)
    cases = []
    for length in (1, 2, 3, 5, 33):
        shape = (length, 4) if axis == 0 else (4, length)
        decays, impulses = rng.uniform(-1, 1, shape), rng.standard_normal(shape)
        h = cuscan.linear_recurrence(decays, impulses, axis=axis, method="serial")
        grads = cuscan.linear_recurrence_vjp(np.ones_like(h), decays, h, axis=axis)
        cases.append((decays, impulses, h, grads[:2]))
    launcher = kernel_host.installed(
        monkeypatch, target_threads=1 << 20, min_chunk=1, min_parallel_length=1, major_chunk=1,
        min_parallel_length_major=1, min_parallel_elements_major=0,
        always_parallel_length_major=1).launch
    for decays, impulses, expected, expected_grads in cases:
        h = cuscan.linear_recurrence(decays, impulses, axis=axis)
        np.testing.assert_allclose(h, expected, rtol=1e-12, atol=1e-12)
        grads = cuscan.linear_recurrence_vjp(np.ones_like(h), decays, h, axis=axis)
        for got, want in zip(grads[:2], expected_grads, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert "linear_recurrence_fwd_rescan" in launcher.launches
    assert "linear_recurrence_bwd_rescan" in launcher.launches


@pytest.mark.parametrize(("shape", "axis", "chunked"), [
    ((4096, 4), 0, True),  # channels adjacent: from min_parallel_length steps
    ((4095, 4), 0, False),
    ((128, 1024), 1, True),  # steps adjacent: from min_parallel_elements_major elements...
    ((127, 1024), 1, False),
    ((128, 1023), 1, False),  # ... of at least min_parallel_length_major steps
    ((1, 8192), 1, True),  # and from always_parallel_length_major steps whatever the count
    ((1, 8191), 1, False),
])
def test_auto_method_follows_the_measured_crossovers(monkeypatch, shape, axis, chunked):
    """``method="auto"`` chunks a layout where the crossovers measured on the GPU say (the
    defaults of KernelBackend), forward and backward, and runs the serial kernel below
    them."""
    from tests import kernel_host

    launcher = kernel_host.installed(monkeypatch).launch
    decays = np.full(shape, 0.5, np.float32)
    h = cuscan.linear_recurrence(decays, np.ones(shape, np.float32), axis=axis)
    cuscan.linear_recurrence_vjp(np.ones_like(h), decays, h, axis=axis)
    assert ("linear_recurrence_fwd_reduce" in launcher.launches) == chunked
    assert ("linear_recurrence_bwd_reduce" in launcher.launches) == chunked
    np.testing.assert_allclose(np.take(h, -1, axis), 2 * (1 - 0.5 ** shape[axis]), rtol=1e-6)


@pytest.mark.parametrize("axis", [0, -1])  # chunks of 16 steps; of 8, chunk-major
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_overflow_persists_with_the_gpu_chunking(monkeypatch, axis, dtype):
    """`test_overflow_persists_as_serially` through the kernels' default launch plan, the
    GPU's, whose chunks are short in either layout (the suite's host plan runs that test's
    channel-contiguous case in a single chunk)."""
    from tests import kernel_host
    from tests.conftest import Backend
    from tests.test_linear_recurrence import check_overflow_persists

    launcher = kernel_host.installed(monkeypatch).launch
    check_overflow_persists(Backend("numpy"), "auto", axis, dtype)
    assert "linear_recurrence_fwd_rescan" in launcher.launches
    assert "linear_recurrence_bwd_rescan" in launcher.launches


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_half_stores_round_to_nearest_even(monkeypatch, dtype_name):
    """The serial kernels of the half types accumulate in float32 and round each stored
    value once, to nearest with ties to even, as NumPy (ml_dtypes for bfloat16) rounds:
    their results, forward and backward, are those of a float32 loop rounded on store, bit
    for bit (the host build contracts no multiply-add). Some sums are exact ties."""
    from tests import kernel_host

    dtype = dtype_of(dtype_name)
    launcher = kernel_host.installed(monkeypatch).launch
    rng = np.random.default_rng(53)
    length, channels = 300, 64
    decays = rng.uniform(-1, 1, (length, channels)).astype(dtype)
    impulses = rng.standard_normal((length, channels)).astype(dtype)
    start = rng.standard_normal(channels).astype(dtype)
    grad_output = rng.standard_normal((length, channels)).astype(dtype)
    # Channel 0 sums 1 and half a unit in the last place of 1, a tie between 1 and its
    # successor (to 1, the even one); channel 1 sums 1 and three halves, a tie between that
    # successor and the next (to the next, the even one).
    half_ulp = _dtypes.epsilon(dtype) / 2
    decays[:3, :2], impulses[:3, 0], impulses[:3, 1] = 1, [1, half_ulp, 0], [1, 3 * half_ulp, 0]
    start[:2] = 0
    h = cuscan.linear_recurrence(decays, impulses, start)
    assert launcher.launches == ["linear_recurrence_fwd_serial"]
    assert h[1, 0] == 1
    assert h[1, 1] == 1 + 4 * half_ulp
    grads = cuscan.linear_recurrence_vjp(grad_output, decays, h, start)
    assert launcher.launches[-1] == "linear_recurrence_bwd_serial"

    a, x, go, hs = (v.astype(np.float32) for v in (decays, impulses, grad_output, h))
    state, expected = start.astype(np.float32), np.empty((length, channels), dtype)
    for t in range(length):
        state = a[t] * state + x[t]
        expected[t] = state.astype(dtype)
    np.testing.assert_array_equal(h.view(np.uint16), expected.view(np.uint16))
    g = go[-1]
    grad_decays, grad_impulses = np.empty_like(expected), np.empty_like(expected)
    for t in range(length - 1, -1, -1):
        grad_impulses[t] = g.astype(dtype)
        grad_decays[t] = ((hs[t - 1] if t else start.astype(np.float32)) * g).astype(dtype)
        if t:
            g = a[t] * g + go[t - 1]
    grad_start = (a[0] * g).astype(dtype)
    for got, want in zip(grads, (grad_decays, grad_impulses, grad_start), strict=True):
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_serial_launches_kept_by_layout(monkeypatch):
    """A layout's serial launch is kept: a later call with arrays of the same shapes, strides
    and dtypes skips the layout and runs on its own arrays; any other layout, a layout that
    needed copies, and a change of setting plan afresh."""
    from tests import kernel_host, reference

    backend = kernel_host.installed(monkeypatch)
    launcher = backend.launch
    layouts = []
    plan = backend._layout
    monkeypatch.setattr(backend, "_layout", lambda *args, **kwargs: (
        layouts.append(args[1][0].shape), plan(*args, **kwargs))[1])
    rng = np.random.default_rng(0)

    def check(decays, impulses, state=None, axis=0):
        h = cuscan.linear_recurrence(decays, impulses, state, axis=axis)
        np.testing.assert_allclose(h, reference.linear_recurrence(decays, impulses, state,
                                                                  axis=axis), rtol=1e-12)
        grad = rng.standard_normal(h.shape)
        d_decays, d_impulses, d_state = cuscan.linear_recurrence_vjp(grad, decays, h, state,
                                                                     axis=axis)
        # the vjp of a serial run is the serial run backwards, read from the same states
        g = reference.linear_recurrence(np.roll(np.broadcast_to(decays, h.shape), -1, axis)
                                        * (np.arange(h.shape[axis]) < h.shape[axis] - 1
                                           ).reshape((-1,) + (1,) * (h.ndim - 1 - axis)),
                                        grad, axis=axis, reverse=True)
        np.testing.assert_allclose(d_impulses, g, rtol=1e-10, atol=1e-12)
        first = np.zeros_like(h[:1]) if state is None else np.broadcast_to(state, h[:1].shape)
        np.testing.assert_allclose(d_decays, g * np.concatenate([first, h[:-1]]), rtol=1e-10,
                                   atol=1e-12)
        if state is not None:
            np.testing.assert_allclose(d_state, decays[0] * g[0], rtol=1e-10, atol=1e-12)
        return h

    def fresh(shape):
        return rng.uniform(0.5, 1, shape), rng.standard_normal(shape)

    check(*fresh((16, 4)))
    assert len(layouts) == 2  # forward and backward laid out once
    for _ in range(3):  # new arrays, new data: the kept launches
        check(*fresh((16, 4)))
    assert len(layouts) == 2
    decays, impulses = fresh((4, 16))
    check(decays.T, impulses.T)  # other strides
    check(*fresh((16, 4)), state=rng.standard_normal(4))  # a state
    assert len(layouts) == 6
    six = [array.transpose(0, 5, 4, 3, 2, 1) for array in fresh((5, 2, 3, 2, 3, 2))]
    check(*six)  # five channel dimensions that do not merge: copied, not kept
    check(*six)
    assert len(layouts) == 10
    backend.min_parallel_length = 4  # a setting changes: planned afresh, the chunked scan
    launcher.launches.clear()
    check(*fresh((16, 4)))
    assert len(layouts) == 12
    assert "linear_recurrence_fwd_reduce" in launcher.launches
    # at most KEPT_LAUNCHES layouts are kept (a new one beyond them starts the store afresh)
    for length in range(1, KEPT_LAUNCHES + 2):
        cuscan.linear_recurrence(0.5, np.ones((length, 1)), method="serial")
    assert 1 <= len(backend._kept) <= KEPT_LAUNCHES
