"""The paper's Table 1 on a CUDA GPU: parallel over serial kernel speedup.

For T in {16, 256, 4096, 65536} and m in {4, 32, 128} features, batch 1,
float32, time-major (T, m) as in the paper, and again time-contiguous (m, T)
along the last axis: the serial kernel (one thread per channel) and the
chunked parallel kernels, timed with CUDA events after warm-up (median of many
repeats), with the achieved bandwidth (bytes that must move / time) next to a
device-to-device copy of the same bytes measured in the same run, and what
method="auto" picks. The methods and the copy are timed in turn, call by call.
Paper (K80, T = 65536): 38.5x, 41.8x, 17.5x.

    python -m benchmarks.table1 [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np

import cuscan
from benchmarks._common import commit, positive

LENGTHS = [16, 256, 4096, 65536]
FEATURES = [4, 32, 128]
PAPER = {  # Table 1 of Martin & Cundy (2018), K80
    (16, 4): 0.06, (16, 32): 0.06, (16, 128): 0.05,
    (256, 4): 0.22, (256, 32): 0.22, (256, 128): 0.86,
    (4096, 4): 1.02, (4096, 32): 2.94, (4096, 128): 3.36,
    (65536, 4): 38.5, (65536, 32): 41.8, (65536, 128): 17.5,
}


def gpu_time(cupy, function, repeats: int) -> float:
    """Median seconds of ``function`` over ``repeats`` calls, by CUDA events."""
    return gpu_times(cupy, {None: function}, repeats)[None]


def gpu_times(cupy, functions: dict, repeats: int) -> dict:
    """Median seconds of each of ``functions`` (label -> function) over ``repeats`` calls,
    by CUDA events, taking them in turn call by call, so that a host or device whose speed
    drifts during the run slows all alike; by label."""
    for _ in range(3):
        for function in functions.values():
            function()
    times = {label: [] for label in functions}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(repeats):
        for label, function in functions.items():
            start.record()
            function()
            stop.record()
            stop.synchronize()
            times[label].append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return {label: float(np.median(t)) for label, t in times.items()}


def device_description(cupy) -> dict[str, str]:
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    return {
        "device": props["name"].decode(),
        "multiprocessors": str(props["multiProcessorCount"]),
        "driver": str(cupy.cuda.runtime.driverGetVersion()),
        "cuda_runtime": str(cupy.cuda.runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "numpy": np.__version__,
    }


def run(repeats: int) -> dict:
    import cupy

    rows = []
    for layout in ("time-major", "time-contiguous"):
        for length, features in itertools.product(LENGTHS, FEATURES):
            rng = np.random.default_rng(0)
            shape, axis = ((length, features), 0) if layout == "time-major" else (
                (features, length), -1)
            decays = cupy.asarray(rng.uniform(0.5, 1.0, shape).astype(np.float32))
            impulses = cupy.asarray(rng.standard_normal(shape).astype(np.float32))
            moved = 3 * decays.nbytes  # read decays and impulses, write h
            source = cupy.empty(moved // 2, np.uint8)
            target = cupy.empty_like(source)
            times = gpu_times(cupy, {
                **{m: lambda m=m, a=decays, x=impulses, axis=axis:
                   cuscan.linear_recurrence(a, x, axis=axis, method=m)
                   for m in ("serial", "parallel", "auto")},
                "copy": lambda s=source, t=target: t.__setitem__(Ellipsis, s)}, repeats)
            copy = times.pop("copy")
            best = min(times["serial"], times["parallel"])
            rows.append({
                "layout": layout, "length": length, "features": features, "dtype": "float32",
                **{f"{m}_s": t for m, t in times.items()},
                "speedup": times["serial"] / times["parallel"],
                "paper_speedup": PAPER[(length, features)],
                "auto_over_best": times["auto"] / best,
                "bytes": moved, "parallel_GBps": moved / times["parallel"] / 1e9,
                "copy_GBps": 2 * source.nbytes / copy / 1e9,
            })
    return {"benchmark": "table1", "commit": commit(), "environment": device_description(cupy),
            "repeats": repeats, "rows": rows}


def table(result: dict) -> str:
    lines = ["| layout | T | m | serial | parallel | speedup | paper (K80) | auto / best | "
             "parallel GB/s | copy GB/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(
            f"| {r.get('layout', 'time-major')} | {r['length']} | {r['features']} | "
            f"{r['serial_s'] * 1e6:.1f} us | "
            f"{r['parallel_s'] * 1e6:.1f} us | {r['speedup']:.2f}x | {r['paper_speedup']}x | "
            f"{r['auto_over_best']:.2f} | {r['parallel_GBps']:.1f} | {r['copy_GBps']:.1f} |")
    return "\n".join(lines)


def command_line(description: str, run, table, repeats: int) -> None:
    """A GPU benchmark's command line: ``--repeats`` and ``--json``; prints the device, the
    commit and the versions, then ``table(run(...))``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=positive(int), default=repeats)
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    result = run(args.repeats)
    print(f"{result['environment']['device']}, commit {result['commit']}")
    print(", ".join(f"{name} {value}" for name, value in result["environment"].items()
                    if name != "device"))
    print(table(result))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=2)


def main() -> None:
    command_line(__doc__.splitlines()[0], run, table, repeats=50)


if __name__ == "__main__":
    main()
