"""How the iterations to learn the long-dependency problem grow with its length, per learning rate.

The paper's Table 3 (``long_dependency.py``) needs a GPU at its lengths; this
runs the same training at short lengths, several seeds per setting, to see
which learning rate keeps the iterations from growing with the length before
spending GPU time on a million steps.

    python -m benchmarks.long_dependency_scaling --lengths 256,1024,2048 \\
        --learning-rates 1e-3,3e-3 --seeds 0,1 --jobs 2

Each finished run is added to ``results/long_dependency_scaling_<device>.json``
(a run already there with the same settings is skipped, unless it stopped short
of convergence at a lower ``--max-iterations``, when it is run again and
replaced), and a table of all the runs there is printed: per length,
distractors and learning rates (``--hidden-learning-rate`` gives the weights
that read a hidden state a rate of their own), each seed's iterations, or ``>N``
where it had not converged after ``N``. With ``--jobs`` above 1 the runs share
the CPU, so their times per iteration are those of a shared machine.

A second table fits how the iterations grow: per model, size and learning rate,
the mean of the runs that learned at each length (with how many of how many
learned), and two extrapolations to ``--extrapolate-to`` steps (a million by
default), fitted to the means from ``--fit-from`` steps on (1,024 by default;
the iterations grow faster below): by a least-squares fit of the means'
logarithms against the length's (a constant factor per doubling of the
length), and by a least-squares line against the length's logarithm (a
constant count per doubling). A plot of every
run is written beside the record, as a PNG. ``--report`` prints the tables and
writes the plot from the record alone, running nothing:

    python -m benchmarks.long_dependency_scaling --report --device cpu
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks import _common, long_dependency

SETTINGS = long_dependency.SETTINGS
GROUP = ("model", "distractors", "hidden", "batch_size", "learning_rate", "hidden_learning_rate",
         "adam_epsilon")
# ``GROUP`` is a line of the tables.


def _load(path: Path) -> dict:
    """The record at ``path``, its runs from before ``adam_epsilon`` given torch's, and from
    before ``hidden_learning_rate`` their one rate, which they used."""
    saved = json.loads(path.read_text())
    for row in saved["runs"]:
        row.setdefault("adam_epsilon", long_dependency.ADAM_EPSILON)
        row.setdefault("hidden_learning_rate", row["learning_rate"])
    return saved


def _key(row: dict) -> tuple:
    """What identifies a run: its settings."""
    return tuple(row[name] for name in SETTINGS)


def _group(row: dict) -> tuple:
    """The settings a line of the tables shares: all but the length and the seed."""
    return tuple(row[name] for name in GROUP)


def _by_setting(rows: list[dict]) -> dict[tuple, dict[int, list[dict]]]:
    """``rows`` by the line of the tables they are on (``_group``), then by length, in order."""
    groups: dict[tuple, dict[int, list[dict]]] = {}
    for row in rows:
        groups.setdefault(_group(row), {}).setdefault(row["length"], []).append(row)
    return groups


def run(settings: dict, max_iterations: int, device: str, threads: int) -> dict:
    """One training run, as a row of the record: its settings, outcome and timing."""
    torch.set_num_threads(threads)
    record = long_dependency.train(**settings, max_iterations=max_iterations, device=device,
                                   progress=False)
    losses = [row[1] for row in record["curve"][-100:]]
    apart = long_dependency.mean_separation(record["curve"][-100:])
    return {**settings, "max_iterations": max_iterations,
            "iterations": record["iterations"], "converged": record["converged"],
            "wall_time_s": round(record["wall_time_s"], 1),
            "ms_per_iteration": round(1e3 * record["wall_time_s"] / record["iterations"], 1),
            "mean_loss_last_100": round(sum(losses) / len(losses), 4),
            "mean_separation_last_100": None if apart is None else round(apart, 2),
            "separated_at": long_dependency.separated_at(record["curve"])}


def table(rows: list[dict]) -> str:
    """Markdown: a line per model, size, learning rates and Adam's eps, a column per length."""
    lengths = sorted({row["length"] for row in rows})
    groups = _by_setting(sorted(rows, key=lambda row: row["seed"]))
    lines = ["| model | distractors | hidden | batch | learning rate | hidden's rate | Adam eps | "
             + " | ".join(f"T = {length:,}" for length in lengths) + " |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | "
             + " | ".join("---:" for _ in lengths) + " |"]
    for (model, distractors, hidden, batch_size, rate, hidden_rate, epsilon), by_length in sorted(
            groups.items()):
        cells = (", ".join(str(row["iterations"]) if row["converged"]
                           else f">{row['iterations']}" for row in by_length.get(length, []))
                 or "-" for length in lengths)
        lines.append(f"| {model} | {distractors} | {hidden} | {batch_size} | {rate:g} | "
                     f"{hidden_rate:g} | {epsilon:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def growth(rows: list[dict], to_length: int = 2**20, fit_from: int = 1) -> list[dict]:
    """How the iterations grow with the length, per model, size and learning rate.

    Parameters
    ----------
    rows : list of dict
        Runs of the record.
    to_length : int
        The length to extrapolate to.
    fit_from : int
        The shortest length the fits use; the means are given at every length.

    Returns
    -------
    list of dict
        Per group (``GROUP``'s settings): ``lengths``, the ``means`` of the iterations of
        the runs that learned at each, how many ``learned`` of how many ``runs``; and,
        where at least two lengths from ``fit_from`` on have runs that learned, ``factor``
        (the iterations' growth per doubling of the length, from a least-squares fit of
        their logarithms) with its extrapolation ``at_length_by_factor``, and ``count``
        (iterations added per doubling, from a least-squares line against the length's
        logarithm) with ``at_length_by_count``. The means leave out the runs that did not
        learn, so they understate where some did not.
    """
    fits = []
    for key, by_length in sorted(_by_setting(rows).items()):
        fit = dict(zip(GROUP, key, strict=True))
        fit["lengths"], fit["means"], fit["learned"], fit["runs"] = [], [], [], []
        for length, runs in sorted(by_length.items()):
            learned = [row["iterations"] for row in runs if row["converged"]]
            fit["lengths"].append(length)
            fit["means"].append(sum(learned) / len(learned) if learned else None)
            fit["learned"].append(len(learned))
            fit["runs"].append(len(runs))
        points = [(np.log2(length), mean) for length, mean in zip(fit["lengths"], fit["means"],
                                                                  strict=True)
                  if mean is not None and length >= fit_from]
        if len(points) >= 2:
            doublings, means = np.array(points).T
            slope, intercept = np.polyfit(doublings, np.log(means), 1)
            fit["factor"] = float(np.exp(slope))
            fit["at_length_by_factor"] = float(np.exp(slope * np.log2(to_length) + intercept))
            slope, intercept = np.polyfit(doublings, means, 1)
            fit["count"] = float(slope)
            fit["at_length_by_count"] = float(slope * np.log2(to_length) + intercept)
        fits.append(fit)
    return fits


def growth_table(fits: list[dict], to_length: int, fit_from: int = 1) -> str:
    """Markdown: a line per group, its means per length and its two extrapolations
    (fitted from ``fit_from`` steps on)."""
    since = f" (from T = {fit_from:,})" if fit_from > 1 else ""
    lines = ["| model | distractors | hidden | batch | learning rate | hidden's rate | Adam eps | "
             "mean iterations of those that learned (learned of runs), per length | "
             f"per doubling{since} | at T = {to_length:,} |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for fit in fits:
        means = ", ".join(
            f"{length:,}: {'-' if mean is None else f'{mean:,.0f}'} ({learned} of {runs})"
            for length, mean, learned, runs in zip(fit["lengths"], fit["means"], fit["learned"],
                                                    fit["runs"], strict=True))
        if "factor" in fit:
            doubling = f"{fit['factor']:.2f} times, or {fit['count']:+,.0f}"
            extrapolated = (f"{fit['at_length_by_factor']:,.0f}, or "
                            f"{fit['at_length_by_count']:,.0f}")
        else:
            doubling = extrapolated = "-"
        lines.append(f"| {fit['model']} | {fit['distractors']} | {fit['hidden']} | "
                     f"{fit['batch_size']} | {fit['learning_rate']:g} | "
                     f"{fit['hidden_learning_rate']:g} | {fit['adam_epsilon']:g} | {means} | "
                     f"{doubling} | "
                     f"{extrapolated} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Every run's iterations against its length, a panel per choice of distractors, as a PNG.

    A line per model, size and learning rate joins the means of the runs that
    learned; a run that did not is drawn as a triangle at the iterations it stopped at.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({row["distractors"] for row in rows})
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.6),
                                squeeze=False)
    for axis, distractors in zip(axes[0], panels, strict=True):
        chosen = [row for row in rows if row["distractors"] == distractors]
        groups = _by_setting(chosen)
        for index, fit in enumerate(growth(chosen)):
            # Ten colours, then the same ten dashed, then dotted: no two settings look alike.
            colour = f"C{index % 10}"
            style = ("-", "--", ":")[index // 10 % 3]
            label = (f"{fit['model']}, rate {fit['learning_rate']:g}, batch {fit['batch_size']}"
                     f", hidden {fit['hidden']}"
                     + ("" if fit["hidden_learning_rate"] == fit["learning_rate"]
                        else f" (hidden weights' rate {fit['hidden_learning_rate']:g})")
                     + ("" if fit["adam_epsilon"] == long_dependency.ADAM_EPSILON
                        else f", Adam eps {fit['adam_epsilon']:g}"))
            points = [(length, mean) for length, mean in zip(fit["lengths"], fit["means"],
                                                             strict=True) if mean is not None]
            lengths, means = zip(*points, strict=True) if points else ((), ())
            axis.plot(lengths, means, color=colour, linestyle=style, marker="o", markersize=3,
                      label=label)
            runs = [row for runs in groups[_group(fit)].values() for row in runs]
            for learned, marker in ((True, "."), (False, "^")):
                lengths = [row["length"] for row in runs if row["converged"] == learned]
                iterations = [row["iterations"] for row in runs if row["converged"] == learned]
                axis.scatter(lengths, iterations, color=colour, marker=marker,
                             s=16 if learned else 40, alpha=0.6)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("length T (steps)")
        axis.set_ylabel("iterations to learn")
        axis.set_title(f"distractors: {distractors} (triangles: not learned when stopped)")
        axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
                    handlelength=4)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["gilr-lstm", "lstm"], default="gilr-lstm")
    parser.add_argument("--lengths", type=_common.listed(_common.positive(int)),
                        default=[256, 512, 1024])
    parser.add_argument("--learning-rates", type=_common.listed(_common.positive(float)),
                        default=[1e-3, 3e-3])
    parser.add_argument("--seeds", type=_common.listed(int), default=[0, 1])
    parser.add_argument("--distractors", choices=long_dependency.DISTRACTORS, default="others",
                        help="the directions of the steps after the first (see long_dependency)")
    parser.add_argument("--hidden", type=_common.positive(int), default=64)
    parser.add_argument("--batch-size", type=_common.positive(int), default=16)
    parser.add_argument("--adam-epsilon", type=_common.positive(float),
                        default=long_dependency.ADAM_EPSILON,
                        help="Adam's eps (see long_dependency)")
    parser.add_argument("--hidden-learning-rate", type=_common.positive(float), default=None,
                        help="Adam's rate for the weights that read a hidden state (see "
                        "long_dependency; default: each run's learning rate)")
    parser.add_argument("--max-iterations", type=_common.positive(int), default=1500)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--jobs", type=_common.positive(int), default=1,
                        help="runs at once, each with its share of the CPU's threads")
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    parser.add_argument("--extrapolate-to", type=_common.positive(int), default=2**20,
                        help="the length the growth table extrapolates to")
    parser.add_argument("--fit-from", type=_common.positive(int), default=1024,
                        help="the shortest length the growth table's fits use (below 1,024 "
                             "steps the iterations grow faster than beyond)")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: print the tables and write the plot from the record")
    args = parser.parse_args(argv)
    device_name = _common.torch_device_name(args.device)
    path = args.out / f"long_dependency_scaling_{device_name.replace(' ', '-')}.json"
    if args.report and not path.exists():
        parser.error(f"--report needs a record; {path} does not exist")
    saved = _load(path) if path.exists() else {"runs": []}
    if args.report:
        report(saved["runs"], path, args.extrapolate_to, args.fit_from)
        return saved["runs"]
    # Runs that settle their settings: converged, or stopped at this limit or a higher one.
    done = {_key(row) for row in saved["runs"]
            if row["converged"] or row["max_iterations"] >= args.max_iterations}
    todo = [{"model": args.model, "length": length, "hidden": args.hidden,
             "batch_size": args.batch_size, "learning_rate": rate,
             "hidden_learning_rate": (rate if args.hidden_learning_rate is None
                                      else args.hidden_learning_rate),
             "seed": seed, "distractors": args.distractors, "adam_epsilon": args.adam_epsilon}
            for length in args.lengths for rate in args.learning_rates for seed in args.seeds]
    todo = [settings for settings in todo
            if _key(settings) not in done]
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    environment = {**_common.environment(), "torch": torch.__version__}  # of the code run
    args.out.mkdir(parents=True, exist_ok=True)
    # Spawned, not forked: a forked child cannot use the parent's CUDA context.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = [pool.submit(run, settings, args.max_iterations, args.device, threads)
                   for settings in todo]
        for future in concurrent.futures.as_completed(futures):
            row = future.result()
            row["environment"] = environment
            saved["runs"] = _common.replaced(saved["runs"], row, SETTINGS)
            saved["device"] = device_name
            path.write_text(json.dumps(saved, indent=1) + "\n")
            status = "converged" if row["converged"] else "did not converge"
            rates = (f"{row['learning_rate']:g}"
                     + ("" if row["hidden_learning_rate"] == row["learning_rate"]
                        else f" (hidden weights {row['hidden_learning_rate']:g})"))
            print(f"T = {row['length']:,}, rate {rates}, seed {row['seed']}: "
                  f"{status} after {row['iterations']} iterations ({row['wall_time_s']} s)",
                  flush=True)
    if saved["runs"]:
        report(saved["runs"], path, args.extrapolate_to, args.fit_from)
    return saved["runs"]


def report(rows: list[dict], path: Path, to_length: int, fit_from: int = 1) -> None:
    """Print the runs' table and the growth table; plot the runs beside the record."""
    print(table(rows))
    print()
    print(growth_table(growth(rows, to_length, fit_from), to_length, fit_from))
    try:
        plot(rows, path.with_suffix(".png"))
    except ImportError:
        print("matplotlib is missing: no plot (pip install 'cuscan[docs]')", file=sys.stderr)


if __name__ == "__main__":
    main()
