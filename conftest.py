"""Collection settings for the whole tree (doctests of cuscan/ included)."""

import importlib.util

# The CuPy backend imports CuPy at module level; without it there is nothing to
# collect there (its tests run through the backend fixture in tests/).
collect_ignore = [] if importlib.util.find_spec("cupy") else ["cuscan/_cupy_backend.py"]
