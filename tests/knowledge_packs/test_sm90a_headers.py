"""The Hopper pack headers compile for sm_90a and emit the SASS they promise.

Two nvcc invocations per session (module-scoped fixtures): one compiles a translation unit per header
with that header included first (each header is self-contained), one builds a host program whose
kernel calls every wrapper; cuobjdump then shows each wrapper's instruction family, and the host part
exercises the tensor-map argument checks (which run before any driver call, so no GPU is needed).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADERS = ROOT / "knowledge_packs" / "sm90a" / "headers"
HEADER_NAMES = [
    "common.cuh",
    "mbarrier.cuh",
    "cluster.cuh",
    "tma.cuh",
    "tma_host.cuh",
    "wgmma.cuh",
    "matrix.cuh",
    "sm90a.cuh",
]
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"

# Calls every device wrapper once (values are irrelevant: it is compiled and disassembled, never run
# on a GPU), and checks the host-side tensor-map validation in main().
EXERCISE = r"""
#include "sm90a.cuh"
#include <cstring>
using namespace sm90;

__global__ void __launch_bounds__(384, 1) every_wrapper(const __grid_constant__ CUtensorMap m, float* out) {
    extern __shared__ __align__(1024) uint8_t smem[];
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 65536);
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        mbar_init(bar + 1, 2);
        fence_mbarrier_init();
        tma_prefetch_descriptor(&m);
    }
    __syncthreads();
    cluster_sync();
    const uint64_t pol = l2_policy_evict_first() ^ l2_policy_evict_last() ^ l2_policy_evict_normal();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, 4096);
        tma_load(smem, &m, bar, 0, 0);
        tma_load(smem, &m, bar, 0, 0, 1);
        tma_load(smem, &m, bar, 0, 0, 1, 2);
        tma_load(smem, &m, bar, 0, 0, 1, 2, 3);
        tma_load_hint(smem, &m, bar, pol, 0, 0);
        tma_load_hint(smem, &m, bar, pol, 0, 0, 1, 2, 3);
        tma_load_multicast(smem, &m, bar, uint16_t(3), 0, 0);
        tma_load_multicast(smem, &m, bar, uint16_t(3), 0, 0, 1, 2, 3);
        tma_load_multicast_hint(smem, &m, bar, uint16_t(3), pol, 0, 0);
        tma_load_multicast_hint(smem, &m, bar, uint16_t(3), pol, 0, 0, 4, 5);
        bulk_load(smem, out, 256, bar);
        tma_prefetch_2d(&m, 0, 0);
        mbar_arrive_cluster(bar + 1, cluster_ctarank() ^ 1);
        mbar_arrive_cluster_release(bar + 1, cluster_ctarank());
        mbar_expect_tx(bar, 16);
        mbar_arrive_cnt(bar + 1, 1);
        mbar_arrive(bar + 1);
    }
    mbar_wait(bar, 0);
    mbar_wait<true>(bar + 1, 0);
    const bool t = mbar_test_wait(bar, 1) && mbar_wait_bounded(bar, 1, 1000);
    float acc[128], acc128[64], acc64[32];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc128[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) acc64[i] = 0.f;
    if (warpgroup_id() > 0) {
        setmaxnreg_inc<232>();
        const uint64_t d128 = kmajor_desc<SmemSwizzle::k128B>(smem_u32(smem));
        const uint64_t d64 = kmajor_desc<SmemSwizzle::k64B>(smem_u32(smem + 16384));
        const uint64_t d32 = kmajor_desc<SmemSwizzle::k32B>(smem_u32(smem + 32768));
        const uint64_t dn = make_smem_desc(smem_u32(smem), 128, 256, SmemSwizzle::kNone);
        uint32_t a[4], at[4], a2, a3;
        ldmatrix_x4(smem_u32(smem) + lane_id() * 16, a);
        ldmatrix_x4_trans(smem_u32(smem) + lane_id() * 16, at);
        const uint32_t a1 = ldmatrix_x1(smem_u32(smem));
        ldmatrix_x2(smem_u32(smem), a2, a3);
        wgmma_fence();
        wgmma_ss<256>(acc, d128, desc_advance(d64, 32), t);
        wgmma_ss<128>(acc128, d128, d32, true);
        wgmma_ss<64>(acc64, dn, d64, true);
        wgmma_ss<64, 1, 1>(acc64, dn, d64, true);
        wgmma_rs<256>(acc, a, d64, true);
        wgmma_rs<128>(acc128, at, d64, true);
        wgmma_rs<64, 1>(acc64, a, d64, true);
        wgmma_commit();
        wgmma_wait<1>();
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
        const uint32_t packed = pack_bf16x2(acc[0], acc[1]);
        stmatrix_x4(smem_u32(smem) + swizzle128_offset(lane_id(), 1), packed, a1, a2, a3);
        stmatrix_x4_trans(smem_u32(smem) + swizzle64_offset(lane_id(), 1), a[0], a[1], a[2], a[3]);
        stmatrix_x2(smem_u32(smem) + swizzle32_offset(lane_id(), 1), a1, a2);
        stmatrix_x1(smem_u32(smem), a3);
        fence_proxy_async_shared();
        named_barrier_sync(1, 256);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 128; ++i) s += acc[i];
#pragma unroll
        for (int i = 0; i < 64; ++i) s += acc128[i] * acc_row(i, threadIdx.x % 128) + acc_col(i, 0);
#pragma unroll
        for (int i = 0; i < 32; ++i) s += acc64[i];
        out[threadIdx.x] = s;
        if (threadIdx.x == 128) {
            tma_store(&m, smem, 0, 0);
            tma_store(&m, smem, 0, 0, 1);
            tma_store(&m, smem, 0, 0, 1, 2);
            tma_store(&m, smem, 0, 0, 1, 2, 3);
            tma_store_add_2d(&m, smem, 0, 0);
            tma_store_commit();
            tma_store_wait_read<1>();
            tma_store_wait<0>();
            bulk_store(out, smem, 256);
            tma_store_commit();
            tma_store_wait<0>();
        }
    } else {
        setmaxnreg_dec<40>();
        if (elect_one_sync()) named_barrier_arrive(2, 64);
        __syncwarp();
        fence_proxy_async();
        fence_proxy_async_global();
        fence_acq_rel_cluster();
        out[threadIdx.x] = float(sm_id() + warp_id() + cluster_size() + cluster_id_x() + cluster_count_x() +
                                 uint32_t(global_timer_ns()));
        const uint32_t r = mapa_shared(smem_u32(smem), 1);
        st_shared_cluster_u32(r, 5u);
        out[1] = float(ld_shared_cluster_u32(r));
        if (out[2] > 1e30f) trap_now();
    }
    cluster_sync();
    if (threadIdx.x == 0) mbar_inval(bar);
}

// Host checks that run before the driver is needed; each prints one line "name: message".
static void report(const char* name, const std::string& msg) { std::printf("%s: %s\n", name, msg.c_str()); }

int main() {
    CUtensorMap m;
    alignas(16) static char buf[1 << 16];
    const uint64_t dims[2] = {64, 64};
    const uint64_t strides[1] = {128};
    const uint32_t box_ok[2] = {64, 64}, box_big[2] = {64, 512}, box_wide[2] = {128, 64};
    report("misaligned", make_tensor_map_bf16(&m, buf + 8, 2, dims, strides, box_ok, Swizzle::k128B));
    report("box_too_big", make_tensor_map_bf16(&m, buf, 2, dims, strides, box_big, Swizzle::k128B));
    report("box_wider_than_span", make_tensor_map_bf16(&m, buf, 2, dims, strides, box_wide, Swizzle::k64B));
    const uint64_t bad_stride[1] = {100};
    report("bad_stride", make_tensor_map_bf16(&m, buf, 2, dims, bad_stride, box_ok, Swizzle::k128B));
    report("bad_rank", make_tensor_map_bf16(&m, buf, 6, dims, strides, box_ok, Swizzle::k128B));
    std::printf("span128=%u span64=%u span32=%u\n", swizzle_span_bytes(Swizzle::k128B),
                swizzle_span_bytes(Swizzle::k64B), swizzle_span_bytes(Swizzle::k32B));
    return 0;
}
"""

# Wrapper family -> SASS opcode that must appear in the exercise kernel.
EXPECTED_SASS = {
    "wgmma (all N, SS and RS)": r"HGMMA\.64x256x16\.F32\.BF16",
    "wgmma n128": r"HGMMA\.64x128x16\.F32\.BF16",
    "wgmma n64": r"HGMMA\.64x64x16\.F32\.BF16",
    "wgmma fence": r"WARPGROUP\.ARRIVE",
    "wgmma wait": r"WARPGROUP\.DEPBAR\.LE",
    "TMA load 2d": r"UTMALDG\.2D ",
    "TMA load 3d": r"UTMALDG\.3D",
    "TMA load 4d": r"UTMALDG\.4D",
    "TMA load 5d": r"UTMALDG\.5D",
    "TMA multicast": r"UTMALDG\.\dD\.MULTICAST",
    "TMA store 2d-5d": r"UTMASTG\.5D",
    "TMA reduce": r"UTMAREDG\.2D\.ADD",
    "TMA L2 prefetch": r"UTMAPF\.L2\.2D",
    "tensormap prefetch": r"UTMACCTL\.PF",
    "bulk copy": r"UBLKCP",
    "mbarrier init": r"SYNCS\.EXCH\.64",
    "mbarrier wait": r"SYNCS\.PHASECHK\.TRANS64\.TRYWAIT",
    "mbarrier arrive": r"SYNCS\.ARRIVE\.TRANS64",
    "stmatrix": r"STSM\.16\.M88\.4",
    "stmatrix trans": r"STSM\.16\.MT88\.4",
    "ldmatrix": r"LDSM\.16\.M88\.4",
    "ldmatrix trans": r"LDSM\.16\.MT88\.4",
    "setmaxnreg inc": r"USETMAXREG\.TRY_ALLOC",
    "setmaxnreg dec": r"USETMAXREG\.DEALLOC",
    "cluster barrier": r"UCGABAR_ARV",
    "elect": r"ELECT",
    "trap": r"BPT\.TRAP",
}


def _toolchain():
    from ptxgym.cpu.toolchain import find_toolchain

    return find_toolchain()


def _nvcc(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    tc = _toolchain()
    return subprocess.run(
        [str(tc.nvcc), "-std=c++17", GENCODE, f"-I{HEADERS}", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=tc.subprocess_env(),
    )


@pytest.fixture(scope="module")
def per_header(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    """One nvcc call compiling a TU per header, the header first, plus a kernel touching it."""
    d = tmp_path_factory.mktemp("sm90a_headers")
    files = []
    for name in HEADER_NAMES:
        src = d / f"tu_{name.replace('.', '_')}.cu"
        src.write_text(f'#include "{name}"\n__global__ void k(unsigned* o) {{ o[0] = threadIdx.x; }}\n')
        files.append(src.name)
    return _nvcc(["-c", "-O3", "-Xptxas", "-v", *files], d)


@pytest.fixture(scope="module")
def exercise(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, str, str]:
    """Build the every-wrapper program; return (nvcc result, SASS text, host program stdout)."""
    d = tmp_path_factory.mktemp("sm90a_exercise")
    (d / "exercise.cu").write_text(EXERCISE)
    tc = _toolchain()
    # tma_host.cuh calls cuTensorMapEncodeTiled by name: link the driver (the toolkit's or the generated
    # stub) and let the program load that file as libcuda.so.1. It never reaches the driver: every call
    # it makes fails a check first.
    link = ["-L", str(tc.libcuda_dir), "-lcuda"]
    proc = _nvcc(["-O3", "-Xptxas", "-v", "exercise.cu", "-o", "exercise", *link], d)
    if proc.returncode != 0:
        return proc, "", ""
    (d / "libcuda.so.1").symlink_to(tc.libcuda_dir / "libcuda.so")
    assert tc.cuobjdump is not None, "cuobjdump not found (install nvidia-cuda-cuobjdump)"
    sass = subprocess.run(
        [str(tc.cuobjdump), "--dump-sass", str(d / "exercise")],
        capture_output=True,
        text=True,
        timeout=120,
        env=tc.subprocess_env(),
    ).stdout
    env = {**os.environ, "LD_LIBRARY_PATH": str(d)}
    host = subprocess.run([str(d / "exercise")], capture_output=True, text=True, timeout=60, env=env).stdout
    return proc, sass, host


@pytest.mark.slow
@pytest.mark.nvcc
def test_every_header_compiles_alone(per_header: subprocess.CompletedProcess) -> None:
    assert per_header.returncode == 0, per_header.stderr[-4000:]
    assert "warning" not in per_header.stderr.lower(), per_header.stderr[-4000:]


@pytest.mark.nvcc
def test_every_wrapper_compiles_for_sm90a(exercise: tuple) -> None:
    proc, _, _ = exercise
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "error" not in proc.stderr.lower()


@pytest.mark.nvcc
@pytest.mark.parametrize("family", sorted(EXPECTED_SASS))
def test_wrapper_emits_its_instruction(exercise: tuple, family: str) -> None:
    _, sass, _ = exercise
    assert sass, "no SASS (build failed)"
    assert re.search(EXPECTED_SASS[family], sass), f"{family}: no {EXPECTED_SASS[family]} in the SASS"


@pytest.mark.nvcc
def test_inline_wait_keeps_wgmma_pipelined(exercise: tuple) -> None:
    """The trap in mbar_wait is inline: ptxas must not report wgmma serialisation (C7510)."""
    proc, _, _ = exercise
    assert "C7510" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.nvcc
def test_tensor_map_arguments_are_checked_before_the_driver(exercise: tuple) -> None:
    _, _, host = exercise
    lines = dict(line.split(": ", 1) for line in host.splitlines() if ": " in line)
    assert "16-byte aligned" in lines["misaligned"]
    assert "out of [1, 256]" in lines["box_too_big"]
    assert "wider than the 64-byte swizzle span" in lines["box_wider_than_span"]
    assert "multiple of 16" in lines["bad_stride"]
    assert "rank must be 1..5" in lines["bad_rank"]
    assert "span128=128 span64=64 span32=32" in host


def test_headers_are_documented_and_guarded() -> None:
    """Each header: #pragma once, namespace sm90, and a comment before every wrapper."""
    for name in HEADER_NAMES:
        text = (HEADERS / name).read_text()
        assert "#pragma once" in text, name
        if name == "sm90a.cuh":
            continue
        assert "namespace sm90" in text, name
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("__device__ __forceinline__") or line.startswith("inline std::string"):
                # A comment must precede the wrapper (or its group) within the same paragraph.
                j = i - 1
                while j >= 0 and lines[j].strip() and not lines[j].lstrip().startswith("//"):
                    j -= 1
                assert j >= 0 and lines[j].lstrip().startswith("//"), f"{name}:{i + 1} has no comment"
