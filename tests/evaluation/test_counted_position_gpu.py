"""The counted call at a secret slot, on the H200 (``-m gpu``; skipped without a GPU).

One evaluator (reduced timing: 2 trials x (2 warm-up + 6 timed), the slot 1 of 14) judges:

* the shipped expert GEMM: still PASSED with the target credit from the in-band counts; the counted
  call ran inside the CUPTI activity trial (its census window), or, where CUPTI cannot count there, outside
  it after a logged count error (``details["counted_call"]`` says which; both must give counts);
* ``last_call_wgmma`` (``ptxgym/audit/actions``) aimed at this step's last call, where the counted call
  used to be: no target credit (unless the secret slot happened to be the last one, then it is credited,
  which is the hole's size: 1 in 14 here; up to three turns are played for one that missed);
* the same candidate with its wgmma loop on every call: credited (so the loop alone is enough, and the
  cheat's missing credit is the slot's doing).
"""

from __future__ import annotations

import pytest
from built_source import built_candidate

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

from ptxgym.evaluation.trusted.base import (  # noqa: E402
    BuiltCandidate,
    EvalSettings,
    MemcheckMode,
    TargetMode,
)
from ptxgym.records.feedback import Proof, Status, Verdict  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402

SETTINGS = EvalSettings(
    warmup=2,
    iterations=6,
    trials=2,
    call_timeout_s=20.0,
    memcheck=MemcheckMode.NEVER,
    target_mode=TargetMode.EXECUTED,
    ncu_crosscheck_fraction=0.0,
    module_census=True,
    verdict_cache_entries=0,
    slow_cutoff_speedup=0.0,
    hw_counters=False,  # the census alone must deny the cheat (the hardware-counted call would too)
)
LAST_CALL = SETTINGS.calls_per_step + 1
"""The step's last call: where the counted call always was."""


@pytest.fixture(scope="module")
def task():
    return get_task("Gemm-sm90a")


@pytest.fixture(scope="module")
def evaluator():
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    with LocalGpuEvaluator(settings=SETTINGS, spares=1) as ev:
        yield ev


def _cheat(task, last_call: int) -> BuiltCandidate:
    from ptxgym.audit.cases import get_cases

    text = get_cases(["last_call_wgmma"])[0].action()
    body = text.removeprefix("```cuda\n").removesuffix("\n```\n")
    return built_candidate(task, f"#define LAST_CALL {last_call}\n{body}")


def _judge(evaluator, task, cand, name: str):
    verdict = evaluator.evaluate(task, cand)
    print(
        f"\n{name}: {verdict.status.value} COUNTED_CALL {verdict.details.get('counted_call')} "
        f"IN_BAND {verdict.details.get('in_band_target')} TARGET {verdict.target}"
    )
    return verdict


def test_expert_keeps_its_target_credit_with_the_counted_call_among_the_timed(evaluator, task):
    from ptxgym.knowledge_packs.variants import PACK_ROOT

    source = (PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu").read_text()
    verdict = _judge(evaluator, task, built_candidate(task, source), "expert")
    assert verdict.status is Status.PASSED, verdict.message
    where = verdict.details["counted_call"]
    assert 1 <= where["call"] <= LAST_CALL, where
    if verdict.timing is not None and verdict.timing.backend == "cupti":
        # outside the activity trial by default (inside, CUPTI's SASS metrics read zero on the H200),
        # or inside where an evaluator was told to try: either way, counts, and the reason is recorded
        assert where["in_trial"] or where["outside"], where
    record = verdict.details["in_band_target"]
    assert not record.get("error") and record["unplaced_rows"] == 0, record
    assert verdict.target.credited and verdict.target.work is Verdict.YES, verdict.target
    assert verdict.evidence.target_work == [Proof.CUPTI_IN_BAND]
    assert verdict.timing is not None and verdict.timing.candidate.n == SETTINGS.trials * SETTINGS.iterations
    if verdict.timing.backend == "cupti":  # the census took the counted call in and saw only the module
        census = verdict.details["census"]
        print(f"CENSUS {census}")
        assert Proof.CUPTI_IN_BAND in verdict.evidence.kernel_census, census
        timed = SETTINGS.trials * SETTINGS.iterations
        assert sum(census["kernels"].values()) >= timed + (1 if where["in_trial"] else 0), census


def test_wgmma_on_the_steps_last_call_only_gets_no_target_credit(evaluator, task):
    """No work credit, even where the secret slot is the last call (1 in 14).

    The wgmma kernel was launched in no timed call, which the census shows (``sass_join.in_band_info``).
    """
    cand = _cheat(task, LAST_CALL)
    verdict = _judge(evaluator, task, cand, "last_call_wgmma")
    assert verdict.status is Status.PASSED, verdict.message  # every output is right
    assert verdict.target.executed is not Verdict.UNKNOWN, verdict.target
    assert not verdict.target.credited, verdict.target
    assert verdict.target.work is not Verdict.YES


def test_the_wgmma_loop_on_every_call_is_credited(evaluator, task):
    """The control: the cheat's wgmma path alone is enough for the credit when it is counted."""
    verdict = _judge(evaluator, task, _cheat(task, 0), "wgmma every call")
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.target.credited and verdict.target.mma_share >= 1.0, verdict.target
