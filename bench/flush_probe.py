"""What the L2 flush before every call costs, by part (``runner/cuda_path.h``'s ``flush_l2``).

The runner's byte memset, a 4-byte-word memset, and the persisting-L2 reset.

    python bench/flush_probe.py --out bench/results/flush_probe.txt

The runner flushes before each call (a memset of a buffer of twice the L2, then
``cuCtxResetPersistingL2Cache``) and waits for it; its wall parts put that at 0.18 ms a call on an H100
(``runner_flushed``, ``bench/results/wall_allowance_2026-12-06_parts_h100.txt``), paid on every call of
an evaluation. This times each variant on its own stream with CUDA events (GPU ms) and the host wall
of issue + synchronise (what the runner waits), median of ``--repeats`` after 3 unmeasured, and checks
that each memset leaves the L2 cold for a read of a small buffer read just before (the read after the
flush against a warm read).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from provenance import commit


def _check(result) -> None:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()

    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    nbytes = 2 * l2
    buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    probe = torch.randn(l2 // 8, device="cuda")  # a quarter of the L2 in fp32
    stream = torch.cuda.Stream()
    handle = stream.cuda_stream
    ptr = buf.data_ptr()

    variants = {
        "byte memset (cuMemsetD8Async, the runner's)": lambda: _check(
            cu.cuMemsetD8Async(ptr, 0, nbytes, handle)
        ),
        "word memset (cuMemsetD32Async)": lambda: _check(cu.cuMemsetD32Async(ptr, 0, nbytes // 4, handle)),
        "persisting-L2 reset alone (cuCtxResetPersistingL2Cache)": lambda: _check(
            cu.cuCtxResetPersistingL2Cache()
        ),
        "byte memset + reset (the runner's flush)": lambda: (
            _check(cu.cuMemsetD8Async(ptr, 0, nbytes, handle)),
            _check(cu.cuCtxResetPersistingL2Cache()),
        ),
        "word memset + reset": lambda: (
            _check(cu.cuMemsetD32Async(ptr, 0, nbytes // 4, handle)),
            _check(cu.cuCtxResetPersistingL2Cache()),
        ),
    }

    def timed(fn, after=None) -> tuple[float, float, float]:
        gpu, host, reads = [], [], []
        for k in range(args.repeats + 3):
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                probe.sum()  # the probe warm in L2
                a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                torch.cuda.synchronize()
                t = time.perf_counter()
                a.record(stream)
                fn()
                b.record(stream)
                stream.synchronize()
                wall = (time.perf_counter() - t) * 1e3
                probe.sum()  # cold after a flush
                c.record(stream)
            torch.cuda.synchronize()
            if k >= 3:
                gpu.append(a.elapsed_time(b))
                host.append(wall)
                reads.append(b.elapsed_time(c))
        return statistics.median(gpu), statistics.median(host), statistics.median(reads)

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [
        f"# flush probe {stamp}, {torch.cuda.get_device_name(0)}, commit {commit()} (bench/flush_probe.py)",
        f"# L2 {l2 / 2**20:.0f} MiB, flush buffer {nbytes / 2**20:.0f} MiB; median of {args.repeats}; "
        f"probe read: {probe.numel() * 4 / 2**20:.0f} MiB summed right after (cold after a flush)",
        "variant | GPU ms (events) | issue + sync wall ms | probe read after ms",
    ]
    _, _, warm = timed(lambda: None)
    lines.append(f"nothing (the probe read warm) | - | - | {warm:.4f}")
    for name, fn in variants.items():
        g, h, r = timed(fn)
        lines.append(f"{name} | {g:.4f} | {h:.4f} | {r:.4f}")
        print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
