"""The pool of the CPU scans' temporaries: reuse, bounds, scans that use it, and forked
children."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import cuscan
from cuscan import _numpy_backend, _scratch
from tests import reference
from tests.conftest import Backend, assert_close, run_in_fresh_process
from tests.test_linear_recurrence import check, make


class PoisonedPool(_scratch._Pool):
    """A pool that fills every buffer it hands out or is given back with NaN (all bits
    set), so that an array read before it is written, or after its scope closed, gives
    NaN."""

    def take(self, size):
        buffer = super().take(size)
        buffer.fill(0xFF)
        return buffer

    def give(self, buffer):
        buffer.fill(0xFF)
        super().give(buffer)


@pytest.fixture
def pool(monkeypatch):
    """An empty pool of its own for the test, poisoning what it is given."""
    fresh = PoisonedPool()
    monkeypatch.setattr(_scratch, "_pool", fresh)
    return fresh


def test_scopes_reuse_buffers(pool):
    """A later scope gets the buffers an earlier one gave back; the arrays of one scope,
    and of scopes nested in it, never share memory; every array starts on a cache line."""
    size = _scratch._MIN_POOLED // 8
    with _scratch.Scratch() as scratch:
        first = scratch.empty((size,), np.float64)
        second = scratch.empty((size // 2, 2), np.complex64)
        with _scratch.Scratch() as inner:
            third = inner.empty((size,), np.float64)
        assert not np.shares_memory(first, second)
        assert not np.shares_memory(first, third)
        assert not np.shares_memory(second, third)
        with _scratch.Scratch() as inner:  # the buffer the first inner scope gave back
            assert inner.empty((size, 2), np.float32).ctypes.data == third.ctypes.data
    for array in (first, second, third):
        assert array.ctypes.data % 64 == 0  # a cache line
        assert array.flags.c_contiguous
    assert len(pool.free) == 3
    assert pool.bytes == sum(b.nbytes for b in pool.free)
    with _scratch.Scratch() as scratch:
        again = {scratch.empty((size,), np.float64).ctypes.data for _ in range(3)}
        assert again == {a.ctypes.data for a in (first, second, third)}
    # A small array comes from NumPy and is not kept; so is a large one; the limits are kept.
    with _scratch.Scratch() as scratch:
        small = scratch.empty((7, 3), np.float64)
        large = scratch.empty((_scratch._MAX_POOLED + 1,), np.uint8)
        assert small.shape == (7, 3)
        assert large.shape == (_scratch._MAX_POOLED + 1,)
    assert len(pool.free) == 3
    with _scratch.Scratch() as scratch:
        scratch.empty((_scratch._MAX_POOLED,), np.uint8)
        scratch.empty((_scratch._MIN_POOLED,), np.uint8)
    assert sorted(b.nbytes for b in pool.free)[-1] == _scratch._MAX_POOLED
    assert len(pool.free) == 4  # the smallest came from a buffer kept before


def test_slightly_longer_arrays_share_buffers(pool):
    """Buffers are whole multiples of _GRAIN bytes, so a scope asking for a little more
    than an earlier one (a segment a few steps longer) gets the buffer it gave back."""
    steps = _scratch._MIN_POOLED // 8 + 1
    with _scratch.Scratch() as scratch:
        first = scratch.empty((steps,), np.float64)
    assert [b.nbytes % _scratch._GRAIN for b in pool.free] == [0]
    with _scratch.Scratch() as scratch:
        longer = scratch.empty((steps + 3,), np.float64)
        assert longer.ctypes.data == first.ctypes.data
    assert len(pool.free) == 1


def test_a_scope_entered_again_gives_each_buffer_back_once(pool):
    """A scope used for a second ``with`` gives back only what it took since the first
    closed: a buffer given twice would go to two later arrays at once."""
    scratch = _scratch.Scratch()
    with scratch:
        scratch.empty((_scratch._MIN_POOLED,), np.uint8)
    with scratch:
        pass
    assert len(pool.free) == 1
    with scratch:
        scratch.empty((_scratch._MIN_POOLED,), np.uint8)
        assert not pool.free
    assert len(pool.free) == 1


def test_pool_is_bounded(pool, monkeypatch):
    """The pool keeps at most _POOL_BYTES, dropping its oldest buffers first, and hands
    out no buffer more than twice the size asked for."""
    unit = _scratch._MIN_POOLED
    monkeypatch.setattr(_scratch, "_POOL_BYTES", 5 * unit)
    with _scratch.Scratch() as scratch:
        for n in (1, 2, 3):
            scratch.empty((n * unit,), np.uint8)
    assert pool.bytes == 5 * unit
    assert [b.nbytes for b in pool.free] == [2 * unit, 3 * unit]
    kept = pool.free[1]
    with _scratch.Scratch() as scratch:
        twice = scratch.empty((unit,), np.uint8)  # the buffer of 2 units
        more = scratch.empty((unit,), np.uint8)  # not the buffer of 3: a new one
        assert twice.nbytes == more.nbytes == unit
        assert not np.shares_memory(more, kept)
        assert len(pool.free) == 1
        assert pool.free[0] is kept
    assert [b.nbytes for b in pool.free] == [2 * unit, unit]  # the oldest, kept, dropped
    with _scratch.Scratch() as scratch:
        scratch.empty((10 * unit,), np.uint8)  # more than the pool keeps: not kept
    assert [b.nbytes for b in pool.free] == [2 * unit, unit]


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float16"])
def test_scans_with_every_temporary_pooled(pool, monkeypatch, dtype):
    """With every temporary from the pool (even the smallest), the buffers that segments
    of time, and the chunks of each, take one after another give the reference's results:
    nothing a scope hands on (a segment's last state, the gradient entering the next
    segment) lives in a buffer it gave back, which the pool fills with NaN. Forward and
    vector-Jacobian product over time-major copies (time-contiguous operands), the
    chunked scan's copies, reverse, and initial states."""
    monkeypatch.setattr(_scratch, "_MIN_POOLED", 1)
    monkeypatch.setattr(_numpy_backend, "_SEGMENT_BYTES", 2048)
    monkeypatch.setattr(_numpy_backend, "_CACHE_SEGMENT_BYTES", 1024)
    monkeypatch.setattr(_numpy_backend, "_MIN_CACHE_SEGMENT", 64)
    monkeypatch.setattr(_numpy_backend, "_MAX_DOUBLING_BYTES", -1)
    numpy = Backend("numpy")
    rng = np.random.default_rng(59)
    for width, length in ((40, 1500), (1, 3001), (3, 2000)):
        decays = make(rng, (width, length), dtype, low=0.5)
        impulses = make(rng, (width, length), dtype, low=-1.0)
        state = make(rng, (width,), dtype, low=-1.0)
        for reverse in (False, True):
            check(numpy, decays, impulses, state, axis=-1, reverse=reverse, method="parallel")
            check(numpy, decays.T, impulses.T, state, reverse=reverse, method="parallel")
        weights = make(rng, (width, length), dtype, low=-1.0)
        output = cuscan.linear_recurrence(decays, impulses, state, axis=-1)
        got = cuscan.linear_recurrence_vjp(weights, decays, output, state, axis=-1)
        for g, w in zip(got, vjp(weights, decays, output, state), strict=True):
            assert_close(g, w, np.abs(w).max(), g.dtype, length)
    assert pool.free  # the scans took and gave back buffers


def vjp(weights, decays, output, state):
    """The vector-Jacobian product along the last axis, from the float64 reference: the
    reverse recurrence over the next step's conjugate decays, and the products with the
    conjugate previous states."""
    following = np.concatenate([decays[:, 1:], np.zeros_like(decays[:, :1])], axis=-1)
    g = reference.linear_recurrence(np.conj(following), weights, axis=-1, reverse=True)
    previous = np.concatenate([state[:, None], output[:, :-1]], axis=-1)
    return np.conj(previous) * g, g, np.conj(decays[:, 0]) * g[:, 0]


def test_threads_share_the_pool(pool):
    """Scans on several threads at once, their temporaries from the one pool, each give
    the result the same scan gives alone."""
    rng = np.random.default_rng(61)
    cases = [(make(rng, (2**15 + 7 * i, 1), low=0.5), make(rng, (2**15 + 7 * i, 1), low=-1.0))
             for i in range(8)]
    alone = [cuscan.linear_recurrence(a, x, method="parallel") for a, x in cases]
    results: dict[int, list] = {}

    def run(i):
        results[i] = [cuscan.linear_recurrence(*cases[i], method="parallel") for _ in range(20)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, want in enumerate(alone):
        for got in results[i]:
            np.testing.assert_array_equal(got, want)
    assert pool.free


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("lock", ["_scratch._pool.lock", "signal._chunks._direct_lock",
                                  "signal._stream._streams_lock"])
def test_forked_child_takes_no_held_lock(lock):
    """A child forked while a thread of its parent held one of cuscan's locks (the pool's,
    or those of the filters' matrices and streams) filters and scans all the same: it
    would wait forever for a lock that nothing in it can release."""
    run_in_fresh_process(f"""
        import os, sys, time
        import numpy as np
        import cuscan
        from cuscan import _scratch, signal

        sos = np.array([[1.0, 0.5, 0.2, 1.0, -0.5, 0.3]])
        x = np.random.default_rng(0).standard_normal((4, 100))
        steps = np.ones(2**20, np.float32)
        {lock}.acquire()  # as a thread of the parent holds it when another forks
        child = os.fork()
        if child == 0:
            for _ in range(3):
                signal.sosfilt(sos, x)
            cuscan.linear_recurrence(0.5 * steps, steps, method="parallel")
            os._exit(0)
        for _ in range(600):
            done, status = os.waitpid(child, os.WNOHANG)
            if done:
                sys.exit(os.waitstatus_to_exitcode(status))
            time.sleep(0.1)
        os.kill(child, 9)
        sys.exit("the child still waits after a minute")
        """)


@pytest.mark.parametrize("segments", [False, True])
def test_filters_with_every_temporary_pooled(pool, monkeypatch, segments):
    """`cuscan.signal`'s temporaries from the pool (the padded signal and first pass of the
    zero-phase filters, three of Gustafsson's four passes, the chunks' copies of signals
    whose steps lie apart or run backward, and their output rows before they are put back
    in the signal's layout; with ``segments``, the copies of a segment of time at a time),
    with every one pooled and poisoned when given back: SciPy's results (the signal itself
    through no sections), so no output or final state lives in a buffer given back."""
    scipy_signal = pytest.importorskip("scipy.signal")
    from cuscan import signal
    from cuscan.signal import _chunks

    monkeypatch.setattr(_scratch, "_MIN_POOLED", 1)
    if segments:  # signals of more than 1,024 samples whose steps lie apart, in segments
        monkeypatch.setattr(_chunks, "_SEGMENT_ELEMENTS", 512)
        monkeypatch.setattr(_chunks, "_MIN_SEGMENT", 256)
    rng = np.random.default_rng(67)
    b, a = scipy_signal.butter(4, 0.1)
    sos = scipy_signal.butter(6, 0.2, output="sos")
    # (10001,): more chunks than one product with the powers of a pole takes (_SCAN_BLOCK)
    for shape, axis in (((3001,), 0), ((3, 2000), -1), ((2000, 3), 0), ((5, 700, 2), 1),
                        ((10001,), 0)):
        x = rng.standard_normal(shape)
        for view in (x, np.flip(x, axis)):
            for padtype, padlen in (("odd", None), ("even", 40), ("constant", None), (None, 0)):
                got = signal.filtfilt(b, a, view, axis=axis, padtype=padtype, padlen=padlen)
                want = scipy_signal.filtfilt(b, a, view, axis=axis, padtype=padtype,
                                             padlen=padlen)
                assert reference.relative_error(got, want) <= 1e-10, (shape, padtype)
            got = signal.filtfilt(b, a, view, axis=axis, method="gust")
            want = scipy_signal.filtfilt(b, a, view, axis=axis, method="gust")
            assert reference.relative_error(got, want) <= 1e-10, shape
            got = signal.sosfiltfilt(sos, view, axis=axis)
            want = scipy_signal.sosfiltfilt(sos, view, axis=axis)
            assert reference.relative_error(got, want) <= 1e-10, shape
            # no sections: each pass hands its input on, the padded signal a pass took
            np.testing.assert_array_equal(signal.sosfiltfilt(np.zeros((0, 6)), view, axis=axis),
                                          view)
            zi = rng.standard_normal((sos.shape[0], *np.delete(shape, axis), 2))
            zi = np.moveaxis(zi, -1, 1 + axis % len(shape))
            for got, want in zip(signal.sosfilt(sos, view, axis=axis, zi=zi),
                                 scipy_signal.sosfilt(sos, view, axis=axis, zi=zi), strict=True):
                assert reference.relative_error(got, want) <= 1e-10, shape
    assert pool.free


def test_gradients_summed_from_pooled_buffers(pool, monkeypatch):
    """The vector-Jacobian product computes the gradients of broadcast decays and initial
    states in pooled buffers and sums them: with every temporary pooled and poisoned when
    given back, the same gradients as with nothing pooled, into new arrays or ``out``."""
    from cuscan import _api

    largest = _scratch._MAX_POOLED
    rng = np.random.default_rng(71)
    impulses = make(rng, (600, 3, 4), "complex128", low=-1.0)
    weights = make(rng, impulses.shape, "complex128", low=-1.0)
    for decays, state in ((0.9, None), (make(rng, (3, 4), low=0.5), make(rng, (1, 4))),
                          (make(rng, (600, 1, 1), low=0.5), make(rng, (3, 1)))):
        output = cuscan.linear_recurrence(decays, impulses, state)
        monkeypatch.setattr(_scratch, "_MAX_POOLED", 0)  # nothing pooled
        want = cuscan.linear_recurrence_vjp(weights, decays, output, state)
        monkeypatch.setattr(_scratch, "_MAX_POOLED", largest)
        monkeypatch.setattr(_scratch, "_MIN_POOLED", 1)  # everything pooled
        got = cuscan.linear_recurrence_vjp(weights, decays, output, state)
        into = tuple(None if w is None else np.empty_like(w) for w in want)
        summed = _api.backward(weights, decays, output, state, out=into)
        for g, s, w, i in zip(got, summed, want, into, strict=True):
            if w is None:
                assert g is None
                assert s is None
                continue
            np.testing.assert_array_equal(g, w)
            assert s is i
            np.testing.assert_array_equal(s, w)
    assert pool.free
