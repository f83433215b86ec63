"""Every definition's reference runs on small shapes and agrees with torch's own attention (CPU)."""

from __future__ import annotations

import math

import pytest

from ptxgym.records.tasks import load_definitions

torch = pytest.importorskip("torch")


def _load(name: str) -> dict:
    ns: dict = {}
    exec(compile(load_definitions()[name].reference, name, "exec"), ns)  # noqa: S102 - our own shipped source
    return ns


def _qkv(seed: int = 0, b: int = 1, h: int = 2, s: int = 64, d: int = 128):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g).to(torch.bfloat16) for _ in range(3)]


def test_gemm_reference() -> None:
    ns = _load("gemm_n7168_k5120")
    a, b = torch.randn(16, 32).bfloat16(), torch.randn(8, 32).bfloat16()
    c = ns["run"](a, b)
    assert c.dtype == torch.bfloat16 and c.shape == (16, 8)
    torch.testing.assert_close(c.float(), a.float() @ b.float().T, atol=1e-1, rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_forward_reference_matches_sdpa(causal: bool) -> None:
    q, k, v = _qkv()
    ns = _load("mha_with_lse_d128" + ("_causal" if causal else ""))
    o, lse = ns["run"](q, k, v)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(o.float(), want, atol=1e-2, rtol=1e-2)
    s = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(64, 64, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, dim=-1), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_reference_matches_autograd(causal: bool) -> None:
    q, k, v = _qkv(1)
    do = torch.randn_like(q.float()).bfloat16()
    ns = _load("mha_bwd_d128" + ("_causal" if causal else ""))
    state = ns["forward_state"](q, k, v)
    assert set(state) == {"O", "LSE"}
    dq, dk, dv = ns["run"](q, k, v, state["O"], do, state["LSE"])
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    out.backward(do.float())
    for got, want in ((dq, qf.grad), (dk, kf.grad), (dv, vf.grad)):
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
