"""In-band target counts: the worker's per-instruction executions joined with the built module's SASS.

The worker counts executions per (function, pc offset) in one verified call (``sandboxed/sass_counts.py``,
``Call.count``); the trusted side lists the built module's instructions by offset (``cpu.sass.pc_opcodes``
over cuobjdump's listing of the very .so it handed out, cached by the CPU stage's ``sass_census``:
``cpu.sass.module_pcs``) and sums the counts per opcode. Rows at offsets
the listing does not hold, or in functions outside the module, are counted apart: they are code the
built module does not contain. The result feeds the same work-share formula as Nsight Compute's counts
(``target_work.work_share``). ``in_band_info`` turns it into the TargetInfo that backs the target verdict
under ``TargetMode.EXECUTED`` (``Proof.CUPTI_IN_BAND``); ``counts_agree`` compares it with Nsight
Compute's on a cross-checked candidate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ptxgym.cpu.sass import module_pcs
from ptxgym.evaluation.protocol import SassRow
from ptxgym.evaluation.trusted.base import BuiltCandidate
from ptxgym.evaluation.trusted.session import SessionResult
from ptxgym.evaluation.trusted.target_work import work_share
from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import TargetInfo, Verdict


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
    targets = {
        op: {"inst_executed": inst, "thread_inst_executed_true": thr}
        for op, (inst, thr) in sorted(joined.per_opcode.items())
        if arch.is_target_opcode(op)
    }
    return {
        "counts": targets,
        "mma_flops": share.mma_flops,
        "mma_share": share.mma_share,
        "work": share.work.value,
        "share_message": share.message,
        "rows": len(rows),
        "unplaced_rows": joined.unplaced,
        "error": error,
    }


def in_band_info(record: dict, arch: ArchSpec) -> tuple[TargetInfo | None, str]:
    """The TargetInfo a counted call proves, or None and why it proves nothing.

    It proves nothing when the count failed, returned no row, or returned a row that is not an
    instruction of the built module (code from elsewhere ran in the counted call: the caller falls back
    to Nsight Compute rather than guess).
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
    executed = Verdict.YES if counts else Verdict.NO
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))
    head = (
        f"executed target instructions ({listed}) in the counted call"
        if counts
        else f"no {arch.target_family} instruction executed with a true predicate in the counted call"
    )
    info = TargetInfo(
        family=arch.target_family,
        mode="executed",
        static=True,
        executed=executed,
        counts=counts,
        message=f"{head}; {record['share_message']} (in-band CUPTI counts)",
        mma_flops=record["mma_flops"],
        mma_share=record["mma_share"],
        work=Verdict(record["work"]) if counts else Verdict.NO,
    )
    return info, ""


def counts_agree(in_band: TargetInfo, ncu: TargetInfo, rel: float = 0.02) -> str:
    """What differs between the in-band verdicts and MMA FLOPs and Nsight Compute's ("" when they match)."""
    if ncu.executed not in (Verdict.YES, Verdict.NO):
        return ""  # nothing measured to compare (a failed profile is its own verdict)
    if in_band.executed is not ncu.executed or in_band.work is not ncu.work:
        return (
            f"in-band counts say executed={in_band.executed.value}, work={in_band.work.value}; Nsight "
            f"Compute says executed={ncu.executed.value}, work={ncu.work.value}"
        )
    a, b = in_band.mma_flops or 0.0, ncu.mma_flops or 0.0
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
