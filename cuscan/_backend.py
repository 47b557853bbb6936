"""Which backend serves a call: decided once, from the libraries of its arrays."""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

_PYTHON_SCALARS = (bool, int, float, complex)
# Top-level module of an array type -> the backend module that serves it.
_BACKENDS = {"numpy": "cuscan._numpy_backend", "cupy": "cuscan._cupy_backend"}


def library(value: object) -> str | None:
    """The library an operand belongs to; None for scalars (Python's and NumPy's) and sequences."""
    if value is None or isinstance(value, (*_PYTHON_SCALARS, np.generic, list, tuple)):
        return None
    return type(value).__module__.partition(".")[0]


def select(operands: dict[str, object]) -> ModuleType:
    """The backend module for these operands (name -> value).

    Raises
    ------
    TypeError
        If arrays of more than one library are mixed, or the library has no
        backend.
    """
    found: dict[str, str] = {}
    for name, value in operands.items():
        lib = library(value)
        if lib is not None:
            found.setdefault(lib, name)
    if len(found) > 1:
        described = ", ".join(f"`{name}` is a {lib} array" for lib, name in found.items())
        raise TypeError(
            f"all arrays in one call must come from one library; {described}. "
            "Convert them to one library first"
        )
    lib = next(iter(found), "numpy")
    if lib not in _BACKENDS:
        raise TypeError(
            f"`{found[lib]}` is a {type(operands[found[lib]]).__qualname__} from {lib}, which "
            f"cuscan does not support; expected a NumPy or CuPy array or a Python scalar"
        )
    return importlib.import_module(_BACKENDS[lib])
