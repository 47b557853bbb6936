"""The paper's Table 2: training throughput of linear surrogate RNNs, parallel over serial.

Two stacked layers of 256 hidden units, input size 4, b * T = 65,536 steps per
minibatch for T in {16, 256, 4096, 65536}: one training step (forward,
backward) of SRU, QRNN (filter widths 2 and 10) and GILR-LSTM with
``method="parallel"`` and ``method="serial"``, and of ``torch.nn.LSTM`` (cuDNN
on a GPU) of the same size. Reports events (sequence steps) per second, the
parallel/serial ratio next to the paper's, and each model against the LSTM.
Times are medians after warm-up, by CUDA events on a GPU.
Paper (K80, T = 65,536): 9.21x, 6.68x, 2.05x, 1.41x.

    python -m benchmarks.table2 [--device cuda] [--repeats N] [--quick]

``--quick`` shrinks the sizes (b * T = 4,096, 32 hidden units) to check the
script on a CPU. Writes ``results/table2_<device>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks import _common
from cuscan.nn import GILRLSTM, QRNN, SRU

LENGTHS = [16, 256, 4096, 65536]
MODELS = {
    "SRU": lambda m, h, method: SRU(m, h, num_layers=2, method=method),
    "QRNN (filter 2)": lambda m, h, method: QRNN(m, h, num_layers=2, window=2, method=method),
    "QRNN (filter 10)": lambda m, h, method: QRNN(m, h, num_layers=2, window=10, method=method),
    "GILR-LSTM": lambda m, h, method: GILRLSTM(m, h, num_layers=2, method=method),
}
PAPER = {  # Table 2 of Martin & Cundy (2018), K80: parallel over serial
    16: [0.28, 0.38, 0.78, 0.61], 256: [0.84, 0.86, 0.99, 0.91],
    4096: [1.38, 1.18, 1.05, 0.98], 65536: [9.21, 6.68, 2.05, 1.41],
}


def step_time(model, inputs, repeats: int, device: torch.device) -> float:
    """Median seconds of one forward + backward pass (gradients cleared each time)."""

    def step():
        model.zero_grad(set_to_none=True)
        output, _ = model(inputs)
        output.sum().backward()

    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        else:
            begin = time.perf_counter()
            step()
            times.append(time.perf_counter() - begin)
    return statistics.median(times)


def run(device: torch.device, repeats: int, quick: bool) -> dict:
    events, hidden, inputs_size = (4096, 32, 4) if quick else (65536, 256, 4)
    lengths = [n for n in LENGTHS if n <= events]
    rows = []
    for length in lengths:
        torch.manual_seed(0)
        batch = events // length
        inputs = torch.randn(length, batch, inputs_size, device=device)
        lstm = torch.nn.LSTM(inputs_size, hidden, num_layers=2).to(device)
        row = {"length": length, "batch": batch, "lstm_events_per_s": None}
        try:
            row["lstm_events_per_s"] = events / step_time(lstm, inputs, repeats, device)
        except RuntimeError as error:  # cuDNN refuses some shapes: CUDNN_STATUS_NOT_SUPPORTED
            if "cuDNN" not in str(error):
                raise
            row["lstm_error"] = str(error).splitlines()[0]
        for index, (name, make) in enumerate(MODELS.items()):
            rates = {}
            for method in ("parallel", "serial"):
                model = make(inputs_size, hidden, method).to(device)
                rates[method] = events / step_time(model, inputs, repeats, device)
            row[name] = {"parallel_events_per_s": rates["parallel"],
                         "serial_events_per_s": rates["serial"],
                         "speedup": rates["parallel"] / rates["serial"],
                         "paper_speedup": PAPER[length][index],
                         "parallel_over_lstm": (rates["parallel"] / row["lstm_events_per_s"]
                                                if row["lstm_events_per_s"] else None)}
        rows.append(row)
        print(table({"rows": [row]}).splitlines()[-1], flush=True)
    environment = {**_common.environment(), "torch": torch.__version__,
                   "device": _common.torch_device_name(device)}
    if device.type == "cuda":
        import cupy

        environment["cupy"] = cupy.__version__
        environment["cuda_runtime"] = str(cupy.cuda.runtime.runtimeGetVersion())
        environment["driver"] = str(cupy.cuda.runtime.driverGetVersion())
    return {"benchmark": "table2", "environment": environment, "events": events,
            "hidden": hidden, "input_size": inputs_size, "repeats": repeats, "quick": quick,
            "rows": rows}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(result: dict) -> str:
    names = list(MODELS)
    lines = ["| T | b | " + " | ".join(f"{n}: parallel/serial (paper) | {n}: / LSTM"
                                        for n in names) + " | LSTM events/s |",
             "|---:|---:|" + "---:|---:|" * len(names) + "---:|"]
    for row in result["rows"]:
        cells = [f"{row[n]['speedup']:.2f}x ({row[n]['paper_speedup']}x) | "
                 f"{_ratio(row[n]['parallel_over_lstm'])}" for n in names]
        lstm = row["lstm_events_per_s"]
        lines.append(f"| {row['length']} | {row['batch']} | " + " | ".join(cells)
                     + (f" | {lstm:.3g} |" if lstm else " | cuDNN refused |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=_common.positive(int), default=10)
    parser.add_argument("--quick", action="store_true", help="small sizes, to check on a CPU")
    parser.add_argument("--out", default=str(_common.RESULTS))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    result = run(device, args.repeats, args.quick)
    name = f"table2_{device.type}" + ("_quick" if args.quick else "")
    print(f"{result['environment']['device']}, commit {result['environment']['commit']}")
    text = table(result)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{name}.md").write_text(
        f"# Table 2 on {result['environment']['device']}\n\ncommit "
        f"{result['environment']['commit']}, torch {torch.__version__}\n\n{text}\n")
    return result


if __name__ == "__main__":
    main()
