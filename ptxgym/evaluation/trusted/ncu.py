"""Executed target instructions: Nsight Compute per-instruction counts inside the candidate's call.

The command (FACTS.md): ``ncu --clock-control none --nvtx --nvtx-include "candidate/" --metrics
inst_executed,thread_inst_executed_true --page source --print-source sass --csv <driver>``. The CSV has,
per profiled kernel, a ``"Kernel Name","<name>"`` row, then a header naming ``Address``, ``Source`` and
the metrics, then one row per SASS instruction. A target-family opcode (``ArchSpec.is_target_opcode``)
with a positive predicate-true thread count means the family executed: YES. A valid profile with none:
NO. No kernel profiled, a kernel without instruction rows, a tool error or a timeout: UNKNOWN, never YES.
The same rows give the family's share of the task's work (``target_work``: executed MMA FLOPs / task
FLOPs), which the target credit also needs. Verdicts are cached on disk by hash of source, artifact,
architecture and workload.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ptxgym.evaluation.trusted.target_work import work_share
from ptxgym.evaluation.trusted.tools import driver_argv, find_tool, run_tool
from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import TargetInfo, Verdict

METRICS = ("inst_executed", "thread_inst_executed_true")
_OPCODE = re.compile(r"^\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


@dataclass
class KernelProfile:
    """Per-instruction counts of one profiled kernel launch."""

    name: str
    rows: list[tuple[str, int, int]] = field(default_factory=list)
    """(opcode with modifiers, inst_executed, thread_inst_executed_true)."""


def opcode_of(source: str) -> str | None:
    """The opcode (with modifiers, without predicate) of a SASS source line."""
    match = _OPCODE.match(source)
    return match.group(1) if match else None


def _number(cell: str) -> int:
    cell = cell.strip().replace(",", "")
    if not cell or cell in ("n/a", "-"):
        return 0
    return int(float(cell))


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """Kernels and their instruction rows from ncu's ``--page source --csv`` output."""
    kernels: list[KernelProfile] = []
    columns: dict[str, int] | None = None
    lines = [ln for ln in text.splitlines() if ln.lstrip().startswith('"')]
    for row in csv.reader(lines):
        if not row:
            continue
        if row[0].strip() == "Kernel Name":
            kernels.append(KernelProfile(name=row[1].strip() if len(row) > 1 else ""))
            columns = None
        elif "Source" in row and all(m in row for m in METRICS):
            columns = {name: row.index(name) for name in ("Source", *METRICS)}
            if not kernels:
                kernels.append(KernelProfile(name=""))
        elif columns is not None and len(row) > max(columns.values()):
            opcode = opcode_of(row[columns["Source"]])
            if opcode is None:
                continue
            kernels[-1].rows.append(
                (
                    opcode,
                    _number(row[columns["inst_executed"]]),
                    _number(row[columns["thread_inst_executed_true"]]),
                )
            )
    return kernels


def verdict_from_profiles(
    kernels: list[KernelProfile], arch: ArchSpec
) -> tuple[Verdict, dict[str, int], str]:
    """(verdict, target opcode -> predicate-true thread count, message)."""
    if not kernels:
        return Verdict.UNKNOWN, {}, "Nsight Compute profiled no kernel inside the candidate's NVTX range"
    counts: dict[str, int] = {}
    for k in kernels:
        for opcode, _, true_threads in k.rows:
            if arch.is_target_opcode(opcode) and true_threads > 0:
                base = opcode.split(".")[0]
                counts[base] = counts.get(base, 0) + true_threads
    names = ", ".join(sorted({k.name.split("(")[0] for k in kernels}))[:300]
    if counts:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))
        return (
            Verdict.YES,
            counts,
            f"executed target instructions ({listed}) in {len(kernels)} kernel(s): {names}",
        )
    empty = [k.name for k in kernels if not k.rows]
    if empty:
        return Verdict.UNKNOWN, {}, f"Nsight Compute returned no instruction rows for {len(empty)} kernel(s)"
    return (
        Verdict.NO,
        {},
        (
            f"no {arch.target_family} instruction executed with a true predicate in "
            f"{len(kernels)} profiled kernel(s): {names}"
        ),
    )


def target_info(kernels: list[KernelProfile], arch: ArchSpec, task_flops: float) -> TargetInfo:
    """The TargetInfo of a valid profile: the executed verdict, counts and the family's work share."""
    verdict, counts, message = verdict_from_profiles(kernels, arch)
    if verdict is Verdict.UNKNOWN:
        return _info(arch, verdict, counts, message)
    share = work_share((row for k in kernels for row in k.rows), arch, task_flops)
    return _info(arch, verdict, counts, f"{message}; {share.message}").model_copy(
        update={
            "mma_flops": share.mma_flops,
            "mma_share": share.mma_share,
            "tma_share": share.tma_share,
            "work": share.work,
        }
    )


def cache_key(source_sha256: str, artifact_sha256: str, arch: str, workload: str, entry: str) -> str:
    """Hash identifying one executed-instruction check."""
    text = "|".join((source_sha256, artifact_sha256, arch, workload, entry, ",".join(METRICS), "work-v1"))
    return hashlib.sha256(text.encode()).hexdigest()


def ncu_argv(ncu: str, driver: list[str], application_replay: bool = False) -> list[str]:
    """The Nsight Compute command line over a driver command."""
    argv = [
        ncu,
        "--clock-control",
        "none",
        "--nvtx",
        "--nvtx-include",
        "candidate/",
        "--metrics",
        ",".join(METRICS),
        "--page",
        "source",
        "--print-source",
        "sass",
        "--csv",
    ]
    if application_replay:
        argv += ["--replay-mode", "application"]
    return argv + driver


def _tool_failed(text: str) -> str | None:
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    return "; ".join(errors)[:600] if errors else None


def check_executed(
    arch: ArchSpec,
    inputs: Path,
    so_path: Path,
    entry: str,
    device: int,
    timeout_s: float,
    cache_dir: Path | None,
    key: str,
    driver: list[str] | None = None,
    task_flops: float = 0.0,
) -> tuple[TargetInfo, float, str]:
    """Run (or look up) the check; returns the TargetInfo, ncu wall seconds and the raw output tail.

    ``driver`` replaces the default driver command (used to profile a baseline the same way).
    """
    cached = cache_dir / f"{key}.json" if cache_dir else None
    if cached is not None and cached.exists():
        return TargetInfo.model_validate(json.loads(cached.read_text())), 0.0, "cached"
    ncu = find_tool("ncu")
    if ncu is None:
        return _info(arch, Verdict.UNKNOWN, {}, "Nsight Compute (ncu) is not installed here"), 0.0, ""
    driver = driver or driver_argv(inputs, so_path, entry, device, "profile")
    wall, tail = 0.0, ""
    for application_replay in (False, True):
        run = run_tool(ncu_argv(ncu, driver, application_replay), timeout_s)
        wall += run.wall_s
        tail = run.output[-4000:]
        if run.timed_out:
            return (
                _info(arch, Verdict.UNKNOWN, {}, f"Nsight Compute timed out after {timeout_s:.0f} s"),
                wall,
                tail,
            )
        kernels = parse_ncu_csv(run.output)
        failure = _tool_failed(run.output)
        if run.returncode == 0 and kernels and failure is None:
            info = target_info(kernels, arch, task_flops)
            if cached is not None and info.executed is not Verdict.UNKNOWN:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(info.model_dump_json())
            return info, wall, tail
        if "driver: profile done" not in run.output:
            break  # the candidate itself failed under the profiler: replaying differently will not help
    reason = failure or f"ncu exited with {run.returncode} and profiled {len(kernels)} kernel(s)"
    return _info(arch, Verdict.UNKNOWN, {}, f"profiling failed: {reason}"), wall, tail


def _info(arch: ArchSpec, verdict: Verdict, counts: dict[str, int], message: str) -> TargetInfo:
    return TargetInfo(
        family=arch.target_family,
        mode="executed",
        static=True,
        executed=verdict,
        counts=counts,
        message=message,
    )
