"""A task whose only target family is TMA (GqaPagedDecode).

Its record's ``targets`` are ``{"sm_90a": ["tma"], "sm_100a": ["tma"]}``.
Its family has no MMA opcodes (``TargetFamily.mma == ()``), so no kernel can show an MMA share. The target
credit must then rest on what the family does (the bytes TMA moved, a hardware counter), not on an MMA
share that is 0 by construction; and the evaluator must judge the in-band counts by the task's families
(``task.arch_spec``), as the SASS census and Nsight Compute do, not by the device's default ones.
CPU only.
"""

from __future__ import annotations

import pytest

from ptxgym.evaluation.protocol import HwCounts, SassRow
from ptxgym.evaluation.trusted.base import BuiltCandidate
from ptxgym.evaluation.trusted.sass_join import (
    hw_only_target,
    hw_record,
    in_band_info,
    in_band_target,
    with_hw,
)
from ptxgym.evaluation.trusted.session import SessionResult
from ptxgym.evaluation.trusted.target_work import (
    GMMA_INST_METRIC,
    TMA_BYTES_METRIC,
    TMA_INST_METRIC,
    work_share,
)
from ptxgym.records.feedback import Verdict
from ptxgym.records.tasks import get_task

KERNEL = "_Z12paged_decodePK13__nv_bfloat16"
PCS = {KERNEL: {0x10: "UTMALDG.2D", 0x20: "FFMA", 0x30: "LDS.128"}}
"""The built module's listing of an honest TMA decode kernel: TMA loads, SIMT math, no MMA at all."""
ROWS = [
    SassRow(function=KERNEL, pc=0x10, inst=9625, threads=9625),  # one elected thread per copy
    SassRow(function=KERNEL, pc=0x20, inst=500_000, threads=16_000_000),
    SassRow(function=KERNEL, pc=0x30, inst=100_000, threads=3_200_000),
]


def _decode(arch: str):
    task = get_task(f"GqaPagedDecode-{arch}")
    assert task.arch_spec.mma_opcodes == () and task.arch_spec.is_target_opcode("UTMALDG")
    assert task.flops > 0 and task.min_bytes > 0
    return task


def _hw(task, tma_bytes: float) -> HwCounts:
    metrics = {GMMA_INST_METRIC: 0.0, TMA_BYTES_METRIC: tma_bytes, TMA_INST_METRIC: 9625.0 / 32}
    return HwCounts(metrics=metrics, passes=1, ranges=1)


def test_an_honest_tma_only_kernel_is_credited_by_the_hardware_counters() -> None:
    """SASS count + hardware counters (the default native-runner path on sm_90a)."""
    task = _decode("sm90a")
    arch = task.arch_spec
    record = in_band_target(ROWS, "", PCS, arch, task.flops)
    info, why = in_band_info(record, arch)
    assert info is not None and why == ""
    assert info.executed is Verdict.YES  # UTMALDG ran
    # every input byte came in through TMA (min_bytes counts the output too, so a little under 1)
    hw = hw_record(
        SessionResult(hw_counts=_hw(task, 0.98 * task.min_bytes)), record, task.flops, task.min_bytes
    )
    assert hw["error"] == "" and hw["tma_share"] == pytest.approx(0.98)
    final = with_hw(info, hw, arch)
    assert final.work is Verdict.YES, final.message  # today: NO, the MMA share of a family without MMA is 0
    assert final.credited
    # a token TMA load beside plain loads is still no credit
    token = hw_record(
        SessionResult(hw_counts=_hw(task, 0.01 * task.min_bytes)), record, task.flops, task.min_bytes
    )
    assert with_hw(info, token, arch).work is Verdict.NO


def test_hardware_counters_alone_credit_an_honest_tma_only_kernel(monkeypatch) -> None:
    """``sass_count_with_hw`` off: the counters alone (``hw_only_target``), the census vouching.

    Never by default for a task of TMA alone (``sass_join.counters_suffice``): its operator's choice.
    """
    from ptxgym.evaluation.trusted import sass_join

    task = _decode("sm90a")
    monkeypatch.setattr(sass_join, "module_pcs", lambda so: PCS)
    cand = BuiltCandidate(
        task_id=task.id, so_path="x.so", source_sha256="0", artifact_sha256="0", static_target=True
    )
    result = SessionResult(hw_counts=_hw(task, 2.0 * task.min_bytes))
    census = sass_join.Census({KERNEL: 10}, 10)  # the kernel did every timed call's work
    info, record = hw_only_target(cand, result, task.arch_spec, task.flops, task.min_bytes, census)
    assert info is not None and record["error"] == ""
    assert info.executed is Verdict.YES and info.tma_share == pytest.approx(2.0)
    assert info.work is Verdict.YES, info.message  # today: UNKNOWN (no MMA tile to size GMMA counts with)
    # no census to vouch that the kernel did the timed calls' work: withheld (sass_join.hw_census)
    alone, _ = hw_only_target(cand, result, task.arch_spec, task.flops, task.min_bytes)
    assert alone is not None and alone.work is Verdict.UNKNOWN, alone.message


def test_without_measured_tma_bytes_a_tma_only_kernel_is_never_a_no_that_contradicts_the_counters() -> None:
    """The SASS counts alone (Nsight Compute, or the Python worker) cannot measure TMA bytes: unknown.

    A NO there would contradict an in-band YES from the counters on every cross-checked candidate
    (``counts_agree`` -> PROOF_FAILED, no reward at all for an honest kernel).
    """
    task = _decode("sm90a")
    share = work_share([(PCS[KERNEL][r.pc], r.inst, r.threads) for r in ROWS], task.arch_spec, task.flops)
    assert share.work is Verdict.UNKNOWN, share.message  # today: NO (0.0% of the task's FLOPs)


def test_the_evaluator_judges_in_band_counts_by_the_task_s_families(tmp_path, monkeypatch) -> None:
    """The evaluator judges the in-band counts by the task's families, not the device's.

    ``LocalGpuEvaluator`` joins the in-band counts with the device's arch (``self.arch``: the default
    families, wgmma and TMA on sm_90a), not the task's (``task.arch_spec``), which the SASS census and
    Nsight Compute use. On a TMA-only task a wgmma kernel (with a UTMALDG in its SASS, so it is counted)
    is then credited in band for a family the task does not target, while Nsight Compute, on a
    cross-checked candidate, says the target never executed (PROOF_FAILED). On sm_100a, the reverse: the
    device's tcgen05 family holds no UTMALDG, so an honest TMA kernel shows executed=NO in band.
    """
    pytest.importorskip("torch")
    from inprocess_worker import IN_BAND_KERNEL
    from test_baseline_path import Workers, built, cpu_evaluator, gemm_task, honest
    from test_counted_position import SETTINGS, _executed

    from ptxgym.evaluation.trusted import sass_join
    from ptxgym.evaluation.trusted.proofs import InBand
    from ptxgym.evaluation.trusted.turn import Turn

    # the counted call's one row (COUNTED_ROW, pc 0x10) is a wgmma; the module also holds a TMA load
    listing = {IN_BAND_KERNEL: {0x10: "HGMMA.64x128x16.F32.BF16", 0x20: "UTMALDG.2D"}}
    monkeypatch.setattr(sass_join, "module_pcs", lambda so: listing)
    settings = SETTINGS.model_copy(update={**_executed(), "wall_slack_ms": 1e4})
    ev = cpu_evaluator(tmp_path, Workers(tmp_path, honest), settings)
    task = gemm_task().model_copy(
        update={"targets": ("tma",), "flops": 2.0 * 64 * 48 * 32}
    )  # TMA-only, sm_90a
    assert not task.arch_spec.is_target_opcode("HGMMA") and ev.arch.name == task.arch
    arena, baseline, _ = ev._prepare(task)
    turn = Turn(task, built(task).model_copy(update={"static_target": True}), arena, baseline, seed=17)
    turn.in_band = InBand()
    verdict = ev._run_candidate(turn)
    assert verdict.status.value == "PASSED", verdict.message
    target = turn.in_band.target
    assert target is not None
    # HGMMA is not the task's target family: no execution, no credit (today: executed=yes, work=yes)
    assert target.executed is Verdict.NO and not target.credited, (
        target.executed,
        target.work,
        target.message,
    )
