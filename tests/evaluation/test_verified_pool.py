"""The verified pool: verified timed calls take secret draws whose references were computed once.

The trusted ``Arena`` and ``Session`` run as in the evaluator against the in-process worker
(``inprocess_worker.py``) on CPU tensors with small axes; ``verified_pool.py`` says what must hold.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import ByReference, SignedOutputMemory, is_warmup, run_in_session  # noqa: E402

import ptxgym.evaluation.trusted.arena as arena_module  # noqa: E402
import ptxgym.evaluation.trusted.verified_pool as verified_pool  # noqa: E402
from ptxgym.evaluation.protocol import SandboxLayer, SandboxReport  # noqa: E402
from ptxgym.evaluation.trusted import fused_inputs  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.inputs import load_reference, run_reference  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402

# the pool's mechanics: every verified call may take an entry (test_new_draws_... below: the default)
SETTINGS = EvalSettings(
    warmup=2, iterations=12, trials=2, correctness_sets=3, rotate_sets=3, pool_new_draws_per_trial=0
)
VERIFIED = SETTINGS.trials * SETTINGS.verified_per_trial  # 6: no counted call in these sessions
TASKS = {
    "gemm": ("Gemm-sm90a", {"M": 64, "N": 48, "K": 32}),
    "mha_fwd": ("MhaFwd-sm90a", {"B": 1, "H": 2, "S": 16, "D": 8}),
    "mha_bwd": ("MhaBwd-sm90a", {"B": 1, "H": 2, "S": 16, "D": 8}),
}


def task_of(name: str):
    task_id, axes = TASKS[name]
    return tiny_task(task_id, **axes)


def judge(candidate, arena: Arena, tmp_path, seed=7, pool=True) -> tuple[SessionResult, Session]:
    """Correctness, then timing, as the evaluator runs a subject; ``pool``: it may use the arena's pool."""
    return run_in_session(candidate, arena, SETTINGS, tmp_path, seed, pool)


def count_references(monkeypatch) -> list[int]:
    """Count the reference runs of sessions (not those that build the pool)."""
    runs: list[int] = []
    real = arena_module.run_reference
    monkeypatch.setattr(arena_module, "run_reference", lambda *a: runs.append(1) or real(*a))
    return runs


@pytest.mark.parametrize("name", list(TASKS))
def test_pool_entries_pass_a_correct_candidate_and_catch_a_wrong_one(tmp_path, monkeypatch, name):
    task = task_of(name)
    run = load_reference(task)["run"]
    n_in = sum(1 for s in task.definition.inputs.values() if s.shape is not None)
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED)
    assert arena.pool.active and arena.build_s["pool"] > 0
    runs = count_references(monkeypatch)
    result, session = judge(ByReference(run, n_in), arena, tmp_path)
    assert result.failure is None
    assert session.draws is not None and len(session.draws.taken) == VERIFIED
    assert runs == []  # every verified timed call took a pool entry: no reference run in the session
    wrong = ByReference(run, n_in, wrong_after=SETTINGS.correctness_sets)  # right in the correctness calls
    result, session = judge(wrong, arena, tmp_path, seed=8)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    assert result.failure.stage is Stage.TIME and runs == []
    assert session.draws is not None and session.draws.taken  # caught on a pool entry


def test_pool_calls_expect_exactly_the_reference_of_what_the_buffers_hold(tmp_path):
    """Signs of the set apply to the entry's inputs and to its stored outputs (GEMM: A rows, B rows)."""
    arena = Arena(task_of("gemm"), [1], "cpu", tmp_path, pool_size=2)
    gen = torch.Generator().manual_seed(0)
    arena.prepare(0, gen)  # a correctness call: signs of A's rows and B's rows now differ from +1
    assert any(bool((s < 0).any()) for s in arena.sets[0].state)
    entry = arena.pool.entries[None][0]
    pristine = {n: t.clone() for n, t in verified_pool.entry_values(arena, entry, 0).items()}
    arena.prepare(0, gen, fresh=True, entry=entry)
    s = arena.sets[0]
    held = {n: t.clone() for n, t in s.shared_in.items()}
    assert not torch.equal(held["A"], pristine["A"])  # signed copies, not the entry itself
    assert torch.equal(held["A"].abs(), pristine["A"].abs())
    want = run_reference(arena.task, arena.namespace, held)["C"]
    assert torch.equal(arena.expected_outputs(0)["C"], want)
    s.shared_out["C"].copy_(want)
    assert arena.verify(0).passed
    s.shared_in["A"][0, 0] += 1  # the candidate writes its input: the shared copy, never the entry
    assert not arena.verify(0).passed
    values = verified_pool.entry_values(arena, entry, 0)
    assert all(torch.equal(values[n], pristine[n]) for n in pristine)
    arena.prepare(0, gen, fresh=True)
    assert arena.mutated_inputs() == ["A"]


def test_a_sign_flipped_input_that_is_not_redrawn_keeps_the_stored_reference_exact(tmp_path, monkeypatch):
    """A kept input a sign group flips (the GEMM's B kept here): its set's signs reach the outputs."""
    monkeypatch.setattr(arena_module, "fresh_names", lambda task, ns: ("A",))
    task = task_of("gemm")
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED)
    assert arena.fresh == ("A",) and sorted(arena.pool.entries) == [0, 1, 2]  # entries per set
    gen = torch.Generator().manual_seed(1)
    for index in range(3):
        for _ in range(2):
            arena.prepare(index, gen, fresh=True, entry=arena.pool.entries[index][0])
            held = dict(arena.sets[index].shared_in)
            assert torch.equal(
                arena.expected_outputs(index)["C"], run_reference(task, arena.namespace, held)["C"]
            )
    run = load_reference(task)["run"]
    result, session = judge(ByReference(run, 2), arena, tmp_path)
    assert result.failure is None and session.draws is not None and len(session.draws.taken) == VERIFIED


def test_no_entry_serves_two_calls_of_a_session_and_the_rest_draw_new_values(tmp_path, monkeypatch):
    task = task_of("gemm")
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=4)  # fewer than the 6 verified calls
    runs = count_references(monkeypatch)
    result, session = judge(ByReference(load_reference(task)["run"], 2), arena, tmp_path)
    assert result.failure is None
    draws = session.draws
    assert draws is not None
    numbers = [number for _, number in draws.taken]
    assert sorted(numbers) == [0, 1, 2, 3]  # each entry once, in a secret order
    assert draws.fallbacks == VERIFIED - 4 and len(runs) == VERIFIED - 4  # the others: new draw + reference
    assert all(e.uses == 1 for e in arena.pool.entries[None])
    again = judge(ByReference(load_reference(task)["run"], 2), arena, tmp_path, seed=9)[1].draws
    assert again is not None and [n for _, n in again.taken] != numbers  # another session, another order


def test_the_backward_keys_entries_by_set(tmp_path):
    """dO is redrawn beside the set's own Q, K, V, O, LSE: an entry serves only the set it was made for."""
    arena = Arena(task_of("mha_bwd"), [1, 2, 3], "cpu", tmp_path, pool_size=3)
    assert arena.fresh == ("dO",) and sorted(arena.pool.entries) == [0, 1, 2]
    result, session = judge(ByReference(load_reference(arena.task)["run"], 6), arena, tmp_path)
    assert result.failure is None and session.draws is not None
    per_set: dict[int, list[int]] = {}
    for index, number in session.draws.taken:
        per_set.setdefault(index, []).append(number)
    assert all(len(v) == len(set(v)) <= 3 for v in per_set.values())


class TellsVerifiedCalls:
    """Learns every call's inputs for a while, then computes only calls whose inputs it has seen before.

    A GEMM candidate: it computes honestly during its first ``learn`` calls, keeping each output under
    the magnitudes of A[:, 0] and B[:, 0] (signs change from call to call, magnitudes do not). After that
    it replays, signs corrected, the output of any call it recognises and writes zeros for the others.
    If a pool entry came back within a session, recognising it would tell a verified call: zeros
    elsewhere would never be checked.
    """

    def __init__(self, learn: int) -> None:
        self.learn, self.calls, self.skipped = learn, 0, 0
        self.memory = SignedOutputMemory()

    @property
    def replays(self) -> int:
        return self.memory.replays

    def __call__(self, A, B, C):
        self.calls += 1
        if self.memory.recall(A, B, C):
            return
        if self.calls <= self.learn:
            C.copy_((A.float() @ B.float().T).to(C.dtype))
            self.memory.remember(A, B, C)
        else:
            C.zero_()
            self.skipped += 1


def test_recognising_an_entry_does_not_pay_because_none_comes_back_in_a_session(tmp_path, monkeypatch):
    learn = SETTINGS.correctness_sets + SETTINGS.warmup + SETTINGS.iterations  # through the first trial
    arena = Arena(task_of("gemm"), [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED)
    cheat = TellsVerifiedCalls(learn)
    result, _ = judge(cheat, arena, tmp_path)
    # its only hits: warm-up calls, which keep their set's last values (EvalSettings.warmup_redraw)
    assert cheat.skipped > 0 and all(is_warmup(SETTINGS, i) for i in cheat.memory.replayed_at)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL

    def reused(self, index):  # the rule broken: one entry serves every verified call
        entries = self.pool.entries[self.pool.key(index)]
        self.taken.append((index, 0))
        return entries[0]

    monkeypatch.setattr(verified_pool.PoolDraws, "take", reused)
    cheat = TellsVerifiedCalls(learn)
    result, _ = judge(cheat, arena, tmp_path)
    assert result.failure is None  # it would pass, having skipped most calls of the second trial
    assert cheat.replays >= SETTINGS.verified_per_trial and cheat.skipped > SETTINGS.iterations // 2


def prepare_ops(arena: Arena, index: int, entry) -> list[tuple[str, str]]:
    """The operators (name, input shapes and dtypes) one timed call's preparation runs, in order."""
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator().manual_seed(5)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        arena.prepare(index, gen, fresh=True, entry=entry)
    return [(e.name, f"{e.input_shapes} {getattr(e, 'input_types', '')}") for e in prof.events()]


@pytest.mark.parametrize("name", ["gemm", "mha_fwd"])
def test_a_verified_pool_call_is_prepared_with_the_same_work_as_any_timed_call(tmp_path, name, monkeypatch):
    """The gap before a call must not tell a verified one: a pool entry takes the draw's place, no less.

    (Before: the entry was copied in without a draw, 0.6 of the MHA forward's 1.7 ms per call.)
    """
    arena = Arena(task_of(name), [1, 2, 3], "cpu", tmp_path, pool_size=2)
    entry = arena.pool.entries[None][0]
    arena.prepare(0, torch.Generator().manual_seed(1), fresh=True)  # a timed call's values to retire
    fills: list[tuple] = []
    real_fill = fused_inputs.fill

    def spy(shared, signs, keys, index):
        fills.append((shared.shape, shared.dtype, signs.numel(), keys.shape, keys.dtype, index))
        return real_fill(shared, signs, keys, index)

    monkeypatch.setattr(fused_inputs, "fill", spy)
    drawn = prepare_ops(arena, 0, None)
    drawn_fills, fills[:] = list(fills), []
    pooled = prepare_ops(arena, 0, entry)
    assert pooled == drawn
    assert arena.fused.startswith("on") == fused_inputs.interpreted()  # conftest: fused there
    if arena.fused.startswith("on"):  # the interpreter (fused_checks.py): one kernel per input, either way
        assert len(drawn_fills) == len(arena.fresh) and fills == drawn_fills
    else:
        assert any("normal" in op or "randn" in op for op, _ in drawn) and not fills
    assert torch.equal(arena.sets[0].shared_in[arena.fresh[0]], arena.expected_inputs(0)[arena.fresh[0]])


def test_nothing_a_session_left_in_any_set_s_outputs_reaches_the_next_session(tmp_path):
    """A candidate can write every set's outputs (one blob); the next session must not read that back.

    A set is poisoned again only when a call is prepared on it, so before ``restore`` poisoned them all,
    the next candidate's first calls could read what the last one left in another set's outputs (e.g.
    the pool entries it recognised).
    """
    from ptxgym.evaluation.compare import unwritten_mask

    arena = Arena(task_of("gemm"), [1, 2, 3], "cpu", tmp_path, pool_size=2)
    run = load_reference(arena.task)["run"]
    judge(ByReference(run, 2), arena, tmp_path)
    for s in arena.sets:  # what a candidate could leave behind, in every set
        s.shared_out["C"].fill_(1.25)
    arena.restore()  # the evaluator's step before every session (LocalGpuEvaluator._session)
    for s in arena.sets:
        assert bool(unwritten_mask(s.shared_out["C"]).all())


class KnowsEntries:
    """Computes only the correctness calls and the calls that bring one of the pool's entries.

    It knows the entries: their fingerprints leaked (printed by an earlier candidate into the observation).
    """

    def __init__(self, arena, honest_calls: int) -> None:
        values = [verified_pool.entry_values(arena, e, 0)["A"] for e in arena.pool.entries[None]]
        self.keys = {self._key(v) for v in values}
        self.honest_calls, self.calls, self.skipped = honest_calls, 0, 0

    @staticmethod
    def _key(A) -> tuple:
        return tuple(A[:, 0].float().abs().tolist())  # the set's signs leave magnitudes alone

    def __call__(self, A, B, C):
        self.calls += 1
        if self.calls <= self.honest_calls or self._key(A) in self.keys:
            C.copy_((A.float() @ B.float().T).to(C.dtype))
        else:
            C.zero_()
            self.skipped += 1


def test_new_draws_among_the_verified_calls_make_knowing_the_entries_worthless(tmp_path):
    """With every verified call served by the pool, a cheat that knows the entries computes only them."""
    arena = Arena(task_of("gemm"), [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED)
    cheat = KnowsEntries(arena, SETTINGS.correctness_sets)
    result, _ = judge(cheat, arena, tmp_path)  # pool_new_draws_per_trial=0: the hole
    assert result.failure is None and cheat.skipped > SETTINGS.trials * SETTINGS.iterations // 2
    default = SETTINGS.model_copy(update={"pool_new_draws_per_trial": 1})
    assert EvalSettings().pool_new_draws_per_trial == 2  # the default: stronger than this one
    cheat = KnowsEntries(arena, SETTINGS.correctness_sets)
    result, session = run_in_session(cheat, arena, default, tmp_path, 11, pool=True)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    honest = run_in_session(
        ByReference(load_reference(arena.task)["run"], 2), arena, default, tmp_path, 12, True
    )
    assert honest[0].failure is None and honest[1].draws is not None
    assert honest[1].draws.fallbacks == 0 and len(honest[1].draws.taken) == VERIFIED - default.trials
    assert honest[1].pool_record()["new_draws"] == default.trials


def test_a_shortened_session_draws_new_values_too(tmp_path):
    """A candidate far below the baseline is timed by its probe and all-verified trials.

    Those keep one new draw per trial too (the runner's GPU test found none there).
    """
    arena = Arena(task_of("gemm"), [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED)
    default = SETTINGS.model_copy(update={"pool_new_draws_per_trial": 1, "slow_probe_calls": 4})
    tiny = 1e-6  # any candidate is far below 0.1x of this baseline
    cheat = KnowsEntries(arena, SETTINGS.correctness_sets)
    result, _ = run_in_session(cheat, arena, default, tmp_path, 11, pool=True, baseline_ms=tiny)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    honest = ByReference(load_reference(arena.task)["run"], 2)
    result, session = run_in_session(honest, arena, default, tmp_path, 12, pool=True, baseline_ms=tiny)
    assert result.failure is None and result.shortened, result.shortened
    assert session.pool_record()["new_draws"] == default.trials


def test_both_counted_calls_take_entries_too(tmp_path, monkeypatch):
    """The SASS-counted and the hardware-counted call are verified like the others: no reference run."""
    from inprocess_worker import InProcessWorker

    from ptxgym.evaluation.protocol import Load
    from ptxgym.evaluation.trusted.timing import EVENTS

    arena = Arena(task_of("gemm"), [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED + 2)
    runs = count_references(monkeypatch)
    worker = InProcessWorker(ByReference(load_reference(arena.task)["run"], 2), tmp_path)
    session = Session(worker, arena, SETTINGS, EVENTS, 3, 10.0)
    session.attach(1, cupti=False)
    session.use_pool()
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    result = SessionResult()
    session.timing(result, crosscheck=False, count=True, hw_count=True)
    assert result.failure is None and len(worker.hw_counted_calls) == len(worker.counted_calls) == 1
    assert session.draws is not None and len(session.draws.taken) == VERIFIED + 2 and runs == []


def test_pool_size_zero_is_the_path_without_a_pool(tmp_path, monkeypatch):
    """Same calls, same values, a reference run per verified call, as before the pool existed."""
    task = task_of("gemm")
    transcripts, values = [], []
    for pool_size in (0, None):
        arena = (
            Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=0)
            if pool_size == 0
            else Arena(task, [1, 2, 3], "cpu", tmp_path)
        )
        assert not arena.pool.active and arena.pool.describe() == "off"
        runs = count_references(monkeypatch)
        seen: list = []
        candidate = ByReference(load_reference(task)["run"], 2)
        real = candidate.__call__

        def spy(*args, real=real, seen=seen):
            seen.append(args[0].clone())
            return real(*args)

        result, session = judge(spy, arena, tmp_path)
        assert result.failure is None and session.draws is None and result.pool is None
        assert len(runs) == VERIFIED
        transcripts.append(session.worker.transcript)
        values.append(seen)
    assert transcripts[0] == transcripts[1]
    assert all(torch.equal(x, y) for x, y in zip(*values, strict=True))


def test_a_pool_that_cannot_be_allocated_leaves_the_path_without_one_with_the_reason(tmp_path, monkeypatch):
    def out_of_memory(*a, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(verified_pool, "run_reference", out_of_memory)  # each entry runs it, keyed or not
    task = task_of("gemm")
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED)
    assert not arena.pool.active and arena.pool.nbytes == 0
    assert arena.pool.describe().startswith("off: OutOfMemoryError: CUDA out of memory")
    monkeypatch.undo()
    runs = count_references(monkeypatch)
    result, session = judge(ByReference(load_reference(task)["run"], 2), arena, tmp_path)
    assert result.failure is None and session.draws is None and len(runs) == VERIFIED
    assert session.pool_record() == {
        "arena": arena.pool.describe(),
        "sampling": arena.sampling,
        "fused_inputs": arena.fused,
        "input_check_share": 1.0,  # the torch path (a CPU arena) compares every bit
        "session": f"new draws: {arena.pool.describe()}",
        "whole_checks": 0,  # the Arena default checks every call whole (no sampled.py)
    }


def test_entries_are_renewed_after_serving_their_sessions(tmp_path):
    task = task_of("gemm")
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=VERIFIED, pool_max_uses=2)
    first = [verified_pool.entry_values(arena, e, 0)["A"].clone() for e in arena.pool.entries[None]]
    run = load_reference(task)["run"]
    for seed in (1, 2):
        assert judge(ByReference(run, 2), arena, tmp_path, seed=seed)[0].failure is None
    assert arena.pool.renewed == 0 and all(e.uses == 2 for e in arena.pool.entries[None])
    result, _ = judge(ByReference(run, 2), arena, tmp_path, seed=3)  # renews before it starts
    assert result.failure is None and arena.pool.renewed == VERIFIED
    again = [verified_pool.entry_values(arena, e, 0)["A"] for e in arena.pool.entries[None]]
    assert not any(torch.equal(a, f) for a in again for f in first)


def _report(state: str) -> SandboxReport:
    return SandboxReport(mode="on", layers=[SandboxLayer(name="filesystem", state=state)])


def test_only_subjects_that_cannot_carry_entries_on_use_the_pool():
    barrier = verified_pool.barrier
    assert barrier(True, False, None, False) == ""  # the trusted baseline
    assert "Python worker" in barrier(False, False, _report("active"), True)
    assert barrier(False, True, _report("active"), False) == ""  # a native runner, fully jailed
    assert "partial" in barrier(False, True, _report("partial"), False)
    assert barrier(False, True, _report("partial"), True) == ""  # accepted only when asked
    assert "off" in barrier(False, True, None, True)  # no sandbox report: no jail
    s = EvalSettings()
    assert s.pool_entries == s.trials * s.verified_per_trial + 1 == 10
    assert EvalSettings(verified_pool=0).pool_entries == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TASKS))
def test_on_the_gpu_pool_entries_serve_verified_calls_and_the_reserve_is_kept(tmp_path, monkeypatch, name):
    """The CUDA path: entries on the device, no reference run in the session.

    A pool that would leave less than its reserve free is not built (the reason recorded), and the
    session runs without it.
    """
    task = task_of(name)
    run = load_reference(task)["run"]
    n_in = sum(1 for s in task.definition.inputs.values() if s.shape is not None)
    arena = Arena(task, [1, 2, 3], 0, tmp_path, pool_size=VERIFIED, pool_reserve=1 << 30)
    assert arena.pool.active and arena.pool.nbytes > 0
    entry = next(iter(arena.pool.entries.values()))[0]
    assert arena.fused.startswith("on"), arena.fused
    assert entry.keys is not None and not entry.fresh  # the fused path keeps an entry's keys alone
    assert all(t.is_cuda for t in (entry.keys, *entry.reference.values()))
    runs = count_references(monkeypatch)
    result, session = judge(ByReference(run, n_in), arena, tmp_path)
    assert result.failure is None and runs == []
    assert session.draws is not None and len(session.draws.taken) == VERIFIED
    huge = Arena(task, [1, 2, 3], 0, tmp_path, pool_size=VERIFIED, pool_reserve=1 << 50)
    assert not huge.pool.active and "less than the" in huge.pool.error
    before = len(runs)  # the seeded sets' references of the second arena
    result, session = judge(ByReference(run, n_in), huge, tmp_path)
    assert result.failure is None and session.draws is None and len(runs) - before == VERIFIED


def test_a_closed_arena_frees_its_pool_while_a_pending_turn_still_holds_it(tmp_path):
    """An arena dropped for room must free its device memory at once (a reviewer's find).

    A turn whose proofs still run keeps the arena object alive; the pool's entries, the sets' tensors
    and a plain blob must go with ``close`` all the same.
    """
    import gc
    import random
    import weakref

    arena = Arena(task_of("gemm"), [1, 2], "cpu", tmp_path, pool_size=2)
    draws = verified_pool.PoolDraws(arena.pool, random.Random(0))
    pending = [arena, draws]  # what a pending turn holds: the arena, its session's and result's draws
    entry = arena.pool.entries[None][0]
    tensors = [*entry.fresh.values(), *entry.reference.values(), arena.blob]
    tensors += [entry.keys] if entry.keys is not None else []
    refs = [weakref.ref(t) for t in tensors]
    del entry, tensors
    arena.close()
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    assert not pending[0].pool.active and "closed" in pending[0].pool.describe()
    assert draws.take(0) is None  # nothing left to serve
