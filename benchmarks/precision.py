"""How far from float64 do long single-precision scans drift where the decays' modulus is near 1
(state-space models' rotations), per backend and method, against the serial loop's rounding?

Decays of 1 - 10^-5 (float32) and e^(0.3i) (complex64), standard normal impulses, 4 channels,
in either layout: time-major ``(T, C)`` along axis 0 and time-contiguous ``(C, T)`` along -1.
Each row gives the result's and the gradient's (``grad_impulses``) largest error relative to
their RMS, and that over ``eps * sqrt(T)``, which the serial loop's rounding keeps to. A chunked
scan whose chunk level rounds in single precision drifts past it: its decay over a chunk repeats
its rounding in every later carry (docs/algorithm.md, "Precision"), and scans that square their
products level by level compound their roundings.

Contestants, where present: the NumPy backend (serial and parallel; 2^11 steps take Hillis and
Steele's scan); the CUDA kernels through CuPy on a GPU, and compiled for the host with the GPU's
launch plan where g++ is (the test suite's emulator); TensorFlow under XLA (Hillis and Steele's
scan in its own operations) and ``jax.export``'s scan (``jax.lax.associative_scan``, 64-bit
types enabled), at up to 2^18 steps, whose scans hold ``T log T`` values. Writes
results/precision_<device>.json, the device being the GPU's name or "cpu".

    python -m benchmarks.precision
"""

from __future__ import annotations

import importlib.util
import shutil

import numpy as np

import cuscan
from benchmarks._common import environment, without_options, write
from benchmarks.table1 import device_description

LENGTHS = [2**11, 2**18, 10**6]
PORTABLE_MAX = 2**18  # the portable scans' longest
CHANNELS = 4
DECAYS = {"float32": 1 - 1e-5, "complex64": np.exp(0.3j)}


def operands(dtype: str, length: int, layout: str):
    """Decays (broadcast over time), impulses and the axis, in ``layout``."""
    rng = np.random.default_rng(length)
    impulses = rng.standard_normal((length, CHANNELS))
    if dtype == "complex64":
        impulses = impulses + 1j * rng.standard_normal((length, CHANNELS))
    decays = np.full((1, CHANNELS), DECAYS[dtype]).astype(dtype)
    impulses = impulses.astype(dtype)
    if layout == "(C, T)":
        return np.ascontiguousarray(decays.T), np.ascontiguousarray(impulses.T), -1
    return decays, impulses, 0


def _core(asarray, to_numpy):
    """cuscan's own functions on the arrays ``asarray`` makes (NumPy's or CuPy's)."""
    def run(a, x, axis, method):
        a, x = asarray(a), asarray(x)
        h = cuscan.linear_recurrence(a, x, axis=axis, method=method)
        grad = cuscan.linear_recurrence_vjp(x, a, h, axis=axis)[1]
        return to_numpy(h), to_numpy(grad)

    return run


def _host_kernels():
    """The CUDA kernels compiled for the CPU, through the GPU's launch plan (KernelBackend's
    defaults), called on NumPy arrays; None without g++ or the test suite."""
    if shutil.which("g++") is None or importlib.util.find_spec("tests.kernel_host") is None:
        return None
    from cuscan._kernel_backend import KernelBackend
    from tests import kernel_host

    plan = KernelBackend(np, kernel_host.HostKernels(kernel_host.build()))

    def run(a, x, axis, method):
        a = np.broadcast_to(a, x.shape)
        h = np.empty_like(x)
        plan.forward(a, x, None, h, axis % x.ndim, method)
        grad_a, grad = np.empty_like(x), np.empty_like(x)
        plan.backward(x, a, h, None, grad_a, grad, None, axis % x.ndim)
        return h, grad

    return run


def _tensorflow():
    if importlib.util.find_spec("tensorflow") is None:
        return None
    import tensorflow as tf

    @tf.function(jit_compile=True, reduce_retracing=True)
    def scan(a, x, axis):
        h = cuscan.linear_recurrence(a, x, axis=axis)
        return h, cuscan.linear_recurrence_vjp(x, a, h, axis=axis)[1]

    def run(a, x, axis, method):
        return tuple(v.numpy() for v in scan(tf.constant(a), tf.constant(x), axis))

    return run


def _jax():
    if importlib.util.find_spec("jax") is None:
        return None
    import jax

    def run(a, x, axis, method):
        with jax.enable_x64(True):
            def scan(a, x):
                h = cuscan.linear_recurrence(a, x, axis=axis)
                return h, cuscan.linear_recurrence_vjp(x, a, h, axis=axis)[1]

            a, x = jax.numpy.asarray(a), jax.numpy.asarray(x)
            module = jax.export.export(jax.jit(scan))(a, x)
            return tuple(np.asarray(v) for v in module.call(a, x))

    return run


def contestants() -> tuple[dict, dict]:
    """The setting (the device's name; on a GPU its driver's, runtime's and CuPy's versions;
    the frameworks' versions) and each contestant's (methods, longest length, runner, whether
    its gradient conjugates complex decays)."""
    found = {"numpy": (["serial", "parallel"], max(LENGTHS), _core(np.asarray, np.asarray),
                       True)}
    described = {"device": "cpu"}
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount():
            described = device_description(cupy)
            found["cupy"] = (["serial", "parallel"], max(LENGTHS),
                             _core(cupy.asarray, cupy.asnumpy), True)
    except Exception:  # no CuPy, or no driver or device
        pass
    for name, make, conjugates in (("kernels on the host", _host_kernels, True),
                                   ("tensorflow xla", _tensorflow, True),
                                   ("jax export (x64)", _jax, False)):
        runner = make()
        if runner is None:
            continue
        if not name.startswith("kernels"):
            module = name.split()[0]
            described[module] = importlib.import_module(module).__version__
        methods = ["serial", "parallel"] if name.startswith("kernels") else ["auto"]
        longest = max(LENGTHS) if name.startswith("kernels") else PORTABLE_MAX
        found[name] = (methods, longest, runner, conjugates)
    return described, found


def main() -> None:
    without_options(__doc__)
    from tests import reference
    from tests.reference import relative_error

    described, found = contestants()
    rows = []
    print(f"{'contestant':22} {'method':8} {'dtype':9} {'layout':6} {'T':>8} "
          f"{'h error':>9} {'/bound':>7} {'grad error':>10} {'/bound':>7}")
    for dtype in DECAYS:
        for length in LENGTHS:
            bound = float(np.finfo(dtype).eps * np.sqrt(length))
            for layout in ("(T, C)", "(C, T)"):
                a, x, axis = operands(dtype, length, layout)
                expected = reference.linear_recurrence(a, x, axis=axis)
                # The gradient's reference: the decays conjugated (only complex ones differ)
                # or not, as the contestants take them.
                backwards = {conjugated: reference.linear_recurrence(
                    np.conj(a) if conjugated else a, x, axis=axis, reverse=True)
                    for conjugated in {c and np.iscomplexobj(a) for *_, c in found.values()}}
                for name, (methods, longest, run, conjugates) in found.items():
                    if length > longest:
                        continue
                    for method in methods:
                        h, grad = run(a, x, axis, method)
                        row = {"contestant": name, "method": method, "dtype": dtype,
                               "layout": layout, "length": length, "bound": bound,
                               "error": relative_error(h, expected),
                               "grad_error": relative_error(
                                   grad, backwards[conjugates and np.iscomplexobj(a)])}
                        rows.append(row)
                        print(f"{name:22} {method:8} {dtype:9} {layout:6} {length:>8} "
                              f"{row['error']:9.2e} {row['error'] / bound:7.2f} "
                              f"{row['grad_error']:10.2e} {row['grad_error'] / bound:7.2f}",
                              flush=True)
    path = write(f"precision_{described['device'].replace(' ', '-')}",
                 {"environment": {**environment(), **described}, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
