"""The verdict cache: which verdicts are reused where (``verdict_cache.py``), and that hits say so."""

from __future__ import annotations

import threading
from pathlib import Path

from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, GpuVerdict, MemcheckMode
from ptxgym.evaluation.trusted.verdict_cache import VerdictCache
from ptxgym.records.feedback import MemcheckInfo, Stage, Status
from ptxgym.records.tasks import get_task

TASK = get_task("Gemm-sm90a")
DEFAULT = EvalSettings()
FIRST = EvalSettings(memcheck=MemcheckMode.FIRST_CORRECT)
NEVER = EvalSettings(memcheck=MemcheckMode.NEVER)


def cand(art: str = "a", episode: str = "ep1", seed: int | None = 7, turn: int = 0, first: bool = True):
    return BuiltCandidate(
        task_id=TASK.id,
        so_path=Path("/x.so"),
        source_sha256=art * 64,
        artifact_sha256=art * 64,
        static_target=True,
        kernels=["k"],
        episode_id=episode,
        turn=turn,
        first_correct_in_episode=first,
        input_seed=seed,
    )


def passed(memcheck: bool = True) -> GpuVerdict:
    info = MemcheckInfo(ran=True, clean=True) if memcheck else None
    return GpuVerdict(status=Status.PASSED, stage=Stage.DONE, message="correct", memcheck=info)


def verdict(status: Status) -> GpuVerdict:
    return GpuVerdict(status=status, stage=Stage.CHECK, message=status.value)


def test_a_pass_is_reused_only_inside_its_episode() -> None:
    cache = VerdictCache(8)
    cache.store(TASK, cand(turn=1), passed())
    hit = cache.lookup(TASK, cand(turn=3, first=False), DEFAULT)
    assert hit is not None and hit.cache_hit and hit.status is Status.PASSED
    assert "reused from turn 1 of this episode" in hit.message and hit.details["cache"]["from_turn"] == 1
    assert cache.lookup(TASK, cand(episode="ep2", turn=0), DEFAULT) is None  # another episode: fresh inputs
    assert cache.lookup(TASK, cand(seed=8, turn=3), DEFAULT) is None  # same id, other secret seed
    assert cache.lookup(TASK, cand(episode="", seed=None), DEFAULT) is None  # no episode: never
    assert (cache.hits, cache.misses) == (1, 3)
    cache.store(TASK, cand("n", seed=None, turn=1), passed())  # tools and tests: no secret seed
    assert cache.lookup(TASK, cand("n", seed=None, turn=2, first=False), DEFAULT) is None


def test_a_pass_without_memcheck_does_not_answer_a_turn_that_needs_one() -> None:
    cache = VerdictCache(8)
    cache.store(TASK, cand(turn=0, first=False), passed(memcheck=False))
    assert cache.lookup(TASK, cand(turn=1, first=True), FIRST) is None
    assert cache.lookup(TASK, cand(turn=1, first=False), FIRST) is not None
    off = VerdictCache(8)
    off.store(TASK, cand(turn=0, first=False), passed(memcheck=False))
    assert off.lookup(TASK, cand(turn=1, first=True), NEVER) is not None


def test_candidate_faults_are_reused_everywhere_and_machine_states_never() -> None:
    cache = VerdictCache(8)
    cache.store(TASK, cand("w"), verdict(Status.INCORRECT_NUMERICAL))
    hit = cache.lookup(TASK, cand("w", episode="other", seed=1), DEFAULT)
    assert hit is not None and hit.status is Status.INCORRECT_NUMERICAL and hit.cache_hit
    for i, status in enumerate(
        [
            Status.INFRA_ERROR,
            Status.TIMEOUT,
            Status.TIMING_ANOMALY,
            Status.PROOF_FAILED,
            Status.NOT_EVALUATED,
            Status.RUNTIME_ERROR,
            Status.CRASH,
        ]
    ):
        art = "0123456789"[i]
        cache.store(TASK, cand(art), verdict(status))
        assert cache.lookup(TASK, cand(art), DEFAULT) is None, status
    cache.store(TASK, cand("h"), hit)  # a hit is never stored again
    assert cache.lookup(TASK, cand("h"), DEFAULT) is None


def test_other_task_workload_or_entry_is_a_miss_and_the_cache_is_bounded() -> None:
    cache = VerdictCache(2)
    cache.store(TASK, cand("w"), verdict(Status.NONFINITE))
    assert cache.lookup(get_task("Gemm-sm100a"), cand("w"), DEFAULT) is None
    other_symbol = cand("w").model_copy(update={"entry_symbol": "other"})
    assert cache.lookup(TASK, other_symbol, DEFAULT) is None
    cache.store(TASK, cand("x"), verdict(Status.NONFINITE))
    cache.store(TASK, cand("y"), verdict(Status.NONFINITE))  # evicts "w", the least recently used
    assert (
        cache.lookup(TASK, cand("w"), DEFAULT) is None and cache.lookup(TASK, cand("y"), DEFAULT) is not None
    )
    disabled = VerdictCache(0)
    disabled.store(TASK, cand("w"), verdict(Status.NONFINITE))
    assert disabled.lookup(TASK, cand("w"), DEFAULT) is None


def test_a_cached_pass_faces_the_secret_cross_check_draw_again(monkeypatch) -> None:
    """Resubmitting an artifact must not dodge Nsight Compute: each reuse of a pass draws again.

    (Reviewer's find: the draw was made only on a fresh evaluation, so a pass with forged in-band counts
    was paid on every resubmission of its episode after surviving one draw.)
    """
    from ptxgym.evaluation.trusted import local
    from ptxgym.records.feedback import Evidence, Proof

    ev = local.LocalGpuEvaluator.__new__(local.LocalGpuEvaluator)  # no GPU here: only the cache path
    ev.settings, ev.verdicts = DEFAULT, VerdictCache(8)
    ev._inflight, ev._inflight_lock = {}, threading.Lock()
    ev.verdicts.store(TASK, cand(turn=1), passed())
    calls: list = []
    fresh = passed().model_copy(update={"message": "evaluated again"})
    monkeypatch.setattr(
        ev, "_evaluate_now", lambda task, c, crosscheck=None: calls.append(crosscheck) or fresh
    )
    monkeypatch.setattr(ev, "_draw_crosscheck", lambda: False)
    assert ev.evaluate(TASK, cand(turn=2, first=False)).cache_hit and calls == []
    monkeypatch.setattr(ev, "_draw_crosscheck", lambda: True)
    assert ev.evaluate(TASK, cand(turn=3, first=False)) is fresh and calls == [True]  # profiled for sure
    checked = passed().model_copy(update={"evidence": Evidence(target_executed=[Proof.NCU_OFFLINE])})
    assert not ev._redraw(checked) and not ev._redraw(verdict(Status.INCORRECT_NUMERICAL))
    ev.verdicts.store(TASK, cand(turn=4), checked)  # a pass Nsight Compute checked is reused first
    monkeypatch.setattr(ev, "_draw_crosscheck", lambda: True)
    again = ev.evaluate(TASK, cand(turn=5, first=False))
    assert again.cache_hit and Proof.NCU_OFFLINE in again.evidence.target_executed and calls == [True]


def test_a_reused_pass_that_fails_its_drawn_cross_check_is_forgotten(monkeypatch) -> None:
    """A re-evaluation that catches a forgery must stick: the stored pass is not paid again."""
    from ptxgym.evaluation.trusted import local

    ev = local.LocalGpuEvaluator.__new__(local.LocalGpuEvaluator)  # no GPU here: only the cache path
    ev.settings, ev.verdicts = DEFAULT, VerdictCache(8)
    ev._inflight, ev._inflight_lock = {}, threading.Lock()
    ev.verdicts.store(TASK, cand(turn=1), passed())
    caught = GpuVerdict(status=Status.PROOF_FAILED, stage=Stage.EXECUTE, message="counts disagree")
    monkeypatch.setattr(ev, "_evaluate_now", lambda task, c, crosscheck=None: caught)
    monkeypatch.setattr(ev, "_draw_crosscheck", lambda: True)
    assert ev.evaluate(TASK, cand(turn=2, first=False)) is caught
    assert ev.verdicts.lookup(TASK, cand(turn=3, first=False), DEFAULT) is None
