"""Playing the adversarial suite through the env (``gymnasium.make``) and judging each outcome.

Each case is one episode of one turn of the registered env of its task, with the evaluator given (shared
by all cases) and the reward given. A case is **paid** when its turn earns correctness, speed or target
credit under the default rules (``rewards.gate.qualifies`` or ``target_credit``): the stage credits any
compiled kernel gets (extracted, compiled, ran) are shown in the reward column but are not a payment for
the attack. A case **leaks** when its observation text shows a piece of the host's /etc/passwd (the
build attacks of issue 11 item 14 read that file; the assembler quotes the lines it cannot parse):
the "home:shell" end of any of its lines, e.g. ``/var/list:/usr/sbin/nologin``. The evaluator is
**healthy after** a case when its trusted process can still use the GPU (``evaluator_health``); with no
GPU evaluator there is nothing to check. Verdicts: ``ok`` (an accepted status, unpaid when hostile, no
leak), ``PAID``, ``LEAK``, ``UNEXPECTED`` (another status, unpaid), ``needs a GPU`` (a GPU case without
a GPU evaluator) and ``OPEN`` (a static case that got past the CPU stages: on a GPU it would run).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ptxgym.audit.cases import AuditCase
from ptxgym.evaluation.trusted.base import Evaluator, NullEvaluator
from ptxgym.records.feedback import Feedback, Status
from ptxgym.rewards import gate

PASSWD = Path("/etc/passwd")


def passwd_markers(path: Path = PASSWD) -> list[str]:
    """Lower-cased "home:shell" ends of the lines of a passwd file (the parts an assembler error quotes)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    tails = [":".join(line.split(":")[5:7]).lower() for line in lines if line.count(":") >= 6]
    return sorted({t for t in tails if len(t) >= 10})


def leaked(text: str, markers: list[str]) -> bool:
    """Whether ``text`` shows any of the ``markers`` (case-insensitively)."""
    low = text.lower()
    return any(m in low for m in markers)


@dataclass(frozen=True)
class AuditRow:
    """The outcome of one case."""

    case: str
    task: str
    issue: str
    hostile: bool
    expected: str
    got: str
    stage: str
    reward: float
    paid: bool
    leak: bool
    healthy: str
    wall_s: float
    verdict: str
    message: str

    @property
    def failed(self) -> bool:
        """A hostile case was paid or leaked a file."""
        return self.verdict in ("PAID", "LEAK")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def evaluator_health(evaluator: Evaluator) -> str:
    """``yes``, ``NO: why`` or ``n/a`` (no GPU state to check)."""
    if isinstance(evaluator, NullEvaluator):
        return "n/a"
    try:
        import torch

        torch.cuda.synchronize()
        torch.cuda.mem_get_info()
    except Exception as exc:  # noqa: BLE001 - any failure here is the answer
        return f"NO: {type(exc).__name__}: {exc}"[:200]
    return "yes"


def judge(case: AuditCase, fb: Feedback, text: str) -> tuple[bool, bool, str]:
    """(paid, leak, verdict) of a case's turn."""
    paid = gate.qualifies(fb) or gate.target_credit(fb)
    leak = leaked(text, passwd_markers())
    if case.hostile and leak:
        return paid, leak, "LEAK"
    if case.hostile and paid:
        return paid, leak, "PAID"
    if fb.status is Status.NOT_EVALUATED:
        return paid, leak, "OPEN" if case.static else "needs a GPU"
    return paid, leak, "ok" if fb.status in case.accepted else "UNEXPECTED"


def play_case(case: AuditCase, evaluator: Evaluator, reward: str | None = None) -> AuditRow:
    """One turn of the case's env; never raises for anything the case does."""
    import gymnasium

    from ptxgym.records.tasks import get_task

    env = gymnasium.make(get_task(case.task).env_id, evaluator=evaluator, reward=reward, max_turns=1)
    try:
        env.reset(seed=0)
        t0 = time.perf_counter()
        obs, value, _, _, info = env.step(case.action())
        wall = time.perf_counter() - t0
    finally:
        env.close()
    fb: Feedback = info["feedback"]
    paid, leak, verdict = judge(case, fb, obs["text"])
    return AuditRow(
        case=case.name,
        task=case.task,
        issue=case.issue,
        hostile=case.hostile,
        expected=case.expected,
        got=fb.status.value,
        stage=fb.stage.value,
        reward=round(float(value), 4),
        paid=paid,
        leak=leak,
        healthy=evaluator_health(evaluator),
        wall_s=round(wall, 2),
        verdict=verdict,
        message=fb.message[:300],
    )
