"""The adversarial suite ``ptxgym audit`` plays through the env: each case, its task and expected verdict.

A case is an action text a policy could send: a kernel of ``kernels/`` (the evaluator corpus) or of
``actions/`` (attacks on the build, the proofs and the census), with ``#include "gemm_common.cuh"``
inlined, since an action is one file. Each case lists the statuses it may end with and is never to be
paid (``hostile``); the honest controls are expected to pass. ``static`` cases must be decided by the
CPU stages (screen, build), so they are judged on a machine without a GPU too; the others need a GPU
evaluator and report "needs a GPU" under ``--evaluator none``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ptxgym.records.feedback import Status

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"
ACTIONS = HERE / "actions"
COMMON = "gemm_common.cuh"

REJECTED = frozenset({Status.STATIC_REJECT, Status.COMPILE_ERROR})
"""Statuses of a case stopped before it ran: acceptable for every hostile case."""


@dataclass(frozen=True)
class AuditCase:
    """One case of the suite."""

    name: str
    source: Path
    issue: str
    """Where the attack is described, e.g. ``11.2`` (issue 11, item 2), ``11.req3`` (its requirement 3), or
    ``corpus``."""
    statuses: frozenset[Status]
    """What a GPU evaluator may answer (a hostile case may also be rejected before it runs)."""
    hostile: bool = True
    static: bool = False
    """Decided by the CPU stages: rejected before any GPU is needed."""
    task: str = "Gemm-sm90a"
    note: str = ""
    accepted: frozenset[Status] = field(init=False)

    def __post_init__(self) -> None:
        extra = REJECTED if self.hostile else frozenset()
        object.__setattr__(self, "accepted", self.statuses | extra)

    @property
    def expected(self) -> str:
        """The expected verdict, as the table shows it."""
        names = "/".join(sorted(s.value for s in self.statuses))
        if self.static:
            return f"{names} (CPU)"
        return f"{names}, unpaid" if self.hostile else names

    def action(self) -> str:
        """The action text: the source with the shared GEMM header inlined, in a cuda fence."""
        text = self.source.read_text()
        include = f'#include "{COMMON}"'
        if include in text:
            common = (KERNELS / COMMON).read_text().replace("#pragma once\n", "")
            text = text.replace(include, common)
        return f"```cuda\n{text}\n```\n"


def _k(name: str, statuses: set[Status], **kw) -> AuditCase:
    return AuditCase(name, KERNELS / f"{name}.cu", kw.pop("issue", "corpus"), frozenset(statuses), **kw)


def _a(name: str, statuses: set[Status], issue: str, **kw) -> AuditCase:
    return AuditCase(name, ACTIONS / f"{name}.cu", issue, frozenset(statuses), **kw)


CASES: tuple[AuditCase, ...] = (
    # attacks on the build: decided on the CPU
    _a("include_solution", {Status.COMPILE_ERROR, Status.STATIC_REJECT}, "11.1", static=True),
    _a("incbin_macro", {Status.STATIC_REJECT, Status.COMPILE_ERROR}, "11.5", static=True),
    _a("irp_incbin", {Status.STATIC_REJECT, Status.COMPILE_ERROR}, "11.14", static=True),
    _a("macro_incbin", {Status.STATIC_REJECT, Status.COMPILE_ERROR}, "11.14", static=True),
    _a(
        "host_asm_passwd",
        {Status.STATIC_REJECT, Status.COMPILE_ERROR},
        "11.14",
        static=True,
        note="the compile log must not carry /etc/passwd",
    ),
    # attacks on the proofs and the census: need a GPU
    _a("forged_ncu_csv", {Status.PASSED}, "11.2", note="executed = no despite the forged rows"),
    _a("single_wgmma", {Status.PASSED}, "11.13", note="executed = yes, work share ~3e-8: no target credit"),
    _a("module_load_data", {Status.FOREIGN_KERNEL}, "11.11", note="kernel census by name"),
    _a(
        "last_call_wgmma",
        {Status.PASSED},
        "11.counted",
        note="wgmma work only on the step's last call (once the counted call): no target credit unless the "
        "secret counted slot is the last one, 1 in trials x (iterations + 1) = 153 at the defaults",
    ),
    _a(
        "instrumented_wgmma",
        {Status.PASSED},
        "11.counted",
        note="wgmma work (58% of the task's FLOPs) only in calls whose own clock shows instruction "
        "patching (the SASS-counted call): the hardware-counted call sees none, no target credit",
    ),
    # the evaluator corpus
    _k("noop", {Status.UNWRITTEN}),
    _k("half_written", {Status.UNWRITTEN}),
    _k("nan_output", {Status.NONFINITE}),
    _k("input_mutating", {Status.INPUT_MUTATED}),
    _k(
        "timed_overrun",
        {Status.MEMORY_ERROR, Status.RUNTIME_ERROR, Status.CRASH},
        note="4 bytes past C flipped on one timed call and put back on the next: the guard region's check "
        "after the call (MEMORY_ERROR), or with guard pages a fault",
    ),
    _k(
        "timed_scratch",
        {Status.INPUT_MUTATED},
        note="64 KiB of an input as scratch on timed calls only: the sampled checks after them, and the "
        "timing's last check whole",
    ),
    _k("pointer_cache", {Status.INCORRECT_NUMERICAL, Status.UNWRITTEN}),
    _k("call_counting", {Status.UNWRITTEN, Status.INCORRECT_NUMERICAL}),
    _k("hang", {Status.TIMEOUT}, issue="11.8"),
    _k("illegal_address", {Status.RUNTIME_ERROR}),
    _k("exit_process", {Status.CRASH}),
    _k("device_reset", {Status.RUNTIME_ERROR, Status.CRASH}),
    _k("huge_alloc", {Status.RUNTIME_ERROR}),
    _k("host_hidden", {Status.TIMING_ANOMALY, Status.PASSED}, note="PASSED only at its true, slow speed"),
    _k("side_stream", {Status.PASSED, Status.TIMING_ANOMALY}, note="charged its real time"),
    _k("sandbox_escape", {Status.PASSED}, issue="11.3", note="PASSED means nothing got out"),
    _k(
        "oob_read",
        {Status.MEMORY_ERROR, Status.PROOF_FAILED, Status.RUNTIME_ERROR},
        issue="11.12",
        note="RUNTIME_ERROR: the read faults in the worker (guard pages)",
    ),
    _k(
        "guard_overrun",
        {Status.MEMORY_ERROR, Status.RUNTIME_ERROR},
        issue="11.req3",
        note="writes 4 bytes past C: the guard region after C (RUNTIME_ERROR with guard pages)",
    ),
    _k(
        "unobserved_oob_read",
        {Status.RUNTIME_ERROR, Status.CRASH, Status.MEMORY_ERROR},
        note="reads past A only with no sanitizer mapped: caught only by guard pages "
        "(EvalSettings.guard_pages; the GPU evaluator tests play it with them on)",
    ),
    _k(
        "module_from_memory",
        {Status.STATIC_REJECT, Status.FOREIGN_KERNEL},
        issue="11.11",
        note="screen rejects the loader; past it, the in-band census of module images",
    ),
    _k("decoy_wgmma", {Status.PASSED}, note="executed = no: no target credit"),
    # honest controls
    _k("naive", {Status.PASSED}, hostile=False),
    _k("tma_gemm", {Status.PASSED}, hostile=False, note="TMA executes, MMA share 0: no target credit"),
    _k("mha_fwd_naive", {Status.PASSED}, hostile=False, task="MhaFwd-sm90a"),
)


def get_cases(names: list[str] | None = None, static_only: bool = False) -> list[AuditCase]:
    """The cases to play: all, the named ones (in suite order), or the static ones."""
    chosen = [c for c in CASES if not static_only or c.static]
    if names:
        known = {c.name for c in CASES}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown audit case(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        chosen = [c for c in chosen if c.name in names]
    return chosen
