"""Input generation and the reference oracle on CPU (small var axes)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import small_task  # noqa: E402

from ptxgym.evaluation.trusted.inputs import (  # noqa: E402
    generate_inputs,
    load_reference,
    reference_options,
    run_reference,
)
from ptxgym.records.errors import InfraError  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402


def test_inputs_are_seeded_random_and_never_zero():
    task = small_task("Gemm-sm90a", M=8)
    ns = load_reference(task)
    a = generate_inputs(task, ns, 5, "cpu")
    b = generate_inputs(task, ns, 5, "cpu")
    c = generate_inputs(task, ns, 6, "cpu")
    assert list(a) == ["A", "B"] and a["A"].dtype == torch.bfloat16 and tuple(a["A"].shape) == (8, 5120)
    assert torch.equal(a["A"], b["A"]) and not torch.equal(a["A"], c["A"])
    assert float(a["A"].float().std()) == pytest.approx(1.0, rel=0.05)
    assert float((a["B"] == 0).float().mean()) < 1e-3


def test_reference_options_and_outputs():
    task = small_task("MhaFwdCausal-sm90a", S=8)
    ns = load_reference(task)
    assert reference_options(task, ns) == {"causal": True}
    out = run_reference(task, ns, generate_inputs(task, ns, 1, "cpu"))
    assert list(out) == ["O", "LSE"] and out["LSE"].dtype == torch.float32


def test_broken_derived_function_is_an_infrastructure_error():
    task = small_task("MhaBwd-sm90a", S=8)
    broken = task.definition.reference.replace("def forward_state(", "def renamed_state(")
    task = task.model_copy(update={"definition": task.definition.model_copy(update={"reference": broken})})
    with pytest.raises(InfraError, match="does not define"):
        generate_inputs(task, load_reference(task), 1, "cpu")


def test_reference_with_wrong_output_shape_is_reported():
    task = get_task("Gemm-sm90a")
    bad = task.definition.reference.replace(
        "return C.to(torch.bfloat16)", "return C.to(torch.bfloat16)[:, :8]"
    )
    task = small_task("Gemm-sm90a", M=4)
    task = task.model_copy(update={"definition": task.definition.model_copy(update={"reference": bad})})
    ns = load_reference(task)
    with pytest.raises(InfraError, match="definition says"):
        run_reference(task, ns, generate_inputs(task, ns, 1, "cpu"))
