"""What a new user does first on a CUDA machine, checked: cuscan on CuPy arrays of every
layout, torch and JAX on the GPU (forward, gradient, a few training steps), and
``cuscan.signal`` on CuPy arrays and torch CUDA tensors with designs beyond the test grid.
Prints each error and exits with status 1 if any is over its bound.

Install cuscan as a user would, then run this from outside the source tree::

    python -m pip install "cuscan[cuda13]"      # or a wheel: "dist/cuscan-*.whl[cuda13]"
    cd /tmp && python /path/to/scripts/new_user_gpu.py

Bounds: the scans within a few hundred epsilons of the float64 result (relative to its
largest value); filters within 1e-8 (float64) and 5e-3 (float32) of the signal's RMS, as
documented in docs/signal.md. ``lfilter`` is compared with a serial transposed direct form
run in ``numpy.longdouble``, since SciPy's own ``lfilter`` can be the less accurate of the two.
"""

from __future__ import annotations

import sys

import cupy
import numpy as np
import scipy.signal

import cuscan
import cuscan.signal

RNG = np.random.default_rng(7)
FAILURES = []


def check(label: str, error: float, bound: float) -> None:
    print(f"{label}: {error:.1e} (bound {bound:.0e})")
    if not error <= bound:
        FAILURES.append(label)


def wide(dtype) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def cupy_layouts() -> None:
    print("cuscan", cuscan.__version__, "from", cuscan.__file__)
    for dtype in (np.float32, np.float64, np.complex64):
        eps = np.finfo(dtype).eps
        for shape, axis in (((4, 8, 5000), -1), ((5000, 4, 8), 0), ((4, 5000, 8), 1),
                            ((70001,), 0)):
            a = RNG.uniform(0.9, 1.0, shape).astype(dtype)
            x = RNG.standard_normal(shape).astype(dtype)
            for reverse in (False, True):
                want = cuscan.linear_recurrence(a.astype(wide(dtype)), x.astype(wide(dtype)),
                                                axis=axis, reverse=reverse)
                for method in ("auto", "serial", "parallel"):
                    got = cuscan.linear_recurrence(cupy.asarray(a), cupy.asarray(x), axis=axis,
                                                   method=method, reverse=reverse)
                    assert isinstance(got, cupy.ndarray)
                    assert got.dtype == dtype
                    error = np.max(np.abs(cupy.asnumpy(got) - want)) / np.max(np.abs(want))
                    check(f"cupy {np.dtype(dtype).name} {shape} axis {axis} {method}"
                          f"{' reverse' if reverse else ''}", error / eps, 500)
            # a transposed view, read in place
            view = cupy.asarray(x).swapaxes(0, -1)
            got = cuscan.linear_recurrence(cupy.asarray(a).swapaxes(0, -1), view, axis=0)
            want = cuscan.linear_recurrence(np.swapaxes(a, 0, -1).astype(wide(dtype)),
                                            np.swapaxes(x, 0, -1).astype(wide(dtype)), axis=0)
            error = np.max(np.abs(cupy.asnumpy(got) - want)) / np.max(np.abs(want))
            check(f"cupy {np.dtype(dtype).name} {shape} transposed view", error / eps, 500)


def torch_on_gpu() -> None:
    import torch

    a = torch.rand(3, 5000, 7, dtype=torch.float64) * 0.1 + 0.9
    x = torch.randn(3, 5000, 7, dtype=torch.float64)
    results = {}
    for device in ("cpu", "cuda"):
        decays = a.detach().to(device).requires_grad_()
        impulses = x.detach().to(device).requires_grad_()
        h = cuscan.linear_recurrence(decays, impulses, axis=1)
        assert h.device.type == device, h.device
        h.sin().sum().backward()
        results[device] = (h.detach().cpu(), decays.grad.cpu(), impulses.grad.cpu())
    for name, cpu, gpu in zip(("output", "grad decays", "grad impulses"), results["cpu"],
                              results["cuda"], strict=True):
        check(f"torch cuda {name} against the CPU, float64",
              float((cpu - gpu).abs().max() / cpu.abs().max()) / np.finfo(np.float64).eps, 500)
    # a gated recurrence trained for a few steps
    layer = torch.nn.Linear(7, 7).cuda()
    optimizer = torch.optim.Adam(layer.parameters(), 1e-2)
    inputs = torch.randn(4, 300, 7, device="cuda")
    losses = []
    for _ in range(20):
        gate = torch.sigmoid(layer(inputs))
        loss = cuscan.linear_recurrence(gate, (1 - gate) * inputs, axis=1).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    print(f"torch cuda training: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if not losses[-1] < losses[0]:
        FAILURES.append("torch cuda training")


def jax_on_gpu() -> None:
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    print("jax", jax.__version__, "on", device)
    a = jnp.asarray(RNG.uniform(0.9, 1, (6, 4097)), jnp.float32)
    x = jnp.asarray(RNG.standard_normal((6, 4097)), jnp.float32)

    def scan(a, x):
        def combine(left, right):
            return left[0] * right[0], right[0] * left[1] + right[1]
        return jax.lax.associative_scan(combine, (a, x), axis=-1)[1]

    def loss(recurrence):
        return lambda a, x: jnp.sum(jnp.cos(recurrence(a, x)))

    ours = jax.jit(jax.grad(loss(lambda a, x: cuscan.linear_recurrence(a, x, axis=-1)),
                            (0, 1)))(a, x)
    theirs = jax.grad(loss(scan), (0, 1))(a, x)
    assert all(device in g.devices() for g in ours)
    for name, mine, want in zip(("grad decays", "grad impulses"), ours, theirs, strict=True):
        check(f"jax jit(grad) {name} against associative_scan, float32",
              float(jnp.max(jnp.abs(mine - want)) / jnp.max(jnp.abs(want)))
              / np.finfo(np.float32).eps, 500)


def exact_lfilter(b, a, x, zi, length: int) -> np.ndarray:
    """The first ``length`` samples of ``lfilter`` along axis 0, in long double."""
    b = np.asarray(b, np.longdouble) / np.longdouble(a[0])
    a = np.asarray(a, np.longdouble) / np.longdouble(a[0])
    state = np.array(zi, np.longdouble)
    y = np.empty((length, *x.shape[1:]), np.longdouble)
    for t in range(length):
        sample = x[t].astype(np.longdouble)
        y[t] = b[0] * sample + state[0]
        state[:-1] = b[1:-1, None] * sample + state[1:] - a[1:-1, None] * y[t]
        state[-1] = b[-1] * sample - a[-1] * y[t]
    return y.astype(np.float64)


def signal_designs() -> None:
    import torch

    designs = {
        "cheby2 bandstop 10": scipy.signal.cheby2(10, 60, [0.2, 0.3], "bandstop", output="sos"),
        "ellip highpass 7": scipy.signal.ellip(7, 0.5, 70, 0.05, "highpass", output="sos"),
        "bessel bandpass 6": scipy.signal.bessel(6, [0.01, 0.02], "bandpass", output="sos"),
        "butter lowpass 12 at 0.002": scipy.signal.butter(12, 0.002, output="sos"),
        "cheby1 lowpass 9": scipy.signal.cheby1(9, 1, 0.1, output="sos"),
    }
    bounds = {np.float64: 1e-8, np.float32: 5e-3}
    for name, sos in designs.items():
        for dtype, shape, axis in ((np.float64, (3, 200001), -1), (np.float32, (100003, 5), 0),
                                   (np.float64, (2, 50000, 3), 1)):
            x = RNG.standard_normal(shape)
            want = scipy.signal.sosfilt(sos, x, axis=axis)
            got = cuscan.signal.sosfilt(sos, cupy.asarray(x.astype(dtype)), axis=axis)
            assert isinstance(got, cupy.ndarray)
            assert got.dtype == dtype
            error = np.max(np.abs(cupy.asnumpy(got) - want)) / np.sqrt(np.mean(want ** 2))
            check(f"sosfilt {name}, {np.dtype(dtype).name} {shape} axis {axis}", error,
                  bounds[dtype])
            # lfilter with a state, on the first two sections (order 4) as a transfer function
            b, a = scipy.signal.sos2tf(sos[:2])
            order = len(a) - 1
            rest = tuple(n for i, n in enumerate(shape) if i != axis % len(shape))
            zi = np.moveaxis(np.broadcast_to(RNG.standard_normal(order), (*rest, order)), -1,
                             axis)
            got, _ = cuscan.signal.lfilter(b, a, cupy.asarray(x.astype(dtype)), axis=axis,
                                           zi=cupy.asarray(zi))
            length = 20000
            moved = np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
            want = exact_lfilter(b, a, moved, np.moveaxis(zi, axis, 0).reshape(order, -1),
                                 length)
            got = np.moveaxis(cupy.asnumpy(got), axis, 0).reshape(x.shape[axis], -1)[:length]
            error = np.max(np.abs(got - want)) / np.sqrt(np.mean(want ** 2))
            check(f"lfilter {name} (order 4) with zi, {np.dtype(dtype).name} {shape} axis "
                  f"{axis}", error, bounds[dtype])
        x = torch.randn(4, 30000, device="cuda", dtype=torch.float64)
        got = cuscan.signal.sosfilt(sos, x)
        assert got.device.type == "cuda"
        want = scipy.signal.sosfilt(sos, x.cpu().numpy())
        check(f"sosfilt {name}, torch cuda float64",
              float(np.max(np.abs(got.cpu().numpy() - want)) / np.sqrt(np.mean(want ** 2))),
              1e-8)


def main() -> None:
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    print("device", device["name"].decode(), "cupy", cupy.__version__)
    for part in (cupy_layouts, torch_on_gpu, jax_on_gpu, signal_designs):
        try:
            part()
        except ImportError as error:  # a framework not installed
            print(f"{part.__name__} skipped: {error}")
    print("failed:", FAILURES or "none")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
