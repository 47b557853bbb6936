"""Every benchmark's command line refuses an option it does not know, with a usage message,
before it runs and rewrites its record in benchmarks/results/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = sorted(path.stem for path in (ROOT / "benchmarks").glob("*.py")
                  if 'if __name__ == "__main__":' in path.read_text())


def test_commands_found():
    assert {"overhead", "bandwidth", "peers", "table2", "long_dependency"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_unknown_option_refused(name):
    result = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--no-such-option"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    missing = re.search(r"No module named '(\w+)", result.stderr)
    if result.returncode == 1 and missing:
        require(missing[1])  # a framework the benchmark imports: skipped without it, outside CI
    assert result.returncode == 2, result.stderr
    assert re.match(rf"usage: {name}\.py ", result.stderr), result.stderr
