"""IIR filtering on linear recurrences: SciPy's filters, parallel over time.

``lfilter``, ``sosfilt``, ``filtfilt``, ``sosfiltfilt`` and their helpers take
SciPy's arguments and give SciPy's results (``zi``/``zf`` included, so long signals can
be filtered block by block), on NumPy and CuPy arrays and torch, JAX and
TensorFlow tensors; ``ema`` is an exponential moving average.
"""

from cuscan.signal._ema import ema
from cuscan.signal._filters import lfilter, lfilter_zi, lfiltic, sosfilt, sosfilt_zi
from cuscan.signal._filtfilt import filtfilt, sosfiltfilt

__all__ = ["ema", "filtfilt", "lfilter", "lfilter_zi", "lfiltic", "sosfilt", "sosfilt_zi",
           "sosfiltfilt"]
