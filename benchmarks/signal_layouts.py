"""Time-contiguous signals on the CPU: one time-major copy per filter, or per recurrence.

A signal laid out ``(C, T)`` and filtered along axis -1 has the elements of a
time step a row apart. The NumPy backend scans such operands in time-major
copies (see docs/algorithm.md); ``cuscan.signal`` makes that copy once for a
whole filter and copies the result back once, for NumPy arrays and for
torch, JAX and TensorFlow tensors on the CPU alike. This times ``sosfilt``,
``lfilter`` and ``sosfiltfilt`` both ways, the one copy disabled for the
other, alternated in rounds in one process so that a loaded machine slows
both alike; NumPy on every shape, each installed framework on three. On NumPy
arrays ``sosfilt`` and ``sosfiltfilt`` now run the whole cascade in chunks
(benchmarks/sosfilt_chunks.py), which reads the layout as it is and makes no
such copy, so there both ways run the same code. So would torch tensors that
nothing differentiates and concrete JAX arrays (benchmarks/signal_frameworks.py):
their NumPy views are switched off here, to time the recurrences that tensors a
gradient may be asked for run.
Writes results/signal_layouts.json.

    python -m benchmarks.signal_layouts [--libraries numpy torch jax tensorflow]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import best_time, environment, write
from cuscan.signal._arrays import _Arrays, _Jax, _Torch, namespace

SOS = scipy.signal.butter(8, 0.05, output="sos")
B, A = scipy.signal.butter(4, 0.05)
SHAPES = [(64, 10**7 // 64), (12, 10**4), (16, 2**16), (256, 2**13), (1000, 1000)]
FRAMEWORK_SHAPES = [(64, 10**7 // 64), (16, 2**16), (256, 2**13)]
FILTERS = {
    "sosfilt": lambda x: cuscan.signal.sosfilt(SOS, x),
    "lfilter": lambda x: cuscan.signal.lfilter(B, A, x),
    "sosfiltfilt": lambda x: cuscan.signal.sosfiltfilt(SOS, x),
}


def _converters() -> dict:
    """For each library, a function from a NumPy array to its CPU tensor, and one
    waiting for a result to be computed."""
    def torch_tensor(x):
        import torch

        return torch.from_numpy(x)

    def jax_array(x):
        import jax

        jax.config.update("jax_enable_x64", True)
        return jax.device_put(x, jax.devices("cpu")[0])

    def tf_tensor(x):
        import tensorflow as tf

        with tf.device("CPU"):
            return tf.constant(x)

    return {"numpy": (np.asarray, np.asarray), "torch": (torch_tensor, np.asarray),
            "jax": (jax_array, lambda y: y.block_until_ready()),
            "tensorflow": (tf_tensor, lambda y: y.numpy())}


def _alternated(call, copied) -> dict[str, float]:
    """The best time of ``call`` with one copy per filter and with none, alternated."""
    times = {"once": np.inf, "per_recurrence": np.inf}
    for _ in range(3):
        for way in times:
            _Arrays.time_major = copied if way == "once" else lambda self, x, axis: None
            times[way] = min(times[way], best_time(call, 1))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", nargs="+", default=list(_converters()),
                        choices=list(_converters()))
    args = parser.parse_args()
    libraries = [name for name in args.libraries
                 if name == "numpy" or importlib.util.find_spec(name) is not None]
    rng = np.random.default_rng(0)
    rows, copied, views = [], _Arrays.time_major, (_Torch.numpy_views, _Jax.numpy_views)
    _Torch.numpy_views = _Jax.numpy_views = lambda self, *arrays: None
    print("copied once / per recurrence; < 1 means the one copy is faster;"
          " * marks the layouts copied")
    print(f"{'library':>10} {'C':>5} {'T':>7} " + " ".join(f"{name:>11}" for name in FILTERS))
    try:
        for library in libraries:
            convert, wait = _converters()[library]
            for channels, length in SHAPES if library == "numpy" else FRAMEWORK_SHAPES:
                x = convert(rng.standard_normal((channels, length)))
                chosen = copied(namespace({"x": x}), x, 1) is not None
                cells = []
                for name, run in FILTERS.items():
                    times = _alternated(lambda x=x, run=run, wait=wait: wait(run(x)), copied)
                    rows.append({"library": library, "channels": channels, "length": length,
                                 "filter": name, "copied": chosen, "once_s": times["once"],
                                 "per_recurrence_s": times["per_recurrence"]})
                    cells.append(f"{times['once'] / times['per_recurrence']:10.2f}"
                                 f"{'*' if chosen else ' '}")
                print(f"{library:>10} {channels:>5} {length:>7} " + " ".join(cells), flush=True)
    finally:
        _Arrays.time_major = copied
        _Torch.numpy_views, _Jax.numpy_views = views
    versions = {name: importlib.import_module(name).__version__ for name in libraries}
    path = write("signal_layouts", {"environment": {**environment(), **versions},
                                    "sos_sections": len(SOS), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
