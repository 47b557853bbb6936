"""NumPy backend: the serial recurrence and the paper's Algorithm 1, vectorised.

Every function takes views whose time axis is ``axis`` and writes into ``out``;
validation, broadcasting and dtype promotion happened in the front door.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from cuscan import _dtypes
from cuscan._scratch import Scratch, axis_order

xp = np

# "auto" runs the chunked scan when a time step holds at most _MAX_PARALLEL_ROW
# bytes and the sequence has at least _MIN_PARALLEL_LENGTH steps and one step per
# _ROW_BYTES_PER_STEP bytes of a step. Measured on (T, width) arrays of float32,
# float64, complex64 and complex128 by benchmarks/numpy_methods.py: the crossover
# follows a step's bytes, whatever the dtype. Narrow steps cost the serial loop
# mostly Python overhead, which chunking saves; wide ones it streams through in
# fewer passes over memory. Where the crossover lies differs between machines, and
# moves with the serial loop's cost per step: the limits were refitted when that
# fell by about half (the steps taken by iteration). On the grid measured then,
# these take at most 1.09 times the better method's time, where the former ones
# (steps of up to 2 KiB from 48 steps and one step per 16 bytes, and of up to 3 KiB
# from 1,024 steps) would take up to 1.72. Below _MIN_PARALLEL_LENGTH the serial
# loop is the faster on any step, and from there Hillis and Steele's scan takes the
# narrowest ones (_MIN_DOUBLING_LENGTH).
_MAX_PARALLEL_ROW = 1024
_MIN_PARALLEL_LENGTH = 64
_ROW_BYTES_PER_STEP = 3
# The chunked scan's vector length, in elements: _STEP_ELEMENTS for arrays of
# fewer elements than _STEP_ELEMENTS_UP_TO, _LARGE_STEP_ELEMENTS for larger ones
# (see _chunk_length).
_STEP_ELEMENTS = 4096
_STEP_ELEMENTS_UP_TO = 2**19
_LARGE_STEP_ELEMENTS = 16384
# The chunked scan works on contiguous copies of its chunks (position in chunk
# first) when a time step holds at most _MAX_STRIDED_ROW bytes, or at most
# _MAX_APART_CHUNK_ROW bytes whose elements lie a cache line or more apart (a
# time-contiguous operand, which it then copies from as it lies, instead of from a
# time-major copy: below, but for copies through a buffer, next). Measured by
# benchmarks/numpy_methods.py.
_MAX_STRIDED_ROW = 128
_MAX_APART_CHUNK_ROW = 256
# An operand whose time step has its elements a cache line or more apart (a
# time-contiguous layout, such as (C, T) along axis -1) touches a line per
# element at every step. The scan runs on time-major copies instead where that
# is faster (measured by benchmarks/numpy_methods.py): at least
# _MIN_SCATTERED_LENGTH steps wider than _MAX_STRIDED_ROW bytes (narrower ones
# the chunked scan copies anyway, and so it does with steps of up to
# _MAX_APART_CHUNK_ROW bytes it scans), or from _MIN_SHORT_SCATTERED_LENGTH steps
# where the operand holds _MIN_SHORT_SCATTERED_ELEMENTS. The chunked scan reads
# every step twice, and NumPy's strided loops are slow on small elements: only
# where "auto" scans serially, elements of at least _MIN_VIEW_ITEMSIZE bytes
# whose lines spread over the cache sets (a stride that is not a multiple of
# _ALIASING_STRIDE bytes) and over at most _MAX_VIEW_PAGES pages of _PAGE bytes
# a step stay as they are: there, copies took up to 2.2x the time.
# The copies are made a segment of time at a time (_SEGMENT_BYTES), whatever the
# operand's size; a copy of a whole signal (cuscan.signal's, for a framework's
# tensors) is made up to _MAX_COPY_BYTES.
_CACHE_LINE = 64
_MIN_SCATTERED_LENGTH = 256
_MIN_SHORT_SCATTERED_LENGTH = 32
_MIN_SHORT_SCATTERED_ELEMENTS = 2**15
_MIN_VIEW_ITEMSIZE = 8
_ALIASING_STRIDE = 1024
_PAGE = 4096
_MAX_VIEW_PAGES = 512
_MAX_COPY_BYTES = 2**29
# A step whose elements lie in several runs, each contiguous (or nearly), such as (B, T, D)
# along axis 1, costs NumPy's loops an outer loop over the runs at every vector operation
# (1.2 us against 0.5 for 2,048 float32 elements in 8 runs or in one): from
# _MIN_SHORT_SCATTERED_LENGTH steps of at most _MAX_RUNS_ROW bytes, _MIN_RUNS_BYTES in all
# or any number where the scan would run on the steps as they lie (the serial loop; not
# Hillis and Steele's scan or the chunked scan on narrow steps, which copy their own), the
# scan runs on time-major copies (a segment at a time, in cache) instead
# (benchmarks/numpy_runs.py).
_MAX_RUNS_ROW = 2**14
_MIN_RUNS_BYTES = 2**16
# Where an operand or the result would be copied (time-major, or to the accumulator's
# dtype) and the copy would exceed twice _SEGMENT_BYTES, the scan runs over segments of
# time of about _SEGMENT_BYTES per array (at least _MIN_SCATTERED_LENGTH steps), one
# after the other from the state the last one left: the copies hold a segment each
# rather than the whole operand, and stay in cache from the copy through the scan to the
# copy back.
_SEGMENT_BYTES = 2**20
# Copies between a time-major array and one that is not (a single channel's
# chunks, (C, L) copied to (L, C) for the chunked scan and back; time-contiguous
# operands copied time-major and their results back) go tile by tile over the
# first two axes: element by element, with both sides long, every element read
# or written lands on a cache line and a page of its own. A tile is square, of
# about _TILE_BYTES, or as long as a narrow axis and long enough along the other to
# hold as many bytes; its sides are at least _MIN_TILE elements of the first two
# axes, which may hold large blocks of the others (benchmarks/numpy_tiles.py).
_TILE_BYTES = 2**18
_MIN_TILE = 64
# Where `_copy` makes a large operand's chunks time-major for the chunked scan, or copies
# the result's back, NumPy's inner loop reads the source across a stride; a line it reads
# serves the next tile rows only while the L1 cache keeps it. Lines a stride of k lines
# apart fall into _L1_SETS / gcd(k, _L1_SETS) of the cache's sets, _L1_WAYS lines each
# (64 sets of 8 ways: a 32 KiB L1 data cache, as many x86-64 cores have; those of 48 KiB have
# 12 ways), so the tile's side along that loop is cut to as many elements, at least
# _MIN_TILE, the other side lengthened to keep its size: one channel's chunks of 64 float32
# steps (lines 4 apart, 16 sets) take 128 elements, where with 1,024 the copy read each line
# again from the L2 cache. Copies of up to _TILE_BYTES (one tile) and of elements over
# _MAX_STAGED_ITEMSIZE bytes, whose lines hold too few elements, stay as they are
# (benchmarks/numpy_reach.py).
_L1_SETS = 64
_L1_WAYS = 8
# A copy into rows of at most _NARROW_COLUMNS elements from columns (such as a few
# channels' rows copied back time-major) goes a column at a time: NumPy runs its inner
# loop along the destination's rows, over those few elements at a time. One column at a
# time took 0.25 of the time for 2 columns of 441,000 float64 elements and 0.5 for 4,
# where 8 took 1.1 (ad hoc, on an x86-64 machine of 2 cores).
_NARROW_COLUMNS = 4
# NumPy's inner loop runs along the destination's contiguous axis; where the source it
# reads there lies transposed, with a stride that is a multiple of _ALIASING_STRIDE bytes
# (a power-of-two number of time steps in each channel, or of channels in each step), every
# line it touches maps to the same few cache sets, which hold a few of a tile's lines: the
# copy reads each line again and again from memory. Each tile is then copied first into a
# buffer laid out as the source, its lines padded by one cache line (contiguous runs), and
# from there (in cache, its lines spread over the sets) into the destination; elements of
# up to _MAX_STAGED_ITEMSIZE bytes, from _MIN_STAGED elements along the destination's
# contiguous axis (benchmarks/numpy_staged.py). Where such a copy makes an operand
# time-major in elements of at most _MAX_STAGED_CHUNK_ITEMSIZE bytes, the chunked scan
# takes it for steps of up to _MAX_APART_CHUNK_ROW bytes too, rather than copy its chunks
# from the operand as it lies.
_MAX_STAGED_ITEMSIZE = 8
_MIN_STAGED = 32
_MAX_STAGED_CHUNK_ITEMSIZE = 4
# So are tiles read across a multiple of _FEW_SETS_STRIDE bytes (lines a multiple of 4
# apart, in at most 16 of the 64 sets: 640 float32 steps of each channel, or 64 float32
# channels of each step copied back into time-contiguous rows), from _MIN_FEW_SETS_STAGED
# elements along the destination's contiguous axis: 32 to 48 of them took 1.2 to 1.4 times
# as long through the buffer (benchmarks/numpy_staged.py). The chunked scan's choice above
# stays with multiples of _ALIASING_STRIDE.
_FEW_SETS_STRIDE = 256
_MIN_FEW_SETS_STAGED = 64
# Arranging for NumPy's inner loop to run over more than the few channels of one
# row (opaque rows in copies, a materialised row of time-invariant decays) costs
# a few microseconds per array; it is done from _WHOLE_ROWS_FROM rows (time steps
# times chunks), where the inner loop's per-row cost outgrows it.
_WHOLE_ROWS_FROM = 4096
# The serial loop's decays constant in time and broadcast over some channels (as (D,)
# decays for (B, T, D) along axis 1) are laid out whole, as the result's steps, from
# _ROW_STEPS steps of _ROW_ELEMENTS elements: each step's inner loop then runs over the
# whole step, not the few channels between broadcast axes (benchmarks/numpy_serial_rows.py).
_ROW_STEPS = 32
_ROW_ELEMENTS = 64
# The chunked scan's copies of narrow steps lay out the chunks and channels of a step as
# the operand does (_chunk_order; False keeps the chunks outermost, for benchmarks), and
# copy time-contiguous channels' runs of chunks of at least _MIN_CHUNK_RUN_BYTES one at a
# time where they lie pages apart (_runs_apart; benchmarks/numpy_chunk_order.py).
_CHUNKS_AS_THEY_LIE = True
_MIN_CHUNK_RUN_BYTES = 2**16
# Decays constant in time turn each chunk's scan into a product with one L x L matrix of
# their powers (see _blocked), run by BLAS on the operands in place where every channel's
# steps are contiguous (one channel; (C, T) along axis -1), from _BLOCKED_FROM steps and
# _BLOCKED_ELEMENTS_FROM elements, or any number of elements where one decay serves every
# channel (one channel included), in real dtypes, and in complex ones of an itemsize in
# _BLOCKED_COMPLEX_FROM from that many steps. L is _BLOCK_BYTES // itemsize, halved (down
# to _MIN_BLOCK) while a matrix per channel would hold more than 1 / _BLOCK_SHARE of a
# channel's steps. Each product covers about _BLOCK_ELEMENTS elements, so that their copy,
# with the carries added, is still in cache for the product, and at least _MIN_BLOCK_ROWS
# chunks of every channel: BLAS is slow on smaller matrices. From 8,192 elements the
# products took 0.17 to 1.22 of the time of the chunked, doubling or serial scan, forward
# and backward. Below, with a decay per channel on 2 to 16 channels they took 0.76 to 1.25
# of it; with one decay for all, from 64 steps, 0.55 to 0.93 forward and 0.74 to 1.01
# backward (benchmarks/numpy_blocked.py's "elements", at 3e04676). A product costs L
# multiply-adds per element, four times as many flops in complex: there the products took
# 0.36 to 1.04 of the time of the chunked or serial method in complex64 from 2,048 steps,
# but up to 1.53 on 256, and 0.80 to 1.73 in complex128 (benchmarks/numpy_blocked.py).
# (One decay for every channel takes the nested products below first, up to
# _NESTED_ELEMENTS elements.)
_BLOCKED_FROM = 64
_BLOCKED_ELEMENTS_FROM = 8192
_BLOCKED_COMPLEX_FROM = {8: 2048}
_BLOCK_BYTES = 128
_MIN_BLOCK = 8
_BLOCK_SHARE = 4
# A scan whose decay is one number for every step and channel is, from _MIN_POWERS_LENGTH
# steps, one product with the matrix of its powers where that costs at most _POWERS_WORK
# multiply-adds (steps squared times channels) on at most _POWERS_LENGTH steps, and
# otherwise, on up to _NESTED_ELEMENTS elements, or _NESTED_ROWS_ELEMENTS on at most
# _NESTED_ROWS channels whose steps lie contiguous, products over blocks of _NESTED_BLOCK
# steps nested to the same, of at most _NESTED_WORK multiply-adds (`_nested`); so are
# `_blocked`'s carries over its chunks. The single product, against up to 64 steps and
# 16,384 elements, alternated (ad hoc): one channel of 100 to 4,096 steps took 0.54 to 0.82
# of the time forward and 0.63 to 0.94 backward, 8 to 64 channels of 128 steps 0.70 to
# 0.90, and 16 of 256 1.08 and 0.89; against the serial loop and Hillis and Steele's scan,
# on 1 and 16 channels, 0.35 to 1.00 from 8 steps, but 1.02 to 1.26 on 1 to 4. The nested
# products took 0.29 to 0.89 of the blocked, chunked, doubling or serial scan's time forward
# and 0.39 to 0.87 backward on 1 to 64 channels of 1,024 to 65,536 elements, either layout,
# four dtypes (geometric means 0.61 and 0.66), and 0.45 to 0.93 and 0.61 to 0.95 on 1 to 16
# time-contiguous channels of 2^17 and 2^18; beyond, up to 1.40 and 1.56 (32 or 64 such
# channels, complex128), and on time-major channels forward 0.64 to 1.18 but backward 0.81
# to 1.16. Blocks of 8 or 32 steps took 0.83 to 1.24 of the time of 16 (geometric means
# 1.06 and 1.00), inner single products up to 2^14 or 2^18 multiply-adds 0.95 to 1.26 of
# the time up to 2^16 (benchmarks/numpy_nested.py, at 10a3715).
_MIN_POWERS_LENGTH = 8
_POWERS_LENGTH = 256
_POWERS_WORK = 1 << 20
_NESTED_BLOCK = 16
_NESTED_ELEMENTS = 1 << 16
_NESTED_ROWS_ELEMENTS = 1 << 18
_NESTED_ROWS = 16
_NESTED_WORK = 1 << 16
_BLOCK_ELEMENTS = 65536
_MIN_BLOCK_ROWS = 256
# Short scans of few bytes take Hillis and Steele's scan (`_doubling`): ceil(log2 T)
# steps, each a few vector operations over the whole array, where the chunked scan
# takes Python steps by the chunk and its recursion, and the serial loop two per time
# step. Its T log T work pays from _MIN_DOUBLING_LENGTH steps of at most
# _MAX_DOUBLING_ROW bytes, up to _MAX_DOUBLING_BYTES in all, in the accumulator's dtype
# (benchmarks/numpy_methods.py).
_MIN_DOUBLING_LENGTH = 64
_MAX_DOUBLING_ROW = 256
_MAX_DOUBLING_BYTES = 65536
# The chunked scan runs over segments of time of about _CACHE_SEGMENT_BYTES of the
# result (at least _MIN_CACHE_SEGMENT steps), one after the other from the state the
# last one left, so that its second pass finds the operands, and their copies, in
# cache (benchmarks/numpy_cache.py).
_CACHE_SEGMENT_BYTES = 2**21
_MIN_CACHE_SEGMENT = 256


# Overflow, underflow and NaN are data here, handled as the serial recurrence
# handles them (and as the GPU does, silently); intermediate chunk products may
# overflow without harm. So no floating-point warnings are raised.
_quiet = np.errstate(all="ignore")


@_quiet
def forward(decays, impulses, initial_state, out, axis: int, method: str) -> None:
    """Compute ``out[t] = decays[t] * out[t-1] + impulses[t]`` along ``axis``."""
    acc = _dtypes.accumulator(out.dtype)
    a, x, target = (_time_first(v, axis) for v in (decays, impulses, out))
    keep = method != "serial" and _blocked_layout(a, x, target)
    h = _initial(initial_state, x.shape[1:], acc)
    pieces = _segments((a, x), target, acc, keep)
    if pieces is None:
        _forward(a, x, h, target, acc, method, keep)
        return
    method = _method(method, target, acc, keep)
    for start, stop in pieces:
        h = _forward(a[start:stop], x[start:stop], h, target[start:stop], acc, method, keep)


def _forward(a, x, h0, target, acc, method: str, keep: bool):
    """`forward` on time-first views, from ``h0``; returns the last state (in ``acc``)."""
    with Scratch() as scratch:
        a, x = (_operand(v, acc, scratch, keep, method) for v in (a, x))
        work = _buffer(target, acc, scratch, keep, method)
        scan(a, x, h0, work, method)
        if work is target:
            return work[-1] if len(work) else h0
        _copy(target, work)
        return work[-1].copy()  # work is scratch


def _segments(operands, target, acc, keep: bool = False) -> list[tuple[int, int]] | None:
    """The segments of time (start, stop) to scan one after the other (see
    _SEGMENT_BYTES), or None to scan the whole at once: where nothing larger than two
    segments is copied, or the scan is too short to cut. With ``keep`` (a blocked
    layout, `_blocked_layout`), the operands are scanned in their layouts, copied only
    into ``acc``: from half precision, segment by segment too."""
    itemsize = np.dtype(acc).itemsize
    if target.size * itemsize <= 2 * _SEGMENT_BYTES:  # no copy is larger than the result's
        return None

    def copied(view) -> int:
        """The bytes of ``view``'s copy, 0 where it is scanned as it lies."""
        if view.dtype == acc and (keep or not _scattered(view, acc)):
            return 0
        return _stored(view).size * itemsize

    if max(copied(v) for v in (*operands, target)) <= 2 * _SEGMENT_BYTES:
        return None
    row = math.prod(target.shape[1:]) * itemsize
    return _pieces(target.shape[0], row, _SEGMENT_BYTES, _MIN_SCATTERED_LENGTH)


def _pieces(length: int, row: int, size: int, least: int) -> list[tuple[int, int]] | None:
    """``length`` steps of ``row`` bytes cut (`_cut`) into segments of about ``size`` bytes,
    at least ``least`` steps each; None where that makes fewer than two."""
    step = max(least, size // max(row, 1))
    return _cut(length, step) if length >= 2 * step else None


def _cut(length: int, step: int) -> list[tuple[int, int]]:
    """``length`` steps cut into pieces (start, stop) of ``step``, with no short last
    piece: one shorter than half a step is merged into the one before."""
    bounds = [*range(0, length, step), length]
    if len(bounds) > 2 and length - bounds[-2] < step // 2:
        del bounds[-2]
    return list(itertools.pairwise(bounds))


def _method(method: str, target, acc, blocked: bool = False) -> str:
    """``method``, "auto" resolved for the whole scan (not for each segment): as `scan`
    resolves it, the parallel methods for a ``blocked`` layout (`_blocked_layout`)."""
    if method != "auto":
        return method
    if blocked:
        return "parallel"
    row = math.prod(target.shape[1:]) * np.dtype(acc).itemsize
    return "parallel" if _parallel_wins(target.shape[0], row) else "serial"


@_quiet
def backward(grad_output, decays, output, initial_state, grad_decays, grad_impulses,
             grad_initial_state, axis: int) -> None:
    """The vector-Jacobian product, written into the three ``grad_*`` buffers.

    ``grad_impulses[t] = grad_output[t] + conj(decays[t+1]) * grad_impulses[t+1]``
    is a reverse recurrence over the decays shifted by one; then
    ``grad_decays[t] = conj(output[t-1]) * grad_impulses[t]`` with
    ``output[-1] = initial_state`` and ``grad_initial_state = conj(decays[0]) *
    grad_impulses[0]``.
    """
    acc = _dtypes.accumulator(grad_impulses.dtype)
    go, a, h, gx, ga = (_time_first(v, axis) for v in
                        (grad_output, decays, output, grad_impulses, grad_decays))
    keep = _blocked_layout(a[1:], go[:-1], gx[:-1])
    h0 = _initial(initial_state, go.shape[1:], acc)
    pieces = _segments((go, a, h), gx, acc, keep)
    method = "auto" if pieces is None else _method("auto", gx, acc, keep)
    after = None  # the gradient at the step after the segment
    for start, stop in reversed(pieces or [(0, go.shape[0])]):
        after = _backward(go, a, h, h0, gx, ga, start, stop, after, acc, keep, method)
    if grad_initial_state is not None:
        first = np.conj(np.asarray(a[0], acc))
        grad_initial_state[...] = (first * after).reshape(grad_initial_state.shape)


def _backward(go, a, h, h0, gx, ga, start: int, stop: int, after, acc, keep: bool,
              method: str):
    """`backward` over the steps ``start`` to ``stop`` of the time-first views, given
    the gradient at ``stop`` (``after``; None at the end); returns the gradient at
    ``start`` (in ``acc``)."""
    with Scratch() as scratch:
        count = stop - start
        go = _operand(go[start:stop], acc, scratch, keep, method)
        # and the decay coupling to ``after``
        a = _operand(a[start:stop + 1], acc, scratch, keep, method)
        target = gx[start:stop]
        g = _buffer(target, acc, scratch, keep, method)
        ga = ga[start:stop]
        # Reverse time by viewing every array backwards, then run the forward scan (over
        # complex decays conjugated into the decays' gradient, which is written after).
        g[-1] = go[-1] if after is None else go[-1] + np.conj(a[count]) * after
        scan(_conj(a[count - 1:0:-1], scratch, ga[count - 1:0:-1]), go[-2::-1], g[-1],
             g[-2::-1], method)
        if g is not target:
            # The decays' gradient reads it in the output's layout (a product across
            # layouts reads one of them strided): from the target, or, where that is of
            # lower precision and laid out otherwise, from a copy in that layout.
            if target.dtype != acc and not keep and _scattered(target, acc, method):
                g = _copy(scratch.like(target, acc), g)
            _copy(target, g)
            if target.dtype == acc:
                g = target
        h = h[max(start - 1, 0):stop]
        if h.dtype != acc:
            h = _converted(h, acc, scratch)
        ga[0] = np.conj(h0 if start == 0 else h[0]) * g[0]
        previous = h[:-1] if start == 0 else h[1:-1]
        if previous.dtype.kind == "c" and ga.dtype == previous.dtype:
            # conj(h) where the product goes, no temporary
            np.multiply(np.conjugate(previous, out=ga[1:]), g[1:], out=ga[1:])
        else:  # no temporary product
            np.multiply(_conj(previous), g[1:], out=ga[1:], casting="unsafe")
        return g[0] if g is target else g[0].copy()  # g may be scratch


def _time_first(view, axis: int):
    """``view`` with time first and at least one channel axis after it."""
    axis %= view.ndim
    if axis:  # as np.moveaxis(view, axis, 0), which costs 2 us (a small scan's 16 steps)
        view = view.transpose(axis, *range(axis), *range(axis + 1, view.ndim))
    return view if view.ndim > 1 else view[:, None]


def _scattered(view, dtype, method: str = "auto") -> bool:
    """Whether the time-first ``view`` is to be scanned by ``method`` in a time-major copy
    of ``dtype`` (broadcast axes, stride 0, aside)."""
    return _scattered_layout(view.shape, view.strides, dtype, method=method)


def _scattered_layout(shape, strides, dtype, most: float = math.inf,
                      once: bool = True, method: str = "auto") -> bool:
    """`_scattered` for a time-first layout given by its ``shape`` and byte ``strides``,
    which need not be a NumPy array's (cuscan.signal asks it of framework tensors), of
    at most ``most`` bytes in ``dtype``, scanned ``once`` by ``method``: where a copy is
    to serve several scans (cuscan.signal's whole filters), the chunked scan's own copies
    from the operand as it lies (_MAX_APART_CHUNK_ROW), made for each scan, do not
    count."""
    length = shape[0]
    if length < _MIN_SHORT_SCATTERED_LENGTH:
        return False
    if shape[-1] > 1 and 0 < abs(strides[-1]) < _CACHE_LINE:  # the usual case, at once
        return once and _in_runs(shape, strides, dtype, method)
    axes = _step_axes(shape, strides)
    stride = min((stride for _, stride in axes), default=0)
    itemsize = np.dtype(dtype).itemsize
    row = math.prod(shape[1:]) * itemsize
    if stride < _CACHE_LINE or row <= _MAX_STRIDED_ROW or length * row > most:
        return False
    touched = math.prod(size for size, _ in axes)  # elements a step, broadcast aside
    if once and row <= _MAX_APART_CHUNK_ROW and _parallel_wins(length, row) and not (
            itemsize <= _MAX_STAGED_CHUNK_ITEMSIZE and touched >= _MIN_STAGED
            and stride % _ALIASING_STRIDE == 0):
        return False  # the chunked scan copies its chunks from the operand
    if length < _MIN_SCATTERED_LENGTH:
        return length * touched >= _MIN_SHORT_SCATTERED_ELEMENTS
    # The pages one step of the operand touches: one per element, or its whole span.
    span = sum((size - 1) * stride for size, stride in axes) + itemsize
    pages = min(touched, span / _PAGE)
    return (itemsize < _MIN_VIEW_ITEMSIZE or _parallel_wins(length, row)
            or stride % _ALIASING_STRIDE == 0 or pages > _MAX_VIEW_PAGES)


def _in_runs(shape, strides, dtype, method: str = "auto") -> bool:
    """Whether the steps of a time-first layout, whose last axis is contiguous or nearly,
    lie in several runs that a time-major copy pays for (see _MAX_RUNS_ROW; below
    _MIN_RUNS_BYTES, only where `scan` by ``method`` would not copy them itself,
    `_copies_steps`)."""
    length, row = shape[0], math.prod(shape[1:]) * np.dtype(dtype).itemsize
    if not (length >= _MIN_SHORT_SCATTERED_LENGTH and row <= _MAX_RUNS_ROW):
        return False
    if length * row < _MIN_RUNS_BYTES and _copies_steps(length, row, method):
        return False
    return not _merge(_step_axes(shape, strides))


def _step_axes(shape, strides) -> list[tuple[int, int]]:
    """(size, absolute byte stride) of the axes a step of a time-first layout runs over:
    those after time, but for broadcast (stride 0) and single-element ones."""
    return [(size, abs(stride)) for size, stride in zip(shape[1:], strides[1:], strict=True)
            if size > 1 and stride]


def _apart(view) -> bool:
    """Whether the elements of a step of the time-first ``view`` lie a cache line or more
    apart (broadcast axes aside)."""
    axes = _step_axes(view.shape, view.strides)
    return min((stride for _, stride in axes), default=0) >= _CACHE_LINE


def _operand(view, dtype, scratch: Scratch, keep: bool = False, method: str = "auto"):
    """The time-first ``view`` in ``dtype`` for a scan by ``method``, time-major where it is
    scattered (its broadcast axes stay broadcast; a copy from ``scratch``) unless
    ``keep``: in its layout."""
    if keep or not _scattered(view, dtype, method):
        if view.dtype == dtype:
            return view
        return np.broadcast_to(_converted(_stored(view), dtype, scratch), view.shape)
    stored = _stored(view)
    return np.broadcast_to(_copy(scratch.empty(stored.shape, dtype), stored), view.shape)


def _conj(view, scratch: Scratch | None = None, into=None):
    """The complex conjugate of ``view``, its broadcast axes still broadcast; real views as
    they are. Written into ``into`` (free memory of ``view``'s shape) where ``view`` is not
    broadcast and both have one dtype and one order of axes in memory, else into an array
    from ``scratch`` where given."""
    if not np.iscomplexobj(view):
        return view
    stored = _stored(view)
    if (into is None or stored.shape != view.shape or into.dtype != view.dtype
            or axis_order(into) != axis_order(view)):
        into = None if scratch is None else scratch.like(stored, stored.dtype)
    return np.broadcast_to(np.conjugate(stored, out=into), view.shape)


def _stored(view):
    """The elements ``view`` stores: its broadcast axes (stride 0) cut to length 1."""
    return view[tuple(slice(None) if stride else slice(0, 1) for stride in view.strides)]


def _buffer(target, dtype, scratch: Scratch, keep: bool = False, method: str = "auto"):
    """Where to scan into for the time-first ``target`` by ``method``: itself where it has
    ``dtype`` and is not scattered, else an array from ``scratch`` copied into it after:
    laid out as ``target`` is with ``keep`` or where the scan works in copies of its own
    (`_in_copies`), so that the copy after converts without transposing, else time-major."""
    scattered = not keep and _scattered(target, dtype, method)
    if target.dtype == dtype and not scattered:
        return target
    if keep or (not scattered and _in_copies(target, dtype, method)):
        return _like(target, dtype, scratch)
    return scratch.empty(target.shape, dtype)


def _in_copies(target, dtype, method: str) -> bool:
    """Whether `scan` by ``method`` into ``target`` in ``dtype`` works in copies of its own
    (`_copies_steps`) and writes its result into ``target`` at the end, in any layout alike;
    from _MIN_SCATTERED_LENGTH steps: on shorter scans a buffer laid out as ``target`` took
    up to 1.05 of the time (a few microseconds)."""
    length, row = target.shape[0], math.prod(target.shape[1:]) * np.dtype(dtype).itemsize
    return length >= _MIN_SCATTERED_LENGTH and _copies_steps(length, row, method)


def _copies_steps(length: int, row: int, method: str = "auto") -> bool:
    """Whether `scan` by ``method`` over ``length`` steps of ``row`` bytes works in copies of
    its own rather than on the steps as they lie: Hillis and Steele's scan (`_doubles`), or
    the chunked scan on steps of at most _MAX_STRIDED_ROW bytes, whose chunks it copies (as
    `scan` resolves "auto", the operands aside)."""
    if method == "serial" or length < 4:
        return False
    return _doubles(length, row) or (row <= _MAX_STRIDED_ROW and (
        method == "parallel" or _parallel_wins(length, row)))


def _converted(view, dtype, scratch: Scratch):
    """A copy of the time-first ``view`` in ``dtype``, laid out as it is (`_like`)."""
    into = _like(view, dtype, scratch)
    np.copyto(into, view, casting="unsafe")
    return into


def _like(view, dtype, scratch: Scratch):
    """An array from ``scratch`` of the time-first ``view``'s shape in ``dtype``, laid out
    as ``view`` is: the order of its axes in memory, and the direction of time."""
    if view.strides[0] < 0:
        return scratch.like(view[::-1], dtype)[::-1]
    return scratch.like(view, dtype)


def _initial(initial_state, channel_shape, dtype):
    if initial_state is None:
        return np.zeros(channel_shape, dtype)
    return np.asarray(initial_state, dtype).reshape(channel_shape)


def scan(a, x, h0, out, method: str) -> None:
    """Fill ``out`` (T, ...) with the recurrence, starting from ``h0``."""
    length = a.shape[0]
    if method != "serial" and a.size and _one_decay(a) and _nested(a[(0,) * a.ndim], x, h0,
                                                                   out):
        return
    blocked = method != "serial" and _blocked_layout(a, x, out)
    doubling = method != "serial" and _doubles(length, _row(out))
    if method == "auto":
        parallel = blocked or doubling or _parallel_wins(length, _row(out))
        method = "parallel" if parallel else "serial"
    if method == "serial" or length < 4:
        _serial(a, x, h0, out)
    elif blocked and _blocked(a, x, h0, out):
        pass
    elif doubling:
        _doubling(a, x, h0, out)
    else:
        _in_cache(a, x, h0, out)


def _nested(decay, x, h0, out) -> bool:
    """The scan of ``x`` with one ``decay`` (a NumPy scalar) for every step and channel,
    from _MIN_POWERS_LENGTH steps: one product with the lower-triangular matrix of its powers
    where that costs at most _POWERS_WORK multiply-adds on at most _POWERS_LENGTH steps (on
    the operand as it lies), otherwise, where `_nests` says so, products over nested blocks
    (`_nested_rows`) on a copy of the channels' rows. Returns False, having written nothing
    useful, where the operands are shorter or larger or the result is not all finite (a
    product spreads an infinity or NaN over its block)."""
    length = x.shape[0]
    single = _single_product(length, x.size)
    if length < _MIN_POWERS_LENGTH or not (single or _nests(x.size, out)):
        return False
    if out.size == 0:
        return True
    columns = np.reshape(x, (length, -1))
    with Scratch() as scratch:
        if single:
            matrices = _powers_matrices(decay, length, out.dtype)
            if matrices is None:
                return False
            powers, weights = matrices
            result = np.matmul(weights.T, columns, out=scratch.empty(columns.shape, out.dtype))
            result += np.multiply.outer(powers, np.reshape(h0, -1))
        else:
            rows = out.T if out.ndim == 2 else scratch.empty(columns.shape[::-1], out.dtype)
            # A scan backwards in memory (reverse, and every gradient) runs on the rows as
            # they lie, from their ends, so that the products write them in place.
            backwards = rows.strides[-1] < 0
            order = slice(None, None, -1 if backwards else 1)
            if not _nested_rows(decay, columns.T[:, order], np.reshape(h0, -1), rows[:, order],
                                scratch, backwards):
                return False
            result = rows.T
        if not np.isfinite(np.add.reduce(result, axis=None)):
            return False
        if single or out.ndim > 2:
            np.copyto(out, result.reshape(out.shape), casting="unsafe")
    return True


def _nested_rows(decay, v, h0, into, scratch: Scratch, backwards: bool = False) -> bool:
    """The scan of the rows ``v`` (rows, steps) with one ``decay`` from ``h0`` (rows; None:
    from rest), written into ``into`` (of ``v``'s shape), from the rows' ends where
    ``backwards``: one product with the matrix of the powers of ``decay`` (transposed
    backwards) where that costs at most _NESTED_WORK multiply-adds on at most _POWERS_LENGTH
    steps; otherwise blocks of _NESTED_BLOCK steps (counted from the end backwards), in a
    copy from ``scratch``: their end states from rest (a product with the matrix's last
    column) are scanned over the blocks with the decay over a block, in double precision
    (`_dtypes.carry`), and each block is then one product from the state entering it. False
    where the matrices are not all finite."""
    count, steps = v.shape
    dtype = into.dtype
    single = _single_product(steps, v.size, _NESTED_WORK)
    block = steps if single else min(steps, _NESTED_BLOCK)
    matrices = _powers_matrices(decay, block, dtype)
    if matrices is None:
        return False
    powers, weights = matrices
    whole = powers[-1]  # the decay over a block
    if backwards:  # h[t] = sum over s >= t of a**(s - t) x[s]
        weights, powers = weights.T, powers[::-1]
    if block == steps:
        np.matmul(v, weights, out=into)
        if h0 is not None:
            into += np.multiply.outer(h0, powers)
        return True
    blocks = -(-steps // block)
    pad = blocks * block - steps  # zeros after the last step: before the first backwards
    padded = scratch.empty((count, blocks, block), dtype)
    flat = padded.reshape(count, -1)
    body, rest = (flat[:, pad:], flat[:, :pad]) if backwards else (flat[:, :steps],
                                                                    flat[:, steps:])
    np.copyto(body, v, casting="unsafe")
    rest[...] = 0
    # The scan's first step (a block's too, where the state entering it comes in), the blocks
    # before another in scan order (in memory order), and a block's last step.
    first, leading, last = (-1, slice(1, None), 0) if backwards else (0, slice(None, -1), -1)
    if h0 is not None:
        padded[:, first, first] += decay * h0
    # The blocks' end states from rest, scanned over the blocks: the state entering each.
    # (Every row's blocks in one product, one BLAS call: a stack of rows is a call a row.)
    blocked = flat.reshape(-1, block)
    ends = (blocked @ weights[:, last]).reshape(count, blocks)[:, leading]
    ends = ends.astype(whole.dtype, copy=False)
    # Scanned backwards too, where the blocks run so (in memory order, as BLAS needs).
    starts = scratch.empty(ends.shape, whole.dtype)
    if not _nested_rows(whole, ends, None, starts, scratch, backwards):
        return False
    # A state c entering a block adds a**(k + 1) * c at its k-th step: a * c added to its
    # first step before the product gives it.
    following = slice(None, -1) if backwards else slice(1, None)
    padded[:, following, first] += decay * starts
    if pad == 0 and into.strides[-1] == into.itemsize and (
            count == 1 or into.strides[0] == steps * into.itemsize):  # BLAS writes it
        np.matmul(blocked, weights, out=into.reshape(-1, block))
    else:
        result = np.matmul(blocked, weights, out=scratch.empty(blocked.shape, dtype))
        result = result.reshape(count, -1)
        np.copyto(into, result[:, pad:] if backwards else result[:, :steps])
    return True


def _nests(size: int, out) -> bool:
    """Whether `_nested` takes a scan of ``size`` elements into the time-first ``out`` as
    nested products: up to _NESTED_ELEMENTS elements, or _NESTED_ROWS_ELEMENTS on at most
    _NESTED_ROWS channels whose steps lie contiguous (on one channel axis, the products write
    them in place)."""
    if size <= _NESTED_ELEMENTS:
        return True
    return (size <= _NESTED_ROWS_ELEMENTS and abs(out.strides[0]) == out.itemsize
            and size // out.shape[0] <= _NESTED_ROWS)


def _single_product(steps: int, size: int, work: int | None = None) -> bool:
    """Whether a scan of one decay over ``steps`` steps of ``size`` elements in all is one
    product with the matrix of its powers: at most _POWERS_LENGTH steps and ``work``
    multiply-adds (_POWERS_WORK by default)."""
    return steps <= _POWERS_LENGTH and steps * size <= (_POWERS_WORK if work is None else work)


def _powers_matrices(decay, steps: int, dtype) -> tuple | None:
    """`_scalar_block_matrices` of the NumPy scalar ``decay`` for ``steps`` steps in
    ``dtype``: its powers ``a**(k + 1)`` (double precision) and the upper-triangular matrix
    ``W[s, t] = a**(t - s)``; None where they are not all finite."""
    matrices = _scalar_block_matrices(decay.dtype.str, decay.tobytes(), (1,), steps,
                                      np.dtype(dtype).str)
    return None if matrices is None else (matrices[0][0], matrices[1][0])


def _blocked_layout(a, x, out) -> bool:
    """Whether the time-first operands suit `_blocked`: decays constant in time, and
    the steps of every channel of ``x`` and ``out`` contiguous, in the same direction."""
    if not _blocks(x.shape[0], x.size, _one_decay(a)) or a.strides[0] != 0 or (
            out.dtype.kind == "c"
            and x.shape[0] < _BLOCKED_COMPLEX_FROM.get(out.dtype.itemsize, math.inf)):
        return False
    steps = x.strides[0], out.strides[0]
    return (abs(steps[0]) == x.itemsize and abs(steps[1]) == out.itemsize
            and (steps[0] > 0) == (steps[1] > 0))


def _one_decay(a) -> bool:
    """Whether the decays ``a`` are one number for every step and channel."""
    return not any(stride for size, stride in zip(a.shape, a.strides, strict=True)
                   if size > 1)


def _blocks(length: int, size: int, single: bool = False) -> bool:
    """Whether `_blocked` pays for ``length`` steps of ``size`` elements in all, with a
    ``single`` decay for every channel (or a single channel)."""
    return length >= _BLOCKED_FROM and (single or size >= _BLOCKED_ELEMENTS_FROM)


def _block_length(length: int, itemsize: int, matrices: int) -> int:
    """`_blocked`'s chunk length for ``matrices`` sets of decays."""
    block = _BLOCK_BYTES // itemsize
    while block > _MIN_BLOCK and matrices > 1 and block * block * _BLOCK_SHARE > length:
        block //= 2
    return block


def _row(view) -> int:
    """The bytes of a step of the time-first ``view``."""
    return math.prod(view.shape[1:]) * view.itemsize


def _parallel_wins(length: int, row: int) -> bool:
    """Whether "auto" scans ``length`` steps of ``row`` bytes with the chunked scan."""
    return row <= _MAX_PARALLEL_ROW and length >= max(_MIN_PARALLEL_LENGTH,
                                                      row // _ROW_BYTES_PER_STEP)


def _in_cache(a, x, h0, out) -> None:
    """`_parallel` over segments of time of about _CACHE_SEGMENT_BYTES of ``out``, one after
    the other from the state the last one left, so that its second pass reads the
    operands from cache."""
    pieces = _pieces(a.shape[0], _row(out), _CACHE_SEGMENT_BYTES, _MIN_CACHE_SEGMENT)
    if pieces is None:
        _parallel(a, x, h0, out)
        return
    for start, stop in pieces:
        _parallel(a[start:stop], x[start:stop], h0, out[start:stop])
        h0 = out[stop - 1]


def _doubles(length: int, row: int) -> bool:
    """Whether `_doubling` pays for ``length`` steps of ``row`` bytes."""
    return (length >= _MIN_DOUBLING_LENGTH and row <= _MAX_DOUBLING_ROW
            and length * row <= _MAX_DOUBLING_BYTES)


def _doubling(a, x, h0, out) -> None:
    """Hillis and Steele's scan (1986): for s = 1, 2, 4, ... below T, every step t >= s
    takes in the state s steps before it, ``h[t] += p[t] * h[t - s]``, where ``p[t]`` is
    the product of the s decays from t back, then doubles the span of ``p``. Channels
    whose result is not all finite are re-run serially, as in `_parallel`: a product
    that overflows only on the way leaves NaN or infinity in the state it enters.

    The scan runs in double precision (`_dtypes.carry`), rounded once into ``out``:
    squared in single precision, the product over 2^k steps compounded 2^k roundings,
    and over 8,192 steps of unit complex64 decays put the result 1.2e-4 of its RMS off,
    30 times the serial loop's. (Only ``p`` needs it, but products of mixed precision
    cost NumPy more than the whole in double.)
    """
    # h, p and the products time-major, whatever out's layout, so that every pass runs over
    # one contiguous block (against arrays in out's memory order, time-contiguous ones
    # took 0.52 to 0.82 of the time, time-major ones 0.95 to 0.99, ad hoc; a broadcast
    # decay's order, before that, made each pass stride across rows).
    wide = _dtypes.carry(out.dtype)
    with Scratch() as scratch:
        _doubling_in(a, x, h0, out, *(scratch.empty(out.shape, wide) for _ in range(3)))


def _doubling_in(a, x, h0, out, h, p, added) -> None:
    """`_doubling` in the work arrays ``h``, ``p`` and ``added``."""
    length = a.shape[0]
    np.copyto(h, np.broadcast_to(x, out.shape), casting="unsafe")
    h[0] += a[0] * h0
    np.copyto(p, np.broadcast_to(a, out.shape), casting="unsafe")
    span = 1
    while span < length:
        rest = length - span
        np.multiply(p[span:], h[:rest], out=added[:rest])
        np.add(h[span:], added[:rest], out=h[span:])
        if 2 * span < length:  # the spans the next step reads, from step 2 * span on
            np.multiply(p[2 * span:], p[span:rest], out=p[2 * span:])
        span *= 2
    out[...] = h
    # In out's precision: a state past its largest value is infinite there, and the
    # serial loop's stays so, where h can come back into range.
    finite = np.isfinite(out).all(axis=0)
    if not finite.all():
        redo = ~finite
        exact = np.empty((length, *out[:, redo].shape[1:]), out.dtype)
        _serial(a[:, redo], x[:, redo], h0[redo], exact)
        out[:, redo] = exact


def _serial(a, x, h, out) -> None:
    """The recurrence step by step over time-first arrays of at least two axes, of one
    length; the steps are taken by iterating over them (not checked: ``strict`` costs as
    much as a step), which costs less than indexing them."""
    if len(a) >= _ROW_STEPS and out[0].size >= _ROW_ELEMENTS and _broadcast_row(a):
        a = np.broadcast_to(_laid_out(a[0], out[0]), a.shape)
    for at, xt, ot in zip(a, x, out, strict=False):
        np.multiply(at, h, ot)
        np.add(ot, xt, ot)
        h = ot


def _broadcast_row(a) -> bool:
    """Whether the time-first decays ``a`` are constant in time, one row for every step,
    broadcast over some of the channels but not all (NumPy's inner loop would run over
    the channels between the broadcast axes alone, a few at a time)."""
    if a.strides[0] != 0 or a.shape[0] < 2:
        return False
    channels = [stride for size, stride in zip(a.shape[1:], a.strides[1:], strict=True)
                if size > 1]
    return any(channels) and not all(channels)


def _laid_out(row, like):
    """A copy of ``row`` laid out as ``like`` (its axes' order in memory)."""
    copy = np.empty_like(like, dtype=row.dtype)
    np.copyto(copy, row)
    return copy


def _chunk_length(length: int, width: int) -> int:
    # Each of the two passes takes L Python-level steps, each over one position of
    # every chunk: width * T / L elements; the T / L chunk carries are scanned by
    # the same algorithm. The rule takes the fewest steps whose vectors hold about
    # _STEP_ELEMENTS, or _LARGE_STEP_ELEMENTS from _STEP_ELEMENTS_UP_TO elements in
    # all (at least 4 steps, at most sqrt(T)): Python's per-step cost dominates
    # shorter vectors. Against L = sqrt(T) (benchmarks/numpy_chunks.py), this took
    # 0.48 to 1.04 of the time for one channel, below _STEP_ELEMENTS_UP_TO elements
    # and above; 0.68 to 1.08 for 2 to 4 channels; 0.76 to 1.11 for 8 to 100, where
    # the two rules mostly agree.
    per_step = _STEP_ELEMENTS if length * width < _STEP_ELEMENTS_UP_TO else _LARGE_STEP_ELEMENTS
    return max(4, min(math.isqrt(length), -(-length * width // per_step)))


def _copy(dst, src, reach: bool = False):
    """``dst[...] = src`` in tiles over the first two axes (at once with fewer), through a
    buffer where that dodges cache aliasing (`_staged`); with ``reach``, tiles cut to the
    lines the L1 cache holds (`_within_reach`); returns ``dst``."""
    if dst.ndim < 2:
        np.copyto(dst, src, casting="unsafe")
        return dst
    result = dst
    if dst.ndim > 2:
        flat = _two_axes(dst), _two_axes(src)
        if flat[0] is not None and flat[1] is not None:
            dst, src = flat
    if dst.ndim == 2 and src.shape == dst.shape and 1 < dst.shape[1] <= _NARROW_COLUMNS \
            and abs(dst.strides[1]) < abs(dst.strides[0]) \
            and abs(src.strides[0]) < abs(src.strides[1]):
        for column in range(dst.shape[1]):
            np.copyto(dst[:, column], src[:, column], casting="unsafe")
        return result
    if dst.ndim > 2 and dst.shape[0] * dst.shape[1] >= _WHOLE_ROWS_FROM and dst.dtype == src.dtype:
        # Contiguous rows of a few channels copy as one element each: NumPy's
        # inner loop would otherwise run over those few elements at a time.
        rows = _opaque_rows(dst), _opaque_rows(src)
        if rows[0] is not None and rows[1] is not None:
            dst, src = rows
    rows, columns = _tile(dst.shape, dst.itemsize * math.prod(dst.shape[2:]))
    with Scratch() as scratch:
        buffer = _staged(dst, src, rows, columns, scratch)
        if buffer is None and reach and dst.ndim == 2 \
                and dst.itemsize <= _MAX_STAGED_ITEMSIZE and dst.nbytes > _TILE_BYTES:
            rows, columns = _within_reach(dst, src, rows, columns)
        for j in range(0, dst.shape[0], rows):
            for i in range(0, dst.shape[1], columns):
                tile = np.s_[j:j + rows, i:i + columns]
                if buffer is None:
                    np.copyto(dst[tile], src[tile], casting="unsafe")
                else:
                    staged = buffer[:min(rows, dst.shape[0] - j), :min(columns, dst.shape[1] - i)]
                    np.copyto(staged, src[tile], casting="unsafe")
                    np.copyto(dst[tile], staged)
    return result


def _within_reach(dst, src, rows: int, columns: int) -> tuple[int, int]:
    """`_copy`'s tile sides, the one along ``dst``'s contiguous axis cut to the lines the L1
    cache holds at ``src``'s stride there (`_reach`), the other lengthened to keep the
    tile's elements."""
    inner = _inner(dst)
    sides = [rows, columns]
    reach = _reach(src.strides[inner])
    if reach is not None and sides[inner] > (reach := max(reach, _MIN_TILE)):
        sides[1 - inner] = min(dst.shape[1 - inner], sides[1 - inner] * sides[inner] // reach)
        sides[inner] = reach
    return sides[0], sides[1]


def _inner(dst) -> int:
    """The axis of the 2-D ``dst`` that NumPy's inner loop runs along in a copy into it: its
    contiguous one."""
    return 0 if abs(dst.strides[0]) < abs(dst.strides[1]) else 1


def _reach(stride: int) -> int | None:
    """How many elements ``stride`` bytes apart the L1 cache holds the lines of (None where
    they share lines): lines a whole number k of lines apart fall into
    _L1_SETS / gcd(k, _L1_SETS) of its sets, others into all, _L1_WAYS lines each."""
    lines, rest = divmod(abs(stride), _CACHE_LINE)
    if lines == 0:
        return None
    return _L1_WAYS * (_L1_SETS // (math.gcd(lines, _L1_SETS) if rest == 0 else 1))


def _two_axes(view):
    """``view`` (n, ...) as an (n, m) view, its axes after the first merged; None where
    they do not merge without a copy (or it has no elements)."""
    if view.size == 0:
        return None
    axes = [(size, stride) for size, stride in zip(view.shape[1:], view.strides[1:],
                                                   strict=True) if size > 1]
    if not _merge(axes):
        return None
    return view.reshape(view.shape[0], math.prod(view.shape[1:]))


def _merge(axes) -> bool:
    """Whether ``axes`` ((size, byte stride), outermost first) merge into one axis."""
    return all(outer[1] == inner[0] * inner[1] for outer, inner in itertools.pairwise(axes))


def _staged(dst, src, rows: int, columns: int, scratch: Scratch):
    """The buffer (``rows`` x ``columns``, from ``scratch``) through which `_copy` copies
    each tile of the 2-D ``src`` into ``dst`` where they lie transposed to each other and
    NumPy's inner loop, which runs along ``dst``'s contiguous axis, would read ``src``
    with a stride that is a multiple of _ALIASING_STRIDE bytes (such as 4,096 float32
    steps of each channel copied time-major), from _MIN_STAGED elements along that axis, or
    of _FEW_SETS_STRIDE bytes, from _MIN_FEW_SETS_STAGED; else None. The buffer lies as
    ``src`` does, its lines _CACHE_LINE bytes longer than the tile's."""
    if dst.ndim != 2 or dst.itemsize > _MAX_STAGED_ITEMSIZE:
        return None
    inner = _inner(dst)
    stride = abs(src.strides[inner])
    if stride < _CACHE_LINE or abs(src.strides[1 - inner]) >= _CACHE_LINE:
        return None
    if stride % _ALIASING_STRIDE == 0:
        least = _MIN_STAGED
    elif stride % _FEW_SETS_STRIDE == 0:
        least = _MIN_FEW_SETS_STAGED
    else:
        return None
    if dst.shape[inner] < least:
        return None
    pad = _CACHE_LINE // dst.itemsize
    if inner == 1:  # src runs along the first axis: the buffer's lines are its columns
        return scratch.empty((columns, rows + pad), dst.dtype).T
    return scratch.empty((rows, columns + pad), dst.dtype)


def _tile(shape, itemsize: int, size: int | None = None) -> tuple[int, int]:
    """The sides of `_copy`'s tiles over the first two axes of ``shape``, for elements
    of ``itemsize`` bytes over them: tiles of about ``size`` bytes (_TILE_BYTES), square
    but for a narrow axis, which leaves the other the rest; sides of at least _MIN_TILE."""
    size, itemsize = size or _TILE_BYTES, max(itemsize, 1)
    side = max(_MIN_TILE, math.isqrt(size // itemsize))
    rows, columns = max(1, min(shape[0], side)), max(1, min(shape[1], side))
    if columns < side:
        rows = max(rows, min(shape[0], size // (columns * itemsize)))
    elif rows < side:
        columns = max(columns, min(shape[1], size // (rows * itemsize)))
    return rows, columns


def _opaque_rows(view):
    """``view`` (n, m, ...) as an (n, m) array whose elements are the rows of its
    trailing axes, as raw bytes; None where those rows are not contiguous."""
    row = view.itemsize
    for size, stride in zip(view.shape[:1:-1], view.strides[:1:-1], strict=True):
        if size > 1 and stride != row:
            return None
        row *= size
    if row <= view.itemsize:
        return None
    # Contiguous trailing axes merge into one without a copy.
    whole = view.reshape(*view.shape[:2], row // view.itemsize)
    return whole.view(np.dtype((np.void, row)))[..., 0]


def _block_matrices(decays, chunk: int, dtype) -> tuple | None:
    """`_blocked`'s ``powers[..., k] = a**(k + 1)`` (in double precision, `_dtypes.carry`) and
    ``W[..., s, t] = a**(t - s)`` above the diagonal (zero below, in ``dtype``), for
    ``decays`` (its channels' shape) and chunks of ``chunk`` steps; None where they are not
    all finite."""
    wide = _dtypes.carry(dtype)
    powers = np.cumprod(np.broadcast_to(decays[..., None], (*decays.shape, chunk)), axis=-1,
                        dtype=wide)
    lag = np.subtract.outer(np.arange(chunk), np.arange(chunk)).T
    weights = np.concatenate([np.ones((*decays.shape, 1), wide), powers], axis=-1)
    weights = np.where(lag >= 0, weights[..., np.maximum(lag, 0)], 0).astype(dtype, copy=False)
    if not np.isfinite(weights).all():
        return None
    return powers, weights


@functools.lru_cache(maxsize=64)
def _scalar_block_matrices(stored: str, data: bytes, shape: tuple, chunk: int,
                           dtype: str) -> tuple | None:
    """`_block_matrices` of one decay (``data`` of dtype ``stored``, ``shape`` of ones),
    kept read-only: they cost tens of microseconds, a scan of 10^5 steps a few hundred."""
    decays = np.frombuffer(data, stored).reshape(shape)
    matrices = _block_matrices(decays, chunk, np.dtype(dtype))
    if matrices is not None:
        for m in matrices:
            m.flags.writeable = False
    return matrices


def _blocked(a, x, h0, out) -> bool:
    """The chunked scan for decays constant in time, on time-contiguous operands.

    Within a chunk of L steps from a zero start, ``h[t] = sum_{s <= t} a**(t - s)
    * x[s]``: the chunk's row of impulses times the L x L matrix ``W[s, t] =
    a**(t - s)`` (upper triangular): one matrix product for all chunks, run by
    BLAS, reading the operands in place. The last column of W gives the chunks' final
    states alone; their carries follow from the chunk-level recurrence with decay
    ``a**L``, scanned recursively; a carry ``c`` entering a chunk adds ``a**(t + 1)
    * c`` at its step t, which the product gives where ``a * c`` is added to the chunk's
    first sample (in a copy of a few chunks at a time, in cache). The matrices of a
    single decay are kept. The remainder after the chunks is one more, shorter chunk.
    Reversed operands (negative steps) are scanned by the transposed matrices, on
    the chunks counted from the end.

    Returns False, having written nothing useful, where the powers, the chunks'
    states, the carries or the result are not all finite: the serial loop's
    handling of infinities and NaN then needs the general scan.
    """
    length, dtype = x.shape[0], out.dtype
    reverse = x.strides[0] < 0
    if reverse:
        x, out = x[::-1], out[::-1]
    decays = _stored(a[0])
    chunk = _block_length(length, out.itemsize, decays.size)
    count = length // chunk
    rest = length - count * chunk
    if decays.size == 1:  # one decay: its matrices are kept
        matrices = _scalar_block_matrices(decays.dtype.str, decays.tobytes(), decays.shape,
                                          chunk, np.dtype(dtype).str)
    else:
        matrices = _block_matrices(decays, chunk, dtype)
    if matrices is None:
        return False
    powers, weights = matrices
    whole = powers[..., -1]  # a**L: the decay over a chunk, in double precision
    decay_step = powers[..., :1].astype(dtype)  # a, in the scan's dtype
    if reverse:
        weights, powers = np.swapaxes(weights, -1, -2), powers[..., ::-1]
    # Chunks of every channel as matrix rows: (*channels, count, chunk).
    start = rest if reverse else 0
    stop = start + count * chunk

    channels = out.ndim - 1
    last_first = (channels, *range(channels))  # (*channels, steps) to (steps, *channels)
    first_last = (*range(1, channels + 1), 0)  # and back

    def rows(v):
        v = v[start:stop].reshape(count, chunk, *v.shape[1:])
        return v.transpose(*range(2, channels + 2), 0, 1)

    xr, outr = rows(x), rows(out)
    last = weights[..., :, :1] if reverse else weights[..., :, -1:]
    ends = np.matmul(xr, last)[..., 0].transpose(last_first)  # (count, *channels)
    if not np.isfinite(ends).all():
        return False
    # carries[i]: the state entering chunk i (counted in memory order; a reverse scan
    # enters a chunk from its end); carries[count]: the state entering the remainder.
    carries = np.empty((count + 1, *out.shape[1:]), whole.dtype)
    if reverse:
        ends, into = ends[::-1], carries[-2::-1]
        carries[-1] = h0
    else:
        into = carries[1:]
        carries[0] = h0
    scan(np.broadcast_to(whole, ends.shape), ends, h0, into, "auto")
    if reverse:
        carries = np.roll(carries, -1, axis=0)  # the remainder's carry last
    if not np.isfinite(carries).all():
        return False
    # The carry c entering a chunk adds a**(t + 1) * c at its step t: a * c added to
    # the chunk's first sample (its last, in reverse) before the product gives it.
    entering = carries[:-1].transpose(first_last)  # (*channels, count)
    width = math.prod(out.shape[1:]) * chunk
    step = max(_MIN_BLOCK_ROWS, _BLOCK_ELEMENTS // width)
    scratch = np.empty((*out.shape[1:], min(step, count), chunk), dtype)
    enters = -1 if reverse else 0
    for i in range(0, count, step):
        j = min(count, i + step)
        block, copied = outr[..., i:j, :], scratch[..., :j - i, :]
        np.copyto(copied, xr[..., i:j, :])
        copied[..., enters] += decay_step * entering[..., i:j]
        np.matmul(copied, weights, out=block)
        if not np.isfinite(np.add.reduce(block, axis=None)):
            return False
    if rest:
        span = slice(0, rest) if reverse else slice(stop, length)
        xt = x[span].transpose(first_last)[..., None, :]
        part = np.matmul(xt, weights[..., :rest, :rest])[..., 0, :]
        part += carries[-1][..., None] * (powers[..., -rest:] if reverse else powers[..., :rest])
        if not np.isfinite(np.add.reduce(part, axis=None)):
            return False
        out[span] = part.transpose(last_first)
    return True


def _parallel(a, x, h0, out) -> None:
    """Algorithm 1 of Martin & Cundy (2018), vectorised over chunks.

    The time axis is cut into C chunks of L steps. One pass over the L
    positions reduces every chunk at once to ``(P, R)``: the product of its
    decays and its final state from a zero start. The chunk-level recurrence
    ``carry[i] = P[i] * carry[i-1] + R[i]`` is scanned recursively, and a
    second pass re-runs each chunk from its carry, exactly as the serial loop
    would. The remainder after ``C * L`` steps runs serially from the last
    carry.

    ``P * carry + R`` equals the serial result only while everything is
    finite: an overflowing product times a zero state, or an infinite decay,
    would give NaN where the serial loop does not; and the carries, in double
    precision, can stay finite where the serial loop's state in single precision
    overflowed inside a chunk, which a non-finite state never leaves. Channels
    with a non-finite product, reduction, carry (in the result's dtype) or last
    state of a chunk are therefore re-run serially, so non-finite values
    propagate exactly as in the serial recurrence.
    """
    with Scratch() as scratch:
        _chunked(a, x, h0, out, scratch)


def _chunk_order(view) -> tuple[int, ...]:
    """The order, outermost first, in which `_chunked`'s arrays lay out the axes of a step
    of the chunked ``view`` (chunk, count, channels...): the axes after the first as
    ``view`` lays them out, by decreasing stride, so that copying ``view`` runs over one
    axis of chunks and channels merged wherever ``view``'s allow it (see `_copy`). For
    time-contiguous channels that puts the chunks innermost: each of those channels is
    one run of ``count`` chunks, and a step of a few channels copies as one transposed
    matrix rather than runs of a few elements."""
    if not _CHUNKS_AS_THEY_LIE:
        return tuple(range(view.ndim - 1))
    axes = range(view.ndim - 1)  # axes of one element innermost, where they change nothing
    return tuple(sorted(axes, key=lambda i: -abs(view.strides[i + 1]) if view.shape[i + 1] > 1
                        else math.inf))


def _ordered(make, shape, dtype, order):
    """``make(..., dtype)`` of ``shape``, its axes in memory in ``order`` (outermost first)."""
    return make(tuple(shape[i] for i in order), dtype).transpose(np.argsort(order))


def _in_order(view, order):
    """``view``'s axes in ``order`` after the first."""
    return view.transpose(0, *(i + 1 for i in order))


def _copied(view, order, scratch: Scratch):
    """A copy of ``view`` from ``scratch`` whose axes after the first lie in ``order``."""
    copy = _ordered(scratch.empty, view.shape, view.dtype, (0, *(i + 1 for i in order)))
    _copy_in_order(copy, view, order)
    return copy


def _copy_in_order(dst, src, order) -> None:
    """`_copy` of chunked views (chunk, count, channels...) with their axes after the first
    in ``order``; one index at a time of the channel axes laid out outside the chunks'
    where `_runs_apart` (each time-contiguous channel's run of chunks apart)."""
    dst, src = _in_order(dst, order), _in_order(src, order)
    outer = order.index(0)
    if outer and _runs_apart(dst, src, outer):
        for index in np.ndindex(dst.shape[1:1 + outer]):
            _copy(dst[(slice(None), *index)], src[(slice(None), *index)], reach=True)
        return
    _copy(dst, src, reach=True)


def _runs_apart(dst, src, outer: int) -> bool:
    """Whether `_copy_in_order` copies one run of chunks at a time: where the ``outer``
    channel axes after the first of ``dst`` and ``src`` do not merge with the rest (a
    segment of time, or chunks that leave steps over), and lie a multiple of _PAGE bytes
    apart in either, runs of at least _MIN_CHUNK_RUN_BYTES. NumPy copies such views one
    position of every run at a time: runs a page apart share their cache sets, and at a
    position a run's lines, read once for each of the elements they hold, have left the
    cache; `_copy` tiles each run alone."""
    if _two_axes(dst) is not None and _two_axes(src) is not None:
        return False
    run = math.prod(dst.shape[outer + 1:]) * dst.shape[0] * dst.itemsize
    return run >= _MIN_CHUNK_RUN_BYTES and any(
        size > 1 and abs(stride) % _PAGE == 0 for view in (dst, src)
        for size, stride in zip(view.shape[1:1 + outer], view.strides[1:1 + outer], strict=True))


def _chunked(a, x, h0, out, scratch: Scratch) -> None:
    """`_parallel`, its copies of the chunks taken from ``scratch``."""
    length = a.shape[0]
    chunk = _chunk_length(length, math.prod(out.shape[1:]))
    count = length // chunk
    body = count * chunk
    shape = (count, chunk, *a.shape[1:])
    # Views with position-in-chunk first: step j below touches position j of
    # every chunk. (Splitting one axis in two is a view for any strides, so `oc`
    # writes into `out`.)
    ac, xc, oc = (np.swapaxes(v[:body].reshape(shape), 0, 1) for v in (a, x, out))
    row = _row(out)
    compact = row <= _MAX_STRIDED_ROW or (row <= _MAX_APART_CHUNK_ROW and _apart(x))
    # The order in memory of the axes of a step: the chunks' and the channels'.
    order = _chunk_order(xc) if compact else tuple(range(xc.ndim - 1))
    reduced = _ordered(np.zeros, (count, *out.shape[1:]), out.dtype, order)
    per_channel = any(s for n, s in zip(ac.shape[2:], ac.strides[2:], strict=True) if n > 1)
    if ac.strides[0] == 0 and per_channel and body >= _WHOLE_ROWS_FROM:
        # Decays constant in time but not over the channels: one row over the
        # chunks serves every step. Broadcast over the chunks, they would make
        # NumPy's inner loop run over the channels alone, a few elements at a
        # time. (A single decay for all channels is a scalar to NumPy: fast.)
        ac = np.broadcast_to(_laid_out(ac[0], reduced), ac.shape)
    if compact:
        # Narrow rows make those steps strided, elements far apart: with the
        # copies' cost included, contiguous copies take 0.5 to 0.8 of the time.
        # (Decays broadcast along time, stride 0, stay views.)
        if ac.strides[0] != 0:
            ac = _copied(ac, order, scratch)
        # A copy even where the view is contiguous (a single chunk): the outputs
        # overwrite it.
        xc = _copied(xc, order, scratch)
    target = xc if compact else oc

    for aj, xj in zip(ac, xc, strict=False):
        np.multiply(aj, reduced, reduced)
        np.add(reduced, xj, reduced)
    products = _ordered(np.empty, reduced.shape, _dtypes.carry(out.dtype), order)
    np.multiply.reduce(ac, axis=0, dtype=products.dtype, out=products)

    carries = _ordered(np.empty, (count + 1, *out.shape[1:]), products.dtype, order)
    carries[0] = h0
    scan(products, reduced, h0, carries[1:], "auto")

    narrowed = carries.astype(out.dtype, copy=False)
    h, step = narrowed[:-1], np.empty_like(reduced)
    for aj, xj, oj in zip(ac, xc, target, strict=False):
        np.multiply(aj, h, step)
        np.add(xj, step, oj)
        h = oj
    if compact:
        _copy_in_order(oc, xc, order)
    _serial(a[body:], x[body:], carries[-1], out[body:])

    finite = np.isfinite(products).all(axis=0)
    finite &= np.isfinite(reduced).all(axis=0)
    finite &= np.isfinite(narrowed).all(axis=0)
    finite &= np.isfinite(h).all(axis=0)  # each chunk's last state
    if not finite.all():
        redo = ~finite
        exact = np.empty((length, *out[:, redo].shape[1:]), out.dtype)
        _serial(a[:, redo], x[:, redo], h0[redo], exact)
        out[:, redo] = exact
