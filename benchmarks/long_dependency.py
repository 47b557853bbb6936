"""The paper's long-dependency experiment (its Table 3): remember the sign of the first step.

Problem 2b of Hochreiter & Schmidhuber (1997) as in Martin & Cundy (2018),
section 4.2: each sequence is ``length`` one-hot vectors in ``p = 128``
dimensions drawn at random, except the first, which is ``+e1`` or ``-e1``; the
label is that sign. A two-layer network reads the whole sequence and
classifies it from its last output. Training stops at convergence - five
consecutive minibatches classified 100% right - or at a limit.

The random steps are drawn from the other 127 directions, as in problem 2b,
whose class symbols are never among its random elements; ``--distractors all``
draws them from all 128, so that a later ``+e1`` looks like a positive
sequence's first step (a harder problem).

    python -m benchmarks.long_dependency --model gilr-lstm --length 1024
    python -m benchmarks.long_dependency --model lstm --length 1024
    python -m benchmarks.long_dependency --model gilr-lstm --length 1048576 --hidden 64 \\
        --checkpoint run.pt   # run again with the same arguments to resume

Writes ``results/long_dependency_<model>_<length>.json`` (settings, iterations,
wall time, the learning curve, device and versions) and a PNG of the curve beside it.
The curve has a row per iteration: the iteration, the minibatch's cross-entropy and
accuracy, the wall time so far, and how far apart the network put the two classes'
logits (`separation`, d'), which shows a run learning long before its accuracy does.
Settings other than the defaults are in the name, so that runs at other settings
keep their own files: ``..._all`` with ``--distractors all``, ``..._lr0.003`` where
the learning rate is not ``1e-3``, ``..._hlr0.000375`` where the weights that read a
hidden state have a rate of their own (``--hidden-learning-rate``), and
``..._eps1e-09`` where Adam's eps is not torch's ``1e-8``, as by default beyond 1,024
steps (see `scaled_epsilon`), in that order.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import _common
from cuscan.nn import GILRLSTM

P = 128  # input dimension
CONVERGED_AFTER = 5  # consecutive minibatches at 100% accuracy
ADAM_EPSILON = 1e-8  # torch's default, which the runs before ``adam_epsilon`` used
LEARNING_RATE = 1e-3  # Adam's
DISTRACTORS = ("others", "all")  # the directions the steps after the first are drawn from
SEPARATION_WINDOW = 25  # iterations the progress line's mean separation is over
SEPARATED = 2.0  # a mean separation taken to show the run learning (see `separated_at`)
# What a run is: a checkpoint resumes only with these, and records of runs are keyed by them.
SETTINGS = ("model", "length", "hidden", "batch_size", "learning_rate", "hidden_learning_rate",
            "seed", "distractors", "adam_epsilon")


def _check_distractors(distractors: str) -> None:
    if distractors not in DISTRACTORS:
        raise ValueError(f"`distractors` must be one of {DISTRACTORS}; got {distractors!r}")


def batch(length: int, size: int, generator: torch.Generator, device,
          distractors: str = "others") -> tuple:
    """A minibatch: one-hot inputs ``(length, size, P)`` and labels ``(size,)`` (0 or 1), drawn
    with ``generator``, which lives on ``device`` (a million steps of positions drawn on the host
    would take longer than a training step on a GPU). The steps after the first are drawn from
    the directions other than ``e1`` (``distractors="others"``) or from all (``"all"``)."""
    _check_distractors(distractors)
    signs = torch.randint(0, 2, (size,), generator=generator, device=device) * 2 - 1
    positions = torch.randint(1 if distractors == "others" else 0, P, (length, size),
                              generator=generator, device=device)
    positions[0] = 0
    inputs = torch.zeros(length, size, P, device=device)  # built where it is used
    inputs.scatter_(2, positions.unsqueeze(-1), 1.0)
    inputs[0, :, 0] = signs.float()
    return inputs, (signs > 0).float()


def scaled_epsilon(length: int) -> float:
    """An Adam ``eps`` for ``length`` steps: torch's ``1e-8`` up to 1,024 steps and a decade
    less per decade of length beyond (``1e-9`` at 8,192, ``1e-11`` at a million), so that the
    gradients of the weights that read the first step, which shrink as ``1 / length``, stay
    as far above it as at 1,024 steps (see `train`)."""
    return 10.0 ** (-8 - round(math.log10(max(length, 1024) / 1024)))


def run_name(model: str, length: int, distractors: str = "others",
             adam_epsilon: float = ADAM_EPSILON, learning_rate: float = LEARNING_RATE,
             hidden_learning_rate: float | None = None) -> str:
    """The stem of a run's files: its model and length, and its distractors, learning rates
    and Adam's ``eps`` where they are not the defaults (see the module doc)."""
    name = f"long_dependency_{model}_{length}"
    name += "" if distractors == "others" else f"_{distractors}"
    name += "" if learning_rate == LEARNING_RATE else f"_lr{learning_rate:g}"
    name += ("" if hidden_learning_rate in (None, learning_rate)
             else f"_hlr{hidden_learning_rate:g}")
    return name + ("" if adam_epsilon == ADAM_EPSILON else f"_eps{adam_epsilon:g}")


def chrono(size: int, length: int) -> torch.Tensor:
    """Gate biases ``log(u)``, ``u ~ U(1, length - 1)``: memories lasting up to ``length``
    steps from the start (Tallec & Ollivier 2018, "Can recurrent neural networks warp time?").
    With the usual zero-centred biases, gates near 0.5 forget the first step long before
    the last, and the gradient that would teach them to remember vanishes."""
    return torch.log(torch.empty(size).uniform_(1, max(length - 1, 2)))


class Classifier(torch.nn.Module):
    """Two recurrent layers and a linear unit reading the last output.

    Both recurrent models get the same chrono initialisation of their forget
    gates (and the GILR-LSTM of its surrogate's gate), with the input gate
    biased the other way.
    """

    def __init__(self, model: str, hidden: int, length: int, method: str = "auto"):
        super().__init__()
        if model == "gilr-lstm":
            self.recurrent = GILRLSTM(P, hidden, num_layers=2, method=method)
            with torch.no_grad():
                for layer in self.recurrent.layers:
                    layer.surrogate.linear.bias[:hidden] = chrono(hidden, length)
                    forget = chrono(hidden, length)  # gate order: forget, input, output, z
                    layer.inputs.bias[:hidden] = forget
                    layer.inputs.bias[hidden:2 * hidden] = -forget
        elif model == "lstm":
            self.recurrent = torch.nn.LSTM(P, hidden, num_layers=2)
            with torch.no_grad():
                for k in range(2):  # gate order: input, forget, cell, output
                    forget = chrono(hidden, length)
                    getattr(self.recurrent, f"bias_ih_l{k}")[:2 * hidden] = torch.cat(
                        [-forget, forget])
                    getattr(self.recurrent, f"bias_hh_l{k}")[:2 * hidden] = 0
        else:
            raise ValueError(f"`model` must be 'gilr-lstm' or 'lstm'; got {model!r}")
        self.head = torch.nn.Linear(hidden, 1)

    def hidden_weights(self) -> list:
        """The weight matrices that read a hidden state, ``hidden`` values summed into each
        output: the recurrent weights, the second layer's input weights and the head's.
        The rest read the one-hot inputs (the first layer's input weights), or are biases."""
        if isinstance(self.recurrent, GILRLSTM):
            first = self.recurrent.layers[0]
            reads_inputs = [first.surrogate.linear.weight, first.inputs.weight]
        else:
            reads_inputs = [self.recurrent.weight_ih_l0]
        return [weight for weight in self.parameters()
                if weight.ndim == 2 and all(weight is not other for other in reads_inputs)]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        output, _ = self.recurrent(inputs)
        return self.head(output[-1]).squeeze(-1)


def build(model: str, hidden: int, length: int, device, compiled: bool = False) -> tuple:
    """The `Classifier` on ``device``, and what runs it: itself, or with ``compiled`` its
    ``torch.compile`` (the GILR-LSTM's only)."""
    if compiled and model != "gilr-lstm":
        raise ValueError(f"only the GILR-LSTM runs compiled: torch.compile cannot trace "
                         f"torch.nn.LSTM (which cuDNN runs as one kernel); got model {model!r}")
    network = Classifier(model, hidden, length).to(device)
    return network, (torch.compile(network, fullgraph=True) if compiled else network)


def _saved(checkpoint: Path) -> dict:
    """A run's checkpoint, on the host, its record given the settings of the runs from before
    each was recorded: their distractors drawn from all directions, torch's ``eps`` for Adam,
    and one learning rate for all the weights."""
    # On the host: the callers' loads copy to the network's device, and a generator's state is
    # a host tensor whatever its device.
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    record = saved["record"]
    record.setdefault("distractors", "all")
    record.setdefault("adam_epsilon", ADAM_EPSILON)
    record.setdefault("hidden_learning_rate", record["learning_rate"])
    return saved


def load(checkpoint: Path, device) -> tuple:
    """The `Classifier` of a run's checkpoint, with its trained weights, on ``device``, and
    the run's record (settings, iterations, learning curve) as saved with it."""
    saved = _saved(checkpoint)
    record = saved["record"]
    network = Classifier(record["model"], record["hidden"], record["length"]).to(device)
    network.load_state_dict(saved["network"])
    return network, record


def separation(logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    """How far apart the network puts the two classes: the difference of the mean logits of
    the positive and the negative sequences over their pooled within-class standard
    deviation (the sensitivity index d'). It grows while the accuracy is still at chance:
    a network can order the classes well before its threshold sits between them. None for
    a minibatch of one class, or whose logits do not vary within each class."""
    # On the host: a minibatch of logits, where on a device each mask and mean below waits.
    logits, labels = logits.detach().double().cpu(), labels.cpu()
    positive, negative = logits[labels == 1], logits[labels == 0]
    if not len(positive) or not len(negative):
        return None
    spread = torch.cat([positive - positive.mean(), negative - negative.mean()])
    deviation = spread.pow(2).mean().sqrt().item()
    if not deviation > 0:
        return None
    return (positive.mean() - negative.mean()).item() / deviation


def step(forward, optimizer, inputs: torch.Tensor, labels: torch.Tensor) -> tuple:
    """One training iteration on a minibatch: the network (``forward``) on ``inputs``,
    backward, the optimizer's update; the loss and the accuracy, as floats, and the
    classes' `separation`."""
    logits = forward(inputs)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return (loss.item(), ((logits > 0).float() == labels).float().mean().item(),
            separation(logits, labels))


def train(model: str = "gilr-lstm", length: int = 1024, hidden: int = 512, batch_size: int = 16,
          learning_rate: float = LEARNING_RATE, max_iterations: int = 100_000,
          max_minutes: float | None = None, seed: int = 0, device: str = "cpu",
          checkpoint: Path | None = None, checkpoint_every: int = 100,
          progress: bool = True, compiled: bool = False, distractors: str = "others",
          adam_epsilon: float = ADAM_EPSILON, hidden_learning_rate: float | None = None) -> dict:
    """Train until convergence or a limit; return the run's record (see the module doc).

    With ``compiled``, the network runs through ``torch.compile`` (one graph, its
    elementwise operations fused; the same training up to rounding). Checkpoints hold
    the network's own parameters, so a run may be resumed compiled or not.

    ``adam_epsilon`` is the ``eps`` of Adam's update ``m / (sqrt(v) + eps)``. The
    gradients of the weights that read the first step shrink as ``1 / length``
    (the chrono initialisation lets a unit take in ``1 / u`` of each step, ``u``
    up to the length); once they are below ``eps`` Adam moves those weights by
    that fraction of its step. An ``eps`` scaled as ``1e-8 * 1024 / length``
    keeps the ratio of 1,024 steps (`scaled_epsilon` to a decade; see
    docs/long_dependency.md). The command line's default is `scaled_epsilon`;
    this function's is torch's, which `long_dependency_scaling` keeps so as to
    compare lengths at one ``eps``.

    ``hidden_learning_rate`` is Adam's rate for the weights that read a hidden state
    (`Classifier.hidden_weights`; by default ``learning_rate``), ``learning_rate``
    staying that of the first layer's input weights and the biases. Adam moves every
    weight by about its rate, whatever its gradient, so an output that sums ``hidden``
    of them moves up to ``hidden`` times as far, where their steps agree: a rate that
    suits 64 units can be too high for 512. Scaling the rate of those weights alone as
    ``1 / hidden`` (as in Yang et al. 2021, "Tuning Large Neural Networks via Zero-Shot
    Hyperparameter Transfer") keeps the rest at the rate that suits the inputs.
    """
    _check_distractors(distractors)  # before a checkpoint's settings are compared with it
    torch.manual_seed(seed)
    generator = torch.Generator(device).manual_seed(seed)
    network, forward = build(model, hidden, length, device, compiled)
    if not adam_epsilon > 0:
        raise ValueError(f"`adam_epsilon` must be positive; got {adam_epsilon!r}")
    if hidden_learning_rate is None:
        hidden_learning_rate = learning_rate
    if not hidden_learning_rate > 0:
        raise ValueError(f"`hidden_learning_rate` must be positive or None; "
                         f"got {hidden_learning_rate!r}")
    # One group where the rates agree, as in the checkpoints from before there were two.
    reads_hidden = network.hidden_weights() if hidden_learning_rate != learning_rate else []
    rest = [weight for weight in network.parameters()
            if all(weight is not other for other in reads_hidden)]
    optimizer = torch.optim.Adam(
        [{"params": rest}] + ([{"params": reads_hidden, "lr": hidden_learning_rate}]
                              if reads_hidden else []),
        lr=learning_rate, eps=adam_epsilon)
    record = {"model": model, "length": length, "hidden": hidden, "batch_size": batch_size,
              "learning_rate": learning_rate, "hidden_learning_rate": hidden_learning_rate,
              "seed": seed, "distractors": distractors, "adam_epsilon": adam_epsilon,
              "iterations": 0, "streak": 0,
              "converged": False, "wall_time_s": 0.0, "curve": []}
    if checkpoint is not None and checkpoint.exists():
        saved = _saved(checkpoint)
        # The optimizer's state holds its own learning rates and epsilon: resuming with other
        # settings would silently train on with the saved ones.
        differ = [f"{name} {saved['record'][name]!r} (given {record[name]!r})"
                  for name in SETTINGS if saved["record"][name] != record[name]]
        if differ:
            raise ValueError(f"checkpoint {checkpoint} was made with other settings: "
                             f"{', '.join(differ)}; resume with its settings or start "
                             "another checkpoint")
        network.load_state_dict(saved["network"])
        optimizer.load_state_dict(saved["optimizer"])
        try:
            generator.set_state(saved["generator"])
        except RuntimeError as error:  # a CUDA generator's state is not a CPU one's
            raise ValueError(f"checkpoint {checkpoint} was made on another kind of device "
                             f"than {device!r} (its minibatch generator's state does not fit): "
                             "resume it on the kind it was made on") from error
        record = saved["record"]
    record["compiled"] = compiled  # of the last stretch of the run, for its timings
    start = time.perf_counter() - record["wall_time_s"]
    deadline = None if max_minutes is None else time.perf_counter() + 60 * max_minutes
    while not record["converged"] and record["iterations"] < max_iterations:
        loss, accuracy, apart = step(forward, optimizer,
                                     *batch(length, batch_size, generator, device, distractors))
        record["iterations"] += 1
        record["streak"] = record["streak"] + 1 if accuracy == 1.0 else 0
        record["converged"] = record["streak"] >= CONVERGED_AFTER
        record["wall_time_s"] = time.perf_counter() - start
        record["curve"].append([record["iterations"], round(loss, 6), accuracy,
                                round(record["wall_time_s"], 3),
                                None if apart is None else round(apart, 4)])
        if progress:
            _progress(record, max_iterations)
        stop = deadline is not None and time.perf_counter() > deadline
        last = stop or record["converged"] or record["iterations"] >= max_iterations
        if checkpoint is not None and (last or record["iterations"] % checkpoint_every == 0):
            torch.save({"network": network.state_dict(), "optimizer": optimizer.state_dict(),
                        "generator": generator.get_state(), "record": record}, checkpoint)
        if stop:
            break
    if progress:
        print(file=sys.stderr)
    return record


def _separations(curve: list) -> list:
    """The `separation` of each row of a learning curve; None for rows from before it was
    recorded (a run resumed from an older checkpoint)."""
    return [row[4] if len(row) > 4 else None for row in curve]


def mean_separation(curve: list) -> float | None:
    """The mean `separation` of the rows of a learning curve that have one; None if none has."""
    values = [value for value in _separations(curve) if value is not None]
    return float(np.mean(values)) if values else None


def separated_at(curve: list, threshold: float = SEPARATED,
                 window: int = SEPARATION_WINDOW) -> int | None:
    """The first iteration of a learning curve at which the mean `separation` of the last
    ``window`` iterations (those that have one) reached ``threshold``; None if it never did."""
    for end in range(window, len(curve) + 1):
        mean = mean_separation(curve[end - window:end])
        if mean is not None and mean >= threshold:
            return curve[end - 1][0]
    return None


def _progress(record: dict, total: int, width: int = 30) -> None:
    done = int(width * record["iterations"] / total)
    _, loss, accuracy, elapsed = record["curve"][-1][:4]
    recent = mean_separation(record["curve"][-SEPARATION_WINDOW:])
    apart = "" if recent is None else f"  d' {recent:.1f}"
    print(f"\r[{'#' * done}{'.' * (width - done)}] {record['iterations']} it  loss {loss:.4f}  "
          f"acc {accuracy:.2f}{apart}  streak {record['streak']}/{CONVERGED_AFTER}  "
          f"{elapsed:.0f} s", end="", file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def plot(record: dict, path: Path) -> None:
    """The learning curve (loss, accuracy and the classes' `separation` per iteration) as a
    PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    iterations = [row[0] for row in record["curve"]]
    window = max(1, min(50, len(iterations) // 20))  # a minibatch of 4 is right 0 to 4 times
    figure, panels = plt.subplots(3, 1, sharex=True, figsize=(7, 7))
    rows = ((1, "cross-entropy"), (2, "minibatch accuracy"), (4, "separation d'"))
    for axes, (column, label) in zip(panels, rows, strict=True):
        values = np.array([np.nan if len(row) <= column or row[column] is None else row[column]
                           for row in record["curve"]], dtype=float)
        axes.plot(iterations, values, color="0.75", linewidth=0.5)
        if len(values) >= window:  # a running mean that skips the iterations without a value
            present = np.convolve(~np.isnan(values), np.ones(window), mode="valid")
            total = np.convolve(np.nan_to_num(values), np.ones(window), mode="valid")
            with np.errstate(invalid="ignore", divide="ignore"):
                axes.plot(iterations[window - 1:], total / present, label=f"mean of {window}")
        axes.set_ylabel(label)
    panels[2].axhline(0, color="0.5", linewidth=0.5)
    panels[1].legend(loc="upper left")
    panels[2].set_xlabel("iteration")
    status = "converged" if record["converged"] else "not converged"
    panels[0].set_title(f"{record['model']}, length {record['length']:,}: {status} after "
                        f"{record['iterations']} iterations, {_duration(record['wall_time_s'])}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["gilr-lstm", "lstm"], default="gilr-lstm")
    parser.add_argument("--length", type=_common.positive(int), default=1024)
    parser.add_argument("--hidden", type=_common.positive(int), default=512)
    parser.add_argument("--batch-size", type=_common.positive(int), default=16)
    parser.add_argument("--learning-rate", type=_common.positive(float), default=LEARNING_RATE)
    parser.add_argument("--hidden-learning-rate", type=_common.positive(float), default=None,
                        help="Adam's rate for the weights that read a hidden state (the "
                        "recurrent weights, the second layer's input weights, the head); "
                        "default: --learning-rate")
    parser.add_argument("--max-iterations", type=_common.positive(int), default=100_000)
    parser.add_argument("--max-minutes", type=_common.positive(float), default=None,
                        help="stop (and checkpoint) after this long; run again to resume")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--compile", action="store_true",
                        help="run the GILR-LSTM through torch.compile (the first iteration "
                        "compiles it)")
    parser.add_argument("--distractors", choices=DISTRACTORS, default="others",
                        help="draw the steps after the first from the directions other than "
                        "e1 (as problem 2b), or from all")
    parser.add_argument("--adam-epsilon", type=_common.positive(float), default=None,
                        help="Adam's eps; the first step's gradients shrink as 1 / length, "
                        "and below eps Adam hardly moves the weights that read it (default: "
                        f"{ADAM_EPSILON:g}, torch's, up to 1,024 steps, a decade less per decade "
                        f"of length beyond: {scaled_epsilon(8192):g} at 8,192, "
                        f"{scaled_epsilon(2**20):g} at a million)")
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    args = parser.parse_args(argv)
    if args.adam_epsilon is None:
        args.adam_epsilon = scaled_epsilon(args.length)
    record = train(args.model, args.length, args.hidden, args.batch_size, args.learning_rate,
                   args.max_iterations, args.max_minutes, args.seed, args.device,
                   args.checkpoint, compiled=args.compile, distractors=args.distractors,
                   adam_epsilon=args.adam_epsilon,
                   hidden_learning_rate=args.hidden_learning_rate)
    record["device"] = _common.torch_device_name(args.device)
    record["environment"] = {**_common.environment(), "torch": torch.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    name = run_name(args.model, args.length, args.distractors, args.adam_epsilon,
                    args.learning_rate, args.hidden_learning_rate)
    (args.out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    try:
        plot(record, args.out / f"{name}.png")
    except ImportError:
        print("matplotlib is missing: no plot (pip install 'cuscan[docs]')", file=sys.stderr)
    status = "converged" if record["converged"] else "did not converge"
    apart = separated_at(record["curve"])
    apart = (f"the classes {SEPARATED:g} deviations apart (d', the mean of "
             f"{SEPARATION_WINDOW}) from iteration {apart}" if apart is not None
             else f"d' never {SEPARATED:g} (the mean of {SEPARATION_WINDOW})")
    print(f"{args.model} at length {args.length:,}: {status} after {record['iterations']} "
          f"iterations in {record['wall_time_s']:.1f} s; {apart}")
    return record


if __name__ == "__main__":
    main()
