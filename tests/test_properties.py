"""Property-based tests: random shapes, broadcasting, axes and methods."""

from __future__ import annotations

import numpy as np
import pytest

import cuscan
from tests import reference
from tests.conftest import assert_close, require

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
