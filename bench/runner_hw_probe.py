"""Which rule of the runner's jail stops CUPTI's range profiler, and does querying first avoid it? (H200)

    python bench/runner_hw_probe.py --out bench/results/runner_hw_probe.txt

On 2026-12-05 every hardware-counted call in the evaluator's jailed runner failed at
``cuptiProfilerGetCounterAvailability`` (CUPTI_ERROR_UNKNOWN) while the same call counted outside a jail
(``test_runner_cupti_gpu.py``). This plays the expert GEMM through ``LocalGpuEvaluator`` in the native
runner with ``hw_counters`` on, once per variant of the jail its ``sandbox`` command carries: as shipped
with the availability queried before the jail (``native_worker.HW_PREPARE``, the default now), as shipped
without that, and each layer loosened alone without it (no Landlock; Landlock reading everything;
seccomp allowing AF_UNIX and AF_NETLINK sockets; no rlimits). Prints each variant's verdict, the
hardware-counter outcome from the target message, and the GPU turn's wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import socket
import time
from pathlib import Path

from provenance import commit

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "knowledge_packs" / "sm90a" / "solutions" / "Gemm.cu"


def variants():
    """(name, prepare before the jail, change of the shipped jail) triples."""
    rep = dataclasses.replace

    def landlock_reads_all(j):
        return rep(j, landlock=rep(j.landlock, read=("/",))) if j.landlock else j

    return [
        ("shipped, availability queried before the jail", True, lambda j: j),
        ("shipped, not queried before", False, lambda j: j),
        ("no Landlock, not queried before", False, lambda j: rep(j, landlock=None)),
        ("Landlock reading everything, not queried before", False, landlock_reads_all),
        (
            "seccomp allowing AF_UNIX+AF_NETLINK, not queried before",
            False,
            lambda j: rep(j, families=(socket.AF_UNIX, socket.AF_NETLINK)),
        ),
        ("no rlimits, not queried before", False, lambda j: rep(j, rlimits={})),
    ]


def hw_part(message: str) -> str:
    """The hardware-counter clause of a target message."""
    found = re.search(r"(unpatched call: [^;)]*|HwCountError: [^;)]*\)?)", message)
    return found.group(1) if found else f"(no hardware-counter clause) {message[-300:]}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    from ptxgym.evaluation.trusted import native_worker
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    gpu = torch.cuda.get_device_name(0)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [f"# runner hardware-counter probe {stamp}, {gpu}, commit {commit()} (bench/runner_hw_probe.py)"]
    settings = EvalSettings(
        memcheck=MemcheckMode.NEVER,
        ncu_crosscheck_fraction=0.0,
        verdict_cache_entries=0,
        hw_counters=True,
        verified_pool_partial_jail=True,
    )
    task = get_task("Gemm-sm90a")
    shipped_jail, shipped_prepare = native_worker.runner_jail, native_worker.HW_PREPARE
    with LocalGpuEvaluator(settings=settings, spares=0, candidate_process="native") as evaluator:
        pipeline = Pipeline(task, evaluator)
        for k, (name, prepare, change) in enumerate(variants()):
            native_worker.runner_jail = lambda *a, _c=change, **kw: _c(shipped_jail(*a, **kw))
            native_worker.HW_PREPARE = prepare
            t0 = time.perf_counter()
            try:
                fb = pipeline.run(f"```cuda\n{GEMM.read_text()}\n// probe variant {k}\n```")
            except Exception as exc:  # noqa: BLE001 - a diagnostic reports everything
                lines.append(f"{name}: {type(exc).__name__}: {str(exc)[:400]}")
            else:
                process = (fb.environment.sandbox or {}).get("process", "?")
                target = fb.target.message if fb.target else "(no target)"
                lines.append(
                    f"{name}: {fb.status.value} in {process[:40]}; {hw_part(target)}; "
                    f"gpu_turn {fb.stage_wall_s.get('gpu_turn', 0):.2f} s, "
                    f"hw call {fb.stage_wall_s.get('time_hw_count', 0):.3f} s, "
                    f"{time.perf_counter() - t0:.1f} s in all"
                )
            finally:
                native_worker.runner_jail, native_worker.HW_PREPARE = shipped_jail, shipped_prepare
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
