"""cuscan.signal.sosfilt against scipy.signal.sosfilt (CPU) and cupyx.scipy.signal.sosfilt (GPU).

An order-8 Butterworth low-pass (4 sections) over 10^7 samples with 1 channel,
and over 64 channels: 10^7 samples each on the GPU; on the CPU, where 64 x
10^7 doubles do not fit with their complex intermediates, 10^7 samples in all
(64 x 156,250). Prints a table of times and ratios and writes
results/signal_vs_scipy[_gpu].json.

    python -m benchmarks.signal_vs_scipy [--gpu]
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.signal

import cuscan.signal
from benchmarks._common import best_time, environment, write

SOS = scipy.signal.butter(8, 0.05, output="sos")


def cpu() -> dict:
    rng = np.random.default_rng(0)
    rows = []
    for channels, length in ((1, 10**7), (64, 10**7 // 64)):
        x = rng.standard_normal((channels, length))
        expected = scipy.signal.sosfilt(SOS, x)
        error = np.max(np.abs(cuscan.signal.sosfilt(SOS, x) - expected)) / np.std(expected)
        ours, theirs = np.inf, np.inf
        for _ in range(3):  # alternated, so that a machine whose load drifts slows both alike
            ours = min(ours, best_time(lambda x=x: cuscan.signal.sosfilt(SOS, x), 1))
            theirs = min(theirs, best_time(lambda x=x: scipy.signal.sosfilt(SOS, x), 1))
        rows.append({"channels": channels, "length": length, "cuscan_s": ours,
                     "scipy_s": theirs, "ratio": ours / theirs, "max_error_over_rms": error})
    return {"device": "cpu", "environment": environment(), "sections": SOS.shape[0],
            "rows": rows}


def gpu(repeats: int = 10) -> dict:
    import cupy
    import cupyx.scipy.signal

    from benchmarks.table1 import device_description, gpu_times

    rng = np.random.default_rng(0)
    rows = []
    sos = cupy.asarray(SOS)
    for channels, length in ((1, 10**7), (64, 10**7)):
        x = cupy.asarray(rng.standard_normal((channels, length)))
        expected = cupyx.scipy.signal.sosfilt(sos, x)
        error = float(cupy.max(cupy.abs(cuscan.signal.sosfilt(SOS, x) - expected))
                      / cupy.std(expected))
        times = gpu_times(cupy, {"ours": lambda x=x: cuscan.signal.sosfilt(SOS, x),
                                 "theirs": lambda x=x: cupyx.scipy.signal.sosfilt(sos, x)},
                          repeats)
        ours, theirs = times["ours"], times["theirs"]
        rows.append({"channels": channels, "length": length, "cuscan_s": ours,
                     "cupyx_s": theirs, "ratio": ours / theirs, "max_error_over_rms": error})
    return {"device": "gpu", "environment": environment() | device_description(cupy),
            "sections": SOS.shape[0], "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="compare with cupyx on the GPU")
    args = parser.parse_args()
    result = gpu() if args.gpu else cpu()
    peer = "cupyx_s" if args.gpu else "scipy_s"
    print(f"{'channels':>8} {'samples':>10} {'cuscan':>10} {peer[:-2]:>10} {'ratio':>7}  error")
    for r in result["rows"]:
        print(f"{r['channels']:>8} {r['length']:>10} {r['cuscan_s'] * 1e3:8.1f}ms "
              f"{r[peer] * 1e3:8.1f}ms {r['ratio']:6.2f}x  {r['max_error_over_rms']:.1e}")
    path = write("signal_vs_scipy" + ("_gpu" if args.gpu else ""), result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
