"""A filter called again on the next block of a stream: the run the last such call took."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable

import numpy as np

# Streams: one filter on block after block of one shape, dtype and layout (NumPy arrays,
# with or without zi). Once such a call has run in chunks or as one product with the
# filter's matrices for the block's length (`_in_chunks`) on the signal as it lies, the
# same call again takes that run straight (`_Stream`), without the checks and plans around
# it, which cost several times the product on short blocks. The last _STREAMS_KEPT calls
# are kept (none, and none taken, at 0).
_STREAMS_KEPT = 64
_streams: dict = {}
_streams_lock = threading.Lock()
_ran = threading.local()  # `_recording`'s record in this thread


def _forget_in_child() -> None:
    """A forked child starts with no streams kept and a lock of its own: a thread of the
    parent may have held the lock, and the child has no such thread to release it."""
    global _streams, _streams_lock
    _streams = {}
    _streams_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


@contextlib.contextmanager
def _recording():
    """A list of the runs `_in_chunks` takes on NumPy arrays in this thread within the
    block: ``(run, axis, shape)``, ``run(x, axis, zi)`` on a float64 ``x`` of ``shape``
    (None for a short signal's product, which takes the signal in any layout) and a
    float64 zi stacked by filter."""
    outer = getattr(_ran, "runs", None)
    _ran.runs = runs = []
    try:
        yield runs
    finally:
        _ran.runs = outer


def _note(run, axis: int, shape) -> None:
    """Add a run `_in_chunks` takes to `_recording`'s record, where one is being made in this
    thread."""
    runs = getattr(_ran, "runs", None)
    if runs is not None:
        runs.append((run, axis, shape))


@dataclasses.dataclass(frozen=True)
class _Stream:
    """A call's run (`_recording`), along its time axis; the shape of zi as the run takes
    it (SciPy's, broadcast as `lfilter` broadcasts it; None without zi), whether zi is
    stacked by filter (`sosfilt`) or not (`lfilter`), and the dtype returned."""

    run: Callable
    axis: int
    state: tuple | None
    stacked: bool
    dtype: np.dtype

    def __call__(self, x: np.ndarray, zi: np.ndarray | None):
        """The call again on ``x`` and ``zi`` (of the dtypes, shapes and layouts it was
        recorded on), or None where the run declines (a sample, a state or an output not
        finite, or a product's matrices no longer kept)."""
        if zi is not None:
            if zi.shape != self.state:
                zi = np.broadcast_to(zi, self.state)
            zi = zi.astype(np.float64, copy=False)
            if not self.stacked:
                zi = zi[None]
        done = self.run(x.astype(np.float64, copy=False), self.axis, zi)
        if done is None:
            return None
        y, zf = done
        y = y.astype(self.dtype, copy=False)
        if zf is None:
            return y
        return y, (zf if self.stacked else zf[0]).astype(self.dtype, copy=False)


def _stream_key(design: tuple, x, axis, zi) -> tuple | None:
    """A call's key among `_streams`: the ``design``'s arrays (dtypes, shapes, bytes), and
    the dtypes, shapes and strides of ``x`` and ``zi``, with ``axis``; None unless all are
    NumPy arrays (and ``axis`` an int)."""
    if type(x) is not np.ndarray or type(axis) is not int \
            or (zi is not None and type(zi) is not np.ndarray):
        return None
    key = [x.dtype, x.shape, x.strides, axis]
    key += (None,) if zi is None else (zi.dtype, zi.shape, zi.strides)
    for c in design:
        if type(c) is not np.ndarray:
            return None
        key += (c.dtype, c.shape, c.tobytes())
    return tuple(key)


def _streamed(run, design: tuple, x, axis, zi, stacked: bool):
    """``run(*design, x, axis, zi)``, the filter's call; the run in chunks or product it
    took where the same call (`_stream_key`) took one before (`_Stream`)."""
    key = _stream_key(design, x, axis, zi)
    if key is None:
        return run(*design, x, axis, zi)
    stream = _streams.get(key) if _STREAMS_KEPT else None
    if stream is not None:
        done = stream(x, zi)
        if done is not None:
            return done
    with _recording() as runs:
        done = run(*design, x, axis, zi)
    if len(runs) != 1:
        return done
    taken, seen, shape = runs[0]
    axis %= x.ndim
    if shape is None or (seen, shape) == (axis, x.shape):  # not on a time-major copy
        y, zf = (done, None) if zi is None else done
        stream = _Stream(taken, axis, None if zf is None else zf.shape, stacked, y.dtype)
        with _streams_lock:
            _streams[key] = stream
            while len(_streams) > _STREAMS_KEPT:
                del _streams[next(iter(_streams))]
    return done
