"""Can a trusted process see tensor-pipe work through NVML GPM on this GPU? Prints GPM metrics over windows.

Windows: idle; cuBLAS bf16 GEMM 8192^3 (HGMMA) for about 1 s; the same GEMM 10 times (~7 ms); an FP32
SIMT workload (fp32 GEMM with TF32 off) for about 1 s; a memory copy for about 1 s. The metrics are
computed by NVML between two samples the calling process takes around each window.
Usage: python3 bench/gpm_probe.py
"""

from __future__ import annotations

import time

import pynvml as nv
import torch

METRICS = {
    "any_tensor": nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "hmma_tensor": nv.NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    "sm_util": nv.NVML_GPM_METRIC_SM_UTIL,
    "fp32": nv.NVML_GPM_METRIC_FP32_UTIL,
    "dram_bw": nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
}


def window(handle, fn) -> tuple[float, dict[str, float]]:
    s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    torch.cuda.synchronize()
    nv.nvmlGpmSampleGet(handle, s1)
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    nv.nvmlGpmSampleGet(handle, s2)
    mg = nv.c_nvmlGpmMetricsGet_t()
    mg.version = nv.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(METRICS)
    mg.sample1, mg.sample2 = s1, s2
    for i, mid in enumerate(METRICS.values()):
        mg.metrics[i].metricId = mid
    nv.nvmlGpmMetricsGet(mg)
    out = {}
    for i, name in enumerate(METRICS):
        m = mg.metrics[i]
        out[name] = round(m.value, 2) if m.nvmlReturn == 0 else f"err{m.nvmlReturn}"
    nv.nvmlGpmSampleFree(s1)
    nv.nvmlGpmSampleFree(s2)
    return (t1 - t0) * 1e3, out


def main() -> None:
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    print("GPU", nv.nvmlDeviceGetName(h), "driver", nv.nvmlSystemGetDriverVersion())
    print("GPM supported:", nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    af, bf = a.float(), b.float()
    torch.backends.cuda.matmul.allow_tf32 = False
    big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    big2 = torch.empty_like(big)
    for _ in range(3):
        a @ b
        af @ bf
    torch.cuda.synchronize()
    cases = {
        "idle 200ms": lambda: time.sleep(0.2),
        "bf16 gemm x700": lambda: [a @ b for _ in range(700)],
        "bf16 gemm x10": lambda: [a @ b for _ in range(10)],
        "bf16 gemm x1": lambda: a @ b,
        "fp32 simt gemm x20": lambda: [af @ bf for _ in range(20)],
        "copy 4GB x100": lambda: [big2.copy_(big) for _ in range(100)],
    }
    for _ in range(2):
        for name, fn in cases.items():
            ms, m = window(h, fn)
            print(f"{name:20s} {ms:9.2f} ms  {m}")


if __name__ == "__main__":
    main()
