"""The pipeline: one action in, one Feedback out (DESIGN.md section 1).

extract -> policy -> build -> sass -> [GPU boundary: evaluator: run, check, time, execute] -> Feedback.

An action is a model response (one fenced file, or several named blocks: ``cpu/extract.py``) or a
FlashInfer-Trace ``Solution`` played unchanged (its files and its ``file::function`` entry point). A
solution written for another definition, or for one whose inputs, outputs, dtypes or shapes differ from
the task's, ends the turn as ``TASK_MISMATCH`` before anything is built.

Every stage records its outcome and wall time; the first failing stage ends the turn with a precise
status. Nothing the action contains makes ``run`` raise: a fault of our own infrastructure becomes
``INFRA_ERROR`` with the error text, so an episode always goes on.
"""

from __future__ import annotations

import functools
import hashlib
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ptxgym.cpu.build import BuildOutcome, build_solution
from ptxgym.cpu.extract import extract_sources
from ptxgym.cpu.sass import sass_census
from ptxgym.cpu.screen import check_source
from ptxgym.cpu.signature import signature_problem
from ptxgym.cpu.toolchain import find_toolchain
from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict, NullEvaluator
from ptxgym.knowledge_packs.include_tree import pack_include_dirs
from ptxgym.records.errors import ToolchainNotFoundError
from ptxgym.records.feedback import (
    EnvironmentInfo,
    Feedback,
    SassInfo,
    Stage,
    Status,
    TargetInfo,
    Verdict,
    truncate,
)
from ptxgym.records.schema import Definition, Solution, contract_differences
from ptxgym.records.tasks import Task, solution_definition

T = TypeVar("T")


class _StageFailed(Exception):
    """Internal: a stage decided the turn's status."""

    def __init__(self, status: Status, stage: Stage, message: str) -> None:
        super().__init__(message)
        self.status, self.stage, self.message = status, stage, message


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
        parts: dict = {"stage_wall_s": {}, "input_seed": input_seed}
        try:
            files = self._timed(parts, Stage.EXTRACT, lambda: self._extract(action))
            solution = Solution.from_sources(files, self.task.definition.name, arch=self.task.arch)
        except _StageFailed as fail:
            return self._finish(parts, turn, fail.status, fail.stage, fail.message)
        return self._evaluate_solution(solution, parts, turn, episode_id, first_correct)

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
        parts: dict = {"stage_wall_s": {}, "input_seed": input_seed}
        problem = self._mismatch(solution, definition)
        if problem:
            return self._finish(parts, turn, Status.TASK_MISMATCH, Stage.EXTRACT, problem)
        return self._evaluate_solution(solution, parts, turn, episode_id, first_correct)

    # ---------------------------------------------------------------------------------------- stages

    def _evaluate_solution(
        self, solution: Solution, parts: dict, turn: int, episode_id: str, first_correct: bool
    ) -> Feedback:
        entry = solution.spec.entry_file
        main_source = next(s.content for s in solution.sources if s.path == entry)
        parts["source_sha256"] = hashlib.sha256(
            "\x00".join(f"{s.path}\x00{s.content}" for s in solution.sources).encode()
        ).hexdigest()
        parts["source_chars"] = sum(len(s.content) for s in solution.sources)
        try:
            others = {s.path: s.content for s in solution.sources if s.path != entry}
            self._timed(
                parts,
                Stage.SCREEN,
                lambda: self._screen(main_source, others, entry, solution.spec.entry_symbol),
            )
            built, so_path = self._timed(parts, Stage.BUILD, lambda: self._build(solution, parts))
            sass = self._timed(parts, Stage.SASS, lambda: sass_census(so_path, self.task.arch_spec))
            parts["sass"] = sass
            candidate = BuiltCandidate(
                task_id=self.task.id,
                so_path=so_path,
                entry_symbol=solution.spec.entry_symbol,
                source_sha256=parts["source_sha256"],
                artifact_sha256=built.info.artifact_sha256 or "",
                static_target=sass.static_target,
                kernels=[k.kernel for k in sass.kernels],
                episode_id=episode_id,
                turn=turn,
                first_correct_in_episode=first_correct,
                input_seed=parts.get("input_seed"),
            )
            verdict = self._gpu(candidate)
        except _StageFailed as fail:
            return self._finish(parts, turn, fail.status, fail.stage, fail.message)
        except Exception as exc:  # noqa: BLE001 - our own fault: recorded, never raised into the episode
            tail = truncate(traceback.format_exc(), 3000)
            return self._finish(
                parts,
                turn,
                Status.INFRA_ERROR,
                Stage.RUN,
                f"ptxgym internal error ({type(exc).__name__}: {exc})",
                log=tail,
            )
        return self._merge(parts, turn, verdict)

    def _extract(self, action: str) -> dict[str, str]:
        if not isinstance(action, str):
            raise _StageFailed(
                Status.EXTRACT_ERROR, Stage.EXTRACT, f"the action must be text, got {type(action).__name__}"
            )
        got = extract_sources(action)
        if got.files is None:
            raise _StageFailed(Status.EXTRACT_ERROR, Stage.EXTRACT, got.message)
        return got.files

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

    def _finish(
        self, parts: dict, turn: int, status: Status, stage: Stage, message: str, log: str = ""
    ) -> Feedback:
        return Feedback(
            task_id=self.task.id,
            turn=turn,
            status=status,
            stage=stage,
            message=message,
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
        return Feedback(
            task_id=self.task.id,
            turn=turn,
            status=v.status,
            stage=v.stage,
            message=v.message,
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
        )


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
