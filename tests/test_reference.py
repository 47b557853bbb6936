"""The reference itself, checked against an independent method: scipy.signal.lfilter."""

from __future__ import annotations

import numpy as np
import pytest

from cuscan import _dtypes
from tests import reference
from tests.conftest import DTYPES, dtype_of, require


@pytest.mark.parametrize("length", [1, 2, 17, 1000])
@pytest.mark.parametrize("decay", [0.0, 0.5, -0.9, 1.0, 0.3 + 0.6j])
def test_reference_matches_lfilter(length, decay):
    signal = require("scipy.signal")
    rng = np.random.default_rng(length)
    impulses = rng.standard_normal((3, length))
    state = rng.standard_normal(3)
    expected = signal.lfilter([1.0], [1.0, -decay], impulses, axis=-1,
                              zi=(decay * state)[:, None])[0]
    result = reference.linear_recurrence(decay, impulses, state, axis=-1)
    np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)
    reverse = reference.linear_recurrence(decay, impulses[:, ::-1], state, axis=-1)
    np.testing.assert_allclose(
        reference.linear_recurrence(decay, impulses, state, axis=-1, reverse=True),
        reverse[:, ::-1])


@pytest.mark.parametrize("name", DTYPES)
def test_tolerances_scale_with_each_dtypes_epsilon(name):
    """The epsilon the tolerances (``conftest.tolerance``) scale with is the dtype's own:
    NumPy's, and ml_dtypes' for bfloat16, which NumPy does not know."""
    dtype = dtype_of(name)
    finfo = require("ml_dtypes").finfo if name == "bfloat16" else np.finfo
    assert _dtypes.epsilon(dtype) == float(finfo(dtype).eps)
