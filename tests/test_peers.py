"""The peer benchmark (benchmarks/peers.py) runs on a CPU: every contestant it can run there is
timed and checked against the float64 reference, and the others are reported as unsupported."""

from __future__ import annotations

import json

import pytest

from tests.conftest import require

torch = require("torch")
from benchmarks import peers  # noqa: E402  (needs torch)


def test_peers_quick_run(tmp_path):
    require("jax")
    require("ml_dtypes")
    names = ["cuscan", "cuscan (torch)", "cuscan serial", "jax associative_scan",
             "torch associative_scan", "accelerated-scan warp", "fla chunk_hgrn", "CUB"]
    peers.main(["--device", "cpu", "--quick", "--shapes", "(2, 64, 3);(1, 1, 1000)",
                "--only", ",".join(names), "--repeats", "3", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "peers_cpu.json").read_text())
    assert result["commit"]
    assert result["device"] == "cpu"
    rows = result["rows"]
    assert [(r["shape"], r["dtype"], r["direction"]) for r in rows] == [
        (shape, dtype, direction) for shape in ("(2, 64, 3)", "(1, 1, 1000)")
        for dtype in ("float32", "bfloat16") for direction in ("forward", "backward")]
    for row in rows:
        assert row["copy_s"] > 0
        assert row["bytes"] == (3 if row["direction"] == "forward" else 5) * row[
            "elements"] * (2 if row["dtype"] == "bfloat16" else 4)
        timed = {name for name, entry in row["results"].items() if "seconds" in entry}
        expected = {"cuscan", "cuscan (torch)", "jax associative_scan", "torch associative_scan"}
        if row["direction"] == "forward":
            expected.add("cuscan serial")
        assert timed == expected, row["results"]
        for name in timed:
            entry = row["results"][name]
            assert entry["GBps"] > 0
            assert entry["of_copy"] > 0
            assert entry["latency_s"] > 0
            # a sum of at most 1,000 terms, each rounded once or twice in the dtype
            assert entry["error_eps"] < 50, (name, entry)
        for name in set(names) - timed:
            assert "unsupported" in row["results"][name], (name, row["results"][name])
    table = (tmp_path / "peers_cpu.md").read_text()
    assert table.count("\n| (") == len(rows)
    assert "| cuscan | cuscan (torch) | cuscan serial | jax associative_scan |" in table


def test_measure_batches_calls_back_to_back():
    """A call taking 1 ms alone is made in batches of 20 (peers.BATCH_SECONDS), each on the
    next copy of the inputs in turn; a batch's time per call is its own, apart from the time
    of one call alone."""
    made = []

    def clock(call, indices):
        for i in indices:
            call(i)
        return 1e-3 if len(indices) == 1 else 2e-4  # the host's work hidden in a batch

    times = peers.measure({"f": made.append}, clock, repeats=5, copies=7)
    assert times == {"f": {"seconds": 2e-4, "latency": 1e-3}}
    batches = made[3:]  # after the two warm-up calls and the single call that sizes a batch
    assert made[:3] == [0, 1, 0]
    assert len(batches) == 5 * 21  # five repeats of a batch of 20 and one call alone
    assert batches == [k % 7 for k in range(len(batches))]


def test_peers_rejects_unknown_names(tmp_path, capsys):
    with pytest.raises(SystemExit):
        peers.main(["--device", "cpu", "--quick", "--only", "cuscan,nonesuch",
                    "--out", str(tmp_path)])
    assert "unknown contestants ['nonesuch']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        peers.main(["--device", "cpu", "--quick", "--shapes", "(9, 9, 9)",
                    "--out", str(tmp_path)])
    assert "unknown shapes" in capsys.readouterr().err
