"""Sign perturbations are exact: the reference on perturbed inputs equals the perturbed reference."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import fixed_backward, small_task  # noqa: E402

from ptxgym.evaluation.trusted.inputs import generate_inputs, load_reference, run_reference  # noqa: E402
from ptxgym.evaluation.trusted.perturb import SignPerturbation, groups_for  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402


@pytest.mark.parametrize(
    ("task", "changed"),
    [
        (small_task("Gemm-sm90a", M=16), ("A", "B")),
        (small_task("MhaFwd-sm90a", S=16), ("V",)),
        (small_task("MhaFwdCausal-sm90a", S=16), ("V",)),
        (fixed_backward(small_task("MhaBwd-sm90a", S=16)), ("dO",)),
        (fixed_backward(small_task("MhaBwdCausal-sm90a", S=16)), ("dO",)),
    ],
    ids=["gemm", "fwd", "fwd-causal", "bwd", "bwd-causal"],
)
def test_expected_outputs_match_the_reference_exactly(task, changed):
    ns = load_reference(task)
    base = generate_inputs(task, ns, seed=11, device="cpu")
    ref = run_reference(task, ns, base)
    p = SignPerturbation(task.definition, task.definition.axis_values(task.workload))
    assert p.active and p.changed_inputs == changed
    gen = torch.Generator().manual_seed(3)
    state, current = p.identity("cpu"), {k: v.clone() for k, v in base.items()}
    for _ in range(3):
        signs = p.draw(gen, "cpu")
        p.apply_inputs(current, signs)
        state = p.compose(state, signs)
    assert any(not torch.equal(current[n], base[n]) for n in changed)
    expected_in = p.expected_inputs(base, state)
    assert all(torch.equal(expected_in[n], current[n]) for n in current)
    expected = p.expected(ref, state)
    actual = run_reference(task, ns, current)
    for name in actual:
        assert torch.equal(expected[name], actual[name]), name
    assert any(not torch.equal(expected[n], ref[n]) for n in ref if n != "LSE")


def test_unrecognised_definitions_get_no_groups():
    task = get_task("Gemm-sm90a")
    renamed = task.definition.model_copy(update={"op_type": "other"})
    assert groups_for(renamed) == ()
    assert not SignPerturbation(renamed, task.definition.axis_values(task.workload)).active
