"""Batches: ``run_batch``/``Pipeline.run_many``, ``step_many`` and vector envs (real nvcc, NullEvaluator)."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium
import pytest

import ptxgym
from ptxgym.envs.vector import make_vec, step_many
from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict, NullEvaluator
from ptxgym.pipeline import Pipeline, Submission, run_batch
from ptxgym.records.feedback import Stage, Status
from ptxgym.records.tasks import Task, get_task

PLAIN = (Path(__file__).parents[1] / "data" / "plain_gemm.cu").read_text()


def fenced(code: str) -> str:
    return f"```cuda\n{code}\n```\n"


def variant(i: int) -> str:
    """A distinct plain kernel (a harmless extra constant), so the build cache never hits."""
    return PLAIN.replace("float acc = 0.f;", f"float acc = 0.f * {i}.f;")


MIXED = [
    (fenced(variant(1)), Status.NOT_EVALUATED),
    ("no code here at all", Status.EXTRACT_ERROR),
    (fenced(variant(2).replace("float acc", "flaot acc")), Status.COMPILE_ERROR),
    (fenced("#include <cublas_v2.h>\n__global__ void k(){}"), Status.STATIC_REJECT),
    (fenced(variant(3)), Status.NOT_EVALUATED),
]


class _Recording(Evaluator):
    """Our own call pattern under test: records each evaluate_many batch, answers like NullEvaluator."""

    name = "recording"

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.when: list[float] = []
        self.inner = NullEvaluator()

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        return self.inner.evaluate(task, candidate)

    def evaluate_many(self, task_candidates):  # type: ignore[no-untyped-def]
        self.batches.append([c.turn for _, c in task_candidates])
        self.when.append(time.monotonic())
        return super().evaluate_many(task_candidates)


class _Broken(_Recording):
    """Error path of our own code: a backend whose evaluate_many breaks its contract."""

    def evaluate_many(self, task_candidates):  # type: ignore[no-untyped-def]
        raise RuntimeError("the backend lost its actors")


@pytest.mark.nvcc
@pytest.mark.slow
def test_run_many_keeps_order_and_sends_each_built_candidate_once() -> None:
    evaluator = _Recording()
    pipeline = Pipeline(get_task("Gemm-sm90a"), evaluator)
    subs = [Submission(action, turn=i) for i, (action, _) in enumerate(MIXED)]
    feedbacks = pipeline.run_many(subs, max_workers=2)
    assert [f.status for f in feedbacks] == [want for _, want in MIXED], [f.message for f in feedbacks]
    assert [f.turn for f in feedbacks] == [0, 1, 2, 3, 4]
    assert sorted(evaluator.batches) == [[0], [4]]  # only the built candidates, each once
    assert feedbacks[0].compile is not None and feedbacks[0].compile.ok
    assert "build" in feedbacks[0].stage_wall_s
    # the same submissions one by one give the same statuses (the build cache now hits)
    singles = [pipeline.run_submission(s) for s in subs]
    assert [f.status for f in singles] == [f.status for f in feedbacks]
    assert singles[0].compile is not None and singles[0].compile.cache_hit


@pytest.mark.nvcc
@pytest.mark.slow  # ~6.4 s of nvcc
def test_a_broken_backend_fails_its_candidates_not_the_batch() -> None:
    pipeline = Pipeline(get_task("Gemm-sm90a"), _Broken())
    feedbacks = pipeline.run_many([Submission(a, turn=i) for i, (a, _) in enumerate(MIXED[:3])])
    assert [f.status for f in feedbacks] == [Status.INFRA_ERROR, Status.EXTRACT_ERROR, Status.COMPILE_ERROR]
    assert "lost its actors" in feedbacks[0].message


def test_batches_across_tasks_share_one_evaluator_call_and_empty_is_empty() -> None:
    evaluator = _Recording()
    a = Pipeline(get_task("Gemm-sm90a"), evaluator)
    b = Pipeline(get_task("Gemm-sm100a"), evaluator)
    jobs = [(a, Submission("nothing", turn=0)), (b, Submission("", turn=1))]
    feedbacks = run_batch(jobs)
    assert [(f.task_id, f.status) for f in feedbacks] == [
        ("Gemm-sm90a", Status.EXTRACT_ERROR),
        ("Gemm-sm100a", Status.EXTRACT_ERROR),
    ]
    assert evaluator.batches == [] and run_batch([]) == []


HEAVY = "\n".join(
    f"__global__ void ptxgym_heavy_{j}(float* x) {{ for (int i = 0; i < {j}; ++i) x[i] = sinf(x[i]) * {j}; }}"
    for j in range(120)
)
"""120 extra kernels: the same valid candidate, ~2x the plain kernel's build time with real nvcc."""


@pytest.mark.nvcc
@pytest.mark.slow  # two cold builds, ~10 and ~17 s on two cores
def test_a_built_candidate_reaches_the_evaluator_while_the_rest_still_builds() -> None:
    """The GPU does not wait for the batch's slowest build (it sat idle through every build before)."""
    evaluator = _Recording()
    pipeline = Pipeline(get_task("Gemm-sm90a"), evaluator)
    tag = time.time_ns() % 10**9  # a cold build cache for both
    quick = fenced(variant(tag))
    slow = fenced(variant(tag + 1) + HEAVY)
    feedbacks = pipeline.run_many([Submission(slow, turn=0), Submission(quick, turn=1)], max_workers=2)
    assert [f.status for f in feedbacks] == [Status.NOT_EVALUATED] * 2, [f.message for f in feedbacks]
    assert [f.turn for f in feedbacks] == [0, 1]  # input order kept
    assert evaluator.batches == [[1], [0]]  # the quick build was sent first, alone
    slow_build = feedbacks[0].stage_wall_s["build"]
    assert evaluator.when[1] - evaluator.when[0] > 0.2 * slow_build, (evaluator.when, slow_build)


@pytest.mark.nvcc
def test_step_many_equals_stepping_each_env() -> None:
    evaluator = _Recording()
    envs = [gymnasium.make("ptxgym/Gemm-sm90a-v0", evaluator=evaluator, max_turns=2) for _ in range(3)]
    for e in envs:
        e.reset(seed=0)
    actions = [fenced(variant(10)), "junk", fenced(variant(11))]
    results = step_many(envs, actions)
    statuses = [info["feedback"].status for *_, info in results]
    assert statuses == [Status.NOT_EVALUATED, Status.EXTRACT_ERROR, Status.NOT_EVALUATED]
    assert [info["turn"] for *_, info in results] == [1, 1, 1]
    assert evaluator.batches == [[0], [0]]  # each built candidate sent once, as its build ended
    assert all(e.observation_space.contains(obs) for e, (obs, *_) in zip(envs, results, strict=True))
    # second turn: truncation and episode state continue as with step()
    results = step_many(envs, ["junk"] * 3)
    assert all(truncated for _, _, _, truncated, _ in results)
    with pytest.raises(ValueError, match="twice"):
        step_many([envs[0], envs[0]], ["a", "b"])
    with pytest.raises(gymnasium.error.ResetNeeded):
        step_many(envs[:1], ["a"])


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_env_steps_a_compile_only_batch(mode: str) -> None:
    envs = make_vec("ptxgym/Gemm-sm90a-v0", num_envs=2, vectorization_mode=mode, evaluator="none")
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert len(obs["text"]) == 2 and "TensorView" in obs["text"][0]
        actions = (fenced(variant(20 if mode == "sync" else 30)), "no code")
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        assert list(obs["status"]) == ["NOT_EVALUATED", "EXTRACT_ERROR"]
        assert list(obs["correct"]) == [0, 0] and not terminated.any()
        assert rewards.shape == (2,)
    finally:
        envs.close()


def test_make_vec_refuses_shared_memory_for_text_and_is_public() -> None:
    with pytest.raises(ValueError, match="shared_memory"):
        make_vec("ptxgym/Gemm-sm90a-v0", 2, "async", vector_kwargs={"shared_memory": True}, evaluator="none")
    envs = ptxgym.make_vec("ptxgym/Gemm-sm90a-v0", 1, evaluator="none")
    assert envs.num_envs == 1
    envs.close()


class _Cached(_Recording):
    """Our own merge under test: a backend answering from its verdict cache."""

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        return GpuVerdict(status=Status.CRASH, stage=Stage.RUN, message="crashed (reused)", cache_hit=True)


@pytest.mark.nvcc
def test_feedback_says_when_the_verdict_came_from_the_cache() -> None:
    pipeline = Pipeline(get_task("Gemm-sm90a"), _Cached())
    fb = pipeline.run(fenced(variant(1)))
    assert fb.status is Status.CRASH and fb.cache_hit
    assert not Pipeline(get_task("Gemm-sm90a"), _Recording()).run(fenced(variant(1))).cache_hit


def test_a_pass_without_a_target_record_earns_no_target_credit() -> None:
    """A PASSED verdict that proved nothing about the target gets no target credit.

    It must not fall back to the SASS's static presence, which the gate accepts in ``static`` mode.
    """
    from ptxgym.cpu.sass import SassInfo
    from ptxgym.rewards import qualifies
    from ptxgym.rewards.gate import target_proven

    pipeline = Pipeline(get_task("Gemm-sm90a"), NullEvaluator())
    parts = {
        "stage_wall_s": {},
        "sass": SassInfo(arch="sm_90a", kernels=[], histogram={}, static_target=True),
    }
    fb = pipeline._merge(parts, 0, GpuVerdict(status=Status.PASSED, stage=Stage.DONE, message="ok"))
    assert fb.target is not None and fb.target.mode == "executed" and not target_proven(fb)
    assert not qualifies(fb)
    failed = pipeline._merge(parts, 0, GpuVerdict(status=Status.RUNTIME_ERROR, stage=Stage.RUN, message="x"))
    assert failed.target is not None and failed.target.mode == "static"  # shown, never paid (not PASSED)


def test_the_feedback_keeps_whether_the_candidate_ran() -> None:
    """``candidate_ran`` decides whether an INFRA_ERROR forfeits: the pipeline must carry it over."""
    pipeline = Pipeline(get_task("Gemm-sm90a"), NullEvaluator())
    for ran in (True, False):
        v = GpuVerdict(status=Status.INFRA_ERROR, stage=Stage.RUN, message="x", candidate_ran=ran)
        assert pipeline._merge({"stage_wall_s": {}}, 0, v).candidate_ran is ran


@pytest.mark.nvcc
@pytest.mark.slow
def test_build_processes_prepare_the_turns_elsewhere_with_the_same_outcomes(monkeypatch) -> None:
    """``PTXGYM_BUILD_PROCESSES``: every CPU half runs in a build process, with the statuses of threads.

    The built candidate comes back usable (its .so on disk, its SASS census), the turn's Feedback the
    same as in this process; the build ran in another process (``build_pid``), which makes its backstop
    scans itself and runs at the builds' niceness.
    """
    import os

    import ptxgym.pipeline as pipeline_module
    from ptxgym.cpu.jail import BUILD_NICE
    from ptxgym.records import settings

    monkeypatch.setenv("PTXGYM_BUILD_PROCESSES", "2")
    evaluator = _Recording()
    pipeline = Pipeline(get_task("Gemm-sm90a"), evaluator)
    subs = [Submission(action, turn=i) for i, (action, _) in enumerate(MIXED)]
    prepared = [pipeline.prepare(sub) for sub in subs[:2]]
    assert prepared[0].candidate is not None and prepared[0].candidate.so_path.exists()
    assert prepared[0].parts["sass"].kernels and prepared[1].feedback is not None
    assert {p.parts["build_pid"] for p in prepared}.isdisjoint({os.getpid()})
    feedbacks = pipeline.run_many(subs, max_workers=2)
    assert [f.status for f in feedbacks] == [want for _, want in MIXED], [f.message for f in feedbacks]
    assert sorted(evaluator.batches) == [[0], [4]]
    # a build process scans in its own interpreter (no helpers of its own) and runs at the builds' priority
    monkeypatch.delenv("PTXGYM_SCAN_HELPERS", raising=False)
    assert settings.scan_helpers() >= 1  # here, by default, helpers
    pool = pipeline_module._build_processes(2)
    assert pool.submit(settings.scan_helpers).result() == 0
    assert pool.submit(os.nice, 0).result() >= min(19, os.nice(0) + BUILD_NICE)
    monkeypatch.setenv("PTXGYM_BUILD_PROCESSES", "0")
    assert pipeline.prepare(subs[1]).parts["build_pid"] == os.getpid()  # 0: threads of this process
    assert pipeline_module._build_pool is not None  # the pool stays for the next turn that wants it


def test_a_failed_build_process_builds_the_turn_here_and_the_next_turn_gets_a_new_pool(monkeypatch) -> None:
    """Error path of our own code: a pool whose process died (``BrokenProcessPool``) loses no turn."""
    import os
    from concurrent.futures.process import BrokenProcessPool

    import ptxgym.pipeline as pipeline_module

    class _Dead:
        def __init__(self) -> None:
            self.shut = False

        def submit(self, *args):  # type: ignore[no-untyped-def]
            raise BrokenProcessPool("a build process died")

        def shutdown(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
            self.shut = True

    dead = _Dead()
    monkeypatch.setenv("PTXGYM_BUILD_PROCESSES", "3")
    monkeypatch.setattr(pipeline_module, "_build_pool", (3, dead))
    prepared = Pipeline(get_task("Gemm-sm90a")).prepare(Submission("no code here at all"))
    assert prepared.feedback is not None and prepared.feedback.status is Status.EXTRACT_ERROR
    assert prepared.parts["build_pid"] == os.getpid()  # built here instead
    assert dead.shut and pipeline_module._build_pool is None  # dropped: the next turn starts another
    monkeypatch.setenv("PTXGYM_BUILD_PROCESSES", "300")
    with pytest.raises(ValueError, match="PTXGYM_BUILD_PROCESSES must be an integer from 0 to 256"):
        Pipeline(get_task("Gemm-sm90a")).prepare(Submission("no code here at all"))
