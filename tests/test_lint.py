"""The code base is clean under the ruff configuration in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import require


def test_ruff_clean():
    require("ruff")
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(root)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
