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
distractors and learning rate, each seed's iterations, or ``>N`` where it had
not converged after ``N``. With ``--jobs`` above 1 the runs share the CPU, so their times
per iteration are those of a shared machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
from pathlib import Path

import torch

from benchmarks import _common, long_dependency

SETTINGS = ("model", "length", "hidden", "batch_size", "learning_rate", "seed", "distractors")


def _key(row: dict) -> tuple:
    """What identifies a run: its settings."""
    return tuple(row[name] for name in SETTINGS)


def run(settings: dict, max_iterations: int, device: str, threads: int) -> dict:
    """One training run, as a row of the record: its settings, outcome and timing."""
    torch.set_num_threads(threads)
    record = long_dependency.train(**settings, max_iterations=max_iterations, device=device,
                                   progress=False)
    losses = [row[1] for row in record["curve"][-100:]]
    return {**settings, "max_iterations": max_iterations,
            "iterations": record["iterations"], "converged": record["converged"],
            "wall_time_s": round(record["wall_time_s"], 1),
            "ms_per_iteration": round(1e3 * record["wall_time_s"] / record["iterations"], 1),
            "mean_loss_last_100": round(sum(losses) / len(losses), 4)}


def table(rows: list[dict]) -> str:
    """Markdown: a line per model, size and learning rate, a column per length."""
    lengths = sorted({row["length"] for row in rows})
    groups: dict[tuple, dict[int, list[str]]] = {}
    for row in sorted(rows, key=lambda row: row["seed"]):
        key = (row["model"], row["distractors"], row["hidden"], row["batch_size"],
               row["learning_rate"])
        cell = (str(row["iterations"]) if row["converged"] else f">{row['iterations']}")
        groups.setdefault(key, {}).setdefault(row["length"], []).append(cell)
    lines = ["| model | distractors | hidden | batch | learning rate | "
             + " | ".join(f"T = {length:,}" for length in lengths) + " |",
             "| --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in lengths) + " |"]
    for (model, distractors, hidden, batch_size, rate), cells in sorted(groups.items()):
        lines.append(f"| {model} | {distractors} | {hidden} | {batch_size} | {rate:g} | "
                     + " | ".join(", ".join(cells.get(length, ["-"])) for length in lengths)
                     + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["gilr-lstm", "lstm"], default="gilr-lstm")
    parser.add_argument("--lengths", type=_common.listed(int), default=[256, 512, 1024])
    parser.add_argument("--learning-rates", type=_common.listed(float), default=[1e-3, 3e-3])
    parser.add_argument("--seeds", type=_common.listed(int), default=[0, 1])
    parser.add_argument("--distractors", choices=long_dependency.DISTRACTORS, default="others",
                        help="the directions of the steps after the first (see long_dependency)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-iterations", type=int, default=1500)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each with its share of the CPU's threads")
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1; got {args.jobs}")
    device_name = _common.torch_device_name(args.device)
    path = args.out / f"long_dependency_scaling_{device_name.replace(' ', '-')}.json"
    saved = json.loads(path.read_text()) if path.exists() else {"runs": []}
    # Runs that settle their settings: converged, or stopped at this limit or a higher one.
    done = {_key(row) for row in saved["runs"]
            if row["converged"] or row["max_iterations"] >= args.max_iterations}
    todo = [dict(zip(SETTINGS, (args.model, length, args.hidden, args.batch_size, rate, seed,
                                args.distractors), strict=True))
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
            print(f"T = {row['length']:,}, rate {row['learning_rate']:g}, seed {row['seed']}: "
                  f"{status} after {row['iterations']} iterations ({row['wall_time_s']} s)",
                  flush=True)
    print(table(saved["runs"]))
    return saved["runs"]


if __name__ == "__main__":
    main()
