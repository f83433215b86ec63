"""KernelEnv: one GPU-kernel optimisation task as a multi-turn Gymnasium environment."""

from __future__ import annotations

import secrets
import string
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from ptxgym.evaluation.trusted.base import EvalSettings, Evaluator
from ptxgym.knowledge_packs.prompting import DEFAULT_VARIANT, TaskPrompt, build_task_prompt, pack_variant
from ptxgym.pipeline import Submission, make_pipeline
from ptxgym.records.feedback import Feedback, Verdict
from ptxgym.records.feedback_text import render_feedback
from ptxgym.records.schema import Solution
from ptxgym.records.tasks import Task, get_task
from ptxgym.rewards import RewardFn, gate, resolve_reward

#: Order of the ``target_executed`` observation index.
VERDICTS: tuple[Verdict, ...] = (Verdict.NOT_CHECKED, Verdict.UNKNOWN, Verdict.NO, Verdict.YES)
CHARSET = string.printable
MAX_ACTION_CHARS = 200_000
MAX_OBS_CHARS = 1_000_000


class KernelEnv(gymnasium.Env):
    """Write a fast, correct GPU kernel for one task, over several turns of feedback.

    **Task.** A workload (e.g. BF16 GEMM 8192x7168x5120), a target architecture (``sm_90a`` Hopper or
    ``sm_100a`` Blackwell) whose instruction family (wgmma/TMA or tcgen05) the kernel must execute,
    and a frontier-library baseline (cuBLAS, cuDNN) it is timed against.

    **Action.** ``Text``: the model's whole response. The last fenced ```cpp/```cuda block that looks
    like a kernel is taken; it must export a TVM-FFI ``run`` (inputs, then outputs; nothing returned).
    Several files: one fenced block per file, named after the language tag, the entry in ``kernel.cu``
    (``ptxgym.cpu.extract``). Anything else in the action (no code, junk, megabytes) is a turn with a
    precise status, never an exception. ``step`` also takes a FlashInfer-Trace ``Solution`` record
    (outside the Text space, for tools): it is played unchanged, its ``file::function`` entry honoured;
    one written for another definition ends the turn as ``TASK_MISMATCH``.

    **Workloads.** A task holds a family of workloads (e.g. the M values of a GEMM shape). ``reset``
    draws one with the episode's RNG (``reset(seed=...)`` makes the draw reproducible) or takes
    ``options={"workload": W}`` (a uuid, an index, axis values such as ``{"M": 512}``, or
    ``"default"``); the prompt and ``info["workload"]`` name it. Each episode also draws a secret input
    seed (``secrets``, never from the reset seed, never in an observation or ``info``) that the evaluator
    mixes into its inputs, so a policy cannot specialise to fixed input values.

    **Observation.** ``Dict``: ``text`` (the task prompt after ``reset``, the rendered feedback after
    ``step``), ``status`` and ``stage`` (strings), ``correct`` (0/1), ``speedup`` (baseline / candidate
    latency, 0 unless PASSED), ``target_executed`` (index into ``VERDICTS``), ``turn``.

    **Reward.** ``reward(feedback, history)``: a registered name (default ``staged``) or a callable;
    components are in ``info["reward_components"]``.

    **Episode end.** Terminated when a turn that qualifies (``rewards.gate.qualifies``: PASSED, the target
    proven where the reward requires it) reaches ``target_speedup``; truncated after ``max_turns`` turns;
    a step after either raises ``ResetNeeded``. A turn that ends the episode early is also paid, by
    default (``pay_cut_off_turns``), what
    resubmitting it would earn in each turn it cuts off (the reward function's own answer for a repeat,
    ``reward(feedback, history + [feedback] * k)``, discounted by ``cut_off_gamma`` ** k as a trainer
    discounts later turns: pass its gamma; 1.0 by default), so that reaching the target never pays
    less than staying just below it and resubmitting (with a per-turn reward, a 1.19x kernel
    resubmitted for 8 turns out-earned a 2.0x one that ended the episode: reviewer's find).
    ``info["reward_components"]`` then holds ``cut_off_turns`` and ``cut_off_reward``.

    **Info.** ``feedback`` (the Feedback record), ``feedback_json``, ``reward_components``, ``task_id``,
    ``turn``; after ``reset`` also ``prompt`` (TaskPrompt).

    **Arguments.** ``task`` (task id), ``evaluator`` (None/"auto", "none", "local", "ray" or an
    Evaluator; ``"ray"`` or a ``RayEvaluator`` evaluates on Ray actors, one per GPU, and runs each step's
    builds as a Ray task),
    ``settings`` (EvalSettings for a local evaluator), ``reward``, ``max_turns`` (8), ``target_speedup``
    (1.2), ``variant`` (knowledge-pack prompt variant; default ``DEFAULT_VARIANT`` = ``"full"``, shared
    with ``ptxgym eval``; ``None`` or ``"none"``: rules and ABI only), ``dataset`` (a FlashInfer-Trace
    folder whose task ``task`` names: ``gymnasium.make("ptxgym/Trace-v0", dataset=DIR, task=ID)``).

    **Version history.** The version suffix of an id fixes the reward and observation semantics: a change
    to what a reward pays for, to an observation field's meaning or to the episode-end rule gets a new
    suffix; fixes that close a loophole keep it (an exploit is not a semantics).

    * ``-v0`` (ptxgym 0.1.0): as described above.
    * ptxgym 0.1.0 layout release: the ``stage`` of a turn stopped by the source screen reads
      ``"screen"`` (it read ``"policy"``; old records still load). The default prompt variant is
      ``"full"``, as for ``ptxgym eval`` (it was no pack); pass ``variant=None`` for the old prompt.
    * Loopholes closed under ``-v0`` (issue 11): the target credit needs the target family to do the
      task's work (executed MMA FLOPs >= half the task's FLOPs, ``MIN_MMA_SHARE``), so a kernel whose
      tensor-core work is a token (one wgmma per call) or absent (TMA loads feeding SIMT math) no longer
      earns it; ``FOREIGN_KERNEL`` and ``PROOF_FAILED`` turns pay nothing; timed calls see fresh input
      values; a step has one wall budget. Feedback records are ``ptxgym.feedback.v2``; v1 records keep
      their rule when read. The timed calls also carry an in-band kernel census (CUPTI, in the worker):
      a kernel outside the built module, or a second module image defining one of its kernel names (code
      loaded from memory), is ``FOREIGN_KERNEL`` at the time stage.
    * Memory safety (issue 11, requirement 3): every input and output buffer lies between guard regions
      holding a secret byte pattern, checked after every call; a write outside the buffers is
      ``MEMORY_ERROR`` (stage ``check`` or ``time``) whose message names the buffer and the offset, and
      pays no correctness or speed. With ``EvalSettings.guard_pages`` an unmapped page follows every
      buffer, so a read or write past one faults in the worker (``RUNTIME_ERROR``) even when the kernel
      behaves under a sanitizer; ``details["guard_pages"]`` of the verdict says which protection ran.
    * Loophole closed under ``-v0``: a turn that ends the episode at ``target_speedup`` is paid for the
      turns it cuts off (``pay_cut_off_turns``; ``False`` restores the old rule).
    * Loopholes closed under ``-v0`` (review of 2026-12-05): a fast PASSED turn without the proven target
      no longer ends the episode (it capped a policy's losses at one penalty and cut its returns), and a
      step after the episode terminated raises ``ResetNeeded`` (it was paid again for the turns the end
      had already paid).
    * tasks as data: ``reset`` draws a workload of the task's family (the ten original tasks have one,
      so nothing changes for them); ``ptxgym/Trace-v0`` plays dataset folders; several-file actions.
      Feedback names the workload a turn played (``workload``: uuid and axes; absent in older records).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        task: str | Task | None = None,
        evaluator: str | Evaluator | None = None,
        settings: EvalSettings | None = None,
        reward: str | RewardFn | None = None,
        max_turns: int = 8,
        target_speedup: float = 1.2,
        variant: str | None = DEFAULT_VARIANT,
        render_mode: str | None = None,
        dataset: str | Path | None = None,
        pay_cut_off_turns: bool = True,
        cut_off_gamma: float = 1.0,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if task is None:
            raise ValueError(
                "no task given: gymnasium.make('ptxgym/Trace-v0', dataset=DIR, task='<definition>@<arch>') "
                "(ptxgym tasks --dataset DIR lists the ids)"
            )
        self.base_task = task if isinstance(task, Task) else get_task(task, dataset=dataset)
        self.task = self.base_task
        self.max_turns = max_turns
        self.target_speedup = target_speedup
        self.pay_cut_off_turns = pay_cut_off_turns
        if not 0.0 <= cut_off_gamma <= 1.0:
            raise ValueError(f"cut_off_gamma must lie in [0, 1], got {cut_off_gamma}")
        self.cut_off_gamma = cut_off_gamma
        self.variant = pack_variant(variant)
        self.render_mode = render_mode
        self.reward_fn = resolve_reward(reward)
        self._owns_evaluator = not isinstance(evaluator, Evaluator)
        self.evaluator = _make_evaluator(evaluator, settings)
        self.pipeline = make_pipeline(self.task, self.evaluator)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=0, charset=CHARSET)
        self.observation_space = spaces.Dict(
            {
                "text": spaces.Text(max_length=MAX_OBS_CHARS, min_length=0, charset=CHARSET),
                "status": spaces.Text(max_length=32, min_length=0, charset=CHARSET),
                "stage": spaces.Text(max_length=16, min_length=0, charset=CHARSET),
                "correct": spaces.Discrete(2),
                "speedup": spaces.Box(low=0.0, high=np.inf, shape=(1,), dtype=np.float32),
                "target_executed": spaces.Discrete(len(VERDICTS)),
                "turn": spaces.Discrete(max_turns + 1),
            }
        )
        self._history: list[Feedback] = []
        self._turn = 0
        self._episode_id = ""
        self._prompt: TaskPrompt | None = None
        self._last_text = ""
        self._input_seed: int | None = None
        self._terminated = False

    # ---------------------------------------------------------------------------------- Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode; the observation text is the task prompt.

        ``options={"workload": W}`` plays workload W of the task's family (uuid, index, axis values or
        ``"default"``); otherwise one is drawn with the episode's RNG. ``options={"history": [Feedback,
        ...]}`` resumes an episode recorded earlier: the turn counter and the history (which rewards and
        memcheck scheduling read) continue from it, and the observation is that of the last recorded turn.
        """
        super().reset(seed=seed)
        self._select_workload((options or {}).get("workload"))
        self._input_seed = secrets.randbits(31)
        prior = list((options or {}).get("history") or [])
        if len(prior) >= self.max_turns:
            raise ValueError(f"cannot resume: {len(prior)} recorded turns >= max_turns={self.max_turns}")
        if not all(isinstance(f, Feedback) for f in prior):
            raise TypeError("options['history'] must be a list of ptxgym.records.feedback.Feedback records")
        if prior and self._ends(prior[-1]):
            raise ValueError("cannot resume: the recorded episode ended (its last turn reached the target)")
        self._history = prior
        self._turn = len(prior)
        self._terminated = False
        self._episode_id = uuid.uuid4().hex[:12]
        self._prompt = build_task_prompt(self.task, self.variant)
        self._last_text = self._prompt.text
        if prior:
            last = prior[-1]
            self._last_text = render_feedback(last)
            obs = self._obs(
                self._last_text,
                status=last.status.value,
                stage=last.stage.value,
                correct=last.correct,
                speedup=last.speedup or 0.0,
                verdict=last.target_executed,
            )
        else:
            obs = self._obs(
                self._prompt.text,
                status="",
                stage="",
                correct=False,
                speedup=0.0,
                verdict=Verdict.NOT_CHECKED,
            )
        return obs, {
            "prompt": self._prompt,
            "task_id": self.task.id,
            "turn": self._turn,
            "episode_id": self._episode_id,
            "workload": {"uuid": self.task.workload.uuid, "axes": dict(self.task.workload.axes)},
        }

    def step(self, action: str | Solution):
        """Evaluate one response (or a FlashInfer-Trace Solution); never raises for anything in it."""
        return self.end_step(self.pipeline.run_submission(self.begin_step(action)))

    def begin_step(self, action: str | Solution) -> Submission:
        """The first half of ``step``: this turn's submission for the pipeline (``ptxgym.envs.vector``).

        ``step(a)`` is ``end_step(pipeline.run_submission(begin_step(a)))``; batch steppers run many envs'
        submissions through ``ptxgym.pipeline.run_batch`` in between. Raises ``ResetNeeded`` as ``step``.
        """
        if self._prompt is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        if self._terminated:  # a step after it would be paid again for the turns its end already paid
            raise gymnasium.error.ResetNeeded("the episode is over (terminated); call reset()")
        if self._turn >= self.max_turns:
            raise gymnasium.error.ResetNeeded("the episode is over (truncated); call reset()")
        first_correct = not any(f.correct for f in self._history)
        return Submission(action, self._turn, self._episode_id, first_correct, self._input_seed)

    def end_step(self, fb: Feedback):
        """The second half of ``step``: record the turn's Feedback and return the step tuple."""
        result = self.reward_fn(fb, tuple(self._history))
        self._history.append(fb)
        self._turn += 1
        speedup = fb.speedup or 0.0
        terminated = self._ends(fb)
        self._terminated = terminated
        truncated = not terminated and self._turn >= self.max_turns
        total, components = float(result.total), dict(result.components)
        cut_off = self.max_turns - self._turn if terminated and self.pay_cut_off_turns else 0
        if cut_off:  # what resubmitting this turn would earn in each turn the episode no longer has
            repeats = [
                self.cut_off_gamma ** (k + 1) * self.reward_fn(fb, (*self._history, *(fb,) * k)).total
                for k in range(cut_off)
            ]
            components.update(cut_off_turns=float(cut_off), cut_off_reward=float(sum(repeats)))
            total += float(sum(repeats))
        self._last_text = render_feedback(fb)
        obs = self._obs(
            self._last_text,
            status=fb.status.value,
            stage=fb.stage.value,
            correct=fb.correct,
            speedup=speedup,
            verdict=fb.target_executed,
        )
        info = {
            "feedback": fb,
            "feedback_json": fb.to_json(),
            "reward_components": components,
            "task_id": self.task.id,
            "turn": self._turn,
            "episode_id": self._episode_id,
        }
        return obs, total, terminated, truncated, info

    def _ends(self, fb: Feedback) -> bool:
        """Whether a turn ends the episode: it qualifies and reaches ``target_speedup``.

        Qualifies: the target proven where the reward requires it. A fast turn without the proven target
        would otherwise cap a policy's losses (the milestone rewards' penalty paid once) and stop its
        returns there.
        """
        require = getattr(self.reward_fn, "require_target", True)
        speedup = gate.speedup_of(fb, require)  # None unless it qualifies with a finite speedup
        return speedup is not None and speedup >= self.target_speedup

    def render(self) -> str | None:
        """``ansi``: the last observation text."""
        return self._last_text if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Release the evaluator's processes and GPU memory, if this env created the evaluator.

        An evaluator passed in by the caller is shared (vector envs, trainers) and stays open.
        """
        if self._owns_evaluator:
            self.evaluator.close()

    # -------------------------------------------------------------------------------------- helpers

    def _select_workload(self, choice: Any) -> None:
        """Point the env (task, pipeline) at the workload of this episode."""
        base = self.base_task
        family = base.family_workloads
        if choice is None:
            choice = int(self.np_random.integers(len(family))) if len(family) > 1 else base.workload.uuid
        elif choice == "default":
            choice = base.workload.uuid
        task = base.with_workload(choice)
        if task is not self.task:
            self.task = task
            self.pipeline = make_pipeline(task, self.evaluator)

    @property
    def history(self) -> Sequence[Feedback]:
        """Feedback of every turn so far in this episode."""
        return tuple(self._history)

    def _obs(
        self, text: str, *, status: str, stage: str, correct: bool, speedup: float, verdict: Verdict
    ) -> dict[str, Any]:
        return {
            "text": _printable(text, MAX_OBS_CHARS),
            "status": status,
            "stage": stage,
            "correct": int(correct),
            "speedup": np.array([max(speedup, 0.0)], dtype=np.float32),
            "target_executed": VERDICTS.index(verdict),
            "turn": self._turn,
        }


def _printable(text: str, limit: int) -> str:
    """Keep the observation inside its space: printable ASCII, bounded length."""
    clean = "".join(ch if ch in CHARSET else "?" for ch in text)
    return clean[:limit]


def _make_evaluator(evaluator: str | Evaluator | None, settings: EvalSettings | None) -> Evaluator:
    if isinstance(evaluator, Evaluator):
        return evaluator
    from ptxgym.evaluation.choose import select_evaluator

    return select_evaluator(evaluator, settings=settings)
