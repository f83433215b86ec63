"""Warm-up calls without a draw (``EvalSettings.warmup_redraw`` off): what they see and what they cannot hide.

The trusted ``Arena`` and ``Session`` run as in the evaluator on a CPU arena; the candidate is a Python
callable run in-process (``inprocess_worker.py``). Every call's input values are fingerprinted, so the
tests see which calls got new values: with the setting off, a warm-up call sees values an earlier call
saw and every timed call still sees new ones; a write into the inputs during a warm-up call is still
INPUT_MUTATED, and a replay of cached outputs still fails.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from inprocess_worker import is_warmup, run_in_session  # noqa: E402
from test_fresh_values import _gemm, gemm_task  # noqa: E402

from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402

WARMUP, ITERATIONS, TRIALS, CHECKS = 2, 12, 2, 3
PER_TRIAL = WARMUP + ITERATIONS


def settings(redraw: bool) -> EvalSettings:
    return EvalSettings(
        warmup=WARMUP,
        iterations=ITERATIONS,
        trials=TRIALS,
        correctness_sets=CHECKS,
        rotate_sets=3,
        warmup_redraw=redraw,
    )


LAYOUT = settings(False)
"""The calls' order (the setting changes what warm-up calls see, not where they fall)."""


class Fingerprints:
    """Computes every call and records its inputs' values (a hash of A's and B's bytes) in call order."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, A, B, C):
        self.seen.append(hash((A.view(torch.int16).numpy().tobytes(), B.view(torch.int16).numpy().tobytes())))
        C.copy_(_gemm(A, B))


class WritesDuringWarmup(Fingerprints):
    """Honest, but adds to A during the first warm-up call (known by counting: after the checks)."""

    def __call__(self, A, B, C):
        super().__call__(A, B, C)
        if len(self.seen) == CHECKS + 1:
            A.add_(1.0)


class ReplaysAfterWarmup:
    """Computes the warm-up calls, then replays each buffer's last warm-up output in the timed calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.store: dict[int, object] = {}

    def __call__(self, A, B, C):
        timed = self.calls >= CHECKS and not is_warmup(LAYOUT, self.calls)
        self.calls += 1
        if timed and C.data_ptr() in self.store:
            C.copy_(self.store[C.data_ptr()])
            return
        C.copy_(_gemm(A, B))
        self.store[C.data_ptr()] = C.clone()


def judge(candidate, tmp_path, redraw: bool):
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    return run_in_session(candidate, arena, settings(redraw), tmp_path, seed=7)[0], arena


def _timing_calls(seen: list[int]) -> list[tuple[bool, bool]]:
    """(a warm-up call, its values seen before) for each call of the timing, in order."""
    return [(is_warmup(LAYOUT, i), seen[i] in seen[:i]) for i in range(CHECKS, len(seen))]


@pytest.mark.parametrize("redraw", [True, False])
def test_only_warm_up_calls_go_without_new_values(tmp_path, redraw):
    candidate = Fingerprints()
    result, arena = judge(candidate, tmp_path, redraw)
    assert result.failure is None
    assert arena.mutated_inputs() == []
    assert [len(t) for t in result.trials] == [ITERATIONS] * TRIALS
    calls = _timing_calls(candidate.seen)
    assert len(calls) == TRIALS * PER_TRIAL
    assert not any(repeat for warm, repeat in calls if not warm)  # every timed call: values never seen
    warm_repeats = [repeat for warm, repeat in calls if warm]
    assert len(warm_repeats) == TRIALS * WARMUP
    assert all(warm_repeats) if not redraw else not any(warm_repeats)


def test_a_write_into_the_inputs_during_a_warm_up_call_is_input_mutated(tmp_path):
    result, _ = judge(WritesDuringWarmup(), tmp_path, redraw=False)
    assert result.failure is not None and result.failure.status is Status.INPUT_MUTATED


def test_outputs_cached_in_warm_up_calls_fail_the_timed_calls(tmp_path):
    result, _ = judge(ReplaysAfterWarmup(), tmp_path, redraw=False)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
