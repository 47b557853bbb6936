"""A few small CuPy calls covering every kernel, for compute-sanitizer to watch.

    compute-sanitizer --tool memcheck python scripts/sanitizer_cases.py
"""

from __future__ import annotations

import cupy
import numpy as np

import cuscan

rng = np.random.default_rng(0)
for dtype in ("float32", "float64", "complex64", "float16"):
    for shape, axis in (((300, 5), 0), ((3, 301), 1), ((2, 97, 3), 1), ((1,), 0)):
        decays = cupy.asarray(rng.uniform(0.5, 1.0, shape).astype(dtype))
        impulses = cupy.asarray(rng.standard_normal(shape).astype(dtype))
        state = cupy.asarray(rng.standard_normal(shape[:axis] + shape[axis + 1:]).astype(dtype))
        for method in ("serial", "parallel"):
            for reverse in (False, True):
                h = cuscan.linear_recurrence(decays, impulses, state, axis=axis, method=method,
                                             reverse=reverse)
                cuscan.linear_recurrence_vjp(cupy.ones_like(h), decays, h, state, axis=axis,
                                             reverse=reverse)
        # broadcast decays, read with stride 0
        cuscan.linear_recurrence(decays.reshape(-1)[:1], impulses, axis=axis, method="parallel")
cupy.cuda.Device().synchronize()
print("sanitizer cases done")
