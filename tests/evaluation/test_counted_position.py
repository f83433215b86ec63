"""The counted call (the in-band target proof) at a secret slot among the timed calls (issue 11).

It used to be one more call after the last trial, always the step's last call: a kernel counting its
calls could do the target's work there alone. The trusted ``Session`` now draws its slot from the
session's secret RNG. Driven against the in-process worker (``inprocess_worker.py``) on CPU buffers, as
``test_fresh_values.py`` does: the candidate is a Python callable; the counted call's rows are made up
by the worker stand-in (the GPU tests count for real).
"""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import COUNTED_ROW, IN_BAND_KERNEL, InProcessWorker  # noqa: E402

from ptxgym.evaluation.protocol import Load  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult, counted_slot  # noqa: E402
from ptxgym.evaluation.trusted.timing import CUPTI, EVENTS  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402

SETTINGS = EvalSettings(warmup=1, iterations=3, trials=2, correctness_sets=2, rotate_sets=3)
SLOTS = SETTINGS.trials * (SETTINGS.iterations + 1)
VERIFIED = SETTINGS.trials * SETTINGS.verified_per_trial


def _gemm(A, B):
    return (A.float() @ B.float().T).to(torch.bfloat16)


class Honest:
    """Computes every call and remembers the call numbers (as a host-side counter would)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, A, B, C):
        self.n += 1
        C.copy_(_gemm(A, B))


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    task = tiny_task("Gemm-sm90a", M=16, N=16, K=16)
    return Arena(task, [1, 2, 3], "cpu", tmp_path_factory.mktemp("arena"))


def _loaded(arena, fake, seed, settings=SETTINGS, backend=EVENTS) -> Session:
    """A session on the restored arena with the candidate loaded into ``fake``."""
    arena.restore()
    session = Session(fake, arena, settings, backend, seed, 10.0)
    session.attach(1, cupti=backend == CUPTI)
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    return session


def _step(arena, tmp_path, seed, candidate=None, backend=EVENTS, settings=SETTINGS, **worker):
    """One candidate's check and timing with the counted call, as the evaluator runs them."""
    fake = InProcessWorker(candidate or Honest(), tmp_path)
    for name, value in worker.items():
        setattr(fake, name, value)
    session = _loaded(arena, fake, seed, settings, backend)
    result = SessionResult()
    session.correctness(result)
    assert result.failure is None, result.failure
    session.timing(result, crosscheck=False, count=True)
    return result, fake, session


def test_the_slot_is_uniform_over_every_trials_timed_region():
    rng = random.Random(0)
    n = 24_000
    seen = Counter((c.trial, c.slot) for c in (counted_slot(rng, 3, 7) for _ in range(n)))
    assert set(seen) == {(t, k) for t in range(3) for k in range(8)}  # last slot of each trial included
    expected = n / 24
    chi2 = sum((x - expected) ** 2 / expected for x in seen.values())
    assert chi2 < 49.7  # 23 degrees of freedom, p = 0.001


def test_the_counted_call_is_not_predictable_from_the_call_index(arena, tmp_path):
    """Over steps (seeds), the candidate's call number of the counted call varies over every slot.

    The step's calls stay what they were (correctness + trials x (warm-up + timed) + 1), so the last
    call is as likely to be counted as any other slot: 1 in trials x (iterations + 1).
    """
    total = SETTINGS.calls_per_step + 1
    numbers = []
    for seed in range(24):
        candidate = Honest()
        result, fake, _ = _step(arena, tmp_path, seed, candidate)
        assert result.failure is None and candidate.n == fake.calls == total
        ((number, _),) = fake.counted_calls
        assert result.counted is not None and result.counted.call == number
        numbers.append(number)
    before = SETTINGS.correctness_sets + SETTINGS.warmup
    trial = SETTINGS.warmup + SETTINGS.iterations  # calls of a trial without the counted call
    possible = {before + k + 1 for k in range(4)} | {before + trial + k + 1 for k in range(4)}
    assert set(numbers) <= possible
    assert len(set(numbers)) >= 6  # of 8 slots, over 24 steps
    assert numbers.count(total) < 24 // 3  # the last call is no longer always (or mostly) the counted one


def test_samples_and_verified_calls_are_what_they_were(arena, tmp_path):
    result, fake, _ = _step(arena, tmp_path, seed=3, count_delay_s=0.05)
    assert [len(t) for t in result.trials] == [SETTINGS.iterations] * SETTINGS.trials
    assert len(result.walls) == SETTINGS.trials * SETTINGS.iterations
    assert all(x < 1.1 for t in result.trials for x in t)  # the fake reports 1 ms (1.02 device) a call
    assert max(result.walls) < 50.0  # the counted call's 50 ms (patching) is no sample
    assert result.calls_checked == SETTINGS.correctness_sets + VERIFIED + 1  # the counted call is verified
    assert result.sass_rows == [COUNTED_ROW] and result.count_error == ""
    assert result.trusted_s["count"] >= 0.05
    assert len([c for c in fake.transcript if c.startswith("count:")]) == 1


def test_the_counted_call_takes_its_slots_set_and_fresh_values(arena, tmp_path):
    """Its set is the rotation's at its slot, and its values are a new draw (none seen before)."""
    seen: list[tuple[bool, torch.Tensor]] = []
    fake = InProcessWorker(None, tmp_path)

    def peek(A, B, C):
        C.copy_(_gemm(A, B))
        seen.append((fake.counting, A.abs().clone()))

    fake.candidate = peek
    session = _loaded(arena, fake, 11)
    result = SessionResult()
    session.timing(result, crosscheck=False, count=True)
    assert result.failure is None
    slot = result.counted
    position = SETTINGS.warmup + slot.slot
    calls = [c for c in fake.transcript if c.startswith(("call:", "count:"))]
    at = slot.trial * (SETTINGS.warmup + SETTINGS.iterations) + position
    assert calls[at] == f"count:{position % 3}:False"
    (counted,) = [a for flag, a in seen if flag]
    assert sum(torch.equal(counted, a) for _, a in seen) == 1  # not a sign flip of any other call's A


class WrongWhenCounted(Honest):
    """Writes zeros on the counted call only (as a kernel that noticed the patching could)."""

    def __init__(self, fake_ref: list) -> None:
        super().__init__()
        self.fake_ref = fake_ref

    def __call__(self, A, B, C):
        super().__call__(A, B, C)
        if self.fake_ref[0].counting:
            C.zero_()


def test_a_wrong_result_on_the_counted_call_is_a_wrong_timed_call(arena, tmp_path):
    ref: list = []
    candidate = WrongWhenCounted(ref)
    fake = InProcessWorker(candidate, tmp_path)
    ref.append(fake)
    session = _loaded(arena, fake, 5)
    result = SessionResult()
    session.timing(result, crosscheck=False, count=True)
    assert result.failure is not None and result.failure.stage is Stage.TIME
    assert result.failure.status in (Status.INCORRECT_NUMERICAL, Status.UNWRITTEN)
    assert "a timed call (fresh values, same buffers)" in result.failure.message  # the same words
    assert result.sass_rows is None  # the rows of a failed call prove nothing


def test_inside_the_activity_trial_the_census_sees_it_and_no_span_is_taken(arena, tmp_path):
    result, fake, session = _step(arena, tmp_path, seed=8, backend=CUPTI, spans=True)
    assert result.failure is None and result.missing_spans == 0
    assert fake.counted_calls[0][1] is True and result.counted.in_trial and result.counted.outside == ""
    assert [len(t) for t in result.trials] == [SETTINGS.iterations] * SETTINGS.trials
    # one census window per timed call and one for the counted call
    assert result.kernels == {IN_BAND_KERNEL: SETTINGS.trials * SETTINGS.iterations + 1}
    assert result.census_calls == SETTINGS.trials * SETTINGS.iterations  # the timed calls alone
    assert fake.transcript.count("trial_begin") == fake.transcript.count("trial_end") == SETTINGS.trials
    assert session.count_outside == ""


def test_a_counted_window_without_activity_joins_the_census_from_its_rows(arena, tmp_path):
    """Should CUPTI's tracing not see the patched call's kernels, the census takes its rows' functions."""
    result, fake, _ = _step(arena, tmp_path, seed=8, backend=CUPTI, spans=True, silent_count_window=True)
    assert result.failure is None and result.counted.in_trial
    assert result.kernels == {IN_BAND_KERNEL: SETTINGS.trials * SETTINGS.iterations + 1}


def test_a_count_error_inside_the_trial_splits_it_and_counts_outside(arena, tmp_path):
    error = "cuptiSassMetricsEnable failed: CUPTI_ERROR_NOT_COMPATIBLE (26)"
    result, fake, session = _step(
        arena, tmp_path, seed=8, backend=CUPTI, spans=True, count_error_in_trial=error
    )
    assert result.failure is None and result.missing_spans == 0
    assert [inside for _, inside in fake.counted_calls] == [True, False]  # tried inside, then outside
    assert result.sass_rows == [COUNTED_ROW] and result.count_error == ""
    assert not result.counted.in_trial and error in result.counted.outside
    assert session.count_outside and error in session.count_outside  # learnt for later steps
    i = next(n for n, c in enumerate(fake.transcript) if c.startswith("count:"))
    assert fake.transcript[i].endswith(":True") and fake.transcript[i + 1] == "trial_end"
    assert fake.transcript[i + 2].startswith("count:") and fake.transcript[i + 2].endswith(":False")
    assert fake.transcript[i + 3] == "trial_begin"
    assert [len(t) for t in result.trials] == [SETTINGS.iterations] * SETTINGS.trials
    assert result.calls_checked == SETTINGS.correctness_sets + VERIFIED + 2  # both counted calls verified
    # the census: every timed call's window, the failed count's window, and the outside call's rows
    assert result.kernels == {IN_BAND_KERNEL: SETTINGS.trials * SETTINGS.iterations + 1 + 1}
    assert result.census_calls == SETTINGS.trials * SETTINGS.iterations  # a split loses no timed call
    # a later step of the same evaluator counts outside at once: one counted call
    later = InProcessWorker(Honest(), tmp_path)
    later.spans, later.count_error_in_trial = True, error
    arena.restore()
    again = Session(later, arena, SETTINGS, CUPTI, 9, 10.0)
    again.count_outside = session.count_outside
    again.attach(1, cupti=True)
    again.load(Load(kind="so", path="candidate.so", entry="run"))
    second = SessionResult()
    again.timing(second, crosscheck=False, count=True)
    assert [inside for _, inside in later.counted_calls] == [False]
    assert second.missing_spans == 0 and second.sass_rows == [COUNTED_ROW]


def test_a_cut_short_step_still_counts_among_its_verified_calls(arena, tmp_path):
    """The slow cut-off replaces later trials by their verified calls: the counted call goes among them."""
    settings = SETTINGS.model_copy(update={"trials": 3})
    for seed in range(40):
        fake = InProcessWorker(Honest(), tmp_path)
        session = _loaded(arena, fake, seed, settings)
        result = SessionResult()
        session.timing(result, crosscheck=False, count=True, baseline_ms=0.05)
        assert result.shortened and result.failure is None
        assert len(fake.counted_calls) == 1 and result.sass_rows == [COUNTED_ROW]
        if result.counted.trial > 0:
            checks = settings.verified_per_trial
            assert result.calls_checked == VERIFIED // 2 + (settings.trials - 1) * checks + 1
            return
    pytest.fail("no seed put the counted call in a cut-short trial")


def _executed() -> dict:
    """Settings of the CPU evaluator runs below: executed mode, a fixed seed, no cut-off, a wide allowance.

    (On a loaded CPU the fake candidate can trail the fake baseline by 10x and lose calls, and its walls
    can fail the cross-check, whose retime counts a second call: test_wall_retime tests that.)
    """
    from ptxgym.evaluation.trusted.base import TargetMode

    return {"target_mode": TargetMode.EXECUTED, "seed": 5, "slow_cutoff_speedup": 0.0, "wall_slack_ms": 1e4}


def _target_runs(tmp_path, **update):
    """(run, workers, settings) of one CPU evaluator in executed mode, ``update`` on top.

    ``run(static_target)`` plays one GEMM candidate through ``LocalGpuEvaluator``'s own stages on the CPU
    (``test_baseline_path.cpu_evaluator``); ``workers.made`` keeps the in-process workers it used.
    """
    from test_baseline_path import Workers, built, cpu_evaluator, gemm_task, honest

    from ptxgym.evaluation.trusted.proofs import InBand
    from ptxgym.evaluation.trusted.turn import Turn

    settings = SETTINGS.model_copy(update={**_executed(), **update})
    workers = Workers(tmp_path, honest)
    ev = cpu_evaluator(tmp_path, workers, settings)
    task = gemm_task()
    arena, baseline, _ = ev._prepare(task)

    def run(static_target: bool):
        cand = built(task).model_copy(update={"static_target": static_target})
        turn = Turn(task, cand, arena, baseline, seed=17)
        turn.in_band = InBand()
        return ev._run_candidate(turn)

    return run, workers, settings


def test_the_evaluator_counts_a_target_candidate_among_its_timed_calls(tmp_path):
    """A target candidate's counted call comes during the timing, in ``details["counted_call"]``.

    ``LocalGpuEvaluator``'s own stages on the CPU (``test_baseline_path.cpu_evaluator``).
    """
    run, workers, settings = _target_runs(tmp_path)
    verdict = run(True)
    worker = workers.made[-1]
    where = verdict.details["counted_call"]
    counted = [c for c in worker.transcript if c.startswith("count:")]
    assert len(counted) == 1 and worker.counted_calls[0][0] == where["call"], where
    assert worker.calls == settings.calls_per_step + 1  # as many calls as when it came last
    assert verdict.timing is not None
    assert verdict.timing.candidate.n == settings.trials * settings.iterations
    if verdict.status is Status.PASSED:  # (the wall-clock cross-check may flag a loaded CPU)
        assert "SASS listing of the module failed" in verdict.details["in_band_target"]["error"]


@pytest.mark.parametrize("hw", [False, True])
def test_the_worker_is_asked_to_prepare_hw_counters_only_for_a_hw_counted_subject(tmp_path, hw):
    """``ApplySandbox.hw_prepare`` (a runner's ~0.2 s query before its jail) only with ``hw_counters`` on."""
    run, workers, _ = _target_runs(tmp_path, hw_counters=hw)
    for static_target in (False, True):  # only a subject with a target opcode is counted at all
        run(static_target)
        worker = workers.made[-1]
        assert worker.sandboxed and worker.hw_prepare is (hw and static_target)


def _wgmma_player(tmp_path, monkeypatch, workers):
    """(evaluator, play, settings, nsight_yes) for target candidates of a listed wgmma module, on the CPU.

    ``play()`` runs one through ``LocalGpuEvaluator._run_candidate`` and returns (turn, verdict);
    ``nsight_yes(in_band)`` is ``proofs._target``'s answer with Nsight Compute saying wgmma did the
    work (its replay is instrumented too, so a kernel working only when slowed would make it say so).
    """
    from test_baseline_path import built, cpu_evaluator, gemm_task

    from ptxgym.evaluation.trusted import proofs, sass_join
    from ptxgym.evaluation.trusted.proofs import InBand, ProofResults
    from ptxgym.evaluation.trusted.turn import Turn
    from ptxgym.records.feedback import TargetInfo, Verdict

    listing = {IN_BAND_KERNEL: {0x10: "HGMMA.64x128x16.F32.BF16"}}  # the built module's, as cuobjdump says
    monkeypatch.setattr(sass_join, "module_pcs", lambda so: listing)
    monkeypatch.setattr(sass_join, "module_guarded", lambda so: {})  # no instruction under a guard
    # a loaded CPU host's wall clock must not end the turn before the target
    settings = SETTINGS.model_copy(update={**_executed(), "hw_counters": True, "wall_slack_ms": 1e4})
    ev = cpu_evaluator(tmp_path, workers, settings)
    task = gemm_task()
    arena, baseline, _ = ev._prepare(task)

    candidate = built(task).model_copy(update={"static_target": True})

    def play() -> tuple[Turn, object]:
        turn = Turn(task, candidate, arena, baseline, seed=17)
        turn.in_band = InBand()
        return turn, ev._run_candidate(turn)

    yes = TargetInfo(family="wgmma", executed=Verdict.YES, work=Verdict.YES, message="Nsight Compute")
    monkeypatch.setattr(proofs, "_ncu", lambda run: ProofResults(target=yes, source=None))

    def nsight_yes(in_band: InBand) -> Verdict:
        run = proofs._Run(task, candidate, tmp_path, 0, settings, tmp_path, "off")
        return proofs._target(run, in_band).target.work

    return ev, play, settings, nsight_yes


class _RunnerWorkers:
    """In-process workers of ``kind`` with CUPTI spans and census, as a runner's; kept in ``made``."""

    def __init__(self, tmp_path, kind=InProcessWorker) -> None:
        from test_baseline_path import honest

        self.tmp_path, self.kind, self.made = tmp_path, kind, []
        self.candidate = honest

    def __call__(self) -> InProcessWorker:
        worker = self.kind(self.candidate, self.tmp_path, measured=True)
        worker.spans = True
        self.made.append(worker)
        return worker


def _runner_player(tmp_path, monkeypatch, workers, listing):
    """``_wgmma_player`` for a module listed as ``listing``, its subjects served as by a runner (CUPTI)."""
    from ptxgym.evaluation.trusted import sass_join
    from ptxgym.evaluation.trusted.native_worker import NativeRunners

    ev, play, settings, nsight_yes = _wgmma_player(tmp_path, monkeypatch, workers)
    monkeypatch.setattr(sass_join, "module_pcs", lambda so: listing)
    ev.backend, ev.native = CUPTI, NativeRunners(True, 0, 0, tmp_path, False)
    monkeypatch.setattr(ev, "_hw_counts", lambda turn, handle: True)  # as in a runner
    return ev, play, settings, nsight_yes


def test_a_subject_the_runners_should_have_served_has_its_credit_withheld(tmp_path, monkeypatch):
    """Runners wanted, ``hw_counters`` on, the subject in the Python worker anyway: credit withheld.

    Here no runner could be built. There is no hardware-counted call, so ``with_hw`` withholds the SASS
    count's target credit and the verdict says why (``LocalGpuEvaluator._hw_missing``); with no usable
    SASS count either, Nsight Compute's stand is held to the same (``proofs._target``: a reviewer broke
    the count and had Nsight Compute alone credit the kernel). With the worker chosen on purpose the
    worker's SASS count decides alone (nothing is withheld).
    """
    from test_baseline_path import Workers, honest

    from ptxgym.evaluation.trusted import sass_join
    from ptxgym.evaluation.trusted.native_worker import NativeRunners
    from ptxgym.evaluation.trusted.proofs import InBand
    from ptxgym.records.arch import BLACKWELL
    from ptxgym.records.feedback import Verdict

    ev, play, settings, nsight_yes = _wgmma_player(tmp_path, monkeypatch, Workers(tmp_path, honest))
    chosen, verdict = play()  # PTXGYM_CANDIDATE_PROCESS=python: the SASS count stands
    assert chosen.in_band.target is not None and "withheld" not in chosen.in_band.target.message
    assert "hw_counters" not in verdict.details and chosen.in_band.hw is None
    ev.native = NativeRunners(True, 0, 0, tmp_path, False)
    ev.native.drop("the native runner is unavailable: no C++ compiler")
    fallen, verdict = play()
    why = verdict.details["hw_counters"]["error"]
    assert "no hardware-counted call" in why and "no C++ compiler" in why, why
    assert fallen.in_band.target is not None and "target credit withheld" in fallen.in_band.target.message
    assert fallen.in_band.target.work is not Verdict.YES

    def broken(so):
        raise RuntimeError("cuobjdump refused the module")

    monkeypatch.setattr(sass_join, "module_pcs", broken)
    uncounted, _ = play()
    assert uncounted.in_band.target is None and uncounted.in_band.hw == {"error": why}
    assert nsight_yes(uncounted.in_band) is Verdict.UNKNOWN
    assert nsight_yes(InBand()) is Verdict.YES  # none meant: Nsight Compute stands
    ev.settings = settings.model_copy(update={"hw_counters": False})
    assert ev._hw_missing(uncounted) == ""
    ev.settings, ev.arch = settings, BLACKWELL  # the counters measure wgmma and TMA, not tcgen05
    assert ev._hw_missing(uncounted) == "" and not ev._hw_meant(uncounted)


def test_a_counted_call_with_neither_rows_nor_error_is_a_count_error(tmp_path, monkeypatch):
    """A counted call's reply with no rows and no error is a count error, not the counters-only path.

    The candidate's process can send one; the operator has that path off (``sass_count_with_hw``).
    With the hardware counters broken too, Nsight Compute's word is held to their failure (a reviewer
    reached Nsight Compute alone this way).
    """
    from test_baseline_path import Workers, honest

    from ptxgym.evaluation.protocol import Reply
    from ptxgym.evaluation.trusted.native_worker import NativeRunners
    from ptxgym.records.feedback import Verdict

    def empty(self, cmd):
        InProcessWorker._counted(self, cmd)  # the candidate still runs
        return Reply(seq=self.seq, ok=True, counts=None, count_error="")

    def broken(self, cmd):
        InProcessWorker._hw_counted(self, cmd)
        return Reply(seq=self.seq, ok=True, hw_count_error="the range profiler failed")

    class Hostile(InProcessWorker):
        _counted = empty
        _hw_counted = broken

    class HostileWorkers(Workers):
        def __call__(self) -> InProcessWorker:
            worker = Hostile(self.candidate, self.tmp_path, measured=True, **self.kw)
            self.made.append(worker)
            return worker

    ev, play, settings, nsight_yes = _wgmma_player(tmp_path, monkeypatch, HostileWorkers(tmp_path, honest))
    ev.settings = settings.model_copy(update={"sass_count_with_hw": True})  # the patched call is made
    ev.native = NativeRunners(True, 0, 0, tmp_path, False)
    monkeypatch.setattr(ev, "_hw_counts", lambda turn, handle: True)  # as in a runner
    turn, verdict = play()
    assert "alone" not in verdict.details["hw_counters"], verdict.details["hw_counters"]
    assert turn.in_band.target is None and turn.in_band.hw is not None and turn.in_band.hw.get("error")
    assert nsight_yes(turn.in_band) is Verdict.UNKNOWN


@pytest.mark.parametrize(
    ("listing", "choice", "patched"),
    [
        ({"k": {0x10: "HGMMA.64x128x16.F32.BF16"}}, None, False),  # one tile: the counters are exact
        ({"k": {0x10: "HGMMA.64x128x16.F32.BF16", 0x20: "HGMMA.64x64x16.F32.BF16"}}, None, True),
        ({"k": {0x10: "HGMMA.64x128x16.F32.BF16"}}, True, True),  # the operator asks for both calls
        ({"k": {0x10: "HGMMA.64x128x16.F32.BF16", 0x20: "HGMMA.64x64x16.F32.BF16"}}, False, False),
    ],
)
def test_the_patched_call_is_made_only_where_the_counters_cannot_size_the_mmas(
    tmp_path, monkeypatch, listing, choice, patched
):
    """``sass_count_with_hw`` None (the default): the SASS-patched call only for a module of several tiles.

    One tile shape: GMMA instructions x its FLOPs is the work exactly, and the hardware-counted call
    decides alone (``details["hw_counters"]["alone"]``); several: the patched call counts each one.
    """
    workers = _RunnerWorkers(tmp_path)
    ev, play, settings, _ = _runner_player(tmp_path, monkeypatch, workers, listing)
    ev.settings = settings.model_copy(update={"sass_count_with_hw": choice})
    turn, verdict = play()
    assert turn.hw_alone is not patched
    assert bool(workers.made[-1].counted_calls) is patched, verdict.message
    assert len(workers.made[-1].hw_counted_calls) == 1
    assert verdict.details["hw_counters"].get("alone", False) is not patched, verdict.details["hw_counters"]


def test_counters_suffice_for_one_tile_shape_and_no_bulk_copy(monkeypatch):
    from ptxgym.evaluation.trusted import sass_join
    from ptxgym.records.arch import get_arch

    arch, cand = get_arch("sm_90a"), SimpleNamespace(so_path="x.so")

    def listed(listing, arch=arch, guarded=None):
        monkeypatch.setattr(sass_join, "module_pcs", lambda so: listing)
        monkeypatch.setattr(sass_join, "module_guarded", lambda so: guarded or {})
        return sass_join.counters_suffice(cand, arch)

    one = "HGMMA.64x128x16.F32.BF16"
    assert listed({"a": {0: one}, "b": {8: one, 9: "FFMA", 10: "UTMALDG.2D"}})
    assert not listed({"a": {0: "FFMA"}})  # no MMA at all: the patched call says what ran
    assert not listed({"a": {0: one}, "b": {8: "HGMMA.64x256x16.F32.BF16"}})  # two shapes
    assert not listed({"a": {0: one, 8: "HGMMA"}})  # an MMA spelling no tile
    assert not listed({"a": {0: one, 8: "UBLKCP.S.G"}})  # a bulk copy the TMA counters would count
    assert not listed({"a": {0: one}}, guarded={"a": {0: one}})  # issued, and counted, predicate off
    assert listed({"a": {0: one, 8: "BRA"}}, guarded={"a": {8: "BRA"}})  # a guarded branch is no MMA
    tma_only = SimpleNamespace(mma_opcodes=(), is_mma_opcode=lambda op: False)
    assert not listed({"a": {0: one, 8: "UTMALDG.2D"}}, tma_only)  # a task of TMA alone: never

    def broken(so):
        raise RuntimeError("cuobjdump failed")

    monkeypatch.setattr(sass_join, "module_pcs", broken)
    assert not sass_join.counters_suffice(cand, arch)  # no listing: the patched call decides


def test_the_census_must_vouch_for_the_counters():
    """``hw_census``: the counters name no kernel, so the timed calls' census must show the target's work."""
    from ptxgym.evaluation.trusted.sass_join import Census, hw_census
    from ptxgym.records.feedback import Verdict

    k, decoy = IN_BAND_KERNEL, "_Z5decoyv"
    assert hw_census([k], Census({k: 7}, 6), True) == (None, "")  # every timed call, and the counted one
    verdict, why = hw_census([k, decoy], Census({k: 6, decoy: 1}, 6), True)  # wgmma only when counted
    assert verdict is Verdict.NO and decoy in why
    assert hw_census([decoy], Census({"_Z4simtv": 6, decoy: 0}, 6), True)[0] is Verdict.NO  # none in all
    assert hw_census([k], Census({k: 6}, 6, error="buffer lost"), True)[0] is Verdict.UNKNOWN
    assert hw_census([k], None, True)[0] is Verdict.UNKNOWN
    assert hw_census([k], Census({}, 0), True)[0] is Verdict.UNKNOWN
    # totals pass, but the counted call's window held more GPU work than any timed call (a later review)
    many = Census({k: 150, "_Z4simtv": 150, decoy: 150}, 150, counted_activities=(151, 1))
    verdict, why = hw_census([decoy], many, True)
    assert verdict is Verdict.NO and "151 activities" in why
    assert hw_census([k], Census({k: 7}, 6, counted_activities=(1, 1)), True) == (None, "")
    assert hw_census([k], Census({k: 7}, 6, counted_activities=(9, 1)), True) == (None, "")  # slack


def test_a_look_alike_name_vouches_only_for_itself():
    """``Census.launches``: an ``extern "C" gemm`` launched every call does not vouch for ``ns::gemm``."""
    from ptxgym.evaluation.trusted.sass_join import Census

    wgmma, simt = "_ZN2ns4gemmEPf", "gemm"
    functions = frozenset({wgmma, simt})
    assert Census({simt: 10}, 10).launches(wgmma) == 10  # by name alone, the look-alike counted
    assert Census({simt: 10}, 10, module_functions=functions).launches(wgmma) == 0
    assert Census({simt: 10, wgmma: 1}, 10).launches(wgmma) == 1  # the exact name wins
    assert Census({"ns::gemm(float*)": 4}, 4, module_functions=functions).launches(wgmma) == 4  # demangled


def test_counters_alone_deny_a_kernel_launched_only_in_the_counted_call(tmp_path, monkeypatch):
    """A wgmma kernel run only in the hardware-counted call is no credit when the counters decide alone.

    The counters name no kernel; the census of the timed calls does (``sass_join.hw_census``). A reviewer
    found the counters-alone path paying such a decoy (the call is recognisable by its command and the
    profiler's set-up before it). The honest control, its one kernel in every call, keeps its credit.
    """
    from ptxgym.records.feedback import Verdict

    decoy = "wgmma_only_when_counted"

    class Decoy(InProcessWorker):
        launched = 0

        def _hw_counted(self, cmd):
            self.launched += int(cmd.timed and self.in_trial)  # its wgmma kernel, in the call's window
            return InProcessWorker._hw_counted(self, cmd)

        def request(self, cmd, timeout_s, pickler=None, fds=()):
            reply = InProcessWorker.request(self, cmd, timeout_s, pickler, fds)
            if reply.spans is not None and self.launched:
                kernels = {**reply.spans.kernels, decoy: self.launched}
                spans = reply.spans.model_copy(update={"kernels": kernels})
                reply = reply.model_copy(update={"spans": spans})
                self.launched = 0
            return reply

    verdicts = {}
    for kind, listing in (
        (InProcessWorker, {IN_BAND_KERNEL: {0x10: "HGMMA.64x128x16.F32.BF16"}}),
        (Decoy, {IN_BAND_KERNEL: {0x10: "FFMA"}, decoy: {0x10: "HGMMA.64x128x16.F32.BF16"}}),
    ):
        _, play, _, _ = _runner_player(tmp_path, monkeypatch, _RunnerWorkers(tmp_path, kind), listing)
        turn, verdict = play()
        assert verdict.status.value == "PASSED" and turn.hw_alone, verdict.message
        verdicts[kind.__name__] = (turn.in_band.target, verdict.details["hw_counters"])
    # (the fake's counters are a token count: the honest kernel's share is small, but the census vouches)
    honest_target, honest_record = verdicts["InProcessWorker"]
    assert "census" not in honest_record and honest_target is not None
    assert "launch" not in honest_target.message, honest_target.message
    target, record = verdicts["Decoy"]
    assert target is not None and target.work is Verdict.NO and not target.credited, target.message
    assert decoy in record["census"] and decoy in target.message
