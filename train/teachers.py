"""Teachers for SFT data: any ptxgym policy that repairs kernels or writes the reasoning behind them.

A teacher wraps a ``ptxgym.policies.Policy`` (an OpenAI-compatible server, a local transformers model,
the reference solutions, a replay ...) and only talks to it through ``policy.act(observation,
history)``: each request is a fresh ``Conversation`` (system + one user message), continued with the
rendered feedback when a repair attempt fails.

- ``RepairTeacher``: given a failed kernel and its feedback, asks for a minimal fix and runs it through
  the real pipeline (extract, policy, build, and the GPU evaluator when one is attached). A repair is
  kept only if the evaluator says so: ``quality="correct"`` (default) needs a qualifying turn (PASSED,
  target instruction proven where required, ``ptxgym.rewards.gate``); ``"compiled"`` accepts a kernel
  that builds, for CPU-only data collection. Up to ``max_attempts`` turns, each seeing the last feedback
  (PTXBench's Fixit repairs ran 5 fix turns; ptxbench.md 7.1).
- ``ReasoningTeacher``: writes a first-person rationale that leads to a known-good kernel (KernelGen) or
  from a failure to its repair (Fixit), without quoting the final kernel (PTXBench's reasoning synthesis;
  ptxbench.md 7.1). Rationales outside ``[min_chars, max_chars]``, without the requested tags (when
  required) or containing the final kernel verbatim are rejected and asked again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ptxgym.records.feedback import LEGACY_VERSIONS, Feedback
from ptxgym.records.feedback_text import render_feedback
from ptxgym.rewards import gate
from ptxgym.train.selection import extract_answer, normalise_kernel

if TYPE_CHECKING:
    from ptxgym.evaluation.trusted.base import Evaluator
    from ptxgym.policies.base import Action, Policy
    from ptxgym.policies.history import Conversation
    from ptxgym.records.tasks import Task

Quality = Literal["correct", "compiled"]


def shortfall(fb: Feedback, quality: Quality, require_target: bool, legacy: bool = False) -> str | None:
    """Why a turn is not good enough to teach from, or None: one rule for every SFT data builder.

    ``legacy``: accept a record of an older Feedback schema for the target credit; by default such a
    record cannot qualify where the target is required, since its rule predates the work share (a v1
    record credited a SIMT kernel with one token wgmma: the loophole issue 11 closed).
    """
    if quality == "compiled":
        return None if gate.compiled(fb) else f"not compiled ({fb.status.value})"
    if require_target and not legacy and fb.schema_version in LEGACY_VERSIONS:
        return f"an old record ({fb.schema_version}: its target credit predates the work share)"
    if not gate.qualifies(fb, require_target):
        return f"not correct ({fb.status.value}, target {fb.target_executed.value})"
    return None


REPAIR_REQUEST = """\
{task}
The kernel below was written for this task and failed evaluation.

Kernel:
{kernel}

Evaluation feedback:
{feedback}

Fix the kernel with the smallest change that makes it correct. Keep its design and its use of the
target instructions; do not rewrite it from scratch. Answer with the whole fixed kernel in the form it
was given: one ```cpp fenced block, or one named block per file."""

REASONING_SYSTEM = """\
You reconstruct the private reasoning of an expert GPU kernel engineer. Write in the first person, as
the engineer thinking before writing code: concrete, technical, with numbers (tile shapes, shared-memory
bytes, register counts, instruction shapes, synchronisation points, error messages), including the
alternatives considered and why they were dropped. Never mention that a solution was shown to you and
never copy the final kernel; short code fragments are fine."""

KERNELGEN_REASONING = """\
{task}
Here is the kernel the engineer ended up writing for this task:
{kernel}

Write the reasoning that leads from the task to this design, between <my_reasoning> and
</my_reasoning>."""

FIXIT_REASONING = """\
{task}
The engineer's first kernel failed:
{wrong}

Feedback from the evaluation:
{feedback}

The engineer then repaired it into:
{fixed}

Write the reasoning that goes from the failure to the repair (what the feedback means, where the bug is,
what to change and why), between <my_reasoning> and </my_reasoning>."""

_TAGGED = re.compile(r"<my_reasoning>(.*?)</my_reasoning>", re.DOTALL)


def _ask(policy: Policy, conv: Conversation) -> Action:
    """One ``act`` call: the observation text is the last feedback, or the first user message."""
    obs = {"text": conv.exchanges[-1].feedback if conv.exchanges else conv.user}
    return policy.act(obs, conv)


def _ask_or_none(policy: Policy, conv: Conversation) -> Action | None:
    """``_ask``, or None when the policy says this conversation is over (replay exhausted, context full).

    Other policy errors (server down, bad model) propagate: they are the user's to fix, not a bad row.
    """
    from ptxgym.policies.base import ContextOverflowError, PolicyExhausted

    try:
        return _ask(policy, conv)
    except (PolicyExhausted, ContextOverflowError):
        return None


def _conversation(system: str, user: str, task_id: str | None = None) -> Conversation:
    from ptxgym.policies.history import Conversation

    return Conversation(system=system, user=user, task_id=task_id)


@dataclass
class RepairResult:
    """A repair the evaluator accepted."""

    text: str
    answer: str
    """The accepted response's files as a clean answer (``selection.extract_answer``)."""
    feedback: Feedback
    attempts: int
    reasoning: str | None = None


@dataclass
class RepairTeacher:
    """Asks a policy to fix a failed kernel; keeps the fix only if the pipeline accepts it."""

    policy: Policy
    evaluator: Evaluator | None = None
    max_attempts: int = 3
    quality: Quality = "correct"
    require_target: bool = True
    stats: dict[str, int] = field(default_factory=dict)

    def accepts(self, fb: Feedback) -> bool:
        """Whether a repaired kernel's feedback is good enough to keep."""
        return shortfall(fb, self.quality, self.require_target) is None

    def repair(
        self, task: Task, system: str, task_user: str, failed_answer: str, feedback_text: str
    ) -> RepairResult | None:
        """Up to ``max_attempts`` fix attempts; the first accepted one, or None.

        ``failed_answer``: the failed kernel's files as an answer (``selection.extract_answer``).
        """
        from ptxgym.pipeline import Pipeline

        pipeline = Pipeline(task, self.evaluator)
        user = REPAIR_REQUEST.format(task=task_user.strip(), kernel=failed_answer, feedback=feedback_text)
        conv = _conversation(system, user, task.id)
        for attempt in range(1, self.max_attempts + 1):
            action = _ask_or_none(self.policy, conv)
            if action is None:
                self._count("teacher ended")
                return None
            fb = pipeline.run(action.text, turn=attempt - 1)
            self._count(fb.status.value)
            if self.accepts(fb):
                answer = extract_answer(action.text) or ""
                return RepairResult(action.text, answer, fb, attempt, action.reasoning)
            conv = conv.add(action.text, render_feedback(fb), action.reasoning)
        return None

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1


@dataclass
class ReasoningTeacher:
    """Asks a policy for the reasoning behind a kernel (KernelGen) or a repair (Fixit)."""

    policy: Policy
    min_chars: int = 200
    max_chars: int = 190_000
    attempts: int = 2
    require_tags: bool = True
    rejected: dict[str, int] = field(default_factory=dict)

    def kernelgen(self, system: str, task_user: str, kernel: str) -> str | None:
        """Reasoning from the task to ``kernel`` (an answer's text), or None if every attempt was rejected."""
        user = KERNELGEN_REASONING.format(task=task_user.strip(), kernel=kernel)
        return self._reason(user, kernel)

    def fixit(self, system: str, task_user: str, wrong: str, feedback_text: str, fixed: str) -> str | None:
        """Reasoning from a failed kernel and its feedback to the repaired one (answers' texts), or None."""
        task = task_user.strip()
        user = FIXIT_REASONING.format(task=task, wrong=wrong, feedback=feedback_text, fixed=fixed)
        return self._reason(user, fixed)

    def _reason(self, user: str, final_kernel: str) -> str | None:
        for _ in range(self.attempts):
            action = _ask_or_none(self.policy, _conversation(REASONING_SYSTEM, user))
            if action is None:
                self.rejected["teacher ended"] = self.rejected.get("teacher ended", 0) + 1
                return None
            text, why = self.check(action.text, final_kernel)
            if text is not None:
                return text
            self.rejected[why] = self.rejected.get(why, 0) + 1
        return None

    def check(self, response: str, final_kernel: str) -> tuple[str | None, str]:
        """(the accepted reasoning, "") or (None, the reason for rejecting it)."""
        m = _TAGGED.search(response)
        if m is None and self.require_tags:
            return None, "no <my_reasoning> tags"
        text = (m.group(1) if m else response).strip()
        if "<my_reasoning>" in text or "</my_reasoning>" in text:
            return None, "nested reasoning tags"
        if not self.min_chars <= len(text) <= self.max_chars:
            return None, f"length outside [{self.min_chars}, {self.max_chars}]"
        said = normalise_kernel(text)
        for code in _files(final_kernel):
            norm = normalise_kernel(code)
            if len(norm) > 200 and norm in said:
                return None, "quotes the final kernel"
        return text, ""


def _files(answer: str) -> list[str]:
    """The files of an answer's text (the text itself if it holds no code block)."""
    from ptxgym.cpu.extract import extract_sources

    files = extract_sources(answer).files
    return list(files.values()) if files else [answer]
