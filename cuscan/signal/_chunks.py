"""A real filter on the CPU, chunk by chunk, as matrix products: a cascade of
second-order sections (`sosfilt`), or one filter of any order up to _MAX_ORDER
(`lfilter`).

The filters run in the forms `_filters` gives them (a second-order conjugate pair as
one complex recurrence straight on its input, any other filter as its numerator and
then a first-order recurrence per real pole or a complex one per pair), and their
states together, as real numbers, make the cascade's state: a pair's complex state,
and a numerator's last inputs and each pole's state. Over a chunk of ``L`` samples the
cascade is linear in the chunk and its starting state:

- the chunk's output is the chunk times the ``L x L`` triangular Toeplitz matrix of the
  cascade's impulse response, plus the starting state times the outputs each element
  of the state gives with no input;
- its end state is the chunk times the end states its impulses leave, plus the
  starting state times the ``L``-step transition matrix.

A state only feeds its own stage and the stages after it, so the transition matrix is
lower triangular by stages, with ``p ** L`` (or 0, for a numerator's memory) on its
diagonal: the chunks' end states are solved stage by stage, each a first-order
recurrence over the chunks (complex for a pair; products with the powers of its decay,
or `cuscan.linear_recurrence` over many chunks) driven by the chunks and the stages
before it, in the modal form whose accuracy `_filters` documents. The samples are read
twice (for the chunks' end states, then for the output) and the output written once, for
the whole cascade, where the sections' recurrences pass over the signal several times
each. SciPy's initial state enters each filter's recurrences as impulses at its first
samples, so it adds those impulses' responses to the first chunks; SciPy's final state
is a product of the cascade's last state (the transposed direct form's state from the
outputs that state gives with no input).
"""

from __future__ import annotations

import collections
import functools
import math
import os
import threading

import numpy as np

from cuscan import _numpy_backend
from cuscan._api import linear_recurrence
from cuscan._scratch import Scratch

# The chunk length: the output costs 2 * length multiply-adds per sample for the whole
# cascade, whatever its order, and the chunks' end states cost about ``width`` per
# chunk: _CHUNK samples, or _SHORT_CHUNK for one section (a state of at most
# _SHORT_WIDTH numbers), measured by benchmarks/sosfilt_chunks.py.
_CHUNK = 64
_SHORT_CHUNK = 32
_SHORT_WIDTH = 4
_MIN_CHUNK = 16
# Used from _MIN_LENGTH samples per channel, one chunk of _MIN_CHUNK, or as many chunks
# as SciPy's zi reaches (`fits`); a signal shorter than twice the chunk length runs in
# chunks of _MIN_CHUNK. From 256 samples the chunks were faster than the sections' own
# recurrences on every shape benchmarks/sosfilt_chunks.py measures; on 16 to 127
# samples of 1 to 4,096 channels (benchmarks/lfilter_chunks.py, orders 1 to 32,
# alternated in one process) they took 0.08 to 0.93 of their time, but for a
# first-order filter on 1,024 or more channels of 32 and 48 samples (up to 1.32).
_MIN_LENGTH = _MIN_CHUNK
# The chunks' matrices are stepped in _WIDE precision, wider than double where NumPy's long
# double is (80-bit extended on x86-64 Linux; quad precision in software on aarch64 Linux,
# slower to build; plain double on Windows and macOS on Apple silicon), and rounded to
# double once; their decays per chunk, the powers of the poles, are rounded once from the
# exact powers (`_power`). Every chunk applies the same matrices and decays, so their
# rounding adds up over the chunks of a slowly decaying response instead of averaging
# out. Over 300 random designs of orders 1 to 6 in (b, a) form on 2,000 samples
# (benchmarks/signal_accuracy.py's), in chunks of 64, 223 are within 1e-8 of the RMS
# (all 199 of those SciPy's result is within) and the median error is 2.1e-13; with the
# matrices and decays rounded at every step 215 were (198 of the 199), median 6.1e-13,
# and in chunks of 16, as filters with pairs among other stages ran, 217 (all 199),
# median 5.9e-13. See also Section.pairs.
_WIDE = np.longdouble
# A single section over steps of more than _MAX_APART_WIDTH channels whose samples lie
# apart (such as (T, C) along axis 0) runs faster as its own recurrences over
# time-major steps than copied (benchmarks/sosfilt_chunks.py).
_MAX_APART_WIDTH = 64
# A time-major signal of at least _MIN_COLUMNS adjacent channels, such as (T, C) along axis
# 0, runs in chunks as it lies, each chunk a block of samples by channels (`_in_columns`),
# rather than copied to adjacent samples and back in tiles.
_MIN_COLUMNS = 24
# A short signal's product with its matrices (`_product`) is taken as it lies from
# _MIN_PRODUCT_COLUMNS adjacent time-major channels, rather than on rows copied from it:
# on 4 to 512 channels of 64 to 256 samples, `sosfilt` with zi and `lfilter` of order 4
# took 0.71 to 0.88 of the time (alternated, ad hoc); on 2 and 3 channels 0.71 to 0.94 up
# to 128 samples but 1.12 to 1.65 at 256, where the rows take a matrix-vector product each.
_MIN_PRODUCT_COLUMNS = 4
# A signal whose steps lie apart (a strided or reversed view of one channel too), of
# more than twice _SEGMENT_ELEMENTS samples, is copied to adjacent samples, filtered
# and copied back a segment of time of about _SEGMENT_ELEMENTS samples (all channels)
# at a time, each from the state the last one left: the copies take a segment's
# memory rather than twice the signal's.
_SEGMENT_ELEMENTS = 1 << 21
_MIN_SEGMENT = 4096  # samples of each channel
# The output is formed about _BLOCK_ELEMENTS samples at a time, so that the part the
# chunks' starting states add to each block is added in cache.
_BLOCK_ELEMENTS = 16384
# Chunk-level recurrences over at most _MATRIX_SCAN_ELEMENTS values (rows x chunks) are
# products with the powers of their decay, in blocks of _SCAN_BLOCK chunks: a product
# costs about _SCAN_BLOCK multiply-adds per value where `linear_recurrence` costs a few
# plus about 80 us of checks and dispatch a call. Complex, alternated in one process:
# 1 x 1,024 chunks took 14 us against its 88, 64 x 256 110 against 243, 1 x 16,384 104
# against 276, and 512 x 1,024 6.0 ms against 5.3; 8 x 262,144 took 26 ms against 20.
_SCAN_BLOCK = 32
_MATRIX_SCAN_ELEMENTS = 16384
# Up to _FEW_SCAN_ROWS rows of up to twice _SCAN_BLOCK chunks are one product all the same,
# without the blocks' dozen operations: 64 chunks of a pair of poles (as a real product,
# `_pair_powers`) took 3 to 15 us on 1 to 16 rows where the blocks took 9 to 18 us, and 54
# on 64 rows against 44.
_FEW_SCAN_ROWS = 16
# The chunks' end states of a row, ``width x chunks`` numbers, are solved as one product with
# `_solve`'s own matrix (`_solver`) instead of its stages' couplings and scans (two to four
# NumPy steps a stage) where they number at most _SOLVE_SIDE, or twice that on up to
# _FEW_SOLVE_ROWS rows (benchmarks/signal_solver.py). The matrix composes the stages, which the
# (b, a) form of a filter whose poles cluster couples with large factors: on random designs of
# orders 1 to 6 over 300 to 1,200 samples, where its entries exceeded 100 the product's error
# was up to 45 times the stages' (both beyond 1e-8 of the RMS), so a filter of order above 2
# whose matrix holds an entry beyond _SOLVE_GAIN keeps the stages. So chosen, on 600 such
# designs in (b, a) form and 600 of orders 1 to 12 in sections (whatever their entries), the
# product's error was at most 5.3 times the stages' (median 1.0), and within 1e-8 of the RMS
# on the same designs as theirs (ad hoc).
_SOLVE_SIDE = 128
_FEW_SOLVE_ROWS = 2
_SOLVE_GAIN = 100
# A signal of at most _DIRECT_LENGTH samples per channel is filtered as one product with
# the cascade's matrices for its length (`_direct`), after _DIRECT_AFTER calls with that
# filter and length (blocks of a stream), where its channels x length ** 2 multiply-adds
# are fewer than _DIRECT_WORK, or it is at most _DIRECT_ANY samples long, or at most
# _DIRECT_PER_STATE per number of SciPy's zi. The product costs length + state
# multiply-adds a sample, the chunks a few Python steps a chunk and more per sample with
# the state (benchmarks/lfilter_chunks.py). The last _DIRECT_KEPT matrices are kept,
# each of about (length + state) ** 2 numbers, at most _DIRECT_ELEMENTS (a cascade of
# more than about a hundred sections keeps to the chunks).
_DIRECT_LENGTH = 256
_DIRECT_WORK = 1 << 20
_DIRECT_ANY = 64
_DIRECT_PER_STATE = 32
_DIRECT_ELEMENTS = 1 << 18
_DIRECT_KEPT = 16
_DIRECT_AFTER = 2
# A single filter (`lfilter`'s (b, a), or one section) whose outputs or end state from a unit
# of SciPy's zi exceed _DIRECT_STATE_GAIN is not run as a product. Its state is
# ill-conditioned in SciPy's form (poles clustered near the unit circle: low-cutoff designs
# of order 3 and up in (b, a)): a unit of it gives outputs and end states up to 10^7 and
# beyond, which cancel in the states a signal leaves. The product's rounding of the end
# state, about that gain times double precision, is a state in any direction, which the
# next block magnifies as much again: a stream of blocks drifts by about the gain's square
# times double precision. Over 20 blocks of 200 samples of 96 designs, the products were
# within 5e-10 of the RMS on the 59 with gains up to 1,000 (the chunks, which carry the
# state in the poles' form within a call, within 7e-12 there), and 34 of the 37 beyond
# were off by more than 1e-8, up to 10^90 (benchmarks/signal_stream_state.py).
_DIRECT_STATE_GAIN = 1000
# A filter of higher order (`lfilter`) runs as its own recurrences: the first call with a
# filter builds its matrices in time growing with the square of its order (about 7 ms
# for 64 taps, 100 ms for 256).
_MAX_ORDER = 64
# The products of a few rows of samples with a filter's matrix for a short signal
# (`_product`, and `filtfilt`'s `_zero_phase`) run in the form BLAS runs fastest. On an
# x86-64 machine of 2 cores, OpenBLAS's product of 2 to 16 rows with a C-ordered matrix of
# 128 to 512 rows and columns took 1.3 to 4.7 times as long as the fastest of: a
# matrix-vector product per row (taken for 2 or 3 rows), and the transposed product
# ``(M.T @ v.T).T`` (taken from 4 rows; at 4 rows of 128 and 256 samples the former was
# faster, by 1.2 to 1.4 times). The filters on 2 to 64 channels of 128 to 512 samples took
# 0.28 to 1.05 of the time they took with the plain product. One row, more than _FEW_ROWS,
# and matrices with fewer than _FEW_ROWS_SIDE rows or columns keep the plain product, which
# was the fastest there or within 1.4 times of it (benchmarks/signal_products.py).
_FEW_ROWS = 64
_VECTOR_ROWS = 3
_FEW_ROWS_SIDE = 128


def pairs(x):
    """A complex128 NumPy array ``x`` as float64 with a last axis of 2, its real and
    imaginary parts (a view, in any layout); anything else as it is."""
    if type(x) is not np.ndarray or x.dtype != np.complex128:
        return x
    parts = x.real
    return np.lib.stride_tricks.as_strided(parts, (*x.shape, 2), (*parts.strides, 8),
                                           writeable=x.flags.writeable)


def applies(x, axis: int, sections: int | None = None, order: int = 2) -> bool:
    """Whether a cascade of ``sections`` second-order sections, or one filter of ``order``
    (as many sections as it would make, where ``sections`` is None), runs here: on a
    float64 NumPy array that `fits`."""
    return type(x) is np.ndarray and x.dtype == np.float64 and fits(
        x.shape, x.strides, x.itemsize, axis, sections, order)


def fits(shape: tuple, strides: tuple, itemsize: int, axis: int,
         sections: int | None = None, order: int = 2) -> bool:
    """Whether a filter (`applies`' ``sections`` or ``order``) runs in chunks on an array of
    that layout (byte ``strides``): with enough samples along ``axis``, for an order up to
    _MAX_ORDER, and unless a step's samples lie apart (copied to adjacent ones and back:
    not `_columns`) in more than _MAX_APART_WIDTH channels for a single section. Enough
    samples: at least _MIN_LENGTH, and chunks of _MIN_CHUNK over the ``order`` samples
    SciPy's zi enters (`cascade`)."""
    if sections is None:
        sections = (order + 1) // 2
    if not sections or order > _MAX_ORDER:
        return False
    axis %= len(shape)
    length, size = shape[axis], math.prod(shape)
    apart = abs(strides[axis]) != itemsize and size > length \
        and _column_strides(shape, strides, itemsize, axis) is None
    return length >= max(_MIN_LENGTH, _MIN_CHUNK * -(-order // _MIN_CHUNK)) and not (
        apart and sections == 1 and size > _MAX_APART_WIDTH * length)


class Section:
    """One filter's step: ``kind`` "pair" (``gain``, ``residue``, ``pole``, ``zi_gain``) or
    "poles" (numerator ``b``, then ``poles``: a float for a real pole, a complex number
    for a conjugate pair run as one complex recurrence); ``b`` and ``a`` for its final
    state; ``width`` real states from ``offset`` in the cascade's state."""

    def __init__(self, kind: str, b: np.ndarray, a: np.ndarray, offset: int, **form):
        self.kind, self.b, self.a, self.offset = kind, b, a, offset
        self.__dict__.update(form)
        self.order = max(b.size, a.size) - 1  # SciPy's state: that many numbers
        # A pair among other stages gives its output as Re(v) + Re(p) / Im(p) Im(v), which
        # magnifies the rounding of Im(v). Where `_matrices` round at every step (no
        # extended precision), the order-10 elliptic band-stop design of
        # test_lfilter_transfer_function_designs is 2.7e-8 of the RMS off in chunks of 64
        # and 1.9e-9 in chunks of 16, so a cascade with such pairs runs in chunks of
        # _MIN_CHUNK there; built in extended precision, 8.2e-10 in chunks of 64.
        self.pairs = kind == "poles" and any(isinstance(p, complex) for p in form["poles"])
        self.width = 2 if kind == "pair" else b.size - 1 + sum(
            2 if isinstance(p, complex) else 1 for p in form["poles"])

    def blocks(self) -> list[tuple[int, int, complex]]:
        """The diagonal blocks of the chunk transition: (first state, size, decay per
        step), a numerator's memory having decay 0."""
        if self.kind == "pair":
            return [(self.offset, 2, self.pole)]
        first = self.offset + self.b.size - 1
        blocks = [(self.offset + k, 1, 0.0) for k in range(self.b.size - 1)]
        for p in self.poles:
            size = 2 if isinstance(p, complex) else 1
            blocks.append((first, size, p))
            first += size
        return blocks

    def step(self, u, state, zi=None):
        """The filter's output for input ``u``, updating ``state`` (..., width) in place;
        ``zi`` (..., ) is added to the recurrence's impulse (the initial state)."""
        s = state[..., self.offset:self.offset + self.width]
        if self.kind == "pair":
            w = self.residue * u
            if zi is not None:
                w = w + self.zi_gain * zi
            v = self.pole * (s[..., 0] + 1j * s[..., 1]) + w
            s[..., 0], s[..., 1] = v.real, v.imag
            return self.gain * u + v.real
        memory = self.b.size - 1  # the last inputs, most recent first
        w = self.b[0] * u + s[..., :memory] @ self.b[1:]
        if zi is not None:
            w = w + zi
        if memory:
            s[..., 1:memory] = s[..., :memory - 1].copy()
            s[..., 0] = u
        i = memory
        for p in self.poles:
            if isinstance(p, complex):  # Re(v) + Re(p) / Im(p) Im(v), as in _filters
                v = p * (s[..., i] + 1j * s[..., i + 1]) + w
                s[..., i], s[..., i + 1] = v.real, v.imag
                w = v.real + (p.real / p.imag) * v.imag
                i += 2
            else:
                w = p * s[..., i] + w
                s[..., i] = w
                i += 1
        return w


def _run(sections, signal, state, inject=None):
    """The cascade over ``signal`` (..., steps) from ``state`` (..., width), updated in
    place; ``inject`` (sections, ...) is added to each section's recurrence's impulse at
    the first step (as SciPy's zi enters). Returns the output."""
    out = np.empty(signal.shape)
    for t in range(signal.shape[-1]):
        u = signal[..., t]
        for s, section in enumerate(sections):
            u = section.step(u, state, None if inject is None or t else inject[s])
        out[..., t] = u
    return out


class _Responses:
    """The cascade's responses over a chunk (`_matrices`)."""

    def __init__(self, **arrays):
        self.__dict__.update(arrays)


def _toeplitz(h: np.ndarray) -> np.ndarray:
    """The upper-triangular Toeplitz matrix ``T[s, t] = h[t - s]``: a chunk times it is the
    chunk filtered by the impulse response ``h``."""
    lag = np.arange(h.size)[None, :] - np.arange(h.size)[:, None]
    return np.where(lag >= 0, h[np.maximum(lag, 0)], 0.0)


@functools.lru_cache(maxsize=32)
def _matrices(sections: tuple, length: int) -> _Responses:
    """The cascade's responses over ``length`` steps:

    - ``toeplitz`` (length, length), the output's Toeplitz matrix from the impulse
      response, and ``after`` (length, width), the states an impulse at step 0 leaves
      after each step;
    - from each unit state with no input, the outputs ``free`` (width, length) and the
      states after each step ``moved`` (length, width, width);
    - ``injected`` (sections x length, length) and ``injected_ends`` (sections x length,
      width), as ``toeplitz`` and the end states of `_ends` for a unit added to a
      section's recurrence's impulse, as SciPy's zi enters, the sections' stacked;
    - ``final``, per section, SciPy's final state (section's width, order) from its own
      state: with ``y`` the section's output from that state and no input, ``zf[k] =
      y[k] + sum_{j<=k} a[j] y[k-j]`` (the transposed direct form's state);
    - ``sums`` (width + 1, length), the end state each sample of a chunk leaves (`_ends`)
      and a row of ones (the chunk's sum), and ``stages``, the chunk-level recurrences
      `_solve` runs: per diagonal block of the ``length``-step transition, its first
      state, size, coupling to the states before it (None where there is none) and
      decay per chunk, the double nearest ``p ** length`` (`_power`).
    """
    width, count = sum(s.width for s in sections), len(sections)
    rows = 1 + width + count  # the impulse, the unit states, the units injected
    signal = np.zeros((rows, length), _WIDE)
    signal[0, 0] = 1.0
    state = np.zeros((rows, width), _WIDE)
    state[1:1 + width] = np.eye(width)
    inject = np.zeros((count, rows), _WIDE)
    inject[:, 1 + width:] = np.eye(count)
    states = np.empty((length, rows, width))
    outputs = np.empty((rows, length))
    for t in range(length):
        outputs[:, t:t + 1] = _run(sections, signal[:, t:t + 1], state,
                                   None if t else inject)
        states[t] = state
    final = []
    for s in sections:
        unit = np.zeros((s.width, width))
        unit[:, s.offset:s.offset + s.width] = np.eye(s.width)
        alone = np.stack([s.step(np.zeros(s.width), unit) for _ in range(s.order)], axis=-1)
        a = np.pad(s.a, (0, s.order + 1 - s.a.size))
        final.append(alone @ _toeplitz(a[:s.order]))
    after, moved = states[:, 0].copy(), states[:, 1:1 + width].copy()
    stages = []
    for first, size, decay in (block for s in sections for block in s.blocks()):
        coupling = moved[-1, :first, first:first + size].T.copy()
        stages.append((first, size, coupling if coupling.any() else None,
                       _power(complex(decay) if size == 2 else float(decay.real), length)))
    return _Responses(
        toeplitz=_toeplitz(outputs[0]), after=after, free=outputs[1:1 + width].copy(),
        moved=moved, stages=stages,
        sums=np.concatenate([_ends(after, length), np.ones((length, 1))], axis=1).T.copy(),
        injected=np.concatenate([_toeplitz(h) for h in outputs[1 + width:]]),
        injected_ends=np.concatenate([_ends(states[:, 1 + width + s], length)
                                      for s in range(count)]), final=final)


def _ends(after: np.ndarray, steps: int) -> np.ndarray:
    """The state at the end of ``steps`` samples per sample (steps, width), from the
    states an impulse leaves (`_matrices`): sample i has steps - 1 - i steps to go."""
    return after[steps - 1::-1] if steps else after[:0]


def _power(p, n: int):
    """``p ** n`` (a float or complex ``p``) rounded to the nearest double (each part), from
    the exact power in integers, as a NumPy scalar (whose powers overflow to infinity, as
    an unstable filter's do)."""
    (re, re_scale), (im, im_scale) = p.real.as_integer_ratio(), p.imag.as_integer_ratio()
    scale = max(re_scale, im_scale)  # powers of two: p = (re + i im) / scale
    re, im = re * (scale // re_scale), im * (scale // im_scale)
    power_re, power_im, power_scale, bits = 1, 0, 1, n
    while bits:
        if bits & 1:
            power_re, power_im = power_re * re - power_im * im, power_re * im + power_im * re
            power_scale *= scale
        re, im, scale, bits = re * re - im * im, 2 * re * im, scale * scale, bits >> 1
    try:
        parts = power_re / power_scale, power_im / power_scale  # correctly rounded
    except OverflowError:  # beyond the largest double
        return np.float64(p) ** n if isinstance(p, float) else np.complex128(p) ** n
    return np.float64(parts[0]) if isinstance(p, float) else np.complex128(complex(*parts))


def _solve(ends: np.ndarray, stages) -> None:
    """In place, the chunks' end states from the chunks' own contributions ``ends``
    (batch, width, chunks): stage by stage (`_matrices`' ``stages``), each block driven
    by the blocks before it at the previous chunk and then scanned over the chunks."""
    with Scratch() as scratch:
        for first, size, coupling, decay in stages:
            if coupling is not None:  # none for a numerator's memory, chunks outlasting it
                ends[:, first:first + size, 1:] += coupling @ ends[:, :first, :-1]
            if decay == 0:  # a numerator's memory
                continue
            if size == 2:
                pair = ends[:, first:first + 2]  # (batch, real and imaginary parts, chunks)
                if _one_product(len(pair), pair.shape[-1]):  # a real one
                    ends[:, first:first + 2] = times(
                        pair.reshape(len(pair), 2 * pair.shape[-1]),
                        _pair_powers(decay, pair.shape[-1])).reshape(pair.shape)
                    continue
                v = scratch.empty(pair[:, 0].shape, np.complex128)
                v.real, v.imag = pair[:, 0], pair[:, 1]
                v = _scan(decay, v, scratch)
                ends[:, first], ends[:, first + 1] = v.real, v.imag
            else:
                ends[:, first] = _scan(decay, ends[:, first], scratch)


@functools.lru_cache(maxsize=32)
def _solver(sections: tuple, size: int, chunks: int) -> np.ndarray | None:
    """`_solve` over ``chunks`` chunks of ``size`` as a matrix, ``width x chunks`` square: a
    row of chunks' end states ``(width, chunks)``, flattened, times it is that row solved (row
    k of the matrix the k-th unit row solved); None for a filter of order above 2 whose
    matrix holds an entry beyond _SOLVE_GAIN (see _SOLVE_SIDE)."""
    side = sum(s.width for s in sections) * chunks
    units = np.eye(side).reshape(side, side // chunks, chunks)
    _solve(units, _matrices(sections, size).stages)
    units = units.reshape(side, side)
    if any(s.order > 2 for s in sections) and np.abs(units).max() > _SOLVE_GAIN:
        return None
    return units


def _scan(decay, v: np.ndarray, scratch: Scratch) -> np.ndarray:
    """``v[:, k] += decay * v[:, k - 1]`` over the chunks (rows, chunks): up to
    _MATRIX_SCAN_ELEMENTS values as products (`_powers_scan`, its temporaries and maybe its
    result from ``scratch``), otherwise by `linear_recurrence`."""
    if v.size > _MATRIX_SCAN_ELEMENTS:
        return linear_recurrence(decay, v, axis=-1)
    return _powers_scan(decay, v, scratch)


def _powers_scan(decay, v: np.ndarray, scratch: Scratch) -> np.ndarray:
    """`_scan` as products: blocks of _SCAN_BLOCK chunks from rest, each times the
    powers of ``decay``; their end states scanned in turn over the blocks (``decay **
    _SCAN_BLOCK``), and each block's start state then carried into it."""
    rows, count = v.shape
    if _one_product(rows, count):
        return times(v, _powers(decay, count))
    blocks = -(-count // _SCAN_BLOCK)
    powers = _powers(decay, _SCAN_BLOCK)
    padded = scratch.empty((rows, blocks * _SCAN_BLOCK), v.dtype)
    padded[:, :count] = v
    padded[:, count:] = 0
    w = scratch.empty((rows * blocks, _SCAN_BLOCK), np.result_type(v, powers))
    np.matmul(padded.reshape(-1, _SCAN_BLOCK), powers, out=w)
    w = w.reshape(rows, blocks, _SCAN_BLOCK)
    starts = _powers_scan(decay ** _SCAN_BLOCK, w[:, :-1, -1], scratch)
    w[:, 1:] += starts[:, :, None] * (decay * powers[0])
    return w.reshape(rows, blocks * _SCAN_BLOCK)[:, :count]


def _one_product(rows: int, count: int) -> bool:
    """Whether a chunk-level recurrence over ``count`` chunks of ``rows`` is one product
    with its decay's powers (see _FEW_SCAN_ROWS)."""
    return count <= _SCAN_BLOCK or (count <= 2 * _SCAN_BLOCK and rows <= _FEW_SCAN_ROWS)


@functools.lru_cache(maxsize=256)
def _pair_powers(decay: complex, count: int) -> np.ndarray:
    """`_powers` of a complex ``decay`` as a real ``(2 count, 2 count)`` matrix: the real
    parts of a row of values, then their imaginary parts, times it are those of their
    recurrence with ``decay`` from rest."""
    powers = _powers(decay, count)
    return np.block([[powers.real, powers.imag], [-powers.imag, powers.real]])


@functools.lru_cache(maxsize=256, typed=True)  # typed: 0.0 == 0j, but not their powers
def _powers(decay, count: int) -> np.ndarray:
    """The upper-triangular ``P[j, k] = decay ** (k - j)`` (count x count), real for a
    float ``decay``: a row of values times it is their recurrence with ``decay`` from
    rest."""
    return _toeplitz(decay ** np.arange(count))


def cascade(sections: tuple, x: np.ndarray, axis: int, zi, reverse: bool = False,
            out: np.ndarray | None = None, keep_state: bool | None = None,
            direct: bool = True):
    """The ``sections`` (`Section`) over ``x`` (see `applies`) along ``axis``, from SciPy's
    ``zi`` or rest; returns ``(y, zf)`` (zf where ``keep_state``, or where it is None,
    where zi is given; else None), or None where a sample or a state is not finite: the
    sections' recurrences then carry infinities and NaN forward as SciPy does, where the
    products would spread them over their chunk.
    ``y`` is ``out`` where given (float64, ``x``'s shape, written in place where its
    samples follow one another in time, else in tiles at the end), else a new array. A
    time-major signal of at least _MIN_COLUMNS adjacent channels runs as it lies
    (`_by_columns`), its output written in place where ``out`` lies alike.

    Where ``reverse``, the cascade runs from rest (no ``zi``) backward in time, as on the
    flipped signal with the output flipped back, without those copies: the chunks are
    then cut from the end, and each one's products taken with the flipped matrices (a
    Toeplitz matrix flipped both ways is its transpose).

    A short signal is one product instead where ``direct`` and `_direct` has the matrix."""
    if reverse and zi is not None:
        raise ValueError("a cascade runs backward in time from rest only")
    length = x.shape[axis]
    if keep_state is None:
        keep_state = zi is not None
    if direct and not (reverse and keep_state) \
            and _takes_product(length, sum(s.order for s in sections), x.size):
        matrices = _direct((sections, length), reverse, functools.partial(
            unit_matrices, lambda signal, zi: cascade(sections, signal, 1, zi, direct=False),
            len(sections), sections[0].order, length))
        if matrices is not None:
            return _product(matrices, x, axis, zi, reverse, out, keep_state)
    width = sum(s.width for s in sections)
    size = _SHORT_CHUNK if width <= _SHORT_WIDTH else _CHUNK
    if x.shape[axis] < 2 * size or (any(s.pairs for s in sections)
                                    and np.finfo(_WIDE).eps == np.finfo(np.float64).eps):
        size = min(size, _MIN_CHUNK)
    signal = _moved(x, axis, -1)
    apart = signal.strides[-1] != signal.itemsize
    columns = _columns(x, axis) if apart else None
    if columns is not None and reverse:  # forward over the signal flipped, flipped back
        done = _by_columns(sections, np.flip(x, axis), columns[:, ::-1], axis, None,
                           None if out is None else np.flip(out, axis), keep_state, size)
        if done is None:
            return None
        return np.flip(done[0], axis) if out is None else out, done[1]
    if columns is not None:
        return _by_columns(sections, x, columns, axis, zi, out, keep_state, size)
    pieces = _segments(signal.shape, size) if apart else []
    if pieces:
        return _in_segments(sections, x, axis, zi, reverse, out, keep_state, pieces)
    with Scratch() as scratch:
        if apart:  # steps apart, or reversed (filtfilt's second pass)
            signal = _numpy_backend._copy(scratch.empty(signal.shape, np.float64), signal)
        return _in_rows(sections, signal, axis, zi, reverse, out, keep_state, size, apart,
                        scratch)


def _in_rows(sections: tuple, signal: np.ndarray, axis: int, zi, reverse: bool,
             out: np.ndarray | None, keep_state: bool, size: int, apart: bool,
             scratch: Scratch):
    """`cascade` in chunks of ``size`` over ``signal``, its input (time along ``axis``)
    with time moved last and adjacent samples (copied in tiles where its steps lie
    ``apart`` or backward; the output is then a new array in the input's row-major
    order, or ``out``). An output in time-major rows that is copied into the result
    after is a temporary from ``scratch``."""
    width, count = sum(s.width for s in sections), len(sections)
    batch, length = signal.shape[:-1], signal.shape[-1]
    rows = math.prod(batch)
    signal = signal.reshape(rows, length)
    if zi is not None:
        zi = _moved(zi, 1 + axis, -1).reshape(count, rows, zi.shape[1 + axis])
        if not np.isfinite(zi).all():
            return None
    m = _matrices(sections, size)
    target = None if out is None else _rows(_moved(out, axis, -1), rows, length)
    # Chunks of `size` samples, and a shorter one.
    chunks, rest = divmod(length, size)
    stop = chunks * size
    # Backward in time, the chunks end where the signal does and the shorter one is first.
    cut = slice(rest, length) if reverse else slice(0, stop)
    body = signal[:, cut].reshape(rows, chunks, size)
    tail = signal[:, :rest] if reverse else signal[:, stop:]
    # The chunks' end states from rest (rows, width, chunks), with each chunk's sum
    # below them, so that an infinity or NaN anywhere shows; backward in time, in the
    # order the cascade meets the chunks.
    ends = (np.ascontiguousarray(m.sums[:, ::-1]) if reverse else m.sums) @ body.swapaxes(1, 2)
    if not (np.isfinite(ends).all() and np.isfinite(tail).all()):
        return None
    ends = np.ascontiguousarray(ends[:, :width, ::-1]) if reverse else ends[:, :width]
    if zi is not None:  # zi enters the first samples as units injected (see `_run`)
        order = zi.shape[-1]
        spans = -(-order // size)  # the chunks it reaches
        injected = np.zeros((count, rows, spans * size))
        injected[..., :order] = zi
        # (rows, spans, sections x size), as `_matrices` stacks the sections' responses
        injected = injected.reshape(count, rows, spans, size).transpose(1, 2, 0, 3).reshape(
            rows, spans, count * size)
        ends[:, :, :spans] += (injected @ m.injected_ends).swapaxes(1, 2)
    side = width * chunks
    solver = _solver(sections, size, chunks) if side <= _SOLVE_SIDE or (
        side <= 2 * _SOLVE_SIDE and rows <= _FEW_SOLVE_ROWS) else None
    if solver is None:
        _solve(ends, m.stages)
    else:
        ends = times(ends.reshape(rows, width * chunks), solver).reshape(rows, width, chunks)
    if not np.isfinite(ends).all():
        return None
    # The rows are copied into the result after where time is not the result's last axis.
    copied = target is None and (out is not None or (
        apart and length > 1 and math.prod(batch[axis % (len(batch) + 1):]) > 1))
    if target is not None:
        y = target
    else:
        y = scratch.empty((rows, length), np.float64) if copied else np.empty((rows, length))
    state = ends[:, :, -1]
    if reverse:
        _output(y[:, cut].reshape(rows, chunks, size), body, m.toeplitz.T,
                np.ascontiguousarray(m.free[:, ::-1]), ends, reverse=True)
        y[:, :rest] = tail @ m.toeplitz[:rest, :rest].T + state @ m.free[:, :rest][:, ::-1]
    else:
        _output(y[:, cut].reshape(rows, chunks, size), body, m.toeplitz, m.free, ends)
        if zi is not None:
            y[:, :spans * size] += (injected @ m.injected).reshape(rows, spans * size)
        y[:, stop:] = tail @ m.toeplitz[:rest, :rest] + state @ m.free[:, :rest]
    if target is not None:
        y = out
    else:
        y = _moved(y.reshape(*batch, length), -1, axis)
        if out is not None:
            y = _numpy_backend._copy(out, y)
        elif copied or (apart and not y.flags.c_contiguous):  # back in row-major order
            y = _numpy_backend._copy(np.empty(y.shape), y)
    if not keep_state:
        return y, None
    if rest:
        state = state @ m.moved[rest - 1] + tail @ _ends(m.after, rest)
    zf = np.stack([state[:, s.offset:s.offset + s.width] @ final
                   for s, final in zip(sections, m.final, strict=True)])
    return y, np.ascontiguousarray(_moved(zf.reshape(count, *batch, zf.shape[-1]), -1, 1 + axis))


_direct_kept: collections.OrderedDict = collections.OrderedDict()
_direct_lock = threading.Lock()


def _forget_in_child() -> None:
    """A forked child starts with no matrices kept and a lock of its own: a thread of the
    parent may have held the lock, and the child has no such thread to release it."""
    global _direct_kept, _direct_lock
    _direct_kept = collections.OrderedDict()
    _direct_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _takes_product(length: int, state: int, size: int) -> bool:
    """Whether a signal of ``size`` samples, ``length`` along time, is filtered as one
    product by a filter of ``state`` numbers of SciPy's zi (see _DIRECT_LENGTH)."""
    return length <= _DIRECT_LENGTH and (length + state) ** 2 <= _DIRECT_ELEMENTS and (
        length <= max(_DIRECT_ANY, _DIRECT_PER_STATE * state) or size * length < _DIRECT_WORK)


def _direct(key: tuple, reverse: bool, build) -> tuple | None:
    """A filter's matrices over a length (`unit_matrices`), by ``key`` (the filter and
    the length), once _DIRECT_AFTER calls with them in the same direction have run
    otherwise (so that a call on a signal of a new length does not pay for building them,
    `filtfilt`'s two passes included), built by ``build()``; None before, and where they
    are not finite."""
    with _direct_lock:
        kept = _direct_kept.get(key)
        if kept is None or (isinstance(kept, collections.Counter)
                            and kept[reverse] < _DIRECT_AFTER):
            kept = kept or collections.Counter()
            kept[reverse] += 1
            _direct_kept[key] = kept
            _direct_kept.move_to_end(key)
            if len(_direct_kept) > _DIRECT_KEPT:
                _direct_kept.popitem(last=False)
            return None
        _direct_kept.move_to_end(key)
    if isinstance(kept, collections.Counter):
        kept = build()
        with _direct_lock:
            if key in _direct_kept:
                _direct_kept[key] = kept
    return kept or None


def unit_matrices(run, count: int, order: int, length: int) -> tuple | bool:
    """A filter of ``count`` stages, each with ``order`` numbers of SciPy's zi (``n`` in
    all), over ``length`` samples as matrices of its input, the stages' zi one after the
    other and then the samples, to the output, ``(n + length, length)``, and to zf packed
    alike, ``(n + length, n)``; with ``count``. From ``run(signal, zi)``, the filter over
    rows of samples from zi stacked by stage, ``(y, zf)`` or None, on unit states and then
    unit samples; False where it declines, a response is not finite, or a single filter's
    responses to its units of state exceed _DIRECT_STATE_GAIN."""
    n = count * order
    units = np.eye(n + length)
    done = run(units[:, n:], units[:, :n].reshape(n + length, count, order).transpose(1, 0, 2))
    if not done:
        return False
    y, zf = done
    finals = zf.transpose(1, 0, 2).reshape(n + length, n)
    if not (np.isfinite(y).all() and np.isfinite(finals).all()):
        return False
    if count == 1 and max(np.abs(y[:n]).max(initial=0),
                          np.abs(finals[:n]).max(initial=0)) > _DIRECT_STATE_GAIN:
        return False
    return np.ascontiguousarray(y), np.ascontiguousarray(finals), count


def short(x, axis: int, sections: int | None = None, order: int = 2) -> bool:
    """Whether ``x`` is a float64 NumPy signal too short along ``axis`` for a filter of
    ``sections`` or ``order`` (`applies`) to run in chunks of _MIN_CHUNK, as many as SciPy's
    zi enters, that `product` takes."""
    if type(x) is not np.ndarray or x.dtype != np.float64:
        return False
    state = order if sections is None else 2 * sections
    if sections is None:
        sections = (order + 1) // 2
    length = x.shape[axis]
    return sections > 0 and order <= _MAX_ORDER and 0 < length \
        < _MIN_CHUNK * max(1, -(-order // _MIN_CHUNK)) and _takes_product(length, state, x.size)


def product(key: tuple, x: np.ndarray, axis: int, zi, build):
    """A filter over ``x`` along ``axis`` from SciPy's ``zi`` (stacked by filter) or rest, as
    one product with its matrices for ``x``'s length (`_direct`, by ``key``, built by
    ``build()`` in `unit_matrices`' layout): ``(y, zf)`` as `cascade` returns them, or
    None where the matrices are not built yet or a sample or state is not finite."""
    matrices = _direct(key, False, build)
    return None if matrices is None else _product(matrices, x, axis, zi, False, None,
                                                  zi is not None)


def _product(matrices: tuple, x: np.ndarray, axis: int, zi, reverse: bool,
             out: np.ndarray | None, keep_state: bool):
    """`cascade` as one product with `unit_matrices`' ``matrices`` for ``x``'s length
    (backward in time: the output's transposed, the filter's Toeplitz matrix flipped both
    ways); None where a sample, a state or an output is not finite."""
    outputs, finals, count = matrices
    n = finals.shape[1]
    columns = _columns(x, axis, _MIN_PRODUCT_COLUMNS)
    if columns is not None and columns.strides[1] > 0:
        return _product_of_columns(matrices, x, columns, axis, zi, reverse, out, keep_state)
    signal = _moved(x, axis, -1)
    batch, length = signal.shape[:-1], signal.shape[-1]
    rows = math.prod(batch)
    signal = signal.reshape(rows, length)
    inputs = slice(n, None)  # the matrices' rows for the samples alone
    if zi is not None:
        zi = _moved(zi, 1 + axis, -1).reshape(count, rows, n // count)
        signal = np.concatenate([zi.transpose(1, 0, 2).reshape(rows, n), signal], axis=1)
        inputs = slice(None)
    if not np.isfinite(signal).all():
        return None
    y = times(signal, outputs[n:].T if reverse else outputs[inputs])
    if not np.isfinite(y).all():
        return None
    y = _moved(y.reshape(*batch, length), -1, axis)
    if out is not None:
        y = _numpy_backend._copy(out, y)
    elif not y.flags.c_contiguous:
        y = np.ascontiguousarray(y)
    if not keep_state:
        return y, None
    zf = (signal @ finals[inputs]).reshape(rows, count, n // count).transpose(1, 0, 2)
    return y, np.ascontiguousarray(_moved(zf.reshape(count, *batch, n // count), -1, 1 + axis))


def _product_of_columns(matrices: tuple, x: np.ndarray, signal: np.ndarray, axis: int, zi,
                        reverse: bool, out: np.ndarray | None, keep_state: bool):
    """`_product` on a time-major ``x`` of at least _MIN_PRODUCT_COLUMNS adjacent channels
    (its `_columns` view ``signal``, forward in time) as it lies: the transposed matrices
    times the samples, and zi stacked before them, down each block of channels."""
    axis %= x.ndim
    outputs, finals, count = matrices
    n = finals.shape[1]
    batch, _, channels = signal.shape
    inputs = slice(n, None)  # the matrices' rows for the samples alone
    if zi is not None:  # (sections, ..., order along axis, ...) before the samples
        zi = np.reshape(zi, (count, batch, n // count, channels)).transpose(1, 0, 2, 3)
        signal = np.concatenate([zi.reshape(batch, n, channels), signal], axis=1)
        inputs = slice(None)
    if not np.isfinite(signal).all():
        return None
    y = (outputs[n:] if reverse else outputs[inputs].T) @ signal
    if not np.isfinite(y).all():
        return None
    y = y.reshape(x.shape)
    if out is not None:
        y = _numpy_backend._copy(out, y)
    if not keep_state:
        return y, None
    zf = (finals[inputs].T @ signal).reshape(batch, count, n // count, channels)
    return y, np.ascontiguousarray(zf.transpose(1, 0, 2, 3)).reshape(
        count, *x.shape[:axis], n // count, *x.shape[axis + 1:])


def times(v: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """``v @ matrix`` in C order, for rows ``v`` (rows, n) and ``matrix`` (n, m), in the
    form BLAS runs fastest for a few rows (see _FEW_ROWS)."""
    rows = v.shape[0]
    if not (2 <= rows <= _FEW_ROWS and min(matrix.shape) >= _FEW_ROWS_SIDE):
        return v @ matrix
    if rows <= _VECTOR_ROWS:  # a matrix-vector product per row
        return np.matmul(v[:, None, :], matrix)[:, 0]
    return np.ascontiguousarray((matrix.T @ v.T).T)


def _segments(shape: tuple, size: int) -> list[tuple[int, int]]:
    """The segments of time (start, stop) a signal of ``shape`` (time last) is filtered
    in (`cascade`, in chunks of ``size``); none where it is filtered whole."""
    rows, length = math.prod(shape[:-1]), shape[-1]
    segment = max(_MIN_SEGMENT, _SEGMENT_ELEMENTS // max(rows, 1)) // size * size
    if length * rows <= 2 * _SEGMENT_ELEMENTS or length < 2 * segment:
        return []
    return _numpy_backend._cut(length, segment)


def _in_segments(sections: tuple, x: np.ndarray, axis: int, zi, reverse: bool,
                 out: np.ndarray | None, keep_state: bool, pieces: list):
    """`cascade` over ``x``, whose steps lie apart, a segment of time at a time
    (``pieces``, from `_segments`), each copied to adjacent samples (flipped where ``reverse``) and
    filtered from the state the one before left; the output in ``out`` or a new array in
    ``x``'s row-major order, as `cascade` returns it."""
    signal = _moved(x, axis, -1)
    last = signal.ndim - 1
    y = np.empty(x.shape) if out is None else out
    ys = _moved(y, axis, -1)
    state = None if zi is None else _moved(zi, 1 + axis, -1)
    shape = (*signal.shape[:-1], max(b - a for a, b in pieces))
    with Scratch() as scratch:
        buffers = scratch.empty(shape, np.float64), scratch.empty(shape, np.float64)
        for start, stop in reversed(pieces) if reverse else pieces:
            piece, into = signal[..., start:stop], ys[..., start:stop]
            if reverse:
                piece, into = np.flip(piece, -1), np.flip(into, -1)
            copy, result = (buffer[..., :stop - start] for buffer in buffers)
            done = cascade(sections, _numpy_backend._copy(copy, piece), last, state, out=result,
                           keep_state=True)
            if not done:
                return None
            _numpy_backend._copy(into, result)
            state = done[1]
    if not keep_state:
        return y, None
    return y, _moved(state, -1, 1 + axis)


def _columns(v: np.ndarray, axis: int, least: int | None = None) -> np.ndarray | None:
    """``v`` as a ``(batch, time, channels)`` view (`_column_strides`), or None."""
    axis %= v.ndim
    strides = _column_strides(v.shape, v.strides, v.itemsize, axis, least)
    if strides is None:
        return None
    return np.lib.stride_tricks.as_strided(
        v, (math.prod(v.shape[:axis]), v.shape[axis], math.prod(v.shape[axis + 1:])),
        strides, writeable=v.flags.writeable)


def _column_strides(shape: tuple, strides: tuple, itemsize: int, axis: int,
                    least: int | None = None) -> tuple[int, int, int] | None:
    """The strides of an array of that layout as ``(batch, time, channels)``, the axes
    before and after ``axis`` (not negative) each merged into one, where its channels
    are adjacent and at least ``least`` (_MIN_COLUMNS), and its time's steps (forward or
    backward) hold them apart; else None."""
    channels = math.prod(shape[axis + 1:])
    if channels < (_MIN_COLUMNS if least is None else least):
        return None
    batch = _merged(shape, strides, range(axis))
    inner, time = _merged(shape, strides, range(axis + 1, len(shape))), strides[axis]
    if batch is None or inner != itemsize or abs(time) < channels * itemsize:
        return None
    return batch, time, inner


def _merged(shape: tuple, strides: tuple, axes: range) -> int | None:
    """The stride of consecutive ``axes`` of an array of that layout merged into one (0
    where each has one element), or None where they cannot be."""
    stride, step = None, None  # the merged axis' stride; the stride the next axis out needs
    for k in reversed(axes):
        if shape[k] == 1:
            continue
        if step is not None and strides[k] != step:
            return None
        stride = strides[k] if stride is None else stride
        step = strides[k] * shape[k]
    return stride or 0


def _in_columns(sections: tuple, signal: np.ndarray, zi, out: np.ndarray, keep_state: bool,
                size: int):
    """`_in_rows` on a time-major ``signal`` ``(batch, time, channels)``, its channels
    adjacent and its steps forward in time, as it lies: each chunk a ``(size, channels)``
    block, its end states and output products with the transposed matrices, the chunks'
    end states solved over the chunks as time-major recurrences (`_solve_columns`); the
    output written into ``out``, a view of the same layout. From ``zi`` ``(sections,
    batch, order, channels)`` or rest; returns the final state in zi's layout where
    ``keep_state`` (else None), or False where a sample or a state is not finite."""
    width, count = sum(s.width for s in sections), len(sections)
    batch, length, channels = signal.shape
    m = _matrices(sections, size)
    chunks, rest = divmod(length, size)
    stop = chunks * size
    body = signal[:, :stop].reshape(batch, chunks, size, channels)
    tail = signal[:, stop:]
    # (batch, chunks, width, channels), each chunk's sum below its end states
    ends = m.sums @ body
    if not (np.isfinite(ends).all() and np.isfinite(tail).all()):
        return False
    ends = ends[:, :, :width]
    if zi is not None:  # as in `_in_rows`, zi enters the first samples as units injected
        order = zi.shape[2]
        spans = -(-order // size)
        injected = np.zeros((count, batch, spans * size, channels))
        injected[:, :, :order] = zi
        injected = injected.reshape(count, batch, spans, size, channels).transpose(
            1, 2, 0, 3, 4).reshape(batch, spans, count * size, channels)
        if not np.isfinite(injected).all():
            return False
        ends[:, :spans] += m.injected_ends.T @ injected
    _solve_columns(ends, m.stages)
    if not np.isfinite(ends).all():
        return False
    outputs = out[:, :stop].reshape(batch, chunks, size, channels)
    toeplitz, free = m.toeplitz.T, m.free.T
    step = max(1, _BLOCK_ELEMENTS // (size * channels))  # chunks per block, as `_output`
    group = max(1, step // chunks)  # batch rows per block, where a row's chunks fit in one
    for row in range(0, batch, group):
        them = slice(row, row + group)
        for first in range(0, chunks, step):
            last = min(first + step, chunks)
            np.matmul(toeplitz, body[them, first:last], out=outputs[them, first:last])
            first = max(first, 1)
            if first < last:
                outputs[them, first:last] += free @ ends[them, first - 1:last - 1]
    if zi is not None:
        out[:, :spans * size] += (m.injected.T @ injected).reshape(batch, spans * size,
                                                                  channels)
    state = ends[:, -1]  # (batch, width, channels)
    out[:, stop:] = m.toeplitz[:rest, :rest].T @ tail + m.free[:, :rest].T @ state
    if not keep_state:
        return None
    if rest:
        state = m.moved[rest - 1].T @ state + _ends(m.after, rest).T @ tail
    return np.stack([final.T @ state[:, s.offset:s.offset + s.width]
                     for s, final in zip(sections, m.final, strict=True)])


def _solve_columns(ends: np.ndarray, stages) -> None:
    """`_solve` on the chunks' end states ``(batch, chunks, width, channels)``: each stage's
    recurrence over the chunks runs along them, the channels adjacent (`_scan_columns`)."""
    for first, size, coupling, decay in stages:
        if coupling is not None:
            ends[:, 1:, first:first + size] += coupling @ ends[:, :-1, :first]
        if decay == 0:
            continue
        if size == 2:
            v = _scan_columns(decay, ends[:, :, first] + 1j * ends[:, :, first + 1])
            ends[:, :, first], ends[:, :, first + 1] = v.real, v.imag
        else:
            ends[:, :, first] = _scan_columns(decay, ends[:, :, first])


def _scan_columns(decay, v: np.ndarray) -> np.ndarray:
    """``v[:, k] += decay * v[:, k - 1]`` over the chunks of ``v`` (batch, chunks,
    channels): up to twice _SCAN_BLOCK chunks as a product with the powers of ``decay``,
    otherwise by `linear_recurrence` along them."""
    if v.shape[1] <= 2 * _SCAN_BLOCK:
        return _powers(decay, v.shape[1]).T @ v
    return linear_recurrence(decay, v, axis=1)


def _by_columns(sections: tuple, x: np.ndarray, signal: np.ndarray, axis: int, zi,
                out: np.ndarray | None, keep_state: bool, size: int):
    """`cascade` over ``x``, time-major (its `_columns` view ``signal``), in chunks of
    ``size`` as they lie (`_in_columns`), a segment of time of about _SEGMENT_ELEMENTS
    samples at a time where it is longer than twice that (each from the state the one
    before left), each copied forward in time first where it runs backward; the output
    in ``out`` (where its view holds the channels adjacent, else copied there at the end)
    or a new array in ``x``'s row-major order."""
    axis %= x.ndim
    batch, length, channels = signal.shape
    count = len(sections)
    y = out if out is not None and _columns(out, axis, channels) is not None \
        and out.strides[axis] > 0 else np.empty(x.shape)
    target = _columns(y, axis, channels)
    state = None
    if zi is not None:  # stacked by section, laid out as x with its order along axis
        state = np.ascontiguousarray(zi, np.float64).reshape(count, batch, zi.shape[1 + axis],
                                                             channels)
    pieces = _segments((batch * channels, length), size) or [(0, length)]
    with Scratch() as scratch:
        backward = signal.strides[1] < 0  # reversed in time: copied forward, a step at once
        copy = scratch.empty((batch, max(b - a for a, b in pieces), channels),
                             np.float64) if backward else None
        for start, stop in pieces:
            piece = signal[:, start:stop]
            if backward:
                piece = copy[:, :stop - start]
                np.copyto(piece, signal[:, start:stop])
            done = _in_columns(sections, piece, state, target[:, start:stop],
                               keep_state or stop < length, size)
            if done is False:
                return None
            state = done
    if y is not out and out is not None:
        y = _numpy_backend._copy(out, y)
    if not keep_state:
        return y, None
    return y, state.reshape(count, *x.shape[:axis], state.shape[2], *x.shape[axis + 1:])


def _rows(v: np.ndarray, rows: int, length: int) -> np.ndarray | None:
    """``v`` (..., length) as a (rows, length) view whose samples follow one another, or
    None where it cannot be one."""
    row = _merged(v.shape, v.strides, range(v.ndim - 1))
    if row is None or (length > 1 and v.strides[-1] != v.itemsize):
        return None
    return np.lib.stride_tricks.as_strided(v, (rows, length), (row, v.itemsize))


def _moved(v: np.ndarray, source: int, destination: int) -> np.ndarray:
    """``np.moveaxis(v, source, destination)``, without its cost where that is ``v``."""
    if source % v.ndim == destination % v.ndim:
        return v
    return np.moveaxis(v, source, destination)


def _output(out, body, toeplitz, free, ends, reverse: bool = False) -> None:
    """The chunks' output ``out`` (rows, chunks, size): ``body`` times ``toeplitz``, plus
    each chunk's starting state times ``free``, block by block so that the sum is formed
    in cache. The starting state is the end state (from ``ends``) of the chunk before
    it, or rest for the first; where ``reverse``, of the chunk after it, ``ends`` being
    in the order of the cascade backward in time, and rest for the last."""
    rows, chunks, size = out.shape
    step = max(1, _BLOCK_ELEMENTS // size)  # chunks per block
    group = max(1, step // chunks)  # rows per block, where a row's chunks fit in one
    for row in range(0, rows, group):
        them = slice(row, row + group)
        for first in range(0, chunks, step):
            last = min(first + step, chunks)
            np.matmul(body[them, first:last], toeplitz, out=out[them, first:last])
            if reverse:  # chunk c starts from the end state of the cascade's chunk count-2-c
                last = min(last, chunks - 1)
                if first < last:
                    out[them, first:last][:, ::-1] += ends[
                        them, :, chunks - 1 - last:chunks - 1 - first].swapaxes(1, 2) @ free
                continue
            first = max(first, 1)
            if first < last:
                out[them, first:last] += ends[them, :, first - 1:last - 1].swapaxes(1, 2) @ free
