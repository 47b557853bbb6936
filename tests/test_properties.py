"""Property-based tests: random shapes, broadcasting, axes and methods."""

from __future__ import annotations

import numpy as np
import pytest

import cuscan
from tests import reference
from tests.conftest import assert_close, require
from tests.test_linear_recurrence import make

hypothesis = require("hypothesis")
st = hypothesis.strategies
hnp = require("hypothesis.extra.numpy")

SETTINGS = hypothesis.settings(max_examples=60, deadline=None, derandomize=True,
                               suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])


@st.composite
def problems(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                    min_side=0, max_side=70))
    shape = shapes.result_shape
    hypothesis.assume(len(shape) >= 1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    state_shape = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
    # The state may drop leading axes and keep size-1 axes, as broadcasting allows.
    drop = draw(st.integers(0, len(state_shape)))
    state_shape = tuple(n if draw(st.booleans()) else 1 for n in state_shape[drop:])
    seed = draw(st.integers(0, 2**32 - 1))
    return {
        "shapes": shapes.input_shapes, "axis": axis,
        "state_shape": draw(st.sampled_from([None, state_shape])),
        "reverse": draw(st.booleans()), "method": draw(st.sampled_from(["serial", "parallel",
                                                                        "auto"])),
        "seed": seed,
    }


def arrays(problem):
    """Random decays, impulses and initial state (or None) for a drawn problem, and the kwargs."""
    rng = np.random.default_rng(problem["seed"])
    decays = rng.uniform(-1, 1, problem["shapes"][0])
    impulses = rng.standard_normal(problem["shapes"][1])
    state = None if problem["state_shape"] is None else rng.standard_normal(problem["state_shape"])
    return decays, impulses, state, {"axis": problem["axis"], "reverse": problem["reverse"]}


@SETTINGS
@hypothesis.given(problem=problems())
def test_matches_reference(backend, problem):
    decays, impulses, state, kwargs = arrays(problem)
    result = cuscan.linear_recurrence(*(None if v is None else backend.asarray(v)
                                        for v in (decays, impulses, state)),
                                      method=problem["method"], **kwargs)
    expected = reference.linear_recurrence(decays, impulses, state, **kwargs)
    assert result.shape == expected.shape
    if expected.size:
        scale = reference.error_scale(decays, impulses, state, **kwargs)
        assert_close(backend.to_numpy(result), expected, scale, np.float64,
                     expected.shape[problem["axis"]])


@SETTINGS
@hypothesis.given(problem=problems())
def test_vjp_shapes_follow_the_operands(backend, problem):
    decays, impulses, state, kwargs = arrays(problem)
    h = reference.linear_recurrence(decays, impulses, state, **kwargs)
    grads = cuscan.linear_recurrence_vjp(
        *(None if v is None else backend.asarray(v) for v in (np.ones_like(h), decays, h, state)),
        **kwargs)
    assert grads[0].shape == decays.shape
    assert grads[1].shape == h.shape
    assert (grads[2] is None) == (state is None)
    if state is not None:
        assert grads[2].shape == state.shape
    # With ones as grad_output and zero decays, each impulse's gradient is one.
    zero = cuscan.linear_recurrence_vjp(backend.asarray(np.ones_like(h)), 0.0,
                                        backend.asarray(h), **kwargs)[1]
    np.testing.assert_array_equal(backend.to_numpy(zero), 1.0)


@pytest.mark.parametrize("method", ["serial", "parallel"])
def test_linearity(backend, method):
    rng = np.random.default_rng(0)
    decays = rng.uniform(0, 1, (500, 3))
    x1, x2 = rng.standard_normal((2, 500, 3))
    xp_args = [backend.asarray(v) for v in (decays, x1, x2, x1 + 2 * x2)]
    h1, h2, h12 = (backend.to_numpy(cuscan.linear_recurrence(xp_args[0], x, method=method))
                   for x in xp_args[1:])
    np.testing.assert_allclose(h12, h1 + 2 * h2, rtol=1e-12, atol=1e-12)


@st.composite
def layouts(draw, shape):
    """How an operand of ``shape`` lies in memory: the order of its axes in memory
    (innermost last), a step along each (negative: reversed), and one axis it is
    broadcast along (stride 0), if any."""
    ndim = len(shape)
    order = draw(st.permutations(range(ndim)))
    steps = draw(st.lists(st.sampled_from([1, 2, -1, -3]), min_size=ndim, max_size=ndim))
    wide = [d for d in range(ndim) if shape[d] > 1]
    broadcast = draw(st.sampled_from([None, *wide])) if wide else None
    return order, steps, broadcast


@st.composite
def laid_out_problems(draw):
    ndim = draw(st.integers(1, 6))
    axis = draw(st.integers(0, ndim - 1))
    shape = [draw(st.sampled_from([0, 1, 2, 3, 5, 8, 33])) for _ in range(ndim)]
    # Long enough for every method's strided and copied paths, small enough to stay quick.
    shape[axis] = draw(st.sampled_from([0, 1, 2, 5, 17, 64, 257, 300]))
    others = int(np.prod(shape)) // max(shape[axis], 1)
    hypothesis.assume(others <= 64)
    shape = tuple(shape)
    state_shape = shape[:axis] + shape[axis + 1:]
    return {
        "shape": shape, "axis": axis - ndim if draw(st.booleans()) else axis,
        "dtype": draw(st.sampled_from(["float32", "float64", "complex64", "complex128"])),
        "layouts": {name: draw(layouts(state_shape if name == "initial_state" else shape))
                    for name in ("decays", "impulses", "initial_state", "grad_output")},
        "state": draw(st.booleans()), "reverse": draw(st.booleans()),
        "method": draw(st.sampled_from(["serial", "parallel", "auto"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def in_memory(values, layout):
    """The memory ``layout`` lays ``values`` out in, the elements a view skips holding NaN
    (values to be broadcast along an axis, which must be constant along it, stored once),
    and the order of its axes and the slices that view it as ``values``."""
    order, steps, broadcast = layout
    if broadcast is not None:
        values = np.take(values, [0], broadcast)
    stored = [n * abs(s) for n, s in zip(values.shape, steps, strict=True)]
    memory = np.full([stored[d] for d in order], np.nan, values.dtype)
    axes = tuple(np.argsort(order).tolist())
    pick = tuple(slice(None, None, s) for s in steps)
    np.transpose(memory, axes)[pick] = values
    return memory, axes, pick


def laid_out(backend, values, layout):
    """An array of ``backend`` equal to ``values``, viewed from memory laid out as
    ``layout`` says (`in_memory`)."""
    memory, axes, pick = in_memory(values, layout)
    xp = backend.xp
    view = xp.transpose(backend.asarray(memory), axes)[pick]
    return view if layout[2] is None else xp.broadcast_to(view, values.shape)


def laid_out_values(problem) -> tuple[dict, dict]:
    """Random decays, impulses, initial state (or None) and grad_output for a problem of
    `laid_out_problems`, each constant along the axis its layout broadcasts, and the
    keyword arguments."""
    rng = np.random.default_rng(problem["seed"])
    dtype, shape, axis = np.dtype(problem["dtype"]), problem["shape"], problem["axis"]
    state_shape = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
    values = {
        "decays": make(rng, shape, dtype, -1.0),
        "impulses": make(rng, shape, dtype, -1.0),
        "initial_state": make(rng, state_shape, dtype, -1.0) if problem["state"] else None,
        "grad_output": make(rng, shape, dtype, -1.0),
    }
    for name, (_, _, broadcast) in problem["layouts"].items():
        value = values[name]
        if value is not None and broadcast is not None:
            values[name] = np.broadcast_to(np.take(value, [0], broadcast), value.shape).copy()
    return values, {"axis": axis, "reverse": problem["reverse"]}


@hypothesis.settings(SETTINGS, max_examples=200)
@hypothesis.given(problem=laid_out_problems())
def test_any_layout(backend, problem):
    """Strided, transposed, reversed and broadcast views of up to six dimensions give
    the reference's result, and the gradients of the same values laid out contiguously."""
    dtype, shape, axis = np.dtype(problem["dtype"]), problem["shape"], problem["axis"]
    values, kwargs = laid_out_values(problem)
    layouts = problem["layouts"]
    views = {name: None if v is None else laid_out(backend, v, layouts[name])
             for name, v in values.items()}

    h = cuscan.linear_recurrence(views["decays"], views["impulses"], views["initial_state"],
                                 method=problem["method"], **kwargs)
    expected = reference.linear_recurrence(values["decays"], values["impulses"],
                                           values["initial_state"], **kwargs)
    if expected.size:
        scale = reference.error_scale(values["decays"], values["impulses"],
                                      values["initial_state"], **kwargs)
        assert_close(backend.to_numpy(h), expected, scale, dtype, shape[axis])

    output = laid_out(backend, expected.astype(dtype), (*layouts["impulses"][:2], None))
    grads = cuscan.linear_recurrence_vjp(views["grad_output"], views["decays"], output,
                                         views["initial_state"], **kwargs)
    contiguous = cuscan.linear_recurrence_vjp(
        *(None if v is None else backend.asarray(v) for v in
          (values["grad_output"], values["decays"], expected.astype(dtype),
           values["initial_state"])), **kwargs)
    for grad, plain in zip(grads, contiguous, strict=True):
        if plain is None:
            assert grad is None
            continue
        plain = backend.to_numpy(plain)
        assert grad.shape == plain.shape
        if plain.size:
            assert_close(backend.to_numpy(grad), plain, np.abs(plain).max(), dtype,
                         shape[axis])


@st.composite
def filter_problems(draw):
    """A filter of `cuscan.signal` on a signal of up to three dimensions, any of them 0."""
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.sampled_from([0, 1, 2, 3])) for _ in range(ndim)]
    axis = draw(st.integers(-ndim, ndim - 1))
    shape[axis] = draw(st.sampled_from([0, 1, 5, 40, 700]))
    return {"shape": tuple(shape), "axis": axis,
            "dtype": draw(st.sampled_from(["float32", "float64", "complex128"])),
            "function": draw(st.sampled_from(["lfilter", "sosfilt", "filtfilt",
                                              "sosfiltfilt"])),
            "order": draw(st.integers(1, 4)), "state": draw(st.booleans()),
            "seed": draw(st.integers(0, 2**32 - 1))}


@hypothesis.settings(SETTINGS, max_examples=200)
@hypothesis.given(problem=filter_problems())
def test_filters_any_shape(problem):
    """`cuscan.signal`'s filters on NumPy signals of any shape give SciPy's result in the
    signal's dtype, or where SciPy refuses a signal too short to pad, a ValueError too; on
    empty signals (which SciPy refuses, or returns uninitialised states for) an empty result
    and the initial state unchanged. Single-precision signals of 700 samples are filtered in
    blocks of 300."""
    ss = require("scipy.signal")
    from cuscan import signal
    from cuscan.signal import _filters
    from tests.reference import relative_error

    rng = np.random.default_rng(problem["seed"])
    shape, axis, dtype = problem["shape"], problem["axis"], np.dtype(problem["dtype"])
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    b, a = ss.butter(problem["order"], 0.1)
    sos = ss.butter(problem["order"], 0.1, output="sos")
    state = None
    if problem["state"] and problem["function"] in ("lfilter", "sosfilt"):
        state_shape = list(shape)
        state_shape[axis] = 2 if problem["function"] == "sosfilt" else len(a) - 1
        if problem["function"] == "sosfilt":
            state_shape.insert(0, len(sos))
        state = rng.standard_normal(state_shape).astype(dtype)
    calls = {"lfilter": (signal.lfilter, ss.lfilter, (b, a)),
             "sosfilt": (signal.sosfilt, ss.sosfilt, (sos,)),
             "filtfilt": (signal.filtfilt, ss.filtfilt, (b, a)),
             "sosfiltfilt": (signal.sosfiltfilt, ss.sosfiltfilt, (sos,))}
    mine, theirs, design = calls[problem["function"]]
    zero_phase = problem["function"].endswith("filtfilt")
    extra = {} if state is None else {"zi": state}
    wide = np.complex128 if dtype.kind == "c" else np.float64
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_filters, "_BLOCK_BYTES", 8 * 300)
        patch.setattr(_filters, "_MIN_BLOCK", 300)
        if zero_phase:
            try:  # SciPy refuses to pad a signal as short (with or without channels)
                theirs(*design, np.zeros(shape[axis]))
            except ValueError:
                with pytest.raises(ValueError, match=r"longer along axis|at least one sample"):
                    mine(*design, x, axis=axis)
                return
        if x.size == 0:
            result = mine(*design, x, axis=axis, **extra)
            result, final = result if state is not None else (result, None)
            assert result.shape == shape
            assert result.dtype == dtype
            if state is not None:
                np.testing.assert_array_equal(final, state)
            return
        result = mine(*design, x, axis=axis, **extra)
    expected = theirs(*design, x.astype(wide), axis=axis,
                      **{k: v.astype(wide) for k, v in extra.items()})
    pairs = zip(result, expected, strict=True) if state is not None else [(result, expected)]
    bound = 5e-3 if dtype == np.float32 else 1e-8
    for got, want in pairs:
        assert got.shape == want.shape
        assert got.dtype == dtype
        assert relative_error(got, want) <= bound
