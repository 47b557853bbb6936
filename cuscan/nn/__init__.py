"""Linear recurrent layers for PyTorch: GILR, GILR-LSTM, SRU and QRNN.

Each is a stack of ``num_layers`` layers with ``torch.nn.LSTM``'s conventions
(time-major unless ``batch_first``, states stacked along a leading layer
dimension) and a ``method`` argument that switches the recurrences between
the serial loop and the parallel scan without changing the numbers beyond
rounding. Importing ``cuscan.nn`` imports torch and registers cuscan's torch
operators (``torch.ops.cuscan``), which programs saved by ``torch.export``
need when loaded.
"""

try:
    import torch
except ModuleNotFoundError as error:  # pragma: no cover - exercised in a subprocess
    if error.name != "torch":
        raise
    raise ModuleNotFoundError("cuscan.nn needs PyTorch; install it, or cuscan[torch]",
                              name="torch") from error

from cuscan import _torch  # registers torch.ops.cuscan
from cuscan.nn._layers import GILR, GILRLSTM, QRNN, SRU

del _torch, torch

__all__ = ["GILR", "GILRLSTM", "QRNN", "SRU"]
