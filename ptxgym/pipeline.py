"""The pipeline: one action in, one Feedback out (DESIGN.md section 1).

extract -> policy -> build -> sass -> [GPU boundary: evaluator: run, check, time, execute] -> Feedback.

An action is a model response (one fenced file, or several named blocks: ``cpu/extract.py``) or a
FlashInfer-Trace ``Solution`` played unchanged (its files and its ``file::function`` entry point). A
solution written for another definition, or for one whose inputs, outputs, dtypes or shapes differ from
the task's, ends the turn as ``TASK_MISMATCH`` before anything is built.

Every stage records its outcome and wall time; the first failing stage ends the turn with a precise
status. Nothing the action contains makes ``run`` raise: a fault of our own infrastructure becomes
``INFRA_ERROR`` with the error text, so an episode always goes on.

A turn has two halves: ``prepare`` (the CPU stages, giving a ``BuiltCandidate`` or the turn's Feedback)
and ``finish`` (merging the evaluator's verdict). ``run_batch`` (``Pipeline.run_many`` for one task) runs
many submissions' CPU halves concurrently on a build pool, then hands the built candidates to each
evaluator in one ``Evaluator.evaluate_many`` call; Feedback comes back in input order.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from ptxgym.confine import cores
from ptxgym.confine.launch import idle_priority
from ptxgym.cpu.build import BuildOutcome, build_solution
from ptxgym.cpu.extract import extract_sources
from ptxgym.cpu.jail import BUILD_NICE, build_cores, builds_idle
from ptxgym.cpu.sass import sass_census
from ptxgym.cpu.screen import check_source
from ptxgym.cpu.signature import signature_problem
from ptxgym.cpu.toolchain import find_toolchain
from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict, NullEvaluator
from ptxgym.knowledge_packs.include_tree import pack_include_dirs
from ptxgym.records import settings
from ptxgym.records.errors import ToolchainNotFoundError, validation_summary
from ptxgym.records.feedback import (
    EnvironmentInfo,
    Feedback,
    SassInfo,
    Stage,
    Status,
    TargetInfo,
    Verdict,
    WorkloadRef,
    truncate,
)
from ptxgym.records.schema import Definition, Solution, contract_differences
from ptxgym.records.tasks import Task, solution_definition

T = TypeVar("T")
log = logging.getLogger(__name__)


class _StageFailed(Exception):
    """Internal: a stage decided the turn's status."""

    def __init__(self, status: Status, stage: Stage, message: str) -> None:
        super().__init__(message)
        self.status, self.stage, self.message = status, stage, message


@dataclass(frozen=True)
class Submission:
    """One turn to evaluate: an action (response text or Solution) and where it sits in its episode."""

    action: str | Solution
    turn: int = 0
    episode_id: str = ""
    first_correct: bool = True
    """No earlier turn of the episode was correct (memcheck scheduling)."""
    input_seed: int | None = None
    """The episode's secret input seed (never shown to the policy)."""
    definition: Definition | None = None
    """For a Solution: the definition it was written for, when the caller knows it."""


@dataclass
class Prepared:
    """A submission after the CPU stages: its Feedback if a stage ended the turn, else its candidate."""

    parts: dict
    turn: int
    candidate: BuiltCandidate | None = None
    feedback: Feedback | None = None


class Pipeline:
    """Runs the stages for one task with one evaluator; reusable across turns and episodes."""

    def __init__(self, task: Task, evaluator: Evaluator | None = None) -> None:
        self.task = task
        self.evaluator = evaluator or NullEvaluator()

    # ------------------------------------------------------------------------------------------ public

    def run(
        self,
        action: str,
        *,
        turn: int = 0,
        episode_id: str = "",
        first_correct: bool = True,
        input_seed: int | None = None,
    ) -> Feedback:
        """Evaluate a model response (text with one fenced CUDA block, or several named ones)."""
        sub = Submission(action, turn, episode_id, first_correct, input_seed)
        return self._complete(self.prepare(sub))

    def run_solution(
        self,
        solution: Solution,
        *,
        turn: int = 0,
        episode_id: str = "",
        first_correct: bool = True,
        input_seed: int | None = None,
        definition: Definition | None = None,
    ) -> Feedback:
        """Evaluate a FlashInfer-Trace Solution unchanged (several files, any ``file::function`` entry).

        ``definition`` is the definition the solution was written for, when the caller knows it (``ptxgym
        check`` finds it in the solution's dataset folder); otherwise it is looked up by name in the
        task's dataset and the catalog. A mismatch with the task is ``TASK_MISMATCH``, never a build.
        """
        sub = Submission(solution, turn, episode_id, first_correct, input_seed, definition)
        return self._complete(self.prepare(sub))

    def run_many(self, submissions: Sequence[Submission], max_workers: int | None = None) -> list[Feedback]:
        """Feedback for each submission, in input order: builds concurrently, each evaluated once built.

        The batch form of ``run``/``run_solution`` for this task (``run_batch`` mixes tasks and pipelines).
        """
        return run_batch([(self, sub) for sub in submissions], max_workers=max_workers)

    # ------------------------------------------------------------------------------- two halves

    def prepare(self, sub: Submission) -> Prepared:
        """The CPU half (extract, screen, build, SASS): a finished Feedback, or a candidate to evaluate.

        Never raises for anything in the action; a fault of ours is an ``INFRA_ERROR`` Feedback. With
        ``PTXGYM_BUILD_PROCESSES`` above 0 it runs in one of that many build processes (``_elsewhere``).
        """
        size = 0 if _IN_BUILD_PROCESS else settings.build_processes()
        if size:
            prepared = _elsewhere(size, self.task, sub)
            if prepared is not None:
                return prepared
        return self._prepare_here(sub)

    def _prepare_here(self, sub: Submission) -> Prepared:
        """``prepare`` in this process."""
        parts: dict = {"stage_wall_s": {}, "input_seed": sub.input_seed, "build_pid": os.getpid()}
        try:
            if isinstance(sub.action, Solution):
                solution = sub.action
                problem = self._mismatch(solution, sub.definition)
                if problem:
                    raise _StageFailed(Status.TASK_MISMATCH, Stage.EXTRACT, problem)
            else:
                solution = self._timed(parts, Stage.EXTRACT, lambda: self._extract(sub.action))  # type: ignore[arg-type]
            candidate = self._build_candidate(solution, parts, sub)
        except _StageFailed as fail:
            return Prepared(
                parts, sub.turn, feedback=self._finish(parts, sub.turn, fail.status, fail.stage, fail.message)
            )
        except Exception as exc:  # noqa: BLE001 - our own fault: recorded, never raised into the episode
            return Prepared(parts, sub.turn, feedback=self._internal(parts, sub.turn, exc))
        return Prepared(parts, sub.turn, candidate=candidate)

    def finish(self, prepared: Prepared, verdict: GpuVerdict | None) -> Feedback:
        """The Feedback of a prepared submission, given the evaluator's verdict for its candidate."""
        if prepared.feedback is not None:
            return prepared.feedback
        if verdict is None:
            raise ValueError("a built candidate needs its evaluator verdict to finish")
        return self._merge(prepared.parts, prepared.turn, verdict)

    def run_submission(self, sub: Submission) -> Feedback:
        """``run`` or ``run_solution`` of a Submission (the env's ``step``)."""
        return self._complete(self.prepare(sub))

    def _complete(self, prepared: Prepared) -> Feedback:
        """Finish one prepared submission through this pipeline's evaluator (``run``'s GPU half)."""
        if prepared.candidate is None:
            return self.finish(prepared, None)
        try:
            verdict = self._gpu(prepared.candidate)
        except Exception as exc:  # noqa: BLE001 - our own fault: recorded, never raised into the episode
            return self._internal(prepared.parts, prepared.turn, exc)
        return self.finish(prepared, verdict)

    # ---------------------------------------------------------------------------------------- stages

    def _build_candidate(self, solution: Solution, parts: dict, sub: Submission) -> BuiltCandidate:
        entry = solution.spec.entry_file
        main_source = next(s.content for s in solution.sources if s.path == entry)
        parts["source_sha256"] = hashlib.sha256(
            "\x00".join(f"{s.path}\x00{s.content}" for s in solution.sources).encode()
        ).hexdigest()
        parts["source_chars"] = sum(len(s.content) for s in solution.sources)
        others = {s.path: s.content for s in solution.sources if s.path != entry}
        self._timed(
            parts,
            Stage.SCREEN,
            lambda: self._screen(main_source, others, entry, solution.spec.entry_symbol),
        )
        built, so_path = self._timed(parts, Stage.BUILD, lambda: self._build(solution, parts))
        sass = self._timed(parts, Stage.SASS, lambda: sass_census(so_path, self.task.arch_spec))
        parts["sass"] = sass
        return BuiltCandidate(
            task_id=self.task.id,
            so_path=so_path,
            entry_symbol=solution.spec.entry_symbol,
            source_sha256=parts["source_sha256"],
            artifact_sha256=built.info.artifact_sha256 or "",
            static_target=sass.static_target,
            kernels=[k.kernel for k in sass.kernels],
            episode_id=sub.episode_id,
            turn=sub.turn,
            first_correct_in_episode=sub.first_correct,
            input_seed=sub.input_seed,
        )

    def _internal(self, parts: dict, turn: int, exc: Exception) -> Feedback:
        """An exception of ours as this turn's INFRA_ERROR Feedback (call inside the ``except``).

        The message the model sees names the exception's type only; its text and the traceback (host
        paths) go to the Feedback's log, which the rendered observation leaves out for an INFRA_ERROR.
        """
        tail = truncate(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", 3000)
        return self._finish(
            parts,
            turn,
            Status.INFRA_ERROR,
            Stage.RUN,
            f"ptxgym internal error ({type(exc).__name__})",
            log=tail,
        )

    def _extract(self, action: str) -> Solution:
        """The action's files as a solution of this task; an unusable set of files is an EXTRACT_ERROR."""
        if not isinstance(action, str):
            raise _StageFailed(
                Status.EXTRACT_ERROR, Stage.EXTRACT, f"the action must be text, got {type(action).__name__}"
            )
        got = extract_sources(action)
        if got.files is None:
            raise _StageFailed(Status.EXTRACT_ERROR, Stage.EXTRACT, got.message)
        try:
            return Solution.from_sources(got.files, self.task.definition.name, arch=self.task.arch)
        except ValidationError as exc:  # e.g. a file named like the folder of another
            why = f"the files do not form a solution: {validation_summary(exc)}"
            raise _StageFailed(Status.EXTRACT_ERROR, Stage.EXTRACT, why) from exc

    def _mismatch(self, solution: Solution, definition: Definition | None) -> str:
        """Why a solution does not fit this task ("" when it does)."""
        want = self.task.definition
        have = definition or solution_definition(solution.definition, dataset=self.task.source)
        diffs = contract_differences(have, want) if have is not None else []
        if solution.definition == want.name and not diffs:
            return ""
        detail = f" ({'; '.join(diffs)})" if diffs else ""
        own = f"--task {solution.definition}@{self.task.arch}"
        if solution.definition != want.name:
            return (
                f"the solution is written for definition {solution.definition!r}, but task {self.task.id} is "
                f"{want.name!r}{detail}. Nothing was built: play it on the task of its own definition "
                f"({own}, with --dataset for a dataset folder)."
            )
        return (
            f"the solution's definition {want.name!r} (from its dataset) is not the task's definition of "
            f"that name{detail}. Nothing was built: play it on its own dataset's task ({own} --dataset DIR, "
            "DIR the folder that holds the solution's definition)."
        )

    def _screen(self, source: str, others: dict[str, str], entry: str, symbol: str) -> None:
        defn = self.task.definition
        names = [*defn.inputs, *defn.outputs]
        problem = signature_problem({entry: source, **others}, symbol, len(names), names)
        if problem:
            raise _StageFailed(Status.STATIC_REJECT, Stage.SCREEN, problem)
        verdict = check_source(source, others, entry_name=entry)
        if not verdict.ok:
            raise _StageFailed(Status.STATIC_REJECT, Stage.SCREEN, verdict.message)

    def _build(self, solution: Solution, parts: dict) -> tuple[BuildOutcome, Path]:
        includes = pack_include_dirs(self.task.arch)
        outcome = build_solution(solution, self.task.arch_spec, include_dirs=includes)
        parts["compile"] = outcome.info
        if outcome.status is not None:
            stage = Stage.SCREEN if outcome.status is Status.STATIC_REJECT else Stage.BUILD
            raise _StageFailed(outcome.status, stage, outcome.message)
        if outcome.so_path is None:
            raise _StageFailed(Status.COMPILE_ERROR, Stage.BUILD, "the build left no shared object")
        return outcome, outcome.so_path

    def _gpu(self, candidate: BuiltCandidate) -> GpuVerdict:
        return self.evaluator.evaluate(self.task, candidate)

    # --------------------------------------------------------------------------------------- helpers

    @staticmethod
    def _timed(parts: dict, stage: Stage, fn: Callable[[], T]) -> T:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            parts["stage_wall_s"][stage.value] = round(time.perf_counter() - t0, 4)

    def _static_target(self, sass: SassInfo | None) -> TargetInfo:
        arch = self.task.arch_spec
        if sass is None:
            return TargetInfo(family=arch.target_family, mode="static")
        return TargetInfo(
            family=arch.target_family,
            mode="static",
            static=sass.static_target,
            executed=Verdict.NOT_CHECKED,
            message="" if sass.static_target else "no target-family opcode in the SASS",
        )

    def _environment(self, extra: EnvironmentInfo | None = None) -> EnvironmentInfo:
        base = extra.model_dump() if extra else {}
        try:
            base["nvcc"] = base.get("nvcc") or find_toolchain().nvcc_version
        except ToolchainNotFoundError:
            base["nvcc"] = None  # the build stage already reported what is missing
        base["evaluator"] = base.get("evaluator") or self.evaluator.name
        return EnvironmentInfo(**base)

    def _workload(self) -> WorkloadRef:
        wl = self.task.workload
        return WorkloadRef(uuid=wl.uuid, axes=dict(wl.axes))

    def _finish(
        self, parts: dict, turn: int, status: Status, stage: Stage, message: str, log: str = ""
    ) -> Feedback:
        return Feedback(
            task_id=self.task.id,
            turn=turn,
            status=status,
            stage=stage,
            message=message,
            workload=self._workload(),
            source_sha256=parts.get("source_sha256"),
            source_chars=parts.get("source_chars", 0),
            compile=parts.get("compile"),
            sass=parts.get("sass"),
            target=self._static_target(parts.get("sass")) if parts.get("sass") else None,
            stage_wall_s=parts["stage_wall_s"],
            environment=self._environment(),
            log=log,
        )

    def _merge(self, parts: dict, turn: int, v: GpuVerdict) -> Feedback:
        stage_wall = {**parts["stage_wall_s"], **v.stage_wall_s}
        target = v.target or self._static_target(parts.get("sass"))
        if v.target is None and v.status is Status.PASSED:  # an evaluator that proved nothing: no credit
            target = target.model_copy(
                update={"mode": "executed", "message": "the evaluator gave no target record: not proven"}
            )
        return Feedback(
            task_id=self.task.id,
            turn=turn,
            status=v.status,
            stage=v.stage,
            message=v.message,
            workload=self._workload(),
            source_sha256=parts.get("source_sha256"),
            source_chars=parts.get("source_chars", 0),
            compile=parts.get("compile"),
            sass=parts.get("sass"),
            correctness=v.correctness,
            timing=v.timing,
            target=target,
            memcheck=v.memcheck,
            evidence=v.evidence,
            stage_wall_s=stage_wall,
            environment=self._environment(v.environment),
            log=v.log,
            cache_hit=v.cache_hit,
            candidate_ran=v.candidate_ran,
        )


# ---------------------------------------------------------------------------------------- build processes
# The CPU half's own Python (the screen's lexer, the SASS census, the jail's set-up: 0.07 s of the
# interpreter per cold naive-GEMM build on a CPU host, bench/results/build_cpu_2026-12-08.txt) runs, by
# default, on threads of the process that holds the local evaluator, whose trusted clock waits for the
# interpreter's lock after every blocking call (``cpu/scan_helpers.py``). On one H100 the Ray backend,
# whose evaluator has a process of its own, was 9-10% faster than the local one
# (``bench/results/throughput_2026-12-08_s62[bc]_*``). ``PTXGYM_BUILD_PROCESSES=N`` moves the whole CPU
# half into N processes of ours (spawned, at the builds' CPU priority and cores); one that fails (it died,
# or a result could not be carried back) makes that turn's CPU half run here instead, as before, and the
# next turn starts a new pool.

_IN_BUILD_PROCESS = False
"""True in a build process (its turns' CPU halves run in it, never sent on)."""
_build_pool: tuple[int, ProcessPoolExecutor] | None = None
_build_pool_lock = threading.Lock()


def _start_build_process() -> None:
    """A build process's start: marked as one, scanning itself, at the builds' priority and cores."""
    global _IN_BUILD_PROCESS
    _IN_BUILD_PROCESS = True
    settings.scan_here()
    os.nice(BUILD_NICE)
    if builds_idle():
        idle_priority(os.getpid())
    cores.pin(os.getpid(), build_cores())


def _prepare_in_build_process(task: Task, sub: Submission) -> Prepared:
    """A build process's job: ``Pipeline.prepare`` of one submission, with no evaluator."""
    return Pipeline(task).prepare(sub)


def _build_processes(size: int) -> ProcessPoolExecutor:
    """This process's pool of ``size`` build processes (a new one for a new size)."""
    global _build_pool
    with _build_pool_lock:
        if _build_pool is None or _build_pool[0] != size:
            if _build_pool is not None:
                _build_pool[1].shutdown(wait=False, cancel_futures=True)
            spawn = multiprocessing.get_context("spawn")  # never fork a process holding CUDA and threads
            pool = ProcessPoolExecutor(size, mp_context=spawn, initializer=_start_build_process)
            _build_pool = (size, pool)
        return _build_pool[1]


def _drop_build_processes(pool: ProcessPoolExecutor) -> None:
    """Forget ``pool`` (broken): the next turn starts another."""
    global _build_pool
    with _build_pool_lock:
        if _build_pool is not None and _build_pool[1] is pool:
            _build_pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def _elsewhere(size: int, task: Task, sub: Submission) -> Prepared | None:
    """``prepare`` in a build process; None where that failed (the caller prepares here instead)."""
    pool = _build_processes(size)
    try:
        return pool.submit(_prepare_in_build_process, task, sub).result()
    except BrokenProcessPool as exc:
        log.warning("a build process failed (%s): this turn builds in the evaluator's process", exc)
        _drop_build_processes(pool)
    except Exception as exc:  # noqa: BLE001 - e.g. a result that did not pickle: our fault, built here
        log.warning(
            "a turn's CPU half failed in a build process (%s: %s): built here", type(exc).__name__, exc
        )
    return None


def _after_fork_in_child() -> None:
    """A forked child (an async vector env) has no build processes of its own yet."""
    global _build_pool, _build_pool_lock
    _build_pool, _build_pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


# ------------------------------------------------------------------------------------------------ batches


def build_workers() -> int:
    """Default size of the build pool: the host's cores (``os.cpu_count``), at least 1."""
    return max(1, os.cpu_count() or 1)


def run_batch(jobs: Sequence[tuple[Pipeline, Submission]], max_workers: int | None = None) -> list[Feedback]:
    """Feedback for each ``(pipeline, submission)``, in input order; the pipelines may differ in task.

    The CPU stages run concurrently on a thread pool of ``max_workers`` (default: the host's cores). A
    thread is enough: the build's time is spent in nvcc, ptxas and cuobjdump subprocesses, which run in
    parallel outside the interpreter lock (``bench/throughput.py`` measures it). Each built candidate goes
    to its evaluator as soon as its build ends (``evaluate_many`` of that one candidate, on a thread of
    its own), so the GPU works while the rest of the batch still builds; the evaluators order and overlap
    what they receive (the local evaluator's GPU queue is first come, first served; the Ray evaluator
    sends each to its least-loaded actor). Before, the whole batch was built before the first candidate
    reached the GPU, which sat idle meanwhile. One submission's failure, wherever it happens, is that
    submission's Feedback, never an exception for the batch.
    """
    if not jobs:
        return []
    workers = min(len(jobs), max_workers or build_workers())
    out: list[Feedback | None] = [None] * len(jobs)
    with (
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ptxgym-build") as builds,
        ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="ptxgym-evaluate") as evaluations,
    ):
        building = {builds.submit(pipeline.prepare, sub): i for i, (pipeline, sub) in enumerate(jobs)}
        evaluating = {}
        for done in as_completed(building):
            i = building[done]
            pipeline, prep = jobs[i][0], done.result()
            if prep.candidate is None:
                out[i] = pipeline.finish(prep, None)
            else:
                pair = [(pipeline.task, prep.candidate)]
                evaluating[evaluations.submit(_evaluate_group, pipeline.evaluator, pair)] = (i, prep)
        for future, (i, prep) in evaluating.items():
            out[i] = jobs[i][0].finish(prep, future.result()[0])
    finished = [fb for fb in out if fb is not None]
    assert len(finished) == len(jobs), "every job of a batch gets its Feedback"
    return finished


def _evaluate_group(evaluator: Evaluator, pairs: list) -> list[GpuVerdict]:
    """``evaluate_many`` on one evaluator, held to its contract: a broken batch is INFRA_ERROR for each."""
    try:
        got = evaluator.evaluate_many(pairs)
        if len(got) != len(pairs):
            raise RuntimeError(f"evaluate_many returned {len(got)} verdicts for {len(pairs)} candidates")
        return list(got)
    except Exception as exc:  # noqa: BLE001 - a backend bug fails its candidates, not the batch
        message = f"evaluator {evaluator.name} failed on the batch ({type(exc).__name__}: {exc})"
        tail = truncate(traceback.format_exc(), 3000)
        return [
            GpuVerdict(status=Status.INFRA_ERROR, stage=Stage.RUN, message=message, log=tail) for _ in pairs
        ]


class RayPipeline(Pipeline):
    """Runs each step as a Ray task (its CPU stages on whichever CPU node Ray picks).

    The step runs there as a plain ``Pipeline`` with this pipeline's evaluator, which must be picklable
    and reachable from every node, its ``connect()`` joining its cluster: a ``RayEvaluator``
    (``ptxgym.evaluation.trusted.ray_backend``), whose actors then receive the built .so's bytes when
    they run on another node. Ray is imported only here, when a step runs. A step that Ray itself loses
    becomes an ``INFRA_ERROR`` turn.
    """

    def __init__(self, task: Task, evaluator: Evaluator | None = None, num_cpus: float = 1.0) -> None:
        super().__init__(task, evaluator)
        self.num_cpus = num_cpus

    def run(self, action: str, **kwargs) -> Feedback:
        """``Pipeline.run`` in a Ray task."""
        return self._remote("run", action, kwargs)

    def run_solution(self, solution: Solution, **kwargs) -> Feedback:
        """``Pipeline.run_solution`` in a Ray task."""
        return self._remote("run_solution", solution, kwargs)

    def run_submission(self, sub: Submission) -> Feedback:
        """``Pipeline.run_submission`` (the env's ``step``) in a Ray task.

        ``run_batch`` (``step_many``, vector envs) calls ``prepare`` instead: those builds run on the
        caller's build pool and only the GPU half goes to the actors (``evaluate_many``).
        """
        return self._remote("run_submission", sub, {"turn": sub.turn})

    def _remote(self, method: str, arg: object, kwargs: dict) -> Feedback:
        import ray

        try:
            if hasattr(self.evaluator, "connect"):
                self.evaluator.connect()  # a copy in a fresh process joins the evaluator's cluster
            step = _remote_step().options(num_cpus=self.num_cpus)
            return ray.get(step.remote(self.task, self.evaluator, method, arg, kwargs))
        except Exception as exc:  # noqa: BLE001 - our own fault: recorded, never raised into the episode
            parts: dict = {"stage_wall_s": {}}
            message = f"the Ray step failed ({type(exc).__name__}: {str(exc).strip()[:500]})"
            return self._finish(parts, kwargs.get("turn", 0), Status.INFRA_ERROR, Stage.RUN, message)


def run_step(task: Task, evaluator: Evaluator, method: str, arg: object, kwargs: dict) -> Feedback:
    """One step with a plain Pipeline: what a ``RayPipeline`` runs on a CPU node."""
    if method == "run_submission":
        return Pipeline(task, evaluator).run_submission(arg)  # type: ignore[arg-type]
    return getattr(Pipeline(task, evaluator), method)(arg, **kwargs)


@functools.cache
def _remote_step():  # noqa: ANN202 - a ray.remote function (ray is optional)
    import ray

    return ray.remote(run_step)


def make_pipeline(task: Task, evaluator: Evaluator | None = None) -> Pipeline:
    """The pipeline for ``evaluator``: a ``RayPipeline`` when it asks for remote builds, else a Pipeline."""
    if getattr(evaluator, "remote_builds", False):
        return RayPipeline(task, evaluator)
    return Pipeline(task, evaluator)
