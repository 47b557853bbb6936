"""What every benchmark records beside its numbers: commit, machine and versions."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import time
import tracemalloc
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def commit() -> str:
    """The checked-out commit, with ``-dirty`` when the tree has changes outside the
    records (``results/``, which other benchmarks write); or ``$CUSCAN_COMMIT``, for a
    copy of the tree without its history (a GPU machine)."""
    if os.environ.get("CUSCAN_COMMIT"):
        return os.environ["CUSCAN_COMMIT"]
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", f":(exclude){RESULTS.relative_to(root).as_posix()}"],
                               cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty.strip() else "")


# Environment variables that set how many threads NumPy's BLAS and OpenMP run.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def environment() -> dict[str, str]:
    """Machine and library versions, and the thread settings the run was given."""
    import scipy

    return {
        "commit": commit(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpu_count": str(os.cpu_count()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "date": time.strftime("%Y-%m-%d"),
        **{name: os.environ[name] for name in _THREAD_VARIABLES if name in os.environ},
    }


def torch_device_name(device) -> str:
    """What a record calls a torch ``device`` (a string or a ``torch.device``): a CUDA
    device's name, or "cpu"."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def without_options(doc: str) -> None:
    """The command line of a benchmark that takes no options: ``--help`` prints ``doc`` (the
    module's docstring) and exits, and any argument is refused with a usage message, before
    the benchmark runs and rewrites its record."""
    argparse.ArgumentParser(description=doc,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()


def listed(kind):
    """An argparse ``type``: comma-separated items, each converted by ``kind``."""
    def parse(text):
        return [kind(item) for item in text.split(",")]

    parse.__name__ = f"comma-separated {kind.__name__}"  # argparse names it in errors
    return parse


def positive(kind):
    """An argparse ``type``: a number converted by ``kind`` (int or float) above zero, as a
    size, a count, a rate or a duration is."""
    def parse(text):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}; got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"  # argparse names it in errors
    return parse


def replaced(rows: list[dict], row: dict, names) -> list[dict]:
    """``rows`` without those that agree with ``row`` on each of ``names``, then ``row``: a
    record's rows with a new one in place of any earlier one of the same settings."""
    def key(entry):
        return tuple(entry[name] for name in names)

    return [*(old for old in rows if key(old) != key(row)), row]


def best_time(function, repeats: int) -> float:
    """Minimum wall time of ``repeats`` calls after one warm-up, in seconds."""
    function()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def alternated(function, module, name: str, values: dict, repeats: int, rounds: int = 3) -> dict:
    """Best times of ``function`` (``best_time``) with ``module.<name>`` set to each of
    ``values`` (label -> value) in turn, ``rounds`` times over, so that a machine whose load
    drifts slows all alike; by label. The attribute is restored after."""
    return alternated_settings(function, {label: {(module, name): value}
                                          for label, value in values.items()}, repeats, rounds)


def against_chosen(row: dict, calls: dict, module, name: str, values, repeats: int) -> str:
    """Fill ``row`` with the best times of each of ``calls`` (a label -> a function) with
    ``module.<name>`` set to each of ``values`` in turn (`alternated`), as
    ``row["<label>_s"][str(value)]``; return those times over the times at the value the
    attribute has (the chosen one), a table's cells: for each value, each call's ratio."""
    chosen = getattr(module, name)
    for label, call in calls.items():
        best = alternated(call, module, name, {value: value for value in values}, repeats)
        row[f"{label}_s"] = {str(value): best[value] for value in values}
    return " ".join(
        " ".join(f"{row[f'{label}_s'][str(value)] / row[f'{label}_s'][str(chosen)]:>5.2f}"
                 for label in calls) for value in values)


def settings_table(shapes, dtypes, make_calls, module, name: str, values, repeats_of) -> list:
    """`against_chosen` on each of ``shapes`` in each of ``dtypes``, ``make_calls(shape,
    dtype)`` giving the calls (label -> function) and ``repeats_of(shape)`` their repeats;
    printed as a table (each value's ratios, then the chosen value's times in milliseconds).
    Returns the rows."""
    chosen = getattr(module, name)
    rows, names = [], None
    for shape in shapes:
        for dtype in dtypes:
            calls = make_calls(shape, dtype)
            if names is None:
                names = list(calls)
                width = 6 * len(names) - 1
                print(f"\ntime / time with {name} = {chosen}: {', '.join(names)} for each value")
                print(f"{'shape':>14} {'dtype':>10} "
                      + " ".join(f"{v!s:>{width}}" for v in values) + "   chosen (ms)")
            row = {"shape": list(shape), "dtype": np.dtype(dtype).name}
            cells = against_chosen(row, calls, module, name, values, repeats_of(shape))
            rows.append(row)
            times = " ".join(f"{row[f'{n}_s'][str(chosen)] * 1e3:.2f}" for n in names)
            print(f"{'x'.join(map(str, shape)):>14} {row['dtype']:>10} {cells}   {times}",
                  flush=True)
    return rows


def alternated_settings(function, settings: dict, repeats: int, rounds: int = 3) -> dict:
    """`alternated` with several attributes set at once: ``settings`` maps a label to
    ``{(module, name): value}`` (`assigned`)."""
    best = dict.fromkeys(settings, float("inf"))
    for _ in range(rounds):
        for label, setting in settings.items():
            with assigned(setting):
                best[label] = min(best[label], best_time(function, repeats))
    return best


def alternated_calls(functions: dict, repeats: int, rounds: int = 3) -> dict:
    """Best times (``best_time``) of each of ``functions`` (label -> function) in turn,
    ``rounds`` times over, as `alternated` times settings; by label."""
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for label, function in functions.items():
            best[label] = min(best[label], best_time(function, repeats))
    return best


@contextlib.contextmanager
def assigned(values: dict):
    """Within the block, ``module.<name>`` set to each of ``values`` (``{(module, name):
    value}``); restored after."""
    saved = {key: getattr(*key) for key in values}
    try:
        for (module, name), value in values.items():
            setattr(module, name, value)
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def peak_memory(function) -> int:
    """The most bytes ``function()`` holds at once, what it returns included (tracemalloc,
    which NumPy reports to)."""
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def peak_memories(function, module, name: str, values: dict) -> dict:
    """`peak_memory` of ``function`` with ``module.<name>`` set to each of ``values``
    (label -> value) in turn; by label. The attribute is restored after."""
    saved = getattr(module, name)
    try:
        peaks = {}
        for label, value in values.items():
            setattr(module, name, value)
            peaks[label] = peak_memory(function)
        return peaks
    finally:
        setattr(module, name, saved)


def write(name: str, payload: dict) -> Path:
    """Write ``payload`` as ``results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
