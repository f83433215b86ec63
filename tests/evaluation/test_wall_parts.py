"""Where a call's wall goes (``session.wall_parts``): the trusted side's split and the runner's steps.

Diagnostic figures for the wall allowance's study (``bench/wall_allowance.py``): the trusted round trip
and the copy that ends the wall, measured by the trusted side, and the native runner's own steps
(``protocol.CALL_PHASES``), which are the candidate's process's word and so only ever shown: a reply
naming another step is refused, impossible values are dropped, and no verdict reads them.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ptxgym.evaluation.protocol import CALL_PHASES, CallResult
from ptxgym.evaluation.trusted.session import TimedCall, wall_parts


def _call(wall: float, request: float | None, **phases: float) -> TimedCall:
    # model_construct: the values as a forged reply could not even bring them, to test our own filter
    result = CallResult.model_construct(ev_stream_ms=0.5, ev_device_ms=0.5, host_ms=0.1, phases_ms=phases)
    return TimedCall(seq=1, wall_ms=wall, call=result, request_ms=request)


def test_the_trusted_split_and_the_runner_steps_are_medians() -> None:
    calls = [
        _call(1.0, 0.7, sync=0.01, flush=0.02, kernel=0.5),
        _call(1.2, 0.8, sync=0.03, flush=0.02, kernel=0.6),
        _call(1.1, 0.9, sync=0.02, flush=0.04, kernel=0.7),
    ]
    parts = wall_parts(calls)
    assert parts == {
        "request": 0.8,
        "copy": 0.3,
        "runner_sync": 0.02,
        "runner_flush": 0.02,
        "runner_kernel": 0.6,
    }


def test_only_the_runner_s_known_steps_with_possible_values_are_kept() -> None:
    calls = [_call(1.0, 0.5, sync=float("nan"), launch=-1.0, chosen_by_the_candidate=9.0, after=0.1)]
    assert wall_parts(calls) == {"request": 0.5, "copy": 0.5, "runner_after": 0.1}
    assert wall_parts([_call(1.0, None)]) == {}  # a call the trusted side did not split: nothing
    huge = [_call(1.0, 0.5, sync=1.7e308), _call(1.0, 0.5, sync=1.7e308)]
    assert wall_parts(huge)["runner_sync"] == 1.7e308  # one of the values, never an overflowed mean


def test_the_protocol_takes_the_runner_s_steps_and_refuses_impossible_ones() -> None:
    got = CallResult.model_validate_json(
        '{"ev_stream_ms": 1, "ev_device_ms": 1, "host_ms": 1, "phases_ms": {"sync": 0.01, "kernel": 0.9}}'
    )
    assert got.phases_ms == {"sync": 0.01, "kernel": 0.9}
    plain = '{"ev_stream_ms": 1, "ev_device_ms": 1, "host_ms": 1}'
    assert CallResult.model_validate_json(plain).phases_ms == {}  # the Python worker reports none
    with pytest.raises(ValidationError):
        CallResult.model_validate_json(
            '{"ev_stream_ms": 1, "ev_device_ms": 1, "host_ms": 1, "phases_ms": {"sync": -0.5}}'
        )
    many = ", ".join(f'"k{i}": 0.1' for i in range(1000))  # a reply may not grow our memory with keys
    flood = '{"ev_stream_ms": 1, "ev_device_ms": 1, "host_ms": 1, "phases_ms": {' + many + "}}"
    with pytest.raises(ValidationError, match="outside CALL_PHASES"):
        CallResult.model_validate_json(flood)
    assert set(CALL_PHASES) == {"sync", "flush", "flushed", "launch", "kernel", "after"}


def test_the_runner_spin_setting_reaches_every_trial_begin(tmp_path) -> None:
    """``EvalSettings.runner_spin_us`` goes with each ``TrialBegin`` (a trial and its resumptions)."""
    pytest.importorskip("torch")
    from inprocess_worker import InProcessWorker
    from test_counted_position import SETTINGS, Honest, _loaded, tiny_task

    from ptxgym.evaluation.protocol import TrialBegin
    from ptxgym.evaluation.trusted.arena import Arena
    from ptxgym.evaluation.trusted.session import SessionResult
    from ptxgym.evaluation.trusted.timing import CUPTI

    class Seen(InProcessWorker):
        begins: list[int] = []

        def request(self, cmd, timeout_s, pickler=None, fds=()):
            if isinstance(cmd, TrialBegin):
                self.begins.append(cmd.spin_us)
            return super().request(cmd, timeout_s, pickler, fds)

    arena = Arena(tiny_task("Gemm-sm90a", M=16, N=16, K=16), [1, 2, 3], "cpu", tmp_path / "arena")
    fake = Seen(Honest(), tmp_path)
    fake.spans = True  # the CUPTI backend: the counted calls close the activity trial and begin it again
    settings = SETTINGS.model_copy(update={"runner_spin_us": 777})
    session = _loaded(arena, fake, 3, settings, backend=CUPTI)
    session.count_outside = "counted outside the trials, as the local evaluator does"
    result = SessionResult()
    session.correctness(result)
    session.timing(result, crosscheck=False, count=True, hw_count=True)
    assert len(fake.begins) > SETTINGS.trials and set(fake.begins) == {777}, fake.begins
    with pytest.raises(ValidationError):
        TrialBegin(spin_us=50_001)
