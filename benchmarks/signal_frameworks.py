"""cuscan.signal on torch and JAX tensors on the CPU: chunks on NumPy views or recurrences.

A torch tensor that nothing differentiates (no autograd in either mode, no torch.func
transform, no tracing) and a concrete JAX array on the CPU are filtered like NumPy
arrays, in chunks as matrix products, on NumPy views of their memory; the result comes
back as the framework's tensor. Tensors that autograd records, and traced JAX arrays, run
each stage's recurrence through the framework, which differentiates. Times both on the
same float64 tensors (the views switched off for the second), alternated in one process,
for `sosfilt` (Butterworth order 8) and `lfilter` (order 4, ``(b, a)``), and prints the
chunks' time over the recurrences'.

Writes results/signal_frameworks.json.

    python -m benchmarks.signal_frameworks
"""

from __future__ import annotations

import numpy as np
import scipy.signal

from benchmarks._common import alternated, environment, write
from cuscan import signal
from cuscan.signal import _arrays

SHAPES = [(1, 10**6), (64, 156_250), (16, 4096)]
SOS = scipy.signal.butter(8, 0.05, output="sos")
BA = scipy.signal.butter(4, 0.05)


def main() -> None:
    import jax
    import torch

    jax.config.update("jax_enable_x64", True)
    frameworks = {"torch": (torch.from_numpy, _arrays._Torch),
                  "jax": (jax.numpy.asarray, _arrays._Jax)}
    rng = np.random.default_rng(0)
    rows = []
    print("float64 on the CPU: chunks on NumPy views / each stage's recurrence")
    for shape in SHAPES:
        x = rng.standard_normal(shape)
        for name, (tensor, namespace) in frameworks.items():
            t = tensor(x)
            for label, function in (("sosfilt order 8", lambda t=t: signal.sosfilt(SOS, t)),
                                    ("lfilter order 4", lambda t=t: signal.lfilter(*BA, t))):
                best = alternated(function, namespace, "numpy_views",
                                  {"chunks": namespace.numpy_views,
                                   "recurrences": lambda self, *arrays: None}, repeats=3)
                rows.append({"shape": list(shape), "framework": name, "filter": label,
                             "chunks_s": best["chunks"],
                             "recurrences_s": best["recurrences"]})
                print(f"{'x'.join(map(str, shape)):>10} {name:>6} {label:>16} "
                      f"{best['chunks'] / best['recurrences']:6.2f}   "
                      f"{best['chunks'] * 1e3:8.2f} ms {best['recurrences'] * 1e3:8.2f} ms")
    versions = {"torch": torch.__version__, "jax": jax.__version__}
    path = write("signal_frameworks", {"environment": environment() | versions, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
