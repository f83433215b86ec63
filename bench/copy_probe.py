"""What the trusted copy of a call's outputs costs: the copy engine against a copy kernel.

The trusted wall of every call ends with private copies of its outputs (``runner/exchange.cc``, queued
with ``cuMemcpyDtoDAsync`` and awaited): on an H100 the expert GEMM's 117 MB C took 0.24 ms of its
1.05 ms request (``runner`` parts, ``bench/results/wall_allowance_2026-12-06_parts_h100.txt``), paid on all
183 calls of an evaluation, and the MHA forward's O is 201 MB. A device-to-device copy on one GPU may
run on a copy engine rather than the SMs; this times, on one stream with CUDA events (GPU ms) and as the
host wall of issue + synchronise (what the exchange waits), median of ``--repeats`` after 3 unmeasured:

* ``cuMemcpyDtoDAsync``: the exchange's copy today;
* the PTX copy kernel ``exchange.cc`` would load (``COPY_PTX``: 16-byte vector loads and stores, JIT
  compiled by the driver from PTX text), at a few grid sizes;

for each size in ``--mib`` (default: the GEMM's C and the MHA forward's O), and checks that every copy's
bytes equal the source's.

    python bench/copy_probe.py --out bench/results/copy_probe.txt
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path

from provenance import commit

COPY_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry ptxgym_copy16(.param .u64 dst, .param .u64 src, .param .u64 n16)
{
  .reg .pred %p;
  .reg .b32 %r<8>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [dst];
  ld.param.u64 %rd2, [src];
  ld.param.u64 %rd3, [n16];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  cvt.u64.u32 %rd5, %r3;
  mad.wide.u32 %rd4, %r1, %r2, %rd5;
  mov.u32 %r3, %nctaid.x;
  mul.wide.u32 %rd6, %r3, %r2;
LOOP:
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd7, %rd4, 4;
  add.s64 %rd8, %rd2, %rd7;
  add.s64 %rd9, %rd1, %rd7;
  ld.global.nc.v4.u32 {%r4, %r5, %r6, %r7}, [%rd8];
  st.global.v4.u32 [%rd9], {%r4, %r5, %r6, %r7};
  add.s64 %rd4, %rd4, %rd6;
  bra LOOP;
DONE:
  ret;
}
"""


def _ok(result):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def _probe_size(nbytes: int, kernel, sms: int, stream, repeats: int, say) -> None:
    """Every variant's copy of ``nbytes`` (a multiple of 16) timed and checked."""
    import torch
    from cuda.bindings import driver as cu

    handle = stream.cuda_stream
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    n16 = nbytes // 16

    def launch(blocks: int, threads: int = 256) -> None:
        vals = [ctypes.c_uint64(dst.data_ptr()), ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(n16)]
        ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in vals])
        _ok(cu.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, handle, ctypes.addressof(ptrs), 0))

    variants = {
        "cuMemcpyDtoDAsync (today's)": lambda: _ok(
            cu.cuMemcpyDtoDAsync(dst.data_ptr(), src.data_ptr(), nbytes, handle)
        ),
    }
    for per_sm in (4, 8, 16):
        variants[f"PTX copy kernel, {per_sm} x {sms} blocks of 256"] = lambda b=per_sm * sms: launch(b)
    variants["PTX copy kernel, one 16-byte word a thread"] = lambda: launch(-(-n16 // 256))
    for name, run in variants.items():
        gpu, wall = [], []
        for i in range(repeats + 3):
            dst.zero_()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = time.perf_counter()
            start.record(stream)
            run()
            end.record(stream)
            stream.synchronize()
            w = (time.perf_counter() - t) * 1e3
            if i >= 3:
                gpu.append(start.elapsed_time(end))
                wall.append(w)
        equal = bool(torch.equal(dst, src))
        g = statistics.median(gpu)
        say(
            f"{nbytes / 1e6:.1f} | {name} | {g:.4f} | {statistics.median(wall):.4f} | "
            f"{nbytes / g / 1e6:.0f} | {equal}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--mib", type=float, nargs="*", default=[112.0, 192.0])
    args = parser.parse_args()

    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    torch.cuda.synchronize()
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    module = _ok(cu.cuModuleLoadData(COPY_PTX.encode() + b"\0"))
    kernel = _ok(cu.cuModuleGetFunction(module, b"ptxgym_copy16"))
    stream = torch.cuda.Stream()
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(
        f"# copy probe {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {props.name}, commit {commit()} "
        f"(bench/copy_probe.py); {sms} SMs; median of {args.repeats}"
    )
    say("bytes MB | variant | GPU ms (events) | issue + sync wall ms | GB/s (bytes / GPU time) | equal")

    for mib in args.mib:
        _probe_size(int(mib * 2**20) // 16 * 16, kernel, sms, stream, args.repeats, say)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
