"""The comparison math on CPU tensors: poison, unwritten, non-finite, tolerance, relative norm, inputs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxgym.evaluation.compare import (  # noqa: E402
    check_call,
    compare_output,
    poison_,
    same_bits,
    unwritten_mask,
)
from ptxgym.records.feedback import Status  # noqa: E402
from ptxgym.records.tasks import Tolerance  # noqa: E402

TOL = Tolerance()


def _ref(shape=(64, 48), dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int32])
def test_poison_is_recognised_and_not_a_computed_nan(dtype):
    t = torch.zeros(10, dtype=dtype)
    poison_(t)
    assert bool(unwritten_mask(t).all())
    if dtype.is_floating_point:
        assert bool(t.isnan().all())
        computed = torch.full((10,), float("nan"), dtype=dtype)  # what 0/0 gives
        assert not bool(unwritten_mask(computed).any())


def test_exact_output_passes_with_zero_error():
    ref = _ref()
    check = compare_output("C", ref.clone(), ref, TOL)
    assert check.status is Status.PASSED
    assert check.max_abs_error == 0 and check.rel_norm_error == 0 and check.mismatch_ratio == 0


def test_partly_unwritten_output():
    ref = _ref()
    out = ref.clone()
    poison_(out[32:])
    check = compare_output("C", out, ref, TOL)
    assert check.status is Status.UNWRITTEN
    assert check.unwritten == 32 * 48 and check.first_bad_index == [32, 0]
    assert "never written" in check.message


def test_nonfinite_output():
    ref = _ref()
    out = ref.clone()
    out[5, 7] = float("nan")
    out[6, 0] = float("inf")
    check = compare_output("C", out, ref, TOL)
    assert check.status is Status.NONFINITE and check.nonfinite == 2 and check.first_bad_index == [5, 7]


def test_element_rule_is_abs_or_rel():
    ref = torch.tensor([100.0, 0.001, 5.0])
    within_rel = torch.tensor([100.9, 0.001, 5.0])  # rel 0.9 %: passes
    within_abs = torch.tensor([100.0, 0.0105, 5.0])  # abs 0.0095 <= 0.01: passes
    assert compare_output("x", within_rel, ref, TOL).status is Status.PASSED
    assert compare_output("x", within_abs, ref, TOL).status is Status.PASSED
    bad = torch.tensor([100.0, 0.001, 5.2])  # abs 0.2, rel 4 %: fails
    check = compare_output("x", bad, ref, TOL)
    assert check.status is Status.INCORRECT_NUMERICAL
    assert check.mismatched == 1 and check.first_bad_index == [2]
    assert check.max_abs_error == pytest.approx(0.2, rel=1e-5)
    assert "got 5.2, expected 5" in check.message


def test_relative_norm_bound_catches_uniform_small_errors():
    ref = torch.full((1000,), 1.0)
    out = ref * 1.009  # every element within rtol 1 %, norm error 0.9 %
    assert compare_output("x", out, ref, TOL).status is Status.PASSED
    strict = Tolerance(rel_norm=0.005)
    check = compare_output("x", out, ref, strict)
    assert check.status is Status.INCORRECT_NUMERICAL and "relative norm" in check.message


def test_input_mutation_takes_precedence():
    a = _ref((8, 8))
    inputs = {"A": a.clone()}
    inputs["A"][0, 0] += 1
    ref = _ref()
    check = check_call({"C": ref.clone()}, {"C": ref}, inputs, {"A": a}, TOL)
    assert check.status is Status.INPUT_MUTATED and check.mutated_inputs == ["A"]


def test_worst_output_decides():
    ref_o, ref_l = _ref(), _ref((64,), torch.float32)
    out_o, out_l = ref_o.clone(), ref_l.clone()
    out_o[0, 0] = 99.0
    poison_(out_l[3:5])
    check = check_call({"O": out_o, "LSE": out_l}, {"O": ref_o, "LSE": ref_l}, {}, {}, TOL)
    assert check.status is Status.UNWRITTEN and "LSE" in check.message


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int8"])
def test_same_bits_compares_bits_in_words_and_bytes(dtype):
    dt = getattr(torch, dtype)
    a = (torch.arange(24) - 5).to(dt)
    assert same_bits(a, a.clone()) and same_bits(a[:0], a[:0].clone())
    b = a.clone()
    b[-1] = b[-1] + 1
    assert not same_bits(a, b)
    assert not same_bits(a, a.clone().reshape(4, 6)) and not same_bits(a, a.to(torch.float64))
    odd = a[1:]  # 23 elements at an offset: not 8-byte words, compared as bytes
    assert same_bits(odd, odd.clone()) and not same_bits(odd, b[1:])
    if dt.is_floating_point:
        z, nz = torch.zeros(8, dtype=dt), torch.zeros(8, dtype=dt)
        nz[5] = -0.0
        assert torch.equal(z, nz) and not same_bits(z, nz)  # equal numbers, different bits
