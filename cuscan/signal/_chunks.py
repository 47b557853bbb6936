"""Second-order sections of a real signal on the CPU: the whole cascade, chunk by chunk,
as matrix products.

The sections run in the forms `_filters` gives them (a conjugate pair as one complex
recurrence straight on the section's input, other sections as their numerator and then
a first-order recurrence per real pole), and their states together, as real numbers,
make the cascade's state: a pair's complex state, and a numerator's last two inputs and
a real pole's state. Over a chunk of ``L`` samples the cascade is linear in the chunk
and its starting state:

- the chunk's output is the chunk times the ``L x L`` triangular Toeplitz matrix of the
  cascade's impulse response, plus the starting state times the outputs each element
  of the state gives with no input;
- its end state is the chunk times the end states its impulses leave, plus the
  starting state times the ``L``-step transition matrix.

A state only feeds its own stage and the stages after it, so the transition matrix
is lower triangular by stages, with ``p ** L`` (or 0, for a numerator's memory) on its
diagonal: the chunks' end states are solved stage by stage, each a first-order
recurrence over the chunks (`cuscan.linear_recurrence`, complex for a pair) driven by
the chunks and the stages before it, in the modal form whose accuracy `_filters`
documents. The samples are read twice (for the chunks' end states, then for the
output) and the output written once, for the whole cascade, where the sections'
recurrences pass over the signal several times each. With an initial state, the
first two samples and the last two run step by step: that takes SciPy's initial state
in as `_filters` does, and gives the sections' last inputs and outputs, from which
their final states follow.
"""

from __future__ import annotations

import functools

import numpy as np

from cuscan import _numpy_backend
from cuscan._api import linear_recurrence

# The chunk length: the output costs 2 * length multiply-adds per sample for the whole
# cascade, whatever its order, and the chunks' end states cost about ``width`` per
# chunk: _CHUNK samples, or _SHORT_CHUNK for one section (a state of at most
# _SHORT_WIDTH numbers), measured by benchmarks/sosfilt_chunks.py.
_CHUNK = 64
_SHORT_CHUNK = 32
_SHORT_WIDTH = 4
# Used from _MIN_LENGTH samples per channel: from 256 it was faster than the sections'
# own recurrences on every shape benchmarks/sosfilt_chunks.py measures, and at 128
# (orders 2 to 16, 1 to 4,096 channels, alternated in one process) it took 0.18 to 0.70
# of their time.
_MIN_LENGTH = 128
# A single section over steps of more than _MAX_APART_WIDTH channels whose samples lie
# apart (such as (T, C) along axis 0) runs faster as its own recurrences over
# time-major steps than copied (benchmarks/sosfilt_chunks.py).
_MAX_APART_WIDTH = 64
# The output is formed about _BLOCK_ELEMENTS samples at a time, so that the part the
# chunks' starting states add to each block is added in cache.
_BLOCK_ELEMENTS = 16384


def applies(x, axis: int, sections: int) -> bool:
    """Whether the cascade of ``sections`` runs here: on a float64 NumPy array with enough
    samples along ``axis``, and unless a step's samples lie apart (copied to adjacent
    ones and back) in more than _MAX_APART_WIDTH channels for a single section."""
    if type(x) is not np.ndarray or x.dtype != np.float64 or not sections:
        return False
    length = x.shape[axis]
    apart = abs(x.strides[axis]) != x.itemsize and x.size > length
    return length >= max(_MIN_LENGTH, _CHUNK + 4) and not (
        apart and sections == 1 and x.size > _MAX_APART_WIDTH * length)


class Section:
    """One section's step: ``kind`` "pair" (``gain``, ``residue``, ``pole``, ``zi_gain``)
    or "poles" (numerator ``b``, real ``poles``); ``b`` and ``a`` (three each) for its
    final state; ``width`` real states from ``offset`` in the cascade's state."""

    def __init__(self, kind: str, b: np.ndarray, a: np.ndarray, offset: int, **form):
        self.kind, self.b, self.a, self.offset = kind, b, a, offset
        self.__dict__.update(form)
        self.width = 2 if kind == "pair" else 2 + len(form["poles"])

    def blocks(self) -> list[tuple[int, int, complex]]:
        """The diagonal blocks of the chunk transition: (first state, size, decay per
        step), a numerator's memory having decay 0."""
        if self.kind == "pair":
            return [(self.offset, 2, self.pole)]
        return [(self.offset, 1, 0.0), (self.offset + 1, 1, 0.0),
                *((self.offset + 2 + i, 1, p) for i, p in enumerate(self.poles))]

    def step(self, u, state, zi=None):
        """The section's output for input ``u``, updating ``state`` (..., width) in place;
        ``zi`` (..., ) is added to the recurrence's impulse (the initial state)."""
        s = state[..., self.offset:self.offset + self.width]
        if self.kind == "pair":
            w = self.residue * u
            if zi is not None:
                w = w + self.zi_gain * zi
            v = self.pole * (s[..., 0] + 1j * s[..., 1]) + w
            s[..., 0], s[..., 1] = v.real, v.imag
            return self.gain * u + v.real
        w = self.b[0] * u + self.b[1] * s[..., 0] + self.b[2] * s[..., 1]
        if zi is not None:
            w = w + zi
        s[..., 1] = s[..., 0]
        s[..., 0] = u
        for i, p in enumerate(self.poles):
            w = p * s[..., 2 + i] + w
            s[..., 2 + i] = w
        return w

    def final(self, u, y) -> list:
        """SciPy's final state from the last two inputs ``u`` and outputs ``y``."""
        b, a = self.b, self.a
        return [b[1] * u[-1] + b[2] * u[-2] - a[1] * y[-1] - a[2] * y[-2],
                b[2] * u[-1] - a[2] * y[-1]]


def _run(sections, signal, state, zi=None, first: int = 0):
    """The cascade over ``signal`` (..., steps) from ``state`` (..., width), updated in
    place; SciPy's ``zi`` (sections, ..., 2) enters at absolute steps 0 and 1 (this run
    starting at ``first``). Returns the output and each section's inputs and outputs
    of the last two steps."""
    out = np.empty(signal.shape)
    recent = [([], []) for _ in sections]
    for t in range(signal.shape[-1]):
        u = signal[..., t]
        for s, section in enumerate(sections):
            extra = zi[s][..., first + t] if zi is not None and first + t < 2 else None
            y = section.step(u, state, extra)
            recent[s][0].append(u)
            recent[s][1].append(y)
            u = y
        out[..., t] = u
    return out, [(inputs[-2:], outputs[-2:]) for inputs, outputs in recent]


@functools.lru_cache(maxsize=32)
def _matrices(sections: tuple, length: int):
    """The cascade's responses over ``length`` steps: the output's Toeplitz matrix
    (length, length) from the impulse response; the states an impulse at step 0 leaves
    after each step (length, width); and from each unit state with no input, the
    outputs (width, length) and the states after each step (length, width, width)."""
    width = sum(s.width for s in sections)
    impulse = np.zeros((1 + width, length))
    impulse[0, 0] = 1.0
    state = np.zeros((1 + width, width))
    state[1:] = np.eye(width)
    states = np.empty((length, 1 + width, width))
    outputs = np.empty((1 + width, length))
    for t in range(length):
        outputs[:, t:t + 1] = _run(sections, impulse[:, t:t + 1], state)[0]
        states[t] = state
    h = outputs[0]
    lag = np.arange(length)[None, :] - np.arange(length)[:, None]
    toeplitz = np.where(lag >= 0, h[np.maximum(lag, 0)], 0.0)
    return toeplitz, states[:, 0].copy(), outputs[1:].copy(), states[:, 1:].copy()


def _ends(after: np.ndarray, steps: int) -> np.ndarray:
    """The state at the end of ``steps`` samples per sample (steps, width), from the
    states an impulse leaves (`_matrices`): sample i has steps - 1 - i steps to go."""
    return after[steps - 1::-1] if steps else after[:0]


def _solve(ends: np.ndarray, transition: np.ndarray, blocks, length: int) -> None:
    """In place, the chunks' end states from the chunks' own contributions ``ends``
    (batch, width, chunks): stage by stage, each block driven by the blocks before it at
    the previous chunk and then scanned over the chunks with its decay ** length."""
    for first, size, decay in blocks:
        part = slice(first, first + size)
        if first:
            ends[:, part, 1:] += transition[:first, part].T @ ends[:, :first, :-1]
        if decay == 0:
            continue
        if size == 2:
            v = linear_recurrence(complex(decay) ** length,
                                  ends[:, first] + 1j * ends[:, first + 1], axis=-1)
            ends[:, first], ends[:, first + 1] = v.real, v.imag
        else:
            ends[:, first] = linear_recurrence(float(decay.real) ** length, ends[:, first],
                                               axis=-1)


def cascade(sections: tuple, x: np.ndarray, axis: int, zi):
    """The ``sections`` (`Section`) over ``x`` (see `applies`) along ``axis``, from SciPy's
    ``zi`` or rest; returns ``(y, zf)`` (zf None without zi), or None where a sample or
    a state is not finite: the sections' recurrences then carry infinities and NaN
    forward as SciPy does, where the products would spread them over their chunk."""
    width = sum(s.width for s in sections)
    size = _SHORT_CHUNK if width <= _SHORT_WIDTH else _CHUNK
    signal = np.moveaxis(x, axis, -1)
    apart = signal.strides[-1] != signal.itemsize
    if apart:  # steps apart, or reversed (filtfilt's second pass): copied in tiles
        signal = _numpy_backend._copy(np.empty(signal.shape), signal) if signal.ndim > 1 \
            else np.ascontiguousarray(signal)
    batch, length = signal.shape[:-1], signal.shape[-1]
    rows = int(np.prod(batch))
    signal = signal.reshape(rows, length)
    if zi is not None:
        zi = np.moveaxis(zi, 1 + axis, -1).reshape(len(sections), rows, 2)
    y = np.empty((rows, length))
    state = np.zeros((rows, width))
    # With zi: its first two samples step by step, which takes zi in, and its last two,
    # whose sections' inputs and outputs give zf. The rest in chunks of `size`, and a
    # shorter one.
    head, serial = (0, length) if zi is None else (2, length - 2)
    if zi is not None and not (np.isfinite(zi).all() and np.isfinite(signal[:, :head]).all()):
        return None
    y[:, :head] = _run(sections, signal[:, :head], state, zi)[0]
    chunks, rest = divmod(serial - head, size)
    stop = head + chunks * size
    body = signal[:, head:stop].reshape(rows, chunks, size)
    tail = signal[:, stop:serial]
    toeplitz, after, free, moved = _matrices(sections, size)
    transition = moved[-1]
    # The chunks' end states from rest (rows, width, chunks), with each chunk's sum
    # below them, so that an infinity or NaN anywhere shows.
    ends = np.concatenate([_ends(after, size), np.ones((size, 1))], axis=1).T @ \
        body.swapaxes(1, 2)
    if not (np.isfinite(ends).all() and np.isfinite(tail).all()):
        return None
    ends = ends[:, :width]
    ends[:, :, 0] += state @ transition
    _solve(ends, transition, [b for s in sections for b in s.blocks()], size)
    if not np.isfinite(ends).all():
        return None
    _output(y[:, head:stop].reshape(rows, chunks, size), body, toeplitz, free, state, ends)
    state = ends[:, :, -1]
    y[:, stop:serial] = tail @ toeplitz[:rest, :rest] + state @ free[:, :rest]
    if rest:
        state = state @ moved[rest - 1] + tail @ _ends(after, rest)
    y[:, serial:], recent = _run(sections, signal[:, serial:], state.copy(), zi, serial)
    y = np.moveaxis(y.reshape(*batch, length), -1, axis)
    if apart and y.ndim > 1:  # back in row-major order
        y = _numpy_backend._copy(np.empty(y.shape), y)
    if zi is None:
        return y, None
    zf = np.stack([np.stack(s.final(u, v), axis=-1)
                   for s, (u, v) in zip(sections, recent, strict=True)])
    return y, np.moveaxis(zf.reshape(len(sections), *batch, 2), -1, 1 + axis)


def _output(out, body, toeplitz, free, start, ends) -> None:
    """The chunks' output ``out`` (rows, chunks, size): ``body`` times ``toeplitz``, plus
    each chunk's starting state (``start`` for the first, then the previous chunk's end
    state from ``ends``) times ``free``, block by block so that the sum is formed in
    cache."""
    rows, chunks, size = out.shape
    step = max(1, _BLOCK_ELEMENTS // size)  # chunks per block
    group = max(1, step // chunks)  # rows per block, where a row's chunks fit in one
    for row in range(0, rows, group):
        them = slice(row, row + group)
        for first in range(0, chunks, step):
            last = min(first + step, chunks)
            block = out[them, first:last]
            np.matmul(body[them, first:last], toeplitz, out=block)
            if first == 0:
                block[:, 0] += start[them] @ free
                first, block = 1, block[:, 1:]
            block += ends[them, :, first - 1:last - 1].swapaxes(1, 2) @ free
