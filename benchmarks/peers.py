"""cuscan against the scans a user could pick instead, side by side on one GPU.

For each shape, dtype and direction, times every contestant on the same data and reports the
rate at which it moves the bytes the recurrence must move (forward: read the decays and the
impulses, write the output; backward: read the output's gradient, the decays and the output,
write both gradients), next to a device-to-device copy of as many bytes measured in the same
run: the bandwidth limit. A time is the median over batches of calls made back to back, as a
program makes them, from an idle device to the last call's result, taken with CUDA events after
warm-up and divided by the calls in the batch (about 20 ms of calls, so that the host's work
before the first launch counts little); where the host takes longer to make a call than the
device to run it, that is the host's time. Each contestant's batches and the copy's are taken in
turn (a device whose clock drifts slows both alike), and each call runs on the next of several
copies of the inputs that together exceed four times the L2 cache (at most 256: the smallest
calls' inputs stay within it). Beside it, ``latency_s`` is the median time of one call alone,
from an idle device to its result: the host's time and the device's added. Each contestant's
result is compared with cuscan's in float64 on the first channels; a contestant that cannot take
a shape, dtype or direction is reported with the reason, and one that fails with its error.

Contestants:

- ``cuscan``: ``linear_recurrence`` and ``linear_recurrence_vjp`` on CuPy arrays;
  ``cuscan (torch)``: the same through the PyTorch adapter, backward by autograd;
  ``cuscan serial``: ``method="serial"``, the plain serial kernel (forward only).
- ``jax associative_scan``: ``jax.lax.associative_scan`` under ``jit``, backward by ``jax.vjp``.
- ``torch associative_scan``: ``torch._higher_order_ops.associative_scan`` under
  ``torch.compile`` (pointwise combine), backward by autograd.
- ``accelerated-scan warp`` and ``accelerated-scan triton``: ``accelerated_scan.warp.scan`` and
  ``accelerated_scan.scalar.scan`` on ``(B, C, T)`` contiguous tensors (the warp kernel: T a
  power of 2 from 32 to 65,536).
- ``fla chunk_hgrn`` and ``fla fused_recurrent_hgrn``: flash-linear-attention's HGRN ops on
  ``(B, T, D)`` tensors, gates given as ``log(a)`` (their log-space form, computed before
  timing).
- ``CUB``: ``cuda.compute.inclusive_scan`` (cuda-cccl) of ``(a, x)`` pairs with the pair
  operator over the flattened time-contiguous channels, each channel's first decay set to 0
  (exact: the state before the first step is 0), forward only; it writes the products as well.

Shapes: time-contiguous ``(8, 1536, T)`` for T in {2048, 16384, 65536}; channels-contiguous
``(16, T, 128)`` for T in {2048, 16384}; few channels ``(1, 4, T)`` and ``(1, 1, T)`` for T
from 2^16 to 2^26; a small call ``(1, 32, 256)``; float32 and bfloat16.

    python -m benchmarks.peers [--repeats N] [--minutes M] [--only NAMES] [--shapes NAMES]
                               [--dtypes NAMES] [--out DIR]
    python -m benchmarks.peers --device cpu --quick    # checks the script on a CPU

Writes ``results/peers_<device name>.json``, ``.md`` and ``.png`` (GB/s per contestant for
each row); the JSON after every row, so that a run stopped at its limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import math
import os
import re
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks import _common

# JAX shares the GPU: it takes memory as it needs it, up to 40% (its allocator keeps what it
# took, which torch and CuPy could not have back).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.4")

# name -> (shape, axis); the axis is time.
SHAPES = {
    **{f"(8, 1536, {t})": ((8, 1536, t), -1) for t in (2048, 16384, 65536)},
    **{f"(16, {t}, 128)": ((16, t, 128), 1) for t in (2048, 16384)},
    **{f"(1, {c}, 2^{k})": ((1, c, 1 << k), -1) for c in (4, 1) for k in range(16, 27, 2)},
    "(1, 32, 256)": ((1, 32, 256), -1),
}
QUICK_SHAPES = {"(2, 3, 64)": ((2, 3, 64), -1), "(2, 64, 3)": ((2, 64, 3), 1),
                "(1, 1, 1000)": ((1, 1, 1000), -1)}
DTYPES = ("float32", "bfloat16")
DIRECTIONS = ("forward", "backward")
ROTATED_BYTES = 4  # the copies of the inputs together exceed this many L2 caches
MAX_COPIES = 256
SECONDS_PER_CASE = 3.0  # a contestant's repeats in a row take about this long at most
BATCH_SECONDS = 0.02  # a batch of calls back to back lasts about this long
MAX_BATCH = 1000


class Unsupported(Exception):
    """The contestant does not take this shape, dtype or direction (the message says why)."""


# Contestants. Each takes (case, direction) and returns a function of the copy's index that
# runs one call, and the result to check (h forward; (da, dx) backward), or raises Unsupported.

def _combine(left, right):
    return right[0] * left[0], right[0] * left[1] + right[1]


def cuscan_arrays(case, direction, method="auto"):
    import cuscan

    a, x = case.arrays["a"], case.arrays["x"]
    axis = case.axis
    if direction == "forward":
        def call(i):
            return cuscan.linear_recurrence(a[i], x[i], axis=axis, method=method)
        return call, lambda: call(0)
    if method != "auto":
        raise Unsupported("the vjp chooses its own method")
    h = [cuscan.linear_recurrence(a[i], x[i], axis=axis) for i in range(case.copies)]
    g = case.arrays["g"]

    def call(i):
        return cuscan.linear_recurrence_vjp(g[i], a[i], h[i], axis=axis)[:2]
    return call, lambda: call(0)


def cuscan_serial(case, direction):
    return cuscan_arrays(case, direction, method="serial")


def cuscan_torch(case, direction):
    import cuscan

    return _torch_pass(case, direction,
                       lambda a, x: cuscan.linear_recurrence(a, x, axis=case.axis))


def _torch_pass(case, direction, forward):
    """``forward(a, x)`` on the case's torch tensors; backward by autograd through it, one
    graph kept per copy."""
    import torch

    if direction == "forward":
        a, x = case.torch["a"], case.torch["x"]

        def call(i):
            return forward(a[i], x[i])
        return call, lambda: call(0)
    a = [t.detach().requires_grad_() for t in case.torch["a"]]
    x = [t.detach().requires_grad_() for t in case.torch["x"]]
    h = [forward(a[i], x[i]) for i in range(case.copies)]
    g = case.torch["g"]

    def call(i):
        return torch.autograd.grad(h[i], (a[i], x[i]), g[i], retain_graph=True)
    return call, lambda: call(0)


def _module(name: str, missing: str):
    """The module ``name``; where it cannot be imported, the contestant is unsupported,
    with ``missing`` and the import's error as the reason."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise Unsupported(f"{missing}: {error}") from error


def jax_scan(case, direction):
    jax = _module("jax", "JAX is missing")
    import jax.numpy as jnp

    if case.device == "cuda" and jax.default_backend() != "gpu":
        raise Unsupported("JAX sees no GPU")
    axis = case.axis

    def forward(a, x):
        return jax.lax.associative_scan(_combine, (a, x), axis=axis)[1]

    a = [jnp.from_dlpack(t) for t in case.torch["a"]]
    x = [jnp.from_dlpack(t) for t in case.torch["x"]]
    if direction == "forward":
        scan = jax.jit(forward)

        def call(i):
            return scan(a[i], x[i])
        return call, lambda: jax.block_until_ready(call(0))
    g = [jnp.from_dlpack(t) for t in case.torch["g"]]
    linearize = jax.jit(lambda a, x: jax.vjp(forward, a, x)[1])  # the forward's residuals
    vjps = [linearize(a[i], x[i]) for i in range(case.copies)]
    apply = jax.jit(lambda vjp, g: vjp(g))

    def call(i):
        return apply(vjps[i], g[i])
    return call, lambda: jax.block_until_ready(call(0))


def torch_scan(case, direction):
    import torch

    associative_scan = _module("torch._higher_order_ops.associative_scan",
                               "this torch has no associative_scan").associative_scan
    axis = case.axis
    if case.device == "cuda":
        # one compilation per shape, dtype and direction: more than dynamo's default limit of
        # recompilations for one function, past which it would run the scan eagerly
        config = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if isinstance(getattr(config, name, None), int):
                setattr(config, name, max(getattr(config, name), 1024))

        @torch.compile(fullgraph=True, dynamic=False)
        def forward(a, x):
            return associative_scan(_combine, (a, x), dim=axis, combine_mode="pointwise")[1]
    else:  # the pointwise mode needs a GPU; the generic one checks the script on a CPU
        def forward(a, x):
            return associative_scan(_combine, (a, x), dim=axis, combine_mode="generic")[1]
    return _torch_pass(case, direction, forward)


def _time_contiguous(case, who):
    if case.axis not in (-1, len(case.shape) - 1) or len(case.shape) != 3:
        raise Unsupported(f"{who} takes (B, C, T) tensors, time contiguous")
    if case.device != "cuda":
        raise Unsupported(f"{who} needs CUDA")


def accelerated_warp(case, direction):
    _time_contiguous(case, "accelerated-scan")
    length = case.shape[-1]
    if length < 32 or length > 65536 or length & (length - 1):
        raise Unsupported("the warp kernel takes T a power of 2 from 32 to 65,536")
    scan = _module("accelerated_scan.warp", "accelerated-scan is missing").scan
    return _torch_pass(case, direction, scan)


def accelerated_triton(case, direction):
    _time_contiguous(case, "accelerated-scan")
    scan = _module("accelerated_scan.scalar", "accelerated-scan is missing").scan
    return _torch_pass(case, direction, scan)


def _fla(case, direction, name):
    if case.axis != 1 or len(case.shape) != 3:
        raise Unsupported("fla's HGRN ops take (B, T, D) tensors, channels contiguous")
    if case.device != "cuda":
        raise Unsupported("fla needs CUDA")
    op = getattr(_module("fla.ops.hgrn", "flash-linear-attention is missing"), name)
    import torch

    logs = [torch.log(t) for t in case.torch["a"]]  # the gates in fla's log-space form

    def forward(log_a, x):
        return op(x, log_a)[0]

    call, check = _torch_pass(case._replace_a(logs), direction, forward)
    if direction == "forward":
        return call, check

    def to_decays():  # d/da = d/dlog(a) / a
        d_log, dx = check()
        return d_log / case.torch["a"][0], dx
    return call, to_decays


def fla_chunk(case, direction):
    return _fla(case, direction, "chunk_hgrn")


def fla_fused(case, direction):
    return _fla(case, direction, "fused_recurrent_hgrn")


def cub(case, direction):
    _time_contiguous(case, "this CUB scan")
    if direction == "backward":
        raise Unsupported("no gradient")
    if case.dtype != "float32":
        raise Unsupported("float32 only (the operator is compiled by Numba)")
    compute = _module("cuda.compute", "cuda-cccl is missing")
    import cupy

    pair = np.dtype([("a", np.float32), ("h", np.float32)])
    a = []
    for t in case.arrays["a"]:
        t = t.copy()
        t[..., 0] = 0  # each channel starts afresh
        a.append(t.ravel())
    x = [t.ravel() for t in case.arrays["x"]]
    out = [cupy.empty(t.size, pair) for t in x]

    def op(left, right):
        return right[0] * left[0], right[0] * left[1] + right[1]

    def call(i):
        compute.inclusive_scan(d_in=compute.ZipIterator(a[i], x[i]), d_out=out[i],
                               op=op, num_items=x[i].size)
        return out[i]
    return call, lambda: call(0).view(np.float32)[1::2].reshape(case.shape)  # the h field


CONTESTANTS = {
    "cuscan": cuscan_arrays,
    "cuscan (torch)": cuscan_torch,
    "cuscan serial": cuscan_serial,
    "jax associative_scan": jax_scan,
    "torch associative_scan": torch_scan,
    "accelerated-scan warp": accelerated_warp,
    "accelerated-scan triton": accelerated_triton,
    "fla chunk_hgrn": fla_chunk,
    "fla fused_recurrent_hgrn": fla_fused,
    "CUB": cub,
}


class Case:
    """One shape and dtype: ``copies`` sets of decays, impulses and output gradients as torch
    tensors and as CuPy (on a GPU) or NumPy views of them, and the float64 reference on a few
    channels."""

    def __init__(self, shape, axis, dtype, device, l2_bytes, seed=0):
        import torch

        self.shape, self.axis, self.dtype, self.device = shape, axis, dtype, device
        itemsize = 2 if dtype == "bfloat16" else 4
        elements = math.prod(shape)
        self.copies = int(min(MAX_COPIES, max(1, math.ceil(
            ROTATED_BYTES * l2_bytes / (3 * elements * itemsize)))))
        generator = torch.Generator(device).manual_seed(seed)
        kind = getattr(torch, dtype)
        self.torch = {"a": [], "x": [], "g": []}
        for _ in range(self.copies):
            self.torch["a"].append(
                (0.9 + 0.1 * torch.rand(shape, generator=generator, device=device)).to(kind))
            self.torch["x"].append(
                torch.randn(shape, generator=generator, device=device).to(kind))
            self.torch["g"].append(
                torch.randn(shape, generator=generator, device=device).to(kind))
        if device == "cuda":
            import cupy

            view = cupy.from_dlpack
        else:
            import ml_dtypes

            def view(t):
                if t.dtype == torch.bfloat16:  # NumPy knows it as ml_dtypes' type
                    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
                return t.numpy()
        self.arrays = {k: [view(t) for t in v] for k, v in self.torch.items()}
        self.elements = elements
        self.bytes = {"forward": 3 * elements * itemsize, "backward": 5 * elements * itemsize}
        self.reference = self._reference()

    def _replace_a(self, a):
        other = object.__new__(Case)
        other.__dict__.update(self.__dict__)
        other.torch = {**self.torch, "a": a}
        return other

    def _sample(self, t):
        """The first batch and at most 16 channels of a result, in float64 on the host."""
        import torch

        if isinstance(t, np.ndarray):
            t = torch.from_numpy(np.asarray(t, np.float64))
        elif not isinstance(t, torch.Tensor):
            t = torch.from_dlpack(t)
        t = t[0]
        channels = 0 if self.axis in (-1, 2) else 1  # (C, T) or (T, D) without the batch
        t = t.narrow(channels, 0, min(16, t.shape[channels]))
        return t.detach().to("cpu", torch.float64).numpy()

    def _reference(self):
        """h, and the gradients of the decays and the impulses, in float64 on the samples."""
        import cuscan

        a, x, g = (self._sample(self.torch[k][0]) for k in ("a", "x", "g"))
        axis = self.axis if self.axis < 0 else self.axis - 1  # the batch axis is gone
        h = cuscan.linear_recurrence(a, x, axis=axis)
        da, dx, _ = cuscan.linear_recurrence_vjp(g, a, h, axis=axis)
        return {"forward": (h,), "backward": (da, dx)}

    def error(self, direction, result):
        """The largest error of ``result`` over the samples, in units of the dtype's epsilon
        times the largest magnitude of the reference."""
        import ml_dtypes

        results = (result,) if direction == "forward" else tuple(result)
        eps = float(ml_dtypes.finfo(ml_dtypes.bfloat16 if self.dtype == "bfloat16"
                                    else np.float32).eps)
        worst = 0.0
        for got, want in zip(results, self.reference[direction], strict=True):
            got = self._sample(got)
            scale = max(float(np.max(np.abs(want))), 1e-30)
            worst = max(worst, float(np.max(np.abs(got - want))) / scale / eps)
        return worst


def _block(result) -> None:
    """Wait for a JAX result: JAX runs on its own streams, where the other contestants run on
    the one the clock's events are recorded on."""
    for leaf in result if isinstance(result, (tuple, list)) else (result,):
        wait = getattr(leaf, "block_until_ready", None)
        if wait is not None:
            wait()


def _clock(device):
    """A function ``clock(call, indices)`` that makes ``call(i)`` for each of ``indices``
    back to back, from an idle device to the last one's result, and returns the seconds per
    call (CUDA events on a GPU)."""
    if device == "cuda":
        import torch

        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)

        def clock(call, indices):
            torch.cuda.synchronize()
            start.record()
            result = None
            for i in indices:
                result = call(i)
            _block(result)
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) / 1e3 / len(indices)
        return clock

    def clock(call, indices):
        begin = time.perf_counter()
        for i in indices:
            call(i)
        return (time.perf_counter() - begin) / len(indices)
    return clock


def _copy(case, direction):
    """A device-to-device copy of as many bytes as the direction must move."""
    import torch

    half = case.bytes[direction] // 2
    source = torch.empty(half, dtype=torch.uint8, device=case.device)
    target = torch.empty_like(source)
    return lambda i: target.copy_(source)


def measure(functions: dict, clock, repeats: int, copies: int) -> dict:
    """For each function (label -> function of the copy's index), after warm-up, the median
    seconds a call in batches back to back (``seconds``) and of one call alone (``latency``),
    the functions' batches taken in turn. A batch lasts about BATCH_SECONDS; slow functions
    (over SECONDS_PER_CASE for their repeats) get fewer, three at least."""
    plan = {}
    for label, function in functions.items():
        function(0)  # compiles
        function(min(1, copies - 1))
        took = max(clock(function, [0]), 1e-9)
        calls = max(1, min(MAX_BATCH, math.ceil(BATCH_SECONDS / took)))
        plan[label] = calls, max(3, min(repeats, int(SECONDS_PER_CASE / (calls * took))))
    times = {label: [] for label in functions}
    latencies = {label: [] for label in functions}
    for r in range(max(batches for _, batches in plan.values())):
        for label, function in functions.items():
            calls, batches = plan[label]
            if r >= batches:
                continue
            first = r * (calls + 1)
            times[label].append(clock(function, [(first + k) % copies for k in range(calls)]))
            latencies[label].append(times[label][-1] if calls == 1 else clock(
                function, [(first + calls) % copies]))
    return {label: {"seconds": statistics.median(times[label]),
                    "latency": statistics.median(latencies[label])} for label in functions}


def run_case(case, direction, names, clock, repeats) -> dict:
    """One row: each contestant built, timed in turn with a copy of the row's bytes, checked
    and released before the next (the largest rows do not hold every contestant's state at
    once); the row's copy time is the median of those copies."""
    row = {"elements": case.elements, "bytes": case.bytes[direction], "copies": case.copies,
           "results": {}}
    copy = _copy(case, direction)
    copies = []
    for name in names:
        try:
            call, check = CONTESTANTS[name](case, direction)
            call(0)  # fails here, if it fails at all
            times = measure({"copy": copy, name: call}, clock, repeats, case.copies)
            seconds = times[name]["seconds"]
            entry = {"seconds": seconds, "latency_s": times[name]["latency"],
                     "GBps": case.bytes[direction] / seconds / 1e9,
                     "of_copy": times["copy"]["seconds"] / seconds}
            copies.append(times["copy"]["seconds"])
            try:
                entry["error_eps"] = case.error(direction, check())
            except Exception as error:  # the check's own failure, reported beside the time
                entry["error_eps"] = None
                entry["check_failed"] = _message(error)
        except Unsupported as reason:
            entry = {"unsupported": str(reason)}
        except Exception as error:  # a failing peer is reported, not fatal
            entry = {"failed": _message(error)}
        row["results"][name] = entry
        call = check = None
        _free(case.device)
    row["copy_s"] = statistics.median(copies) if copies else measure(
        {"copy": copy}, clock, repeats, case.copies)["copy"]["seconds"]
    return row


def _message(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    text = re.sub(r"\s+", " ", text)
    if len(text) > 300:
        text = text[:300] + "..."
    where = traceback.extract_tb(error.__traceback__)
    if where:
        text += f" ({Path(where[-1].filename).name}:{where[-1].lineno})"
    return text


def versions() -> dict:
    found = {}
    for package in ("torch", "jax", "jaxlib", "cupy-cuda13x", "cupy-cuda12x", "triton",
                    "accelerated-scan", "fla-core", "cuda-cccl", "numba-cuda", "ml_dtypes"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[package] = importlib.metadata.version(package)
    return found


def _free(device):
    import gc

    gc.collect()
    if device == "cuda":
        import cupy
        import torch

        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()


def describe(device: str) -> tuple[str, int]:
    """The device's name and its L2 cache's size in bytes (4 MiB taken for a CPU)."""
    if device == "cuda":
        import torch

        props = torch.cuda.get_device_properties(0)
        return props.name, props.L2_cache_size
    return "cpu", 4 << 20


def run(device: str, shapes: dict, dtypes, names, repeats: int, minutes: float | None,
        on_row=None) -> dict:

    device_name, l2_bytes = describe(device)
    result = {"benchmark": "peers", "device": device_name, "commit": _common.commit(),
              "environment": {**_common.environment(), **versions()},
              "l2_bytes": l2_bytes, "repeats": repeats, "rows": []}
    deadline = None if minutes is None else time.perf_counter() + 60 * minutes
    clock = _clock(device)
    for shape_name, (shape, axis) in shapes.items():
        for dtype in dtypes:
            if deadline is not None and time.perf_counter() > deadline:
                result["stopped"] = f"time limit of {minutes} min reached before {shape_name}"
                return result
            try:
                case = Case(shape, axis, dtype, device, l2_bytes)
            except Exception as error:  # out of memory, for one
                result["rows"].append({"shape": shape_name, "dtype": dtype,
                                       "failed": _message(error)})
                _free(device)
                continue
            for direction in DIRECTIONS:
                row = {"shape": shape_name, "axis": axis, "dtype": dtype,
                       "direction": direction,
                       **run_case(case, direction, names, clock, repeats)}
                result["rows"].append(row)
                if on_row is not None:
                    on_row(result, row)
            del case
            _free(device)
    return result


def table(result: dict) -> str:
    names = [n for n in CONTESTANTS if any(n in r.get("results", {}) for r in result["rows"])]
    lines = [f"# Peers on {result['device']}", "",
             f"commit {result['commit']}; " + ", ".join(
                 f"{k} {v}" for k, v in result["environment"].items()
                 if k in ("torch", "jax", "triton", "accelerated-scan", "fla-core", "cuda-cccl",
                          "cupy-cuda13x", "cupy-cuda12x")), "",
             "GB/s of the bytes the recurrence must move, and the fraction of a copy's rate; "
             "`-`: cannot take the row; `x`: failed (see the JSON); `!`: error over 100 eps.", "",
             "| shape | dtype | pass | copy GB/s | " + " | ".join(names) + " |",
             "|---|---|---|---:|" + "---:|" * len(names)]
    for row in result["rows"]:
        if "failed" in row:
            lines.append(f"| {row['shape']} | {row['dtype']} | | failed: {row['failed']} |")
            continue
        copy = row["copy_s"]
        cells = []
        for name in names:
            entry = row["results"].get(name)
            if entry is None:
                cells.append("")
            elif "unsupported" in entry:
                cells.append("-")
            elif "failed" in entry:
                cells.append("x")
            else:
                flag = "!" if (entry.get("error_eps") or 0) > 100 else ""
                fraction = f" ({entry['of_copy']:.2f})" if "of_copy" in entry else ""
                cells.append(f"{entry['GBps']:.3g}{fraction}{flag}")
        copy_rate = f"{row['bytes'] / copy / 1e9:.3g}" if copy else "-"
        lines.append(f"| {row['shape']} | {row['dtype']} | {row['direction']} | {copy_rate} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """GB/s per contestant for each row (a log scale), the copy's rate as a dash."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "results" in r]
    names = sorted({n for r in rows for n, e in r["results"].items() if "GBps" in e},
                   key=list(CONTESTANTS).index)
    if not rows or not names:
        return
    figure, axes = plt.subplots(figsize=(max(8, 0.55 * len(rows)), 5))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        rates = [r["results"].get(name, {}).get("GBps", math.nan) for r in rows]
        axes.bar([i + k * width for i in range(len(rows))], rates, width, label=name)
    axes.plot([i + 0.4 - width / 2 for i in range(len(rows))],
              [r["bytes"] / r["copy_s"] / 1e9 if r["copy_s"] else math.nan for r in rows],
              "k_", markersize=12, label="copy")
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
    axes.set_xticklabels([f"{r['shape']} {r['dtype']} {r['direction'][:3]}" for r in rows],
                         rotation=90, fontsize=7)
    axes.set_yscale("log")
    axes.set_ylabel("GB/s")
    axes.set_title(f"Linear recurrence, {result['device']}, commit {result['commit'][:10]}")
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda (the default where there is one) "
                        "or cpu")
    parser.add_argument("--quick", action="store_true",
                        help="tiny shapes and few repeats: checks the script")
    parser.add_argument("--repeats", type=_common.positive(int), default=30)
    parser.add_argument("--minutes", type=_common.positive(float), default=None,
                        help="start no shape after this long")
    parser.add_argument("--only", default=None,
                        help=f"contestants, comma-separated, from: {', '.join(CONTESTANTS)}")
    parser.add_argument("--shapes", default=None,
                        help="shape names as printed, separated by ';': "
                        "'(1, 4, 2^16);(1, 32, 256)'")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--out", type=Path, default=_common.RESULTS)
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes:
        wanted = [s.strip() for s in re.split(r";", args.shapes)]
        unknown = [s for s in wanted if s not in shapes]
        if unknown:
            parser.error(f"unknown shapes {unknown}; expected some of {list(shapes)}")
        shapes = {s: shapes[s] for s in wanted}
    names = list(CONTESTANTS) if args.only is None else [
        n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in CONTESTANTS]
    if unknown:
        parser.error(f"unknown contestants {unknown}; expected some of {list(CONTESTANTS)}")
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    repeats = 3 if args.quick else args.repeats
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / ("peers_" + re.sub(r"[^A-Za-z0-9.-]+", "-", describe(device)[0]))

    def save(result, row=None):
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        if row is not None:
            cells = ", ".join(
                f"{n} {e['GBps']:.3g}" if "GBps" in e else f"{n} {next(iter(e))}"
                for n, e in row.get("results", {}).items())
            print(f"{row['shape']} {row['dtype']} {row.get('direction', '')}: {cells}",
                  file=sys.stderr, flush=True)

    result = run(device, shapes, dtypes, names, repeats, args.minutes, on_row=save)
    save(result)
    stem.with_suffix(".md").write_text(table(result))
    try:
        plot(result, stem.with_suffix(".png"))
    except ImportError:
        print("matplotlib is missing: no plot", file=sys.stderr)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
