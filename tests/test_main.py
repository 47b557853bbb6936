"""``python -m cuscan``, the README's main job: the problem it runs, its check of the parallel
result against the serial one, and its command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import cuscan
from cuscan import __main__ as main_job
from tests.conftest import _gpu_available

ROOT = Path(__file__).resolve().parents[1]
RESULT_LINE = r"\s*{}: +[\d.]+ ms +[\d.]+ M steps/s +[\d.]+ GB/s"


def run(*arguments: str) -> subprocess.CompletedProcess:
    """``python -m cuscan`` with ``arguments``, in a fresh process."""
    return subprocess.run([sys.executable, "-m", "cuscan", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def test_readme_command():
    """As the README runs it, from a fresh process: the GPU where there is one, else NumPy,
    with the documented default length."""
    result = run()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 6, result.stdout
    if _gpu_available():
        assert lines[0].startswith("backend: CuPy ")
        length = 2**20
    else:
        assert re.fullmatch(r"backend: NumPy \S+ on the CPU \(no GPU: .+\)", lines[0]), lines[0]
        length = 2**16
    assert lines[1] == (f"problem: gated linear RNN state, {length} steps x 16 channels, "
                        "float32, time-major (T, C), axis 0")
    assert re.fullmatch(r"check:   parallel vs serial max \|error\| = \S+ \(limit \S+\) -> OK",
                        lines[2]), lines[2]
    for line, method in zip(lines[3:], ("serial", "parallel", "auto"), strict=True):
        assert re.fullmatch(RESULT_LINE.format(method), line), line


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_numpy_backend(dtype, capsys):
    assert main_job.main(["--backend", "numpy", "--length", "1031", "--channels", "3",
                          "--dtype", dtype]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"backend: NumPy {np.__version__} on the CPU"
    assert lines[1] == (f"problem: gated linear RNN state, 1031 steps x 3 channels, {dtype}, "
                        "time-major (T, C), axis 0")
    assert lines[2].endswith("-> OK"), lines[2]
    assert len(lines) == 6


def test_a_wrong_parallel_result_fails(monkeypatch, capsys):
    """The check is real: a parallel result off by more than the limit is reported, and the
    exit status says so."""
    recurrence = cuscan.linear_recurrence

    def off_by_a_little(decays, impulses, *, method):
        result = recurrence(decays, impulses, method=method)
        if method == "parallel":
            result[-1, 0] += 1e-3 * np.abs(result).max()
        return result

    monkeypatch.setattr(cuscan, "linear_recurrence", off_by_a_little)
    assert main_job.main(["--backend", "numpy", "--length", "257", "--dtype", "float64"]) == 1
    check = capsys.readouterr().out.splitlines()[2]
    assert check.endswith("-> FAILED"), check


def test_cupy_without_a_device(monkeypatch):
    """CuPy installed on a machine with no CUDA device: NumPy, saying why, unless CuPy was
    asked for."""
    runtime = SimpleNamespace(getDeviceCount=lambda: 0)
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(
        runtime=runtime)))
    xp, description = main_job._select_backend("auto")
    assert xp is np
    assert description == f"NumPy {np.__version__} on the CPU (no GPU: no CUDA device)"
    with pytest.raises(SystemExit, match=r"^CuPy backend requested but unavailable \(no CUDA "
                                         r"device\); install"):
        main_job._select_backend("cupy")


def test_command_line_errors():
    for arguments, message in ((["--dtype", "float16"], "argument --dtype: invalid choice"),
                               (["--backend", "torch"], "argument --backend: invalid choice"),
                               (["--length", "x"], "argument --length: invalid int value"),
                               (["--length", "0"], "argument --length: expected an integer of "
                                                   "at least 1; got 0"),
                               (["--channels", "-3"], "argument --channels: expected an "
                                                      "integer of at least 1; got -3"),
                               (["--no-such-option"], "unrecognized arguments")):
        result = run(*arguments)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("usage: python -m cuscan "), result.stderr
        assert message in result.stderr, result.stderr
    if not _gpu_available():
        result = run("--backend", "cupy")
        assert result.returncode == 1
        assert re.fullmatch(r"CuPy backend requested but unavailable \(.+\); install "
                            r"cuscan\[cuda12\] or cuscan\[cuda13\] on a CUDA machine\n",
                            result.stderr), result.stderr


def test_timing_keeps_the_fastest_repeat(monkeypatch):
    """``_time`` runs once to warm up, then keeps the shortest of ``repeats`` synchronised
    runs."""
    ticks = iter([0.0, 4.0, 10.0, 11.0, 20.0, 22.0])
    monkeypatch.setattr(main_job.time, "perf_counter", lambda: next(ticks))
    calls = []
    best = main_job._time(lambda: calls.append("run"), lambda: calls.append("sync"), 3)
    assert best == 1.0
    assert calls == ["run", "sync"] * 4


@pytest.mark.parametrize(("dtype", "gigabytes"), [("float32", "4.80"), ("float64", "9.60"),
                                                   ("complex64", "9.60"),
                                                   ("complex128", "19.20")])
def test_reported_throughput(dtype, gigabytes, monkeypatch, capsys):
    """Each method's line: its time, the steps times channels it ran per second, and the bytes
    a forward pass must move (decays and impulses read, states written) per second."""
    repeats = []

    def ten_microseconds(function, synchronize, count):
        repeats.append(count)
        return 1e-5

    monkeypatch.setattr(main_job, "_time", ten_microseconds)
    assert main_job.main(["--backend", "numpy", "--length", "1000", "--channels", "4",
                          "--dtype", dtype]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3:] == [f"{method:>8}:      0.01 ms      400.0 M steps/s  {gigabytes:>7} GB/s"
                         for method in ("serial", "parallel", "auto")]
    assert repeats == [1, 3, 3]


def test_the_problem_is_a_gated_layers_state(monkeypatch, capsys):
    """The recurrence run is the documented one: gates in (0, 1) as decays and impulses
    ``(1 - g) * tanh(i)``, so no impulse exceeds one minus its gate."""
    recurrence = cuscan.linear_recurrence
    seen = []

    def recorded(decays, impulses, *, method):
        seen.append((np.asarray(decays), np.asarray(impulses)))
        return recurrence(decays, impulses, method=method)

    monkeypatch.setattr(cuscan, "linear_recurrence", recorded)
    monkeypatch.setattr(main_job, "_time", lambda function, synchronize, count: 1.0)
    assert main_job.main(["--backend", "numpy", "--length", "4099", "--channels", "5",
                          "--dtype", "float64"]) == 0
    for decays, impulses in seen:
        assert decays.shape == impulses.shape == (4099, 5)
        assert ((decays > 0) & (decays < 1)).all()
        assert (np.abs(impulses) <= 1 - decays).all()
        assert np.abs(impulses).max() > 0.5 * (1 - decays).max()
