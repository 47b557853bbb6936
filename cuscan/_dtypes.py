"""The one dtype table: what cuscan computes in, and how each dtype maps to CUDA."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DTypeInfo:
    """How one supported dtype is stored, accumulated, carried and named in CUDA."""

    name: str
    accumulator: str
    carry: str
    cuda_storage: str


# name, accumulator, carry, CUDA storage type (a type of kernels/linear_recurrence.cu,
# whose traits give its accumulator and carry). Half types are loaded as float,
# combined in float and rounded once on store. The chunked scans' chunk level (the
# decay over a chunk, the carries) is in double precision for single and double
# operands, and in float for the half types, whose own rounding is far larger than
# its drift (docs/algorithm.md, "Precision").
_TABLE: dict[str, DTypeInfo] = {
    info.name: info
    for info in (
        DTypeInfo("float16", "float32", "float32", "cuscan::half"),
        DTypeInfo("bfloat16", "float32", "float32", "cuscan::bfloat16"),
        DTypeInfo("float32", "float32", "float64", "float"),
        DTypeInfo("float64", "float64", "float64", "double"),
        DTypeInfo("complex64", "complex64", "complex128", "cuscan::complex<float>"),
        DTypeInfo("complex128", "complex128", "complex128", "cuscan::complex<double>"),
    )
}

SUPPORTED_NAMES: tuple[str, ...] = tuple(_TABLE)


@functools.lru_cache(maxsize=128)
def _name(dtype: np.dtype) -> str:
    """``dtype.name``, remembered: NumPy composes it in Python at every access, which
    was a fifth of the cost of a small call."""
    return dtype.name


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether ``dtype`` (a NumPy dtype) is ml_dtypes' bfloat16."""
    return _name(dtype) == "bfloat16"


def info(dtype: np.dtype) -> DTypeInfo:
    """The table row of a supported dtype."""
    return _TABLE[_name(np.dtype(dtype))]


def is_supported(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one cuscan computes in."""
    return _name(np.dtype(dtype)) in _TABLE


def accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in for results of ``dtype``."""
    return np.dtype(info(dtype).accumulator)


def carry(dtype: np.dtype) -> np.dtype:
    """The dtype of the chunked scans' chunk level (the decay over a chunk, the carries
    and their recurrence) for results of ``dtype``."""
    return np.dtype(info(dtype).carry)


def epsilon(dtype: np.dtype) -> float:
    """Machine epsilon of a supported dtype (bfloat16 included)."""
    dtype = np.dtype(dtype)
    if is_bfloat16(dtype):
        return 2.0**-7
    return float(np.finfo(dtype).eps)


def is_python_scalar(value: object) -> bool:
    """Whether ``value`` is a Python bool, int, float or complex (weak in promotion).

    NumPy scalars such as ``np.float64`` subclass Python's types but are strong,
    as in NumPy 2, so the type is compared exactly.
    """
    return type(value) in (bool, int, float, complex)


def unsupported(name: str, dtype: object) -> TypeError:
    """The error for an operand (or result) of an unsupported dtype, of any library."""
    return TypeError(
        f"`{name}` has dtype {dtype}, which cuscan does not support; expected bool, "
        f"an integer type or one of {', '.join(SUPPORTED_NAMES)}"
    )


def result_dtype(operands: dict[str, object]) -> np.dtype:
    """The dtype of the result, following NumPy promotion.

    ``operands`` maps argument names to arrays or Python scalars (``None`` is
    skipped). Python scalars are weak, as in NumPy 2: a float decay does not
    widen a float32 or bfloat16 array. Bool and integer results become
    float64; bfloat16 with float16 becomes float32. The result is in native
    byte order, as NumPy's ufuncs return, whatever order the operands are in.
    """
    array_dtypes: list[np.dtype] = []
    scalar_kinds: set[str] = set()
    for name, value in operands.items():
        if value is None:
            continue
        if is_python_scalar(value):
            scalar_kinds.add("c" if isinstance(value, complex) else "f")
            continue
        try:
            dtype = np.dtype(value.dtype)  # type: ignore[attr-defined]
        except TypeError:  # not a NumPy dtype at all, such as JAX's key<fry>
            raise unsupported(name, value.dtype) from None  # type: ignore[attr-defined]
        if not (dtype.kind in "biu" or is_supported(dtype)):
            raise unsupported(name, dtype)
        array_dtypes.append(dtype)

    first = array_dtypes[0] if array_dtypes else None
    if (first is not None and first.kind in "fc" and first.isnative and is_supported(first)
            and ("c" not in scalar_kinds or first.kind == "c")
            and all(d == first for d in array_dtypes)):
        return first  # one supported dtype: nothing to promote
    names = [_name(d) for d in array_dtypes]
    has_bf16, has_f16 = "bfloat16" in names, "float16" in names
    # NumPy cannot promote bfloat16 with integers or float16: promote as if it
    # were float16, then widen where neither half type holds the other.
    stand_ins = [np.dtype(np.float16) if n == "bfloat16" else d
                 for d, n in zip(array_dtypes, names, strict=True)]
    result = np.result_type(*stand_ins) if stand_ins else np.dtype(np.float64)
    if result == np.float16 and has_bf16:
        bfloat16 = array_dtypes[names.index("bfloat16")]
        result = np.dtype(np.float32) if has_f16 else bfloat16
    if result.kind in "biu":
        result = np.dtype(np.float64)
    if "c" in scalar_kinds and result.kind != "c":
        real = np.dtype(np.float16) if is_bfloat16(result) else result
        result = np.result_type(real, np.complex64)
    if not is_supported(result):
        raise unsupported("the result", result)
    return result if result.isnative else result.newbyteorder("=")
