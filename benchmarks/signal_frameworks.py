"""cuscan.signal on torch, JAX and TensorFlow tensors on the CPU: chunks or recurrences.

A torch tensor that nothing differentiates (no autograd in either mode, no torch.func
transform, no tracing) and a concrete JAX array on the CPU are filtered like NumPy
arrays, in chunks as matrix products, on NumPy views of their memory; the result comes
back as the framework's tensor ("views"). A filter from rest, or from the steady state of
its first sample as each pass of `sosfiltfilt` starts, on a tensor that autodiff or a trace
records (torch with autograd, JAX under jit and grad, TensorFlow always) runs in chunks
too, as one linear operation whose transpose is the same filter backward in time (plus the
steady state's part) ("linear"), and so does a filter from a given zi, zi and the signal
together as one tensor. Otherwise, and before either existed, each stage's
recurrence runs through the framework, which differentiates it. Times both on the same
float64 tensors (the chunks switched off for the second), alternated in one process, for
`sosfilt` and `sosfiltfilt` (Butterworth order 8; `sosfilt` from rest and from a zi that
depends on the signal) and `lfilter` (order 4, ``(b, a)``), and
prints the chunks' time over the recurrences':

- views: a plain call;
- gradient: the forward and the gradient of ``sum(w * y)`` (torch's backward, JAX's
  ``jit(grad)``, a TensorFlow ``GradientTape``);
- jit: JAX's forward under ``jit``; TensorFlow's eager forward.

Writes results/signal_frameworks.json.

    python -m benchmarks.signal_frameworks
"""

from __future__ import annotations

import numpy as np
import scipy.signal

from benchmarks._common import alternated, environment, without_options, write
from cuscan import signal
from cuscan.signal import _arrays

SHAPES = [(1, 10**6), (64, 156_250), (16, 4096)]
GRADIENT_SHAPES = [(1, 10**6), (16, 4096)]
SOS = scipy.signal.butter(8, 0.05, output="sos")
BA = scipy.signal.butter(4, 0.05)
SOS_ZI = signal.sosfilt_zi(SOS)[:, None, :]


def _from_zi(t):
    """`sosfilt` from a given zi: each row's first sample times the steady state (so that
    the gradient reaches the signal through zi too)."""
    zi = _arrays.namespace({"x": t}).asarray(SOS_ZI, like=t) * t[None, :, :1]
    return signal.sosfilt(SOS, t, zi=zi)[0]


FILTERS = {"sosfilt order 8": lambda t: signal.sosfilt(SOS, t),
           "lfilter order 4": lambda t: signal.lfilter(*BA, t),
           "sosfiltfilt order 8": lambda t: signal.sosfiltfilt(SOS, t),
           "sosfilt from zi": _from_zi}


def _time(rows, shape, name, mode, label, function, namespace, attribute, repeats=3):
    """Alternate ``function`` with ``namespace.<attribute>`` as it is and switched off."""
    best = alternated(function, namespace, attribute,
                      {"chunks": getattr(namespace, attribute),
                       "recurrences": lambda self, *arrays: None if attribute == "numpy_views"
                       else False}, repeats=repeats)
    rows.append({"shape": list(shape), "framework": name, "mode": mode, "filter": label,
                 "chunks_s": best["chunks"], "recurrences_s": best["recurrences"]})
    print(f"{'x'.join(map(str, shape)):>10} {name:>10} {mode:>8} {label:>16} "
          f"{best['chunks'] / best['recurrences']:6.2f}   "
          f"{best['chunks'] * 1e3:8.2f} ms {best['recurrences'] * 1e3:8.2f} ms")


def _jitted(make):
    """The function ``make()`` jits, made once for each setting of ``_Jax.runs_on_host``
    (jit traces a function once)."""
    made = {}

    def run(*args):
        key = _arrays._Jax.runs_on_host
        if key not in made:
            made[key] = make()
        return made[key](*args)

    return run


def _traced(rows, shape, label, run, x, w, torch, jax, tf) -> None:
    """The gradient and jit rows of one filter (``run``) on ``x``."""
    leaf = torch.from_numpy(x).requires_grad_()

    def torch_gradient():
        run(leaf).backward(torch.from_numpy(w))
        leaf.grad = None

    _time(rows, shape, "torch", "gradient", label, torch_gradient, _arrays._Torch,
          "runs_on_host")
    v = jax.numpy.asarray(x)
    gradient = _jitted(lambda: jax.jit(jax.grad(lambda u: (run(u) * w).sum())))
    _time(rows, shape, "jax", "gradient", label, lambda: gradient(v).block_until_ready(),
          _arrays._Jax, "runs_on_host")
    forward = _jitted(lambda: jax.jit(lambda u: run(u)))  # jit caches traces by function
    _time(rows, shape, "jax", "jit", label, lambda: forward(v).block_until_ready(),
          _arrays._Jax, "runs_on_host")
    c = tf.constant(x)

    def tf_gradient():
        with tf.GradientTape() as tape:
            tape.watch(c)
            total = tf.reduce_sum(run(c) * w)
        return tape.gradient(total, c)

    _time(rows, shape, "tensorflow", "gradient", label, tf_gradient, _arrays._TensorFlow,
          "runs_on_host")
    _time(rows, shape, "tensorflow", "eager", label, lambda: run(c), _arrays._TensorFlow,
          "runs_on_host")


def main() -> None:
    import jax
    import tensorflow as tf
    import torch

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    rows = []
    print("float64 on the CPU: chunks / each stage's recurrence")
    for shape in SHAPES:
        x = rng.standard_normal(shape)
        for name, tensor, namespace in (("torch", torch.from_numpy, _arrays._Torch),
                                        ("jax", jax.numpy.asarray, _arrays._Jax)):
            t = tensor(x)
            linear = namespace.runs_on_host
            namespace.runs_on_host = lambda self, x: False  # the recurrences, without views
            try:
                for label, run in FILTERS.items():
                    _time(rows, shape, name, "views", label, lambda t=t, run=run: run(t),
                          namespace, "numpy_views")
            finally:
                namespace.runs_on_host = linear
    for shape in GRADIENT_SHAPES:
        x, w = rng.standard_normal(shape), rng.standard_normal(shape)
        for label, run in FILTERS.items():
            _traced(rows, shape, label, run, x, w, torch, jax, tf)
    versions = {"torch": torch.__version__, "jax": jax.__version__,
                "tensorflow": tf.__version__}
    path = write("signal_frameworks", {"environment": environment() | versions, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    without_options(__doc__)
    main()
