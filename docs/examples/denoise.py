"""Filter a long noisy recording with cuscan.signal.sosfilt and sosfiltfilt; plot before
and after.

Writes docs/images/denoise.png. Runs on the GPU when CuPy and a CUDA device
are present, else on the CPU:

    python docs/examples/denoise.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import scipy.signal

import cuscan.signal

RATE = 48_000  # samples per second
SECONDS = 60


def main() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(SECONDS * RATE) / RATE
    clean = np.sin(2 * np.pi * 3.0 * t) + 0.5 * np.sin(2 * np.pi * 11.0 * t)
    noisy = clean + 0.8 * rng.standard_normal(t.size) + 0.3 * np.sin(2 * np.pi * 2500.0 * t)
    # An 8th-order elliptic low-pass at 40 Hz: poles within 0.5% of the unit circle.
    sos = scipy.signal.ellip(8, 0.1, 80, 40.0, fs=RATE, output="sos")
    try:
        import cupy

        signal = cupy.asarray(noisy)
        filtered = cupy.asnumpy(cuscan.signal.sosfilt(sos, signal))
        zero_phase = cupy.asnumpy(cuscan.signal.sosfiltfilt(sos, signal))
        where = "GPU"
    except Exception:
        filtered = cuscan.signal.sosfilt(sos, noisy)
        zero_phase = cuscan.signal.sosfiltfilt(sos, noisy)
        where = "CPU"
    reference = scipy.signal.sosfilt(sos, noisy)
    error = np.max(np.abs(filtered - reference)) / np.sqrt(np.mean(reference**2))

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5))
    window = (t >= 20) & (t < 21)
    top.plot(t[window], noisy[window], lw=0.4, color="0.7", label="noisy")
    top.plot(t[window], filtered[window], lw=1.5, color="C0", label="cuscan.signal.sosfilt")
    top.plot(t[window], zero_phase[window], lw=1.5, color="C2",
             label="cuscan.signal.sosfiltfilt (zero phase: no delay)")
    top.plot(t[window], clean[window], lw=1.0, ls="--", color="C3", label="clean signal")
    top.set(xlabel="time (s)", ylabel="amplitude",
            title=f"1 s of a {SECONDS} s recording at {RATE} Hz, elliptic low-pass at 40 Hz "
                  f"({where}; max error vs scipy / RMS = {error:.1e})")
    top.legend(loc="upper right")
    for data, label, color in ((noisy, "noisy", "0.6"), (filtered, "filtered", "C0")):
        freqs, power = scipy.signal.welch(data, fs=RATE, nperseg=1 << 15)
        bottom.loglog(freqs[1:], power[1:], color=color, label=label)
    bottom.set(xlabel="frequency (Hz)", ylabel="power spectral density", ylim=(1e-16, 10))
    bottom.legend(loc="lower left")
    figure.tight_layout()
    out = Path(__file__).resolve().parents[1] / "images" / "denoise.png"
    figure.savefig(out, dpi=110)
    print(f"wrote {out} ({where}, max error vs scipy over RMS {error:.1e})")


if __name__ == "__main__":
    main()
