"""Verified calls on new draws checked on a secret sample of independent indices (``sampled.py``).

The trusted ``Arena`` and ``Session`` run against the in-process worker on CPU tensors with small axes.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import ByReference, run_in_session  # noqa: E402

import ptxgym.evaluation.trusted.arena as arena_module  # noqa: E402
from ptxgym.evaluation.trusted import sampled  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.inputs import load_reference, run_reference  # noqa: E402
from ptxgym.records.errors import SchemaError  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402
from ptxgym.records.task_record import TaskRecord  # noqa: E402
from ptxgym.records.tasks import _check_independent, catalog, default_record  # noqa: E402

SETTINGS = EvalSettings(warmup=1, iterations=8, trials=2, correctness_sets=3, rotate_sets=3)
MHA = ("MhaFwd-sm90a", {"B": 2, "H": 4, "S": 16, "D": 8})  # 8 heads: a quarter is 2 of them
WHOLE = 1  # one new draw a timing is checked whole too, after its last trial
VERIFIED = SETTINGS.trials * SETTINGS.verified_per_trial


@pytest.fixture(autouse=True)
def few_units(monkeypatch):
    """Sample tiny tasks' few heads (the floor of 64 has its own test)."""
    monkeypatch.setattr(sampled, "MIN_UNITS", 1)


def mha(task_id: str = MHA[0]):
    return tiny_task(task_id, **MHA[1])


def Heads(task, spoil=None) -> ByReference:  # noqa: N802 - reads as the candidate it makes
    """The task's reference on every call, then ``spoil(outputs, call)`` applied to its outputs."""
    return ByReference(load_reference(task)["run"], len(task.definition.inputs), spoil=spoil)


def reference_runs(monkeypatch) -> list[tuple]:
    """The shapes of the first input of every reference run a session makes."""
    runs: list[tuple] = []
    real = arena_module.run_reference

    def counted(task, namespace, inputs, *rest):
        runs.append(tuple(next(iter(inputs.values())).shape))
        return real(task, namespace, inputs, *rest)

    monkeypatch.setattr(arena_module, "run_reference", counted)
    return runs


def test_the_catalog_declares_heads_and_rows_and_a_plain_gemm_dataset_gets_rows():
    tasks = catalog()
    assert tasks["MhaFwd-sm90a"].independent_axes == ("B", "H")
    assert tasks["MhaBwdCausal-sm90a"].independent_axes == ("B", "H")
    assert tasks["Gemm-sm90a"].independent_axes == ("M",)
    assert tasks["GqaPagedDecode-sm90a"].independent_axes == ()  # ragged batches: nothing declared
    assert default_record(tasks["Gemm-sm90a"].definition).independent_axes == ["M"]
    assert default_record(tasks["MhaFwd-sm90a"].definition).independent_axes == []


@pytest.mark.parametrize(
    ("axes", "why"),
    [
        (["X"], "distinct axes"),
        (["H", "B"], "must lead"),  # not in the tensors' order
        (["S"], "must lead"),  # not leading
        (["B", "B"], "distinct axes"),
    ],
)
def test_a_declaration_the_tensors_do_not_bear_out_is_refused(axes, why):
    defn = catalog()["MhaFwd-sm90a"].definition
    with pytest.raises(SchemaError, match=why):
        _check_independent(defn, axes, "test")
    TaskRecord(name="x", definition="d", family="f", baseline="cublas", independent_axes=axes)  # data only


def test_a_declaration_must_lead_every_output():
    gemm = catalog()["Gemm-sm90a"].definition  # A [M, K], B [N, K], C [M, N]
    _check_independent(gemm, ["M"], "test")
    spec = gemm.outputs["C"].model_copy(update={"shape": ["N"]})
    summed = gemm.model_copy(update={"outputs": {**gemm.outputs, "colsum": spec}})  # a sum over rows
    with pytest.raises(SchemaError, match=r"every output, not only some \(\['colsum'\]\)"):
        _check_independent(summed, ["M"], "test")


def test_a_cut_keeps_the_rank_and_an_index_of_it_lies_where_it_came_from():
    task = mha()
    sample = sampled.Sample((2, 4), (1, 6))  # (b 0, h 1) and (b 1, h 2)
    q = torch.arange(2 * 4 * 3 * 2, dtype=torch.float32).reshape(2, 4, 3, 2)
    got = sampled.cut(task, {"Q": q, "causal": True}, sample)
    assert got["causal"] is True and got["Q"].shape == (1, 2, 3, 2)
    assert torch.equal(got["Q"][0, 0], q[0, 1]) and torch.equal(got["Q"][0, 1], q[1, 2])
    locate = sampled.locator(sample)
    assert locate([0, 1, 2, 1]) == [1, 2, 2, 1] and locate([0, 0, 0]) == [0, 1, 0]
    assert sampled.cut_shapes(task, sample)["LSE"] == (1, 2, 16)
    gemm = tiny_task("Gemm-sm90a", M=8, N=4, K=2)
    rows = sampled.Sample((8,), (3, 5))
    assert sampled.locator(rows)([1, 2]) == [5, 2]
    assert sampled.cut_shapes(gemm, rows) == {"A": (2, 2), "B": (4, 2), "C": (2, 4)}


def test_draws_take_at_least_one_index_and_none_means_the_whole():
    task, rng = mha(), random.Random(1)
    assert len(sampled.draw(task, 0.25, rng).picks) == 2
    assert len(sampled.draw(task, 0.01, rng).picks) == 1
    assert sampled.draw(task, 1.0, rng) is None
    assert sampled.draw(tiny_task("MhaFwd-sm90a", B=1, H=1, S=16, D=8), 0.25, rng) is None
    draws = {sampled.draw(task, 0.25, rng).picks for _ in range(200)}
    assert len(draws) == 28  # every pair of the 8 heads comes up: the sample is not fixed


def test_an_honest_candidate_passes_with_each_new_draw_referenced_on_a_quarter(tmp_path, monkeypatch):
    task = mha()
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.25)
    assert arena.sampling.startswith("on: 2 of 8 indices of (B, H)"), arena.sampling
    runs = reference_runs(monkeypatch)
    result, _ = run_in_session(Heads(task), arena, SETTINGS, tmp_path)
    assert result.failure is None, result.failure
    assert arena.sampled_checks == VERIFIED  # the whole place's too, at its trial's end like the others
    assert sorted(runs) == [(1, 2, 16, 8)] * VERIFIED + [(2, 4, 16, 8)] * WHOLE


def test_too_few_indices_or_a_tolerance_that_lets_elements_fail_keep_whole_checks(tmp_path, monkeypatch):
    monkeypatch.undo()  # the floor as shipped
    assert sampled.MIN_UNITS == 64
    few = Arena(mha(), [1], "cpu", tmp_path, sample_share=0.25)
    assert few.sampling == "off: its independent axes (B, H) have 8 indices, fewer than 64"
    enough = tiny_task("MhaFwd-sm90a", B=2, H=32, S=4, D=8)
    assert Arena(enough, [1], "cpu", tmp_path, sample_share=0.25).sampling.startswith("on: 16 of 64")
    loose = enough.model_copy(
        update={"tolerance": enough.tolerance.model_copy(update={"required_match": 0.99})}
    )
    assert "required_match" in Arena(loose, [1], "cpu", tmp_path, sample_share=0.25).sampling


def test_a_kernel_that_skips_one_head_on_every_timed_call_fails_every_session(tmp_path):
    """A reviewer's cheat: full work on correctness calls, one head of eight at zero on timed ones.

    The worker knows which calls are timed. Sampled checks alone passed 4 of 60 such sessions; one new
    draw a timing checked whole, at a secret place, fails them all.
    """
    task = mha()
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.25)

    def skip(outs, call):
        if call > SETTINGS.correctness_sets:
            outs[0][0, 0].zero_()

    for seed in range(8):
        result, _ = run_in_session(Heads(task, skip), arena, SETTINGS, tmp_path, seed=seed)
        assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL


def test_whole_references_where_sampling_is_off(tmp_path, monkeypatch):
    task = mha()
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path)  # share 1: the default of an Arena
    assert arena.sampling.startswith("off: EvalSettings.verify_sample_share is 1")
    runs = reference_runs(monkeypatch)
    result, _ = run_in_session(Heads(task), arena, SETTINGS, tmp_path)
    assert result.failure is None and arena.sampled_checks == 0 and arena.sampling_runs == 0
    assert runs == [(2, 4, 16, 8)] * (SETTINGS.trials * SETTINGS.verified_per_trial)
    gqa_like = task.model_copy(update={"independent_axes": ()})
    none = Arena(gqa_like, [1], "cpu", tmp_path, sample_share=0.25)
    assert none.sampling.startswith("off: the task declares")


@pytest.mark.parametrize(
    ("divisor", "why"),
    [(1000, "exceed atol"), (50000, "relative norm difference")],  # ~0.3 off on LSE ~3.3; ~0.006 off
)
def test_a_false_declaration_turns_sampling_off_at_the_arena_with_the_reason(
    tmp_path, monkeypatch, divisor, why
):
    task = mha()
    coupled = task.definition.reference + (
        "\n\n_run = run\n\ndef run(Q, K, V, causal=False):\n"
        "    O, LSE = _run(Q, K, V, causal)\n"
        f"    return O, LSE + LSE.sum() / {divisor}  # every head's LSE now depends on all heads\n"
    )
    task = task.model_copy(update={"definition": task.definition.model_copy(update={"reference": coupled})})
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.25)
    assert arena.sampling.startswith("off: the reference on 2 of 8 indices"), arena.sampling
    assert "do not hold" in arena.sampling and why in arena.sampling
    runs = reference_runs(monkeypatch)
    result, _ = run_in_session(Heads(task), arena, SETTINGS, tmp_path)
    assert result.failure is None and arena.sampled_checks == 0 and runs[0] == (2, 4, 16, 8)


def test_a_head_left_unwritten_or_nan_anywhere_fails_whatever_the_sample(tmp_path):
    task = mha()
    for spoil, status in [
        (lambda outs, call: outs[0][1, 3, 5].fill_(float("nan")), Status.NONFINITE),
        (lambda outs, call: arena_module.poison_(outs[1][1, 3]), Status.UNWRITTEN),
    ]:
        arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.125)  # one head of 8 sampled

        def timed_only(outs, call, spoil=spoil):
            if call > SETTINGS.correctness_sets:  # after the correctness calls
                spoil(outs, call)

        result, _ = run_in_session(Heads(task, timed_only), arena, SETTINGS, tmp_path)
        assert result.failure is not None and result.failure.status is status, result.failure
        assert result.failure.check.outputs and arena.sampled_checks >= 1


def test_a_wrong_head_is_named_where_it_lies_in_the_whole_output():
    task = mha()
    torch.manual_seed(0)
    outputs = {"O": torch.randn(2, 4, 16, 8).bfloat16(), "LSE": torch.randn(2, 4, 16)}
    sample = sampled.Sample((2, 4), (2, 7))
    expected = sampled.cut(task, {k: v.clone() for k, v in outputs.items()}, sample)
    assert sampled.check(outputs, expected, task, sample).passed
    outputs["LSE"][1, 3, 9] += 5.0  # head (1, 3) = index 7, the sample's second
    check = sampled.check(outputs, expected, task, sample)
    assert check.status is Status.INCORRECT_NUMERICAL
    lse = next(c for c in check.outputs if c.name == "LSE")
    assert lse.first_bad_index == [1, 3, 9] and "of 32 sampled elements" in lse.message
    outputs["O"][0, 0, 0, 0] = float("inf")  # outside the sample: the whole scan still finds it
    assert sampled.check(outputs, expected, task, sample).status is Status.NONFINITE


def test_a_kernel_wrong_on_half_the_heads_of_new_draws_fails(tmp_path):
    """Wrong on heads 4-7 (batch 1) of every timed call.

    Each sampled check of 2 heads misses them with probability 6/28, all six verified calls with ~1e-4
    (the draws seeded here, so the test cannot flake).
    """
    task = mha()
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.25)
    arena._sample_rng = random.Random(5)

    def half(outs, call):
        if call > SETTINGS.correctness_sets:
            outs[0][1].mul_(1.5)

    result, _ = run_in_session(Heads(task, half), arena, SETTINGS, tmp_path)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    assert result.failure.check.outputs[0].first_bad_index[0] == 1  # batch 1, where the error is


def test_the_backward_and_the_gemm_run_their_references_on_a_sample(tmp_path, monkeypatch):
    real = arena_module.run_reference
    bwd = tiny_task("MhaBwd-sm90a", B=2, H=4, S=16, D=8)  # its derived O and LSE cut like the rest
    strict = bwd.tolerance.model_copy(update={"required_match": 1.0})  # its own lets 1e-6 fail: whole
    for task, cut, whole in [
        (bwd.model_copy(update={"tolerance": strict}), (1, 2, 16, 8), (2, 4, 16, 8)),
        (tiny_task("Gemm-sm90a", M=64, N=48, K=32), (16, 32), (64, 32)),
    ]:
        arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.25)
        assert arena.sampling.startswith("on:"), arena.sampling
        runs = reference_runs(monkeypatch)
        result, _ = run_in_session(Heads(task), arena, SETTINGS, tmp_path)
        assert result.failure is None, result.failure
        assert set(runs) == {cut, whole} and runs.count(whole) == WHOLE
        monkeypatch.setattr(arena_module, "run_reference", real)


def test_the_sampled_reference_equals_that_cut_of_the_whole_one():
    task = tiny_task("MhaFwdCausal-sm90a", B=2, H=3, S=16, D=8)
    ns = load_reference(task)
    g = torch.Generator().manual_seed(3)
    ins = {n: torch.randn(task.shapes()[n], generator=g).bfloat16() for n in ("Q", "K", "V")}
    whole = run_reference(task, ns, ins)
    sample = sampled.Sample((2, 3), (0, 4, 5))
    part = run_reference(task, ns, sampled.cut(task, ins, sample), sampled.cut_shapes(task, sample))
    for name, value in sampled.cut(task, whole, sample).items():
        assert torch.equal(part[name], value), name


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("task_id", "axes"),
    [
        ("MhaFwdCausal-sm90a", {"B": 2, "H": 32, "S": 256, "D": 64}),
        ("Gemm-sm90a", {"M": 1024, "N": 512, "K": 256}),
    ],
)
def test_on_the_gpu_the_self_test_holds_and_sampled_checks_pass_an_honest_kernel(
    tmp_path, monkeypatch, task_id, axes
):
    """CUDA tensors: the self-test passes and a session's new draws are checked on a sample.

    The reference on a cut must agree with the whole one within ``AGREEMENT`` (cuBLAS may pick another
    algorithm for fewer GEMM rows).
    """
    monkeypatch.undo()  # the floor as shipped
    task = tiny_task(task_id, **axes)
    arena = Arena(task, [1, 2, 3], 0, tmp_path, sample_share=0.25)
    assert arena.sampling.startswith("on:"), arena.sampling
    runs = reference_runs(monkeypatch)
    result, _ = run_in_session(Heads(task), arena, SETTINGS, tmp_path)
    assert result.failure is None, result.failure
    assert arena.sampled_checks == VERIFIED and len(runs) == VERIFIED + WHOLE


def test_the_whole_check_runs_after_the_last_trial_so_no_trial_end_is_longer(tmp_path, monkeypatch):
    """No trial's end is longer than another's: the whole reference runs after the timing's last call.

    A reviewer timed the gap after each trial: a whole reference there (~4x a quarter's) told the worker
    which trial held it, and a kernel honest until then passed 13 of 30 sessions.
    """
    task = mha()
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, sample_share=0.25)
    candidate = Heads(task)
    order: list[tuple[int, tuple]] = []
    real = arena_module.run_reference

    def counted(task_, namespace, inputs, *rest):
        order.append((candidate.calls, tuple(next(iter(inputs.values())).shape)))
        return real(task_, namespace, inputs, *rest)

    monkeypatch.setattr(arena_module, "run_reference", counted)
    for seed in range(4):
        order.clear()
        result, session = run_in_session(candidate, arena, SETTINGS, tmp_path, seed=seed)
        assert result.failure is None and session.whole_checks == 1
        whole = [calls for calls, shape in order if shape == (2, 4, 16, 8)]
        assert whole == [candidate.calls]  # after the last call of the timing, and only there
        assert session.pool_record()["whole_checks"] == 1


def test_a_pool_without_new_draws_still_checks_one_call_whole(tmp_path, monkeypatch):
    """Without the pool's new draws, the whole place is drawn among every verified call.

    With ``pool_new_draws_per_trial`` 0 and a pool too small for the session, the fall-back draws were
    all sampled and none checked whole (a reviewer's find). Now one call is, an entry's (whole anyway)
    or a fall-back draw's (a whole reference run after the last call).
    """
    task = mha()
    arena = Arena(task, [1, 2, 3], "cpu", tmp_path, pool_size=2, sample_share=0.25)
    settings = SETTINGS.model_copy(update={"pool_new_draws_per_trial": 0})
    runs = reference_runs(monkeypatch)
    whole_runs = 0
    for seed in range(8):
        runs.clear()
        result, session = run_in_session(Heads(task), arena, settings, tmp_path, seed=seed, pool=True)
        assert result.failure is None and session.draws is not None and session.whole_checks == 1
        whole_runs += runs.count((2, 4, 16, 8))
    assert whole_runs >= 1  # some sessions' whole place fell on a new draw (4 of the 6 verified calls)
