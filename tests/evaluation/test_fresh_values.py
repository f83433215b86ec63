"""Timed calls get fresh values: output caches and replays fail, an honest candidate passes.

The trusted ``Arena`` and ``Session`` run as in the evaluator; the candidate is a Python callable run
in-process on the arena's CPU buffers (``inprocess_worker.py``), with small axes so a run takes seconds.
Each hostile candidate is also played against the old protocol (sign flips only: ``arena.fresh = ()``),
to show what it got away with before.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import InProcessWorker, SignedOutputMemory, is_warmup, run_in_session  # noqa: E402

from ptxgym.evaluation.protocol import Load  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.inputs import load_reference  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402

SETTINGS = EvalSettings(warmup=2, iterations=12, trials=2, correctness_sets=3, rotate_sets=3)
VERIFIED_PER_TRIAL = 3  # min(iterations, max(ceil(0.25 * 12), 3))
TIMED_CALLS = SETTINGS.trials * (SETTINGS.warmup + SETTINGS.iterations)


def gemm_task():
    return tiny_task("Gemm-sm90a", M=64, N=48, K=32)


def _gemm(A, B):
    return (A.float() @ B.float().T).to(torch.bfloat16)


class Honest:
    """Computes every call."""

    replays = 0

    def __call__(self, A, B, C):
        C.copy_(_gemm(A, B))


class PointerCache:
    """Computes the first call on each output buffer, then replays that output."""

    def __init__(self) -> None:
        self.store: dict[int, object] = {}
        self.replays = 0

    def __call__(self, A, B, C):
        if C.data_ptr() in self.store:
            C.copy_(self.store[C.data_ptr()])
            self.replays += 1
            return
        C.copy_(_gemm(A, B))
        self.store[C.data_ptr()] = C.clone()


class SampledValueCache:
    """Keys outputs on sampled input values that sign flips leave alone, with the signs corrected.

    The key is the magnitudes of A[:, 0] and B[:, 0]; a miss computes.
    """

    def __init__(self) -> None:
        self.memory = SignedOutputMemory()

    @property
    def replays(self) -> int:
        return self.memory.replays

    def __call__(self, A, B, C):
        if self.memory.recall(A, B, C):
            return
        C.copy_(_gemm(A, B))
        self.memory.remember(A, B, C)


class SignCorrectedReplay:
    """Computes each input set once (known by its buffer), then replays its output, signs corrected.

    Row and column signs come from A[:, 0] and B[:, 0]: the attack that passed 60 of 60 verified calls.
    """

    def __init__(self) -> None:
        self.store: dict[int, tuple] = {}
        self.replays = 0

    def __call__(self, A, B, C):
        a, b = A[:, 0].float(), B[:, 0].float()
        if C.data_ptr() in self.store:
            a0, b0, c0 = self.store[C.data_ptr()]
            sign = torch.sign(a * a0)[:, None] * torch.sign(b * b0)[None, :]
            C.copy_((c0.float() * sign).to(C.dtype))
            self.replays += 1
            return
        C.copy_(_gemm(A, B))
        self.store[C.data_ptr()] = (a.clone(), b.clone(), C.clone())


def judge(
    candidate, tmp_path, task=None, fresh=True, seed=7, settings=SETTINGS
) -> tuple[SessionResult, Arena]:
    """Correctness, then timing (if correct), as the evaluator runs a candidate."""
    arena = Arena(task or gemm_task(), [1, 2, 3], "cpu", tmp_path)
    if not fresh:
        arena.fresh = ()  # the old protocol: timed calls only flip signs of the seeded sets
    return run_in_session(candidate, arena, settings, tmp_path, seed)[0], arena


def test_an_honest_candidate_passes_every_verified_timed_call(tmp_path):
    result, _ = judge(Honest(), tmp_path)
    assert result.failure is None
    assert result.calls_checked == SETTINGS.correctness_sets + SETTINGS.trials * VERIFIED_PER_TRIAL
    assert [len(t) for t in result.trials] == [SETTINGS.iterations] * SETTINGS.trials


@pytest.mark.parametrize("cls", [PointerCache, SignCorrectedReplay], ids=["pointer", "sign-corrected"])
def test_replayed_outputs_are_judged_incorrect_in_a_timed_call(tmp_path, cls):
    cheat = cls()
    result, _ = judge(cheat, tmp_path)
    assert cheat.replays > 0
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    assert result.failure.stage is Stage.TIME
    assert "a timed call (fresh values, same buffers)" in result.failure.message


def test_sign_corrected_replay_fooled_sign_flips_alone(tmp_path):
    """The hole that fresh values close: against sign flips the replay passes every verified call."""
    cheat = SignCorrectedReplay()
    result, _ = judge(cheat, tmp_path, fresh=False)
    assert result.failure is None
    assert cheat.replays == TIMED_CALLS  # every timed call replayed, none computed


@pytest.mark.parametrize("redraw", [False, True], ids=["warm-up calls keep their values", "redrawn"])
def test_a_cache_keyed_on_sampled_values_never_hits_a_timed_call(tmp_path, redraw):
    """Fresh values never repeat in a timed call, so a value-keyed cache computes each: nothing to gain.

    Its hits are warm-up calls (never timed), which keep their set's last values
    (``EvalSettings.warmup_redraw`` off, the default); with them redrawn it never hits. (It cannot be
    judged incorrect, since it replays only what it computed; against sign flips alone it replayed
    every timed call and passed.)
    """
    settings = SETTINGS.model_copy(update={"warmup_redraw": redraw})
    cheat = SampledValueCache()
    result, _ = judge(cheat, tmp_path, settings=settings)
    assert result.failure is None
    assert all(is_warmup(settings, i) for i in cheat.memory.replayed_at)
    assert cheat.replays == (0 if redraw else settings.trials * settings.warmup)
    before = SampledValueCache()
    old, _ = judge(before, tmp_path, fresh=False)
    assert old.failure is None and before.replays == TIMED_CALLS


def test_fresh_values_are_new_draws_in_the_same_buffers(tmp_path):
    arena = Arena(gemm_task(), [1, 2], "cpu", tmp_path)
    assert arena.fresh == ("A", "B")
    gen = torch.Generator().manual_seed(0)
    s = arena.sets[0]
    ptr, seeded = s.shared_in["A"].data_ptr(), s.shared_in["A"].clone()
    arena.prepare(0, gen, fresh=True)
    first = s.shared_in["A"].clone()
    arena.prepare(0, gen, fresh=True)
    assert s.shared_in["A"].data_ptr() == ptr
    for before in (seeded, first):  # not a sign flip of anything seen before
        assert not torch.equal(s.shared_in["A"].abs(), before.abs())
    assert float(s.shared_in["A"].float().std()) == pytest.approx(1.0, rel=0.2)  # same distribution
    arena.prepare(0, gen)  # a correctness call: back to the seeded values (signs flipped)
    assert torch.equal(s.shared_in["A"].abs(), seeded.abs())


def test_the_reference_runs_only_for_verified_timed_calls(tmp_path):
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    runs = []
    reference = arena.namespace["run"]
    arena.namespace["run"] = lambda *a: runs.append(1) or reference(*a)
    session = Session(InProcessWorker(Honest(), tmp_path), arena, SETTINGS, EVENTS, 3, 10.0)
    session.attach(1, cupti=False)
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    result = SessionResult()
    session.correctness(result)
    assert runs == []  # correctness calls use the stored references of the seeded sets
    session.timing(result, crosscheck=False)
    assert result.failure is None
    assert len(runs) == SETTINGS.trials * VERIFIED_PER_TRIAL


class Logged(Honest):
    """An honest candidate whose calls go into a log shared with the trusted side's checks."""

    def __init__(self, log: list) -> None:
        self.log = log

    def __call__(self, A, B, C):
        self.log.append("call")
        super().__call__(A, B, C)


def test_no_timed_call_is_checked_before_its_trial_ends(tmp_path, monkeypatch):
    """A check right after a verified call would lengthen the gap before the next call.

    The candidate could time that gap: after the last of a trial's verified calls (exactly
    ``verified_per_trial``), the rest of the trial would be known unchecked. Timed calls are checked
    after their trial; the correctness calls (all checked, known to come first) right after each.
    """
    log: list[str] = []
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    for name in ("verify", "check_held"):
        real = getattr(Arena, name)
        monkeypatch.setattr(Arena, name, lambda self, x, real=real: log.append("check") or real(self, x))
    real_close = Session._close
    monkeypatch.setattr(Session, "_close", lambda self, *a: log.append("end") or real_close(self, *a))
    result, _ = run_in_session(Logged(log), arena, SETTINGS, tmp_path)
    assert result.failure is None
    timing = "".join("c" if x == "call" else "v" if x == "check" else "|" for x in log)
    checked = "cv" * SETTINGS.correctness_sets  # after the calibration's trial ("|": no candidate call)
    assert timing.startswith("|" + checked), timing
    timing = timing[len(checked) + 1 :]
    trials = [SETTINGS.warmup + SETTINGS.iterations] * SETTINGS.trials
    assert timing == "".join("c" * n + "|" + "v" * VERIFIED_PER_TRIAL for n in trials), timing


def test_every_timed_call_of_a_checked_trial_gets_the_same_work_after_it(tmp_path):
    """Kept (verified) or not, the outputs are copied alike: the gap after a call tells nothing."""
    from torch.profiler import ProfilerActivity, profile

    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    arena.prepare(0, torch.Generator().manual_seed(1), fresh=True)
    ops = []
    for keep in (True, False):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            arena.hold(0, keep, arena.copy_outputs(0))
        ops.append([(e.name, str(e.input_shapes)) for e in prof.events()])
    assert ops[0] == ops[1] and any("clone" in name for name, _ in ops[0])


class WritesThenRestores(Honest):
    """Zeroes an input after computing, and puts it back at its next call (which runs on another set)."""

    def __init__(self, honest_calls: int, last: int) -> None:
        self.honest_calls, self.last, self.calls, self.undo = honest_calls, last, 0, None

    def __call__(self, A, B, C):
        self.calls += 1
        if self.undo is not None:
            tensor, value = self.undo
            tensor[0, 0] = value
            self.undo = None
        super().__call__(A, B, C)
        if self.honest_calls < self.calls < self.last:  # the last call's write would stay: not this cheat
            self.undo = (A, A[0, 0].clone())
            A[0, 0] = 0.0


def test_an_input_written_and_restored_by_the_next_call_is_still_found(tmp_path):
    """Inputs are compared right after every call of a checked trial.

    (Reviewer's find: deferring the verified calls' check had let such a write go unseen.)
    """
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    last = SETTINGS.correctness_sets + TIMED_CALLS
    result, _ = run_in_session(WritesThenRestores(SETTINGS.correctness_sets, last), arena, SETTINGS, tmp_path)
    assert result.failure is not None and result.failure.status is Status.INPUT_MUTATED


class WrongThenCrashes(Honest):
    """Wrong outputs in the timed calls, then a crash in the trial's last call."""

    def __init__(self, last: int) -> None:
        self.last, self.calls = last, 0

    def __call__(self, A, B, C):
        from ptxgym.evaluation.trusted.session import CandidateFault

        self.calls += 1
        if self.calls == self.last:
            raise CandidateFault("RuntimeError: boom", "", Stage.RUN)  # the worker's failed reply
        super().__call__(A, B, C)
        if self.calls > SETTINGS.correctness_sets:
            C.mul_(2)


def test_a_wrong_verified_call_before_a_crash_is_the_verdict(tmp_path):
    """The checks held to the trial's end still come first: the wrong result happened before the crash."""
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    last = SETTINGS.correctness_sets + SETTINGS.warmup + SETTINGS.iterations
    result, _ = run_in_session(WrongThenCrashes(last), arena, SETTINGS, tmp_path)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    assert result.failure.stage is Stage.TIME


def test_before_a_session_every_set_holds_its_seeded_values_again(tmp_path):
    """The last call on a set may have brought a pool entry: the next candidate must not find it there."""
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)
    run_in_session(Honest(), arena, SETTINGS, tmp_path)
    assert any(s.fresh is not None for s in arena.sets)
    arena.restore()
    for i, s in enumerate(arena.sets):
        assert s.fresh is None
        want = arena.expected_inputs(i)
        assert all(torch.equal(s.shared_in[n], want[n]) for n in s.shared_in)
        assert torch.equal(s.shared_in["A"].abs(), s.base_in["A"].abs())  # the seeded values, signed


@pytest.mark.gpu
def test_held_calls_do_not_grow_the_allocator_within_a_trial(tmp_path, monkeypatch):
    """The device's free memory must not show which calls were kept (``Arena.reserve_holds``).

    A kept call's copies live to the trial's end.
    """
    arena = Arena(gemm_task(), [1, 2, 3], 0, tmp_path)
    reserved: list[int] = []
    real = Arena.hold

    def hold(self, index, keep, outputs, whole=False):
        reserved.append(torch.cuda.memory_reserved())
        return real(self, index, keep, outputs, whole=whole)

    monkeypatch.setattr(Arena, "hold", hold)
    result, _ = run_in_session(Honest(), arena, SETTINGS, tmp_path)
    assert result.failure is None
    per_trial = SETTINGS.warmup + SETTINGS.iterations
    for t in range(SETTINGS.trials):
        trial = reserved[t * per_trial : (t + 1) * per_trial]
        assert len(set(trial)) == 1, trial


def test_a_verified_timed_call_computes_its_expected_inputs_once_and_no_signs_for_fresh_ones(tmp_path):
    """One expected-inputs build per verified call, with no sign products for the fresh inputs.

    The reference and the input check share it; the values are unchanged.
    """
    arena = Arena(gemm_task(), [1], "cpu", tmp_path)
    gen = torch.Generator().manual_seed(0)
    arena.prepare(0, gen)
    arena.prepare(0, gen, fresh=True)
    s = arena.sets[0]
    s.shared_out["C"].copy_(_gemm(s.shared_in["A"], s.shared_in["B"]))
    calls, products = [], []
    real = arena.perturb.expected_inputs
    arena.perturb.expected_inputs = lambda base, state, skip=(): calls.append(skip) or real(base, state, skip)
    broadcast = arena.perturb._broadcast
    arena.perturb._broadcast = lambda sg, g, name: products.append(name) or broadcast(sg, g, name)
    assert arena.verify(0).passed
    assert calls == [("A", "B")] and products == []
    want = arena.expected_inputs(0)
    assert torch.equal(want["A"], s.fresh["A"]) and torch.equal(want["B"], s.fresh["B"])


def test_an_input_written_during_an_unverified_call_is_still_found(tmp_path):
    """The next draw overwrites the buffer, so the damage is noted before it is."""
    arena = Arena(gemm_task(), [1], "cpu", tmp_path)
    gen = torch.Generator().manual_seed(0)
    arena.prepare(0, gen, fresh=True)
    arena.sets[0].shared_in["B"][0, 0] += 1  # the candidate writes into an input
    arena.prepare(0, gen, fresh=True)
    assert arena.mutated_inputs() == ["B"]


def test_a_write_that_keeps_every_value_equal_is_still_a_write(tmp_path):
    """The check compares bits (``compare.same_bits``): -0.0 written over 0.0 is found, as any write."""
    arena = Arena(gemm_task(), [1], "cpu", tmp_path)
    gen = torch.Generator().manual_seed(0)
    arena.prepare(0, gen, fresh=True)
    a = arena.sets[0].shared_in["A"]
    a.view(-1)[7] = 0.0
    arena.sets[0].fresh["A"].view(-1)[7] = 0.0  # as if the draw had made this exact zero
    arena.prepare(0, gen, fresh=True)
    assert arena.mutated_inputs() == []
    arena.prepare(0, gen, fresh=True)
    arena.sets[0].fresh["A"].view(-1)[3] = 0.0
    a.view(-1)[3] = -0.0  # equal as a number, another bit pattern
    arena.prepare(0, gen, fresh=True)
    assert arena.mutated_inputs() == ["A"]
    assert arena.restore() == [] and arena.mutated_inputs() == []  # the next session starts clean


class ByReference:
    """Any task: the outputs from the task's own reference; ``cache``: replay by output buffer after."""

    def __init__(self, run, n_in: int, cache: bool) -> None:
        self.run, self.n_in, self.cache = run, n_in, cache
        self.store: dict[int, list] = {}
        self.replays = 0

    def __call__(self, *args):
        n_out = len(args) - self.n_in
        ins, outs = args[: self.n_in], args[self.n_in :]
        key = outs[0].data_ptr()
        if self.cache and key in self.store:
            values, self.replays = self.store[key], self.replays + 1
        else:
            result = self.run(*ins)
            values = list(result) if n_out > 1 else [result]
            self.store[key] = [v.clone() for v in values]
        for out, value in zip(outs, values, strict=True):
            out.copy_(value)


def test_the_backward_redraws_do_and_keeps_the_inputs_its_state_derives_from(tmp_path):
    """O and LSE are derived from Q, K, V (forward_state): those keep their set's values; dO is new."""
    task = tiny_task("MhaBwd-sm90a", B=1, H=2, S=16, D=8)
    run = load_reference(task)["run"]
    for cache in (False, True):
        candidate = ByReference(run, len(task.definition.inputs), cache)
        result, arena = judge(candidate, tmp_path, task=task)
        assert arena.fresh == ("dO",)
        if cache:
            assert candidate.replays > 0 and result.failure.status is Status.INCORRECT_NUMERICAL
        else:
            assert result.failure is None
