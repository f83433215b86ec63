"""Evaluation metrics over recorded turns (the PTXBench paper's definitions, section 4.1).

Every metric is per *turn*: each turn a policy took counts once in the denominator, including turns
with no extractable code, compile errors and turns that were never run on a GPU.

- turn correctness (within the first k turns) = #correct turns / #turns;
- target-instruction turn correctness = #(correct and target family executed = yes) / #turns;
- best speedup = max speedup over correct turns (optionally only target-instruction turns);
- Fast_p = (1/N) * sum_i 1[correct_i and s_i > p]; Fast_p^Inst also requires executed = yes.
  An ``unknown`` execution verdict (profiling failed) never counts as yes.

Curves are aggregated over prompt variants: computed per variant, then the mean with the min/max band.
A turn with status ``NOT_EVALUATED`` (no GPU evaluator) counts as not correct; summaries report how many
such turns there were, because the rates are then only lower bounds.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.records.turns import TurnRecord

DEFAULT_KS = (1, 4, 8)
NOT_EVALUATED = "NOT_EVALUATED"


def paper_ks(turns: int) -> list[int]:
    """The paper's columns (within 1, 4 and 8 turns), capped at a run's turn budget (which is added)."""
    return sorted({k for k in DEFAULT_KS if k < turns} | {min(turns, 8)} | ({turns} if turns > 8 else set()))


class Outcome(BaseModel):
    """The fields of a turn the metrics read."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    variant: str = ""
    trajectory_id: str = ""
    turn: int
    status: str
    correct: bool
    target_yes: bool
    speedup: float | None = None
    compiled: bool = Field(False, description="The kernel built (passed extract, screen and nvcc).")
    static_target: bool = Field(False, description="Its SASS holds a target-family opcode (cuobjdump).")
    stage: str = Field("", description="The pipeline stage the turn ended at.")


def outcome(record: TurnRecord | dict[str, Any]) -> Outcome:
    """An Outcome from a TurnRecord or a plain dict row (e.g. from ``datasets``)."""
    r = record.model_dump() if isinstance(record, TurnRecord) else record
    correct = bool(r.get("correct"))
    fb = _feedback(r.get("feedback_json"))
    status = str(r["status"])
    return Outcome(
        task_id=r["task_id"],
        variant=str(r.get("variant") or ""),
        trajectory_id=r.get("trajectory_id", ""),
        turn=int(r["turn"]),
        status=r["status"],
        correct=correct,
        target_yes=correct and r.get("target_executed") == "yes",
        speedup=r.get("speedup") if correct else None,
        compiled=status not in _NOT_BUILT and status != "INFRA_ERROR",
        static_target=bool((fb.get("sass") or {}).get("static_target")),
        stage=str(fb.get("stage") or ""),
    )


def _feedback(text: Any) -> dict[str, Any]:
    """The Feedback JSON of a turn as a dict ({} when missing or unreadable)."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _outcomes(
    records: Iterable[TurnRecord | dict[str, Any] | Outcome], max_turns: int | None
) -> list[Outcome]:
    out = [r if isinstance(r, Outcome) else outcome(r) for r in records]
    return [o for o in out if max_turns is None or o.turn < max_turns]


def _rate(records: Iterable, max_turns: int | None, hit: Callable[[Outcome], bool]) -> float | None:
    turns = _outcomes(records, max_turns)
    return sum(hit(o) for o in turns) / len(turns) if turns else None


def turn_correctness(records: Iterable, max_turns: int | None = None) -> float | None:
    """Correct turns / turns, over turns with index < max_turns (None: all). None when there are no turns."""
    return _rate(records, max_turns, lambda o: o.correct)


def target_turn_correctness(records: Iterable, max_turns: int | None = None) -> float | None:
    """(Correct and target family executed) turns / turns."""
    return _rate(records, max_turns, lambda o: o.target_yes)


def best_speedup(
    records: Iterable, max_turns: int | None = None, require_target: bool = False
) -> float | None:
    """Highest speedup of a correct turn (and target-executed, if required); None when there is none."""
    best = [
        o.speedup
        for o in _outcomes(records, max_turns)
        if o.correct and o.speedup is not None and (o.target_yes or not require_target)
    ]
    return max(best) if best else None


def fast_p(
    records: Iterable, p: float, require_target: bool = False, max_turns: int | None = None
) -> float | None:
    """Fraction of turns that are correct with speedup strictly above ``p`` (Fast_p, or Fast_p^Inst)."""
    return _rate(
        records,
        max_turns,
        lambda o: (
            o.correct and o.speedup is not None and o.speedup > p and (o.target_yes or not require_target)
        ),
    )


def fast_p_curve(
    records: Iterable, ps: Sequence[float], require_target: bool = False, max_turns: int | None = None
) -> list[float | None]:
    """Fast_p at each threshold in ``ps``."""
    turns = _outcomes(records, max_turns)
    return [fast_p(turns, p, require_target) for p in ps]


def default_thresholds(records: Iterable, step: float = 0.01) -> list[float]:
    """0 .. max(1.5, 1.1 x best speedup) in ``step`` increments."""
    best = best_speedup(records) or 0.0
    top = max(1.5, 1.1 * best)
    return [round(i * step, 6) for i in range(int(top / step) + 1)]


class Band(BaseModel):
    """A curve aggregated over prompt variants: mean, min and max at each threshold."""

    model_config = ConfigDict(frozen=True)

    ps: list[float]
    mean: list[float]
    lo: list[float]
    hi: list[float]
    per_variant: dict[str, list[float]] = Field(default_factory=dict)


def variant_band(
    records: Iterable, ps: Sequence[float], require_target: bool = False, max_turns: int | None = None
) -> Band:
    """Fast_p (or Fast_p^Inst) per variant, and their mean with the min/max band."""
    by_variant: dict[str, list[Outcome]] = defaultdict(list)
    for o in _outcomes(records, max_turns):
        by_variant[o.variant].append(o)
    curves = {
        v: [x or 0.0 for x in fast_p_curve(turns, ps, require_target)] for v, turns in by_variant.items()
    }
    cols = list(zip(*curves.values(), strict=True)) if curves else [() for _ in ps]
    return Band(
        ps=list(ps),
        mean=[sum(c) / len(c) if c else 0.0 for c in cols],
        lo=[min(c) if c else 0.0 for c in cols],
        hi=[max(c) if c else 0.0 for c in cols],
        per_variant=curves,
    )


class SummaryRow(BaseModel):
    """One line of the Table-1-style summary (one task, or all tasks)."""

    model_config = ConfigDict(frozen=True)

    task: str
    trajectories: int
    turns: int
    correct_at: dict[int, float | None] = Field(description="k -> turn correctness within k turns.")
    target_at: dict[int, float | None] = Field(description="k -> target-instruction turn correctness.")
    best_speedup: float | None = None
    best_speedup_target: float | None = None
    not_evaluated: int = Field(0, description="Turns that reached the GPU stage with no GPU evaluator.")
    statuses: dict[str, int] = Field(default_factory=dict)
    compiled: float | None = Field(None, description="Turns whose kernel built / turns (known on a CPU).")
    static_target: float | None = Field(
        None, description="Turns whose built SASS holds a target-family opcode / turns (known on a CPU)."
    )
    stages: dict[str, int] = Field(default_factory=dict, description="Pipeline stage reached -> turns.")


class Summary(BaseModel):
    """Per-task rows and an overall row."""

    model_config = ConfigDict(frozen=True)

    ks: list[int]
    rows: list[SummaryRow]
    overall: SummaryRow
    gpu_evaluated: bool = Field(description="Whether any turn was run on a GPU evaluator.")


def summary_row(name: str, outs: list[Outcome], ks: Sequence[int]) -> SummaryRow:
    """The summary of a set of turns."""
    statuses = Counter(o.status for o in outs)
    return SummaryRow(
        task=name,
        trajectories=len({o.trajectory_id for o in outs}),
        turns=len(outs),
        correct_at={k: turn_correctness(outs, k) for k in ks},
        target_at={k: target_turn_correctness(outs, k) for k in ks},
        best_speedup=best_speedup(outs),
        best_speedup_target=best_speedup(outs, require_target=True),
        not_evaluated=statuses.get(NOT_EVALUATED, 0),
        statuses=dict(sorted(statuses.items())),
        compiled=sum(o.compiled for o in outs) / len(outs) if outs else None,
        static_target=sum(o.compiled and o.static_target for o in outs) / len(outs) if outs else None,
        stages=dict(sorted(Counter(o.stage or "?" for o in outs).items())),
    )


def summarize(records: Iterable, ks: Sequence[int] = DEFAULT_KS) -> Summary:
    """Table-1-style summary: one row per task plus the overall row."""
    outs = _outcomes(records, None)
    by_task: dict[str, list[Outcome]] = defaultdict(list)
    for o in outs:
        by_task[o.task_id].append(o)
    rows = [summary_row(t, by_task[t], ks) for t in sorted(by_task)]
    gpu = any(_reached_gpu(o.status) for o in outs)
    return Summary(ks=list(ks), rows=rows, overall=summary_row("all", outs, ks), gpu_evaluated=gpu)


_CPU_ONLY = {"EXTRACT_ERROR", "STATIC_REJECT", "COMPILE_ERROR", "COMPILE_TIMEOUT", NOT_EVALUATED}
_NOT_BUILT = {"EXTRACT_ERROR", "STATIC_REJECT", "COMPILE_ERROR", "COMPILE_TIMEOUT"}


def _reached_gpu(status: str) -> bool:
    """Whether a status can only come from a GPU evaluator."""
    return status not in _CPU_ONLY and status != "INFRA_ERROR"
