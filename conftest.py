"""Collection settings for the whole tree (doctests of cuscan/ included)."""

import importlib.util

# Modules that import an optional library at module level: without it there is
# nothing to collect there (their tests run from tests/, and skip).
_NEEDS = {
    "cuscan/_cupy_backend.py": "cupy",
    "cuscan/_torch.py": "torch",
    "cuscan/nn": "torch",
    "cuscan/_jax.py": "jax",
    "cuscan/_tensorflow.py": "tensorflow",
}
collect_ignore = [path for path, module in _NEEDS.items() if not importlib.util.find_spec(module)]
