"""In-band target counts: the worker's per-instruction executions joined with the built module's SASS.

The worker counts executions per (function, pc offset) in one verified call (``sandboxed/sass_counts.py``,
``Call.count``); the trusted side lists the built module's instructions by offset (``cpu.sass.pc_opcodes``
over cuobjdump's listing of the very .so it handed out, cached by the CPU stage's ``sass_census``:
``cpu.sass.module_pcs``) and sums the counts per opcode. Rows at offsets
the listing does not hold, or in functions outside the module, are counted apart: they are code the
built module does not contain. The result feeds the same work-share formula as Nsight Compute's counts
(``target_work.work_share``). ``in_band_info`` turns it into the TargetInfo that backs the target verdict
under ``TargetMode.EXECUTED`` (``Proof.CUPTI_IN_BAND``); ``counts_agree`` compares it with Nsight
Compute's on a cross-checked candidate. ``hw_record`` and ``with_hw`` add the hardware counters of the
unpatched hardware-counted call (``target_work.hw_share``): the MMA share becomes the smaller of the two
calls', and the TMA share (bytes over the task's minimal traffic) joins the work verdict where the arch's
target family holds TMA copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

from ptxgym.cpu.sass import module_guarded, module_pcs
from ptxgym.evaluation.protocol import SassRow
from ptxgym.evaluation.trusted.base import BuiltCandidate
from ptxgym.evaluation.trusted.census import is_own_kernel
from ptxgym.evaluation.trusted.session import SessionResult
from ptxgym.evaluation.trusted.target_work import (
    GMMA_INST_METRIC,
    TMA_INST_METRIC,
    WARPGROUP_WARPS,
    combined,
    hw_share,
    smallest_tile_flops,
    tile_flops,
    work_share,
)
from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import TargetInfo, Verdict, work_verdict


@dataclass
class JoinedCounts:
    """Executions per opcode of one counted call, and what could not be placed."""

    per_opcode: dict[str, list[int]] = field(default_factory=dict)
    """Opcode with modifiers -> [inst_executed, thread_inst_executed_true]."""
    unplaced: int = 0
    """Rows whose (function, offset) is not an instruction of the built module."""

    def rows(self) -> list[tuple[str, int, int]]:
        """(opcode, inst_executed, thread_inst_executed_true) rows for ``work_share``."""
        return [(op, inst, threads) for op, (inst, threads) in self.per_opcode.items()]


def join_counts(rows: Iterable[SassRow], pcs: Mapping[str, Mapping[int, str]]) -> JoinedCounts:
    """Sum the rows per opcode of the module's listing (a missing thread count: 32 per warp instruction)."""
    joined = JoinedCounts()
    for row in rows:
        opcode = pcs.get(row.function, {}).get(row.pc)
        if opcode is None:
            joined.unplaced += 1
            continue
        totals = joined.per_opcode.setdefault(opcode, [0, 0])
        totals[0] += row.inst
        totals[1] += row.threads if row.threads else 32 * row.inst
    return joined


def in_band_target(
    rows: list[SassRow] | None, error: str, pcs: Mapping[str, Mapping[int, str]], arch: ArchSpec, flops: float
) -> dict:
    """The record ``details['in_band_target']``: target counts, work share and what went wrong."""
    if rows is None:
        return {"error": error or "no counted call"}
    joined = join_counts(rows, pcs)
    share = work_share(joined.rows(), arch, flops)
    target_functions = sorted(
        {
            row.function
            for row in rows
            if row.inst > 0 and arch.is_target_opcode(pcs.get(row.function, {}).get(row.pc, ""))
        }
    )
    targets = {
        op: {"inst_executed": inst, "thread_inst_executed_true": thr}
        for op, (inst, thr) in sorted(joined.per_opcode.items())
        if arch.is_target_opcode(op)
    }
    return {
        "counts": targets,
        "mma_flops": share.mma_flops,
        "mma_share": share.mma_share,
        "mmas": share.mmas,
        "work": share.work.value,
        "share_message": share.message,
        "rows": len(rows),
        "unplaced_rows": joined.unplaced,
        "target_functions": target_functions,
        "error": error,
    }


def in_band_info(record: dict, arch: ArchSpec, census: Census | None = None) -> tuple[TargetInfo | None, str]:
    """The TargetInfo a counted call proves, or None and why it proves nothing.

    It proves nothing when the count failed, returned no row, or returned a row that is not an
    instruction of the built module (code from elsewhere ran in the counted call: the caller falls back
    to Nsight Compute rather than guess).

    ``census``: the in-band census of the timed calls (None: none was taken). A kernel that ran target
    instructions in the counted call must have been launched at least once per timed call the census
    covers; one launched less is a decoy for the count (a candidate that recognises the counted call,
    whose command says so, and launches its wgmma kernel only there, or there and in a few timed calls):
    the target is executed but did not do the timed calls' work, so no work credit. A census the worker
    reported an error for cannot vouch for that: the work credit is withheld (UNKNOWN). (A kernel launched
    in every call that does its work only when counted is not caught here.)
    """
    if record.get("error"):
        return None, f"in-band counts failed: {record['error']}"
    if not record.get("rows"):
        return None, "the counted call returned no instruction rows"
    if record.get("unplaced_rows"):
        return None, (f"{record['unplaced_rows']} counted row(s) are not instructions of the built module")
    counts: dict[str, int] = {}
    for opcode, value in record["counts"].items():
        if value["thread_inst_executed_true"] > 0:
            base = opcode.split(".")[0]
            counts[base] = counts.get(base, 0) + value["thread_inst_executed_true"]
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))
    head = (
        f"executed target instructions ({listed}) in the counted call"
        if counts
        else f"no {arch.target_family} instruction executed with a true predicate in the counted call"
    )
    message = f"{head}; {record['share_message']} (in-band CUPTI counts)"
    functions = record.get("target_functions", [])
    if census is not None and census.error and functions:
        message = f"{head}; the kernel census reported an error ({census.error[:200]}): work not credited"
        return _executed(arch, counts, message, None, None, Verdict.UNKNOWN), ""
    absent = [f for f in functions if census is not None and census.launches(f) < census.calls]
    if absent:
        message = (
            f"{head}, in kernel(s) the timed calls did not all launch ({', '.join(absent)[:300]}; "
            f"{census.calls if census else 0} timed calls): the target did not do their work (in-band CUPTI "
            "counts and kernel census)"
        )
        return _executed(arch, counts, message, 0.0, 0.0, Verdict.NO), ""
    return _executed(
        arch, counts, message, record["mma_flops"], record["mma_share"], Verdict(record["work"])
    ), ""


@dataclass(frozen=True)
class Census:
    """The in-band census of a subject's timed calls, as ``in_band_info`` reads it."""

    kernels: Mapping[str, int]
    """Launches by kernel name in the census windows (the timed calls', and an extra call's if inside)."""
    calls: int
    """Timed calls the windows cover."""
    error: str = ""
    module_functions: frozenset[str] = frozenset()
    """Every function of the built module: a census name equal to one of them is that one's alone."""
    counted_activities: tuple[int, int] | None = None
    """GPU activities in the hardware-counted call's window, and the most in any timed call's window of
    its trial (``SessionResult.hw_window``; None: the call ran outside the activity trial)."""

    def launches(self, function: str) -> int:
        """Launches of ``function`` (a mangled module kernel) the census saw.

        A name equal to the function counts; a name that only resembles it (``census.is_own_kernel``:
        ``gemm`` against ``_ZN2ns4gemmEPf``) counts unless it is another function of the module verbatim
        (an ``extern "C" gemm`` beside ``ns::gemm``: a reviewer's find, one kernel's launches vouching for
        another's).
        """
        if function in self.kernels:
            return self.kernels[function]
        others = self.module_functions - {function}
        return sum(
            n for name, n in self.kernels.items() if name not in others and is_own_kernel(name, [function])
        )


def _executed(
    arch: ArchSpec,
    counts: dict[str, int],
    message: str,
    mma_flops: float | None,
    mma_share: float | None,
    work: Verdict,
    tma_share: float | None = None,
) -> TargetInfo:
    """An in-band TargetInfo: executed when any target count is there, and no work credit without one."""
    return TargetInfo(
        family=arch.target_family,
        mode="executed",
        static=True,
        executed=Verdict.YES if counts else Verdict.NO,
        counts=counts,
        message=message,
        mma_flops=mma_flops,
        mma_share=mma_share,
        tma_share=tma_share,
        work=work if counts else Verdict.NO,
    )


def counts_agree(in_band: TargetInfo, ncu: TargetInfo, rel: float = 0.02, lower_bound: bool = False) -> str:
    """What differs between the in-band verdicts and MMA FLOPs and Nsight Compute's ("" when they match).

    ``lower_bound``: the in-band MMA FLOPs are a lower bound (``hw_only_target``): they disagree only by
    claiming more than Nsight Compute measured.
    """
    if ncu.executed not in (Verdict.YES, Verdict.NO):
        return ""  # nothing measured to compare (a failed profile is its own verdict)
    # with hardware counters the work verdict also holds the TMA share, which Nsight Compute does not
    # measure: it may be lower than Nsight Compute's, never higher (a YES against its NO claims MMA work it
    # did not see; a reviewer's find: any disagreement was let through, so forged TMA bytes paid)
    hw = in_band.tma_share is not None
    conflict = in_band.work is not ncu.work
    if hw:
        conflict = in_band.work is Verdict.YES and ncu.work is Verdict.NO
    # withheld (unusable hardware counters, ``with_hw``): Nsight Compute's replay cannot restore the credit
    # (a kernel switching on instrumentation shows wgmma to it too), nor does it contradict the withholding
    withheld = in_band.work is Verdict.UNKNOWN and in_band.executed is Verdict.YES
    if in_band.executed is not ncu.executed or (conflict and not withheld):
        return (
            f"in-band counts say executed={in_band.executed.value}, work={in_band.work.value}; Nsight "
            f"Compute says executed={ncu.executed.value}, work={ncu.work.value}"
        )
    a, b = in_band.mma_flops or 0.0, ncu.mma_flops or 0.0
    if lower_bound and a <= b * (1 + rel) + 1.0:
        return ""
    if abs(a - b) > rel * max(a, b, 1.0):
        return f"in-band MMA FLOPs {a:.4g} differ from Nsight Compute's {b:.4g} by more than {rel:.0%}"
    return ""


def counted_target(
    candidate: BuiltCandidate | None, result: SessionResult, arch: ArchSpec | None, flops: float
) -> dict:
    """``details['in_band_target']`` of a subject whose extra call was counted (``Session.count_call``)."""
    if candidate is None or arch is None:
        return {"error": "no candidate module or no known architecture"}
    try:
        pcs = module_pcs(candidate.so_path)
    except Exception as exc:  # noqa: BLE001 - the listing is ours; its failure is recorded, not fatal
        return {"error": f"SASS listing of the module failed: {exc}"[:300]}
    return in_band_target(result.sass_rows, result.count_error, pcs, arch, flops)


def hw_record(result: SessionResult, sass: dict, flops: float, min_bytes: float) -> dict:
    """``details['hw_counters']``: the hardware-counted call's counters and shares, or why there are none.

    ``sass``: the SASS-counted call's record (``in_band_target``), whose FLOPs per MMA size the counters.
    """
    if result.hw_counts is None:
        return {"error": result.hw_count_error or "no hardware-counted call was made"}
    mmas, sass_flops = sass.get("mmas"), sass.get("mma_flops")
    per_mma = sass_flops / mmas if mmas and sass_flops is not None else None
    try:
        share = hw_share(result.hw_counts.metrics, per_mma, flops, min_bytes)
    except KeyError as exc:
        return {"error": str(exc.args[0])}
    return {"metrics": dict(result.hw_counts.metrics), **asdict(share), "error": ""}


def with_hw(info: TargetInfo, record: dict, arch: ArchSpec) -> TargetInfo:
    """The in-band TargetInfo with the hardware counters' shares.

    The MMA share becomes the smaller of the SASS-counted and the hardware-counted call's (``mma_flops``
    stays the SASS call's, the figure Nsight Compute is compared with); ``tma_share`` is reported, and
    required (``work_verdict``) where the target family holds TMA copies (``UTMALDG``).

    Without usable counters (``record["error"]``) the work is UNKNOWN, never the SASS call's yes: the
    range profiler runs in the candidate's process, so a kernel that switches on the patched call's
    slowdown could otherwise break the profiler and be credited on the patched call alone.
    """
    if record.get("error"):
        withheld: Verdict = Verdict.UNKNOWN if info.work is Verdict.YES else info.work
        message = f"{info.message}; no hardware counters ({record['error']}): target credit withheld"
        return info.model_copy(update={"work": withheld, "message": message})
    mma = combined(info.mma_share, record["mma_share"])
    tma = record["tma_share"]
    required = tma if arch.is_target_opcode("UTMALDG") else None
    work = work_verdict(mma, required, bool(arch.mma_opcodes)) if info.executed is Verdict.YES else info.work
    message = f"{info.message}; {record['message']}"
    return info.model_copy(update={"mma_share": mma, "tma_share": tma, "work": work, "message": message})


BULK_COPY_OPCODE = "UBLKCP"
"""The non-tensor bulk copy (``cp.async.bulk``), which the range profiler's TMA-load counters count beside
``UTMALDG`` (``runner/hw_logic.h``)."""


def counters_suffice(candidate: BuiltCandidate, arch: ArchSpec) -> bool:
    """Whether the hardware counters alone can size the built module's target work (no patched call).

    The task has an MMA family, the module's MMA instructions spell exactly one tile shape (GMMA
    instructions x its FLOPs is then the MMA work exactly, the census ruling out other modules'
    instructions), none under a predicate guard (the GMMA counter counts warp instructions issued, so
    one whose predicate is off would count with no work done: a reviewer's caution; the SASS rows count
    the threads whose predicate was on), and it holds no non-tensor bulk copy (``BULK_COPY_OPCODE``: the
    TMA-load counters would count it as TMA). False where the listing fails or an MMA opcode spells no
    tile: the SASS-patched call then counts per instruction. A task whose target is TMA alone is never
    counted by the counters alone (a reviewer's find: bulk copies beside one dead ``UTMALDG`` would have
    earned its credit).
    """
    if not arch.mma_opcodes:
        return False
    try:
        pcs, guarded = module_pcs(candidate.so_path), module_guarded(candidate.so_path)
    except Exception:  # noqa: BLE001 - the listing is ours; without it the patched call decides
        return False
    if any(arch.is_mma_opcode(op) for ops in guarded.values() for op in ops.values()):
        return False  # a guarded MMA may be issued, and counted, with its predicate off
    opcodes = [op for ops in pcs.values() for op in ops.values()]
    if any(op.split(".")[0] == BULK_COPY_OPCODE for op in opcodes):
        return False
    tiles = {tile_flops(op) for op in opcodes if arch.is_mma_opcode(op)}
    return None not in tiles and len(tiles) == 1


HW_WINDOW_SLACK = 8
"""The least room the hardware-counted call's window has beyond the busiest timed call's activities of its
trial (``hw_census``: that count again, or this, whichever is larger): room for any copy the range profiler
makes inside its range (none seen: on an H100 the experts' counted windows held 1 activity against 1,
``bench/results/gpu_cost_2026-12-06_s28_head_h100.txt``). A kernel launched only in the counted call must be
launched at least once per timed call to pass the census's totals, far more than this."""


def hw_census(functions: list[str], census: Census | None, counted: bool) -> tuple[Verdict | None, str]:
    """What the census says of the counters' credit: None (it vouches), or the work verdict and why.

    ``functions``: the module's kernels holding a target opcode; ``counted``: the counters saw target
    instructions. The counters name no kernel, so the census must show the target's kernels doing the
    timed calls' work: one launched in some calls but not all is a decoy for the counted call (a kernel
    that recognises that call, by its command or the profiler's set-up before it, and runs its wgmma only
    there: a reviewer's find), and target instructions counted with none of those kernels launched in
    every timed call came from no timed call's work. Counts are totals over the windows, so a kernel
    launched many times in the counted call alone would pass that test: the counted call's window may hold
    at most the GPU activities of the busiest timed call of its trial plus the larger of that count and
    ``HW_WINDOW_SLACK`` (a later review's find). A kernel launched in every call that works only when
    counted is not caught here (Nsight Compute's draw is). No census, or one reporting an error: UNKNOWN.
    """
    if census is None or census.calls <= 0:
        return Verdict.UNKNOWN, "no kernel census of the timed calls vouches for the counters"
    if census.error:
        return Verdict.UNKNOWN, f"the kernel census reported an error ({census.error[:200]})"
    window = census.counted_activities
    if window is not None and window[0] > window[1] + max(HW_WINDOW_SLACK, window[1]):
        return Verdict.NO, (
            f"the counted call launched far more GPU work ({window[0]} activities) than the busiest timed "
            f"call of its trial ({window[1]}): work done only where it is counted"
        )
    launched = {f: census.launches(f) for f in functions}
    short = sorted(f for f, n in launched.items() if 0 < n < census.calls)
    if short:
        return Verdict.NO, (
            "kernel(s) holding the target that the timed calls did not all launch "
            f"({', '.join(short)[:300]}; {census.calls} timed calls): the target did not do their work"
        )
    if counted and not any(n >= census.calls for n in launched.values()):
        return Verdict.NO, "no kernel holding the target was launched in every timed call"
    return None, ""


def hw_only_target(
    candidate: BuiltCandidate,
    result: SessionResult,
    arch: ArchSpec,
    flops: float,
    min_bytes: float,
    census: Census | None = None,
) -> tuple[TargetInfo | None, dict]:
    """The TargetInfo the hardware-counted call proves alone (``EvalSettings.sass_count_with_hw`` off).

    Executed: any GMMA or global TMA-load instruction counted. MMA FLOPs: GMMA instructions / 4 (one per
    warp of a warpgroup) x the module's smallest static MMA tile, a lower bound; TMA share as in
    ``with_hw``. ``(None, record)`` with the record's ``error`` when the counters or the listing failed:
    the caller then has no in-band proof (Nsight Compute decides). Unlike SASS rows, the counters are not
    tied to the built module's instructions: inside the activity trial (``hw_count_in_trial``, the
    default) the census ties the call's kernels to the module; outside it no census sees them.
    ``census``: the timed calls' census, which must vouch for the credit (``hw_census``).
    """
    if result.hw_counts is None:
        return None, {"error": result.hw_count_error or "no hardware-counted call was made"}
    try:
        pcs = module_pcs(candidate.so_path)
    except Exception as exc:  # noqa: BLE001 - the listing is ours; its failure is recorded, not fatal
        return None, {"error": f"SASS listing of the module failed: {exc}"[:300]}
    metrics = result.hw_counts.metrics
    per_mma = smallest_tile_flops((op for ops in pcs.values() for op in ops.values()), arch)
    try:
        share = hw_share(metrics, per_mma, flops, min_bytes)
    except KeyError as exc:
        return None, {"error": str(exc.args[0])}
    mmas = metrics[GMMA_INST_METRIC] / WARPGROUP_WARPS
    loads = metrics.get(TMA_INST_METRIC, 0.0)
    families = (("GMMA", mmas, "HGMMA"), ("TMA loads", loads, "UTMALDG"))
    counts = {k: int(v) for k, v, op in families if v > 0 and arch.is_target_opcode(op)}
    required = share.tma_share if arch.is_target_opcode("UTMALDG") else None
    record = {"metrics": dict(metrics), **asdict(share), "flops_per_mma": per_mma, "error": ""}
    message = (
        f"{share.message} (hardware counters only, FLOPs per MMA from the module's smallest tile: "
        "a lower bound)"
    )
    work = work_verdict(share.mma_share, required, bool(arch.mma_opcodes))
    functions = sorted(f for f, ops in pcs.items() if any(arch.is_target_opcode(op) for op in ops.values()))
    if census is not None:
        census = replace(census, module_functions=frozenset(pcs))
        record["window"] = census.counted_activities  # the activity rule's two counts, for the record
    vetoed, why = hw_census(functions, census, bool(counts))
    if vetoed is not None and counts:
        record["census"] = why
        message = f"{message}; {why}: work not credited (hardware counters and kernel census)"
        mma_flops, mma_share = (0.0, 0.0) if vetoed is Verdict.NO else (None, None)
        return _executed(arch, counts, message, mma_flops, mma_share, vetoed, share.tma_share), record
    return _executed(arch, counts, message, share.mma_flops, share.mma_share, work, share.tma_share), record
