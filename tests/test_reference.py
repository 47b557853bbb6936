"""The reference itself, checked against an independent method: scipy.signal.lfilter."""

from __future__ import annotations

import numpy as np
import pytest

from tests import reference
from tests.conftest import require


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
