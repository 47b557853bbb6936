"""What a small call costs: cuscan on tiny inputs against one elementwise operation.

A recurrence over a few hundred elements takes well under a microsecond of
arithmetic, so a small call measures what surrounds it: validation, dtype
promotion, dispatch, the adapters' conversions. Times ``linear_recurrence``
(forward, and forward plus backward where the library differentiates) on
shapes (T, D) = (1, 1), (16, 4) and (256, 32) along axis 0, for each library
installed (NumPy; torch, JAX and TensorFlow on their default device; CuPy
with a GPU), next to the same library's ``decays * impulses`` on the same
arrays: the cost of one operation, and on a GPU one kernel launch. The
difference is what cuscan adds: its overhead, and on a CPU the recurrence
itself, which NumPy's serial method runs as a loop over time (a microsecond
or so a step). JAX is timed eagerly and under ``jax.jit`` (both functions
compiled, so the difference is that of XLA's callback). Gradients: of
``sum(linear_recurrence(a, x))`` against those of ``sum(a * x)``, by the
library's autodiff. Median of many calls (each timed alone; on a GPU after
synchronising). "kernel plan" times the GPU backend's plan alone, on NumPy arrays with a
launcher that launches nothing (any machine). Writes results/overhead.json.

    python -m benchmarks.overhead
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import cuscan
from benchmarks._common import environment, without_options, write

SHAPES = [(1, 1), (16, 4), (256, 32)]
CALLS = 2000


def median_time(function, sync=lambda: None, calls: int = CALLS) -> float:
    """Median seconds of ``calls`` calls, each timed alone, after warming up."""
    for _ in range(20):
        function()
    sync()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _numpy():
    return {"make": lambda v: v, "sync": lambda: None, "grad": None}


def _plan():
    """The GPU backend's launch plan, its layouts and argument lists, on NumPy arrays with a
    launcher that launches nothing: the host's share of a CuPy call that planning takes."""
    from cuscan._kernel_backend import KernelBackend

    backend = KernelBackend(np, lambda *launch: None)

    def forward(a, x):
        out = np.empty_like(x)
        backend.forward(a, x, None, out, 0, "auto")
        return out

    return {"make": lambda v: v, "sync": lambda: None, "grad": None, "forward": forward}


def _cupy():
    import cupy

    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return None
    except cupy.cuda.runtime.CUDARuntimeError:  # no driver
        return None
    return {"make": cupy.asarray, "sync": cupy.cuda.Device().synchronize, "grad": None}


def _torch():
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"

    def grad(a, x):
        a = a.detach().requires_grad_()
        cuscan.linear_recurrence(a, x).sum().backward()

    def grad_reference(a, x):
        a = a.detach().requires_grad_()
        (a * x).sum().backward()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return {"make": lambda v: torch.as_tensor(v, device=device), "sync": sync,
            "grad": (grad, grad_reference)}


def _jax(jit=False):
    import jax
    import jax.numpy as jnp

    wrap = jax.jit if jit else (lambda f: f)
    grad = wrap(jax.grad(lambda a, x: cuscan.linear_recurrence(a, x).sum()))
    grad_reference = wrap(jax.grad(lambda a, x: (a * x).sum()))
    return {"make": jnp.asarray, "sync": lambda: None, "block": True,
            "forward": wrap(cuscan.linear_recurrence), "operation": wrap(lambda a, x: a * x),
            "grad": (grad, grad_reference)}


def _tensorflow():
    import tensorflow as tf

    def gradient(f):
        def run(a, x):
            with tf.GradientTape() as tape:
                tape.watch(a)
                y = tf.reduce_sum(f(a, x))
            return tape.gradient(y, a)
        return run

    return {"make": tf.constant, "sync": lambda: None,
            "grad": (gradient(cuscan.linear_recurrence), gradient(lambda a, x: a * x))}


LIBRARIES = {"numpy": _numpy, "kernel plan": _plan, "cupy": _cupy, "torch": _torch, "jax": _jax,
             "jax (jit)": lambda: _jax(jit=True), "tensorflow": _tensorflow}


def _timed(setup, function, *args) -> float:
    if setup.get("block"):  # JAX dispatches asynchronously
        return median_time(lambda: function(*args).block_until_ready())
    return median_time(lambda: function(*args), setup["sync"])


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'library':>10} {'shape':>10} {'op us':>8} {'cuscan us':>10} {'cuscan-op':>9} "
          f"{'grad op':>8} {'grad us':>8}")
    for name, make in LIBRARIES.items():
        try:
            setup = make()
        except ImportError:
            setup = None
        if setup is None:
            continue
        for shape in SHAPES:
            a = setup["make"](rng.uniform(0.5, 1, shape).astype(np.float32))
            x = setup["make"](rng.standard_normal(shape).astype(np.float32))
            row = {"library": name, "shape": list(shape),
                   "operation_s": _timed(setup, setup.get("operation", lambda a, x: a * x),
                                         a, x),
                   "forward_s": _timed(setup, setup.get("forward", cuscan.linear_recurrence),
                                       a, x)}
            row["difference_s"] = row["forward_s"] - row["operation_s"]
            if setup["grad"] is not None:
                grad, reference = setup["grad"]
                row["grad_operation_s"] = _timed(setup, reference, a, x)
                row["grad_s"] = _timed(setup, grad, a, x)
            rows.append(row)
            grads = (f"{row['grad_operation_s'] * 1e6:8.1f} {row['grad_s'] * 1e6:8.1f}"
                     if "grad_s" in row else f"{'-':>8} {'-':>8}")
            print(f"{name:>10} {shape!s:>10} {row['operation_s'] * 1e6:8.1f} "
                  f"{row['forward_s'] * 1e6:10.1f} {row['difference_s'] * 1e6:9.1f} "
                  f"{grads}")
    versions = {lib: sys.modules[lib].__version__ for lib in ("cupy", "torch", "jax", "tensorflow")
                if lib in sys.modules}
    described = {**environment(), **versions}
    if any(row["library"] == "cupy" for row in rows):  # timed on a GPU: name it
        from benchmarks.table1 import device_description

        described |= device_description(sys.modules["cupy"])
    path = write("overhead", {"environment": described, "calls": CALLS, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
