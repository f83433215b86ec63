"""The proofs run after the candidate's GPU turn; only their tools' GPU phases take the GPU again.

The real ``LocalGpuEvaluator.evaluate`` on the CPU (``test_baseline_path.cpu_evaluator``: a real arena
and session, in-process workers) with memcheck always due and the stand-in compute-sanitizer of
``fake_tools/`` running the stand-in driver (``hostile_driver.py``, honest mode), which stops at its GPU
gate like the real one. What runs for real: the evaluator's split of ``evaluate`` into the turn and the
proofs, ``run_proofs``, ``run_memcheck``, ``run_tool`` with its gate, and the ``GpuQueue``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_baseline_path import SETTINGS, Workers, built, cpu_evaluator, gemm_task  # noqa: E402

import ptxgym.evaluation.trusted.local as local  # noqa: E402
from ptxgym.evaluation.trusted.base import MemcheckMode  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402

HERE = Path(__file__).resolve().parent
MEMCHECK = SETTINGS.model_copy(update={"memcheck": MemcheckMode.ALWAYS, "memcheck_timeout_s": 60})


@pytest.fixture
def tools(monkeypatch):
    monkeypatch.setenv("PATH", f"{HERE / 'fake_tools'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DRIVER", str(HERE / "hostile_driver.py"))
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PYTHONPATH", str(HERE.parents[1]))


def _distinct(task, turn: int):
    """A candidate whose artifact differs from every other turn's (copies in a batch would wait)."""
    return built(task, turn).model_copy(update={"artifact_sha256": f"{turn:064x}"})


def _watch_proofs(monkeypatch, ev) -> list[dict]:
    """Wrap ``run_proofs``: record whether the GPU was held when it began, and what it was given."""
    seen: list[dict] = []
    real = local.run_proofs

    def watched(task, cand, inputs, *args, **kwargs):
        seen.append({"busy": ev.queue._busy, "inputs": Path(inputs), "exists": Path(inputs).exists()})
        return real(task, cand, inputs, *args, **kwargs)

    monkeypatch.setattr(local, "run_proofs", watched)
    return seen


def test_proofs_run_after_the_turn_and_hold_the_gpu_only_for_the_tool(tmp_path, tools, monkeypatch):
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), MEMCHECK)
    seen = _watch_proofs(monkeypatch, ev)
    task = gemm_task()
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.memcheck is not None and verdict.memcheck.clean is True
    assert seen and seen[0]["busy"] is False and seen[0]["exists"]  # the turn was over; inputs linked
    assert not seen[0]["inputs"].exists()  # the link is gone after the proofs
    assert seen[0]["inputs"].name.startswith("proof-")
    walls = verdict.stage_wall_s
    assert walls["proof_boot"] > 0 and walls["proof_gpu"] > 0 and walls["memcheck"] >= walls["proof_gpu"]
    assert walls["gpu_total"] == pytest.approx(walls["gpu_turn"] + walls["proof_gpu"], abs=2e-4)
    assert walls["gpu_total"] < walls["gpu_turn"] + walls["memcheck"]  # the start-up held no GPU
    assert ev.queue.served == 2  # the turn, and the tool's GPU phase


def test_another_candidate_takes_its_turn_while_a_proof_starts_up(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER_BOOT_S", "3")
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), MEMCHECK)
    seen = _watch_proofs(monkeypatch, ev)
    task = gemm_task()
    ev.evaluate(task, built(task, 0))  # the task's arena and baseline, once, before the race
    seen.clear()
    got: dict[str, object] = {}

    def first() -> None:
        got["first"] = ev.evaluate(task, built(task, 1))
        got["first_done"] = time.perf_counter()

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:  # the first candidate's proofs have begun
        time.sleep(0.01)
    assert seen, "the first candidate never reached its proofs"
    ev.settings = ev.settings.model_copy(update={"memcheck": MemcheckMode.NEVER})  # the second: no proof
    second = ev.evaluate(task, built(task, 2))
    second_done = time.perf_counter()
    thread.join(60)
    first_verdict = got["first"]
    assert second.status is Status.PASSED and first_verdict.status is Status.PASSED  # type: ignore[attr-defined]
    assert second_done < got["first_done"]  # served during the first one's 3 s start-up
    assert second.stage_wall_s["queue"] < 1.0
    assert first_verdict.stage_wall_s["proof_boot"] >= 3.0  # type: ignore[attr-defined]


def test_evaluate_many_overlaps_one_candidates_proofs_with_the_next_turn(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER_BOOT_S", "2")
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), MEMCHECK)
    task = gemm_task()
    ev.evaluate(task, built(task, 0))  # the task's arena and baseline, once
    t = time.perf_counter()
    verdicts = ev.evaluate_many([(task, _distinct(task, 1)), (task, _distinct(task, 2))])
    wall = time.perf_counter() - t
    assert [v.status for v in verdicts] == [Status.PASSED, Status.PASSED]
    alone = sum(v.stage_wall_s["gpu_turn"] + v.stage_wall_s["memcheck"] for v in verdicts)
    assert wall < alone - 1.0, (wall, alone)  # at least a second of one's start-up beside the other


def test_proofs_under_way_at_once_are_bounded(tmp_path, tools, monkeypatch):
    monkeypatch.setattr(local, "PROOF_RUNS_AT_ONCE", 1)
    monkeypatch.setenv("FAKE_DRIVER_BOOT_S", "2")  # a proof outlasts the next candidate's turn
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), MEMCHECK)
    real, lock = local.run_proofs, threading.Lock()
    now, most = [0], [0]

    def counted(*args, **kwargs):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(local, "run_proofs", counted)
    task = gemm_task()
    verdicts = ev.evaluate_many([(task, _distinct(task, i)) for i in range(3)])
    assert [v.status for v in verdicts] == [Status.PASSED] * 3 and most[0] == 1
    assert max(v.stage_wall_s["proof_slot"] for v in verdicts) > 0.1  # one of them waited for a slot


def test_copies_of_one_artifact_in_a_batch_wait_for_the_first_verdict(tmp_path):
    from test_baseline_path import wrong

    from ptxgym.evaluation.trusted.verdict_cache import VerdictCache

    workers = Workers(tmp_path, candidate=wrong)
    ev = cpu_evaluator(tmp_path, workers)
    ev.verdicts = VerdictCache(16)
    task = gemm_task()
    verdicts = ev.evaluate_many([(task, built(task, 0)), (task, built(task, 1))])  # one artifact, twice
    assert [v.status for v in verdicts] == [Status.INCORRECT_NUMERICAL] * 2
    assert [v.cache_hit for v in verdicts] == [False, True]
    assert len(workers.made) == 2  # the baseline and the first copy: the second never reached the GPU


def test_copies_from_two_threads_wait_for_the_first_verdict(tmp_path):
    """The batch paths (``run_batch``, ``ptxgym eval``) call ``evaluate`` from a thread per candidate."""
    from test_baseline_path import wrong

    from ptxgym.evaluation.trusted.verdict_cache import VerdictCache

    workers = Workers(tmp_path, candidate=wrong)
    ev = cpu_evaluator(tmp_path, workers)
    ev.verdicts = VerdictCache(16)
    task = gemm_task()
    got: list = []
    threads = [
        threading.Thread(target=lambda t=t: got.append(ev.evaluate(task, built(task, t)))) for t in (0, 1)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(v.cache_hit for v in got) == [False, True]
    assert len(workers.made) == 2 and ev._inflight == {}


def test_with_gated_proofs_off_the_proofs_run_inside_the_turn(tmp_path, tools, monkeypatch):
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), MEMCHECK.model_copy(update={"gated_proofs": False}))
    seen = _watch_proofs(monkeypatch, ev)
    task = gemm_task()
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.PASSED and verdict.memcheck.clean is True, verdict.message
    assert seen and seen[0]["busy"] is True  # the turn still held the GPU
    walls = verdict.stage_wall_s
    assert "proof_boot" not in walls and walls["gpu_total"] == walls["gpu_turn"] >= walls["memcheck"]
    assert ev.queue.served == 1


def test_passing_copies_the_cache_cannot_answer_wait_for_the_first_then_run(tmp_path):
    """A pass is reused only within its episode: a copy from another episode waits, then is evaluated."""
    from ptxgym.evaluation.trusted.verdict_cache import VerdictCache

    ev = cpu_evaluator(tmp_path, Workers(tmp_path))
    ev.verdicts = VerdictCache(16)
    task = gemm_task()
    ev.evaluate(task, built(task, 0))  # the arena and baseline, once
    copies = [
        built(task, 1).model_copy(update={"episode_id": f"episode-{i}", "input_seed": i}) for i in (1, 2)
    ]
    verdicts = ev.evaluate_many([(task, c) for c in copies])
    assert [v.status for v in verdicts] == [Status.PASSED] * 2 and not any(v.cache_hit for v in verdicts)
    waits = sorted(v.stage_wall_s.get("copy_wait", 0.0) for v in verdicts)
    assert waits[0] == 0.0 and waits[1] > 0.05  # one waited for the other's verdict
    assert ev._inflight == {}


def test_a_proof_driver_that_never_reached_its_gate_ran_no_candidate_code(tmp_path, monkeypatch):
    """A ``GateError`` (another process deleted the gate's ``ready``) does not forfeit the victim."""
    from ptxgym.evaluation.trusted.tools import GateError

    ev = cpu_evaluator(tmp_path, Workers(tmp_path), MEMCHECK)
    task = gemm_task()
    for error, ran in ((GateError("the driver never reached its gate"), False), (RuntimeError("bug"), True)):

        def failing(*a, error=error, **kw):
            raise error

        monkeypatch.setattr(local, "run_proofs", failing)
        cand = built(task, 0).model_copy(update={"artifact_sha256": f"{int(ran)}" * 64})
        verdict = ev.evaluate(task, cand)
        assert verdict.status is Status.INFRA_ERROR and verdict.candidate_ran is ran, verdict.message
