"""Build, check and time the expert attention-forward solutions (MhaFwd.cu / MhaFwdCausal.cu) on an H200.

A developer script, not the team evaluator. The CPU part compiles variants of the solution (compile-time
knobs, see the head of MhaFwd.cu) with the DESIGN.md nvcc flags and records ptxas resources and the SASS
census; the GPU part runs every variant in its own subprocess (a trapping or hanging kernel cannot spoil
the next one), checks it against an fp32 reference on fresh randn inputs with NaN-poisoned outputs
(every element within abs 1e-2 or rel 1e-2), then times it against cuDNN SDPA
(torch.ops.aten._scaled_dot_product_cudnn_attention, as ptxgym's baseline calls it) in the same
process: CUDA events, a 256 MB buffer zeroed before every call, interleaved trials, medians.

    python bench/dev_mha_fwd.py sync                     # regenerate MhaFwdCausal.cu from MhaFwd.cu
    python bench/dev_mha_fwd.py build [--only NAME ...]  # CPU: bench/build/mha/<variant>.so + manifest
    python bench/dev_mha_fwd.py gpu OUTDIR               # GPU: check + time every built variant
    python bench/dev_mha_fwd.py ncu SO OUTDIR [--causal] # GPU: ncu executed HGMMA / UTMALDG counts
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKS = ROOT / "knowledge_packs"
SOLUTIONS = PACKS / "sm90a" / "solutions"
FWD = SOLUTIONS / "MhaFwd.cu"
CAUSAL = SOLUTIONS / "MhaFwdCausal.cu"
BUILD = ROOT / "bench" / "build" / "mha"
B, H, S, D = 4, 48, 4096, 128
TOL = 1e-2
SMALL = (1, 2, 512)  # checked before the task shape
EXTRA_SHAPES = [(1, 1, 128), (1, 2, 64), (2, 3, 1000)]  # one-block and ragged shapes, checked last

# Variants: name -> extra -D flags on top of the file's defaults (S2, overlap, ping-pong, not persistent).
VARIANTS = {
    "ov_pp": [],
    "simple": ["-DMHA_OVERLAP=0", "-DMHA_PINGPONG=0"],
    "ov": ["-DMHA_PINGPONG=0"],
    "ov_pp_s3": ["-DMHA_STAGES=3"],
    "ov_pp_persist": ["-DMHA_PERSISTENT=1"],
    "ov_pp_split": ["-DMHA_PV_SPLIT=1"],
    "simple_split": ["-DMHA_OVERLAP=0", "-DMHA_PINGPONG=0", "-DMHA_PV_SPLIT=1"],
}

CAUSAL_BANNER = """// MhaFwdCausal.cu - expert CAUSAL attention forward (sm_90a): the kernel of MhaFwd.cu
// compiled with MHA_CAUSAL=1 (key j <= query i; only the diagonal key block is masked, fully masked
// blocks are never loaded). GENERATED from MhaFwd.cu by `python bench/dev_mha_fwd.py sync`; edit
// MhaFwd.cu, then regenerate.
#ifndef MHA_CAUSAL
#define MHA_CAUSAL 1
#endif
"""


# ------------------------------------------------------------------------------------------ CPU side


# Knobs whose shipped value differs for the causal file (chosen from the GPU results), e.g. {"MHA_STAGES": 3}.
CAUSAL_DEFAULTS: dict[str, int] = {}


def causal_source() -> str:
    """MhaFwdCausal.cu as generated from MhaFwd.cu (+ the causal file's own knob defaults)."""
    knobs = "".join(f"#ifndef {k}\n#define {k} {v}\n#endif\n" for k, v in CAUSAL_DEFAULTS.items())
    return CAUSAL_BANNER + knobs + FWD.read_text()


def sync() -> int:
    CAUSAL.write_text(causal_source())
    print(f"wrote {CAUSAL.relative_to(ROOT)}")
    return 0


def toolchain() -> tuple[str, str, str]:
    """(tvm-ffi include dir, tvm-ffi lib dir, libcuda stub dir)."""
    import tvm_ffi.libinfo as info

    stub = Path("/tmp/stub")
    if not (stub / "libcuda.so").exists():
        stub.mkdir(parents=True, exist_ok=True)
        (stub / "empty.c").write_text("\n")
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-Wl,-soname,libcuda.so.1",
                "-o",
                str(stub / "libcuda.so"),
                str(stub / "empty.c"),
            ],
            check=True,
        )
    return info.find_include_path(), os.path.dirname(info.find_libtvm_ffi()), str(stub)


def nvcc_command(source: Path, out: Path, flags: list[str], cudart: str) -> list[str]:
    """The DESIGN.md flags (``cudart`` "shared" there; "static" makes the object load anywhere)."""
    inc, lib, stub = toolchain()
    return [
        "nvcc",
        "-O3",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-std=c++17",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-cudart",
        cudart,
        "-lineinfo",
        "-Xptxas",
        "-v",
        f"-I{inc}",
        f"-I{PACKS}",
        *flags,
        str(source),
        "-o",
        str(out),
        f"-L{lib}",
        "-ltvm_ffi",
        f"-L{stub}",
        "-lcuda",
    ]


def sass_text(so: Path) -> str | None:
    """``cuobjdump --dump-sass`` of ``so`` (needs cuobjdump + nvdisasm), or None without cuobjdump."""
    exe = shutil.which("cuobjdump")
    if exe is None:
        import nvidia

        cand = Path(nvidia.__path__[0]) / "cu13" / "bin" / "cuobjdump"
        if not cand.exists():
            return None
        exe = str(cand)
    env = dict(os.environ, PATH=f"{Path(exe).parent}:{os.environ.get('PATH', '')}")
    return subprocess.run([exe, "--dump-sass", str(so)], capture_output=True, text=True, env=env).stdout


def sass_census(so: Path) -> dict:
    """Counts of the instructions that matter in the SASS of ``so`` (needs cuobjdump + nvdisasm)."""
    sass = sass_text(so)
    if sass is None:
        return {"error": "cuobjdump not found"}
    keys = ["HGMMA", "UTMALDG", "UTMASTG", "WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "LDL", "STL", "USETMAXREG"]
    return {k: len(re.findall(rf"\b{re.escape(k)}", sass)) for k in keys}


def build_one(name: str, causal: bool, flags: list[str], out_dir: Path, cudart: str) -> dict:
    source = CAUSAL if causal else FWD
    tag = f"{'causal' if causal else 'fwd'}_{name}"
    out = out_dir / f"{tag}.so"
    cmd = nvcc_command(source, out, flags, cudart)
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    info = {
        "tag": tag,
        "variant": name,
        "causal": causal,
        "flags": flags,
        "cudart": cudart,
        "so": str(out.relative_to(ROOT)),
        "ok": proc.returncode == 0,
        "build_s": round(time.time() - start, 1),
    }
    m = re.search(r"Used (\d+) registers", log)
    info["regs"] = int(m.group(1)) if m else None
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    info["spill"] = [int(m.group(1)), int(m.group(2))] if m else None
    info["warnings"] = sorted(set(re.findall(r"C75\d\d", log)))
    if proc.returncode != 0:
        info["log"] = log[-3000:]
    else:
        info["sass"] = sass_census(out)
    return info


def build(only: list[str] | None, jobs: int, cudart: str) -> int:
    if CAUSAL.read_text() != causal_source():
        print("MhaFwdCausal.cu is stale: run `python bench/dev_mha_fwd.py sync`", file=sys.stderr)
        return 1
    BUILD.mkdir(parents=True, exist_ok=True)
    todo = [(n, c, f) for n, f in VARIANTS.items() if not only or n in only for c in (False, True)]
    if not todo:
        print(f"no variant selected; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda a: build_one(*a, BUILD, cudart), todo))
    for r in results:
        print(
            f"{r['tag']:28s} ok={r['ok']} regs={r['regs']} spill={r['spill']} warn={r['warnings']} "
            f"sass={r.get('sass')}"
        )
        if not r["ok"]:
            print(r["log"])
    manifest = BUILD / "manifest.json"  # merged: a partial build keeps the other variants' entries
    kept = [
        e
        for e in (json.loads(manifest.read_text()) if manifest.exists() else [])
        if e["tag"] not in {r["tag"] for r in results}
    ]
    manifest.write_text(json.dumps(kept + results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


# ------------------------------------------------------------------------------------------ GPU side


def reference(q, k, v, causal: bool):  # noqa: ANN001, ANN201 - torch tensors
    """fp32 O and natural-log LSE, a few heads at a time (the definition's reference, batched)."""
    import torch

    bb, hh, ss, dd = q.shape
    qf, kf, vf = (x.reshape(bb * hh, ss, dd) for x in (q, k, v))
    o = torch.empty(bb * hh, ss, dd, dtype=torch.float32, device=q.device)
    lse = torch.empty(bb * hh, ss, dtype=torch.float32, device=q.device)
    mask = torch.ones(ss, ss, dtype=torch.bool, device=q.device).tril() if causal else None
    step = max(1, (1 << 28) // (ss * ss))
    for i in range(0, bb * hh, step):
        sl = slice(i, i + step)
        sc = torch.bmm(qf[sl].float(), kf[sl].float().transpose(1, 2)) / math.sqrt(dd)
        if mask is not None:
            sc.masked_fill_(~mask, float("-inf"))
        ls = torch.logsumexp(sc, dim=-1)
        o[sl] = torch.bmm(sc.sub_(ls[..., None]).exp_(), vf[sl].float())  # in place: one S x S buffer
        lse[sl] = ls
        del sc
    return o.reshape(bb, hh, ss, dd), lse.reshape(bb, hh, ss)


def compare(out, ref) -> dict:  # noqa: ANN001
    import torch

    out = out.float()
    diff = (out - ref).abs()
    bad = ~((diff <= TOL) | (diff <= TOL * ref.abs()))
    bad |= ~torch.isfinite(out)
    return {
        "mismatch": int(bad.sum()),
        "nonfinite": int((~torch.isfinite(out)).sum()),
        "max_abs": float(torch.nan_to_num(diff, nan=float("inf")).max()),
        "rel_norm": float(
            torch.linalg.vector_norm(torch.nan_to_num(out - ref, nan=1e9)) / torch.linalg.vector_norm(ref)
        ),
    }


def randn_bf16(shape: tuple[int, ...], gen):  # noqa: ANN001, ANN201
    """Standard-normal bf16 on the GPU (as ptxgym's 'random' inputs)."""
    import torch

    return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)


def check(fn, shape: tuple[int, int, int], causal: bool, seed: int) -> dict:  # noqa: ANN001
    import torch

    bb, hh, ss = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (randn_bf16((bb, hh, ss, D), gen) for _ in range(3))
    o = torch.full((bb, hh, ss, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((bb, hh, ss), float("nan"), dtype=torch.float32, device="cuda")
    fn(q, k, v, o, lse)
    torch.cuda.synchronize()
    ro, rl = reference(q, k, v, causal)
    res = {"shape": list(shape), "O": compare(o, ro), "LSE": compare(lse, rl)}
    res["pass"] = res["O"]["mismatch"] == 0 and res["LSE"]["mismatch"] == 0
    return res


def time_calls(call, flush, trials: int, iters: int) -> list[float]:  # noqa: ANN001
    import torch

    out = []
    for _ in range(trials * iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def load(so: str):  # noqa: ANN201
    """The module's run(Q, K, V, O, LSE), called on torch's current stream."""
    import tvm_ffi

    run = tvm_ffi.load_module(so)["run"]

    def fn(q, k, v, o, lse):  # noqa: ANN001
        with tvm_ffi.use_torch_stream():
            run(q, k, v, o, lse)

    return fn


def measure(so: str, causal: bool, timed: bool) -> dict:
    """Check (small shapes, then the task shape) and time one built variant in this process."""
    import torch

    res: dict = {"so": so, "causal": causal}
    fn = load(so)

    res["small"] = [check(fn, SMALL, causal, 100)]
    full = check(fn, (B, H, S), causal, 7)
    res["full"] = full
    res["pass"] = full["pass"] and res["small"][0]["pass"]
    if not timed:
        return res
    gen = torch.Generator(device="cuda").manual_seed(11)
    q, k, v = (randn_bf16((B, H, S, D), gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, dtype=torch.float32, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    scale = 1.0 / math.sqrt(D)

    def cand():
        fn(q, k, v, o, lse)

    def cudnn():
        sdpa = torch.ops.aten._scaled_dot_product_cudnn_attention
        sdpa(q, k, v, None, True, 0.0, causal, False, scale=scale)

    for _ in range(5):
        cand()
        cudnn()
    ct, bt = [], []
    for _ in range(3):  # interleaved trials
        ct += time_calls(cand, flush, 1, 15)
        bt += time_calls(cudnn, flush, 1, 15)
    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    cm, bm = statistics.median(ct), statistics.median(bt)
    res["time"] = {
        "cand_ms": cm,
        "cudnn_ms": bm,
        "speedup": bm / cm,
        "cand_tflops": flops / cm / 1e9,
        "cudnn_tflops": flops / bm / 1e9,
        "cand_min_ms": min(ct),
        "cudnn_min_ms": min(bt),
        "cand_iqr_ms": statistics.quantiles(ct, n=4)[2] - statistics.quantiles(ct, n=4)[0],
    }
    # The output of the last timed call must still be right (first 4 heads against fp32).
    ro, rl = reference(q[:1, :4], k[:1, :4], v[:1, :4], causal)
    res["timed_recheck"] = {"O": compare(o[:1, :4], ro), "LSE": compare(lse[:1, :4], rl)}
    return res


def worker(sos: list[str], causals: list[bool], timed: bool) -> int:
    """Measure several variants in one process (one torch start), one JSON line each.

    Stops at the first variant that raises: a trapped kernel leaves the CUDA context unusable.
    """
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    for so, causal in zip(sos, causals, strict=True):
        try:
            res = measure(so, causal, timed)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, then this process ends
            print(
                json.dumps({"so": so, "causal": causal, "error": f"{type(exc).__name__}: {exc}"[:2000]}),
                flush=True,
            )
            return 3
        print(json.dumps(res), flush=True)
        try:  # ragged and single-block shapes: after the main line, so a failure here costs nothing above
            extras = [check(load(so), shp, causal, 200 + i) for i, shp in enumerate(EXTRA_SHAPES)]
        except Exception as exc:  # noqa: BLE001 - reported, then this process ends
            print(json.dumps({"extras_for": so, "error": f"{type(exc).__name__}: {exc}"[:2000]}), flush=True)
            return 3
        print(json.dumps({"extras_for": so, "extras": extras}), flush=True)
    return 0


def summary_line(tag: str, r: dict) -> str:
    t = r.get("time", {})
    full = r.get("full", {})
    nan = float("nan")
    small = [s.get("pass") for s in r.get("small", [])]
    fo, fl = full.get("O", {}), full.get("LSE", {})
    return (
        f"{tag:26s} pass={r.get('pass')} small={small} O_mis={fo.get('mismatch')} "
        f"O_max={fo.get('max_abs', nan):.3g} LSE_mis={fl.get('mismatch')} "
        f"ms={t.get('cand_ms', nan):.3f} cudnn={t.get('cudnn_ms', nan):.3f} "
        f"x={t.get('speedup', nan):.3f} TF={t.get('cand_tflops', nan):.0f}"
        + (f" ERROR {r['error'][:300]}" if "error" in r else "")
    )


def run_worker(cmd: list[str], quiet_s: float, total_s: float | None = None) -> tuple[str, str, str]:
    """Run a worker; kill it when no result line arrived for ``quiet_s`` seconds.

    That catches a hung kernel that no mbarrier timeout ends (a named-barrier deadlock, say). With
    ``total_s`` it is also killed once it has run that long, lines or not.
    Returns (stdout, stderr, how it ended).
    """
    deadline = None if total_s is None else time.monotonic() + total_s
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str | None] = queue.Queue()
    err_parts: list[str] = []

    def pump_out() -> None:
        for ln in proc.stdout:  # type: ignore[union-attr]
            lines.put(ln)
        lines.put(None)

    def pump_err() -> None:
        err_parts.append(proc.stderr.read())  # type: ignore[union-attr]

    threads = [threading.Thread(target=pump_out, daemon=True), threading.Thread(target=pump_err, daemon=True)]
    for th in threads:
        th.start()
    out: list[str] = []
    why = ""
    while True:
        left = quiet_s if deadline is None else min(quiet_s, deadline - time.monotonic())
        try:
            ln = lines.get(timeout=max(left, 0.0))
        except queue.Empty:
            proc.kill()
            if left < quiet_s:
                why = f"killed at its limit of {total_s:.0f} s"
            else:
                why = f"killed after {quiet_s:.0f} s without a result"
            break
        if ln is None:
            break
        out.append(ln)
    proc.wait()
    threads[1].join(timeout=10)
    return "".join(out), "".join(err_parts), why or f"rc={proc.returncode}"


def gpu(out_dir: Path, per_variant_s: float, only: list[str] | None, order: list[str] | None) -> int:
    manifest = {e["tag"]: e for e in json.loads((BUILD / "manifest.json").read_text())}
    tags = [t for t in (order or list(manifest)) if t in manifest]
    tags += [t for t in manifest if t not in tags]
    if only:
        tags = [t for t in tags if manifest[t]["variant"] in only or t in only]
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    log = open(out_dir / "workers.log", "a")  # noqa: SIM115 - appended to across workers
    while tags:
        sos = [str(ROOT / manifest[t]["so"]) for t in tags]
        cmd = [
            sys.executable,
            __file__,
            "worker",
            *sos,
            "--causal",
            *["1" if manifest[t]["causal"] else "0" for t in tags],
        ]
        out, err, why = run_worker(cmd, per_variant_s)
        log.write(f"=== worker over {tags}\n{err[-6000:]}\n")
        log.flush()
        lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
        done = [r for r in lines if "extras_for" not in r]
        for tag, r in zip(tags, done, strict=False):
            results[tag] = r
            print(summary_line(tag, r), flush=True)
        for r in (r for r in lines if "extras_for" in r):
            tag = tags[[str(ROOT / manifest[t]["so"]) for t in tags].index(r["extras_for"])]
            results[tag]["extras"] = r
            ok = [e["pass"] for e in r.get("extras", [])]
            print(f"   extras {tag}: pass={ok} {r.get('error', '')[:300]}", flush=True)
        rest = tags[len(done) :]
        last = lines[-1] if lines else {}
        if rest and "error" not in last:  # the worker died without a word
            if last and "extras_for" not in last:  # ... in the extras of the variant it had just reported
                results[tags[len(done) - 1]]["extras"] = {"error": f"worker ended ({why}) in the extras"}
            else:  # ... in the main checks of the next variant
                results[rest[0]] = {"error": f"worker ended ({why}) during this variant: {err[-500:]}"}
                print(summary_line(rest[0], results[rest[0]]), flush=True)
                rest = rest[1:]
        tags = rest
        (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    return 0


def ncu_driver(so: str, causal: bool) -> int:
    """One call on a small problem inside the NVTX range 'candidate' (what ncu is told to profile)."""
    import torch

    fn = load(so)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (randn_bf16((1, 2, 512, D), gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 512, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("candidate")
    fn(q, k, v, o, lse)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


def ncu(so: str, causal: bool, out_dir: Path) -> int:
    """Executed (predicate-true thread) instruction counts of HGMMA / UTMALDG / UTMASTG, by ncu."""
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
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"ncu_{Path(so).stem}.csv").write_text(proc.stdout[-2_000_000:] + proc.stderr[-20000:])
    counts: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip().strip('"') for c in line.split('","')]
        if len(cells) < 4:
            continue
        words = [w for w in cells[1].split() if not w.startswith("@")]
        family = words[0].split(".")[0] if words else ""
        if family in ("HGMMA", "UTMALDG", "UTMASTG"):
            try:
                counts[family] = counts.get(family, 0) + int(cells[3].replace(",", ""))
            except ValueError:
                continue
    print(f"ncu {Path(so).name}: rc={proc.returncode} executed thread instructions {counts}", flush=True)
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-2000:], flush=True)
    return 0 if counts.get("HGMMA", 0) > 0 and counts.get("UTMALDG", 0) > 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sync")
    b = sub.add_parser("build")
    b.add_argument("--only", nargs="*")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    b.add_argument("--cudart", choices=["shared", "static"], default="static")
    g = sub.add_parser("gpu")
    g.add_argument("out", type=Path)
    g.add_argument("--per-variant", type=float, default=45.0, help="seconds allowed per variant (no output)")
    g.add_argument("--only", nargs="*")
    g.add_argument("--order", nargs="*", help="tags to run first, in this order")
    n = sub.add_parser("ncu")
    n.add_argument("so")
    n.add_argument("out", type=Path)
    n.add_argument("--causal", action="store_true")
    nd = sub.add_parser("ncu-driver")
    nd.add_argument("so")
    nd.add_argument("--causal", action="store_true")
    w = sub.add_parser("worker")
    w.add_argument("sos", nargs="+")
    w.add_argument("--causal", nargs="+", required=True, help="0/1 per shared object")
    w.add_argument("--untimed", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "sync":
        return sync()
    if args.cmd == "build":
        return build(args.only, args.jobs, args.cudart)
    if args.cmd == "gpu":
        return gpu(args.out, args.per_variant, args.only, args.order)
    if args.cmd == "ncu":
        return ncu(args.so, args.causal, args.out)
    if args.cmd == "ncu-driver":
        return ncu_driver(args.so, args.causal)
    return worker(args.sos, [c == "1" for c in args.causal], not args.untimed)


if __name__ == "__main__":
    sys.exit(main())
