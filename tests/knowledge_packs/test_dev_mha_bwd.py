"""bench/dev_mha_bwd.py, the CPU half: reference math, diagnostics, log parsing, report, sync.

The harness's GPU half (kernel calls, timing, ncu) runs only on the device; everything it decides a
verdict with is checked here on CPU torch at tiny shapes, with torch stand-ins for the kernel.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bwd():
    """bench/dev_mha_bwd.py as a module (bench/ on sys.path for its dev_mha_fwd import)."""
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("dev_mha_bwd", ROOT / "bench" / "dev_mha_bwd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _qkv(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen, dtype=torch.float64).float() for _ in range(4)]


@pytest.mark.parametrize("causal", [False, True])
def test_reference_backward_equals_autograd(bwd, causal: bool) -> None:
    """The explicit formulas (given O and LSE) equal autograd through fp32 softmax attention."""
    q, k, v, do = _qkv((1, 2, 37, 128))
    o, lse = bwd.forward_reference(q, k, v, causal)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    mask = torch.ones(37, 37, dtype=torch.bool).tril() if causal else None
    oa = torch.nn.functional.scaled_dot_product_attention(qa, ka, va, attn_mask=mask)
    oa.backward(do)
    assert torch.allclose(o, oa.detach(), atol=1e-5)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(128)
    if causal:
        s = s.masked_fill(~mask, float("-inf"))
    assert torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-5)
    grads = bwd.backward_reference(q, k, v, o, do, lse, causal)
    for got, want in zip(grads, (qa.grad, ka.grad, va.grad), strict=True):
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), float((got - want).abs().max())


@pytest.mark.parametrize("name", ["mha_bwd_d128", "mha_bwd_d128_causal"])
def test_reference_matches_the_task_definition(bwd, name: str) -> None:
    """Forward state and gradients agree with the definition's own reference code (bf16 outputs)."""
    path = ROOT / "envs" / "data" / "definitions" / "attention" / f"{name}.json"
    namespace: dict = {}
    exec(json.loads(path.read_text())["reference"], namespace)  # noqa: S102 - the catalog's trusted code
    causal = name.endswith("causal")
    q, k, v, do = (t.to(torch.bfloat16) for t in _qkv((1, 2, 40, 128), seed=1))
    state = namespace["forward_state"](q, k, v, causal=causal)
    o32, lse = bwd.forward_reference(q, k, v, causal)
    assert torch.allclose(o32.to(torch.bfloat16).float(), state["O"].float(), atol=1e-2)
    assert torch.allclose(lse, state["LSE"], atol=1e-5)
    want = namespace["run"](q, k, v, state["O"], do, state["LSE"], causal=causal)
    got = bwd.backward_reference(q, k, v, state["O"], do, state["LSE"], causal)
    for g, w in zip(got, want, strict=True):
        d = bwd.diagnose(g.to(torch.bfloat16), w, torch.zeros_like(w, dtype=torch.bool))
        assert d["pass"] and d["mismatch"] == 0, d


def _exact(bwd, causal):
    def fn(q, k, v, o, do, lse, dq, dk, dv):
        for out, g in zip((dq, dk, dv), bwd.backward_reference(q, k, v, o, do, lse, causal), strict=True):
            out.copy_(g)

    return fn


def test_check_passes_an_exact_kernel_and_locates_a_broken_block(bwd) -> None:
    """check(): a correct stand-in passes; wrong rows, unwritten rows and a mutated input are pinned down."""
    res, _ = bwd.check(_exact(bwd, True), (1, 3, 200), True, seed=5, device="cpu")
    assert res["pass"] and res["bad_tensors"] == [] and res["mutated_inputs"] == []

    exact = _exact(bwd, False)

    def broken(q, k, v, o, do, lse, dq, dk, dv):
        exact(q, k, v, o, do, lse, dq, dk, dv)
        dk[0, 1, 128:192] *= 3.0  # key block 1 (128 rows), query-size block 2 (64 rows), head 1
        dv[0, 2, 64:70] = torch.nan  # computed (written) NaNs, not the poison pattern
        do[0, 0, 0, 0] += 1.0  # the kernel must not write its inputs

    res, _ = bwd.check(broken, (1, 3, 200), False, seed=6, device="cpu")
    assert not res["pass"]
    assert res["mutated_inputs"] == ["dO"]
    assert res["bad_tensors"] == ["dK", "dV"]
    dk = res["tensors"]["dK"]
    assert dk["rows64"]["first"] == {2: dk["mismatch"]} and dk["rows128"]["first"] == {1: dk["mismatch"]}
    assert dk["heads"] == {"bad": 1, "of": 3, "first": [[0, 1]]}
    assert dk["first_bad"][:2] == [0, 1] and 128 <= dk["first_bad"][2] < 192
    dv = res["tensors"]["dV"]
    assert dv["nonfinite_written"] == 6 * 128 and dv["unwritten"] == 0
    assert dv["row16_in_64"] == [6 * 128, 0, 0, 0]


def test_unwritten_elements_are_told_apart_from_nans(bwd) -> None:
    """Rows a kernel never writes keep ptxgym's poison and count as unwritten, not as computed NaN."""
    exact = _exact(bwd, False)

    def skips(q, k, v, o, do, lse, dq, dk, dv):
        full = torch.empty_like(dq)
        exact(q, k, v, o, do, lse, full, dk, dv)
        dq[:, :, :64] = full[:, :, :64]  # rows 64.. (the ragged tail block too) never written

    res, _ = bwd.check(skips, (1, 1, 100), False, seed=7, device="cpu")
    t = res["tensors"]["dQ"]
    assert res["bad_tensors"] == ["dQ"]
    assert t["unwritten"] == 36 * 128 and t["nonfinite_written"] == 0
    assert t["rows64"] == {"bad_blocks": 1, "blocks": 2, "first": {1: 36 * 128}}


def test_allowed_fraction_admits_one_in_a_million(bwd) -> None:
    """The backward tolerance admits 1e-6 of the elements (1 of 1,048,576), not 2."""
    ref = torch.randn(1, 1, 8192, 128)
    none = torch.zeros_like(ref, dtype=torch.bool)
    out = ref.clone()
    out[0, 0, 5, 7] += 1.0
    d = bwd.diagnose(out, ref, none)
    assert d["allowed"] == 1 and d["mismatch"] == 1 and d["pass"]
    assert d["max_abs_at"] == [0, 0, 5, 7] and d["first_bad"] == [0, 0, 5, 7]
    out[0, 0, 6, 7] += 1.0
    assert not bwd.diagnose(out, ref, none)["pass"]


def test_rel_norm_bound_fails_an_output_whose_elements_pass(bwd) -> None:
    """Small values all inside atol but uniformly off by 5% break the 2e-2 relative-norm bound."""
    ref = torch.full((1, 1, 64, 128), 0.1)
    d = bwd.diagnose(ref * 1.05, ref, torch.zeros_like(ref, dtype=torch.bool))
    assert d["mismatch"] == 0 and d["rel_norm"] == pytest.approx(0.05, rel=1e-3) and not d["pass"]


PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN3mha10bwd_kernelILb1EEEvPf' for 'sm_90a'
ptxas info    : Function properties for _ZN3mha10bwd_kernelILb1EEEvPf
    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to ...
ptxas info    : Used 168 registers, used 16 barriers, 2048 bytes smem
ptxas info    : Compiling entry function '_ZN3mha4prepEPf' for 'sm_90a'
ptxas info    : Function properties for _ZN3mha4prepEPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 21 registers, used 0 barriers
x.cu(3): warning #177-D: variable "unused" was declared but never referenced
"""


def test_ptxas_report_per_kernel_and_loud_warnings(bwd) -> None:
    kernels = bwd.ptxas_report(PTXAS_LOG)
    assert [k["regs"] for k in kernels] == [168, 21]
    assert kernels[0]["spill"] == [8, 4] and kernels[0]["stack"] == 8 and kernels[0]["smem_static"] == 2048
    assert kernels[0]["barriers"] == 16 and kernels[1]["smem_static"] == 0
    assert kernels[1]["name"] in ("mha::prep", "_ZN3mha4prepEPf")  # demangled where c++filt exists
    ptxas, other = bwd.warnings_of(PTXAS_LOG)
    assert len(ptxas) == 1 and "C7510" in ptxas[0] and len(other) == 1 and "#177-D" in other[0]
    report = bwd.build_report(
        {
            "tag": "base",
            "ok": True,
            "causal": False,
            "flags": [],
            "build_s": 1.0,
            "source": "x.cu",
            "so": "x.so",
            "kernels": kernels,
            "ptxas_warnings": ptxas,
            "other_warnings": other,
        }
    )
    assert "!!!!!!!! PTXAS WARNING [base]: ptxas warning : (C7510)" in report


def test_sass_census_per_function(bwd) -> None:
    sass = "\n".join(
        [
            "\t\tFunction : _ZN3mha4prepEPf",
            "  /*0010*/ REDG.E.ADD.F32.FTZ.RN.STRONG.GPU [R2], R5 ;",
            "  /*0020*/ RED.E.ADD [R2], R5 ;",
            "\t\tFunction : _ZN3mha10bwd_kernelILb1EEEvPf",
            "  /*0000*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4] ;",
            "  /*0010*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;",
            "  /*0020*/ UTMALDG.2D [UR8], [UR4] ;",
            "  /*0030*/ UBLKRED.G.S.ADD.F32.RN [UR4], [UR6], UR8 ;",
            "  /*0040*/ WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        ]
    )
    census = bwd.sass_by_kernel(sass)
    assert census["_ZN3mha4prepEPf"]["REDG"] == 1 and census["_ZN3mha4prepEPf"]["RED"] == 1
    main = census["_ZN3mha10bwd_kernelILb1EEEvPf"]
    counts = [main[k] for k in ("HGMMA", "UTMALDG", "UBLKRED", "WARPGROUP.DEPBAR", "RED", "REDG")]
    assert counts == [2, 1, 1, 1, 0, 0]


def test_sync_generates_the_causal_file_and_reports_a_missing_source(bwd, tmp_path, capsys) -> None:
    src, dst = tmp_path / "MhaBwd.cu", tmp_path / "MhaBwdCausal.cu"
    assert bwd.sync(src, dst) == 1
    assert "MhaBwd.cu does not exist yet" in capsys.readouterr().err
    src.write_text("// kernel\n")
    assert bwd.sync(src, dst) == 0
    text = dst.read_text()
    assert text.startswith("// MhaBwdCausal.cu") and "GENERATED from MhaBwd.cu" in text
    assert "#ifndef MHA_CAUSAL\n#define MHA_CAUSAL 1\n#endif\n// kernel\n" in text


def test_build_refuses_a_missing_stand_in_without_calling_nvcc(bwd, capsys) -> None:
    assert bwd.main(["build", "--source", "/nonexistent/Stub.cu"]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert bwd.main(["build", "--only", "nonesuch"]) == 1


def test_worker_lines_fold_into_a_report(bwd) -> None:
    """A worker that died after two checks: the report shows what ran, the failure and the stderr tail."""
    good, _ = bwd.check(_exact(bwd, False), (1, 1, 64), False, seed=1, device="cpu")

    def zero(q, k, v, o, do, lse, dq, dk, dv):
        for t in (dq, dk, dv):
            t.zero_()

    bad, _ = bwd.check(zero, (1, 1, 64), False, seed=2, device="cpu")
    lines = [
        {"stage": "env", "gpu": "H200", "torch": "2.11", "cudnn": 91000, "so": "x.so", "causal": False},
        {"stage": "check", **good},
        {"stage": "check", **bad},
        {"stage": "error", "during": "check (2, 3, 1000)", "error": "RuntimeError: illegal instruction"},
    ]
    res = bwd.collect("noise\n" + "\n".join(json.dumps(x) for x in lines))
    res.update(ended="rc=3", stderr_tail="CUDA error: an illegal instruction was encountered")
    assert len(res["checks"]) == 2 and not bwd.passed(res)
    text = bwd.variant_report("base", res, None)
    assert "check (1, 1, 64): PASS" in text and "FAIL in ['dQ', 'dK', 'dV']" in text
    assert "ERROR during check (2, 3, 1000)" in text and "illegal instruction was encountered" in text
    done = bwd.collect("\n".join(json.dumps(x) for x in [lines[1], {"stage": "done", "checks": 1}]))
    assert bwd.passed(done)


def test_ncu_counts_per_kernel_from_a_real_ncu_csv(bwd) -> None:
    """The source-page CSV of a real ncu run (ptxgym's fixture) folds into per-kernel family counts."""
    text = (ROOT / "tests" / "fixtures" / "ncu" / "tma_gemm.csv").read_text()
    kernels = bwd.ncu_counts(text)
    assert list(kernels) == ["gemm_tma"]
    assert kernels["gemm_tma"] == {"UTMALDG": [2 * 1146880, 2 * 1146880]}
