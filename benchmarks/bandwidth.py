"""Large recurrences on a CUDA GPU against the memory-bandwidth limit.

A linear recurrence is memory-bound: the forward pass must read the decays and
impulses and write the output (3 arrays), the backward pass read the output
gradient, the decays and the output and write two gradients (5 arrays). For
each layout and size below, times cuscan's forward and backward (CUDA events,
median after warm-up) and reports the bytes that must move over that time,
next to a device-to-device copy of as many bytes measured in the same run,
and to ``jax.lax.associative_scan`` on the same data where JAX sees the GPU.

Layouts: channels contiguous (T, C) along axis 0, as in time-major RNNs, and
time contiguous (C, T) along axis -1, as in signal processing and
``(batch, channels, time)`` models.

    python -m benchmarks.bandwidth [--repeats N] [--json PATH]
"""

from __future__ import annotations

import os

import numpy as np

import cuscan
from benchmarks._common import commit
from benchmarks.table1 import command_line, device_description, gpu_time

# (T, C): many channels, a balanced shape, few channels over a long time.
SIZES = [(1024, 65536), (16384, 4096), (1 << 22, 16)]
DTYPES = ["float32", "bfloat16", "float64"]


def _jax_scan():
    """A jitted ``associative_scan`` of the recurrence along axis 0, or None without a JAX GPU."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with CuPy
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    if jax.default_backend() != "gpu":
        return None

    def combine(left, right):
        return right[0] * left[0], right[0] * left[1] + right[1]

    @jax.jit
    def scan(a, x):
        return jax.lax.associative_scan(combine, (a, x), axis=0)[1]

    return jnp, scan


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def operands(cupy, repeats: int):
    """For each size and dtype in turn: ``(length, channels, dtype name, decays, impulses,
    copy rate)``, the operands (T, C) on the GPU, from one seed, and the bytes a second read
    and written by a device-to-device copy of one and a half operands' bytes (three arrays'
    traffic, as a forward pass), timed by ``gpu_time``. The operands' memory is freed before
    the next; a dtype CuPy cannot hold is skipped, with a message."""
    rng = np.random.default_rng(0)
    for length, channels in SIZES:
        for dtype_name in DTYPES:
            dtype = _dtype(dtype_name)
            shape = (length, channels)
            try:  # on the host: CuPy may not convert to bfloat16 itself
                decays = cupy.asarray(rng.uniform(0.9, 1.0, shape).astype(dtype))
                impulses = cupy.asarray(rng.standard_normal(shape).astype(dtype))
            except (TypeError, ValueError) as error:
                print(f"skipping {dtype_name}: {error}")
                continue
            moved = 3 * decays.size * dtype.itemsize
            source = cupy.empty(moved // 2, np.uint8)
            target = cupy.empty_like(source)
            copy = gpu_time(cupy, lambda s=source, t=target: t.__setitem__(Ellipsis, s), repeats)
            del source, target
            yield length, channels, dtype_name, decays, impulses, moved / copy
            del decays, impulses
            cupy.get_default_memory_pool().free_all_blocks()


def layouts(cupy, decays, impulses):
    """``(layout, decays, impulses, axis)``: the operands as given, channels contiguous along
    axis 0, then time-contiguous copies along axis -1."""
    yield "channels-contiguous", decays, impulses, 0
    yield ("time-contiguous", cupy.ascontiguousarray(decays.T),
           cupy.ascontiguousarray(impulses.T), -1)


def run(repeats: int) -> dict:
    import cupy

    peer = _jax_scan()
    rows = []
    for length, channels, dtype_name, decays, impulses, copy_Bps in operands(cupy, repeats):
        forward_bytes = 3 * decays.nbytes
        backward_bytes = 5 * decays.nbytes
        for layout, a, x, axis in layouts(cupy, decays, impulses):
            forward = gpu_time(cupy, lambda a=a, x=x, axis=axis:
                               cuscan.linear_recurrence(a, x, axis=axis), repeats)
            h = cuscan.linear_recurrence(a, x, axis=axis)
            go = x
            backward = gpu_time(cupy, lambda go=go, a=a, h=h, axis=axis:
                                cuscan.linear_recurrence_vjp(go, a, h, axis=axis), repeats)
            row = {
                "length": length, "channels": channels, "dtype": dtype_name,
                "layout": layout, "forward_s": forward, "backward_s": backward,
                "forward_GBps": forward_bytes / forward / 1e9,
                "backward_GBps": backward_bytes / backward / 1e9,
                "copy_GBps": copy_Bps / 1e9,
            }
            if peer is not None and layout == "channels-contiguous" and dtype_name != "float64":
                jnp, scan = peer
                ja, jx = jnp.from_dlpack(a), jnp.from_dlpack(x)
                row["jax_associative_scan_s"] = gpu_time(
                    cupy, lambda s=scan, a=ja, x=jx: s(a, x).block_until_ready(),
                    max(3, repeats // 3))
            rows.append(row)
            del h, a, x
        del decays, impulses
    return {"benchmark": "bandwidth", "commit": commit(), "environment": device_description(cupy),
            "repeats": repeats, "rows": rows}


def table(result: dict) -> str:
    lines = ["| T | C | dtype | layout | forward | fwd GB/s | backward | bwd GB/s | copy GB/s "
             "| fwd / copy | JAX assoc. scan |",
             "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        peer = r.get("jax_associative_scan_s")
        lines.append(
            f"| {r['length']} | {r['channels']} | {r['dtype']} | {r['layout']} | "
            f"{r['forward_s'] * 1e3:.3f} ms | {r['forward_GBps']:.0f} | "
            f"{r['backward_s'] * 1e3:.3f} ms | {r['backward_GBps']:.0f} | {r['copy_GBps']:.0f} | "
            f"{r['forward_GBps'] / r['copy_GBps']:.2f} | "
            + (f"{peer * 1e3:.3f} ms |" if peer else "- |"))
    return "\n".join(lines)


def main() -> None:
    command_line(__doc__.splitlines()[0], run, table, repeats=20)


if __name__ == "__main__":
    main()
