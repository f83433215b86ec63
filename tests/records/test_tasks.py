"""The task catalog: five primary BF16 workloads for Hopper and Blackwell.

The rest of the catalog, the PTXBench suite, is tested in test_task_records.py.
"""

from __future__ import annotations

import pytest

from ptxgym.records.errors import UnknownTaskError
from ptxgym.records.tasks import catalog, get_task

NAMES = ["Gemm", "MhaFwd", "MhaFwdCausal", "MhaBwd", "MhaBwdCausal"]


def test_catalog_has_every_workload_for_both_archs() -> None:
    ids = {tid for tid, t in catalog().items() if t.primary}
    assert ids == {f"{n}-{a}" for n in NAMES for a in ("sm90a", "sm100a")}


def test_gemm_shapes_and_flops() -> None:
    t = get_task("Gemm-sm90a")
    assert t.shapes() == {"A": (8192, 5120), "B": (7168, 5120), "C": (8192, 7168)}
    assert t.flops == pytest.approx(2 * 8192 * 7168 * 5120)
    assert t.baseline.name == "cublas"
    assert t.arch_spec.is_target_opcode("HGMMA.64x256x16.F32.BF16")
    assert t.arch_spec.is_target_opcode("UTMALDG.2D")
    assert not t.arch_spec.is_target_opcode("UTMACCTL.PF")
    assert not t.arch_spec.is_target_opcode("HMMA.16816.F32.BF16")


def test_attention_contracts() -> None:
    fwd, bwd = get_task("MhaFwd-sm90a"), get_task("MhaBwdCausal-sm100a")
    assert list(fwd.definition.inputs) == ["Q", "K", "V"]
    assert list(fwd.definition.outputs) == ["O", "LSE"]
    assert fwd.definition.outputs["LSE"].dtype == "float32"
    assert fwd.shapes()["LSE"] == (4, 48, 4096)
    assert list(bwd.definition.inputs) == ["Q", "K", "V", "O", "dO", "LSE"]
    assert list(bwd.definition.outputs) == ["dQ", "dK", "dV"]
    assert bwd.flops == pytest.approx(0.5 * 2.5 * fwd.flops)  # causal halves, backward is 2.5x forward
    assert bwd.arch_spec.is_target_opcode("UTCHMMA") and bwd.arch_spec.is_target_opcode("LDTM.x16")
    assert not bwd.arch_spec.is_target_opcode("HGMMA.64x128x16.F32.BF16")


def test_floor_is_below_measured_baselines() -> None:
    # FACTS.md: cuBLAS 0.778 ms, cuDNN fwd 2.743 ms on the H200; the floor must be a true lower bound.
    assert get_task("Gemm-sm90a").floor_ms("NVIDIA H200") < 0.778
    assert get_task("MhaFwd-sm90a").floor_ms("NVIDIA H200") < 2.743


@pytest.mark.parametrize("key", ["Gemm-sm90a", "ptxgym/Gemm-sm90a-v0", "gemm_n7168_k5120@sm_90a"])
def test_lookup_forms(key: str) -> None:
    assert get_task(key).id == "Gemm-sm90a"


def test_unknown_task_lists_known_ids() -> None:
    with pytest.raises(UnknownTaskError, match="Gemm-sm90a"):
        get_task("Gemv-sm90a")
