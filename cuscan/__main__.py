"""``python -m cuscan``: run a realistic recurrence, check it, report throughput.

On a machine with CuPy and a CUDA GPU the problem runs there; otherwise on the
NumPy backend. The parallel result is checked against the serial method and
the achieved throughput is printed.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import cuscan
from cuscan import _dtypes


def _select_backend(requested: str):
    """The array module to run on and a line describing it."""
    if requested in ("auto", "cupy"):
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
                return cupy, f"CuPy {cupy.__version__} on {name}"
            reason = "no CUDA device"
        except Exception as error:  # no CuPy, no driver, or no device
            reason = f"{type(error).__name__}: {error}"
        if requested == "cupy":
            raise SystemExit(f"CuPy backend requested but unavailable ({reason}); "
                             "install cuscan[cuda12] or cuscan[cuda13] on a CUDA machine")
        return np, f"NumPy {np.__version__} on the CPU (no GPU: {reason})"
    return np, f"NumPy {np.__version__} on the CPU"


def _time(function, synchronize, repeats: int) -> float:
    function()
    synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def _positive(text: str) -> int:
    """A command-line count: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 1; got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cuscan", description="Run a realistic recurrence (a gated linear RNN's "
        "state), check the parallel method against the serial one, and report throughput.")
    parser.add_argument("--backend", choices=["auto", "numpy", "cupy"], default="auto",
                        help="where to run (default: auto, CuPy on a CUDA GPU if there is one, "
                             "else NumPy)")
    parser.add_argument("--length", type=_positive, default=None,
                        help="sequence length (default: 2**16 on CPU, 2**20 on GPU)")
    parser.add_argument("--channels", type=_positive, default=16,
                        help="batch x features per step")
    parser.add_argument("--dtype", default="float32", choices=_dtypes.SUPPORTED_NAMES[2:],
                        help="of the decays, impulses and result (default: float32)")
    args = parser.parse_args(argv)

    xp, description = _select_backend(args.backend)
    on_gpu = xp is not np
    length = args.length if args.length is not None else 2**20 if on_gpu else 2**16
    print(f"backend: {description}")
    print(f"problem: gated linear RNN state, {length} steps x {args.channels} channels, "
          f"{args.dtype}, time-major (T, C), axis 0")

    # A GILR-style layer: gates in (0, 1) and impulses (1 - g) * i.
    rng = np.random.default_rng(0)
    gates = 1 / (1 + np.exp(-rng.normal(3.0, 1.0, (length, args.channels))))
    impulses = (1 - gates) * np.tanh(rng.standard_normal((length, args.channels)))
    decays = xp.asarray(gates.astype(args.dtype))
    impulses = xp.asarray(impulses.astype(args.dtype))
    synchronize = xp.cuda.get_current_stream().synchronize if on_gpu else (lambda: None)

    def run(method):
        return cuscan.linear_recurrence(decays, impulses, method=method)

    serial = run("serial")
    parallel = run("parallel")
    to_numpy = xp.asnumpy if on_gpu else np.asarray
    error = float(np.max(np.abs(to_numpy(parallel) - to_numpy(serial))))
    limit = 64 * _dtypes.epsilon(np.dtype(args.dtype)) * float(np.max(np.abs(to_numpy(serial))))
    print(f"check:   parallel vs serial max |error| = {error:.3g} (limit {limit:.3g}) -> "
          f"{'OK' if error <= limit else 'FAILED'}")

    item = np.dtype(args.dtype).itemsize
    moved = 3 * length * args.channels * item  # read decays and impulses, write h
    for method in ("serial", "parallel", "auto"):
        repeats = 1 if method == "serial" and not on_gpu else 3
        seconds = _time(lambda m=method: run(m), synchronize, repeats)
        rate = length * args.channels / seconds / 1e6
        print(f"{method:>8}: {seconds * 1e3:9.2f} ms  {rate:9.1f} M steps/s  "
              f"{moved / seconds / 1e9:7.2f} GB/s")
    return 0 if error <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
