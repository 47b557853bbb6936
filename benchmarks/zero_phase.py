"""Zero-phase filters on short NumPy signals: one product with their matrix, or the scheme.

`cuscan.signal.filtfilt` (both methods) and `sosfiltfilt` over a signal of at most
`_ZERO_PHASE_LENGTH` samples run as one product with the whole scheme's matrix for that
length (`_filtfilt._zero_phase`). This times them with the products and without (the padding,
both passes and their states), alternated in rounds in one process once the matrix is built,
and SciPy's functions, over lengths and channel counts: a Butterworth filter of order 4 as
`(b, a)`, and of order 8 as second-order sections, float64, time along the last axis; then
on CPU tensors. Writes results/zero_phase.json.

    OMP_NUM_THREADS=1 python -m benchmarks.zero_phase
"""

from __future__ import annotations

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import (
    alternated_settings,
    assigned,
    best_time,
    environment,
    without_options,
    write,
)
from cuscan.signal import _chunks, _filtfilt

LENGTHS = [32, 64, 128, 256, 384, 512, 768, 1024]
CHANNELS = [1, 4, 16, 64, 256, 1024]
MOST_ELEMENTS = 2**20
BA = scipy.signal.butter(4, 0.1)
SOS = scipy.signal.butter(8, 0.1, output="sos")
SETTINGS = {
    "product": {(_filtfilt, "_ZERO_PHASE_LENGTH"): max(LENGTHS)},
    "scheme": {(_filtfilt, "_ZERO_PHASE_LENGTH"): 0},
}
CALLS = {
    "filtfilt": (lambda x: cuscan.signal.filtfilt(*BA, x),
                 lambda x: scipy.signal.filtfilt(*BA, x)),
    "filtfilt gust": (lambda x: cuscan.signal.filtfilt(*BA, x, method="gust"),
                      lambda x: scipy.signal.filtfilt(*BA, x, method="gust")),
    "sosfiltfilt": (lambda x: cuscan.signal.sosfiltfilt(SOS, x),
                    lambda x: scipy.signal.sosfiltfilt(SOS, x)),
}


def repeats(elements: int) -> int:
    return max(3, min(50, 200_000 // elements))


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for name, (ours, theirs) in CALLS.items():
        print(f"\n{name}: time as one product / through the scheme (SciPy's time / the "
              "product's in brackets)")
        print(f"{'T':>6} " + " ".join(f"{c:>13}" for c in CHANNELS))
        for length in LENGTHS:
            cells = []
            for channels in CHANNELS:
                if channels * length > MOST_ELEMENTS:
                    cells.append(f"{'':>13}")
                    continue
                x = rng.standard_normal((channels, length))
                _chunks._direct_kept.clear()
                with assigned(SETTINGS["product"]):  # the matrix, built by this length's calls
                    for _ in range(_chunks._DIRECT_AFTER + 1):
                        ours(x)
                times = alternated_settings(lambda x=x, ours=ours: ours(x), SETTINGS,
                                            repeats(x.size))
                scipy_s = best_time(lambda x=x, theirs=theirs: theirs(x), repeats(x.size))
                ratio = times["product"] / times["scheme"]
                rows.append({"function": name, "channels": channels, "length": length,
                             "product_s": times["product"], "scheme_s": times["scheme"],
                             "scipy_s": scipy_s, "ratio": ratio})
                cells.append(f"{ratio:5.2f} ({scipy_s / times['product']:5.1f})")
            print(f"{length:>6} " + " ".join(cells))
    tensor_rows = tensors(rng)
    path = write("zero_phase", {"environment": environment(), "rows": rows,
                                "tensors": tensor_rows})
    print(f"wrote {path}")


def tensors(rng) -> list[dict]:
    """The same on CPU tensors of each framework installed (eager; torch's recorded by
    autodiff too): the framework's own product with the matrix, or the scheme."""
    frameworks = {}
    try:
        import torch

        frameworks["torch"] = torch.from_numpy
        frameworks["torch, requires_grad"] = lambda v: torch.from_numpy(v).requires_grad_()
    except ImportError:
        pass
    try:
        import jax

        frameworks["jax"] = lambda v: jax.device_put(v, jax.devices("cpu")[0])
    except ImportError:
        pass
    try:
        import tensorflow as tf

        frameworks["tensorflow"] = lambda v: tf.constant(v)
    except ImportError:
        pass
    rows = []
    print("\nCPU tensors: time as one product / through the scheme (time of the product)")
    for framework, make in frameworks.items():
        for name, (ours, _) in CALLS.items():
            for channels, length in ((1, 256), (16, 256)):
                x = make(rng.standard_normal((channels, length)))
                _chunks._direct_kept.clear()
                with assigned(SETTINGS["product"]):
                    for _ in range(_chunks._DIRECT_AFTER + 1):
                        ours(x)
                times = alternated_settings(lambda x=x, ours=ours: ours(x), SETTINGS, 20)
                ratio = times["product"] / times["scheme"]
                rows.append({"framework": framework, "function": name, "channels": channels,
                             "length": length, "product_s": times["product"],
                             "scheme_s": times["scheme"], "ratio": ratio})
                print(f"{framework:>22} {name:>14} {channels:>3} x {length}: {ratio:5.2f} "
                      f"({times['product'] * 1e6:.0f} us)")
    return rows


if __name__ == "__main__":
    without_options(__doc__)
    main()
