"""IIR filtering on linear recurrences: SciPy's filters, parallel over time.

``lfilter`` and ``sosfilt`` take SciPy's arguments and give SciPy's results
(``zi``/``zf`` included, so long signals can be filtered block by block), on
NumPy and CuPy arrays and torch, JAX and TensorFlow tensors; ``ema`` is an
exponential moving average.
"""

from cuscan.signal._filters import ema, lfilter, lfilter_zi, sosfilt, sosfilt_zi

__all__ = ["ema", "lfilter", "lfilter_zi", "sosfilt", "sosfilt_zi"]
