"""The pipeline: one action in, one Feedback out (DESIGN.md section 1).

extract -> policy -> build -> sass -> [GPU boundary: evaluator: run, check, time, execute] -> Feedback.

Every stage records its outcome and wall time; the first failing stage ends the turn with a precise
status. Nothing the action contains makes ``run`` raise: a fault of our own infrastructure becomes
``INFRA_ERROR`` with the error text, so an episode always goes on.
"""

from __future__ import annotations

import hashlib
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ptxgym.cpu.build import BuildOutcome, build_solution
from ptxgym.cpu.extract import extract_code
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
from ptxgym.records.schema import Solution
from ptxgym.records.tasks import Task

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
        self, action: str, *, turn: int = 0, episode_id: str = "", first_correct: bool = True
    ) -> Feedback:
        """Evaluate a model response (text with a fenced CUDA block)."""
        parts: dict = {"stage_wall_s": {}}
        try:
            code = self._timed(parts, Stage.EXTRACT, lambda: self._extract(action))
            solution = Solution.from_cuda_source(code, self.task.definition.name, arch=self.task.arch)
        except _StageFailed as fail:
            return self._finish(parts, turn, fail.status, fail.stage, fail.message)
        return self._evaluate_solution(solution, parts, turn, episode_id, first_correct)

    def run_solution(
        self, solution: Solution, *, turn: int = 0, episode_id: str = "", first_correct: bool = True
    ) -> Feedback:
        """Evaluate a FlashInfer-Trace Solution (multi-file, any entry point)."""
        return self._evaluate_solution(solution, {"stage_wall_s": {}}, turn, episode_id, first_correct)

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

    def _extract(self, action: str) -> str:
        if not isinstance(action, str):
            raise _StageFailed(
                Status.EXTRACT_ERROR, Stage.EXTRACT, f"the action must be text, got {type(action).__name__}"
            )
        got = extract_code(action)
        if got.code is None:
            raise _StageFailed(Status.EXTRACT_ERROR, Stage.EXTRACT, got.message)
        return got.code

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
