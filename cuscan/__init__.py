"""First-order linear recurrences, parallel over the sequence length.

``h[t] = decays[t] * h[t-1] + impulses[t]`` on NumPy arrays (CPU) and CuPy
arrays (GPU), with an exact vector-Jacobian product.
"""

from cuscan._api import linear_recurrence, linear_recurrence_vjp

__all__ = ["linear_recurrence", "linear_recurrence_vjp"]
__version__ = "0.1.0"
