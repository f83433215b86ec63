"""FlashInfer's kernels for the GQA baselines: compiled ahead of time, checked, and completed on a GPU.

FlashInfer compiles each kernel module (a TVM-FFI shared object) with nvcc on first use, minutes per
module. A module placed at ``<flashinfer package>/data/aot/<name>/<name>.so`` is loaded as is instead
(FlashInfer's own ahead-of-time path: no sources, no ninja, no write). The GQA baselines
(``ptxgym/evaluation/sandboxed/flashinfer_baselines.py``) ask for two modules on sm_90a with the shipped
workloads (FlashInfer's ``backend="auto"``): the FA3 batch-prefill module (ragged and paged prefill) and
the CUDA-core batch-decode module, both bf16, head_dim 128, int32 indices (``MODULES``).

Usage (repository root, FlashInfer importable, e.g. PYTHONPATH=/tmp/fisite):
  python bench/flashinfer_aot.py specs             # the module names (no GPU)
  python bench/flashinfer_aot.py build OUT         # compile them for sm_90a: OUT/<name>/<name>.so (no GPU)
  python bench/flashinfer_aot.py sources           # the package files compiling them reads (after build)
  python bench/flashinfer_aot.py check             # GPU: run the three baselines with FlashInfer's JIT off
  python bench/flashinfer_aot.py install-missing   # GPU: JIT-compile what check finds missing into data/aot

``check`` plans and runs each baseline on a small batch with ``FLASHINFER_DISABLE_JIT=1`` and compares it
with the definition's reference: a module the wrapper asks for that is not precompiled is named (its
``MissingJITCacheError``), never compiled silently. ``install-missing`` compiles those (nvcc and ninja on
the GPU machine: minutes per module, FA3 prefill the longest) and copies them into data/aot, where every
later worker finds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "evaluation"))


def _specs():
    import torch
    from flashinfer.jit.attention.modules import gen_batch_decode_module, gen_batch_prefill_module

    bf, i32 = torch.bfloat16, torch.int32
    # (dtype_q, dtype_kv, dtype_o, dtype_idx, head_dim_qk, head_dim_vo, pos_encoding, sliding window,
    #  logits soft cap[, fp16 qk reduction]): the wrappers' own arguments for the GQA definitions.
    return [
        gen_batch_prefill_module("fa3", bf, bf, bf, i32, 128, 128, 0, False, False, False),
        gen_batch_decode_module(bf, bf, bf, i32, 128, 128, 0, False, False),
    ]


MODULES = (
    "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
    "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm90",
    "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
    "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",
)
"""The module names ``_specs`` gives with FlashInfer 0.7.4 (``specs`` prints them from the installed one)."""


def specs() -> int:
    for spec in _specs():
        print(spec.name, "(listed)" if spec.name in MODULES else "(NOT in MODULES: update it)")
    return 0


def build(out: Path) -> int:
    for spec in _specs():
        t0 = time.perf_counter()
        spec.build()
        dst = out / spec.name / f"{spec.name}.so"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(spec.jit_library_path, dst)
        print(
            f"{spec.name}: {dst.stat().st_size / 2**20:.1f} MiB, {time.perf_counter() - t0:.0f} s", flush=True
        )
    return 0


def sources() -> int:
    """Print the package files (relative to it) that compiling ``_specs`` reads: what JIT needs on a GPU.

    The generator's reads (templates under data/csrc) are seen with an audit hook; the compiler's (headers
    under data/include, data/cutlass, ...) come from the dependencies ninja recorded in ``build``.
    """
    import flashinfer

    pkg = Path(flashinfer.__file__).resolve().parent
    seen: set[Path] = set()

    def hook(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], str | Path):
            seen.add(Path(args[0]).resolve())

    sys.addaudithook(hook)
    for spec in _specs():  # ninja keeps the compiler's depfiles in its .ninja_deps log
        deps = subprocess.run(
            ["ninja", "-C", str(spec.build_dir), "-t", "deps"], capture_output=True, text=True, check=True
        ).stdout
        seen.update(Path(line.strip()).resolve() for line in deps.splitlines() if line.startswith(" "))
    for path in sorted(seen):
        if path.is_relative_to(pkg / "data") and path.is_file():
            print(path.relative_to(pkg.parent))
    return 0


def _run_all() -> list[str]:
    """Run each baseline once on a small batch and compare with the reference; problems as lines."""
    import torch
    from evaltest_helpers import GQA_PARAMS, small_gqa

    from ptxgym.evaluation.sandboxed import library_baselines
    from ptxgym.evaluation.trusted import inputs as inputs_mod

    problems = []
    for name in sorted(GQA_PARAMS):
        task = small_gqa(name)
        ns = inputs_mod.load_reference(task)
        inputs = inputs_mod.generate_inputs(task, ns, seed=1, device="cuda")
        want = inputs_mod.run_reference(task, ns, inputs)
        outs = [torch.empty_like(t) for t in want.values()]
        args = [*inputs.values(), *outs]
        try:
            library_baselines.bind(task.baseline.function, {}, [args])(*args)
        except Exception as exc:  # noqa: BLE001 - each problem is reported, the others still run
            spec = getattr(exc, "spec", None)
            what = f"module {spec.name} is not precompiled" if spec is not None else f"{type(exc).__name__}"
            problems.append(f"{name}: {what}: {str(exc)[:300]}")
            continue
        for (out, ref), got in zip(want.items(), outs, strict=True):
            err = (got.float() - ref.float()).abs().max().item()
            print(f"{name} {out}: max abs error {err:.2e}")
            if not err <= 2e-2:  # bf16 output, fp32 natural-log LSE
                problems.append(f"{name}: {out} differs from the reference by {err:.3g}")
    return problems


def check() -> int:
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    problems = _run_all()
    print("\n".join(problems) or "all FlashInfer modules of the GQA baselines are precompiled")
    return 1 if problems else 0


def install_missing() -> int:
    """Compile the modules of ``_specs`` missing from data/aot (JIT, minutes each) and put them there."""
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    if not _run_all():
        return 0
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.cpp_ext import get_cuda_path

    os.environ.pop("FLASHINFER_DISABLE_JIT")
    curand = jit_env.FLASHINFER_DATA / "curand" / "include"  # the bundle's, for a toolkit without them
    if not Path(get_cuda_path(), "include", "curand_kernel.h").exists() and curand.is_dir():
        os.environ.setdefault("FLASHINFER_EXTRA_CUDAFLAGS", f"-I{curand}")
    for spec in _specs():
        dst = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
        if dst.exists():
            continue
        t0 = time.perf_counter()
        spec.build()
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(spec.jit_library_path, dst)
        print(f"compiled {spec.name} in {time.perf_counter() - t0:.0f} s into {dst}", flush=True)
    return check()  # a module outside _specs is named here; the wrappers then JIT it on first use


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("specs", "build", "sources", "check", "install-missing"):
        print(__doc__)
        return 2
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", "/tmp/fiws")
    if argv[0] in ("specs", "build", "sources"):  # no GPU to detect the architecture from
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    if argv[0] == "build":
        return build(Path(argv[1]))
    return {"specs": specs, "sources": sources, "check": check, "install-missing": install_missing}[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
