"""The evaluation loop: trajectories step by step against the env, K at a time, every turn on disk at once.

Each trajectory runs in a worker thread: ``policy.act`` -> ``env.step`` -> append the TurnRecord -> next
turn, until the env terminates (target speedup reached) or truncates (turn budget). K threads keep K
trajectories in flight, so one trajectory's generation overlaps another's build and GPU evaluation.
All envs share one evaluator; unless it declares ``thread_safe = True`` (one GPU, one evaluator) the
candidates reach it in batches through ``evaluate_many`` (``SharedEvaluator``), one batch at a time; builds
(CPU) run in parallel in the trajectory threads.

A policy that fails (server gone, errors after retries) stops its trajectory with an ``error`` event:
its finished turns stay on disk and ``--resume`` continues it. ``ServerUnavailableError`` stops the
whole run (nothing else can make progress). ``PolicyExhausted`` and ``ContextOverflowError`` end a
trajectory for good (``end`` event).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import gymnasium
from pydantic import BaseModel, ConfigDict, Field

from ptxgym.envs.registration import register_envs
from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict
from ptxgym.policies.base import (
    Action,
    ContextOverflowError,
    Policy,
    PolicyExhausted,
    ServerUnavailableError,
)
from ptxgym.policies.history import Conversation
from ptxgym.records.feedback import Feedback, Stage, Status
from ptxgym.records.feedback_text import render_feedback
from ptxgym.records.tasks import Task, get_task
from ptxgym.records.turns import TurnRecord
from ptxgym.runner.config import EvalConfig, TrajectoryKey
from ptxgym.runner.progress import Progress
from ptxgym.runner.store import Event, ResumeState, RunStore, now


class SharedEvaluator(Evaluator):
    """One evaluator for many envs: ``close`` from an env is ignored; calls are batched if needed.

    An evaluator that declares ``thread_safe = True`` is called directly from every trajectory thread.
    Any other is called by one thread at a time, in batches: a thread whose candidate arrives while none
    is being evaluated becomes the dispatcher and hands every candidate waiting by then to the inner
    evaluator in one ``evaluate_many`` call, again until none is left; the others wait for their verdict.
    So the inner evaluator sees the K trajectories' candidates as batches (a backend that overlaps work
    gets to), and never two calls at once.
    """

    def __init__(self, inner: Evaluator) -> None:
        self.inner = inner
        self.name = inner.name
        self.batches: list[int] = []
        """Size of each batch handed to the inner evaluator (for metrics and tests)."""
        self._direct = bool(getattr(inner, "thread_safe", False))
        self._lock = threading.Lock()
        self._waiting: list[tuple[Task, BuiltCandidate, Future[GpuVerdict]]] = []
        self._dispatching = False

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        """The candidate's verdict, evaluated in the next batch (directly if the evaluator is thread-safe)."""
        if self._direct:
            return self.inner.evaluate(task, candidate)
        return self.evaluate_many([(task, candidate)])[0]

    def evaluate_many(self, task_candidates: Sequence[tuple[Task, BuiltCandidate]]) -> list[GpuVerdict]:
        """Verdicts in input order; the candidates join the next batch of the inner evaluator."""
        if self._direct:
            return self.inner.evaluate_many(task_candidates)
        mine: list[Future[GpuVerdict]] = [Future() for _ in task_candidates]
        with self._lock:
            self._waiting += [(t, c, f) for (t, c), f in zip(task_candidates, mine, strict=True)]
            lead = not self._dispatching
            self._dispatching = self._dispatching or lead
        if lead:
            self._dispatch()
        return [f.result() for f in mine]

    def _dispatch(self) -> None:
        """Evaluate waiting batches until none is left, then stop being the dispatcher."""
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch:
                    self._dispatching = False
                    return
            self.batches.append(len(batch))
            verdicts = self._batch_verdicts([(t, c) for t, c, _ in batch])
            for (_, _, fut), verdict in zip(batch, verdicts, strict=True):
                fut.set_result(verdict)

    def _batch_verdicts(self, pairs: list[tuple[Task, BuiltCandidate]]) -> list[GpuVerdict]:
        """The inner batch, held to its contract (a broken batch is INFRA_ERROR for each candidate)."""
        try:
            got = list(self.inner.evaluate_many(pairs))
            if len(got) != len(pairs):
                raise RuntimeError(f"evaluate_many returned {len(got)} verdicts for {len(pairs)} candidates")
            return got
        except Exception as exc:  # noqa: BLE001 - a waiting trajectory must get an answer, never hang
            message = f"evaluator {self.name} failed on a batch ({type(exc).__name__}: {exc})"
            return [
                GpuVerdict(
                    status=Status.INFRA_ERROR, stage=Stage.RUN, message=message, log=traceback.format_exc()
                )
                for _ in pairs
            ]

    def close(self) -> None:
        """Envs close their evaluator; the shared one stays open until the runner closes ``inner``."""


class TrajectoryResult(BaseModel):
    """How one trajectory left this run."""

    model_config = ConfigDict(frozen=True)

    trajectory_id: str
    turns_run: int = Field(description="Turns run in this invocation.")
    turns_total: int
    ended: str | None = Field(None, description="Final end reason, or None when it stopped early.")
    error: str | None = None


class Runner:
    """Runs the trajectories of an EvalConfig with one policy and one evaluator into a RunStore."""

    def __init__(
        self, config: EvalConfig, policy: Policy, evaluator: Evaluator, store: RunStore, progress: Progress
    ) -> None:
        self.config, self.policy, self.store, self.progress = config, policy, store, progress
        self.evaluator = SharedEvaluator(evaluator)
        self.stop_reason: str | None = None
        self._stop = threading.Event()

    def request_stop(self, reason: str) -> None:
        """Finish the turns in flight, start no new ones."""
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()

    def run(self, state: ResumeState) -> list[TrajectoryResult]:
        """Every trajectory not already complete in ``state``; returns one result per trajectory."""
        keys = self.config.keys()
        results: dict[str, TrajectoryResult] = {}
        todo = []
        for key in keys:
            prior = state.records.get(key.id, [])
            if key.id in state.ended:
                results[key.id] = TrajectoryResult(
                    trajectory_id=key.id, turns_run=0, turns_total=len(prior), ended=state.ended[key.id]
                )
            else:
                todo.append((key, prior))
        with ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="traj") as pool:
            futures = [pool.submit(self._guarded, key, prior) for key, prior in todo]
            try:
                while True:
                    done, pending = wait(futures, timeout=0.5)
                    if not pending:
                        break
            except KeyboardInterrupt:
                self.request_stop("interrupted (Ctrl-C); finished turns are saved, rerun with --resume")
                self.progress.note("stopping after the turns in flight ...")
                wait(futures)
        for fut in futures:
            res = fut.result()
            results[res.trajectory_id] = res
        return [results[k.id] for k in keys]

    # ------------------------------------------------------------------------------------ trajectory

    def _guarded(self, key: TrajectoryKey, prior: list[TurnRecord]) -> TrajectoryResult:
        try:
            return self._trajectory(key, prior)
        except Exception as exc:  # noqa: BLE001 - one trajectory's fault must not take down the run
            msg = f"{type(exc).__name__}: {exc}"
            self.store.append_event(
                Event(
                    event="error",
                    trajectory_id=key.id,
                    reason="runner_error",
                    message=msg + "\n" + traceback.format_exc()[-2000:],
                )
            )
            self.progress.note(f"{key.id}: stopped by an internal error: {msg}")
            return TrajectoryResult(trajectory_id=key.id, turns_run=0, turns_total=len(prior), error=msg)

    def _make_env(self, key: TrajectoryKey) -> gymnasium.Env:
        kwargs: dict[str, Any] = {
            "evaluator": self.evaluator,
            "max_turns": self.config.turns,
            "target_speedup": self.config.target_speedup,
            "variant": key.env_variant,
        }
        if self.config.reward:
            kwargs["reward"] = self.config.reward
        register_envs()
        return gymnasium.make(get_task(key.task_id).env_id, **kwargs)

    def _trajectory(self, key: TrajectoryKey, prior: list[TurnRecord]) -> TrajectoryResult:
        if self._stop.is_set():
            return TrajectoryResult(
                trajectory_id=key.id, turns_run=0, turns_total=len(prior), error=self.stop_reason
            )
        if len(prior) >= self.config.turns:  # the turn budget was lowered on resume
            return self._ended(key, len(prior), len(prior), "truncated", "turn budget reached")
        env = self._make_env(key)
        try:
            obs, conv = self._start(env, key, prior)
            return self._turns(env, key, obs, conv, len(prior))
        finally:
            env.close()

    def _start(
        self, env: gymnasium.Env, key: TrajectoryKey, prior: list[TurnRecord]
    ) -> tuple[dict, Conversation]:
        """Reset, and bring env and conversation to where the recorded turns left off."""
        seed = self.config.seed + key.index
        feedbacks = [r.feedback for r in prior]
        obs, info = env.reset(seed=seed, options={"history": feedbacks} if prior else None)
        conv = Conversation.from_prompt(info["prompt"], task_id=key.task_id, trajectory_id=key.id)
        for r in prior:
            conv = conv.add(r.action, r.observation or render_feedback(r.feedback), r.reasoning)
        if prior and int(obs["turn"]) != len(prior):
            # The env cannot restore its history: replay the recorded actions (builds are cached).
            for r in prior:
                obs, *_ = env.step(r.action)
        if prior:
            obs = {**obs, "text": conv.exchanges[-1].feedback}
        return obs, conv

    def _turns(
        self, env: gymnasium.Env, key: TrajectoryKey, obs: dict, conv: Conversation, start: int
    ) -> TrajectoryResult:
        turn = start
        while turn < self.config.turns:
            if self._stop.is_set():
                return self._stopped(key, start, turn, self.stop_reason or "stopped")
            t0 = time.perf_counter()
            try:
                action = self.policy.act(obs, conv)
            except (PolicyExhausted, ContextOverflowError) as exc:
                reason = "policy_exhausted" if isinstance(exc, PolicyExhausted) else "context_overflow"
                return self._ended(key, start, turn, reason, str(exc))
            except ServerUnavailableError as exc:
                self.request_stop(f"the inference server is unavailable: {exc}")
                return self._stopped(key, start, turn, str(exc), reason="server_unavailable")
            except Exception as exc:  # noqa: BLE001 - any policy failure stops this trajectory, resumably
                return self._stopped(key, start, turn, f"{type(exc).__name__}: {exc}", reason="policy_error")
            t1 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action.text)
            t2 = time.perf_counter()
            record = self._record(
                key, turn, action, obs, float(reward), terminated, truncated, info, t1 - t0, t2 - t1
            )
            self.store.append_turn(record)
            self.progress.turn(record)
            conv = conv.add(action.text, obs["text"], action.reasoning)
            turn += 1
            if terminated or truncated:
                self.progress.skip(self.config.turns - turn)
                reason = "terminated" if terminated else "truncated"
                self.store.append_event(Event(event="end", trajectory_id=key.id, reason=reason, turns=turn))
                return TrajectoryResult(
                    trajectory_id=key.id, turns_run=turn - start, turns_total=turn, ended=reason
                )
        return self._ended(key, start, turn, "truncated", "turn budget reached")

    def _ended(
        self, key: TrajectoryKey, start: int, turn: int, reason: str, message: str
    ) -> TrajectoryResult:
        self.store.append_event(
            Event(event="end", trajectory_id=key.id, reason=reason, message=message, turns=turn)
        )
        self.progress.skip(self.config.turns - turn)
        if reason not in ("terminated", "truncated"):
            self.progress.note(f"{key.id}: ended after {turn} turns ({reason}): {message}")
        return TrajectoryResult(trajectory_id=key.id, turns_run=turn - start, turns_total=turn, ended=reason)

    def _stopped(
        self, key: TrajectoryKey, start: int, turn: int, message: str, reason: str = "stopped"
    ) -> TrajectoryResult:
        self.store.append_event(
            Event(event="error", trajectory_id=key.id, reason=reason, message=message, turns=turn)
        )
        if reason != "stopped":
            self.progress.note(f"{key.id}: stopped after {turn} turns ({reason}): {message}")
        return TrajectoryResult(
            trajectory_id=key.id, turns_run=turn - start, turns_total=turn, error=f"{reason}: {message}"
        )

    def _record(
        self,
        key: TrajectoryKey,
        turn: int,
        action: Action,
        obs: dict,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict,
        policy_s: float,
        env_s: float,
    ) -> TurnRecord:
        fb: Feedback = info["feedback"]
        return TurnRecord(
            run_id=self.store.run_id,
            trajectory_id=key.id,
            task_id=key.task_id,
            variant=key.variant,
            policy=self.policy.name,
            turn=turn,
            messages=action.messages,
            action=action.text,
            reasoning=action.reasoning,
            status=fb.status.value,
            correct=fb.correct,
            target_executed=fb.target_executed.value,
            speedup=fb.speedup,
            reward=reward,
            reward_components={k: float(v) for k, v in info.get("reward_components", {}).items()},
            feedback_json=info.get("feedback_json") or fb.to_json(),
            prompt_tokens=action.prompt_tokens,
            completion_tokens=action.completion_tokens,
            wall_s=round(policy_s + env_s, 4),
            timestamp=now(),
            terminated=bool(terminated),
            truncated=bool(truncated),
            trajectory_index=key.index,
            observation=obs["text"],
            finish_reason=action.finish_reason,
            dropped_turns=action.dropped_turns,
            policy_wall_s=round(policy_s, 4),
            env_wall_s=round(env_s, 4),
        )
