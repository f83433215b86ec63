"""The Ray backend on a local Ray instance (CPU): real nvcc builds, real actors, NullEvaluator inside them.

One Ray instance (2 CPUs, no GPU, no dashboard) serves the module. Evaluator actors take 0.5 CPU and no
GPU here. ``Echo`` stands in for the GPU evaluator inside an actor (the GPU one cannot run on this
machine): it answers like a NullEvaluator and reports what it received (the turn, the sha256 of the file
at ``so_path``), optionally waits, marks that it started, or ends its own process (an actor crash).
Skipped, with the reason, when ray is not installed (``pip install 'ptxgym[ray]'``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip(
    "ray", reason="ray is not installed (pip install 'ptxgym[ray]'); Ray backend untested"
)

import gymnasium  # noqa: E402

import ptxgym  # noqa: E402, F401 - registers the env ids
from ptxgym.evaluation.choose import select_evaluator  # noqa: E402
from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict, NullEvaluator  # noqa: E402
from ptxgym.evaluation.trusted.ray_backend import RayEvaluator  # noqa: E402
from ptxgym.pipeline import Pipeline, RayPipeline  # noqa: E402
from ptxgym.records.errors import EvaluatorUnavailableError  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402
from ptxgym.records.tasks import Task, get_task  # noqa: E402

# Ray workers cannot import this test module by name (pytest imports it by path): ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PLAIN_KERNEL = (Path(__file__).parents[1] / "data" / "plain_gemm.cu").read_text()
ACTION = f"Here it is:\n```cuda\n{PLAIN_KERNEL}\n```\n"
CPU_ONLY = functools.partial(NullEvaluator, "this test runs NullEvaluator inside the Ray actor")


class Echo(Evaluator):
    """NullEvaluator's verdict plus what arrived: ``details["turn"]`` and ``details["file_sha256"]``."""

    name = "echo"

    def __init__(self, delays: dict[int, float] | None = None, started: str = "", die_on: int = -1) -> None:
        self.delays, self.started, self.die_on = delays or {}, started, die_on

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        if self.started:
            Path(f"{self.started}.{candidate.turn}").touch()
        if candidate.turn == self.die_on:
            os._exit(3)  # the actor's process ends mid-call, as a crash or a lost node would
        time.sleep(self.delays.get(candidate.turn, 0.0))
        verdict = NullEvaluator("echo").evaluate(task, candidate)
        digest = hashlib.sha256(Path(candidate.so_path).read_bytes()).hexdigest()
        return verdict.model_copy(update={"details": {"turn": candidate.turn, "file_sha256": digest}})


class Capture(Evaluator):
    """Keeps the candidates a local Pipeline built (to hand them to the Ray evaluator directly)."""

    def __init__(self) -> None:
        self.seen: list[BuiltCandidate] = []

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        self.seen.append(candidate)
        return NullEvaluator().evaluate(task, candidate)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def task() -> Task:
    return get_task("Gemm-sm90a")


@pytest.fixture(scope="module")
def built(task) -> BuiltCandidate:
    """One real candidate: the plain GEMM built by nvcc through a local Pipeline."""
    capture = Capture()
    feedback = Pipeline(task, capture).run(ACTION)
    assert feedback.status is Status.NOT_EVALUATED, feedback.message
    return capture.seen[0]


def _pool(factory, **kw) -> RayEvaluator:
    return RayEvaluator(factory, num_gpus=0, num_cpus=0.5, **{"actors": 1, **kw})


@pytest.mark.nvcc
def test_compile_only_episode_through_ray(monkeypatch) -> None:
    """The env's steps run as Ray tasks (real nvcc) and reach the actor's NullEvaluator."""

    def no_local_builds(*args, **kwargs):
        raise AssertionError("built in the test's process, not in a Ray task")

    monkeypatch.setattr("ptxgym.pipeline.build_solution", no_local_builds)  # Ray workers import their own
    with _pool(CPU_ONLY) as evaluator:
        env = gymnasium.make("ptxgym/Gemm-sm90a-v0", evaluator=evaluator, max_turns=2)
        assert isinstance(env.unwrapped.pipeline, RayPipeline)
        env.reset(seed=0)
        feedbacks = [env.step(ACTION)[4]["feedback"], env.step("no code at all")[4]["feedback"]]
        env.close()
    assert feedbacks[0].status is Status.NOT_EVALUATED, feedbacks[0].message
    assert "NullEvaluator inside the Ray actor" in feedbacks[0].message
    assert feedbacks[0].compile is not None and feedbacks[0].sass is not None
    assert feedbacks[0].environment.evaluator == "none"
    assert feedbacks[1].status is Status.EXTRACT_ERROR


@pytest.mark.nvcc
def test_evaluate_many_keeps_input_order_over_two_actors(task, built) -> None:
    """Early items finish last (they wait longest); verdicts still come back in input order."""
    delays = {turn: 0.25 * (5 - turn) for turn in range(6)}
    with _pool(functools.partial(Echo, delays), actors=2) as evaluator:
        batch = [(task, built.model_copy(update={"turn": turn})) for turn in range(6)]
        verdicts = evaluator.evaluate_many(batch)
    assert [v.details["turn"] for v in verdicts] == list(range(6))
    assert {v.details["ray"]["actor"] for v in verdicts} == {0, 1}
    assert all(v.details["ray"]["transfer"] == "path" for v in verdicts)
    assert all(v.details["file_sha256"] == built.artifact_sha256 for v in verdicts)


@pytest.mark.nvcc
def test_bytes_reach_the_actor_and_are_checked(task, built) -> None:
    """transfer="bytes" (another node's path): the actor evaluates its own copy; a wrong hash is refused."""
    with _pool(Echo, transfer="bytes") as evaluator:
        good = evaluator.evaluate(task, built)
        forged = evaluator.evaluate(task, built.model_copy(update={"artifact_sha256": "0" * 64}))
    assert good.status is Status.NOT_EVALUATED and good.details["ray"]["transfer"] == "bytes"
    assert good.details["file_sha256"] == built.artifact_sha256
    assert forged.status is Status.INFRA_ERROR and "refusing to evaluate a different file" in forged.log


@pytest.mark.nvcc
@pytest.mark.slow
def test_killed_actor_is_replaced_and_its_candidate_retried_once(task, built, tmp_path) -> None:
    started = str(tmp_path / "started")
    with _pool(functools.partial(Echo, {0: 4.0}, started)) as evaluator:
        first = evaluator.actors()[0]
        out: list[list[GpuVerdict]] = []
        worker = threading.Thread(target=lambda: out.append(evaluator.evaluate_many([(task, built)])))
        worker.start()
        deadline = time.monotonic() + 60
        while not Path(f"{started}.0").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        ray.kill(first)
        worker.join(90)
        replacement = evaluator.actors()[0]
        after = evaluator.evaluate(task, built.model_copy(update={"turn": 1}))
    [verdict] = out[0]
    assert verdict.status is Status.NOT_EVALUATED, verdict.message
    assert verdict.details["ray"]["attempt"] == 2
    assert replacement._actor_id != first._actor_id
    assert after.status is Status.NOT_EVALUATED and after.details["ray"]["attempt"] == 1


@pytest.mark.nvcc
@pytest.mark.slow
def test_candidate_that_kills_its_actor_twice_is_infra_error(task, built) -> None:
    """Turn 0 ends the actor's process on every attempt: INFRA_ERROR; turn 1 in the same batch is unharmed."""
    with _pool(functools.partial(Echo, die_on=0)) as evaluator:
        verdicts = evaluator.evaluate_many([(task, built), (task, built.model_copy(update={"turn": 1}))])
        alive = ray.get(evaluator.actors()[0].node_id.remote(), timeout=60)
    said = [(v.status.value, v.message[:300], v.details.get("ray")) for v in verdicts]  # shown if one fails
    assert verdicts[0].status is Status.INFRA_ERROR, said
    assert "died while evaluating this candidate, 2 times" in verdicts[0].message, said
    assert verdicts[1].status is Status.NOT_EVALUATED and verdicts[1].details["turn"] == 1, said
    assert alive


def test_a_death_is_charged_to_the_call_the_actor_said_it_started(monkeypatch) -> None:
    """Two calls in flight on a dying actor, which had started the second (its calls ran out of order).

    The second is charged, the first is sent again without charge (the order rule charged the first).
    """
    from ptxgym.evaluation.trusted import ray_backend as rb

    sent: list[str] = []

    class Handle:
        class evaluate:  # noqa: N801 - an actor method's shape: handle.evaluate.remote(...)
            @staticmethod
            def remote(task, candidate, artifact, call_id):
                sent.append(call_id)
                return object()

    class Client:
        started: set[str] = set()

        def _acquire(self):
            return 0, 0, Handle, "node"

        def _artifact(self, candidate, node):
            return None

        def _release(self, slot):
            pass

        def _replace(self, slot, generation):
            return None

        def _started_calls(self, slot, generation):
            return self.started

    client = Client()
    batch = rb._Batch(client, [(None, None), (None, None)])  # type: ignore[arg-type]
    batch.submit(0)
    batch.submit(1)
    client.started = {sent[1]}
    monkeypatch.setattr(rb._Batch, "collect", lambda self, ref, timeout=None: not self.pending.pop(ref))
    first = next(iter(batch.pending))
    i, _slot, _generation, order, call_id = batch.pending.pop(first)
    batch.actor_died(0, 0, (i, order, call_id), RuntimeError("the actor died"))
    assert batch.deaths == [0, 1]
    assert sent[2:] == [f"{batch.id}:0:2", f"{batch.id}:1:2"]  # both sent again


@pytest.mark.nvcc
def test_a_copy_in_another_process_joins_the_cluster(task, built, tmp_path) -> None:
    """A pickled client (e.g. inside an async vector env's subprocess) reaches the same actors."""
    with _pool(CPU_ONLY) as evaluator:
        blob = tmp_path / "client.pkl"
        blob.write_bytes(ray.cloudpickle.dumps((evaluator, task, built)))
        code = (
            "import pickle, sys; ev, task, cand = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "v = ev.evaluate(task, cand); print(v.status.value, v.details['ray']['actor'])"
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
        run = subprocess.run(
            [sys.executable, "-c", code, str(blob)], capture_output=True, text=True, env=env, timeout=120
        )
        still = evaluator.evaluate(task, built)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "NOT_EVALUATED 0"
    assert still.status is Status.NOT_EVALUATED  # the copy closing (at exit) did not end the owner's actors


@pytest.mark.nvcc
@pytest.mark.slow
def test_async_vector_env_steps_through_ray() -> None:
    """Envs in subprocesses (Gymnasium's async vector env, spawned) step through the same actors."""
    with _pool(CPU_ONLY) as evaluator:
        make = functools.partial(gymnasium.make, "ptxgym/Gemm-sm90a-v0", evaluator=evaluator, max_turns=2)
        envs = gymnasium.vector.AsyncVectorEnv([make, make], shared_memory=False, context="spawn")
        try:
            envs.reset(seed=0)
            obs, _reward, _term, _trunc, _info = envs.step(
                [ACTION, ACTION.replace("int row", "int row oops")]
            )
        finally:
            envs.close()
    assert list(obs["status"]) == ["NOT_EVALUATED", "COMPILE_ERROR"]


@pytest.mark.nvcc
def test_step_many_sends_one_batch_to_the_actors() -> None:
    """``step_many`` (run_batch): builds on the caller's pool, the GPU half as one evaluate_many."""
    from ptxgym.envs.vector import step_many

    with _pool(CPU_ONLY, actors=2) as evaluator:
        envs = [gymnasium.make("ptxgym/Gemm-sm90a-v0", evaluator=evaluator, max_turns=2) for _ in range(3)]
        for env in envs:
            env.reset(seed=0)
        results = step_many(envs, [ACTION, "no code", ACTION.replace("int row", "int row oops")])
    assert [r[4]["feedback"].status for r in results] == [
        Status.NOT_EVALUATED,
        Status.EXTRACT_ERROR,
        Status.COMPILE_ERROR,
    ]


def _broken_evaluator() -> Evaluator:
    raise RuntimeError("no such GPU evaluator here")


def test_an_evaluator_that_cannot_start_says_why() -> None:
    # the actors' failure comes back as soon as they have started; on a 2-core host busy with the other
    # test worker their start once took more than 60 s (a timeout, not the failure, was reported)
    with pytest.raises(EvaluatorUnavailableError, match="did not start.*no such GPU evaluator here"):
        _pool(_broken_evaluator, start_timeout_s=240)


def test_select_ray_without_gpus_says_why() -> None:
    with pytest.raises(EvaluatorUnavailableError, match="--evaluator ray: the Ray cluster has no GPU"):
        select_evaluator("ray", source="--evaluator")


def test_importing_ptxgym_does_not_import_ray() -> None:
    code = (
        "import sys, ptxgym, ptxgym.evaluation.choose, ptxgym.evaluation.trusted.ray_backend, "
        "ptxgym.pipeline; print('ray' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
