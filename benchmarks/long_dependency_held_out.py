"""A long-dependency run's checkpoint on sequences it was not trained on.

A run stops at its first five consecutive minibatches classified without
error (`long_dependency.train`), which at long lengths can come while its
cross-entropy is still near chance (``log 2``): the network has the sign, but
by a small margin. This draws fresh sequences of the run's length and
distractors, from a generator of another seed than the run's, classifies them
with the checkpoint's network (no gradients) and reports how many it got
right, the mean cross-entropy, the margins (each sequence's logit times its
sign, positive when it is right), each class's logits and how well they rank
the classes: a network can order them without error and still put its
threshold elsewhere than at zero.

A checkpoint holds the weights after the run's last update; with
``--before-last-update`` Adam's last step is taken back first, which gives the
network as it classified the minibatch that ended the run.

    python -m benchmarks.long_dependency_held_out \\
        --checkpoint benchmarks/results/long_dependency_gilr-lstm_1048576_lr0.003_eps1e-11.pt \\
        --sequences 64 [--before-last-update]

Each evaluation is added to ``results/long_dependency_held_out_<device>.json``,
replacing one of the same checkpoint, iterations, weights, sequences and seed.
On a CPU a million steps take about 3 GB and 20 s a sequence.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import _common, long_dependency

SEED_OFFSET = 1_000_000  # the held-out seed's default: the run's seed plus this
SETTINGS = ("checkpoint", "iterations", "weights", "sequences", "held_out_seed")


def ranked(positive: np.ndarray, negative: np.ndarray) -> float | None:
    """The fraction of pairs of a positive and a negative sequence whose logits are in order
    (the positive's higher; ties count half): the area under the ROC curve, 1 where a
    threshold separates the classes, whether or not it is the logit's zero. None without
    both classes."""
    if not positive.size or not negative.size:
        return None
    above = (positive[:, None] > negative[None, :]).sum()
    ties = (positive[:, None] == negative[None, :]).sum()
    return float((above + ties / 2) / (positive.size * negative.size))


def undo_last_step(network: torch.nn.Module, optimizer: dict) -> None:
    """Take back the last update of Adam (``optimizer``, its state dict, as a checkpoint
    holds it, with ``network``'s parameters in order) from ``network``'s weights: the
    network as it classified the run's last minibatch. Adam's state keeps the moments
    that update used, so the step ``lr * m_hat / (sqrt(v_hat) + eps)`` is known."""
    parameters = list(network.parameters())
    for group in optimizer["param_groups"]:
        if group.get("weight_decay", 0) or group.get("amsgrad") or group.get("maximize"):
            raise ValueError("only plain Adam's last step can be taken back (no weight decay, "
                             f"amsgrad or maximize); the checkpoint's has {group}")
        beta1, beta2 = group["betas"]
        with torch.no_grad():
            for index in group["params"]:
                state = optimizer["state"][index]
                step = float(state["step"])
                corrected = (state["exp_avg"] / (1 - beta1 ** step)).to(parameters[index])
                scale = (state["exp_avg_sq"] / (1 - beta2 ** step)).to(parameters[index])
                parameters[index].add_(group["lr"] * corrected / (scale.sqrt() + group["eps"]))


def evaluate(checkpoint: Path, sequences: int, batch_size: int = 1, seed: int | None = None,
             device: str = "cpu", progress: bool = True,
             before_last_update: bool = False) -> dict:
    """The network of ``checkpoint`` on ``sequences`` fresh sequences (see the module doc).

    Parameters
    ----------
    checkpoint : Path
        A checkpoint of `long_dependency.train`; the sequences take its run's length and
        distractors.
    sequences : int
        How many sequences to classify, drawn ``batch_size`` at a time.
    seed : int, optional
        The seed of the sequences' generator; by default the run's plus `SEED_OFFSET`, so
        that they are not the minibatches the run trained on.
    before_last_update : bool, default False
        Classify with the weights before the run's last update (`undo_last_step`): as
        the network was when it classified its last minibatch, the one that ended a
        converged run. The checkpoint holds the weights after it.

    Returns
    -------
    dict
        The run's settings and iterations, ``weights`` ("as saved" or "before the last
        update"), ``sequences``, ``held_out_seed`` (the sequences' generator's), ``correct``
        (how many were classified right), ``accuracy``, ``cross_entropy`` (the mean),
        ``margin`` (the minimum, median and mean of the logit times the sign), ``ranked``
        (`ranked`), ``separation`` (`long_dependency.separation`, d'), the ``logits`` of
        each class (count, min, mean, max) and ``wall_time_s``.
    """
    if sequences < 1 or batch_size < 1:
        raise ValueError(f"`sequences` and `batch_size` must be at least 1; got {sequences} "
                         f"and {batch_size}")
    network, run = long_dependency.load(checkpoint, device)
    if before_last_update:
        undo_last_step(network, torch.load(checkpoint, map_location="cpu",
                                           weights_only=False)["optimizer"])
    held_out_seed = run["seed"] + SEED_OFFSET if seed is None else seed
    generator = torch.Generator(device).manual_seed(held_out_seed)
    outputs, signs, right = [], [], 0
    start = time.perf_counter()
    with torch.no_grad():
        for first in range(0, sequences, batch_size):
            inputs, labels = long_dependency.batch(run["length"], min(batch_size,
                                                                      sequences - first),
                                                   generator, device, run["distractors"])
            logits = network(inputs)
            del inputs  # a million steps of one-hot inputs take 0.5 GB a sequence
            outputs.append(logits.double().cpu().numpy())
            signs.append(labels.cpu().numpy() > 0)
            right += int(((outputs[-1] > 0) == signs[-1]).sum())
            if progress:
                print(f"\r{first + len(labels)}/{sequences} sequences, {right} right, "
                      f"{time.perf_counter() - start:.0f} s", end="", file=sys.stderr,
                      flush=True)
    if progress:
        print(file=sys.stderr)
    logits, positive = np.concatenate(outputs), np.concatenate(signs)
    margins = np.where(positive, logits, -logits)
    correct = int((margins > 0).sum())
    return {"checkpoint": Path(checkpoint).name,
            **{name: run[name] for name in long_dependency.SETTINGS},
            "iterations": run["iterations"], "converged": run["converged"],
            "weights": "before the last update" if before_last_update else "as saved",
            "sequences": sequences, "held_out_seed": held_out_seed, "correct": correct,
            "accuracy": correct / sequences,
            "cross_entropy": float(np.logaddexp(0, -margins).mean()),  # -log sigmoid(margin)
            "margin": {"min": float(margins.min()), "median": float(np.median(margins)),
                       "mean": float(margins.mean())},
            "ranked": ranked(logits[positive], logits[~positive]),
            "separation": long_dependency.separation(torch.from_numpy(logits),
                                                     torch.from_numpy(positive)),
            "logits": {name: {"count": int(part.size),
                              **({"min": float(part.min()), "mean": float(part.mean()),
                                  "max": float(part.max())} if part.size else {})}
                       for name, part in (("positive", logits[positive]),
                                          ("negative", logits[~positive]))},
            "wall_time_s": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--sequences", type=_common.positive(int), default=64)
    parser.add_argument("--batch-size", type=_common.positive(int), default=1,
                        help="sequences a forward pass (memory grows with it)")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"the sequences' seed (default: the run's plus {SEED_OFFSET:,})")
    parser.add_argument("--before-last-update", action="store_true",
                        help="take the run's last Adam step back from the weights first")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        parser.error(f"--checkpoint {args.checkpoint} does not exist")
    row = evaluate(args.checkpoint, args.sequences, args.batch_size, args.seed, args.device,
                   before_last_update=args.before_last_update)
    row["device"] = _common.torch_device_name(args.device)
    row["environment"] = {**_common.environment(), "torch": torch.__version__}
    path = args.out / (f"long_dependency_held_out_"
                       f"{row['device'].replace(' ', '-')}.json")
    saved = json.loads(path.read_text()) if path.exists() else {"runs": []}
    for old in saved["runs"]:
        old.setdefault("weights", "as saved")  # rows from before the option
    saved["runs"] = _common.replaced(saved["runs"], row, SETTINGS)
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1) + "\n")
    margin = row["margin"]
    print(f"{row['checkpoint']} ({row['iterations']:,} iterations, weights "
          f"{row['weights']}): {row['correct']} of "
          f"{row['sequences']} held-out sequences right, cross-entropy "
          f"{row['cross_entropy']:.4f}, margin min {margin['min']:.3g}, median "
          f"{margin['median']:.3g}; classes ranked {row['ranked']}, d' "
          f"{row['separation']}")
    return row


if __name__ == "__main__":
    main()
