"""The few array operations cuscan.signal needs, for each library a signal can come from.

NumPy and CuPy arrays are computed on directly; torch, JAX and TensorFlow
tensors with their own operations around `cuscan.linear_recurrence`, so that
the result is the same framework's tensor, on its device and differentiable
with respect to the signal (and `ema`'s ``alpha``); on the CPU the filters may
run on NumPy views of a tensor instead (`numpy_views`, `linear_on_host`).
Other arrays with ``__dlpack__`` or ``__cuda_array_interface__`` are viewed as
NumPy or CuPy.
"""

from __future__ import annotations

import numpy as np

from cuscan import _backend, _numpy_backend
from cuscan._dtypes import unsupported


def numpy_kind(dtype: np.dtype) -> str:
    """``dtype.kind``, but "f" for ml_dtypes' floating types (bfloat16, float8 and the
    like, most of kind "V") and "i" or "u" for its narrow integers."""
    if dtype.kind != "V" or dtype.type.__module__.partition(".")[0] != "ml_dtypes":
        return dtype.kind
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
        return "f"
    except ValueError:
        pass
    try:
        return "i" if ml_dtypes.iinfo(dtype).min < 0 else "u"
    except ValueError:
        return "V"


def namespace(operands: dict[str, object]):
    """The namespace for these operands (name -> value), or the mixing error (of libraries,
    or of torch devices)."""
    lib = _backend.which(operands)
    if lib == "torch":
        from cuscan import _torch

        _torch._device(tuple(operands), tuple(operands.values()))
        return _Torch()
    if lib == "jax":
        return _Jax()
    if lib == "tensorflow":
        return _TensorFlow()
    if lib == "interchange":
        from cuscan import _interchange

        viewed = {name: _interchange.to_array(v) for name, v in operands.items()}
        return _Arrays(_backend.select(viewed).xp, _interchange.to_array)
    return _Arrays(_backend.backend_of(lib).xp)


class _Arrays:
    """NumPy and CuPy: mutable arrays, updated in place where that saves memory."""

    xp = None  # the array module, for NumPy and CuPy (and JAX's jax.numpy)

    def __init__(self, xp, view=None):
        self.xp = xp
        self._view = view

    def asarray(self, value, like=None):
        if self._view is not None:
            value = self._view(value)
        return self.xp.asarray(value)

    def dense(self, value, name: str):
        """``value`` (before `asarray`), refused with a clear error where it is a tensor
        cuscan cannot compute on."""
        return value

    def kind(self, x) -> str:
        return numpy_kind(np.dtype(x.dtype))

    def itemsize(self, x) -> int:
        return np.dtype(x.dtype).itemsize

    def cast(self, x, dtype: np.dtype):
        return x.astype(dtype, copy=False)

    def whole_along(self, x, axis: int):
        """``x`` with all of ``axis`` on each device that holds a part of it."""
        return x

    def add_into(self, w, key, value):
        w[key] += value
        return w

    def time_major(self, x, axis: int):
        """``x`` with its time ``axis`` moved first, in a contiguous copy, where the NumPy
        backend would otherwise copy each recurrence's operands into that layout and its
        output back (a time-contiguous layout, as ``(C, T)`` along axis -1; see
        ``_numpy_backend._scattered``): then one copy each way serves a whole filter.
        None where ``x`` is to be filtered as it is: on a GPU, whose kernels read any
        layout, or with a length not known yet."""
        shape = tuple(x.shape)
        if axis == 0 or not all(isinstance(n, int) for n in shape) or not self.on_host(x):
            return None
        strides = self.strides(x)
        order = [axis, *(i for i in range(len(shape)) if i != axis)]
        # The recurrences of a real signal's conjugate pole pairs are complex.
        if not _numpy_backend._scattered_layout([shape[i] for i in order],
                                                [strides[i] for i in order], np.complex128,
                                                _numpy_backend._MAX_COPY_BYTES, once=False):
            return None
        return self.contiguous(self.moveaxis(x, axis, 0))

    def on_host(self, x) -> bool:
        """Whether ``x`` is computed on by the NumPy backend."""
        return self.xp is np

    def numpy_views(self, *arrays) -> tuple | None:
        """``arrays`` (None kept) as NumPy arrays sharing their memory, where the filters
        may compute on them with NumPy alone and give `from_numpy` the result: NumPy
        arrays, and CPU tensors that no autodiff, transform or trace records (the result
        would not be differentiable); None otherwise."""
        if self.xp is np and all(a is None or isinstance(a, np.ndarray) for a in arrays):
            return arrays
        return None

    def from_numpy(self, y: np.ndarray):
        """A NumPy result as this library's array (`numpy_views`)."""
        return y

    def runs_on_host(self, x) -> bool:
        """Whether `linear_on_host` takes ``x``: where `numpy_views` does not, a CPU tensor
        that autodiff or a trace records."""
        return False

    def linear_on_host(self, x, f):
        """``f(x)`` for ``f`` a linear map of NumPy arrays with a transpose ``f.adjoint``
        (`_filters._OnHost`), on `runs_on_host`'s ``x``, as a tensor that autodiff
        differentiates through ``f.adjoint`` and traces record as one operation: the
        framework adapter's."""
        return self._adapter.linear_on_host(x, f)

    def strides(self, x) -> tuple[int, ...]:
        """``x``'s strides in bytes."""
        return x.strides

    def moveaxis(self, x, source: int, destination: int):
        return self.xp.moveaxis(x, source, destination)

    def contiguous(self, x):
        """``x`` in row-major order (a copy where it is not; in the NumPy backend's tiles)."""
        if self.xp is np and x.ndim > 1 and not x.flags.c_contiguous:
            return _numpy_backend._copy(np.empty(x.shape, x.dtype), x)
        return self.xp.ascontiguousarray(x)

    def real(self, x):
        return x.real

    def imag(self, x):
        return x.imag

    def scaled(self, x, factor: complex):
        """Real ``x`` times a complex number, in the complex dtype of ``x``'s precision."""
        return x * factor

    def isnan(self, x):
        """NaN, in either part of a complex number."""
        return self.xp.isnan(x)

    def where(self, condition, x, other: float):
        """``x`` where ``condition`` holds, else the number ``other``."""
        return self.xp.where(condition, x, other)

    def concat(self, arrays, axis: int):
        return self.xp.concatenate(arrays, axis=axis)

    def stack(self, arrays):
        return self.xp.stack(arrays)

    def split(self, x, index: int, axis: int) -> tuple:
        """``x`` before and from ``index`` along ``axis`` (one operation, whose gradient is
        one concatenation where slices would each be padded to ``x``'s shape)."""
        return tuple(self.xp.split(x, [index], axis=axis))

    def broadcast_to(self, x, shape, like=None):
        """``x`` broadcast to ``shape``; where that has sizes unknown (None, in TensorFlow's
        graphs), those of ``like`` (by default ``x``), of the same rank, stand for them."""
        return self.xp.broadcast_to(x, shape)

    def expand_dims(self, x, axis: int):
        return self.xp.expand_dims(x, axis)

    def flip(self, x, axis: int):
        return self.xp.flip(x, axis)

    def apply_along(self, matrix: np.ndarray, x, axis: int):
        """``matrix @ x`` along ``axis``, whose length becomes ``matrix.shape[0]``
        (``matrix`` in ``x``'s dtype)."""
        product = self.xp.tensordot(x, self.asarray(matrix, like=x), axes=([axis], [1]))
        return self.xp.moveaxis(product, -1, axis)

    def concrete(self, x) -> bool:
        """Whether ``x`` has values to check (not a symbol being traced or compiled)."""
        return True

    def host(self, x) -> np.ndarray:
        """The values of ``x`` as a NumPy array (for checks)."""
        return x.get() if hasattr(x, "get") else np.asarray(x)


class _Torch(_Arrays):
    """torch: in-place updates are recorded by autograd, so they are kept."""

    def __init__(self):
        import torch

        from cuscan import _torch

        self.torch, self._adapter = torch, _torch

    def add_into(self, w, key, value):
        if self.torch._C._functorch.peek_interpreter_stack() is None:
            return super().add_into(w, key, value)
        # Under torch.func's transforms `value` may be batched where `w` is not (vmap over
        # the state alone), which an update in place cannot take: add it padded instead.
        padding = [n for pair in reversed(_paddings(key, w.shape)) for n in pair]
        return w + self.torch.nn.functional.pad(value, padding)

    def asarray(self, value, like=None):
        torch = self.torch
        if isinstance(value, torch.Tensor):
            return value
        tensor = torch.as_tensor(np.asarray(value), device=None if like is None else like.device)
        if self._adapter._distributed(like):  # a constant beside a DTensor: the same everywhere
            from torch.distributed.tensor import DTensor, Replicate

            return DTensor.from_local(tensor, like.device_mesh,
                                      [Replicate()] * like.device_mesh.ndim, run_check=False)
        return tensor

    def whole_along(self, x, axis: int):
        # A DTensor split along time is gathered there (indexing a split axis in place
        # goes wrong), keeping the split of the other axes.
        if not self._split_along(x, axis):
            return x
        from torch.distributed.tensor import Replicate

        return x.redistribute(placements=[Replicate() if p.is_shard(axis) else p
                                          for p in x.placements])

    def _split_along(self, x, axis: int) -> bool:
        """Whether ``x`` is a DTensor split along ``axis``."""
        return self._adapter._distributed(x) and any(p.is_shard(axis % x.ndim)
                                                     for p in x.placements)

    def dense(self, value, name: str):
        if isinstance(value, self.torch.Tensor):
            self._adapter.check_layout(name, value)  # sparse and nested: as the core says
            if value.is_quantized:
                raise unsupported(name, value.dtype)
        return value

    def on_host(self, x) -> bool:
        return x.device.type == "cpu" and not self._adapter._distributed(x)

    def numpy_views(self, *arrays) -> tuple | None:
        tensors = [a for a in arrays if a is not None]
        if not all(isinstance(t, self.torch.Tensor) and self.on_host(t)
                   and not (t.is_conj() or t.is_neg()) for t in tensors) \
                or not self._adapter._untracked(*tensors):
            return None
        return tuple(None if a is None else a.detach().numpy() for a in arrays)

    def from_numpy(self, y: np.ndarray):
        return self.torch.from_numpy(y)

    def runs_on_host(self, x) -> bool:
        return self.on_host(x) and self._adapter._eager(x)

    def strides(self, x) -> tuple[int, ...]:
        return tuple(stride * x.dtype.itemsize for stride in x.stride())

    def moveaxis(self, x, source: int, destination: int):
        return x.movedim(source, destination)

    def contiguous(self, x):
        return x.contiguous()

    def kind(self, x) -> str:
        dtype = x.dtype
        if dtype.is_complex:
            return "c"
        if dtype.is_floating_point:
            return "f"
        if dtype == self.torch.bool:
            return "b"
        return ("i" if dtype.is_signed else "u") if dtype.itemsize <= 8 else "V"

    def itemsize(self, x) -> int:
        return x.dtype.itemsize

    def cast(self, x, dtype: np.dtype):
        # by name: Dynamo (torch 2.10) cannot hash NumPy dtypes as dictionary keys
        return x.to(getattr(self.torch, np.dtype(dtype).name))

    def isnan(self, x):
        return self.torch.isnan(x)

    def where(self, condition, x, other: float):
        return self.torch.where(condition, x, other)

    def concat(self, arrays, axis: int):
        return self.torch.cat(arrays, dim=axis)

    def stack(self, arrays):
        return self.torch.stack(arrays)

    def split(self, x, index: int, axis: int) -> tuple:
        return self.torch.split(x, [index, x.shape[axis] - index], axis)

    def broadcast_to(self, x, shape, like=None):
        return x.expand(shape)

    def expand_dims(self, x, axis: int):
        return x.unsqueeze(axis)

    def flip(self, x, axis: int):
        if self._adapter._distributed(x) and not self._split_along(x, axis):
            # Each process flips its own part: torch before 2.12 has no sharding rule for
            # flip. (The filters flip signals whole along time, as `whole_along` makes them.)
            from torch.distributed.tensor import DTensor

            whole = self.torch.empty(x.shape, device="meta")  # the contiguous strides
            return DTensor.from_local(x.to_local().flip(axis).contiguous(), x.device_mesh,
                                      x.placements, run_check=False, shape=x.shape,
                                      stride=whole.stride())
        return x.flip(axis)

    def apply_along(self, matrix: np.ndarray, x, axis: int):
        product = self.torch.tensordot(x, self.asarray(matrix, like=x), dims=([axis], [1]))
        return product.movedim(-1, axis)

    def concrete(self, x) -> bool:
        if self.torch.compiler.is_compiling():
            return False
        try:
            x.data_ptr()  # tensors wrapped by torch.func transforms (vmap, grad) have none
        except RuntimeError:
            return False
        return True

    def host(self, x) -> np.ndarray:
        if self._adapter._distributed(x):  # every device's part, so that all decide alike
            x = x.full_tensor()
        return self._adapter.to_array(x.detach().cpu())  # lazy conjugates resolved


class _Jax(_Arrays):
    """JAX: immutable arrays, updated functionally."""

    def __init__(self):
        import jax
        import jax.numpy as jnp

        from cuscan import _jax

        super().__init__(jnp)
        self.jax, self._adapter = jax, _jax

    def asarray(self, value, like=None):
        return self.xp.asarray(value)

    def cast(self, x, dtype: np.dtype):
        # float64 is float32 (complex128 complex64) unless JAX's 64-bit mode is on
        return x.astype(self.jax.dtypes.canonicalize_dtype(dtype))

    def add_into(self, w, key, value):
        # Over explicit mesh axes the update must be laid out as `w` (a state split along
        # channels, say, added into a signal that is not).
        sharding = self._adapter._sharding(w)
        value = (self._adapter._whole(value) if sharding is None
                 else self._adapter._reshard(value, sharding))
        return w.at[key].add(value)

    def dense(self, value, name: str):
        dtype = getattr(value, "dtype", None)
        if dtype is not None and self.jax.dtypes.issubdtype(dtype, self.jax.dtypes.extended):
            raise unsupported(name, dtype)  # random keys
        return value

    def numpy_views(self, *arrays) -> tuple | None:
        # A concrete array is never differentiated: JAX's transforms trace.
        if not all(a is None or (isinstance(a, self.jax.Array) and self.concrete(a)
                                 and self.on_host(a)) for a in arrays):
            return None
        return tuple(None if a is None else np.asarray(a) for a in arrays)

    def from_numpy(self, y: np.ndarray):
        return self.xp.asarray(y)

    def runs_on_host(self, x) -> bool:
        return self.on_host(x)

    def on_host(self, x) -> bool:
        if self._adapter._sharding(x) is not None:  # a split over devices is kept as it is
            return False
        if isinstance(x, self.jax.core.Tracer):  # placed where jit places it
            return self.jax.default_backend() == "cpu"
        return all(device.platform == "cpu" for device in x.devices())

    def strides(self, x) -> tuple[int, ...]:
        return _row_major(x.shape, np.dtype(x.dtype).itemsize)

    def contiguous(self, x):
        return x  # arrays are laid out by XLA, moved axes included

    def whole_along(self, x, axis: int):
        # Split along time over explicit mesh axes, x is gathered there (JAX types the
        # indexing of a split axis as an error), keeping the split of the other axes.
        sharding = self._adapter._sharding(x)
        spec = [*sharding.spec, *(None,) * x.ndim][:x.ndim] if sharding is not None else []
        if not spec or spec[axis] is None:
            return x
        spec[axis] = None
        spec = self.jax.sharding.PartitionSpec(*spec)
        return self._adapter._reshard(x, sharding.update(spec=spec))

    def concrete(self, x) -> bool:
        return not isinstance(x, self.jax.core.Tracer)


class _TensorFlow(_Arrays):
    """TensorFlow: immutable tensors; an update is an addition of a padded tensor."""

    def __init__(self):
        import tensorflow as tf

        from cuscan import _tensorflow

        self.tf, self._adapter = tf, _tensorflow

    def asarray(self, value, like=None):
        tf = self.tf
        if tf.is_tensor(value):  # variables too (tf's, Keras'), read where the tape sees it
            return tf.convert_to_tensor(value)
        return tf.convert_to_tensor(np.asarray(value))  # NumPy's dtypes: float64, not float32

    def kind(self, x) -> str:
        dtype = x.dtype
        if dtype.is_complex:
            return "c"
        if dtype.is_floating:
            return "f"
        if dtype.is_bool:
            return "b"
        if dtype.is_integer and not dtype.is_quantized:
            return "u" if dtype.is_unsigned else "i"
        return "V"

    def itemsize(self, x) -> int:
        return x.dtype.size

    def dense(self, value, name: str):
        self._adapter.check(name, value)  # sparse and ragged tensors
        if isinstance(value, self.tf.Tensor) and value.dtype.is_quantized:
            raise unsupported(name, value.dtype.name)  # as the core says
        return value

    def on_host(self, x) -> bool:
        if x.device:
            return not self._adapter._on_gpu(x)
        return not self.tf.config.list_logical_devices("GPU")  # placed by TensorFlow

    def runs_on_host(self, x) -> bool:
        # Not in graphs that cannot call back into Python, nor under a forward accumulator
        # inside tf.function (the recurrences then say why).
        adapter = self._adapter
        return self.on_host(x) and (self.tf.executing_eagerly() or not (
            adapter._native() or adapter._tangents([x])))

    def strides(self, x) -> tuple[int, ...]:
        return _row_major(x.shape, x.dtype.size)

    def moveaxis(self, x, source: int, destination: int):
        order = [i for i in range(x.ndim) if i != source % x.ndim]
        order.insert(destination % x.ndim, source % x.ndim)
        return self.tf.transpose(x, order)

    def contiguous(self, x):
        return x  # tensors are row-major

    def cast(self, x, dtype: np.dtype):
        if x.dtype.is_complex and np.dtype(dtype).kind != "c":
            x = self.tf.math.real(x)  # as NumPy's astype, without tf.cast's warning
        return self._adapter._cast(x, self.tf.as_dtype(np.dtype(dtype)))

    def add_into(self, w, key, value):
        return w + self.tf.pad(value, _paddings(key, w.shape))

    def real(self, x):
        return self.tf.math.real(x)

    def scaled(self, x, factor: complex):
        dtype = np.complex128 if x.dtype == self.tf.float64 else np.complex64
        return self.cast(x, dtype) * self.tf.constant(factor, self.tf.as_dtype(dtype))

    def imag(self, x):
        return self.tf.math.imag(x)

    def isnan(self, x):
        is_nan = self.tf.math.is_nan
        if x.dtype.is_complex:
            return is_nan(self.real(x)) | is_nan(self.imag(x))
        return is_nan(x)

    def where(self, condition, x, other: float):
        return self.tf.where(condition, x, self.tf.constant(other, x.dtype))

    def concat(self, arrays, axis: int):
        return self.tf.concat(arrays, axis)

    def stack(self, arrays):
        return self.tf.stack(arrays)

    def split(self, x, index: int, axis: int) -> tuple:
        return tuple(self.tf.split(x, [index, x.shape[axis] - index], axis))

    def broadcast_to(self, x, shape, like=None):
        if None not in shape:
            return self.tf.broadcast_to(x, shape)
        if x.shape.as_list() == list(shape):
            return x
        sizes = self.tf.shape(x if like is None else like)
        return self.tf.broadcast_to(x, self.tf.stack(
            [sizes[k] if n is None else n for k, n in enumerate(shape)]))

    def expand_dims(self, x, axis: int):
        return self.tf.expand_dims(x, axis)

    def flip(self, x, axis: int):
        return self.tf.reverse(x, [axis])

    def apply_along(self, matrix: np.ndarray, x, axis: int):
        product = self.tf.tensordot(x, self.asarray(matrix), axes=[[axis], [1]])
        order = list(range(x.ndim - 1))
        return self.tf.transpose(product, [*order[:axis], x.ndim - 1, *order[axis:]])

    def concrete(self, x) -> bool:
        return self.tf.executing_eagerly()

    def host(self, x) -> np.ndarray:
        return x.numpy()


def _paddings(key: tuple, shape) -> list[list[int]]:
    """For each axis, how many samples lie before and after those ``key`` selects: a range
    along one axis and all along the others, whose sizes may be unknown (None)."""
    paddings = []
    for k, n in zip(key, shape, strict=True):
        if k == slice(None):
            paddings.append([0, 0])
        else:
            start, stop, _ = k.indices(n)
            paddings.append([start, n - stop])
    return paddings


def _row_major(shape, itemsize: int) -> tuple[int, ...]:
    """The byte strides of a row-major array of ``shape``."""
    strides = [itemsize]
    for n in reversed(shape[1:]):
        strides.insert(0, strides[0] * n)
    return tuple(strides)
