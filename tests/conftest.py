"""The backend fixture, tolerances and helpers shared by every test module."""

from __future__ import annotations

import functools
import importlib
import math
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cuscan import _api, _dtypes

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DTYPES = _dtypes.SUPPORTED_NAMES


def require(module: str):
    """Import ``module``; skip without it, except under CI, where it must be installed."""
    if IN_CI:
        return importlib.import_module(module)
    return pytest.importorskip(module)


def dtype_of(name: str) -> np.dtype:
    """A supported dtype by name (bfloat16 needs ml_dtypes)."""
    if name == "bfloat16":
        return np.dtype(require("ml_dtypes").bfloat16)
    return np.dtype(name)


class Backend:
    """An array library the suite runs against, with conversions to and from NumPy."""

    def __init__(self, name: str):
        self.name = name
        self.xp = np if name == "numpy" else importlib.import_module(name)

    def asarray(self, array):
        return np.asarray(array) if self.xp is np else self.xp.asarray(array)

    def to_numpy(self, array):
        return array if self.xp is np else self.xp.asnumpy(array)

    def __repr__(self):
        return self.name


def _gpu_available() -> bool:
    try:
        cupy = importlib.import_module("cupy")
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@functools.cache
def _host_kernels():
    from tests import kernel_host

    return kernel_host.backend(kernel_host.build())


@pytest.fixture(params=["numpy", "host-kernels", pytest.param("cupy", marks=pytest.mark.gpu)])
def backend(request, monkeypatch) -> Backend:
    """Each backend in turn. "host-kernels" runs the CUDA kernels, compiled for the
    CPU, through the GPU backend's launch plan on NumPy arrays."""
    if request.param == "cupy":
        if not _gpu_available():
            pytest.skip("needs CuPy and a CUDA GPU")
        return Backend("cupy")
    if request.param == "host-kernels":
        if not (IN_CI or shutil.which("g++")):
            pytest.skip("needs g++ to compile the kernels for the host")
        from tests import kernel_host

        kernel_host.install(monkeypatch, _host_kernels())
    return Backend("numpy")


@pytest.fixture(autouse=True)
def jax_effects_awaited():
    """Once JAX is imported, waits for its effects after each test: on a GPU, an error raised
    in cuscan's buffer callbacks is held in JAX's runtime token until then, so the test it
    came from fails, not JAX's exit."""
    yield
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.effects_barrier()


def decays_near_one(dtype: str, length: int):
    """Two channels of ``length`` steps in ``dtype``, float32 or complex64: decays of
    1 - 10^-5 and 1, or of modulus 1 (rotations, as in state-space models), one per channel,
    and standard normal impulses, time first. Returns them and ``eps * sqrt(T)``, the error
    relative to the result's RMS (`reference.relative_error`) that the serial loop's
    rounding keeps within."""
    rng = np.random.default_rng(41)
    decays = np.array([1 - 1e-5, 1.0]) if dtype == "float32" else np.exp([0.3j, 2j])
    impulses = rng.standard_normal((length, 2))
    if dtype == "complex64":
        impulses = impulses + 1j * rng.standard_normal((length, 2))
    return (decays.astype(dtype), impulses.astype(dtype),
            float(np.finfo(dtype).eps * np.sqrt(length)))


def tolerance(dtype, length: int) -> float:
    """Allowed error relative to the magnitude scale, from the dtype's epsilon.

    Rounding adds a few epsilons of the running magnitude per step; chunk
    carries add a few more per level, growing like ``log2(length)``.
    """
    return 8 * _dtypes.epsilon(dtype) * (2 + math.log2(length + 1))


def assert_close(actual, expected, scale, dtype, length: int) -> None:
    """``|actual - expected| <= tolerance * scale`` elementwise, NaN matching NaN."""
    actual = np.asarray(actual).astype(expected.dtype)
    tiny = np.finfo(np.float64).tiny
    limit = tolerance(dtype, length) * np.abs(scale) + tiny
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[~finite & ~np.isnan(expected)],
                                  expected[~finite & ~np.isnan(expected)])
    with np.errstate(invalid="ignore"):
        error = np.abs(actual - expected)
    bad = finite & ~(error <= limit)
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} elements off; worst error {error[bad].max():.3g} "
        f"against a limit of {limit[bad].min():.3g} ({dtype})"
    )


def record_core_calls(monkeypatch, function_name: str) -> dict:
    """Record the arrays an adapter hands to ``_api.forward`` or ``_api.backward``: its
    views of the framework's buffers (``inputs``) and the buffers written (``out``)."""
    seen = {}
    original = getattr(_api, function_name)

    def record(*arrays, out, **kwargs):
        seen["inputs"] = [a for a in arrays if a is not None]
        seen["out"] = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
        return original(*arrays, out=out, **kwargs)

    monkeypatch.setattr(_api, function_name, record)
    return seen


def record_results(monkeypatch, module, name: str) -> list:
    """Replace the function ``module.<name>`` by one that calls it and keeps each result in
    the returned list, in order."""
    original, results = getattr(module, name), []

    def recorded(*args, **kwargs):
        results.append(original(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(module, name, recorded)
    return results


def run_in_fresh_process(script: str, **environment: str) -> None:
    """Run a Python ``script`` (dedented) from the repository root in a new interpreter with
    extra ``environment`` variables, for settings a framework takes only at start-up (its
    devices); fail with its stderr if it fails."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                            capture_output=True, text=True, cwd=root,
                            env=dict(os.environ, **environment), check=False)
    assert result.returncode == 0, result.stderr[-3000:]
