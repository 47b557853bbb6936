"""The long-dependency experiment (the paper's Table 3) runs, learns, resumes and reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require

torch = require("torch")
from benchmarks import long_dependency, long_dependency_cost  # noqa: E402  (need torch)


@pytest.mark.parametrize("distractors", ["others", "all"])
def test_batch_is_the_problem(distractors):
    inputs, labels = long_dependency.batch(2000, 8, torch.Generator().manual_seed(0), "cpu",
                                           distractors)
    assert inputs.shape == (2000, 8, long_dependency.P)
    torch.testing.assert_close(inputs[0, :, 0], labels * 2 - 1)  # +e1 or -e1, the label
    assert torch.all(inputs[0, :, 1:] == 0)
    assert torch.all(inputs[1:].sum(-1) == 1)
    assert torch.all(inputs[1:] >= 0)
    used = inputs[1:].sum((0, 1)) > 0  # the directions drawn after the first step
    assert used[0] == (distractors == "all")  # a later +e1 only when all are drawn
    assert torch.all(used[1:])


def test_unknown_distractors_are_refused():
    with pytest.raises(ValueError, match=r"`distractors` must be one of .*; got 'some'"):
        long_dependency.batch(4, 2, torch.Generator(), "cpu", "some")
    with pytest.raises(ValueError, match=r"`distractors` must be one of .*; got 'some'"):
        long_dependency.train(length=4, hidden=2, max_iterations=1, progress=False,
                              distractors="some")


def test_gilr_lstm_learns_at_length_64(tmp_path, capsys):
    from benchmarks import long_dependency_held_out

    checkpoint = tmp_path / "run.pt"
    record = long_dependency.train("gilr-lstm", length=64, hidden=16, batch_size=16,
                                   learning_rate=1e-2, max_iterations=1000, progress=False,
                                   checkpoint=checkpoint)
    assert record["converged"], record["curve"][-10:]
    assert record["streak"] == long_dependency.CONVERGED_AFTER
    assert [row[2] for row in record["curve"][-5:]] == [1.0] * 5
    # Five minibatches without error put the classes apart.
    assert all(row[4] > 0 for row in record["curve"][-5:])
    # What it learned holds on sequences it was not trained on.
    row = long_dependency_held_out.main(["--checkpoint", str(checkpoint), "--sequences", "40",
                                         "--batch-size", "16", "--device", "cpu",
                                         "--out", str(tmp_path)])
    assert (row["length"], row["iterations"], row["sequences"]) == (64, record["iterations"], 40)
    assert row["held_out_seed"] == record["seed"] + long_dependency_held_out.SEED_OFFSET
    assert row["learning_rate"] == row["hidden_learning_rate"] == 1e-2
    assert row["correct"] >= 36
    assert row["accuracy"] == row["correct"] / 40
    assert row["margin"]["min"] <= row["margin"]["median"]
    assert (row["margin"]["min"] > 0) == (row["correct"] == 40)  # a margin < 0 is a mistake
    assert row["cross_entropy"] < 0.5
    assert row["ranked"] >= 0.9
    assert row["separation"] > 2
    assert row["logits"]["positive"]["count"] + row["logits"]["negative"]["count"] == 40
    assert row["logits"]["positive"]["mean"] > row["logits"]["negative"]["mean"]
    assert "of 40 held-out sequences right" in capsys.readouterr().out


def test_separation_is_the_sensitivity_index():
    labels = torch.tensor([1.0, 1.0, 0.0, 0.0])
    # Class means 2 and -2, each logit 1 from its class's mean: 4 deviations apart.
    assert long_dependency.separation(torch.tensor([1.0, 3.0, -1.0, -3.0]), labels) == 4.0
    assert long_dependency.separation(torch.tensor([-1.0, -3.0, 1.0, 3.0]), labels) == -4.0
    # Shifting every logit moves the threshold, not the separation.
    assert long_dependency.separation(torch.tensor([11.0, 13.0, 9.0, 7.0]), labels) == 4.0
    assert long_dependency.separation(torch.tensor([1.0, 2.0, 3.0, 4.0]),
                                      torch.ones(4)) is None  # one class
    assert long_dependency.separation(torch.tensor([1.0, 1.0, 0.0, 0.0]),
                                      labels) is None  # no spread within a class
    # Logits that differ in their last few bits, as at chance on long sequences.
    close = torch.tensor([0.0, 2.0, -0.5, -1.5]) * 2.0**-20 + 1
    assert long_dependency.separation(close, labels) == pytest.approx(2 / 0.625**0.5)


def test_separated_at_is_where_the_running_mean_first_reaches_the_threshold():
    curve = [[i, 0.69, 0.5, 0.1 * i, d] for i, d in enumerate(
        [0.0, None, 1.0, 2.0, 3.0, None, 5.0, 1.0], start=1)]
    assert long_dependency.separated_at(curve, threshold=2.0, window=2) == 5  # mean(2, 3)
    assert long_dependency.separated_at(curve, threshold=2.0, window=3) == 5  # mean(1, 2, 3)
    assert long_dependency.separated_at(curve, threshold=4.0, window=2) == 7  # mean(5)
    assert long_dependency.separated_at(curve, threshold=6.0, window=2) is None
    assert long_dependency.separated_at(curve[:1], window=2) is None  # shorter than the window
    old = [row[:4] for row in curve]  # from before the separation was recorded
    assert long_dependency.separated_at(old, threshold=0.0, window=2) is None


def test_plot_takes_curves_from_before_the_separation(tmp_path):
    require("matplotlib")
    record = {"model": "gilr-lstm", "length": 8, "converged": False, "iterations": 4,
              "wall_time_s": 1.0,
              "curve": [[1, 0.7, 0.5, 0.2], [2, 0.69, 0.5, 0.4],  # resumed from an old run
                        [3, 0.68, 0.75, 0.6, 0.5], [4, 0.6, 1.0, 0.8, None]]}
    long_dependency.plot(record, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert long_dependency._separations(record["curve"]) == [None, None, 0.5, None]


def test_held_out_ranking_is_the_area_under_the_roc_curve():
    from benchmarks import long_dependency_held_out

    ranked = long_dependency_held_out.ranked
    assert ranked(np.array([1.0, 2.0]), np.array([0.0, 1.0])) == 0.875  # a tie counts half
    assert ranked(np.array([-0.1]), np.array([-0.2, -0.3])) == 1.0  # below zero, yet in order
    assert ranked(np.array([1.0]), np.array([])) is None


def test_held_out_takes_back_the_last_update(tmp_path):
    """``before_last_update`` gives the weights of the iteration before the checkpoint's."""
    import shutil

    from benchmarks import long_dependency_held_out

    checkpoint = tmp_path / "run.pt"
    settings = {"length": 32, "hidden": 4, "batch_size": 4, "learning_rate": 1e-2,
                "checkpoint": checkpoint, "checkpoint_every": 1, "progress": False}
    long_dependency.train(max_iterations=3, **settings)
    shutil.copy(checkpoint, tmp_path / "three.pt")
    long_dependency.train(max_iterations=4, **settings)
    three, _ = long_dependency.load(tmp_path / "three.pt", "cpu")
    four, record = long_dependency.load(checkpoint, "cpu")
    assert record["iterations"] == 4
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(four.parameters(),
                                                            three.parameters(), strict=True))
    long_dependency_held_out.undo_last_step(
        four, torch.load(checkpoint, weights_only=False)["optimizer"])
    for back, before in zip(four.parameters(), three.parameters(), strict=True):
        torch.testing.assert_close(back, before, rtol=0, atol=moved * 1e-4)
    row = long_dependency_held_out.evaluate(checkpoint, 2, before_last_update=True,
                                            progress=False)
    assert row["weights"] == "before the last update"
    assert long_dependency_held_out.evaluate(checkpoint, 2, progress=False)["weights"] == \
        "as saved"


def test_held_out_record_keeps_one_row_per_setting(tmp_path):
    from benchmarks import long_dependency_held_out

    checkpoint = tmp_path / "run.pt"
    long_dependency.train(length=32, hidden=4, batch_size=4, max_iterations=2,
                          checkpoint=checkpoint, progress=False)
    arguments = ["--checkpoint", str(checkpoint), "--sequences", "3", "--batch-size", "2",
                 "--device", "cpu", "--out", str(tmp_path)]
    first = long_dependency_held_out.main(arguments)
    again = long_dependency_held_out.main(arguments)
    other = long_dependency_held_out.main([*arguments, "--seed", "7"])
    assert first["correct"] == again["correct"]
    assert first["margin"] == again["margin"]
    assert 0 <= first["correct"] <= 3
    assert other["held_out_seed"] == 7
    runs = json.loads((tmp_path / "long_dependency_held_out_cpu.json").read_text())["runs"]
    assert [run["held_out_seed"] for run in runs] == [long_dependency_held_out.SEED_OFFSET, 7]
    long_dependency_held_out.main([*arguments, "--before-last-update"])
    runs = json.loads((tmp_path / "long_dependency_held_out_cpu.json").read_text())["runs"]
    assert [run["weights"] for run in runs] == ["as saved"] * 2 + ["before the last update"]
    assert all(run["iterations"] == 2 and run["sequences"] == 3 for run in runs)
    with pytest.raises(SystemExit):
        long_dependency_held_out.main([*arguments[:2], "--sequences", "0"])
    with pytest.raises(SystemExit):
        long_dependency_held_out.main(["--checkpoint", str(tmp_path / "missing.pt")])


def test_interrupted_run_resumes(tmp_path):
    checkpoint = tmp_path / "run.pt"
    settings = {"model": "gilr-lstm", "length": 16, "hidden": 4, "batch_size": 4,
                "progress": False}
    whole = long_dependency.train(**settings, max_iterations=6, checkpoint=None)
    long_dependency.train(**settings, max_iterations=3, checkpoint=checkpoint,
                          checkpoint_every=1)
    resumed = long_dependency.train(**settings, max_iterations=6, checkpoint=checkpoint)
    assert resumed["iterations"] == 6
    assert [row[:3] for row in resumed["curve"]] == [row[:3] for row in whole["curve"]]


def test_command_line_writes_json_and_plot(tmp_path):
    require("matplotlib")
    long_dependency.main(["--model", "lstm", "--length", "8", "--hidden", "4",
                          "--max-iterations", "3", "--device", "cpu", "--out", str(tmp_path)])
    record = json.loads((tmp_path / "long_dependency_lstm_8.json").read_text())
    assert record["iterations"] == 3
    assert len(record["curve"]) == 3
    assert all(len(row) == 5 for row in record["curve"])
    assert record["device"] == "cpu"
    assert (tmp_path / "long_dependency_lstm_8.png").stat().st_size > 0


@pytest.mark.parametrize(("arguments", "message"), [
    (["--length", "0"], "argument --length: expected a positive int; got 0"),
    (["--batch-size", "-2"], "argument --batch-size: expected a positive int; got -2"),
    (["--learning-rate", "-1"], "argument --learning-rate: expected a positive float; got -1"),
    (["--max-minutes", "0"], "argument --max-minutes: expected a positive float; got 0"),
    (["--adam-epsilon", "nan"], "argument --adam-epsilon: expected a positive float; got nan"),
])
def test_command_line_refuses_sizes_and_rates_below_one_or_zero(arguments, message, tmp_path,
                                                                 capsys):
    """Sizes, counts, rates and durations are checked as they are read: a length of 0 ended
    in an IndexError, a batch of 0 trained on nothing with a NaN loss."""
    with pytest.raises(SystemExit):
        long_dependency.main([*arguments, "--device", "cpu", "--out", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_scaling_records_each_run_once(tmp_path, capsys):
    from benchmarks import long_dependency_scaling

    argv = ["--lengths", "8,12", "--learning-rates", "1e-2", "--seeds", "0", "--hidden", "4",
            "--batch-size", "4", "--max-iterations", "3", "--device", "cpu", "--out",
            str(tmp_path)]
    rows = long_dependency_scaling.main(argv)
    assert sorted(row["length"] for row in rows) == [8, 12]
    assert all(row["iterations"] == 3 and not row["converged"] for row in rows)
    assert all(isinstance(row["mean_separation_last_100"], float) for row in rows)
    assert all(row["separated_at"] is None or 1 <= row["separated_at"] <= 3 for row in rows)
    assert ("| gilr-lstm | others | 4 | 4 | 0.01 | 0.01 | 1e-08 | >3 | >3 |"
            in capsys.readouterr().out)
    again = long_dependency_scaling.main([*argv, "--seeds", "0,1"])  # seed 0's runs are kept
    assert sorted((row["length"], row["seed"]) for row in again) == [
        (8, 0), (8, 1), (12, 0), (12, 1)]
    saved = json.loads((tmp_path / "long_dependency_scaling_cpu.json").read_text())
    assert saved["runs"] == again
    # A higher limit runs the unconverged runs again, in their places.
    longer = long_dependency_scaling.main([*argv, "--lengths", "8", "--max-iterations", "4"])
    assert sorted((row["length"], row["seed"], row["iterations"]) for row in longer) == [
        (8, 0, 4), (8, 1, 3), (12, 0, 3), (12, 1, 3)]
    with pytest.raises(SystemExit):
        long_dependency_scaling.main([*argv, "--lengths", "8,x"])
    assert "invalid comma-separated positive int value: '8,x'" in capsys.readouterr().err


def _run(length, iterations, converged=True, seed=0, **settings):
    rate = settings.get("learning_rate", 3e-3)
    return {"model": "gilr-lstm", "distractors": "others", "hidden": 4, "batch_size": 4,
            "learning_rate": rate, "hidden_learning_rate": rate, "adam_epsilon": 1e-8,
            "length": length, "seed": seed, "iterations": iterations, "converged": converged,
            **settings}


def test_scaling_growth_fits_factor_and_count():
    from benchmarks import long_dependency_scaling

    # 1.5 times a doubling: 100, 150, 225; a failed run is left out of the means.
    rows = [_run(256, 90), _run(256, 110, seed=1), _run(512, 150), _run(512, 999, False, 1),
            _run(1024, 225),
            # 50 more a doubling, at another rate; and a rate with one length alone.
            *(_run(2**k, 50 * k, learning_rate=1e-2) for k in (4, 6, 7)),
            _run(64, 300, learning_rate=1e-3), _run(128, 1500, False, learning_rate=1e-3)]
    fits = {fit["learning_rate"]: fit for fit in long_dependency_scaling.growth(rows, 2**20)}
    steady = fits[3e-3]
    assert steady["lengths"] == [256, 512, 1024]
    assert steady["means"] == [100, 150, 225]
    assert (steady["learned"], steady["runs"]) == ([2, 1, 1], [2, 2, 1])
    assert steady["factor"] == pytest.approx(1.5)
    assert steady["at_length_by_factor"] == pytest.approx(225 * 1.5**10)
    linear = fits[1e-2]
    assert linear["count"] == pytest.approx(50)
    assert linear["at_length_by_count"] == pytest.approx(1000)
    assert fits[1e-3]["means"] == [300, None]
    assert {"factor", "count"}.isdisjoint(fits[1e-3])
    assert steady["count"] == pytest.approx(62.5)  # the line through the three means
    assert steady["at_length_by_count"] == pytest.approx(62.5 * 20 + 475 / 3 - 62.5 * 9)
    table = long_dependency_scaling.growth_table(list(fits.values()), 2**20)
    assert ("| 0.003 | 0.003 | 1e-08 | 256: 100 (2 of 2), 512: 150 (1 of 2), 1,024: 225 (1 of 1) | "
            "1.50 times, or +6" in table)
    assert "| 12,975, or 846 |" in table
    assert "| 0.001 | 0.001 | 1e-08 | 64: 300 (1 of 1), 128: - (0 of 1) | - | - |" in table
    # Fitted from 512 steps on: the means at every length, the fits from 150 and 225 alone.
    rows[0]["iterations"] = 10  # moves the mean at 256 steps, outside the fit
    fits = {fit["learning_rate"]: fit
            for fit in long_dependency_scaling.growth(rows, 2**20, fit_from=512)}
    assert fits[3e-3]["means"] == [60, 150, 225]
    assert fits[3e-3]["factor"] == pytest.approx(1.5)
    assert fits[3e-3]["count"] == pytest.approx(75)
    assert {"factor", "count"}.isdisjoint(fits[1e-2])  # 16 to 128 steps: nothing to fit
    table = long_dependency_scaling.growth_table(list(fits.values()), 2**20, 512)
    assert "| per doubling (from T = 512) |" in table
    assert ("256: 60 (2 of 2), 512: 150 (1 of 2), 1,024: 225 (1 of 1) | 1.50 times, or +75 |"
            in table)


def test_scaling_report_runs_nothing(tmp_path, capsys):
    require("matplotlib")
    from benchmarks import long_dependency_scaling

    argv = ["--device", "cpu", "--out", str(tmp_path), "--report"]
    with pytest.raises(SystemExit):
        long_dependency_scaling.main(argv)
    assert "--report needs a record" in capsys.readouterr().err
    rows = [_run(256, 100), _run(512, 150), _run(512, 600, False, seed=1, distractors="all")]
    (tmp_path / "long_dependency_scaling_cpu.json").write_text(json.dumps({"runs": rows}))
    assert long_dependency_scaling.main([*argv, "--extrapolate-to", "1024"]) == rows
    out = capsys.readouterr().out
    assert "| gilr-lstm | others | 4 | 4 | 0.003 | 0.003 | 1e-08 | 100 | 150 |" in out
    assert "256: 100 (1 of 1), 512: 150 (1 of 1) | - | - |" in out  # fitted from 1,024 steps
    long_dependency_scaling.main([*argv, "--extrapolate-to", "1024", "--fit-from", "256"])
    out = capsys.readouterr().out
    assert "per doubling (from T = 256)" in out
    assert "1.50 times, or +50 | 225, or 200 |" in out
    with pytest.raises(SystemExit):
        long_dependency_scaling.main([*argv, "--fit-from", "0"])
    assert "argument --fit-from: expected a positive int; got 0" in capsys.readouterr().err
    assert (tmp_path / "long_dependency_scaling_cpu.png").stat().st_size > 0


def test_resuming_with_other_settings_is_refused(tmp_path):
    checkpoint = tmp_path / "run.pt"
    settings = {"model": "gilr-lstm", "length": 16, "hidden": 4, "batch_size": 4,
                "max_iterations": 1, "checkpoint": checkpoint, "progress": False}
    long_dependency.train(**settings, learning_rate=1e-3)
    with pytest.raises(ValueError, match=r"learning_rate 0\.001 \(given 0\.003\)"):
        long_dependency.train(**settings, learning_rate=3e-3)
    with pytest.raises(ValueError, match=r"distractors 'others' \(given 'all'\)"):
        long_dependency.train(**settings, learning_rate=1e-3, distractors="all")
    # A checkpoint from before the option drew its distractors from all the directions.
    saved = torch.load(checkpoint, weights_only=False)
    del saved["record"]["distractors"]
    torch.save(saved, checkpoint)
    with pytest.raises(ValueError, match=r"distractors 'all' \(given 'others'\)"):
        long_dependency.train(**settings, learning_rate=1e-3)
    resumed = long_dependency.train(**{**settings, "max_iterations": 2}, learning_rate=1e-3,
                                    distractors="all")
    assert resumed["iterations"] == 2
    assert resumed["distractors"] == "all"


def test_adam_epsilon_is_a_setting(tmp_path):
    checkpoint = tmp_path / "run.pt"
    settings = {"model": "gilr-lstm", "length": 16, "hidden": 4, "batch_size": 4,
                "max_iterations": 1, "checkpoint": checkpoint, "progress": False}
    record = long_dependency.train(**settings, adam_epsilon=1e-11)
    assert record["adam_epsilon"] == 1e-11
    saved = torch.load(checkpoint, weights_only=False)
    assert saved["optimizer"]["param_groups"][0]["eps"] == 1e-11
    with pytest.raises(ValueError, match=r"adam_epsilon 1e-11 \(given 1e-08\)"):
        long_dependency.train(**settings)
    # A checkpoint from before the option used torch's default.
    saved["record"].pop("adam_epsilon")
    torch.save(saved, checkpoint)
    with pytest.raises(ValueError, match=r"adam_epsilon 1e-08 \(given 1e-11\)"):
        long_dependency.train(**settings, adam_epsilon=1e-11)
    for wrong in (0.0, -1e-8, float("nan")):
        with pytest.raises(ValueError, match="`adam_epsilon` must be positive"):
            long_dependency.train(length=4, hidden=2, max_iterations=1, progress=False,
                                  adam_epsilon=wrong)


@pytest.mark.parametrize("model", ["gilr-lstm", "lstm"])
def test_hidden_weights_are_those_that_read_a_hidden_state(model):
    network = long_dependency.Classifier(model, hidden=6, length=16)
    if model == "gilr-lstm":
        first, second = network.recurrent.layers
        expected = [first.recurrent.weight, second.surrogate.linear.weight,
                    second.inputs.weight, second.recurrent.weight, network.head.weight]
    else:
        lstm = network.recurrent
        expected = [lstm.weight_hh_l0, lstm.weight_ih_l1, lstm.weight_hh_l1, network.head.weight]
    assert {id(weight) for weight in network.hidden_weights()} == {id(w) for w in expected}
    assert all(weight.shape[1] == 6 for weight in expected)
    # Every other weight matrix reads the one-hot inputs.
    others = [weight for weight in network.parameters()
              if weight.ndim == 2 and all(weight is not w for w in expected)]
    assert others
    assert all(weight.shape[1] == long_dependency.P for weight in others)


@pytest.mark.parametrize("model", ["gilr-lstm", "lstm"])
def test_hidden_learning_rate_is_the_step_of_the_weights_that_read_a_hidden_state(
        model, tmp_path):
    checkpoint = tmp_path / "run.pt"
    settings = {"model": model, "length": 16, "hidden": 6, "batch_size": 4,
                "learning_rate": 1e-2, "max_iterations": 1, "checkpoint": checkpoint,
                "progress": False}
    record = long_dependency.train(**settings, hidden_learning_rate=1e-4)
    assert record["hidden_learning_rate"] == 1e-4
    torch.manual_seed(0)  # the initialisation of ``train(seed=0)``
    start = long_dependency.Classifier(model, 6, 16)
    trained, _ = long_dependency.load(checkpoint, "cpu")
    reads_hidden = {id(weight) for weight in start.hidden_weights()}
    steps = {True: [], False: []}
    for before, after in zip(start.parameters(), trained.parameters(), strict=True):
        steps[id(before) in reads_hidden].append((after - before).abs().max().item())
    # Adam's first step moves each weight by its rate times g / (|g| + eps): at most the rate
    # (to the float32 rounding of the weights), and nearly the rate where |g| >> eps.
    assert max(steps[True]) == pytest.approx(1e-4, rel=1e-2)
    assert max(steps[False]) == pytest.approx(1e-2, rel=1e-2)
    # A rate of their own is a setting of the run, in its checkpoint.
    with pytest.raises(ValueError, match=r"hidden_learning_rate 0\.0001 \(given 0\.01\)"):
        long_dependency.train(**settings)
    resumed = long_dependency.train(**{**settings, "max_iterations": 2},
                                    hidden_learning_rate=1e-4)
    assert resumed["iterations"] == 2
    for wrong in (0.0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="`hidden_learning_rate` must be positive"):
            long_dependency.train(length=4, hidden=2, max_iterations=1, progress=False,
                                  hidden_learning_rate=wrong)


def test_one_learning_rate_is_one_group_as_before(tmp_path):
    checkpoint = tmp_path / "run.pt"
    settings = {"model": "gilr-lstm", "length": 16, "hidden": 4, "batch_size": 4,
                "learning_rate": 3e-3, "max_iterations": 1, "checkpoint": checkpoint,
                "progress": False}
    record = long_dependency.train(**settings, hidden_learning_rate=3e-3)
    assert record["hidden_learning_rate"] == 3e-3
    saved = torch.load(checkpoint, weights_only=False)
    assert [group["lr"] for group in saved["optimizer"]["param_groups"]] == [3e-3]
    # A checkpoint from before the option had one rate for all its weights.
    del saved["record"]["hidden_learning_rate"]
    torch.save(saved, checkpoint)
    with pytest.raises(ValueError, match=r"hidden_learning_rate 0\.003 \(given 0\.001\)"):
        long_dependency.train(**settings, hidden_learning_rate=1e-3)
    resumed = long_dependency.train(**{**settings, "max_iterations": 2})
    assert (resumed["iterations"], resumed["hidden_learning_rate"]) == (2, 3e-3)


def test_scaled_epsilon_is_a_decade_less_per_decade_of_length():
    scaled = long_dependency.scaled_epsilon
    assert [scaled(length) for length in (1, 1024, 2048, 8192, 2**20)] == [
        1e-8, 1e-8, 1e-8, 1e-9, 1e-11]
    assert scaled(1024) == long_dependency.ADAM_EPSILON


def test_command_line_scales_adam_epsilon_with_the_length(tmp_path):
    arguments = ["--model", "lstm", "--length", "8192", "--hidden", "2", "--batch-size", "1",
                 "--max-iterations", "1", "--device", "cpu", "--out", str(tmp_path)]
    assert long_dependency.main(arguments)["adam_epsilon"] == 1e-9
    assert json.loads((tmp_path / "long_dependency_lstm_8192_eps1e-09.json").read_text())[
        "adam_epsilon"] == 1e-9
    assert long_dependency.main([*arguments, "--adam-epsilon", "1e-8"])["adam_epsilon"] == 1e-8
    assert (tmp_path / "long_dependency_lstm_8192.json").exists()


def test_run_names_carry_the_settings_that_are_not_the_defaults(tmp_path):
    name = long_dependency.run_name
    assert name("lstm", 1024) == "long_dependency_lstm_1024"
    assert name("gilr-lstm", 8192, "all", 1e-9, 3e-3) == \
        "long_dependency_gilr-lstm_8192_all_lr0.003_eps1e-09"
    assert name("lstm", 8192, learning_rate=long_dependency.LEARNING_RATE) == \
        "long_dependency_lstm_8192"
    assert name("lstm", 2**20, adam_epsilon=1e-11, learning_rate=3e-4) == \
        "long_dependency_lstm_1048576_lr0.0003_eps1e-11"
    assert name("gilr-lstm", 8192, adam_epsilon=1e-9, learning_rate=3e-3,
                hidden_learning_rate=3.75e-4) == \
        "long_dependency_gilr-lstm_8192_lr0.003_hlr0.000375_eps1e-09"
    assert name("gilr-lstm", 1024, learning_rate=3e-3, hidden_learning_rate=3e-3) == \
        "long_dependency_gilr-lstm_1024_lr0.003"
    # A run at another rate keeps its own files beside the default's.
    arguments = ["--model", "lstm", "--length", "8192", "--hidden", "2", "--batch-size", "1",
                 "--max-iterations", "1", "--device", "cpu", "--out", str(tmp_path)]
    long_dependency.main(arguments)
    long_dependency.main([*arguments, "--learning-rate", "3e-3"])
    assert json.loads((tmp_path / "long_dependency_lstm_8192_lr0.003_eps1e-09.json").read_text())[
        "learning_rate"] == 3e-3
    assert json.loads((tmp_path / "long_dependency_lstm_8192_eps1e-09.json").read_text())[
        "learning_rate"] == 1e-3
    long_dependency.main([*arguments, "--hidden-learning-rate", "1e-4"])
    assert json.loads((tmp_path / "long_dependency_lstm_8192_hlr0.0001_eps1e-09.json")
                      .read_text())["hidden_learning_rate"] == 1e-4


def test_scaling_takes_a_rate_for_the_weights_that_read_a_hidden_state(tmp_path, capsys):
    from benchmarks import long_dependency_scaling

    argv = ["--lengths", "8", "--learning-rates", "1e-2,3e-3", "--seeds", "0", "--hidden", "4",
            "--batch-size", "4", "--max-iterations", "1", "--device", "cpu", "--out",
            str(tmp_path)]
    rows = long_dependency_scaling.main(argv)
    assert sorted(row["hidden_learning_rate"] for row in rows) == [3e-3, 1e-2]
    rows = long_dependency_scaling.main([*argv, "--hidden-learning-rate", "1e-3"])
    assert sorted((row["learning_rate"], row["hidden_learning_rate"]) for row in rows) == [
        (3e-3, 1e-3), (3e-3, 3e-3), (1e-2, 1e-3), (1e-2, 1e-2)]
    out = capsys.readouterr().out
    assert "| gilr-lstm | others | 4 | 4 | 0.01 | 0.001 | 1e-08 | >1 |" in out
    assert "| gilr-lstm | others | 4 | 4 | 0.01 | 0.01 | 1e-08 | >1 |" in out


def test_scaling_record_from_before_adam_epsilon(tmp_path, capsys):
    require("matplotlib")
    from benchmarks import long_dependency_scaling

    old = _run(256, 100)
    del old["adam_epsilon"], old["hidden_learning_rate"]
    (tmp_path / "long_dependency_scaling_cpu.json").write_text(json.dumps({"runs": [old]}))
    rows = long_dependency_scaling.main(["--device", "cpu", "--out", str(tmp_path), "--report"])
    assert rows == [_run(256, 100)]
    assert "| 0.003 | 0.003 | 1e-08 | 100 |" in capsys.readouterr().out


def test_first_step_gradients_shrink_with_the_length(tmp_path, capsys):
    from benchmarks import long_dependency_gradients

    short, long = (long_dependency_gradients.measure(length, hidden=8, sequences=2)
                   for length in (64, 4096))
    for name in long_dependency_gradients.WEIGHTS:
        assert long["gradients"][name]["median"] < short["gradients"][name]["median"] / 8, name
    # The other columns are read by every step after the first: theirs do not shrink so.
    assert (long["gradients"]["input gate others"]["median"]
            > short["gradients"]["input gate others"]["median"] / 8)
    fraction = long["adam_step_fraction"]["1e-08"]["input gate"]
    median = long["gradients"]["input gate"]["median"]
    assert fraction == pytest.approx(median / (median + 1e-8))
    # From a checkpoint, at its length and size.
    checkpoint = tmp_path / "run.pt"
    long_dependency.train(length=32, hidden=4, batch_size=4, max_iterations=2,
                          checkpoint=checkpoint, progress=False)
    rows = long_dependency_gradients.main(["--checkpoint", str(checkpoint), "--sequences", "1",
                                           "--device", "cpu", "--out", str(tmp_path)])
    assert [(row["length"], row["hidden"], row["iterations"]) for row in rows] == [(32, 4, 2)]
    assert set(rows[0]["weights"]) == {*long_dependency_gradients.WEIGHTS, "head"}
    assert "| 32 | 4 | run.pt, 2 iterations |" in capsys.readouterr().out


# Inductor's own imports use a deprecated torch.jit decorator.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
def test_compiled_run_trains_as_eager_and_resumes_eagerly(tmp_path):
    settings = {"model": "gilr-lstm", "length": 16, "hidden": 4, "batch_size": 4,
                "progress": False}
    eager = long_dependency.train(**settings, max_iterations=4)
    checkpoint = tmp_path / "run.pt"
    compiled = long_dependency.train(**settings, max_iterations=2, checkpoint=checkpoint,
                                     compiled=True)
    assert compiled["compiled"]
    resumed = long_dependency.train(**settings, max_iterations=4, checkpoint=checkpoint)
    assert not resumed["compiled"]
    numbers = [row[1:3] for row in eager["curve"]]
    torch.testing.assert_close([row[1:3] for row in resumed["curve"]], numbers)


def test_only_the_gilr_lstm_runs_compiled():
    with pytest.raises(ValueError, match=r"only the GILR-LSTM runs compiled.*got model 'lstm'"):
        long_dependency.train("lstm", length=8, hidden=4, max_iterations=1, compiled=True)


def test_resuming_on_another_kind_of_device_is_refused(tmp_path):
    checkpoint = tmp_path / "run.pt"
    settings = {"model": "gilr-lstm", "length": 16, "hidden": 4, "batch_size": 4,
                "max_iterations": 1, "checkpoint": checkpoint, "progress": False}
    long_dependency.train(**settings)
    saved = torch.load(checkpoint, weights_only=False)
    saved["generator"] = torch.zeros(16, dtype=torch.uint8)  # the size of a CUDA generator's
    torch.save(saved, checkpoint)
    with pytest.raises(ValueError, match="made on another kind of device than 'cpu'"):
        long_dependency.train(**{**settings, "max_iterations": 2})


def test_saved_bytes_counts_each_storage_once():
    x = torch.ones(10, requires_grad=True)
    assert long_dependency_cost.saved_bytes(torch.exp, x) == 40  # its output
    assert long_dependency_cost.saved_bytes(lambda x: x * x, x) == 40  # x, saved twice


def test_cost_records_each_setting_once(tmp_path, capsys):
    arguments = ["--length", "16", "--hidden", "4", "--modes", "eager", "--warmup", "1",
                 "--iterations", "2", "--device", "cpu", "--out", str(tmp_path)]
    long_dependency_cost.main([*arguments, "--batch-sizes", "1,2"])
    rows = long_dependency_cost.main([*arguments, "--batch-sizes", "2"])  # replaces its row
    assert [(row["batch_size"], row["compiled"]) for row in rows] == [(1, False), (2, False)]
    for row in rows:
        assert len(row["times_ms"]) == 2
        assert row["ms_per_iteration"] > 0
        assert row["saved_bytes_per_step"] > 0
        assert "peak_memory_bytes" not in row
    saved = json.loads((tmp_path / "long_dependency_cost_cpu.json").read_text())
    assert saved["rows"] == rows
    assert saved["device"] == "cpu"
    assert "| gilr-lstm | 16 | 4 | 2 | eager |" in capsys.readouterr().out


class _CupyOutOfMemory(MemoryError):
    """As CuPy's pool raises it (a `MemoryError`)."""


@pytest.mark.parametrize("error", [torch.OutOfMemoryError, _CupyOutOfMemory])
def test_cost_records_running_out_of_memory(error, tmp_path, monkeypatch, capsys):
    def step(*args):
        raise error("out of memory allocating 2,147,483,648 bytes")

    monkeypatch.setattr(long_dependency, "step", step)
    rows = long_dependency_cost.main(["--length", "8", "--hidden", "2", "--batch-sizes", "1",
                                      "--modes", "eager", "--device", "cpu",
                                      "--out", str(tmp_path)])
    assert rows[0]["error"] == "out of memory"
    assert "ms_per_iteration" not in rows[0]
    assert "| 1 | eager | out of memory | - |" in capsys.readouterr().out


def _cost(batch_size, compiled, ms=None):
    row = {"batch_size": batch_size, "compiled": compiled}
    return {**row, "ms_per_iteration": ms} if ms is not None else {**row, "error": "out of memory"}


@pytest.mark.parametrize(("rows", "choice"), [
    ([_cost(4, False, 150), _cost(4, True, 100), _cost(8, False, 290), _cost(8, True, 310)],
     (8, False)),
    ([_cost(4, False, 150), _cost(4, True, 100), _cost(8, False), _cost(8, True, 200)],
     (8, True)),
    ([_cost(4, False, 150), _cost(4, True, 160), _cost(8, False), _cost(8, True)], (4, False)),
    ([_cost(4, False), _cost(8, True)], None),
    ([], None),
])
def test_cost_chooses_the_largest_minibatch_that_ran_in_its_quicker_mode(rows, choice):
    assert long_dependency_cost.choose(rows) == choice


def test_cost_names_its_choice_last(tmp_path, monkeypatch, capsys):
    arguments = ["--length", "8", "--hidden", "2", "--modes", "eager", "--warmup", "1",
                 "--iterations", "1", "--device", "cpu", "--out", str(tmp_path), "--choose"]
    long_dependency_cost.main([*arguments, "--batch-sizes", "1,2"])
    assert capsys.readouterr().out.splitlines()[-1] == "choice: 2 eager"

    def step(*args):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(long_dependency, "step", step)
    long_dependency_cost.main([*arguments, "--batch-sizes", "3"])  # only this run's rows count
    assert capsys.readouterr().out.splitlines()[-1] == "choice: none"


def test_cost_chooses_among_saved_rows_without_measuring(tmp_path, monkeypatch, capsys):
    path = tmp_path / "long_dependency_cost_cpu.json"
    rows = [{"model": "gilr-lstm", "length": 8, "hidden": 2, **_cost(4, False, 150)},
            {"model": "gilr-lstm", "length": 8, "hidden": 2, **_cost(4, True, 100)},
            {"model": "gilr-lstm", "length": 8, "hidden": 2, **_cost(8, False, 290)},
            {"model": "gilr-lstm", "length": 16, "hidden": 2, **_cost(4, False, 50)}]
    path.write_text(json.dumps({"rows": rows, "device": "cpu"}))
    monkeypatch.setattr(long_dependency_cost, "measure", None)  # never called
    arguments = ["--length", "8", "--hidden", "2", "--device", "cpu", "--out", str(tmp_path),
                 "--choose", "--saved"]
    for batch_sizes, modes, choice in [("4", "eager,compiled", "4 compiled"),
                                       ("4,8", "eager,compiled", "8 eager"),
                                       ("4", "eager", "4 eager"), ("16", "eager", "none")]:
        shown = long_dependency_cost.main([*arguments, "--batch-sizes", batch_sizes,
                                           "--modes", modes])
        assert capsys.readouterr().out.splitlines()[-1] == f"choice: {choice}"
        assert all(row["length"] == 8 and str(row["batch_size"]) in batch_sizes.split(",")
                   for row in shown)
    assert json.loads(path.read_text())["rows"] == rows


def test_cost_reuses_saved_rows_and_measures_the_rest(tmp_path, monkeypatch, capsys):
    path = tmp_path / "long_dependency_cost_cpu.json"
    saved = [{"model": "gilr-lstm", "length": 8, "hidden": 2, **_cost(4, False, 150)},
             {"model": "gilr-lstm", "length": 8, "hidden": 2, **_cost(8, False)},
             {"model": "gilr-lstm", "length": 16, "hidden": 2, **_cost(2, False, 50)}]
    path.write_text(json.dumps({"rows": saved, "device": "cpu"}))
    asked = []

    def measure(model, length, hidden, batch_size, compiled, *args):
        asked.append((batch_size, compiled))
        return {"model": model, "length": length, "hidden": hidden,
                **_cost(batch_size, compiled, 40 * batch_size)}

    monkeypatch.setattr(long_dependency_cost, "measure", measure)
    arguments = ["--length", "8", "--hidden", "2", "--device", "cpu", "--out", str(tmp_path),
                 "--choose", "--reuse", "--batch-sizes", "2,4,8", "--modes", "eager"]
    long_dependency_cost.main(arguments)
    assert asked == [(2, False)]  # 4 and 8 are saved, 2 at another length is not this one
    out = capsys.readouterr().out.splitlines()
    assert "batch 4, eager: saved" in out
    assert out[-1] == "choice: 4 eager"  # 8 ran out of memory; 4 is the largest that ran
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 4
    assert rows[:3] == saved
    long_dependency_cost.main([*arguments, "--modes", "eager,compiled"])
    assert asked[1:] == [(2, True), (4, True), (8, True)]
    assert capsys.readouterr().out.splitlines()[-1] == "choice: 8 compiled"


@pytest.mark.parametrize(("arguments", "message"), [
    (["--model", "lstm"], "only the GILR-LSTM runs compiled"),
    (["--modes", "eager,fused"], "--modes must be among eager, compiled; got 'fused'"),
    (["--iterations", "0"], "argument --iterations: expected a positive int; got 0"),
    (["--batch-sizes", "4,0"], "argument --batch-sizes: expected a positive int; got 0"),
    (["--length", "1.5"], "argument --length: invalid positive int value: '1.5'"),
])
def test_cost_refuses_bad_arguments(arguments, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        long_dependency_cost.main([*arguments, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err


def test_gpu_experiments_runs_table3_at_each_runs_rate(tmp_path):
    """``scripts/gpu-experiments`` gives each run its own rate unless one is given for all, and
    names its checkpoint as ``long_dependency`` names the run's files (commands recorded, not
    run, through a ``python3`` that stands in for the modules)."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    calls = tmp_path / "calls"
    shim.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then echo "$*" >> {calls}; exit 0; fi\n'
                    f'exec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu-experiments"
    environment = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}

    def commands(*arguments):
        calls.unlink(missing_ok=True)
        subprocess.run(["bash", str(script), "--skip-table2", "--out", str(tmp_path / "out"),
                        *arguments], check=True, env=environment, capture_output=True)
        return [dict(zip(line.split()[2::2], line.split()[3::2], strict=False))
                for line in calls.read_text().splitlines()]

    runs = commands()
    assert [(run["--model"], run["--length"], run["--hidden"], run["--learning-rate"],
             run["--hidden-learning-rate"], run["--adam-epsilon"]) for run in runs] == [
        ("gilr-lstm", "1024", "512", "3e-3", "3.75e-4", "1e-08"),
        ("lstm", "1024", "512", "3e-4", "3e-4", "1e-08"),
        ("gilr-lstm", "8192", "512", "3e-3", "3.75e-4", "1e-09"),
        ("lstm", "8192", "512", "3e-4", "3e-4", "1e-09"),
        ("gilr-lstm", "1048576", "64", "3e-3", "3e-3", "1e-11")]
    for run in runs:
        name = long_dependency.run_name(run["--model"], int(run["--length"]),
                                        adam_epsilon=float(run["--adam-epsilon"]),
                                        learning_rate=float(run["--learning-rate"]),
                                        hidden_learning_rate=float(run["--hidden-learning-rate"]))
        assert Path(run["--checkpoint"]).name == f"{name}.pt"
    # The million-step run resumes from the checkpoint kept in the repository.
    assert (script.parents[1] / "benchmarks" / "results" / Path(runs[-1]["--checkpoint"]).name
            ).exists()
    [run] = commands("--runs", "lstm:8192", "--learning-rate", "1e-3")
    assert run["--learning-rate"] == "1e-3"
    assert Path(run["--checkpoint"]).name == "long_dependency_lstm_8192_eps1e-09.pt"
    assert run["--hidden-learning-rate"] == "1e-3"
    # A rate given for all is the hidden weights' too, unless they are given their own.
    [run] = commands("--runs", "gilr-lstm:8192", "--learning-rate", "1e-3")
    assert (run["--learning-rate"], run["--hidden-learning-rate"]) == ("1e-3", "1e-3")
    [run] = commands("--runs", "lstm:8192", "--hidden-learning-rate", "1e-4")
    assert (run["--learning-rate"], run["--hidden-learning-rate"]) == ("3e-4", "1e-4")
    [run] = commands("--runs", "gilr-lstm:8192", "--learning-rate", "3e-3",
                     "--hidden-learning-rate", "3.75e-4")
    assert (run["--learning-rate"], run["--hidden-learning-rate"]) == ("3e-3", "3.75e-4")
    assert (Path(run["--checkpoint"]).name
            == "long_dependency_gilr-lstm_8192_lr0.003_hlr0.000375_eps1e-09.pt")
