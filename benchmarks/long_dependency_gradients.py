"""The long-dependency problem's gradients per length: what reaches the weights reading step one.

The network learns the problem by the weights that read the first step,
``+e1`` or ``-e1``: the first layer's input weights of its input gate and
candidate, and of its surrogate's gate and candidate, in the column of ``e1``
(the steps after the first never touch that column). Under the chrono
initialisation a unit takes in ``1 / u`` of each step, ``u`` drawn up to the
length, so their gradients shrink as ``1 / length``. Adam divides a gradient
by its own root mean square plus ``eps`` (``1e-8`` by default): a gradient well
below ``eps`` moves its weight by that fraction of the learning rate.

This measures those gradients, one sequence a backward pass, at the
initialisation of ``long_dependency.train`` (its seed) or at a checkpoint's
weights, beside those of the other columns of the same weights and of the
head; and what fraction of Adam's step a gradient of the median size gets
for each ``eps`` given.

    python -m benchmarks.long_dependency_gradients --lengths 1024,8192,65536,1048576 \\
        --hidden 64
    python -m benchmarks.long_dependency_gradients \\
        --checkpoint benchmarks/results/long_dependency_gilr-lstm_1048576_lr0.003.pt

Each measurement is added to ``results/long_dependency_gradients_<device>.json``,
replacing one with the same settings. A million steps take about 8 GB and a
minute a sequence on a CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from benchmarks import _common, long_dependency

# The weights measured, by the rows of the first layer's parameters they are.
WEIGHTS = ("input gate", "candidate", "surrogate gate", "surrogate candidate")
SETTINGS = ("length", "hidden", "seed", "checkpoint", "iterations")


def _weights(network: long_dependency.Classifier, hidden: int, grad: bool = True) -> dict:
    """The gradient of each of ``WEIGHTS`` (``hidden`` rows, a column per input direction) in
    the first layer of ``network``, or without ``grad`` the weight itself."""
    layer = network.recurrent.layers[0]
    inputs, surrogate = layer.inputs.weight, layer.surrogate.linear.weight
    if grad:
        inputs, surrogate = inputs.grad, surrogate.grad
    # inputs: forget, input, output, candidate; surrogate: gate, candidate
    return {"input gate": inputs[hidden:2 * hidden], "candidate": inputs[3 * hidden:],
            "surrogate gate": surrogate[:hidden], "surrogate candidate": surrogate[hidden:]}


def measure(length: int, hidden: int = 64, sequences: int = 4, seed: int = 0,
            checkpoint: Path | None = None, device: str = "cpu",
            epsilons: tuple = (long_dependency.ADAM_EPSILON,)) -> dict:
    """The gradients of ``sequences`` sequences, one at a time (see the module doc).

    Returns
    -------
    dict
        The settings (``SETTINGS``) and, per weight of ``WEIGHTS`` and ``"head"``, the
        median and largest magnitude of its gradients over units and sequences
        (``e1``'s column, or for ``"... others"`` the other columns); and per ``eps`` of
        ``epsilons``, ``g / (g + eps)`` for each weight's median ``g``: the fraction of
        Adam's step a gradient of that size gets when it keeps its sign; and the largest
        magnitude of each weight's ``e1`` column and of the head (``"weights"``).
    """
    iterations = 0
    if checkpoint is None:
        torch.manual_seed(seed)  # the initialisation of ``long_dependency.train(seed=seed)``
        network, _ = long_dependency.build("gilr-lstm", hidden, length, device)
    else:
        network, record = long_dependency.load(checkpoint, device)
        iterations = record["iterations"]
    generator = torch.Generator(device).manual_seed(seed)
    samples: dict[str, list] = {}
    for _ in range(sequences):
        inputs, labels = long_dependency.batch(length, 1, generator, device)
        network.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(network(inputs), labels)
        loss.backward()
        for name, grad in _weights(network, hidden).items():
            samples.setdefault(name, []).append(grad[:, 0].abs().cpu())
            samples.setdefault(f"{name} others", []).append(grad[:, 1:].abs().flatten().cpu())
        samples.setdefault("head", []).append(network.head.weight.grad.abs().flatten().cpu())
    row = {"length": length, "hidden": hidden, "seed": seed,
           "checkpoint": None if checkpoint is None else checkpoint.name,
           "iterations": iterations, "sequences": sequences, "gradients": {}}
    for name, values in samples.items():
        values = torch.cat(values).double().numpy()
        row["gradients"][name] = {"median": float(np.median(values)), "max": float(values.max())}
    with torch.no_grad():
        row["weights"] = {name: float(weight[:, 0].abs().max())
                          for name, weight in _weights(network, hidden, grad=False).items()}
        row["weights"]["head"] = float(network.head.weight.abs().max())
    row["adam_step_fraction"] = {
        f"{eps:g}": {name: row["gradients"][name]["median"]
                     / (row["gradients"][name]["median"] + eps) for name in WEIGHTS}
        for eps in epsilons}
    return row


def table(rows: list[dict]) -> str:
    """Markdown: a line per measurement, the median gradient of each weight (largest in
    brackets) and Adam's step fraction for each recorded ``eps``."""
    epsilons = sorted({eps for row in rows for eps in row["adam_step_fraction"]}, key=float,
                      reverse=True)
    lines = ["| length | hidden | weights | " + " | ".join(f"{name}, e1" for name in WEIGHTS)
             + " | input gate, others | head | "
             + " | ".join(f"input gate's step, eps {eps}" for eps in epsilons) + " |",
             "| ---: | ---: | --- | "
             + " | ".join("---:" for _ in range(len(WEIGHTS) + 2 + len(epsilons)))
             + " |"]
    for row in sorted(rows, key=lambda row: (row["hidden"], row["length"], row["iterations"])):
        gradients = row["gradients"]
        cells = [f"{gradients[name]['median']:.1e} ({gradients[name]['max']:.1e})"
                 for name in (*WEIGHTS, "input gate others", "head")]
        fractions = [f"{row['adam_step_fraction'][eps]['input gate']:.2f}"
                     if eps in row["adam_step_fraction"] else "-" for eps in epsilons]
        weights = ("initial" if row["checkpoint"] is None
                   else f"{row['checkpoint']}, {row['iterations']:,} iterations")
        lines.append(f"| {row['length']:,} | {row['hidden']} | {weights} | "
                     + " | ".join(cells + fractions) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=_common.listed(_common.positive(int)),
                        default=[1024, 8192, 65536])
    parser.add_argument("--hidden", type=_common.positive(int), default=64)
    parser.add_argument("--sequences", type=_common.positive(int), default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="measure at this checkpoint's weights, at its length and size")
    parser.add_argument("--epsilons", type=_common.listed(float), default=[1e-8, 1e-11])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    args = parser.parse_args(argv)
    lengths, hidden = args.lengths, args.hidden
    if args.checkpoint is not None:
        record = torch.load(args.checkpoint, map_location="cpu", weights_only=False)["record"]
        if record["model"] != "gilr-lstm":
            parser.error(f"--checkpoint must be a GILR-LSTM's; {args.checkpoint} is a "
                         f"{record['model']}'s")
        lengths, hidden = [record["length"]], record["hidden"]
    path = args.out / (f"long_dependency_gradients_"
                       f"{_common.torch_device_name(args.device).replace(' ', '-')}.json")
    saved = json.loads(path.read_text()) if path.exists() else {"runs": []}
    environment = {**_common.environment(), "torch": torch.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    for length in lengths:
        row = measure(length, hidden, args.sequences, args.seed, args.checkpoint, args.device,
                      tuple(args.epsilons))
        row["environment"] = environment
        saved["runs"] = _common.replaced(saved["runs"], row, SETTINGS)
        path.write_text(json.dumps(saved, indent=1) + "\n")
        print(f"length {length:,}: input gate's e1 gradient, median "
              f"{row['gradients']['input gate']['median']:.1e}", flush=True)
    print(table(saved["runs"]))
    return saved["runs"]


if __name__ == "__main__":
    main()
