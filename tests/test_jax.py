"""The JAX adapter: arrays in and out without copies; jit, vmap, and derivatives in both
modes."""

from __future__ import annotations

import array
import functools
import importlib.util

import numpy as np
import pytest

import cuscan
from tests import reference
from tests.conftest import (
    _gpu_available,
    assert_close,
    decays_near_one,
    record_core_calls,
    require,
    run_in_fresh_process,
)

jax = require("jax")
import jax.numpy as jnp  # noqa: E402  (needs jax)
from jax.test_util import check_grads  # noqa: E402

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param == "gpu":
        if not _gpu_available():
            pytest.skip("needs CuPy and a GPU")
        try:
            return jax.devices("gpu")[0]
        except RuntimeError:
            pytest.skip("needs a CUDA build of jax")
    return jax.devices("cpu")[0]


@pytest.fixture(autouse=True)
def x64():
    """64-bit types, so float64 and complex128 are tested; one test turns it off."""
    with jax.enable_x64(True):
        yield


def put(device, *arrays):
    return [jax.device_put(jnp.asarray(a), device) for a in arrays]


def associative_scan(decays, impulses, initial_state, reverse=False):
    """The recurrence in JAX itself, with ``lax.associative_scan``, for comparison."""
    decays, impulses = jnp.broadcast_arrays(decays, impulses)
    first = -1 if reverse else 0
    impulses = impulses.at[first].add(decays[first] * initial_state)

    def combine(earlier, later):
        return earlier[0] * later[0], later[0] * earlier[1] + later[1]

    return jax.lax.associative_scan(combine, (decays, impulses), reverse=reverse)[1]


DTYPES = ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_matches_reference(device, dtype, method, reverse):
    rng = np.random.default_rng(0)
    values = [rng.uniform(0.5, 1, (300, 4)), rng.standard_normal((300, 4)),
              rng.standard_normal(4)]
    if dtype.startswith("complex"):
        values = [v * np.exp(0.3j) for v in values]
    decays, impulses, state = put(device, *(v.astype(dtype) for v in values))
    h = cuscan.linear_recurrence(decays, impulses, state, method=method, reverse=reverse)
    assert isinstance(h, jax.Array)
    assert h.dtype == jnp.dtype(dtype)
    assert h.devices() == {device}
    wide = "complex128" if dtype.startswith("complex") else "float64"
    as_numpy = [np.asarray(v).astype(wide) for v in (decays, impulses, state)]
    expected = reference.linear_recurrence(*as_numpy, reverse=reverse)
    scale = reference.error_scale(*as_numpy, reverse=reverse)
    assert_close(np.asarray(h).astype(wide), expected, scale, h.dtype, 300)


def test_layouts_broadcasting_and_scalars(device):
    rng = np.random.default_rng(1)
    impulses, = put(device, rng.standard_normal((6, 50, 2)))
    impulses = jnp.transpose(impulses, (1, 2, 0))  # (50, 2, 6)
    decays, = put(device, rng.uniform(0, 1, 6))  # time-invariant
    h = cuscan.linear_recurrence(decays, impulses, 1.0, axis=0)
    expected = reference.linear_recurrence(np.asarray(decays), np.asarray(impulses), 1.0)
    np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-12)
    for axis in (1, -1, 2):
        h = cuscan.linear_recurrence(0.5, impulses, axis=axis)
        expected = reference.linear_recurrence(0.5, np.moveaxis(np.asarray(impulses), axis, 0))
        np.testing.assert_allclose(np.moveaxis(np.asarray(h), axis, 0), expected, rtol=1e-12)
    h32 = cuscan.linear_recurrence(0.5, impulses.astype(jnp.float32), axis=1)
    assert h32.dtype == jnp.float32
    assert cuscan.linear_recurrence(0.5j, impulses.astype(jnp.float32)).dtype == jnp.complex64
    assert cuscan.linear_recurrence(1, jnp.arange(3)).dtype == jnp.float64
    # Broadcast impulses (a constant input) against full decays.
    h = cuscan.linear_recurrence(jnp.full((5, 3), 0.5), jnp.ones(3))
    np.testing.assert_allclose(np.asarray(h), reference.linear_recurrence(
        np.full((5, 3), 0.5), np.ones((5, 3))))
    assert cuscan.linear_recurrence(decays, jnp.zeros((0, 6))).shape == (0, 6)
    # Python sequences beside JAX arrays, converted as jnp.asarray converts them
    for state in ([0.5] * 6, array.array("d", [0.5] * 6), memoryview(np.full(6, 0.5))):
        h = cuscan.linear_recurrence(decays, [[1.0] * 6] * 3, state)
        np.testing.assert_allclose(np.asarray(h), reference.linear_recurrence(
            np.asarray(decays), np.ones((3, 6)), 0.5), rtol=1e-12)
    grad = jax.grad(lambda a: cuscan.linear_recurrence(a, [1.0, 2.0, 3.0]).sum())(
        jnp.ones(3, jnp.float32))
    assert grad.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(grad), [0, 2, 3])
    grads = cuscan.linear_recurrence_vjp([1.0, 1.0], 1.0, h[:2, 0], 0.0)
    np.testing.assert_allclose(np.asarray(grads[1]), [2, 1])
    # NumPy arrays beside JAX arrays, converted as jnp.asarray converts them
    h = cuscan.linear_recurrence(np.asarray(decays), impulses, np.ones((2, 6)), axis=0)
    assert isinstance(h, jax.Array)
    np.testing.assert_allclose(np.asarray(h), reference.linear_recurrence(
        np.asarray(decays), np.asarray(impulses), 1.0), rtol=1e-12)
    grad = jax.grad(lambda x: cuscan.linear_recurrence(np.full(3, 0.5), x).sum())(jnp.ones(3))
    np.testing.assert_allclose(np.asarray(grad), [1.75, 1.5, 1])
    with jax.enable_x64(False):
        h = cuscan.linear_recurrence(np.full(3, 0.5), jnp.ones(3, jnp.float32))
        assert h.dtype == jnp.float32


def test_without_64_bit_mode():
    with jax.enable_x64(False):
        h = cuscan.linear_recurrence(0.5, jnp.arange(4))
        assert h.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(h), [0, 1, 2.5, 4.25])


def _pointer(array) -> int:
    return array.ctypes.data if isinstance(array, np.ndarray) else array.data.ptr


@pytest.mark.parametrize("jit", [False, True])
def test_no_copies(device, monkeypatch, jit):
    forward = record_core_calls(monkeypatch, "forward")
    decays, impulses, state = put(device, np.full((64, 3), 0.9), np.ones((64, 3)), np.ones(3))
    function = cuscan.linear_recurrence
    if jit:
        function = jax.jit(function, static_argnames=("axis", "reverse", "method"))
    h = function(decays, impulses, state)
    h.block_until_ready()
    assert [_pointer(a) for a in forward["inputs"]] == [
        v.unsafe_buffer_pointer() for v in (decays, impulses, state)]
    assert not any(a.flags.writeable for a in forward["inputs"] if isinstance(a, np.ndarray))
    assert _pointer(forward["out"][0]) == h.unsafe_buffer_pointer()

    backward = record_core_calls(monkeypatch, "backward")
    grads = jax.vjp(function, decays, impulses, state)[1](h)
    pointers = [g.unsafe_buffer_pointer() for g in grads]
    assert [_pointer(o) for o in backward["out"]] == pointers


def test_inputs_not_modified(device):
    decays, impulses = put(device, np.full((200, 3), 0.7), np.ones((200, 3)))
    copies = np.asarray(decays).copy(), np.asarray(impulses).copy()
    h, vjp = jax.vjp(lambda a, x: cuscan.linear_recurrence(a, x, reverse=True), decays, impulses)
    vjp(jnp.ones_like(h))
    np.testing.assert_array_equal(np.asarray(decays), copies[0])
    np.testing.assert_array_equal(np.asarray(impulses), copies[1])


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_gradients_match_associative_scan(device, dtype, method, reverse):
    rng = np.random.default_rng(2)
    values = [rng.uniform(0, 0.9, 3), rng.standard_normal((17, 2, 3)), rng.standard_normal((1, 3))]
    if dtype == "complex128":
        values = [v * np.exp(1j * rng.uniform(0, 6, v.shape)) for v in values]
    decays, impulses, state = put(device, *values)

    def loss(function):
        def value(a, x, s):
            h = function(a, x, s)
            return jnp.sum(jnp.abs(h) ** 2 * jnp.arange(h.size).reshape(h.shape) % 5)
        return value

    ours = jax.jit(jax.grad(loss(lambda a, x, s: cuscan.linear_recurrence(
        a, x, s, reverse=reverse, method=method)), argnums=(0, 1, 2)))(decays, impulses, state)
    theirs = jax.grad(loss(lambda a, x, s: associative_scan(a, x, s, reverse)),
                      argnums=(0, 1, 2))(decays, impulses, state)
    for mine, expected in zip(ours, theirs, strict=True):
        assert mine.shape == expected.shape
        np.testing.assert_allclose(np.asarray(mine), np.asarray(expected), rtol=1e-10,
                                   atol=1e-10)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("reverse", [False, True])
def test_check_grads(device, dtype, reverse):
    """Reverse mode to third order against finite differences."""
    rng = np.random.default_rng(3)
    values = [rng.uniform(0, 0.9, (9, 1)), rng.standard_normal((9, 2)), rng.standard_normal(2)]
    if dtype == "complex128":
        values = [v * (1 + 0.5j) for v in values]
    check_grads(lambda a, x, s: cuscan.linear_recurrence(a, x, s, method="parallel",
                                                         reverse=reverse),
                put(device, *values), order=3, modes=["rev"])


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("reverse", [False, True])
def test_higher_order_matches_associative_scan(device, dtype, reverse):
    """Second derivatives (grad of grad, and jacrev of jacrev) with broadcast operands."""
    rng = np.random.default_rng(6)
    values = [rng.uniform(0, 0.9, (7, 1, 3)), rng.standard_normal((7, 2, 3)),
              rng.standard_normal((1, 3))]
    if dtype == "complex128":
        values = [v * np.exp(1j * rng.uniform(0, 6, v.shape)) for v in values]
    operands = put(device, *values)
    weights = [jnp.asarray(rng.standard_normal(v.shape)) for v in values]

    def loss(function):
        def value(a, x, s):
            h = function(a, x, s)
            return jnp.sum(jnp.abs(h) ** 2 * (jnp.arange(h.size).reshape(h.shape) % 5)
                           + jnp.real(h) ** 3)
        return value

    ours = loss(lambda a, x, s: cuscan.linear_recurrence(a, x, s, reverse=reverse))
    theirs = loss(lambda a, x, s: associative_scan(a, x, s, reverse))
    for first in range(3):
        def mixed(function, first=first):
            return lambda *p: jnp.sum(jnp.real(weights[first] * jax.grad(
                function, argnums=first)(*p)))
        mine = jax.jit(jax.grad(mixed(ours), argnums=(0, 1, 2)))(*operands)
        expected = jax.grad(mixed(theirs), argnums=(0, 1, 2))(*operands)
        for got, want in zip(mine, expected, strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9,
                                       atol=1e-9)
    if dtype == "float64":
        hessian = jax.jacrev(jax.jacrev(ours))(*operands)
        np.testing.assert_allclose(np.asarray(hessian), np.asarray(jax.hessian(theirs)(
            *operands)), rtol=1e-9, atol=1e-9)


def test_jacobian_and_vjp_function_derivatives(device):
    """jacrev maps the VJP over a batch of cotangents alone; linear_recurrence_vjp is
    itself differentiable."""
    rng = np.random.default_rng(7)
    decays, impulses, state, cotangent = put(
        device, rng.uniform(0, 1, (6, 2)), rng.standard_normal((6, 2)), rng.standard_normal(2),
        rng.standard_normal((6, 2)))
    for argnum in range(3):
        mine = jax.jacrev(cuscan.linear_recurrence, argnums=argnum)(decays, impulses, state)
        expected = jax.jacrev(associative_scan, argnums=argnum)(decays, impulses, state)
        np.testing.assert_allclose(np.asarray(mine), np.asarray(expected), rtol=1e-12)

    def through_vjp(vjp_of):
        def value(a, s):
            h = associative_scan(a, impulses, s)
            return sum(jnp.sum(g ** 2) for g in vjp_of(a, h, s))
        return value

    mine = jax.grad(through_vjp(lambda a, h, s: cuscan.linear_recurrence_vjp(
        cotangent, a, h, s)), argnums=(0, 1))(decays, state)
    expected = jax.grad(through_vjp(lambda a, h, s: jax.vjp(
        lambda a, x, s: associative_scan(a, x, s), a, impulses, s)[1](cotangent)),
        argnums=(0, 1))(decays, state)
    for got, want in zip(mine, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_mode_matches_associative_scan(device, dtype, reverse):
    """jvp, jacfwd and every mix of forward and reverse mode to second order, with broadcast
    operands."""
    rng = np.random.default_rng(8)
    values = [rng.uniform(0, 0.9, (7, 1, 3)), rng.standard_normal((7, 2, 3)),
              rng.standard_normal((1, 3))]
    if dtype == "complex128":
        values = [v * np.exp(1j * rng.uniform(0, 6, v.shape)) for v in values]
    operands = tuple(put(device, *values))
    tangents = tuple(put(device, *(rng.standard_normal(v.shape) + (0 if dtype == "float64" else
                                                             1j * rng.standard_normal(v.shape))
                                   for v in values)))

    def ours(a, x, s):
        return cuscan.linear_recurrence(a, x, s, reverse=reverse)

    def theirs(a, x, s):
        return associative_scan(a, x, s, reverse)

    def close(got, want):
        for mine, expected in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert mine.shape == expected.shape
            np.testing.assert_allclose(np.asarray(mine), np.asarray(expected), rtol=1e-9,
                                       atol=1e-9)

    close(jax.jit(lambda *p: jax.jvp(ours, p, tangents))(*operands),
          jax.jvp(theirs, operands, tangents))
    holomorphic = dtype == "complex128"
    close(jax.jacfwd(ours, argnums=(0, 1, 2), holomorphic=holomorphic)(*operands),
          jax.jacrev(theirs, argnums=(0, 1, 2), holomorphic=holomorphic)(*operands))

    def loss(function):
        return lambda a, x, s: jnp.sum(jnp.abs(function(a, x, s)) ** 2 + jnp.real(
            function(a, x, s)) ** 3)

    if not holomorphic:  # Jacobians of a real loss of complex inputs are not defined
        for outer, inner in ((jax.jacfwd, jax.jacrev), (jax.jacfwd, jax.jacfwd),
                             (jax.jacrev, jax.jacfwd)):
            second = outer(inner(loss(ours), argnums=(0, 1, 2)), argnums=(0, 1, 2))
            close(second(*operands), jax.hessian(loss(theirs), argnums=(0, 1, 2))(*operands))
    # A Hessian-vector product, forward over reverse.
    close(jax.jvp(jax.grad(loss(ours), argnums=(0, 1, 2)), operands, tangents),
          jax.jvp(jax.grad(loss(theirs), argnums=(0, 1, 2)), operands, tangents))
    check_grads(lambda a, x, s: cuscan.linear_recurrence(a, x, s, method="parallel",
                                                         reverse=reverse),
                operands, order=3, modes=["fwd", "rev"])


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("reverse", [False, True])
def test_taylor_mode_matches_associative_scan(device, dtype, reverse):
    """``jax.experimental.jet`` to third order, with broadcast operands and a state, and
    through a gradient and a JVP (whose primitives expand their compositions)."""
    from jax.experimental import jet

    rng = np.random.default_rng(12)
    shapes = [(7, 1, 3), (7, 2, 3), (1, 3)]

    def draw(shape, low=-1.0):
        values = rng.uniform(low, 1, shape)
        return values if dtype == "float64" else values * np.exp(1j * rng.uniform(0, 6, shape))

    operands = tuple(put(device, *(draw(shape, 0.0) for shape in shapes)))
    series = tuple([put(device, draw(shape))[0] for _ in range(3)] for shape in shapes)

    def close(got, want):
        for mine, expected in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert mine.shape == expected.shape
            np.testing.assert_allclose(np.asarray(mine), np.asarray(expected), rtol=1e-9,
                                       atol=1e-9)

    def ours(a, x, s):
        return cuscan.linear_recurrence(a, x, s, reverse=reverse)

    def theirs(a, x, s):
        return associative_scan(a, x, s, reverse)

    close(jax.jit(lambda p, t: jet.jet(ours, p, t))(operands, series),
          jet.jet(theirs, operands, series))
    if dtype == "float64":
        def gradient(function):
            return jax.grad(lambda *v: jnp.sum(function(*v) ** 2), argnums=(0, 1, 2))
        close(jet.jet(lambda *v: gradient(ours)(*v)[0], operands, series),
              jet.jet(lambda *v: gradient(theirs)(*v)[0], operands, series))
    close(jet.jet(lambda *v: jax.jvp(ours, v, operands)[1], operands, series),
          jet.jet(lambda *v: jax.jvp(theirs, v, operands)[1], operands, series))


def test_forward_mode_of_the_vjp_and_edges(device):
    """linear_recurrence_vjp in forward mode; vmap of jvp; no steps; constant operands."""
    rng = np.random.default_rng(9)
    decays, impulses, state, cotangent = put(
        device, rng.uniform(0, 1, (6, 2)), rng.standard_normal((6, 2)), rng.standard_normal(2),
        rng.standard_normal((6, 2)))
    h = associative_scan(decays, impulses, state)
    check_grads(lambda g, a, h, s: cuscan.linear_recurrence_vjp(g, a, h, s),
                (cotangent, decays, h, state), order=2, modes=["fwd", "rev"])
    # Linear maps transpose: the recurrence in its impulses and state, into the VJP; the
    # VJP in its cotangent, into the JVP.
    transposed = jax.linear_transpose(lambda x, s: cuscan.linear_recurrence(decays, x, s),
                                      impulses, state)(cotangent)
    expected = jax.vjp(lambda x, s: associative_scan(decays, x, s), impulses, state)[1](
        cotangent)
    for got, want in zip(transposed, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)
    directions = (decays * 0.3, impulses[::-1], state + 1)
    (transposed,) = jax.linear_transpose(
        lambda g: cuscan.linear_recurrence_vjp(g, decays, h, state), cotangent)(directions)
    expected = jax.jvp(lambda a, x, s: associative_scan(a, x, s), (decays, impulses, state),
                       directions)[1]
    np.testing.assert_allclose(np.asarray(transposed), np.asarray(expected), rtol=1e-12)
    for steps in (1, 0):  # the state's share of a single step, and of none
        transposed = jax.linear_transpose(
            lambda x, s, steps=steps: cuscan.linear_recurrence(decays[:steps], x, s),
            impulses[:steps], state)(cotangent[:steps])
        expected = (cotangent[:steps], jnp.sum(decays[:steps] * cotangent[:steps], axis=0))
        for got, want in zip(transposed, expected, strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)
    # No steps along an axis between two others: the state's share keeps both of them.
    nothing, cube_state = put(device, np.ones((3, 0, 4)), rng.standard_normal((3, 4)))
    for reverse in (False, True):
        transposed = jax.linear_transpose(
            lambda x, s, reverse=reverse: cuscan.linear_recurrence(nothing, x, s, axis=1,
                                                                   reverse=reverse),
            nothing, cube_state)(nothing)
        assert [got.shape for got in transposed] == [(3, 0, 4), (3, 4)]
        assert not np.asarray(transposed[1]).any()
    with pytest.raises(NotImplementedError, match="not in its decays"):
        jax.linear_transpose(lambda a: cuscan.linear_recurrence(a, impulses), decays)(h)
    # Nor is the tangent linear in the point it is taken at, nor the VJP in the output.
    with pytest.raises(NotImplementedError, match="linear in the tangents only"):
        jax.linear_transpose(lambda a: jax.jvp(
            lambda a, x: cuscan.linear_recurrence(a, x, state), (a, impulses),
            (decays * 0.3, impulses))[1], decays)(h)
    with pytest.raises(NotImplementedError, match="linear in the cotangent only"):
        jax.linear_transpose(
            lambda h: cuscan.linear_recurrence_vjp(cotangent, decays, h, state)[0], h)(decays)
    with pytest.raises(NotImplementedError, match="linear in the cotangent only"):
        jax.linear_transpose(lambda g, h: cuscan.linear_recurrence_vjp(g, decays, h, state)[0],
                             cotangent, h)(decays)
    # vmap over tangents: a batch of directional derivatives at once.
    directions = jnp.asarray(rng.standard_normal((4, 6, 2)))
    batched = jax.vmap(lambda t: jax.jvp(lambda x: cuscan.linear_recurrence(decays, x, state),
                                         (impulses,), (t,))[1])(directions)
    for b in range(4):
        np.testing.assert_allclose(np.asarray(batched[b]), reference.linear_recurrence(
            np.asarray(decays), np.asarray(directions[b])), rtol=1e-12)
    # Tangents with respect to one operand only, and no time steps at all.
    only_state = jax.jvp(lambda s: cuscan.linear_recurrence(decays, impulses, s),
                         (state,), (jnp.ones(2),))[1]
    np.testing.assert_allclose(np.asarray(only_state), np.cumprod(np.asarray(decays), axis=0),
                               rtol=1e-12)
    empty = jnp.ones((0, 2))
    value, tangent = jax.jvp(lambda a, s: cuscan.linear_recurrence(a, empty, s),
                             (empty, state), (empty, state))
    assert value.shape == tangent.shape == (0, 2)
    assert jax.grad(lambda s: jnp.sum(cuscan.linear_recurrence(empty, empty, s)))(state).shape \
        == (2,)


def test_vmap(device):
    rng = np.random.default_rng(4)
    decays, impulses, states = put(device, rng.uniform(0, 1, (5, 30, 3)),
                                   rng.standard_normal((5, 30, 3)), rng.standard_normal((5, 3)))

    def expected(a, x, s):
        return np.stack([reference.linear_recurrence(*np.broadcast_arrays(ai, xi), si)
                         for ai, xi, si in zip(*(np.broadcast_to(np.asarray(v), (5, *v.shape[-2:]))
                                                 if v.ndim == 3 else np.asarray(v)
                                                 for v in (a, x, s)), strict=True)])

    function = jax.vmap(lambda a, x, s: cuscan.linear_recurrence(a, x, s))
    np.testing.assert_allclose(np.asarray(function(decays, impulses, states)),
                               expected(decays, impulses, states), rtol=1e-12)
    # Only the impulses batched; decays time-invariant, the batch axis last.
    function = jax.vmap(lambda x: cuscan.linear_recurrence(decays[0, 0], x, states[0]),
                        in_axes=2, out_axes=2)
    result = function(jnp.moveaxis(impulses, 0, 2))
    for b in range(5):
        np.testing.assert_allclose(np.asarray(result[..., b]), reference.linear_recurrence(
            np.asarray(decays[0, 0]), np.asarray(impulses[b]), np.asarray(states[0])),
            rtol=1e-12)
    # Only the initial state batched, and gradients with respect to it.
    function = jax.jit(jax.vmap(lambda s: cuscan.linear_recurrence(decays[0], impulses[0], s)))
    result = function(states)
    state_grads = jax.vmap(jax.grad(lambda s: jnp.sum(
        cuscan.linear_recurrence(decays[0], impulses[0], s) ** 2)))(states)
    for b in range(5):
        np.testing.assert_allclose(np.asarray(result[b]), reference.linear_recurrence(
            np.asarray(decays[0]), np.asarray(impulses[0]), np.asarray(states[b])),
            rtol=1e-12)
        single = jax.grad(lambda s: jnp.sum(associative_scan(decays[0], impulses[0], s) ** 2))(
            states[b])
        np.testing.assert_allclose(np.asarray(state_grads[b]), np.asarray(single), rtol=1e-10)
    # A scalar state per example, of lower rank than a step of the output.
    result = jax.vmap(lambda s: cuscan.linear_recurrence(decays[0], impulses[0], s))(
        states[:, 0])
    for b in range(5):
        np.testing.assert_allclose(np.asarray(result[b]), reference.linear_recurrence(
            np.asarray(decays[0]), np.asarray(impulses[0]), np.full(3, states[b, 0])),
            rtol=1e-12)
    # Per-example gradients.
    grads = jax.vmap(jax.grad(lambda a, x: jnp.sum(cuscan.linear_recurrence(a, x) ** 2)))(
        decays, impulses)
    for b in range(5):
        single = jax.grad(lambda a, x: jnp.sum(associative_scan(a, x, 0.0) ** 2))(
            decays[b], impulses[b])
        np.testing.assert_allclose(np.asarray(grads[b]), np.asarray(single), rtol=1e-10)
    # Per-example gradients of shared, time-invariant decays.
    shared = decays[0, 0]
    grads = jax.jit(jax.vmap(jax.grad(lambda a, x: jnp.sum(cuscan.linear_recurrence(a, x) ** 2)),
                             in_axes=(None, 0)))(shared, impulses)
    assert grads.shape == (5, 3)
    for b in range(5):
        single = jax.grad(lambda a, x: jnp.sum(associative_scan(a, x, 0.0) ** 2))(
            shared, impulses[b])
        np.testing.assert_allclose(np.asarray(grads[b]), np.asarray(single), rtol=1e-10)


def test_vmap_of_the_vjp_function(device):
    """linear_recurrence_vjp mapped over any one operand, the others shared."""
    rng = np.random.default_rng(10)
    decays, cotangent, output, states = put(
        device, rng.uniform(0, 1, (4, 6, 2)), rng.standard_normal((4, 6, 2)),
        rng.standard_normal((4, 6, 2)), rng.standard_normal((4, 2)))
    single = (cotangent[0], decays[0], output[0], states[0])
    for argnum, batched in enumerate((cotangent, decays, output, states)):
        def vjp(operand, argnum=argnum):
            operands = list(single)
            operands[argnum] = operand
            return cuscan.linear_recurrence_vjp(*operands)

        grads = jax.jit(jax.vmap(vjp))(batched)
        for b in range(4):
            for got, want in zip(grads, vjp(batched[b]), strict=True):
                np.testing.assert_allclose(np.asarray(got[b]), np.asarray(want), rtol=1e-12)
    # A scalar state per example, of lower rank than a step of the output.
    grads = jax.jit(jax.vmap(lambda s: cuscan.linear_recurrence_vjp(*single[:3], s)))(
        states[:, 0])
    for b in range(4):
        expected = cuscan.linear_recurrence_vjp(*single[:3], states[b, 0])
        np.testing.assert_allclose(np.asarray(expected[2]), np.sum(
            np.asarray(decays[0, 0]) * np.asarray(expected[1][0])), rtol=1e-12)
        for got, want in zip(grads, expected, strict=True):
            assert got[b].shape == want.shape
            np.testing.assert_allclose(np.asarray(got[b]), np.asarray(want), rtol=1e-12)


def test_vjp_function_matches_jax_vjp(device):
    rng = np.random.default_rng(5)
    values = [rng.uniform(0, 1, 4) * np.exp(1j), rng.standard_normal((20, 4)) + 0j,
              rng.standard_normal(4) + 1j, rng.standard_normal((20, 4)) - 2j]
    decays, impulses, state, cotangent = put(device, *values)
    h, vjp = jax.vjp(lambda a, x, s: associative_scan(a, x, s), decays, impulses, state)
    ours = cuscan.linear_recurrence_vjp(cotangent, decays, h, state)
    for mine, expected in zip(ours, vjp(cotangent), strict=True):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(expected), rtol=1e-10)


def test_errors_at_trace_time():
    with pytest.raises(ValueError, match="do not broadcast"):
        jax.jit(cuscan.linear_recurrence)(jnp.ones(3), jnp.ones(4))
    with pytest.raises(ValueError, match="initial_state"):
        cuscan.linear_recurrence(0.5, jnp.ones((3, 2)), jnp.ones(3))
    for option in ("axis", "reverse"):
        traced = jax.jit(lambda x, value, option=option: cuscan.linear_recurrence(
            0.5, x, **{option: value}))
        with pytest.raises(TypeError, match=f"`{option}` must be .*static argument"):
            traced(jnp.ones(3), 0)
    # Extended dtypes, which NumPy cannot name, are refused like any unsupported dtype.
    with pytest.raises(TypeError, match="`decays` has dtype key<fry>, which cuscan does not"):
        cuscan.linear_recurrence(jax.random.key(0), jnp.ones(3))
    with pytest.raises(TypeError, match="`initial_state` has dtype key<fry>"):
        jax.jit(cuscan.linear_recurrence_vjp)(jnp.ones(3), 0.5, jnp.ones(3),
                                              jax.random.key(0))
    static = jax.jit(cuscan.linear_recurrence, static_argnames=("axis", "reverse"))
    np.testing.assert_allclose(np.asarray(static(0.5, jnp.ones((2, 3)), axis=1, reverse=True)),
                               reference.linear_recurrence(0.5, np.ones((2, 3)), axis=1,
                                                           reverse=True), rtol=1e-6)


def test_symbolic_shapes():
    """Shape polymorphism (``jax.export.symbolic_shape``, as Keras infers a model's shapes):
    shapes and dtypes of results and derivatives come out symbolic, and shapes that cannot
    broadcast are still refused."""
    b, t = jax.export.symbolic_shape("b, t")
    x = jax.ShapeDtypeStruct((b, t, 8), jnp.float32)
    decays = jax.ShapeDtypeStruct((8,), jnp.float32)
    state = jax.ShapeDtypeStruct((b, 8), jnp.float32)

    def forward(a, x, s, reverse=False):
        return cuscan.linear_recurrence(a, x, s, axis=1, reverse=reverse)

    def total(a, x, s):
        return forward(a, x, s).sum()

    def shapes(function, *args):
        return [(r.shape, r.dtype) for r in jax.tree.leaves(jax.eval_shape(function, *args))]

    full, channels = ((b, t, 8), jnp.float32), ((8,), jnp.float32)
    assert shapes(forward, decays, x, state) == [full]
    assert shapes(lambda *v: forward(*v, reverse=True), decays, x, state) == [full]
    assert shapes(jax.grad(total, (0, 1, 2)), decays, x, state) == [
        channels, full, ((b, 8), jnp.float32)]
    assert shapes(lambda *v: jax.jvp(forward, v, v), decays, x, state) == [full, full]
    assert shapes(jax.hessian(total), decays, x, state) == [((8, 8), jnp.float32)]
    assert shapes(jax.vmap(lambda a, x: cuscan.linear_recurrence(a, x), (None, 0)),
                  decays, x) == [full]
    assert shapes(lambda g, a, h: cuscan.linear_recurrence_vjp(g, a, h, axis=1), x, decays,
                  x) == [channels, full]
    with pytest.raises(ValueError, match="do not broadcast"):
        jax.eval_shape(forward, jax.ShapeDtypeStruct((3,), jnp.float32), x, state)
    with pytest.raises(ValueError, match="must broadcast to the state shape"):
        jax.eval_shape(forward, decays, x, jax.ShapeDtypeStruct((t, 8), jnp.float32))


@pytest.mark.parametrize("symbolic", [False, True])
def test_export(symbolic):
    """``jax.export`` serialises programs that call cuscan, in XLA's own scan (a callback into
    Python cannot leave the process): values and derivatives as the buffer callbacks give
    them, with concrete or symbolic shapes, for every dtype, and for the filters."""
    serialisable = importlib.util.find_spec("flatbuffers") is not None
    rng = np.random.default_rng(4)
    decays, impulses = rng.uniform(0.5, 1.0, (37, 3)), rng.standard_normal((37, 3))
    state = rng.standard_normal(3)

    def exported(function, *args, specs=None):
        if symbolic and specs is not None:
            args_in = jax.export.symbolic_args_specs(args, specs)
        else:
            args_in = args
        module = jax.export.export(jax.jit(function))(*args_in)
        if serialisable:  # JAX's serialisation needs flatbuffers, which JAX does not require
            module = jax.export.deserialize(module.serialize())
        assert "callback" not in module.mlir_module()
        return module.call

    def close(actual, expected, dtype=np.float64):
        tolerance = 50 * float(jnp.finfo(dtype).eps)
        for mine, theirs in zip(jax.tree.leaves(actual), jax.tree.leaves(expected),
                                strict=True):
            assert mine.dtype == theirs.dtype
            np.testing.assert_allclose(np.asarray(mine, np.complex128),
                                       np.asarray(theirs, np.complex128),
                                       rtol=tolerance, atol=tolerance)

    length = 13 if symbolic else 37  # a symbolic program runs on a length of its own
    a, x, h0 = (jnp.asarray(v) for v in (decays[:length], impulses[:length], state))
    specs = ("t, c", "t, c", "c")
    for reverse in (False, True):
        def forward(a, x, s, reverse=reverse):
            return cuscan.linear_recurrence(a, x, s, reverse=reverse)

        def loss(a, x, s, reverse=reverse):
            return jnp.sum(jnp.sin(forward(a, x, s, reverse)))

        gradient = jax.grad(loss, argnums=(0, 1, 2))
        call = exported(forward, *(jnp.asarray(v) for v in (decays, impulses, state)),
                        specs=specs)
        close(call(a, x, h0), forward(a, x, h0))
        call = exported(gradient, *(jnp.asarray(v) for v in (decays, impulses, state)),
                        specs=specs)
        close(call(a, x, h0), gradient(a, x, h0))
        tangent = jax.jit(lambda a: jax.jvp(lambda a: forward(a, x, h0), (a,),
                                            (jnp.ones_like(a),))[1])
        close(exported(tangent, a)(a), tangent(a))
    vjp = functools.partial(cuscan.linear_recurrence_vjp, axis=0)
    output = cuscan.linear_recurrence(a, x, h0)
    close(exported(vjp, x, a, output, h0)(x, a, output, h0), vjp(x, a, output, h0))
    for dtype in ("float32", "bfloat16", "complex64"):
        def channels_first(a, x):
            return cuscan.linear_recurrence(a, x, axis=1, reverse=True)

        a_t, x_t = a[0][:, None].astype(dtype), x.T.astype(dtype)
        call = exported(channels_first, a_t, x_t, specs=("c, 1", "c, t"))
        close(call(a_t, x_t), channels_first(a_t, x_t), dtype)
    empty = exported(lambda x: cuscan.linear_recurrence(0.5, x), x[:0])(x[:0])
    assert empty.shape == (0, 3)
    single = exported(lambda a, x, s: cuscan.linear_recurrence(a, x, s), a[:1], x[:1], h0)
    close(single(a[:1], x[:1], h0), a[:1] * h0 + x[:1])
    sos = np.array([[0.2, 0.4, 0.2, 1.0, -0.5, 0.25], [1.0, 0.0, -1.0, 1.0, 0.1, 0.3]])
    from cuscan import signal

    signal_in = jnp.asarray(rng.standard_normal((2, 500)))
    for function in (lambda x: signal.sosfiltfilt(sos, x), lambda x: signal.ema(x, 0.2)):
        close(exported(function, signal_in)(signal_in), function(signal_in))


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_export_single_precision_decays_near_one(dtype):
    """In ``jax.export``'s scan, over 2^18 steps of decays of modulus 1 (complex rotations)
    or 1 - 10^-5 in single precision, the recurrence and its gradient stay within ``eps *
    sqrt(T)`` of the result's RMS, as the serial loop's rounding does: with 64-bit types
    enabled, the associative scan's products of the decays are in double precision.
    Squared in single precision, the product over 2^k steps compounded 2^k roundings, 70
    times that bound for the rotations (as it still does without 64-bit types)."""
    decays, impulses, bound = decays_near_one(dtype, 2**18)

    def run(a, x):
        h = cuscan.linear_recurrence(a, x)
        return h, cuscan.linear_recurrence_vjp(x, a, h)[1]

    a, x = jnp.asarray(decays), jnp.asarray(impulses)
    module = jax.export.export(jax.jit(run))(a, x)
    assert "callback" not in module.mlir_module()
    # The gradient: the decays backwards in time (JAX's VJPs do not conjugate).
    for result, reverse in zip(module.call(a, x), (False, True), strict=True):
        expected = reference.linear_recurrence(decays, impulses, reverse=reverse)
        assert reference.relative_error(result, expected) <= bound


def test_keras_functional_model(tmp_path):
    """A Keras layer calling cuscan, in a functional model over a time axis of size None with
    Keras's JAX backend (which infers shapes symbolically), trains and saves."""
    require("keras")
    run_in_fresh_process("""
        import os, numpy as np, keras, cuscan
        class Decay(keras.layers.Layer):
            def build(self, shape):
                self.logit = self.add_weight(shape=(shape[-1],), initializer="zeros")
            def call(self, x):
                decays = keras.ops.sigmoid(self.logit)
                return cuscan.linear_recurrence(decays, (1 - decays) * x, axis=1)
        inputs = keras.Input((None, 4))
        model = keras.Model(inputs, keras.layers.Dense(1)(Decay()(inputs)[:, -1]))
        assert model.output_shape == (None, 1), model.output_shape
        model.compile("sgd", "mse")
        x = np.random.default_rng(0).standard_normal((16, 12, 4)).astype(np.float32)
        model.fit(x, x.sum((1, 2))[:, None], epochs=2, verbose=0)
        path = os.path.join(os.environ["OUTPUT_DIRECTORY"], "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, custom_objects={"Decay": Decay})
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    """, KERAS_BACKEND="jax", OUTPUT_DIRECTORY=str(tmp_path))


def test_keras_export_to_a_saved_model(tmp_path):
    """Keras' ``model.export`` on the JAX backend (through ``jax.export``) gives a TensorFlow
    SavedModel that serves any length, as the model computes it."""
    require("keras")
    require("tensorflow")
    run_in_fresh_process("""
        import os, numpy as np, keras, tensorflow as tf, cuscan
        class Decay(keras.layers.Layer):
            def build(self, shape):
                self.logit = self.add_weight(shape=(shape[-1],), initializer="ones")
            def call(self, x):
                return cuscan.linear_recurrence(keras.ops.sigmoid(self.logit), x, axis=1,
                                                reverse=True)
        inputs = keras.Input((None, 4))
        model = keras.Model(inputs, Decay()(inputs))
        path = os.path.join(os.environ["OUTPUT_DIRECTORY"], "served")
        model.export(path, format="tf_saved_model", verbose=False)
        served = tf.saved_model.load(path)
        for length in (1, 30):
            x = np.random.default_rng(length).standard_normal((3, length, 4)).astype("float32")
            np.testing.assert_allclose(served.serve(x).numpy(), np.asarray(model(x)),
                                       rtol=1e-6, atol=1e-6)
    """, KERAS_BACKEND="jax", OUTPUT_DIRECTORY=str(tmp_path))


def test_sharded_arrays():
    """Four CPU devices (in a fresh process): jit over sharded inputs gives the full result;
    shard_map over the channels runs each shard and keeps the sharding; over explicit mesh
    axes results and gradients keep their operands' shardings."""
    script = """
        import jax, jax.numpy as jnp, numpy as np, cuscan, cuscan.signal
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((4,), ("b",))
        values = np.random.default_rng(0).standard_normal((2, 36, 8)).astype(np.float32)
        expected = cuscan.linear_recurrence(values[0], values[1])
        put = lambda v: jax.device_put(v, NamedSharding(mesh, P(None, "b")))
        for decays, impulses in [(put(values[0]), put(values[1])),
                                 (jax.device_put(values[0], NamedSharding(mesh, P("b"))),
                                  jnp.asarray(values[1]))]:
            for f in (cuscan.linear_recurrence, jax.jit(cuscan.linear_recurrence)):
                np.testing.assert_allclose(np.asarray(f(decays, impulses)), expected,
                                           rtol=1e-6)
        mapped = jax.jit(jax.shard_map(cuscan.linear_recurrence, mesh=mesh,
                                       in_specs=P(None, "b"), out_specs=P(None, "b")))
        h = mapped(put(values[0]), put(values[1]))
        np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-6)
        assert h.sharding.spec == P(None, "b"), h.sharding
        _, vjp = jax.vjp(cuscan.linear_recurrence, values[0], values[1])
        expected_grads = vjp(jnp.ones_like(expected))
        grad = jax.jit(jax.grad(lambda a: mapped(a, put(values[1])).sum()))(put(values[0]))
        np.testing.assert_allclose(np.asarray(grad), np.asarray(expected_grads[0]), rtol=1e-5)
        # decays shared by every shard: their gradient is summed over the devices
        shared = jax.jit(jax.shard_map(lambda a, x: cuscan.linear_recurrence(a[:, None], x),
                                       mesh=mesh, in_specs=(P(), P(None, "b")),
                                       out_specs=P(None, "b")))
        decays = jax.device_put(values[0][:, 0], NamedSharding(mesh, P()))
        grad = jax.jit(jax.grad(lambda a: shared(a, put(values[1])).sum()))(decays)
        _, vjp = jax.vjp(lambda a: cuscan.linear_recurrence(a[:, None], values[1]), decays)
        np.testing.assert_allclose(np.asarray(grad), np.asarray(
            vjp(jnp.ones_like(expected))[0]), rtol=1e-5)
        # forward mode and vmap inside shard_map
        tangent = jax.jit(jax.shard_map(
            lambda a, x: jax.jvp(cuscan.linear_recurrence, (a, x), (a, x))[1], mesh=mesh,
            in_specs=P(None, "b"), out_specs=P(None, "b")))(put(values[0]), put(values[1]))
        np.testing.assert_allclose(np.asarray(tangent), np.asarray(jax.jvp(
            cuscan.linear_recurrence, tuple(values), tuple(values))[1]), rtol=1e-5)
        batched = jax.jit(jax.shard_map(jax.vmap(cuscan.linear_recurrence, in_axes=1,
                                                 out_axes=1), mesh=mesh,
                                        in_specs=P(None, "b"), out_specs=P(None, "b")))
        h = batched(put(values[0]), put(values[1]))
        np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-6)

        # Outside shard_map, the mesh's axes are explicit (make_mesh's default): JAX types
        # every value with its sharding, and a gradient must have its operand's. Channels
        # (axis 1) or time (axis 0) split; the state split with the channels or whole.
        state = values[0][0]
        padded = lambda spec: (*spec, None, None)[:2]  # P("b") is P("b", None)
        same = lambda sharding, spec: padded(sharding.spec) == padded(spec)
        loss = lambda a, x, s: (cuscan.linear_recurrence(a, x, s) ** 2).sum()
        expected_grads = jax.grad(loss, argnums=(0, 1, 2))(*values, state)
        with jax.set_mesh(mesh):
            for spec, state_spec in [(P(None, "b"), P("b")), (P("b"), P())]:
                split = [jax.device_put(v, NamedSharding(mesh, spec)) for v in values]
                s = jax.device_put(state, NamedSharding(mesh, state_spec))
                h = cuscan.linear_recurrence(*split, s)
                assert same(h.sharding, spec), h.sharding
                for f in (jax.grad(loss, argnums=(0, 1, 2)),
                          jax.jit(jax.grad(loss, argnums=(0, 1, 2)))):
                    grads = f(*split, s)
                    for mine, theirs, operand in zip(grads, expected_grads, (*split, s)):
                        np.testing.assert_allclose(np.asarray(mine), np.asarray(theirs),
                                                   rtol=1e-5)
                        assert same(mine.sharding, operand.sharding.spec), mine.sharding
                tangent = jax.jvp(cuscan.linear_recurrence, tuple(split), tuple(split))[1]
                assert same(tangent.sharding, spec)
                batched = jax.vmap(cuscan.linear_recurrence, in_axes=1, out_axes=1)(*split)
                np.testing.assert_allclose(np.asarray(batched), expected, rtol=1e-6)
                assert same(batched.sharding, spec), batched.sharding
                _, vjp = jax.vjp(jax.vmap(cuscan.linear_recurrence, in_axes=1, out_axes=1),
                                 *split)
                for grad, operand in zip(vjp(split[1]), split):
                    assert same(grad.sharding, operand.sharding.spec), grad.sharding
                grads = cuscan.linear_recurrence_vjp(split[1], split[0], h, s)
                for grad, expected_spec in zip(grads, (spec, spec, state_spec)):
                    assert same(grad.sharding, expected_spec), grad.sharding
                # cuscan.signal, its time axis split or not
                for f in (lambda x: cuscan.signal.sosfilt([[1, 0.5, 0, 1, -0.5, 0]], x, axis=0),
                          lambda x: cuscan.signal.ema(x, 0.3, axis=0)):
                    np.testing.assert_allclose(np.asarray(f(split[1])), f(values[1]),
                                               rtol=1e-5, atol=1e-6)
                    grad = jax.grad(lambda x: f(x).sum())(split[1])
                    np.testing.assert_allclose(np.asarray(grad), np.asarray(
                        jax.grad(lambda x: f(x).sum())(values[1])), rtol=1e-5)
                    assert same(grad.sharding, spec), grad.sharding
                # with initial states split along the channels, whether the signal is or not
                # (a real pole and a conjugate pair: both add the state into their impulses)
                zi = np.random.default_rng(1).standard_normal((2, 1, 2, 8)).astype(np.float32)
                for f in (lambda x, zi: cuscan.signal.lfilter(
                              [1, 2], [1, -0.5, 0.2], x, axis=0, zi=zi[0, 0])[0],
                          lambda x, zi: cuscan.signal.sosfilt(
                              [[1, 0.5, 0, 1, -0.5, 0.3]], x, axis=0, zi=zi[1])[0]):
                    operands = (split[1], jax.device_put(zi, NamedSharding(mesh, P(
                        None, None, None, "b"))))
                    np.testing.assert_allclose(np.asarray(f(*operands)), f(values[1], zi),
                                               rtol=1e-5, atol=1e-6)
                    total = lambda x, zi: f(x, zi).sum()
                    grads = jax.grad(total, argnums=(0, 1))(*operands)
                    for grad, expected_grad, operand in zip(
                            grads, jax.grad(total, argnums=(0, 1))(values[1], zi), operands):
                        np.testing.assert_allclose(np.asarray(grad), np.asarray(expected_grad),
                                                   rtol=1e-5, atol=1e-6)
                        assert grad.sharding.is_equivalent_to(operand.sharding, grad.ndim), \
                            grad.sharding
    """
    run_in_fresh_process(script, XLA_FLAGS="--xla_force_host_platform_device_count=4",
                         JAX_PLATFORMS="cpu")
