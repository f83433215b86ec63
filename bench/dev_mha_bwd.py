"""Build, check and time the expert attention-backward solutions (MhaBwd.cu / MhaBwdCausal.cu) on an H200.

A developer script, not the team evaluator; the twin of bench/dev_mha_fwd.py (whose toolchain, nvcc
command, SASS dump, worker runner and timer it imports). The CPU part compiles variants of the solution
(compile-time knobs, see VARIANTS) with the DESIGN.md nvcc flags and records, per kernel, the ptxas
resources and a SASS census; ptxas warnings (C7510/C7517: wgmma serialised) are printed loudly. The GPU
part runs every variant in its own subprocess with a time limit (a trapping or hanging kernel cannot spoil
the next one; what it printed before dying is kept) and:

* checks run(Q, K, V, O, dO, LSE, dQ, dK, dV) on (1,1,128), (1,2,256), (2,3,1000) and the task shape
  (4,48,4096): fresh randn bf16 Q, K, V, dO; O (rounded to bf16) and LSE from an fp32 forward; outputs
  poisoned with ptxgym's signalling-NaN pattern (never-written elements are told apart from computed
  NaNs); inputs must come back bit-identical. The reference dQ, dK, dV come from explicit fp32 formulas
  (the definition's: P = exp(S*scale - LSE), dV = P^T dO, dP = dO V^T, delta = rowsum(dO*O),
  dS = P*(dP - delta), dQ = scale dS K, dK = scale dS^T Q), rounded to bf16 as the definition's reference
  is. The element rule is the evaluator's (|err| <= 1e-2 or |err| <= 1e-2 |ref|), admitting 1e-6 of the
  elements, with rel-norm <= 2e-2; per tensor the report gives mismatches, unwritten and NaN counts,
  max abs error with its index, the first bad index, and where the bad elements are: per 64-row and
  128-row block of S, per 16-column group of D, per 16-row group inside a 64-row block, per head.
* times it at the task shape against cuDNN's backward
  (ptxgym.evaluation.sandboxed.library_baselines.mha_bwd_cudnn, the task's baseline, fed the same O/dO/LSE) in
  the same process: CUDA events, a 256 MB buffer zeroed before every call, interleaved trials, medians; FLOPs
  10 B H S^2 D (half causal). Then: cuDNN's own outputs against the same reference (a harness sanity check),
  the last timed output re-checked and compared bitwise with the first call's, and a torch.profiler breakdown
  per kernel (time, grid, block, registers, shared memory) of both.

    python bench/dev_mha_bwd.py sync                       # regenerate MhaBwdCausal.cu from MhaBwd.cu
    python bench/dev_mha_bwd.py build [--only NAME ...]    # CPU: bench/build/mha_bwd/<variant>.so + manifest
    python bench/dev_mha_bwd.py gpu OUTDIR [--only ...]    # GPU: check + time every built variant
    python bench/dev_mha_bwd.py ncu SO OUTDIR [--causal]   # GPU: ncu executed HGMMA / UTMALDG / ... counts
    python bench/dev_mha_bwd.py all OUTDIR [--budget-s 400]  # GPU: gpu, then ncu of base and causal,
                                                           #      OUTDIR/summary.txt + results.json

The device command (repo root, after the wheel install: ptxgym gives the poison pattern, the cuDNN
baseline and the ncu CSV parser; carry "bench/build/mha_bwd" built here with `sync` + `build`; objects
that are missing, do not load, or were built from other sources or headers are rebuilt there with its
nvcc, which is printed loudly):

    timeout 570 python3 bench/dev_mha_bwd.py all "$OUT" --budget-s 400

Limits: a variant's worker is killed after --per-variant s (150) or --quiet s without a line (60); `all`
starts no step after --budget-s and lets a started one run at most 120 s past it. A shape the kernel
refuses with an exception is reported and the next one still runs if CUDA is healthy; a trap ends that
variant's worker. `gpu --small-only` skips the task shape (and timing) for a quick correctness pass.
`gpu` and `all` exit 0 only when every variant passed every check.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # dev_mha_fwd beside this file
from dev_mha_fwd import nvcc_command, randn_bf16, run_worker, sass_text, time_calls  # noqa: E402
from dev_mha_fwd import reference as forward_reference  # noqa: E402  (fp32 O and LSE, chunked over heads)

ROOT = Path(__file__).resolve().parents[1]
PACKS = ROOT / "knowledge_packs"
HEADERS = PACKS / "sm90a" / "headers"
SOLUTIONS = PACKS / "sm90a" / "solutions"
BWD = SOLUTIONS / "MhaBwd.cu"
CAUSAL = SOLUTIONS / "MhaBwdCausal.cu"
BUILD = ROOT / "bench" / "build" / "mha_bwd"
STANDIN_BUILD = ROOT / "bench" / "build" / "mha_bwd_standin"  # `build --source`: never run by `gpu`
B, H, S, D = 4, 48, 4096, 128
TOL, REL_NORM, ALLOWED_FRACTION = 1e-2, 2e-2, 1e-6  # the backward tasks' tolerance
SHAPES = [(1, 1, 128), (1, 2, 256), (2, 3, 1000), (B, H, S)]  # (B, H, S); the task shape last
GRADS = ("dQ", "dK", "dV")

# Variants: name -> extra -D flags on top of the file's defaults. A variant is causal iff its flags hold
# -DMHA_CAUSAL=1; causal variants compile the shipped MhaBwdCausal.cu (its own knob defaults included).
VARIANTS: dict[str, list[str]] = {
    "base": [],
    "causal": ["-DMHA_CAUSAL=1"],
}

# Knobs whose shipped value differs for the causal file (chosen from the GPU results), e.g. {"MHA_STAGES": 3}.
CAUSAL_DEFAULTS: dict[str, int] = {}

CAUSAL_BANNER = """// MhaBwdCausal.cu - expert CAUSAL attention backward (sm_90a): the kernels of MhaBwd.cu
// compiled with MHA_CAUSAL=1 (key j <= query i). GENERATED from MhaBwd.cu by
// `python bench/dev_mha_bwd.py sync`; edit MhaBwd.cu, then regenerate.
#ifndef MHA_CAUSAL
#define MHA_CAUSAL 1
#endif
"""

# SASS opcodes counted per kernel (exact opcode, any modifiers).
SASS_KEYS = [
    "HGMMA",
    "UTMALDG",
    "UTMASTG",
    "UTMAREDG",
    "UBLKCP",
    "UBLKRED",
    "REDG",
    "RED",
    "ATOMG",
    "WARPGROUP.DEPBAR",
    "WARPGROUP.ARRIVE",
    "BAR.SYNC",
    "BAR.ARV",
    "SYNCS",
    "MUFU.EX2",
    "LDL",
    "STL",
    "USETMAXREG",
]
NCU_FAMILIES = ("HGMMA", "UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED", "REDG", "RED", "ATOMG")

# ------------------------------------------------------------------------------------------ CPU side


def is_causal(flags: list[str]) -> bool:
    return "-DMHA_CAUSAL=1" in flags


def causal_source(bwd_text: str) -> str:
    """MhaBwdCausal.cu as generated from the text of MhaBwd.cu (+ the causal file's own knob defaults)."""
    knobs = "".join(f"#ifndef {k}\n#define {k} {v}\n#endif\n" for k, v in CAUSAL_DEFAULTS.items())
    return CAUSAL_BANNER + knobs + bwd_text


def missing_source_message(path: Path) -> str:
    return (
        f"{path} does not exist yet: write it first (the lead's MhaBwd.cu), or point `build` at a "
        f"stand-in with --source FILE"
    )


def sync(src: Path = BWD, dst: Path = CAUSAL) -> int:
    if not src.exists():
        print(missing_source_message(src), file=sys.stderr)
        return 1
    dst.write_text(causal_source(src.read_text()))
    print(f"wrote {dst}")
    return 0


def inputs_digest(source: Path) -> str:
    """sha256 of the source and every pack header (what an object was built from)."""
    h = hashlib.sha256(source.read_bytes())
    for header in sorted(HEADERS.glob("*.cuh")):
        h.update(header.name.encode() + header.read_bytes())
    return h.hexdigest()[:16]


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> short readable name (c++filt where present; argument lists dropped)."""
    try:
        out = subprocess.run(
            ["c++filt"], input="\n".join(names), capture_output=True, text=True, timeout=20
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        out = names
    if len(out) != len(names):
        out = names
    return {m: re.sub(r"^void ", "", d.split("(")[0]) for m, d in zip(names, out, strict=True)}


def ptxas_report(log: str) -> list[dict]:
    """Per entry function of a ``-Xptxas -v`` log: registers, barriers, static smem, stack and spills."""
    kernels = []
    for part in re.split(r"Compiling entry function '", log)[1:]:
        entry = {"mangled": part.split("'", 1)[0]}
        m = re.search(r"Used (\d+) registers", part)
        entry["regs"] = int(m.group(1)) if m else None
        m = re.search(r"used (\d+) barriers", part)
        entry["barriers"] = int(m.group(1)) if m else None
        m = re.search(r"(\d+) bytes smem", part)
        entry["smem_static"] = int(m.group(1)) if m else 0
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", part)
        entry["stack"] = int(m.group(1)) if m else None
        entry["spill"] = [int(m.group(2)), int(m.group(3))] if m else None
        kernels.append(entry)
    names = demangle([k["mangled"] for k in kernels]) if kernels else {}
    for k in kernels:
        k["name"] = names[k["mangled"]]
    return kernels


def warnings_of(log: str) -> tuple[list[str], list[str]]:
    """(ptxas warnings, other compiler warnings), each line once, in order."""
    ptxas, other = [], []
    for line in dict.fromkeys(ln.strip() for ln in log.splitlines()):
        if "warning" not in line.lower():
            continue
        (ptxas if line.startswith("ptxas") or re.search(r"\bC75\d\d\b", line) else other).append(line)
    return ptxas, other


def sass_by_kernel(sass: str) -> dict[str, dict[str, int]]:
    """Census of SASS_KEYS per function of a ``cuobjdump --dump-sass`` listing (mangled names)."""
    out = {}
    for part in re.split(r"(?:^|\n)\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1) if "\n" in part else (part, "")
        out[name.strip()] = {k: len(re.findall(rf"\b{re.escape(k)}(?![A-Z0-9_])", body)) for k in SASS_KEYS}
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def build_one(name: str, flags: list[str], source: Path, out_dir: Path, cudart: str) -> dict:
    out = out_dir / f"{name}.so"
    cmd = nvcc_command(source, out, [f"-I{HEADERS}", *flags], cudart)  # both pack include styles
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    info = {
        "tag": name,
        "variant": name,
        "causal": is_causal(flags),
        "flags": flags,
        "cudart": cudart,
        "source": _rel(source),
        "digest": inputs_digest(source),
        "so": _rel(out),
        "ok": proc.returncode == 0,
        "build_s": round(time.time() - start, 1),
    }
    info["kernels"] = ptxas_report(log)
    info["ptxas_warnings"], info["other_warnings"] = warnings_of(log)
    if proc.returncode != 0:
        info["log"] = log[-4000:]
        return info
    sass = sass_text(out)
    if sass is None:
        info["sass_error"] = "cuobjdump not found"
    else:
        census = sass_by_kernel(sass)
        for k in info["kernels"]:
            k["sass"] = census.get(k["mangled"], {})
    return info


def build_report(r: dict) -> str:
    lines = [
        f"{r['tag']:12s} ok={r['ok']} causal={r['causal']} flags={r['flags']} {r['build_s']} s "
        f"source={r['source']} so={r['so']}"
    ]
    for k in r.get("kernels", []):
        sass = " ".join(f"{n}={c}" for n, c in k.get("sass", {}).items() if c)
        lines.append(
            f"    {k['name'][:60]:60s} regs={k['regs']} spill(st/ld B)={k['spill']} "
            f"stack={k['stack']} smem_static={k['smem_static']} bar={k['barriers']} | {sass}"
        )
    for w in r.get("ptxas_warnings", []):
        lines.append(f"!!!!!!!! PTXAS WARNING [{r['tag']}]: {w}")
    if r.get("other_warnings"):
        others = r["other_warnings"]
        lines.append(f"    {len(others)} other compiler warnings, first: {others[:3]}")
    if not r["ok"]:
        lines.append(f"!!!!!!!! BUILD FAILED [{r['tag']}]\n{r.get('log', '')}")
    return "\n".join(lines)


def shipped_source(name: str) -> Path:
    return CAUSAL if is_causal(VARIANTS[name]) else BWD


def build(only: list[str] | None, jobs: int, cudart: str, source: Path | None = None) -> int:
    """Compile the selected variants into BUILD and merge them into its manifest.

    ``source`` (a stand-in, to test this script) replaces MhaBwd.cu and MhaBwdCausal.cu and builds into
    STANDIN_BUILD instead, which `gpu` never looks at.
    """
    names = [n for n in VARIANTS if not only or n in only]
    if not names:
        print(f"no variant selected; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 1
    if source is not None and not source.exists():
        print(f"--source {source} does not exist", file=sys.stderr)
        return 1
    if source is None:
        if not BWD.exists():
            print(missing_source_message(BWD), file=sys.stderr)
            return 1
        if any(is_causal(VARIANTS[n]) for n in names) and (
            not CAUSAL.exists() or CAUSAL.read_text() != causal_source(BWD.read_text())
        ):
            print(
                f"{CAUSAL.name} is missing or stale: run `python bench/dev_mha_bwd.py sync`", file=sys.stderr
            )
            return 1
    out_dir = STANDIN_BUILD if source else BUILD
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(n: str) -> dict:
        return build_one(n, VARIANTS[n], source or shipped_source(n), out_dir, cudart)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, names))
    for r in results:
        print(build_report(r), flush=True)
    manifest = out_dir / "manifest.json"  # merged: a partial build keeps the other variants' entries
    kept = [
        e
        for e in (json.loads(manifest.read_text()) if manifest.exists() else [])
        if e["tag"] not in {r["tag"] for r in results}
    ]
    manifest.write_text(json.dumps(kept + results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


# ------------------------------------------------------------------------------------ reference math


def backward_reference(q, k, v, o, do, lse, causal: bool):  # noqa: ANN001, ANN201 - torch tensors
    """fp32 (dQ, dK, dV) from the given forward state, explicit formulas, a few heads at a time."""
    import torch

    bb, hh, ss, dd = q.shape
    scale = 1.0 / math.sqrt(dd)
    flat = [x.reshape(bb * hh, ss, dd) for x in (q, k, v, o, do)]
    lsef = lse.reshape(bb * hh, ss).float()
    grads = [torch.empty(bb * hh, ss, dd, dtype=torch.float32, device=q.device) for _ in range(3)]
    mask = torch.ones(ss, ss, dtype=torch.bool, device=q.device).tril() if causal else None
    step = max(1, (1 << 28) // (ss * ss))
    for i in range(0, bb * hh, step):
        sl = slice(i, i + step)
        qf, kf, vf, of, dof = (x[sl].float() for x in flat)
        p = torch.bmm(qf, kf.transpose(1, 2)).mul_(scale)  # scores [h, S, S]
        if mask is not None:
            p.masked_fill_(~mask, float("-inf"))
        p.sub_(lsef[sl][..., None]).exp_()  # P = exp(S*scale - LSE)
        grads[2][sl] = torch.bmm(p.transpose(1, 2), dof)  # dV = P^T dO
        ds = torch.bmm(dof, vf.transpose(1, 2))  # dP = dO V^T
        delta = (dof * of).sum(-1, keepdim=True)  # [h, S, 1]
        ds.sub_(delta).mul_(p)  # dS = P (dP - delta)
        del p
        grads[0][sl] = torch.bmm(ds, kf).mul_(scale)  # dQ = scale dS K
        grads[1][sl] = torch.bmm(ds.transpose(1, 2), qf).mul_(scale)  # dK = scale dS^T Q
        del ds
    return tuple(g.reshape(bb, hh, ss, dd) for g in grads)


def _at(t, flat: int) -> list[int]:  # noqa: ANN001
    idx = []
    for dim in reversed(t.shape):
        idx.append(flat % dim)
        flat //= dim
    return idx[::-1]


def diagnose(out, ref, unwritten) -> dict:  # noqa: ANN001
    """One output against its reference (the evaluator's rule) with where its errors are.

    ``out`` [B,H,S,D] (any dtype), ``ref`` the same shape, ``unwritten`` the bool mask of poison left in out.
    """
    import torch

    o, r = out.float(), ref.float()
    finite = torch.isfinite(o)
    diff = torch.where(finite, (o - r).abs(), torch.zeros((), device=o.device))
    bad = ((diff > TOL) & (diff > TOL * r.abs())) | ~finite
    n, nbad = o.numel(), int(bad.sum())
    n_unwritten = int(unwritten.sum())
    ref_norm = float(torch.linalg.vector_norm(r))
    rel_norm = float(torch.linalg.vector_norm(diff)) / ref_norm if ref_norm > 0 else 0.0
    res = {
        "mismatch": nbad,
        "allowed": int(ALLOWED_FRACTION * n),
        "numel": n,
        "unwritten": n_unwritten,
        "nonfinite_written": int((~finite).sum()) - n_unwritten,
        "rel_norm": rel_norm,
    }
    imax = int(diff.flatten().argmax())
    res["max_abs"] = float(diff.flatten()[imax])
    res["max_abs_at"] = _at(o, imax)
    res["max_abs_got_ref"] = [float(o.flatten()[imax]), float(r.flatten()[imax])]
    res["pass"] = (
        n_unwritten == 0 and res["nonfinite_written"] == 0 and nbad <= res["allowed"] and rel_norm <= REL_NORM
    )
    if nbad:
        first = int(bad.flatten().to(torch.uint8).argmax())
        res["first_bad"] = _at(o, first)
        res["first_bad_got_ref"] = [float(o.flatten()[first]), float(r.flatten()[first])]
        res.update(where_bad(bad))
    return res


def where_bad(bad) -> dict:  # noqa: ANN001
    """Counts of bad elements by block of S, column group of D, row group within a 64-row block, head."""
    import torch.nn.functional as F  # noqa: N812

    bb, hh, ss, dd = bad.shape
    per_row = bad.sum(-1)  # [B, H, S]
    rows = per_row.sum((0, 1))  # [S]
    res = {}
    for blk in (64, 128):
        counts = F.pad(rows, (0, (-ss) % blk)).view(-1, blk).sum(-1)
        nz = counts.nonzero().flatten().tolist()
        res[f"rows{blk}"] = {
            "bad_blocks": len(nz),
            "blocks": len(counts),
            "first": {i: int(counts[i]) for i in nz[:12]},
        }
    res["cols16"] = bad.sum((0, 1, 2)).view(-1, 16).sum(-1).tolist() if dd % 16 == 0 else None
    res["row16_in_64"] = F.pad(rows, (0, (-ss) % 64)).view(-1, 4, 16).sum((0, 2)).tolist()
    heads = per_row.sum(-1).flatten().nonzero().flatten().tolist()
    res["heads"] = {"bad": len(heads), "of": bb * hh, "first": [[i // hh, i % hh] for i in heads[:8]]}
    res["bad_row_fraction"] = float((per_row > 0).float().mean())
    return res


# ------------------------------------------------------------------------------------------ GPU side


def load(so: str):  # noqa: ANN201
    """The module's run(Q, K, V, O, dO, LSE, dQ, dK, dV), called on torch's current stream."""
    import tvm_ffi

    run = tvm_ffi.load_module(so)["run"]

    def fn(*tensors):  # noqa: ANN002
        with tvm_ffi.use_torch_stream():
            run(*tensors)

    return fn


def _bits(t):  # noqa: ANN001, ANN202
    import torch

    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def check(
    fn,
    shape: tuple[int, int, int],
    causal: bool,
    seed: int,
    keep: bool = False,  # noqa: ANN001, ANN201
    device: str = "cuda",
):
    """One call on fresh inputs, every output diagnosed; with ``keep`` also the tensors (for timing).

    Returns (result, tensors or None). ``device`` "cpu" serves the tests (with a torch stand-in for fn).
    """
    import torch

    from ptxgym.evaluation.compare import poison_, unwritten_mask

    bb, hh, ss = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, do = (
        torch.randn((bb, hh, ss, D), generator=gen, device=device).to(torch.bfloat16) for _ in range(4)
    )
    o32, lse = forward_reference(q, k, v, causal)
    o = o32.to(torch.bfloat16)  # the forward state the task hands over: O in bf16, LSE in fp32
    del o32
    inputs = {"Q": q, "K": k, "V": v, "O": o, "dO": do, "LSE": lse}
    saved = {n: t.clone() for n, t in inputs.items()}
    outs = {n: torch.empty_like(q) for n in GRADS}
    for t in outs.values():
        poison_(t)
    fn(q, k, v, o, do, lse, *outs.values())
    if device == "cuda":
        torch.cuda.synchronize()
    mutated = [n for n, t in inputs.items() if not torch.equal(_bits(t), _bits(saved[n]))]
    # The reference sees the trusted copies, not what the kernel may have left in its inputs.
    grads = backward_reference(*(saved[n] for n in ("Q", "K", "V", "O", "dO", "LSE")), causal)
    del saved
    refs = {n: g.to(torch.bfloat16) for n, g in zip(GRADS, grads, strict=True)}
    del grads
    res = {
        "shape": list(shape),
        "mutated_inputs": mutated,
        "tensors": {n: diagnose(outs[n], refs[n], unwritten_mask(outs[n])) for n in GRADS},
    }
    res["bad_tensors"] = [n for n in GRADS if not res["tensors"][n]["pass"]]
    res["pass"] = not mutated and not res["bad_tensors"]
    if not keep:
        return res, None
    first = {n: t.clone() for n, t in outs.items()}
    return res, {"inputs": inputs, "outs": outs, "refs": refs, "first": first}


def kernel_profile(call, calls: int = 3) -> list[dict]:  # noqa: ANN001
    """Device activity of ``calls`` calls per kernel (torch.profiler): time per call, launch, resources."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    agg: dict[str, dict] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        a = e.get("args", {})
        g = agg.setdefault(
            e["name"],
            {
                "name": re.sub(r"^void ", "", e["name"].split("(")[0])[:90],
                "cat": e["cat"],
                "launches": 0,
                "us": 0.0,
                "grid": a.get("grid"),
                "block": a.get("block"),
                "regs": a.get("registers per thread"),
                "smem": a.get("shared memory"),
                "occupancy": a.get("est. achieved occupancy %"),
            },
        )
        g["launches"] += 1
        g["us"] += float(e.get("dur", 0.0))
    rows = sorted(agg.values(), key=lambda g: -g["us"])
    for g in rows:
        g["us_per_call"] = round(g.pop("us") / calls, 2)
        g["launches"] //= calls
    return rows


def stages_at_task_shape(fn, state: dict, causal: bool):  # noqa: ANN001, ANN201 - yields result lines
    """cuDNN sanity check, interleaved timing, re-check of the last timed output, per-kernel profile."""
    import torch

    from ptxgym.evaluation.compare import unwritten_mask
    from ptxgym.evaluation.sandboxed.library_baselines import mha_bwd_cudnn

    args = [state["inputs"][n] for n in ("Q", "K", "V", "O", "dO", "LSE")]
    outs, refs = state["outs"], state["refs"]

    def cand() -> None:
        fn(*args, *outs.values())

    def cudnn():  # noqa: ANN202
        return mha_bwd_cudnn(*args, *outs.values(), causal=causal)

    try:
        got = cudnn()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported; our kernel is still timed alone
        yield {"stage": "cudnn_check", "error": f"{type(exc).__name__}: {exc}"[:1000]}
        cudnn = None
    else:
        yield {
            "stage": "cudnn_check",
            "tensors": {
                n: {
                    key: d[key]
                    for key in ("pass", "mismatch", "max_abs", "rel_norm", "unwritten", "nonfinite_written")
                }
                for n, t in zip(GRADS, got, strict=True)
                for d in [diagnose(t, refs[n], torch.zeros_like(t, dtype=torch.bool))]
            },
        }
        del got
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=args[0].device)
    calls = [cand] + ([cudnn] if cudnn else [])
    for _ in range(5):
        for call in calls:
            call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(3):  # interleaved trials
        for ts, call in zip(times, calls, strict=True):
            ts += time_calls(call, flush, 1, 15)
    bb, hh, ss, dd = args[0].shape
    flops = 10.0 * bb * hh * ss * ss * dd * (0.5 if causal else 1.0)
    line = {"stage": "time", "calls": len(times[0])}
    for who, ts in zip(("cand", "cudnn"), times, strict=False):
        med, qs = statistics.median(ts), statistics.quantiles(ts, n=4)
        line |= {
            f"{who}_ms": med,
            f"{who}_tflops": flops / med / 1e9,
            f"{who}_min_ms": min(ts),
            f"{who}_iqr_ms": qs[2] - qs[0],
        }
    if cudnn:
        line["speedup"] = line["cudnn_ms"] / line["cand_ms"]
    yield line
    yield {
        "stage": "recheck",
        "tensors": {
            n: {
                "pass": d["pass"],
                "mismatch": d["mismatch"],
                "max_abs": d["max_abs"],
                "bitwise_same_as_first_call": bool(torch.equal(_bits(outs[n]), _bits(state["first"][n]))),
            }
            for n in GRADS
            for d in [diagnose(outs[n], refs[n], unwritten_mask(outs[n]))]
        },
    }
    del flush
    try:
        theirs = kernel_profile(cudnn) if cudnn else []
        yield {"stage": "profile", "cand": kernel_profile(cand), "cudnn": theirs}
    except Exception as exc:  # noqa: BLE001 - the profiler is optional; the numbers above stand
        yield {"stage": "profile", "error": f"{type(exc).__name__}: {exc}"[:1000]}


def worker(so: str, causal: bool, shapes: list[tuple[int, int, int]]) -> int:
    """Check (each shape, the task shape last) and time one variant, one JSON line per stage.

    Stops at the first stage that raises: a trapped kernel leaves the CUDA context unusable.
    """
    import torch

    def emit(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    stage = "start"
    try:
        emit(
            {
                "stage": "env",
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "cudnn": torch.backends.cudnn.version(),
                "so": so,
                "causal": causal,
            }
        )
        stage = "load"
        fn = load(so)
        state = None
        for i, shape in enumerate(shapes):
            stage = f"check {shape}"
            try:
                res, st = check(fn, shape, causal, 100 + i, keep=tuple(shape) == (B, H, S))
            except Exception as exc:  # noqa: BLE001 - e.g. the kernel refuses this shape: go on if CUDA is fine
                emit(
                    {
                        "stage": "check",
                        "shape": list(shape),
                        "pass": False,
                        "mutated_inputs": [],
                        "tensors": {},
                        "bad_tensors": [],
                        "error": f"{type(exc).__name__}: {exc}"[:2000],
                    }
                )
                stage = f"CUDA health probe after the error in check {shape}"
                torch.cuda.synchronize()
                torch.ones(1, device="cuda").add_(1).item()
                continue
            state = st or state
            emit({"stage": "check", **res})
        if state is not None:
            for line in stages_at_task_shape(fn, state, causal):
                stage = line["stage"]
                emit(line)
    except Exception as exc:  # noqa: BLE001 - reported to the driver, then this process ends
        emit({"stage": "error", "during": stage, "error": f"{type(exc).__name__}: {exc}"[:3000]})
        return 3
    emit({"stage": "done", "checks": len(shapes)})
    return 0


def collect(out: str) -> dict:
    """A worker's JSON lines folded into one result: env, checks, and the task-shape stages."""
    res: dict = {"checks": []}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        stage = obj.pop("stage", "?")
        res["last"] = stage
        if stage == "check":
            res["checks"].append(obj)
        else:
            res[stage] = obj
    return res


def manifest_entries() -> dict[str, dict]:
    path = BUILD / "manifest.json"
    return {e["tag"]: e for e in json.loads(path.read_text())} if path.exists() else {}


def loads_here(so: Path) -> str:
    """'' when ``so`` loads through TVM-FFI in a fresh process, else the error tail."""
    code = "import sys, tvm_ffi; tvm_ffi.load_module(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", code, str(so)], capture_output=True, text=True, timeout=120)
    return "" if proc.returncode == 0 else (proc.stderr or proc.stdout)[-1500:] or f"rc={proc.returncode}"


def stale_reason(name: str, entry: dict | None) -> str:
    """Why the manifest's object for variant ``name`` is not the one to run here ('' when it is)."""
    src = shipped_source(name)
    if entry is None or not entry.get("ok") or not (ROOT / entry["so"]).exists():
        return "no built object"
    if entry.get("source") != _rel(src):
        return f"built from {entry.get('source')}, not {_rel(src)}"
    if entry.get("flags") != VARIANTS[name]:
        return f"flags changed {entry.get('flags')} -> {VARIANTS[name]}"
    if not src.exists():
        return f"{_rel(src)} is missing here"
    if inputs_digest(src) != entry.get("digest"):
        return "the source or the pack headers changed since the build"
    return ""


def ensure_objects(names: list[str]) -> dict[str, dict]:
    """The manifest, after rebuilding (this machine's nvcc) the objects missing, stale or not loading here.

    A variant whose object is still not right afterwards gets ``{"ok": False, "stale": why}``.
    """
    entries = manifest_entries()
    redo = {n: why for n in names if (why := stale_reason(n, entries.get(n)))}
    first = next((entries[n] for n in names if n not in redo), None)
    if first is not None and (err := loads_here(ROOT / first["so"])):
        print(f"!!!! {first['so']} does not load here:\n{err}", flush=True)
        redo.update({n: "prebuilt objects do not load here" for n in names if n not in redo})
    if not redo:
        return entries
    print(f"!!!! rebuilding on this machine: {redo}", flush=True)
    if (
        BWD.exists()
        and any(is_causal(VARIANTS[n]) for n in redo)
        and (not CAUSAL.exists() or CAUSAL.read_text() != causal_source(BWD.read_text()))
    ):
        print("!!!! MhaBwdCausal.cu was stale here: regenerated (run `sync` on the CPU host too)", flush=True)
        sync()
    build(list(redo), os.cpu_count() or 4, "static")
    entries = manifest_entries()
    for n in redo:
        if why := stale_reason(n, entries.get(n)):
            entries[n] = {**entries.get(n, {}), "ok": False, "stale": why}
    return entries


def gpu(
    out_dir: Path,
    only: list[str] | None,
    per_variant_s: float,
    quiet_s: float,
    small_only: bool,
    deadline: float | None = None,
) -> dict[str, dict]:
    """Run every selected variant in its own worker; results.json in ``out_dir``; returns the results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [n for n in VARIANTS if not only or n in only]
    if not names:
        print(f"no variant selected; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return {}
    manifest = ensure_objects(names)
    results: dict[str, dict] = {}
    with open(out_dir / "workers.log", "a") as log:
        for n in names:
            e = manifest.get(n)
            if e is None or not e.get("ok"):
                why = (e or {}).get("stale", "no object")
                results[n] = {"checks": [], "error": {"during": "build", "error": f"{why} (see above)"}}
            elif deadline is not None and time.monotonic() > deadline:
                results[n] = {"checks": [], "skipped": "budget spent before this variant started"}
            else:
                limit = per_variant_s
                if deadline is not None:  # a started step may run 120 s past the budget, not more
                    limit = min(limit, deadline + 120 - time.monotonic())
                cmd = [sys.executable, __file__, "worker", str(ROOT / e["so"])]
                cmd += ["--causal"] * e["causal"] + ["--small-only"] * small_only
                start = time.monotonic()
                out, err, why = run_worker(cmd, quiet_s, limit)
                results[n] = collect(out)
                results[n].update(ended=why, wall_s=round(time.monotonic() - start, 1))
                if "done" not in results[n]:
                    results[n]["stderr_tail"] = err[-3000:]
                log.write(f"=== worker {n} ({why})\n{err[-8000:]}\n")
                log.flush()
            print(variant_report(n, results[n], e), flush=True)
            (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    return results


def passed(res: dict) -> bool:
    """Every check of the worker ran and passed, and so did the re-check after timing (if it ran)."""
    return (
        "done" in res
        and len(res["checks"]) == res["done"]["checks"]
        and all(c["pass"] for c in res["checks"])
        and all(t["pass"] for t in res.get("recheck", {}).get("tensors", {}).values())
    )


# ---------------------------------------------------------------------------------------- reporting


def _tensor_line(name: str, t: dict) -> str:
    if t.get("pass") and not t.get("mismatch"):
        return f"{name} ok (max_abs {t['max_abs']:.3g}, rel_norm {t['rel_norm']:.2g})"
    s = (
        f"{name} {'PASS' if t.get('pass') else 'FAIL'}: {t.get('mismatch')} bad "
        f"(allowed {t.get('allowed')}), "
        f"unwritten {t.get('unwritten')}, NaN/inf {t.get('nonfinite_written')}, "
        f"rel_norm {t.get('rel_norm', 0):.3g}, max_abs {t.get('max_abs', 0):.3g} at {t.get('max_abs_at')} "
        f"got/ref {t.get('max_abs_got_ref')}"
    )
    if "first_bad" in t:
        hd, r64, r128 = t["heads"], t["rows64"], t["rows128"]
        s += (
            f"\n        first bad {t['first_bad']} got/ref {t['first_bad_got_ref']}; bad rows "
            f"{t['bad_row_fraction']:.3g}; heads {hd['bad']}/{hd['of']} first {hd['first']}"
            f"\n        by 64-row block {r64['bad_blocks']}/{r64['blocks']} {r64['first']}"
            f"\n        by 128-row block {r128['bad_blocks']}/{r128['blocks']} {r128['first']}"
            f"\n        by 16-col group {t['cols16']}; by 16-row group within 64 rows {t['row16_in_64']}"
        )
    return s


def variant_report(name: str, res: dict, entry: dict | None) -> str:
    """Human summary of one variant: build resources, every check, timing, cuDNN sanity, kernels."""
    nan = float("nan")
    head = f"== {name} pass={passed(res)}"
    if "wall_s" in res:
        head += f" (worker {res['wall_s']} s, {res.get('ended')})"
    if entry:
        head += f" causal={entry['causal']} flags={entry['flags']} source={entry['source']}"
        head += "".join(
            f"\n   build: {k['name'][:50]} regs={k['regs']} spill={k['spill']} smem_static="
            f"{k['smem_static']} HGMMA={k.get('sass', {}).get('HGMMA')}"
            for k in entry.get("kernels", [])
        )
        head += "".join(f"\n   !!!! PTXAS WARNING: {w}" for w in entry.get("ptxas_warnings", []))
    lines = [head]
    if "env" in res:
        lines.append(f"   {res['env']['gpu']} torch {res['env']['torch']} cuDNN {res['env']['cudnn']}")
    for c in res["checks"]:
        status = "PASS" if c["pass"] else f"FAIL in {c['bad_tensors']}"
        if "error" in c:
            status = f"ERROR {c['error']}"
        lines.append(
            f"   check {tuple(c['shape'])}: {status}"
            + (f" MUTATED INPUTS {c['mutated_inputs']}" if c["mutated_inputs"] else "")
        )
        lines += [f"      {_tensor_line(n, t)}" for n, t in c["tensors"].items()]
    if "cudnn_check" in res:
        cc = res["cudnn_check"]
        lines.append(
            "   cuDNN vs reference (harness sanity): "
            + cc.get("error", "")[:300]
            + "; ".join(
                f"{n} pass={t['pass']} bad={t['mismatch']} rel_norm={t['rel_norm']:.2g}"
                for n, t in cc.get("tensors", {}).items()
            )
        )
    if "time" in res:
        t = res["time"]
        lines.append(
            f"   time: ours {t['cand_ms']:.3f} ms ({t['cand_tflops']:.0f} TFLOP/s, "
            f"min {t['cand_min_ms']:.3f}, iqr {t['cand_iqr_ms']:.3f})  "
            f"cuDNN {t.get('cudnn_ms', nan):.3f} ms ({t.get('cudnn_tflops', nan):.0f} TFLOP/s)  "
            f"speedup {t.get('speedup', nan):.3f}x"
        )
    if "recheck" in res:
        lines.append(
            "   after timing: "
            + "; ".join(
                f"{n} pass={t['pass']} bad={t['mismatch']} "
                f"bitwise-repeatable={t['bitwise_same_as_first_call']}"
                for n, t in res["recheck"]["tensors"].items()
            )
        )
    prof = res.get("profile", {})
    if "error" in prof:
        lines.append(f"   profile: {prof['error']}")
    for who in ("cand", "cudnn"):
        for g in prof.get(who, []):
            lines.append(
                f"   {who:5s} {g['us_per_call']:9.1f} us x{g['launches']} {g['name'][:60]} "
                f"grid={g['grid']} block={g['block']} regs={g['regs']} smem={g['smem']}"
            )
    if "error" in res:
        lines.append(f"   !!!! ERROR during {res['error'].get('during')}: {res['error'].get('error')}")
    if "skipped" in res:
        lines.append(f"   skipped: {res['skipped']}")
    tail = res.get("stderr_tail", "").strip()[-1500:]
    if "ended" in res and "done" not in res and ("error" not in res or tail):
        last = f", last line: {res['last']}" if res.get("last") else ""
        lines.append(
            f"   !!!! worker ended ({res['ended']}) after {len(res['checks'])} checks{last}; "
            f"stderr tail:\n{tail}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- ncu


def ncu_driver(so: str, causal: bool) -> int:
    """One call on a small problem inside the NVTX range 'candidate' (what ncu is told to profile)."""
    import torch

    fn = load(so)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v, do = (randn_bf16((1, 2, 512, D), gen) for _ in range(4))
    o32, lse = forward_reference(q, k, v, causal)
    o = o32.to(torch.bfloat16)
    outs = [torch.empty_like(q) for _ in GRADS]
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("candidate")
    fn(q, k, v, o, do, lse, *outs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


def ncu_counts(csv_text: str) -> dict[str, dict[str, list[int]]]:
    """Kernel -> family -> [warp instructions executed, predicate-true thread instructions] (NCU_FAMILIES)."""
    from ptxgym.evaluation.trusted.ncu import parse_ncu_csv

    kernels: dict[str, dict[str, list[int]]] = {}
    for kp in parse_ncu_csv(csv_text):
        counts = kernels.setdefault(re.sub(r"^void ", "", kp.name.split("(")[0])[:90], {})
        for opcode, inst, thread in kp.rows:
            fam = opcode.split(".")[0]
            if fam in NCU_FAMILIES:
                c = counts.setdefault(fam, [0, 0])
                c[0] += inst
                c[1] += thread
    return kernels


def ncu(so: str, causal: bool, out_dir: Path, timeout_s: float = 150) -> dict:
    """Executed instruction counts (warp-level, predicate-true threads) per kernel and family, by ncu."""
    cmd = [
        "ncu",
        "--clock-control",
        "none",
        "--nvtx",
        "--nvtx-include",
        "candidate/",
        "--metrics",
        "inst_executed,thread_inst_executed_true",
        "--page",
        "source",
        "--print-source",
        "sass",
        "--csv",
        sys.executable,
        __file__,
        "ncu-driver",
        so,
    ] + (["--causal"] if causal else [])
    out_dir.mkdir(parents=True, exist_ok=True)
    try:  # own session: a timeout kills ncu and the profiled driver together
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except OSError as exc:
        print(f"ncu {Path(so).name}: {exc}", flush=True)
        return {"so": so, "error": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        (out_dir / f"ncu_{Path(so).stem}.csv").write_text(out[-4_000_000:] + err[-20000:])
        print(f"ncu {Path(so).name}: killed after {timeout_s:.0f} s", flush=True)
        return {"so": so, "error": f"killed after {timeout_s:.0f} s", "tail": (out + err)[-2000:]}
    (out_dir / f"ncu_{Path(so).stem}.csv").write_text(out[-4_000_000:] + err[-20000:])
    kernels = ncu_counts(out)
    res = {"so": so, "rc": proc.returncode, "kernels": kernels}
    totals = {f: sum(k.get(f, [0, 0])[1] for k in kernels.values()) for f in NCU_FAMILIES}
    res["executed"] = {f: c for f, c in totals.items() if c}
    print(
        f"ncu {Path(so).name}: rc={proc.returncode} executed (predicate-true threads) {res['executed']}",
        flush=True,
    )
    for name, counts in kernels.items():
        print(f"    {name[:70]}: " + " ".join(f"{f}={w}/{t}" for f, (w, t) in counts.items()), flush=True)
    if proc.returncode != 0 or not kernels:
        res["tail"] = (out + err)[-2000:]
        print(res["tail"], flush=True)
    return res


# ----------------------------------------------------------------------------------------------- all


def gpu_info() -> str:
    try:
        query = "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw"
        return subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi: {exc}"


def run_all(
    out_dir: Path, budget_s: float, only: list[str] | None, per_variant_s: float, quiet_s: float
) -> int:
    """gpu over the variants, then ncu of base and causal; no step starts after ``budget_s`` seconds."""
    start = time.monotonic()
    deadline = start + budget_s
    out_dir.mkdir(parents=True, exist_ok=True)
    info = gpu_info()
    print(info, flush=True)
    results = gpu(out_dir, only, per_variant_s, quiet_s, False, deadline)
    manifest = manifest_entries()
    ncus = {}
    for n in ("base", "causal"):
        e = manifest.get(n)
        if n not in results or stale_reason(n, e):
            continue
        left = deadline + 120 - time.monotonic()
        if time.monotonic() > deadline:
            ncus[n] = {"skipped": "budget spent"}
            continue
        ncus[n] = ncu(str(ROOT / e["so"]), e["causal"], out_dir, min(150, left))
    (out_dir / "results.json").write_text(json.dumps({"variants": results, "ncu": ncus}, indent=1))
    text = [f"dev_mha_bwd all: {info}; {time.monotonic() - start:.0f} s of a {budget_s:.0f} s budget"]
    text += [variant_report(n, r, manifest.get(n)) for n, r in results.items()]
    for n, r in ncus.items():
        text.append(f"== ncu {n}: {r.get('executed', r.get('error', r.get('skipped')))}")
        text += [
            f"   {k[:70]}: " + " ".join(f"{f}={w}/{t}" for f, (w, t) in c.items())
            for k, c in r.get("kernels", {}).items()
        ]
    ok = bool(results) and all(passed(r) for r in results.values())
    text.append(f"ALL PASSED: {ok}")
    (out_dir / "summary.txt").write_text("\n".join(text) + "\n")
    print("\n" + "\n".join(text), flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sync")
    b = sub.add_parser("build")
    b.add_argument("--only", nargs="*")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    b.add_argument("--cudart", choices=["shared", "static"], default="static")
    b.add_argument("--source", type=Path, help=argparse.SUPPRESS)  # a stand-in .cu, to test this script
    for name in ("gpu", "all"):
        g = sub.add_parser(name)
        g.add_argument("out", type=Path)
        g.add_argument("--only", nargs="*")
        g.add_argument("--per-variant", type=float, default=150.0, help="seconds a variant's worker may run")
        g.add_argument("--quiet", type=float, default=60.0, help="seconds a worker may go without a line")
        if name == "gpu":
            g.add_argument("--small-only", action="store_true", help="skip the task shape and the timing")
        else:
            g.add_argument("--budget-s", type=float, default=400.0, help="start no new step after this")
    n = sub.add_parser("ncu")
    n.add_argument("so")
    n.add_argument("out", type=Path)
    n.add_argument("--causal", action="store_true")
    nd = sub.add_parser("ncu-driver")
    nd.add_argument("so")
    nd.add_argument("--causal", action="store_true")
    w = sub.add_parser("worker")
    w.add_argument("so")
    w.add_argument("--causal", action="store_true")
    w.add_argument("--small-only", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "sync":
        return sync()
    if args.cmd == "build":
        return build(args.only, args.jobs, args.cudart, args.source)
    if args.cmd == "gpu":
        res = gpu(args.out, args.only, args.per_variant, args.quiet, args.small_only)
        return 0 if res and all(passed(r) for r in res.values()) else 1
    if args.cmd == "all":
        return run_all(args.out, args.budget_s, args.only, args.per_variant, args.quiet)
    if args.cmd == "ncu":
        res = ncu(args.so, args.causal, args.out)
        return 0 if res.get("executed", {}).get("HGMMA") and res["executed"].get("UTMALDG") else 1
    if args.cmd == "ncu-driver":
        return ncu_driver(args.so, args.causal)
    return worker(args.so, args.causal, SHAPES[:-1] if args.small_only else SHAPES)


if __name__ == "__main__":
    sys.exit(main())
