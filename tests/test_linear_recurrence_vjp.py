"""linear_recurrence_vjp against finite differences and torch autograd."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import cuscan
from cuscan import _api, _scratch
from tests import reference
from tests.conftest import DTYPES, assert_close, dtype_of, require, tolerance
from tests.test_linear_recurrence import make


def vjp(backend, grad_output, decays, output, state=None, **kwargs):
    args = [None if v is None else backend.asarray(v) if isinstance(v, np.ndarray) else v
            for v in (grad_output, decays, output, state)]
    grads = cuscan.linear_recurrence_vjp(*args, **kwargs)
    return tuple(None if g is None else backend.to_numpy(g) for g in grads)


def loss(weights, decays, impulses, state, axis, reverse):
    """The real loss ``Re(sum(conj(weights) * h))``, whose gradient in h is `weights`."""
    h = reference.linear_recurrence(decays, impulses, state, axis=axis, reverse=reverse)
    return float(np.real(np.sum(np.conj(weights) * h)))


def numerical_gradient(f, value, step=1e-6):
    """Central differences of the real function f, as ``dRe + 1j * dIm`` for complex inputs."""
    value = np.array(value, dtype=np.result_type(value, np.float64))
    grad = np.zeros_like(value)
    for index in np.ndindex(value.shape):
        for unit in (1.0, 1j) if value.dtype.kind == "c" else (1.0,):
            plus, minus = value.copy(), value.copy()
            plus[index] += step * unit
            minus[index] -= step * unit
            grad[index] += unit * (f(plus) - f(minus)) / (2 * step)
    return grad


CASES = [
    # decays shape, impulses shape, state shape, axis
    ((9, 3), (9, 3), (3,), 0),
    ((3,), (9, 3), None, 0),
    ((), (2, 7), (2,), 1),
    ((2, 1, 5), (2, 3, 5), (1, 5), 1),
    ((5, 1), (5, 4), (), 0),
    ((1,), (1,), (), 0),
    ((4, 1, 3, 1, 2), (4, 2, 3, 2, 2), (2, 1, 2, 1), 0),  # four channel axes, none merge
]


@pytest.mark.parametrize(("decays_shape", "impulses_shape", "state_shape", "axis"), CASES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("kind", ["float64", "complex128"])
def test_against_finite_differences(backend, decays_shape, impulses_shape, state_shape, axis,
                                    reverse, kind):
    rng = np.random.default_rng(1)
    decays = make(rng, decays_shape, kind, -1.0)
    impulses = make(rng, impulses_shape, kind, -1.0)
    state = None if state_shape is None else make(rng, state_shape, kind, -1.0)
    h = reference.linear_recurrence(decays, impulses, state, axis=axis, reverse=reverse)
    weights = make(rng, h.shape, kind, -1.0)
    grad_decays, grad_impulses, grad_state = vjp(backend, weights, decays, h, state, axis=axis,
                                                 reverse=reverse)

    def at(**changed):
        args = {"decays": decays, "impulses": impulses, "state": state} | changed
        return loss(weights, args["decays"], args["impulses"], args["state"], axis, reverse)

    assert grad_decays.shape == decays.shape
    assert grad_impulses.shape == h.shape
    np.testing.assert_allclose(grad_decays, numerical_gradient(lambda v: at(decays=v), decays),
                               rtol=1e-6, atol=1e-8)
    full = np.broadcast_to(impulses, h.shape)
    np.testing.assert_allclose(grad_impulses, numerical_gradient(lambda v: at(impulses=v), full),
                               rtol=1e-6, atol=1e-8)
    if state is None:
        assert grad_state is None
    else:
        assert grad_state.shape == state.shape
        np.testing.assert_allclose(grad_state, numerical_gradient(lambda v: at(state=v), state),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("kind", ["float64", "complex128"])
@pytest.mark.parametrize("length", [1, 2, 5, 64, 257, 4099])
def test_against_torch_autograd(backend, reverse, kind, length):
    torch = require("torch")
    rng = np.random.default_rng(length)
    decays = make(rng, (length, 4), kind, 0.2)
    impulses = make(rng, (length, 4), kind, -1.0)
    state = make(rng, (4,), kind, -1.0)
    weights = make(rng, (length, 4), kind, -1.0)

    a, x, s = (torch.tensor(v, requires_grad=True) for v in (decays, impulses, state))
    h, out = s, []
    for t in reversed(range(length)) if reverse else range(length):
        h = a[t] * h + x[t]
        out.append(h)
    h = torch.stack(out[::-1] if reverse else out)
    h.backward(torch.tensor(weights))

    grads = vjp(backend, weights, decays, h.detach().numpy(), state, reverse=reverse)
    for ours, theirs in zip(grads, (a.grad, x.grad, s.grad), strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes(backend, dtype):
    rng = np.random.default_rng(8)
    shape = (300, 5)
    decays = make(rng, shape, dtype, 0.5)
    impulses = make(rng, shape, dtype, -1.0)
    state = make(rng, (5,), dtype, -1.0)
    h = cuscan.linear_recurrence(decays, impulses, state)
    weights = make(rng, shape, dtype, -1.0)
    grads = vjp(backend, weights, decays, h, state)
    for grad in grads:
        assert grad.dtype == dtype_of(dtype)

    # The gradient of the impulses is the reverse recurrence over the weights
    # with the decays shifted by one: compare with the reference there.
    shifted = np.concatenate([np.conj(decays[1:]), np.zeros_like(decays[:1])])
    expected = reference.linear_recurrence(shifted, weights, reverse=True)
    scale = reference.error_scale(shifted, weights, reverse=True)
    assert_close(grads[1], expected, scale, dtype_of(dtype), 300)
    previous = np.concatenate([state[None], h[:-1]]).astype(expected.dtype)
    # grad_decays is formed from the rounded grad_impulses in half precision.
    product = np.conj(previous) * grads[1].astype(expected.dtype)
    np.testing.assert_allclose(grads[0].astype(expected.dtype), product,
                               atol=tolerance(dtype_of(dtype), 300) * np.abs(product).max())


def test_half_gradient_sums_overflow_quietly(backend):
    """A broadcast decay's gradient, summed over time in float32, rounds to infinity in
    float16 where it exceeds the type's range: without a floating-point warning, as the
    scan itself overflows, and equal to the float32 sum rounded."""
    length = 64
    decays = backend.asarray(np.full(1, 0.5, np.float16))
    output = backend.asarray(np.full((length, 1), 100.0, np.float16))
    weights = backend.asarray(np.full((length, 1), 60.0, np.float16))
    grad_decays, _, _ = cuscan.linear_recurrence_vjp(weights, decays, output)
    grad = backend.to_numpy(grad_decays)
    assert grad.dtype == np.float16
    assert grad.shape == (1,)
    assert np.isposinf(grad[0])  # terms of about 100 * 120, 63 of them: over 65504
    # Terms beyond the range themselves, infinite of both signs, sum to NaN, as quietly.
    signs = np.where(np.arange(length) % 2, 1, -1)[:, None]
    output = backend.asarray((300 * signs).astype(np.float16))
    weights = backend.asarray(np.full((length, 1), 300.0, np.float16))
    grad_decays, _, _ = cuscan.linear_recurrence_vjp(weights, decays, output)
    assert np.isnan(backend.to_numpy(grad_decays)[0])


@pytest.mark.parametrize("with_state", [True, False])
def test_empty_time_axis(backend, with_state):
    zeros = backend.asarray(np.zeros((0, 3)))
    state = backend.asarray(np.ones(3)) if with_state else None
    grad_decays, grad_impulses, grad_state = cuscan.linear_recurrence_vjp(
        zeros, backend.asarray(np.ones(3)), zeros, state)
    assert grad_impulses.shape == (0, 3)
    np.testing.assert_array_equal(backend.to_numpy(grad_decays), 0)
    if with_state:
        np.testing.assert_array_equal(backend.to_numpy(grad_state), 0)
    else:
        assert grad_state is None


def test_inputs_not_modified(backend):
    rng = np.random.default_rng(6)
    arrays = [make(rng, (100, 2)) for _ in range(3)] + [make(rng, (2,))]
    copies = [backend.asarray(v) for v in arrays]
    cuscan.linear_recurrence_vjp(*copies, reverse=True)
    for before, after in zip(arrays, copies, strict=True):
        np.testing.assert_array_equal(before, backend.to_numpy(after))


@pytest.mark.parametrize("reverse", [False, True])
def test_into_given_arrays(backend, reverse):
    """The entry points the framework adapters call write into arrays they are given, the
    gradients summed to those arrays' shapes (a broadcast decay's and state's), and refuse
    arrays of another shape or dtype, or a gradient of a state there is not."""
    rng = np.random.default_rng(8)
    operands = make(rng, (9, 1), low=-1.0), make(rng, (9, 3)), make(rng, (1,))
    weights = make(rng, (9, 3))
    h = reference.linear_recurrence(*operands, reverse=reverse)
    a, x, h0, g = (backend.asarray(v) for v in (*operands, weights))
    out = backend.xp.full(h.shape, np.nan)
    assert _api.forward(a, x, h0, reverse=reverse, out=out) is out
    assert_close(backend.to_numpy(out), h, reference.error_scale(*operands, reverse=reverse),
                 np.float64, len(h))
    into = tuple(backend.xp.full(v.shape, np.nan) for v in operands)
    grads = _api.backward(g, a, backend.asarray(h), h0, reverse=reverse, out=into)
    for i, (grad, given) in enumerate(zip(grads, into, strict=True)):
        def changed(v, i=i):
            return loss(weights, *(v if j == i else w for j, w in enumerate(operands)), 0,
                        reverse)
        assert grad is given
        np.testing.assert_allclose(backend.to_numpy(grad),
                                   numerical_gradient(changed, operands[i]), rtol=1e-6,
                                   atol=1e-8)
    with pytest.raises(ValueError, match=r"`out` must be a float64 array of shape \(9, 3\)"):
        _api.forward(a, x, h0, out=backend.xp.empty((9, 2)))
    with pytest.raises(ValueError, match="`out` must be a float64 array"):
        _api.forward(a, x, h0, out=backend.xp.empty((9, 3), np.float32))
    with pytest.raises(ValueError, match="`out` must hold float64 arrays; got float32"):
        _api.backward(g, a, backend.asarray(h), h0,
                      out=(into[0].astype(np.float32), into[1], into[2]))
    with pytest.raises(ValueError, match="`out` must hold a gradient of `initial_state`"):
        _api.backward(g, a, backend.asarray(h), out=into)


@pytest.mark.parametrize(("dtype", "shape", "axis"), [
    (np.float32, (1 << 24,), 0),
    (np.complex64, (1 << 24,), 0),
    (np.complex64, (64, 1 << 18), -1),
])
def test_numpy_memory_is_the_results(dtype, shape, axis):
    """On NumPy arrays the forward scan allocates its result and the gradient its two, besides
    the scratch pool's buffers (at most `_scratch._POOL_BYTES` in all), on arrays of 64 and 128
    MiB; the gradient of complex decays held their conjugate too (three arrays' worth)."""
    rng = np.random.default_rng(7)
    decays = np.full(shape, 0.99, dtype)
    if np.dtype(dtype).kind == "c":
        decays *= np.exp(1j * rng.uniform(-1, 1, shape)).astype(dtype)
    impulses = rng.standard_normal(shape).astype(dtype)
    output = grad_output = None
    for run in range(2):
        tracemalloc.start()
        try:
            if run == 0:
                output = cuscan.linear_recurrence(decays, impulses, axis=axis)
                results = output.nbytes
            else:
                grads = cuscan.linear_recurrence_vjp(grad_output, decays, output, axis=axis)
                results = sum(g.nbytes for g in grads if g is not None)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= results + _scratch._POOL_BYTES, (run, peak / output.nbytes)
        grad_output = impulses
