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
            # a sum of at most 1,000 terms, each rounded once or twice in the dtype
            assert entry["error_eps"] < 50, (name, entry)
        for name in set(names) - timed:
            assert "unsupported" in row["results"][name], (name, row["results"][name])
    table = (tmp_path / "peers_cpu.md").read_text()
    assert table.count("\n| (") == len(rows)
    assert "| cuscan | cuscan (torch) | cuscan serial | jax associative_scan |" in table


def test_peers_rejects_unknown_names(tmp_path, capsys):
    with pytest.raises(SystemExit):
        peers.main(["--device", "cpu", "--quick", "--only", "cuscan,nonesuch",
                    "--out", str(tmp_path)])
    assert "unknown contestants ['nonesuch']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        peers.main(["--device", "cpu", "--quick", "--shapes", "(9, 9, 9)",
                    "--out", str(tmp_path)])
    assert "unknown shapes" in capsys.readouterr().err
