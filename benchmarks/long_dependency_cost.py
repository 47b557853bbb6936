"""What a training iteration of the long-dependency experiment costs: time and memory.

Before a long run of ``long_dependency.py`` (the million-step one above all),
this says which minibatch sizes fit the device and how long an iteration takes,
eager and through ``torch.compile``:

    python -m benchmarks.long_dependency_cost --length 1048576 --hidden 64 --batch-sizes 4,8,16

Per minibatch size and mode, each from a fresh network: the median time of an
iteration (minibatch drawn, forward, backward, Adam's update) after warm-up
iterations (the first compiles); the tensors an eager forward pass saves for
the backward pass, in bytes per step of one sequence; and on CUDA the most
memory the allocator held during the iterations. A setting that runs out of
device memory is recorded as such, and the next one runs. The rows are added
to ``results/long_dependency_cost_<device>.json``, replacing any with the same
settings, and all are printed as a table. With ``--choose`` a last line names the
setting a long run should take (see `choose`), for scripts to read. With ``--saved``
nothing is measured: the rows saved for the device and the settings given are
printed, and chosen among (as for a run resumed with its checkpoint's minibatch).
With ``--reuse`` only the settings given that the device has no row for are
measured, and the choice is among all the settings given, saved or measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks import _common, long_dependency

SETTINGS = ("model", "length", "hidden", "batch_size", "compiled")
MODES = {"eager": False, "compiled": True}


def saved_bytes(network, inputs: torch.Tensor) -> int:
    """The bytes of the tensors ``network``'s forward pass on ``inputs`` saves for its
    backward pass, each storage counted once (the activations held between the two)."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[(storage.device, storage.data_ptr())] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        network(inputs)
    return sum(storages.values())


def measure(model: str, length: int, hidden: int, batch_size: int, compiled: bool,
            device: str, warmup: int, iterations: int) -> dict:
    """One row: the settings and what an iteration with them costs (see the module doc)."""
    row = dict(zip(SETTINGS, (model, length, hidden, batch_size, compiled), strict=True))
    cuda = device.startswith("cuda")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    try:
        torch.manual_seed(0)
        generator = torch.Generator(device).manual_seed(0)
        network, forward = long_dependency.build(model, hidden, length, device, compiled)
        optimizer = torch.optim.Adam(network.parameters())
        if not compiled:
            inputs, _ = long_dependency.batch(length, batch_size, generator, device)
            row["saved_bytes_per_step"] = round(
                saved_bytes(network, inputs) / (length * batch_size), 1)
            del inputs
        def iteration():
            long_dependency.step(forward, optimizer,
                                 *long_dependency.batch(length, batch_size, generator, device))

        for _ in range(warmup):
            iteration()
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        times = []
        for _ in range(iterations):
            sync()
            start = time.perf_counter()
            iteration()
            sync()
            times.append(time.perf_counter() - start)
        row["ms_per_iteration"] = round(1e3 * statistics.median(times), 2)
        row["times_ms"] = [round(1e3 * t, 2) for t in times]
        if cuda:
            row["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    except (torch.OutOfMemoryError, MemoryError):  # MemoryError: CuPy's, or the host's
        row["error"] = "out of memory"
    return row


def choose(rows: list[dict]) -> tuple[int, bool] | None:
    """The minibatch size and mode (compiled or not) a long run should take, from the
    rows of one measurement: the largest minibatch that ran in either mode (the larger
    ones learned more reliably on the CPU), in the quicker of its modes that ran; None
    when no setting ran."""
    ran = [row for row in rows if "error" not in row]
    if not ran:
        return None
    largest = max(row["batch_size"] for row in ran)
    quickest = min((row for row in ran if row["batch_size"] == largest),
                   key=lambda row: row["ms_per_iteration"])
    return largest, quickest["compiled"]


def table(rows: list[dict]) -> str:
    """Markdown: a line per setting."""
    lines = ["| model | length | hidden | batch | mode | ms / iteration | peak memory (GiB) "
             "| saved bytes / step |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for row in sorted(rows, key=lambda row: tuple(row[name] for name in SETTINGS)):
        mode = "compiled" if row["compiled"] else "eager"
        if "error" in row:
            cells = [row["error"], "-"]
        else:
            peak = row.get("peak_memory_bytes")
            cells = [f"{row['ms_per_iteration']:.1f}",
                     "-" if peak is None else f"{peak / 2**30:.1f}"]
        saved = row.get("saved_bytes_per_step")
        lines.append(f"| {row['model']} | {row['length']:,} | {row['hidden']} | "
                     f"{row['batch_size']} | {mode} | " + " | ".join(cells) + " | "
                     + ("-" if saved is None else f"{saved:,.0f}") + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["gilr-lstm", "lstm"], default="gilr-lstm")
    parser.add_argument("--length", type=_common.positive(int), default=1_048_576)
    parser.add_argument("--hidden", type=_common.positive(int), default=64)
    parser.add_argument("--batch-sizes", type=_common.listed(_common.positive(int)),
                        default=[4, 8, 16])
    parser.add_argument("--modes", type=_common.listed(str), default=list(MODES),
                        help="comma-separated: eager, compiled (the GILR-LSTM only)")
    parser.add_argument("--warmup", type=_common.positive(int), default=2)
    parser.add_argument("--iterations", type=_common.positive(int), default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    parser.add_argument("--choose", action="store_true",
                        help="end with a line 'choice: BATCH eager|compiled' (or 'choice: "
                        "none'), the setting of those measured that a long run should take")
    parser.add_argument("--saved", action="store_true",
                        help="measure nothing: print the rows saved for this device with these "
                        "settings (and with --choose the choice among them)")
    parser.add_argument("--reuse", action="store_true",
                        help="measure only the settings this device has no saved row for, and "
                        "choose among all those given")
    args = parser.parse_args(argv)
    unknown = [mode for mode in args.modes if mode not in MODES]
    if unknown:
        parser.error(f"--modes must be among {', '.join(MODES)}; got {unknown[0]!r}")
    if args.model != "gilr-lstm" and "compiled" in args.modes:
        parser.error(f"only the GILR-LSTM runs compiled; got --model {args.model} with "
                     "--modes compiled (use --modes eager)")
    device_name = _common.torch_device_name(args.device)
    path = args.out / f"long_dependency_cost_{device_name.replace(' ', '-')}.json"
    saved = json.loads(path.read_text()) if path.exists() else {"rows": []}
    wanted = {"model": [args.model], "length": [args.length], "hidden": [args.hidden],
              "batch_size": args.batch_sizes, "compiled": [MODES[mode] for mode in args.modes]}
    given = [row for row in saved["rows"]
             if all(row[name] in values for name, values in wanted.items())]
    if args.saved:
        return _report(given, given, args.choose)
    known = {(row["batch_size"], row["compiled"]) for row in given} if args.reuse else set()
    environment = {**_common.environment(), "torch": torch.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    measured = [row for row in given if (row["batch_size"], row["compiled"]) in known]
    for batch_size in args.batch_sizes:
        for mode in args.modes:
            if (batch_size, MODES[mode]) in known:
                print(f"batch {batch_size}, {mode}: saved", flush=True)
                continue
            row = measure(args.model, args.length, args.hidden, batch_size, MODES[mode],
                          args.device, args.warmup, args.iterations)
            gc.collect()  # this setting's network and tensors, before the next one's
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
            row["environment"] = environment
            measured.append(row)
            saved["rows"] = _common.replaced(saved["rows"], row, SETTINGS)
            saved["device"] = device_name
            path.write_text(json.dumps(saved, indent=1) + "\n")
            outcome = row["error"] if "error" in row else f"{row['ms_per_iteration']:.1f} ms"
            print(f"batch {batch_size}, {mode}: {outcome}", flush=True)
    return _report(saved["rows"], measured, args.choose)


def _report(rows: list[dict], candidates: list[dict], choosing: bool) -> list[dict]:
    """Print ``rows`` as a table and, when ``choosing``, the choice among ``candidates``."""
    print(table(rows))
    if choosing:
        choice = choose(candidates)
        print("choice: " + ("none" if choice is None else
                            f"{choice[0]} {'compiled' if choice[1] else 'eager'}"))
    return rows


if __name__ == "__main__":
    main()
