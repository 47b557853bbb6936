"""Which code serves a call: decided once, from the library of its arrays."""

from __future__ import annotations

import array
import functools
import importlib
from types import ModuleType

import numpy as np

# Scalars (Python's and NumPy's) and sequences, typed buffers included: no library's arrays,
# converted as the other operands' library converts them (NumPy when there are none).
_UNOWNED = (bool, int, float, complex, np.generic, list, tuple, range, memoryview, array.array)
# Top-level module of an array type -> the backend module computing on it.
_BACKENDS = {"numpy": "cuscan._numpy_backend", "cupy": "cuscan._cupy_backend"}
# Frameworks whose tensors are converted (without copies) and differentiated.
_ADAPTERS = {"torch", "jax", "tensorflow", "interchange"}
# Frameworks that convert NumPy arrays passed beside their tensors (a copy to their device).
_CONVERTING = {"jax", "tensorflow"}
# Modules whose arrays belong to another library's name.
_ALIASES = {"jaxlib": "jax"}


def library(value: object) -> str | None:
    """The library an operand belongs to; None for scalars (Python's and NumPy's) and sequences.

    Objects of other libraries that NumPy can convert (``__array__``, as pandas
    Series and DataFrames have, or NumPy's array interface, as PIL images have) and that
    DLPack or CUDA's interface cannot view count as NumPy's.
    """
    if type(value) is np.ndarray:
        return "numpy"
    if value is None or isinstance(value, _UNOWNED):
        return None
    module = type(value).__module__.partition(".")[0]
    lib = _ALIASES.get(module, module)
    return "numpy" if _unviewable(lib, value) and _convertible(value) else lib


def _convertible(value: object) -> bool:
    """Whether NumPy converts ``value`` as an array (not as an object)."""
    return any(hasattr(value, name) for name in (
        "__array__", "__array_interface__", "__array_struct__"))


def cupy_for(what: str) -> ModuleType:
    """CuPy, imported for ``what`` (data on a GPU); a clear error where it is missing."""
    try:
        import cupy
    except ImportError as error:
        raise ModuleNotFoundError(f"{what} on a GPU needs CuPy: install cuscan[cuda13] or "
                                  "cuscan[cuda12]", name="cupy") from error
    return cupy


class _StreamPointer:
    """A raw ``cudaStream_t`` offered through the CUDA stream protocol."""

    def __init__(self, pointer: int):
        self.pointer = pointer

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.pointer


def external_stream(what: str, pointer: int):
    """A CuPy stream for another library's ``cudaStream_t``: a context that makes CuPy
    launch on it."""
    return cupy_for(what).cuda.Stream.from_external(_StreamPointer(pointer))


def interchangeable(value: object) -> bool:
    """Whether an array of another library can be viewed through DLPack or CUDA's interface."""
    return hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__")


def _unviewable(lib: str, value: object) -> bool:
    """Whether ``value``, from ``lib``, is neither a backend's or adapter's array nor one
    that DLPack or CUDA's interface can view."""
    return lib not in _BACKENDS and lib not in _ADAPTERS and not interchangeable(value)


def which(operands: dict[str, object]) -> str:
    """The one library of the operands (name -> value): numpy if none, "interchange" for
    other arrays with DLPack or CUDA's interface. TypeError for an unsupported library, or
    for two (NumPy arrays beside JAX or TensorFlow tensors aside)."""
    found: dict[str, str] = {}
    for name, value in operands.items():
        lib = library(value)
        if lib is not None:
            found.setdefault(lib, name)
    for lib, name in found.items():
        value = operands[name]
        if _unviewable(lib, value):
            raise TypeError(
                f"`{name}` is a {type(value).__name__} from {lib}, which cuscan does not "
                "support; expected a NumPy or CuPy array, a torch, JAX or TensorFlow tensor, "
                "an array with __dlpack__, __cuda_array_interface__, __array__ or "
                "__array_interface__, or a Python scalar or sequence"
            )
    if "numpy" in found and len(found) == 2 and found.keys() & _CONVERTING:
        # JAX and TensorFlow take NumPy arrays beside their own, as their operations do
        del found["numpy"]
    if len(found) > 1:
        described = ", ".join(f"`{name}` is a {lib} array" for lib, name in found.items())
        raise TypeError(
            f"all arrays in one call must come from one library; {described}. "
            "Convert them to one library first"
        )
    lib = next(iter(found), "numpy")
    return lib if lib in _BACKENDS or lib in _ADAPTERS else "interchange"


def adapter(operands: dict[str, object]) -> ModuleType | None:
    """The framework adapter for these operands (name -> value), or None for arrays.

    Raises
    ------
    TypeError
        If arrays of more than one library are mixed, or the library is unsupported.
    """
    return adapter_of(which(operands))


def adapter_of(lib: str) -> ModuleType | None:
    """The framework adapter for the library `which` found, or None for NumPy and CuPy."""
    if lib == "torch":
        # An import statement, not importlib, so that torch.compile traces through.
        from cuscan import _torch

        return _torch
    if lib == "jax":
        from cuscan import _jax

        return _jax
    if lib == "interchange":
        from cuscan import _interchange

        return _interchange
    if lib == "tensorflow":
        from cuscan import _tensorflow

        return _tensorflow
    return None


def select(operands: dict[str, object]) -> ModuleType:
    """The backend module computing on these operands (name -> value); see `adapter`."""
    return backend_of(which(operands))


@functools.cache
def backend_of(lib: str) -> ModuleType:
    """The backend module for the library `which` found (NumPy or CuPy)."""
    if lib not in _BACKENDS:
        raise TypeError(f"{lib} tensors go through cuscan's front door, not a backend")
    return importlib.import_module(_BACKENDS[lib])
