"""Executed target instructions: Nsight Compute per-instruction counts inside the candidate's call.

Two commands. The profile (FACTS.md): ``ncu --clock-control none --nvtx --nvtx-include "candidate/"
--metrics inst_executed,thread_inst_executed_true --export <report dir>/profile <driver>`` writes a
report file, whose bytes are taken as soon as the tool exits; the read-back ``ncu --import <report>
--page source --print-source sass --csv --log-file <csv>`` turns them into CSV, holding no GPU, from a
sealed in-memory copy into an in-memory file (``_convert``; where the tool refuses that, from the report
directory under the hold, as before). Only that CSV is parsed: the candidate's stdout is never read as
proof (issue 11 item 2: a kernel that printed ncu-shaped rows got a yes), and the driver runs
sandboxed, so it cannot write the report directory (``tools.ProofDirs``). A missing or
unparseable report is a failed proof (``ProfileOutcome.failed``: PROOF_FAILED), never a yes. The CSV has,
per profiled kernel, a ``"Kernel Name","<name>"`` row, then a header naming ``Address``, ``Source`` and
the metrics, then one row per SASS instruction. A target-family opcode (``ArchSpec.is_target_opcode``)
with a positive predicate-true thread count means the family executed: YES. A valid profile with none:
NO. No kernel profiled, a kernel without instruction rows, a tool error or a timeout: UNKNOWN, never YES.
The same rows give the family's share of the task's work (``target_work``: executed MMA FLOPs / task
FLOPs), which the target credit also needs, and the names of the kernels that ran, which are compared
with the kernels of the candidate's built module (``foreign_kernels``). Outcomes are cached on disk by
hash of source, artifact, architecture and workload.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ptxgym.evaluation.trusted.census import is_own_kernel
from ptxgym.evaluation.trusted.target_work import work_share
from ptxgym.evaluation.trusted.tools import (
    MAX_REPORT_BYTES,
    Gate,
    ProofDirs,
    ToolRun,
    driver_argv,
    find_tool,
    read_fd,
    read_report,
    run_tool,
    sealed_file,
    tool_environ,
)
from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import TargetInfo, Verdict

METRICS = ("inst_executed", "thread_inst_executed_true")
REPORT = "profile"
"""Stem of the exported report in ``ProofDirs.report`` (ncu adds ``.ncu-rep``)."""
SOURCE_PAGE = ("--page", "source", "--print-source", "sass", "--csv")
"""The output options that print the profiled kernels' SASS rows with their counts as CSV."""
SOURCE_CSV = "source.csv"
"""The read-back CSV in ``ProofDirs.report``: the only text parsed."""
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
    text = "|".join((source_sha256, artifact_sha256, arch, workload, entry, ",".join(METRICS), "proof-v2"))
    return hashlib.sha256(text.encode()).hexdigest()


def profile_argv(
    ncu: str, report_stem: Path, driver: list[str], application_replay: bool = False
) -> list[str]:
    """The profiling command: one driver run, its NVTX range ``candidate`` exported to a report file."""
    argv = [
        ncu,
        "--clock-control",
        "none",
        "--nvtx",
        "--nvtx-include",
        "candidate/",
        "--metrics",
        ",".join(METRICS),
        "--export",
        str(report_stem),
        "--force-overwrite",
    ]
    if application_replay:
        argv += ["--replay-mode", "application"]
    return argv + driver


def import_argv(ncu: str, report_file: Path, csv_file: Path) -> list[str]:
    """The read-back command: the report's source page as CSV, written by ncu to ``csv_file``."""
    return [ncu, "--import", str(report_file), *SOURCE_PAGE, "--log-file", str(csv_file)]


def _tool_failed(text: str) -> str | None:
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    return "; ".join(errors)[:600] if errors else None


# ------------------------------------------------------------------------------------ kernel census


def foreign_kernels(kernels: list[KernelProfile], module_kernels: Sequence[str] | None) -> tuple[str, ...]:
    """Names of profiled kernels that are not the module's (none when there is no list: no census)."""
    if module_kernels is None:
        return ()
    names = dict.fromkeys(k.name for k in kernels if not is_own_kernel(k.name, module_kernels))
    return tuple(names)


# ---------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class ProfileOutcome:
    """What the executed-instruction proof found."""

    target: TargetInfo
    foreign: tuple[str, ...] = ()
    """Profiled kernels that are not from the candidate's built module."""
    census: bool = False
    """Whether the profiled kernels were compared with the module's."""
    failed: str = ""
    """Why the profiler, which did run, produced no usable report ("" if it did, or never ran)."""
    profiled: bool = False
    """Whether ``target`` comes from a profile (else from the SASS, or the tool is missing)."""
    wall_s: float = 0.0
    tail: str = ""
    """Tail of the profiled run's output (candidate output included; a log, never parsed)."""


def read_profile(
    ncu: str, driver: list[str], dirs: ProofDirs, timeout_s: float, gate: Gate | None = None
) -> tuple[list[KernelProfile] | None, str, float, str]:
    """Profile, read back, parse: (kernels, "", wall, tail) or (None, why it failed, wall, tail).

    Kernel replay first; if the driver itself finished (its own marker in the log, only a hint) but no
    usable report came back, once more with application replay. The report's bytes are taken as soon as
    the profiled run's process group is gone: with ``gate``, still holding the GPU (``tools.run_tool``),
    so no other candidate's code is alive between the report's writing and its taking. Their conversion
    to CSV (``ncu --import``, a second run of the tool's front end) then holds no GPU (``_convert``).
    """
    wall, tail, reason = 0.0, "", ""
    env = tool_environ(dirs.scratch)
    report = dirs.report / f"{REPORT}.ncu-rep"
    csv_file = dirs.report / SOURCE_CSV
    for application_replay in (False, True):
        for stale in (report, csv_file):
            stale.unlink(missing_ok=True)
        if not dirs.renew_scratch():  # what the candidate left in the first attempt's scratch must go
            return None, "the candidate's scratch could not be emptied for another profile", wall, tail
        run = run_tool(
            profile_argv(ncu, dirs.report / REPORT, driver, application_replay),
            timeout_s,
            env,
            dirs.scratch,
            gate,
            read=lambda code, late: _take(report, code, late),
        )
        wall, tail = wall + run.wall_s, run.output[-4000:]
        if run.timed_out:
            return None, f"Nsight Compute timed out after {timeout_s:.0f} s", wall, tail
        taken: _Taken = run.read
        if run.returncode != 0 or not taken.written:
            reason = f"ncu exited with {run.returncode} and {'wrote' if taken.written else 'wrote no'} report"
        elif taken.data is None:
            reason = taken.reason
        else:
            t0 = time.perf_counter()
            kernels, reason = _convert(ncu, taken.data, env, dirs, timeout_s, gate)
            wall += time.perf_counter() - t0
            if kernels is not None:
                return kernels, "", wall, tail
        if "driver: profile done" not in run.output:
            break  # the candidate itself failed under the profiler: replaying differently will not help
    return None, reason, wall, tail


@dataclass(frozen=True)
class _Taken:
    """The report as the profile left it, taken under the hold: whether one was written, its bytes."""

    written: bool
    data: bytes | None = None
    reason: str = ""


def _take(report: Path, returncode: int | None, timed_out: bool) -> _Taken:
    """The report's bytes; nothing is taken after a failed or timed-out profile (it is not used)."""
    if not report.is_file():
        return _Taken(written=False)
    if timed_out or returncode != 0:
        return _Taken(written=True, reason="the profile failed")
    try:
        if report.stat().st_size > MAX_REPORT_BYTES:
            return _Taken(True, reason=f"Nsight Compute's report is larger than {MAX_REPORT_BYTES >> 20} MiB")
        return _Taken(True, report.read_bytes())
    except OSError as exc:
        return _Taken(True, reason=f"Nsight Compute's report could not be read: {exc}")


def _convert(
    ncu: str, data: bytes, env: dict[str, str], dirs: ProofDirs, timeout_s: float, gate: Gate | None
) -> tuple[list[KernelProfile] | None, str]:
    """The kernels of a taken report, converted without holding the GPU where the tool allows it.

    First from a sealed in-memory copy of the taken bytes (``tools.sealed_file``: nobody can change it,
    however they reach it), imported as ``/proc/self/fd/N``, the CSV written to a private in-memory file
    (``/proc/self/fd/M``): no path in the file system, so nothing a candidate jailed to its scratch
    (``sandbox.py``; it reads only its own ``/proc`` entry) can reach, and the GPU is free meanwhile
    (``Gate.outside_s``). What that leaves to a partial jail's hole (code on a thread Landlock did not
    reach, ``sandbox.py``): opening the converting tool's output through ``/proc`` while it runs, the
    same reach it has to the evaluator's caches on disk. Where the tool refuses such paths (or the
    conversion fails for any reason), the report is written back from the taken bytes and converted as
    before, holding the GPU again (``Gate.held``), so no other candidate's code is alive meanwhile.
    """
    t0 = time.perf_counter()
    kernels, reason = _import_sealed(ncu, data, env, dirs, timeout_s)
    if gate is not None:
        gate.outside_s += time.perf_counter() - t0
    if kernels is not None:
        return kernels, ""

    def from_file() -> tuple[list[KernelProfile] | None, str]:
        return _import_file(ncu, data, env, dirs, timeout_s)

    again, why = gate.held(from_file) if gate is not None else from_file()
    if again is None:
        return None, f"{why} (from memory: {reason})"
    return again, ""


def _import_sealed(
    ncu: str, data: bytes, env: dict[str, str], dirs: ProofDirs, timeout_s: float
) -> tuple[list[KernelProfile] | None, str]:
    """``ncu --import`` of a sealed copy of ``data``, its CSV into an in-memory file (``_convert``)."""
    rep = sealed_file(data)
    try:
        out = os.memfd_create("ptxgym-ncu-csv", os.MFD_CLOEXEC)
        try:
            argv = import_argv(ncu, Path(f"/proc/self/fd/{rep}"), Path(f"/proc/self/fd/{out}"))
            back = run_tool(argv, timeout_s, env, dirs.report, pass_fds=(rep, out))
            text = read_fd(out)
        finally:
            os.close(out)
    finally:
        os.close(rep)
    return _parsed(back, text)


def _import_file(
    ncu: str, data: bytes, env: dict[str, str], dirs: ProofDirs, timeout_s: float
) -> tuple[list[KernelProfile] | None, str]:
    """``ncu --import`` of the report file, rewritten from ``data`` first, its CSV into ``SOURCE_CSV``."""
    report, csv_file = dirs.report / f"{REPORT}.ncu-rep", dirs.report / SOURCE_CSV
    try:
        csv_file.unlink(missing_ok=True)
        report.write_bytes(data)  # what the file held since the bytes were taken does not count
    except OSError as exc:
        return None, f"Nsight Compute's report could not be written back: {exc}"
    back = run_tool(import_argv(ncu, report, csv_file), timeout_s, env, dirs.report)
    return _parsed(back, read_report(csv_file))


def _parsed(back: ToolRun, text: str | None) -> tuple[list[KernelProfile] | None, str]:
    """The kernels of a read-back's CSV, or why there are none."""
    failure = _tool_failed(back.output) or _tool_failed(text or "")
    kernels = parse_ncu_csv(text) if text else []
    if back.timed_out or back.returncode != 0 or failure or not kernels:
        why = failure or f"the read-back exited with {back.returncode} and gave {len(kernels)} kernel(s)"
        return None, f"Nsight Compute's report could not be read: {why}"
    return kernels, ""


def check_executed(
    arch: ArchSpec,
    inputs: Path,
    so_path: Path | None,
    entry: str,
    device: int,
    timeout_s: float,
    cache_dir: Path | None,
    key: str,
    driver: list[str] | None = None,
    task_flops: float = 0.0,
    module_kernels: Sequence[str] | None = None,
    dirs: ProofDirs | None = None,
    sandbox: str = "on",
    gate: Gate | None = None,
    exit_now: bool = False,
) -> ProfileOutcome:
    """Run (or look up) the check over one call of the candidate, sandboxed, in ``dirs`` (or fresh ones).

    ``driver`` replaces the default driver command (used to profile a baseline the same way); pass the
    ``dirs`` whose scratch it names. ``module_kernels``: the built module's kernel names, for the census.
    ``exit_now``: the default driver ends without the interpreter's teardown (``EvalSettings.ncu_exit_now``).
    """
    cached = cache_dir / f"{key}.json" if cache_dir else None
    if cached is not None and cached.exists():
        data = json.loads(cached.read_text())
        target = TargetInfo.model_validate(data["target"])
        return ProfileOutcome(target, tuple(data["foreign"]), data["census"], profiled=True, tail="cached")
    ncu = find_tool("ncu")
    if ncu is None:
        return ProfileOutcome(_info(arch, Verdict.UNKNOWN, {}, "Nsight Compute (ncu) is not installed here"))
    own = dirs or ProofDirs.create()
    try:
        driver = driver or driver_argv(
            inputs,
            so_path,
            entry,
            device,
            "profile",
            scratch=own.scratch,
            sandbox=sandbox,
            gate=gate,
            exit_now=exit_now,
        )
        kernels, reason, wall, tail = read_profile(ncu, driver, own, timeout_s, gate)
    finally:
        if dirs is None:
            own.remove()
    if kernels is None:
        info = _info(arch, Verdict.UNKNOWN, {}, f"profiling failed: {reason}")
        return ProfileOutcome(info, failed=reason, profiled=True, wall_s=wall, tail=tail)
    outcome = ProfileOutcome(
        target_info(kernels, arch, task_flops),
        foreign_kernels(kernels, module_kernels),
        module_kernels is not None,
        profiled=True,
        wall_s=wall,
        tail=tail,
    )
    if cached is not None and outcome.target.executed is not Verdict.UNKNOWN:
        cached.parent.mkdir(parents=True, exist_ok=True)
        record = {"target": outcome.target.model_dump(mode="json"), "foreign": list(outcome.foreign)}
        part = cached.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
        part.write_text(json.dumps({**record, "census": outcome.census}))
        part.replace(cached)  # whole or absent for a concurrent reader (proofs run outside the GPU turn)
    return outcome


def _info(arch: ArchSpec, verdict: Verdict, counts: dict[str, int], message: str) -> TargetInfo:
    return TargetInfo(
        family=arch.target_family,
        mode="executed",
        static=True,
        executed=verdict,
        counts=counts,
        message=message,
    )
