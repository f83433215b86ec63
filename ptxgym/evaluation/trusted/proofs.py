"""The out-of-band proofs of a candidate that passed the check and the timing: memcheck, then ncu.

``run_proofs`` runs compute-sanitizer memcheck (per ``MemcheckMode``) and, unless memory safety already
failed, the executed-instruction proof with its work share and kernel census (per ``TargetMode``). Each
runs the candidate in a one-shot driver sandboxed like the worker (the evaluator's sandbox mode) and
reads the tool's report from a file the candidate cannot write (``tools.ProofDirs``). The evaluator hands
the result to ``verdicts.with_proofs``, which can only take the PASSED away.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ptxgym.evaluation.trusted import ncu
from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, MemcheckMode, TargetMode
from ptxgym.evaluation.trusted.memcheck import run_memcheck
from ptxgym.evaluation.trusted.tools import ProofDirs
from ptxgym.evaluation.trusted.verdicts import ProofResults
from ptxgym.records import settings as user_settings
from ptxgym.records.feedback import MemcheckInfo, Proof, TargetInfo, Verdict
from ptxgym.records.tasks import Task


def run_proofs(
    task: Task,
    cand: BuiltCandidate,
    inputs: Path,
    device: int,
    settings: EvalSettings,
    scratch: Path,
    sandbox: str,
) -> tuple[ProofResults, dict[str, float]]:
    """The proofs of one candidate and their wall seconds (``memcheck``, ``execute``)."""
    walls: dict[str, float] = {}
    memcheck = None
    mode = settings.memcheck
    if mode is MemcheckMode.ALWAYS or (mode is MemcheckMode.FIRST_CORRECT and cand.first_correct_in_episode):
        t = time.perf_counter()
        memcheck = _memcheck(cand, inputs, device, settings, scratch, sandbox)
        walls["memcheck"] = round(time.perf_counter() - t, 4)
        if memcheck.ran and memcheck.clean is not True:  # an error or a failed tool: no profile needed
            return ProofResults(memcheck=memcheck), walls
    t = time.perf_counter()
    target = _target(task, cand, inputs, device, settings, scratch, sandbox)
    walls["execute"] = round(time.perf_counter() - t, 4)
    return dataclasses.replace(target, memcheck=memcheck), walls


def _memcheck(
    cand: BuiltCandidate, inputs: Path, device: int, settings: EvalSettings, scratch: Path, sandbox: str
) -> MemcheckInfo:
    dirs = ProofDirs.create(scratch)
    try:
        info, _, _ = run_memcheck(
            inputs, cand.so_path, cand.entry_symbol, device, settings.memcheck_timeout_s, dirs, sandbox
        )
    finally:
        dirs.remove()
    return info


def _target(
    task: Task,
    cand: BuiltCandidate,
    inputs: Path,
    device: int,
    settings: EvalSettings,
    scratch: Path,
    sandbox: str,
) -> ProofResults:
    """The executed-instruction proof; without a target opcode in the SASS there is nothing to profile."""
    arch = task.arch_spec
    mode = settings.target_mode
    if mode is not TargetMode.EXECUTED or not cand.static_target:
        executed = Verdict.NO if mode is TargetMode.EXECUTED else Verdict.NOT_CHECKED
        message = "" if cand.static_target else "no target-family opcode in the SASS, so none can execute"
        info = TargetInfo(
            family=arch.target_family,
            mode=mode.value,
            static=cand.static_target,
            executed=executed,
            work=executed,
            message=message,
        )
        return ProofResults(target=info, source=None)
    key = ncu.cache_key(
        cand.source_sha256, cand.artifact_sha256, task.arch, task.workload.uuid, cand.entry_symbol
    )
    dirs = ProofDirs.create(scratch)
    try:
        out = ncu.check_executed(
            arch,
            inputs,
            cand.so_path,
            cand.entry_symbol,
            device,
            settings.profile_timeout_s,
            user_settings.cache_dir() / "ncu",
            key,
            task_flops=task.flops,
            module_kernels=cand.kernels,
            dirs=dirs,
            sandbox=sandbox,
        )
    finally:
        dirs.remove()
    return ProofResults(
        target=out.target,
        profile_failed=out.failed,
        foreign_kernels=out.foreign,
        census_checked=out.census,
        source=Proof.NCU_OFFLINE if out.profiled else None,
    )
