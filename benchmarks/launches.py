"""Where a large scan's time goes on a CUDA GPU: kernel by kernel, device and host.

For the sizes, dtypes and layouts of ``benchmarks.bandwidth``, times cuscan's forward and
backward passes three ways, each the median over the repeats:

- *unheld*: CUDA events around the call, as ``benchmarks.bandwidth`` times it: the
  device's time, plus any time it waited for the host to launch the next kernel;
- *device*: the same events, with the GPU held by a spin kernel until the host has queued
  the whole call, so that its work runs back to back: the device's time alone;
- *host*: the call's wall time on the host while the GPU is held (the layout, the plan,
  allocations and launches, none of it waiting for a kernel);

and, in held calls, CUDA events around each kernel launch: the launches in their order
(the chunked plan's reductions, carries and rescans, level by level), each with its dtype,
threads and time. What the launches leave of the device time ("other") is memsets, copies
and the gaps between them. "floor" is the bytes that must move (3 arrays forward, 5
backward) at the rate of a device-to-device copy measured in the same run. Where unheld
exceeds device, the host's launches, not the kernels, set the pace. A call that waits for
the GPU outlasts any hold: its device time is marked with * and includes the hold.

    python -m benchmarks.launches [--repeats N] [--json PATH]
"""

from __future__ import annotations

import time

import numpy as np

import cuscan
from benchmarks._common import commit
from benchmarks.bandwidth import layouts, operands
from benchmarks.table1 import command_line, device_description, gpu_time

# One thread that spins until ``ns`` nanoseconds of the GPU's global timer have passed.
_HOLD = r"""
extern "C" __global__ void hold(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""
_PREFIX = "linear_recurrence_"


class Hold:
    """Runs a function with the GPU held by a spin kernel until the host has queued all
    the function's work, lengthening the hold (and running the function again) where the
    hold ended first, up to ``longest`` seconds: a function that waits for the GPU outlasts
    any hold."""

    def __init__(self, cupy, seconds: float = 1e-3, longest: float = 0.5):
        self.cupy = cupy
        self.kernel = cupy.RawKernel(_HOLD, "hold")
        self.seconds = seconds
        self.longest = longest

    def __call__(self, function) -> tuple[float, bool]:
        """The host's seconds in ``function``, and whether the hold outlasted them."""
        while True:
            self.kernel((1,), (1,), (np.uint64(self.seconds * 1e9),))
            released = self.cupy.cuda.Event()
            released.record()
            start = time.perf_counter()
            function()
            host = time.perf_counter() - start
            ended_first = released.done
            self.cupy.cuda.get_current_stream().synchronize()
            if not ended_first or self.seconds >= self.longest:
                return host, not ended_first
            self.seconds = min(2 * self.seconds, self.longest)


def launch_medians(runs: list[list[tuple]]) -> list[dict]:
    """Each launch's median time over ``runs``, one list per run of ``(kernel, dtype,
    threads, seconds)`` in launch order; every run must launch the same kernels."""
    plans = {tuple(launch[:3] for launch in run) for run in runs}
    if len(plans) != 1:
        raise ValueError(f"the runs launched different kernels: {sorted(plans)}")
    return [{"kernel": kernel, "dtype": dtype, "threads": threads,
             "seconds": float(np.median([run[i][3] for run in runs]))}
            for i, (kernel, dtype, threads) in enumerate(plans.pop())]


def profile(cupy, backend, hold: Hold, call, repeats: int) -> dict:
    """``call`` timed unheld, on the device alone, on the host, and launch by launch: those
    of ``backend`` (a ``KernelBackend``)."""
    original = backend.launch
    unheld = gpu_time(cupy, call, repeats)  # warms up first
    first, last = cupy.cuda.Event(), cupy.cuda.Event()
    events = []  # (kernel, dtype, threads, start, stop) of the latest run, launch by launch

    def whole():
        first.record()
        call()
        last.record()

    def timed(kernel, dtype, work, *args):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        original(kernel, dtype, work, *args)
        stop.record()
        events.append((kernel.removeprefix(_PREFIX), np.dtype(dtype).name, work, start, stop))

    def launched():
        events.clear()  # of a run the hold did not outlast
        call()

    device, host, held, runs = [], [], [], []
    for _ in range(repeats):
        seconds, whole_held = hold(whole)
        host.append(seconds)
        device.append(cupy.cuda.get_elapsed_time(first, last) / 1e3)
        backend.launch = timed
        try:
            _, launches_held = hold(launched)
        finally:
            backend.launch = original
        held.append(whole_held and launches_held)
        runs.append([(kernel, dtype, work, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
                     for kernel, dtype, work, start, stop in events])
    launches = launch_medians(runs)
    device_s = float(np.median(device))
    return {"unheld_s": unheld, "device_s": device_s, "host_s": float(np.median(host)),
            "held": all(held), "launches": launches,
            "other_s": device_s - sum(launch["seconds"] for launch in launches)}


def run(repeats: int) -> dict:
    import cupy

    from cuscan import _cupy_backend

    hold = Hold(cupy)
    rows = []
    for length, channels, dtype_name, decays, impulses, copy_Bps in operands(cupy, repeats):
        for layout, a, x, axis in layouts(cupy, decays, impulses):
            h = cuscan.linear_recurrence(a, x, axis=axis)
            calls = {
                "forward": (3, lambda a=a, x=x, axis=axis:
                            cuscan.linear_recurrence(a, x, axis=axis)),
                "backward": (5, lambda a=a, h=h, go=x, axis=axis:
                             cuscan.linear_recurrence_vjp(go, a, h, axis=axis)),
            }
            for direction, (arrays, call) in calls.items():
                rows.append({"length": length, "channels": channels, "dtype": dtype_name,
                             "layout": layout, "direction": direction,
                             "floor_s": arrays * decays.nbytes / copy_Bps,
                             **profile(cupy, _cupy_backend._kernel_backend, hold, call,
                                       repeats)})
            del h, a, x, calls
        del decays, impulses
    return {"benchmark": "launches", "commit": commit(), "environment": device_description(cupy),
            "repeats": repeats, "rows": rows}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}"


def table(result: dict) -> str:
    """One line a call (times in microseconds), then each call's launches."""
    lines = ["| T | C | dtype | layout | pass | floor | unheld | device | host | launches "
             "| kernels | other |",
             "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    details = []
    for r in result["rows"]:
        launches = r["launches"]
        name = f"{r['length']} x {r['channels']} {r['dtype']} {r['layout']} {r['direction']}"
        lines.append(
            f"| {r['length']} | {r['channels']} | {r['dtype']} | {r['layout']} | "
            f"{r['direction']} | {_us(r['floor_s'])} | {_us(r['unheld_s'])} | "
            f"{_us(r['device_s'])}{'' if r['held'] else ' *'} | {_us(r['host_s'])} | "
            f"{len(launches)} | "
            f"{_us(r['device_s'] - r['other_s'])} | {_us(r['other_s'])} |")
        details.append(f"\n{name}: device {_us(r['device_s'])} us, floor {_us(r['floor_s'])}")
        details.extend(f"  {i:2d} {launch['kernel']:<12} {launch['dtype']:<10} "
                       f"{launch['threads']:>10} threads {_us(launch['seconds']):>7} us "
                       f"{launch['seconds'] / r['device_s']:6.1%}"
                       for i, launch in enumerate(launches, 1))
    return "\n".join(lines + details)


def main() -> None:
    command_line(__doc__.splitlines()[0], run, table, repeats=10)


if __name__ == "__main__":
    main()
