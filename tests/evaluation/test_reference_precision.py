"""Reference precision (``precision.py``): TF32 only for matmuls of operands exact in TF32.

CPU: every catalog definition runs at its real reduction lengths (GEMM K, attention head dimension and
1024 to 4096 keys, GQA sequences of thousands of keys) with the batch dimensions shrunk. Checked: every
matmul the evaluator's policy sends to TF32 has operands exact in TF32, value by value
(``ExactnessCheck``), and the GEMM, the attention scores and dO V^T are among them; the policy's error
against a float64 oracle is under 2% of the check's element and norm tolerance. The error of TF32 on
*every* matmul (emulated by truncating the operands' mantissas) is measured and printed beside it: that
is why computed operands (P, dS) stay exact. GPU: the policy at primary tasks' shapes on real tensor
cores against float64, and the caller's switches restored.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from precision_helpers import (  # noqa: E402
    MATMULS,
    ExactnessCheck,
    describe,
    error_report,
    is_tf32_exact,
    reports,
    run_at,
    tf32_truncate,
)

from ptxgym.evaluation.trusted.inputs import generate_inputs, load_reference, run_reference  # noqa: E402
from ptxgym.evaluation.trusted.precision import exact_fp32, reference_precision  # noqa: E402
from ptxgym.records.schema import AxisConst, Definition  # noqa: E402
from ptxgym.records.tasks import Task, Tolerance, catalog, get_task, load_definitions  # noqa: E402

SHARE = 0.02
"""The largest share of the check's tolerance a TF32 reference may use against float64."""

SMALL_CONST = {"N": 16, "B": 1, "H": 1}
SMALL_HEADS = {(32, 4): (8, 1), (24, 8): (3, 1)}
LONG_PARAMS = {
    "gqa_ragged": {"q_lens": [300, 2, 40], "kv_lens": [3000, 2, 700]},
    "gqa_paged_prefill": {"q_lens": [256, 5], "kv_lens": [2500, 9], "layout_seed": 7},
    "gqa_paged_decode": {"kv_lens": [4096, 1, 900], "layout_seed": 3},
}


def _kind(defn: Definition) -> str:
    if defn.op_type == "gqa_paged":
        return "gqa_paged_prefill" if "qo_indptr" in defn.inputs else "gqa_paged_decode"
    return defn.op_type


def _long(defn: Definition) -> Task:
    """The definition's first catalog task, batch dimensions shrunk, reduction lengths kept long."""
    task = next(t for t in catalog().values() if t.definition.name == defn.name)
    axes = {
        n: a.model_copy(update={"value": SMALL_CONST[n]})
        if isinstance(a, AxisConst) and n in SMALL_CONST
        else a
        for n, a in defn.axes.items()
    }
    if "num_qo_heads" in axes:
        pair = (axes["num_qo_heads"].value, axes["num_kv_heads"].value)  # type: ignore[union-attr]
        axes["num_qo_heads"] = axes["num_qo_heads"].model_copy(update={"value": SMALL_HEADS[pair][0]})
        axes["num_kv_heads"] = axes["num_kv_heads"].model_copy(update={"value": SMALL_HEADS[pair][1]})
    small = defn.model_copy(update={"axes": axes})
    kind = _kind(defn)
    params = None
    if kind == "gemm":
        wl_axes = {"M": 8}
    elif kind == "attention":
        wl_axes = {"S": 2048 if "causal" in defn.name else 1024}
    else:
        params = LONG_PARAMS[kind]
        kv, q = params["kv_lens"], params.get("q_lens")
        if kind == "gqa_ragged":
            wl_axes = {"total_q": sum(q), "total_kv": sum(kv), "len_indptr": len(kv) + 1}
        else:
            rows = {"total_q": sum(q)} if q else {"batch_size": len(kv)}
            pages = {"num_pages": sum(kv) + 64, "num_kv_indices": sum(kv)}
            wl_axes = {**rows, **pages, "len_indptr": len(kv) + 1}
    wl = task.workload.model_copy(update={"axes": wl_axes, "params": params})
    return task.model_copy(update={"definition": small, "workload": wl, "workloads": (wl,)})


TF32_SHARE = {"gemm": 0.0, "mha_with_lse": 1 / 2, "mha_bwd": 2 / 5, "gqa": 1 / 2}
"""Share of the reference's matmuls that TF32 runs: operands are inputs converted to fp32 and the
reduction is at most ``MAX_TF32_REDUCTION`` (Q K^T of P V; Q K^T and dO V^T of the backward's five; not
the GEMM, whose K reduction is too long for the tensor cores' accumulation)."""


def _family(name: str) -> str:
    return next(f for f in TF32_SHARE if name.startswith(f))


@pytest.mark.parametrize("name", sorted(load_definitions()))
def test_policy_sends_only_exact_operands_to_tf32_and_its_error_is_far_under_the_tolerance(name: str) -> None:
    task = _long(load_definitions()[name])
    ns = load_reference(task)
    inputs = generate_inputs(task, ns, seed=3, device="cpu")
    check = ExactnessCheck()
    run_at(ns, inputs, "policy", check)  # asserts, per TF32 matmul, that its operands are TF32-exact
    assert len(check.tf32) / check.matmuls == TF32_SHARE[_family(name)], (check.matmuls, check.tf32)
    measured = reports(task, ns, inputs, ("policy", "fp32", "all_tf32"))
    print(f"\n{name} element/norm share: {describe(measured)}")
    for r in measured["policy"]:
        assert r.element_share < SHARE and r.norm_share < SHARE, f"{name}: {r}"


def test_tf32_on_computed_operands_would_use_far_more_of_the_tolerance() -> None:
    """Why P and dS stay exact: TF32 there uses over 2% of the tolerance where the policy uses < 0.1%."""
    task = _long(load_definitions()["mha_bwd_d128_causal"])
    ns = load_reference(task)
    measured = reports(task, ns, generate_inputs(task, ns, seed=3, device="cpu"), ("policy", "all_tf32"))
    assert max(r.element_share for r in measured["all_tf32"]) > SHARE
    assert max(r.element_share for r in measured["policy"]) < SHARE / 20


def test_tf32_truncation_keeps_10_mantissa_bits() -> None:
    x = torch.tensor([1 + 2**-10 + 2**-11 + 2**-20, -3.0, 2.0**-140], dtype=torch.float32)
    assert tf32_truncate(x).tolist() == [1 + 2**-10, -3.0, 0.0]
    assert not is_tf32_exact(x) and is_tf32_exact(tf32_truncate(x))
    bf16 = torch.randn(1000).to(torch.bfloat16).float()
    assert is_tf32_exact(bf16) and is_tf32_exact(torch.randn(1000).half().float())


def test_marks_follow_conversions_and_views_not_arithmetic() -> None:
    from ptxgym.evaluation.trusted.precision import marked_exact

    q = torch.randn(2, 3, 8, 4).bfloat16()
    with reference_precision() as mode:
        a = q[1, 2].float()
        views = [a.T, a.mT, a.transpose(0, 1), a[2:], a.reshape(-1), a.contiguous(), a.unsqueeze(0), a.t()]
        computed = [a * 0.5, a + a, torch.exp(a), a.T.float() @ a, q.float().sum(0), torch.randn(3)]
        _ = a @ a.T
        _ = (a * 0.5) @ a.T
    assert marked_exact(a) and all(marked_exact(v) for v in views)
    assert not any(marked_exact(c) for c in computed)
    assert (mode.matmuls, mode.tf32) == (3, 2)


def test_an_in_place_write_voids_the_marks_of_every_view() -> None:
    from ptxgym.evaluation.trusted.precision import marked_exact

    q = torch.randn(8, 4).bfloat16()
    with reference_precision() as mode:
        a = q.float()
        view, other = a.T, q.float()
        a.mul_(0.3)  # no longer bf16 values, and neither are the views of a
        b = q.float()
        b[0] = torch.randn(4)
        c = q.float()
        torch.mul(c, 1.5, out=c)
        _ = view @ a
        _ = other @ other.T
    assert not any(marked_exact(t) for t in (a, view, b, c)) and marked_exact(other)
    assert (mode.matmuls, mode.tf32) == (2, 1)


class _Spy(torch.overrides.TorchFunctionMode):
    """Pushed below the policy's mode: records the matmul precision each matmul is issued with."""

    def __init__(self, during: list[str]) -> None:
        super().__init__()
        self.during = during

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.during.append(torch.get_float32_matmul_precision())
        return func(*args, **(kwargs or {}))


def test_reference_tf32_off_runs_every_matmul_exact(monkeypatch) -> None:
    during: list[str] = []

    x = torch.randn(8, 8).bfloat16()
    monkeypatch.setenv("PTXGYM_REFERENCE_TF32", "off")
    with _Spy(during), reference_precision() as mode:
        _ = x.float() @ x.float().T
    assert mode is None and during == ["highest"]
    monkeypatch.setenv("PTXGYM_REFERENCE_TF32", "maybe")
    with pytest.raises(ValueError, match="on or off"), reference_precision():
        pass


def test_the_error_measure_can_fail() -> None:
    """A reference off by a thousandth everywhere, or by 2% at one element, is caught."""
    oracle = torch.randn(4096, dtype=torch.float64) * 10
    tol = Tolerance()
    assert error_report("x", oracle * (1 + 1e-3), oracle, tol).element_share > SHARE
    assert error_report("x", oracle * (1 + 1e-3), oracle, tol).norm_share > SHARE
    one = oracle.clone()
    one[7] = oracle[7] + torch.clamp(oracle[7].abs() * 0.02, min=0.02)
    assert error_report("x", one, oracle, tol).element_share > 1.0
    assert error_report("x", oracle.float().double(), oracle, tol).element_share < 1e-5


def test_exactness_check_catches_a_wrong_mark() -> None:
    """An fp32 tensor marked exact that is not (a policy bug) fails the value check."""
    from ptxgym.evaluation.trusted.precision import mark_exact

    a = torch.randn(8, 64)
    mark_exact(a)
    with pytest.raises(AssertionError, match="not exact in TF32"):
        run_at({"run": lambda A: A @ A.T}, {"A": a}, "policy")


def _switches() -> tuple[str, bool]:
    return torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("start", [("highest", True), ("high", False)])
def test_reference_precision_restores_the_callers_switches(start) -> None:
    before = _switches()
    seen = []
    spy = {"run": lambda A: (seen.append(_switches()), A.float() @ A.float().T)[1]}
    try:
        torch.set_float32_matmul_precision(start[0])
        torch.backends.cudnn.allow_tf32 = start[1]
        with reference_precision():
            spy["run"](torch.randn(4, 8).bfloat16())
        assert seen == [("highest", False)] and _switches() == start
        with pytest.raises(RuntimeError), reference_precision():
            raise RuntimeError("a failing reference")
        assert _switches() == start
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def test_tf32_is_on_only_while_an_exact_matmul_is_issued() -> None:
    """Inside the reference: TF32 on for exact operands, off for computed ones and between matmuls."""
    during: list[str] = []

    a = torch.randn(16, 16).bfloat16()
    with _Spy(during), reference_precision():
        x = a.float()
        _ = x @ x.T
        _ = (x * 0.5) @ x.T
        _ = torch.matmul(x[:4], a[:, :4].float())
        assert torch.get_float32_matmul_precision() == "highest"
    assert during == ["high", "highest", "high"]


def test_a_concurrent_reference_cannot_switch_tf32_under_an_issuing_matmul() -> None:
    """Thread A is inside an exact-operand matmul (TF32 on) when thread B issues a computed-operand one.

    B must wait for A's matmul to be issued (the lock), so A still sees TF32 on; without the lock B's
    switch would land inside A's call.
    """
    before = _switches()
    a_inside, b_inside = threading.Event(), threading.Event()
    seen: dict[str, str] = {}

    class Spy(torch.overrides.TorchFunctionMode):
        """Below the policy's mode: runs while the policy holds its switch for this matmul."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in MATMULS and self.name == "A":
                a_inside.set()
                b_inside.wait(timeout=0.5)  # B cannot get in while A issues
                seen["A"] = torch.get_float32_matmul_precision()
            elif func in MATMULS:
                b_inside.set()
                seen["B"] = torch.get_float32_matmul_precision()
                time.sleep(0.2)  # hold B's switch while A looks
            return func(*args, **(kwargs or {}))

    x = torch.randn(8, 8).bfloat16()

    def thread_a() -> None:
        with Spy("A"), reference_precision():
            a = x.float()
            _ = a @ a.T

    def thread_b() -> None:
        a_inside.wait(timeout=10)
        with Spy("B"), reference_precision():
            a = x.float() * 0.5
            _ = a @ a.T

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == {"A": "high", "B": "highest"} and _switches() == before


def test_threads_share_exact_fp32_and_the_last_one_out_restores() -> None:
    before = _switches()
    inside, release = threading.Barrier(3), threading.Event()
    seen: list[tuple[str, bool]] = []

    def holder() -> None:
        with exact_fp32():
            inside.wait(timeout=10)
            release.wait(timeout=10)
            seen.append(_switches())

    threads = [threading.Thread(target=holder) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait(timeout=10)
    assert _switches() == ("highest", False)
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert seen == [("highest", False)] * 2 and _switches() == before


# ------------------------------------------------------------------------------------------------ GPU


def _primary_small_batch(task_id: str, heads: int) -> Task:
    """A primary task with only its batch and head counts cut (per-head shapes and S unchanged)."""
    task = get_task(task_id)
    defn = task.definition
    axes = dict(defn.axes)
    for name, value in (("B", 1), ("H", heads)):
        if name in axes:
            axes[name] = axes[name].model_copy(update={"value": value})
    return task.model_copy(update={"definition": defn.model_copy(update={"axes": axes})})


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("task_id", "heads"), [("Gemm-sm90a", 0), ("MhaFwd-sm90a", 4), ("MhaBwdCausal-sm90a", 4)]
)
def test_gpu_policy_reference_agrees_with_float64(task_id: str, heads: int) -> None:
    """On the tensor cores, at a primary task's per-head shapes: under 2% of the tolerance used."""
    task = _primary_small_batch(task_id, heads) if heads else get_task(task_id)
    ns = load_reference(task)
    inputs = generate_inputs(task, ns, seed=5, device="cuda")
    before = _switches()
    check = ExactnessCheck()
    run_at(ns, inputs, "policy", check)
    assert bool(check.tf32) == (not task_id.startswith("Gemm")), check.tf32  # K = 5120: too long for TF32
    measured = reports(task, ns, inputs, ("policy", "fp32"))
    assert _switches() == before
    print(f"\n{task_id} element/norm share: {describe(measured)}")
    exact_fp32_share = {r.output: r for r in measured["fp32"]}
    for r in measured["policy"]:  # under 2%, or no worse than the exact fp32 reference (cuBLAS at K = 5120)
        fp32 = exact_fp32_share[r.output]
        assert r.element_share < max(SHARE, 1.05 * fp32.element_share), f"{task_id}: {r}"
        assert r.norm_share < max(SHARE, 1.05 * fp32.norm_share), f"{task_id}: {r}"
    # the evaluator's own reference (bf16 outputs) against the all-exact fp32 one: within one bf16 step
    with exact_fp32():
        exact = ns["run"](*inputs.values())
    exact = exact if isinstance(exact, tuple) else (exact,)
    got = run_reference(task, ns, inputs)
    assert _switches() == before
    tol = task.tolerance
    for (name, g), e in zip(got.items(), exact, strict=True):
        # within one bf16 step, or 2% of the check's own element bound where that is larger (small
        # elements of dQ, whose sums cancel, can straddle a rounding step by more than a millionth)
        bound = torch.clamp(e.float().abs() * tol.rtol, min=tol.atol)
        allowed = torch.maximum(e.float().abs() * 2.0**-7, SHARE * bound)
        assert bool(((g.float() - e.float()).abs() <= allowed).all()), name


@contextlib.contextmanager
def _all_tf32():
    """TF32 for every fp32 matmul (what the evaluator does not do; timed for comparison only)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.gpu
@pytest.mark.parametrize("task_id", ["Gemm-sm90a", "MhaFwd-sm90a", "MhaBwd-sm90a"])
def test_gpu_policy_reference_time(task_id: str) -> None:
    """Wall time of one full-size reference: exact fp32, the policy, TF32 everywhere (attention gains)."""
    task = get_task(task_id)
    ns = load_reference(task)
    inputs = generate_inputs(task, ns, seed=5, device="cuda")

    def seconds(context) -> float:
        best = float("inf")
        for _ in range(3):
            torch.cuda.synchronize()
            t = time.perf_counter()
            with context():
                ns["run"](*inputs.values())
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        return best

    before = _switches()
    exact, policy, everywhere = seconds(exact_fp32), seconds(reference_precision), seconds(_all_tf32)
    assert _switches() == before
    print(
        f"\n{task_id} reference: exact fp32 {exact * 1e3:.1f} ms, policy {policy * 1e3:.1f} ms, "
        f"TF32 everywhere {everywhere * 1e3:.1f} ms"
    )
    # measured on the H200: fwd 99.1-99.5 -> 81.2-92.6 ms, bwd 162-163 -> 127-131 ms; the GEMM unchanged;
    # with a chunk of heads per step (H100, gpu_tests_2026-12-06_s40_references_h100.txt): fwd 94.1 -> 79.4,
    # bwd 151.9 -> 121.9 ms
    assert policy < 1.05 * exact
