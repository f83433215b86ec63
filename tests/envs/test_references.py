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


def _head_by_head_forward(q, k, v, causal: bool, softmax: bool = False):
    """The obvious definition, one head at a time (what the chunked references must equal bit for bit).

    ``softmax``: as the forward task computes it (``torch.softmax``, the logsumexp from the softmax at
    the maximum), else with ``torch.logsumexp`` (the backward's forward state).
    """
    b, h, s, d = q.shape
    o, lse = torch.empty_like(q), torch.empty(b, h, s)
    for i in range(b):
        for j in range(h):
            x = (q[i, j].float() @ k[i, j].float().T) * (1.0 / math.sqrt(d))
            if causal:
                x = x.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
            if softmax:
                p = torch.softmax(x, dim=-1)
                lse[i, j] = x.amax(dim=-1) - p.amax(dim=-1).log()
            else:
                lse[i, j] = torch.logsumexp(x, dim=-1)
                p = torch.exp(x - lse[i, j][:, None])
            o[i, j] = (p @ v[i, j].float()).to(q.dtype)
    return o, lse


def _head_by_head_backward(q, k, v, o, do, lse, causal: bool):
    b, h, s, d = q.shape
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for i in range(b):
        for j in range(h):
            qf, kf, vf, dof, of = (t[i, j].float() for t in (q, k, v, do, o))
            x = (qf @ kf.T) * (1.0 / math.sqrt(d))
            if causal:
                x = x.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
            p = torch.exp(x - lse[i, j][:, None])
            grads[2][i, j] = (p.T @ dof).to(v.dtype)
            ds = p * ((dof @ vf.T) - (dof * of).sum(dim=-1, keepdim=True)) * (1.0 / math.sqrt(d))
            grads[0][i, j] = (ds @ kf).to(q.dtype)
            grads[1][i, j] = (ds.T @ qf).to(k.dtype)
    return grads


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_per_chunk", [None, 1, 2, 4])
def test_attention_references_in_chunks_of_heads_equal_the_head_by_head_definition(
    causal: bool, heads_per_chunk: int | None
) -> None:
    """A chunk of heads per step (a few launches instead of ~10 per head) changes no bit (CPU).

    Six heads: chunks of 1, 2 and 4 (the last one short) and all in one (None: the shipped budget).
    """
    from ptxgym.evaluation.trusted.precision import reference_precision

    s = 32
    q, k, v = _qkv(2, b=2, h=3, s=s)
    do = _qkv(3, b=2, h=3, s=s)[0]
    suffix = "_causal" if causal else ""
    fwd, bwd = _load("mha_with_lse_d128" + suffix), _load("mha_bwd_d128" + suffix)
    if heads_per_chunk is not None:
        for ns in (fwd, bwd):
            ns["SCORES_PER_CHUNK"] = heads_per_chunk * s * s
    assert len(fwd["_chunks"](6, s)) == (1 if heads_per_chunk is None else -(-6 // heads_per_chunk))
    with reference_precision():
        o, lse = fwd["run"](q, k, v)
        state = bwd["forward_state"](q, k, v)
        grads = bwd["run"](q, k, v, state["O"], do, state["LSE"])
    want_o, want_lse = _head_by_head_forward(q, k, v, causal)
    fwd_o, fwd_lse = _head_by_head_forward(q, k, v, causal, softmax=True)
    for got, want in ((o, fwd_o), (lse, fwd_lse), (state["O"], want_o), (state["LSE"], want_lse)):
        assert got.shape == want.shape and torch.equal(got, want)
    # the two definitions differ by fp32 rounding alone
    torch.testing.assert_close(lse, want_lse, atol=2e-6, rtol=0)
    assert (o.float() - want_o.float()).abs().max() <= 2**-7 * want_o.float().abs().max()
    for got, want in zip(grads, _head_by_head_backward(q, k, v, want_o, do, want_lse, causal), strict=True):
        assert got.shape == want.shape and torch.equal(got, want)
