"""Every benchmark's command line, and those of the GPU scripts, refuses an option it does not
know, with a usage message, before it runs and rewrites its record in benchmarks/results/."""

from __future__ import annotations

import ast
import re
import shutil
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


def documented_options(name: str) -> set[str]:
    """The options the command lines in a benchmark's docstring show (each command line runs
    to the next blank line)."""
    doc = ast.get_docstring(ast.parse((ROOT / "benchmarks" / f"{name}.py").read_text()))
    lines = re.findall(rf"python -m benchmarks\.{name}\b.*(?:\n.+)*", doc)
    return {option for line in lines for option in re.findall(r"--[a-z][\w-]*", line)}


def test_documented_options_found():
    assert documented_options("bandwidth") == {"--repeats", "--json"}
    assert {"--checkpoint", "--sequences", "--before-last-update"} == documented_options(
        "long_dependency_held_out")  # over continued lines
    assert documented_options("precision") == set()


@pytest.mark.parametrize("name", COMMANDS)
def test_unknown_option_refused(name):
    """An option the benchmark does not know is refused, with a usage that names every
    option the benchmark's docstring shows."""
    result = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--no-such-option"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    missing = re.search(r"No module named '(\w+)", result.stderr)
    if result.returncode == 1 and missing:
        require(missing[1])  # a framework the benchmark imports: skipped without it, outside CI
    assert result.returncode == 2, result.stderr
    assert re.match(rf"usage: {name}\.py ", result.stderr), result.stderr
    usage = result.stderr.split(f"\n{name}.py: error:")[0]
    assert documented_options(name) <= set(re.findall(r"--[a-z][\w-]*", usage)), usage


def _script(name: str):
    """A function running ``scripts/name`` with bash on its arguments; skips without bash."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")

    def run(*arguments):
        return subprocess.run(["bash", str(ROOT / "scripts" / name), *arguments],
                              capture_output=True, text=True, timeout=120, check=False)

    return run


@pytest.mark.parametrize("name", ["gpu-check", "gpu-experiments"])
def test_gpu_scripts_command_line(name):
    run = _script(name)

    helped = run("--help")
    assert helped.returncode == 0, helped.stderr
    assert f"  scripts/{name} [" in helped.stdout  # the usage line of the script's header
    assert "#" not in helped.stdout  # the comment markers stripped
    assert "set -uo" not in helped.stdout  # and the header alone
    refused = run("--no-such-option")
    assert refused.returncode == 2
    assert "unknown argument --no-such-option" in refused.stderr


def test_compare_commits(tmp_path):
    """scripts/compare-commits runs a command on each exported commit's library, ahead of
    the tree's own (which Python would otherwise find first, in the working directory)."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    run = _script("compare-commits")

    helped = run("--help")
    assert helped.returncode == 0, helped.stderr
    assert "  scripts/compare-commits [--dir DIR] export REV..." in helped.stdout
    assert "#" not in helped.stdout
    for refused in (run("--no-such-option"), run("--dir", str(tmp_path), "run", "--", "true"),
                    run("--dir", str(tmp_path), "run", "abc"), run("export")):
        assert refused.returncode == 2
        assert refused.stderr
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if head.returncode != 0:
        pytest.skip("needs the repository's history")
    name = head.stdout.strip()
    exported = run("--dir", str(tmp_path), "export", "HEAD")
    assert exported.returncode == 0, exported.stderr
    assert sorted(path.name for path in (tmp_path / name).iterdir()) == [
        "COMMIT", "cuscan", "kernels"]
    shown = run("--dir", str(tmp_path), "run", "--", sys.executable, "-c",
                "import os, sys, cuscan; print(cuscan.__file__, os.environ['CUSCAN_COMMIT'], "
                "sys.argv[1], sep='|')", "out_{rev}.json")
    assert shown.returncode == 0, shown.stderr
    path, commit, argument = shown.stdout.splitlines()[-1].split("|")
    assert path == str(tmp_path / name / "cuscan" / "__init__.py")
    assert commit.startswith(f"cuscan {name}, benchmarks {name}")
    assert argument == f"out_{name}.json"
    failed = run("--dir", str(tmp_path), "run", name, "--", "false")
    assert failed.returncode == 1
    # The working tree, changes and all, under a name of its own.
    assert run("--dir", str(tmp_path), "export", ".:mine").returncode == 0
    assert (tmp_path / "mine" / "kernels" / "linear_recurrence.cu").read_text() == (
        ROOT / "kernels" / "linear_recurrence.cu").read_text()
    assert (tmp_path / "mine" / "COMMIT").read_text().startswith(
        f"cuscan mine (the working tree at {name}")
    outside = run("--dir", str(tmp_path), "export", ".:../elsewhere")
    assert outside.returncode == 2
    assert "needs a plain folder name; got ../elsewhere" in outside.stderr
