"""How the PTXBench workload suite in this folder was written (provenance; the JSON files are the data).

``python envs/data/make_suite.py`` rewrites the suite's definitions, workloads and task records from the
published shapes below. It leaves the five primary problems (``tasks/primary.json`` and their files)
alone, except that it appends the suite's M values to ``gemm_n7168_k5120``'s workloads after the
original M=8192 line. Adding or changing a task later needs no Python: edit the JSON.

Sources of the shapes (model configs; PTXBench paper, section 2 and its GQA generalisation set):

* GEMM ``C[M, N] = A[M, K] B[N, K]^T``: the projections of Llama-3.1-8B, Qwen3-14B, Gemma-3-27B,
  DeepSeek-V3 (MoE router) and Qwen3-30B-A3B, each at M in ``GEMM_M`` (log-spaced, 64 < M < 10000).
* MHA forward (with LSE) and backward, causal and not, at head dimensions 64 and 96 (B=4, H=48 as the
  d128 problems), S in ``MHA_S``.
* GQA with BF16 output and FP32 natural-log LSE: ragged prefill (h32/kv4/d128; 33 sequences, 16,294
  tokens), paged prefill (h24/kv8/d128, page size 1; one 892-token sequence in a 43,676-page cache) and
  paged decode (h24/kv8/d128, page size 1; batch 15, 9,625 KV pages, 42,784-page cache), plus a few
  more batches of each. Sequence lengths are drawn once here (seeded) and stored in each workload's
  ``params``; the definitions' ``layout`` functions turn them into the index arrays.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent
GEMM_M = [8192, 128, 400, 1024, 3000]
MHA_S = [4096, 1024, 2048, 8192]
FLASHINFER_TIMED = "timed against FlashInfer (the torch reference where it is not installed)"

# (N, K, model, layer, split, held_out)
GEMMS = [
    (6144, 4096, "Llama-3.1-8B", "qkv_proj: (32 + 8 + 8) heads x 128", "train", False),
    (4096, 4096, "Llama-3.1-8B", "o_proj: 32 heads x 128 -> hidden 4096", "train", False),
    (28672, 4096, "Llama-3.1-8B", "gate_up_proj: 2 x 14336", "train", False),
    (4096, 14336, "Llama-3.1-8B", "down_proj: 14336 -> hidden 4096", "train", False),
    (7168, 5120, "Qwen3-14B", "qkv_proj: (40 + 8 + 8) heads x 128", "train", False),
    (5120, 5120, "Qwen3-14B", "o_proj: 40 heads x 128 -> hidden 5120", "train", False),
    (34816, 5120, "Qwen3-14B", "gate_up_proj: 2 x 17408", "train", False),
    (5120, 17408, "Qwen3-14B", "down_proj: 17408 -> hidden 5120", "train", False),
    (4096, 5376, "Gemma-3-27B", "q_proj: 32 heads x 128, hidden 5376", "validation", True),
    (2048, 5376, "Gemma-3-27B", "k_proj / v_proj: 16 heads x 128", "validation", True),
    (5376, 4096, "Gemma-3-27B", "o_proj: 32 heads x 128 -> hidden 5376", "validation", True),
    (256, 7168, "DeepSeek-V3", "MoE router: 256 routed experts, hidden 7168", "validation", True),
    (5120, 2048, "Qwen3-30B-A3B", "qkv_proj: (32 + 4 + 4) heads x 128, hidden 2048", "test", True),
    (2048, 4096, "Qwen3-30B-A3B", "o_proj: 32 heads x 128 -> hidden 2048", "test", True),
    (128, 2048, "Qwen3-30B-A3B", "MoE router: 128 experts, hidden 2048", "test", True),
]

GEMM_REFERENCE = (
    "import torch\n\n\ndef run(A, B):\n"
    "    # A [M, K] bf16, B [N, K] bf16 -> C [M, N] bf16; accumulate in fp32.\n"
    "    C = torch.matmul(A.float(), B.float().T)\n    return C.to(torch.bfloat16)\n"
)


def _uuid(definition: str, axes: dict) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ptxgym://{definition}/{json.dumps(axes, sort_keys=True)}"))


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _row(definition: str, axes: dict, inputs: dict, params: dict | None = None) -> str:
    wl = {"uuid": _uuid(definition, {**axes, **(params or {})}), "axes": axes, "inputs": inputs}
    if params:
        wl["params"] = params
    return json.dumps({"definition": definition, "solution": None, "evaluation": None, "workload": wl})


def _tensor(shape: list[str] | None, dtype: str, description: str) -> dict:
    return {"shape": shape, "dtype": dtype, "description": description}


# ------------------------------------------------------------------------------------------------ GEMM


def gemm_records() -> list[dict]:
    records = []
    for n, k, model, layer, split, held_out in GEMMS:
        name = f"gemm_n{n}_k{k}"
        if name != "gemm_n7168_k5120":  # the primary definition stays as published
            _write_json(
                ROOT / "definitions" / "gemm" / f"{name}.json",
                {
                    "name": name,
                    "op_type": "gemm",
                    "description": f"C = A @ B^T in bf16 with fp32 accumulation ({model} {layer}: N = {n}, "
                    f"K = {k}).",
                    "axes": {
                        "M": {"type": "var", "description": "rows of A and C (tokens)"},
                        "N": {"type": "const", "value": n, "description": "rows of B, columns of C"},
                        "K": {"type": "const", "value": k, "description": "reduction dimension"},
                    },
                    "inputs": {
                        "A": _tensor(["M", "K"], "bfloat16", "row-major, K contiguous"),
                        "B": _tensor(["N", "K"], "bfloat16", "row-major, K contiguous (so C = A B^T)"),
                    },
                    "outputs": {"C": _tensor(["M", "N"], "bfloat16", "row-major, N contiguous")},
                    "reference": GEMM_REFERENCE,
                    "tags": ["ptxbench", "suite:gemm", f"model:{model.lower()}"],
                },
            )
        rows = [_row(name, {"M": m}, {"A": {"type": "random"}, "B": {"type": "random"}}) for m in GEMM_M]
        path = ROOT / "workloads" / "gemm" / f"{name}.jsonl"
        if name == "gemm_n7168_k5120":  # keep the published M=8192 line (and its uuid) first
            published = path.read_text().splitlines()[0]
            rows = [published, *rows[1:]]
        path.write_text("\n".join(rows) + "\n")
        default = json.loads(rows[0])["workload"]["uuid"]
        records.append(
            {
                "name": f"Gemm{n}x{k}",
                "definition": name,
                "family": "gemm",
                "summary": f"BF16 GEMM C = A B^T, N={n} K={k} ({model} {layer.split(':')[0]}), "
                f"M in {sorted(GEMM_M)}",
                "baseline": "cublas",
                "flops": "2 * M * N * K",
                "independent_axes": ["M"],
                "default_workload": default,
                "split": split,
                "held_out": held_out,
            }
        )
    return records


# ------------------------------------------------------------------------------------------------- MHA


def mha_records() -> list[dict]:
    records = []
    for d, split, held_out in ((64, "train", False), (96, "test", True)):
        for kind in ("fwd", "bwd"):
            for causal in (False, True):
                base = "mha_with_lse_d128" if kind == "fwd" else "mha_bwd_d128"
                template = json.loads(
                    (ROOT / "definitions" / "attention" / f"{base}{'_causal' * causal}.json").read_text()
                )
                name = template["name"].replace("d128", f"d{d}")
                template["name"] = name
                template["axes"]["D"]["value"] = d
                template["tags"] = ["ptxbench", "suite:mha", f"head_dim:{d}", *(["causal"] if causal else [])]
                _write_json(ROOT / "definitions" / "attention" / f"{name}.json", template)
                inputs = {"Q": {"type": "random"}, "K": {"type": "random"}, "V": {"type": "random"}}
                if kind == "bwd":
                    derived = {"type": "derived", "function": "forward_state"}
                    inputs = {**inputs, "O": derived, "dO": {"type": "random"}, "LSE": derived}
                rows = [_row(name, {"S": s}, inputs) for s in MHA_S]
                (ROOT / "workloads" / "attention" / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
                factor = {("fwd", False): 4, ("fwd", True): 2, ("bwd", False): 10, ("bwd", True): 5}[
                    kind, causal
                ]
                records.append(
                    {
                        "name": f"Mha{kind.capitalize()}D{d}{'Causal' if causal else ''}",
                        "definition": name,
                        "family": f"mha_{kind}",
                        "summary": f"{'causal ' if causal else ''}MHA "
                        f"{'forward with LSE' if kind == 'fwd' else 'backward'}, "
                        f"B=4 H=48 D={d}, S in {sorted(MHA_S)}",
                        "baseline": f"cudnn_sdpa_{kind}",
                        "flops": f"{factor} * B * H * S ** 2 * D",
                        "independent_axes": ["B", "H"],
                        **({"tolerance": {"required_match": 0.999999}} if kind == "bwd" else {}),
                        "default_workload": json.loads(rows[0])["workload"]["uuid"],
                        "split": split,
                        "held_out": held_out,
                    }
                )
    return records


# ------------------------------------------------------------------------------------------------- GQA

GQA_SOFTMAX = """

def _attend(q, k, v, q_lens, kv_lens, q_starts, kv_rows):
    # Shared by the GQA definitions. q [total_q, Hq, D]; k, v [rows, Hkv, D] gathered per sequence by
    # kv_rows(i) -> row indices. Causal aligned to the end of each sequence: query t of a sequence with
    # n queries and m keys sees keys j <= t + (m - n). Scale 1/sqrt(D); LSE is the natural log of the
    # sum of exp of the scaled scores, fp32. Math in fp32, one KV head (and its query group) at a time.
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    lse = torch.empty(total_q, hq, dtype=torch.float32, device=q.device)
    for i, (n, m) in enumerate(zip(q_lens, kv_lens)):
        qs = q_starts[i]
        rows = kv_rows(i)
        pos = torch.arange(m, device=q.device)
        allowed = pos[None, :] <= torch.arange(n, device=q.device)[:, None] + (m - n)  # [n, m]
        for g in range(hkv):
            heads = slice(g * group, (g + 1) * group)
            qi = q[qs : qs + n, heads].float().transpose(0, 1)            # [group, n, D]
            ki, vi = k[rows, g].float(), v[rows, g].float()                # [m, D]
            s = (qi @ ki.T) * scale                                        # [group, n, m]
            s = s.masked_fill(~allowed, float("-inf"))
            l = torch.logsumexp(s, dim=-1)                                 # [group, n]
            out[qs : qs + n, heads] = (torch.exp(s - l[..., None]) @ vi).transpose(0, 1).to(q.dtype)
            lse[qs : qs + n, heads] = l.transpose(0, 1)
    return out, lse
"""

RAGGED_REFERENCE = (
    "import math\n\nimport torch\n\n\ndef layout(q_lens, kv_lens):\n"
    "    # The ragged batch of a workload (its params) as int32 CSR pointers (the harness places them\n"
    "    # on the device). No tensor input feeds it, so every random input is redrawn for timed calls.\n"
    "    qo = torch.zeros(len(q_lens) + 1, dtype=torch.int32)\n"
    "    kv = torch.zeros(len(kv_lens) + 1, dtype=torch.int32)\n"
    "    qo[1:] = torch.tensor(q_lens).cumsum(0)\n    kv[1:] = torch.tensor(kv_lens).cumsum(0)\n"
    '    return {"qo_indptr": qo, "kv_indptr": kv}\n'
    + GQA_SOFTMAX
    + "\n\ndef run(q, k, v, qo_indptr, kv_indptr):\n"
    "    qo, kv = qo_indptr.tolist(), kv_indptr.tolist()\n"
    "    q_lens = [b - a for a, b in zip(qo, qo[1:])]\n    kv_lens = [b - a for a, b in zip(kv, kv[1:])]\n"
    "    return _attend(q, k, v, q_lens, kv_lens, qo, lambda i: slice(kv[i], kv[i + 1]))\n"
)

PAGED_LAYOUT = (
    "def layout(num_pages, kv_lens, layout_seed, q_lens=None):\n"
    "    # Index arrays of a paged batch (page size 1): sequence i owns kv_lens[i] distinct pages of the\n"
    "    # cache, drawn once from layout_seed (the workload fixes them; the kernel must read them). The\n"
    "    # harness places them on the device; no tensor input feeds this function.\n"
    "    g = torch.Generator().manual_seed(layout_seed)\n"
    "    pages = torch.randperm(num_pages, generator=g)[: sum(kv_lens)].to(torch.int32)\n"
    "    kv = torch.zeros(len(kv_lens) + 1, dtype=torch.int32)\n"
    "    kv[1:] = torch.tensor(kv_lens).cumsum(0)\n"
    '    out = {"kv_indptr": kv, "kv_indices": pages}\n'
    "    if q_lens is not None:\n"
    "        qo = torch.zeros(len(q_lens) + 1, dtype=torch.int32)\n"
    "        qo[1:] = torch.tensor(q_lens).cumsum(0)\n"
    '        out["qo_indptr"] = qo\n'
    "    return out\n"
)

PAGED_PREFILL_REFERENCE = (
    "import math\n\nimport torch\n\n\n"
    + PAGED_LAYOUT
    + GQA_SOFTMAX
    + "\n\ndef run(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices):\n"
    "    qo, kv = qo_indptr.tolist(), kv_indptr.tolist()\n"
    "    q_lens = [b - a for a, b in zip(qo, qo[1:])]\n    kv_lens = [b - a for a, b in zip(kv, kv[1:])]\n"
    "    k, v = k_cache.flatten(0, 1), v_cache.flatten(0, 1)  # page size 1: one token per page\n"
    "    rows = kv_indices.long().to(k.device)\n"
    "    return _attend(q, k, v, q_lens, kv_lens, qo, lambda i: rows[kv[i] : kv[i + 1]])\n"
)

PAGED_DECODE_REFERENCE = (
    "import math\n\nimport torch\n\n\n"
    + PAGED_LAYOUT
    + GQA_SOFTMAX
    + "\n\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices):\n"
    "    kv = kv_indptr.tolist()\n    kv_lens = [b - a for a, b in zip(kv, kv[1:])]\n"
    "    k, v = k_cache.flatten(0, 1), v_cache.flatten(0, 1)  # page size 1: one token per page\n"
    "    rows = kv_indices.long().to(k.device)\n"
    "    starts = list(range(len(kv_lens) + 1))\n"
    "    return _attend(q, k, v, [1] * len(kv_lens), kv_lens, starts, lambda i: rows[kv[i] : kv[i + 1]])\n"
)

GQA_DESC = (
    "Grouped-query attention, {what}. Query head h uses KV head h // (num_qo_heads / num_kv_heads). "
    "Causal aligned to the end of each sequence (query t of n sees keys j <= t + kv_len - n); decode "
    "queries see their whole sequence. Scale 1/sqrt(head_dim). Outputs: bf16 attention output and the fp32 "
    "natural-log logsumexp of the scaled scores per (token, query head)."
)
PREFILL_FLOPS = "4 * num_qo_heads * head_dim * sum(q_lens * (kv_lens - q_lens) + q_lens * (q_lens + 1) / 2)"


def _lens(rng: random.Random, n: int, total: int, lo: int) -> list[int]:
    """n lengths >= lo summing to total, spread like serving traffic (log-normal)."""
    w = [rng.lognormvariate(0.0, 1.0) for _ in range(n)]
    lens = [lo + int((total - lo * n) * x / sum(w)) for x in w]
    lens[lens.index(max(lens))] += total - sum(lens)
    return lens


def gqa_records() -> list[dict]:
    rng = random.Random(20260813)
    heads = lambda hq, hkv: {  # noqa: E731
        "num_qo_heads": {"type": "const", "value": hq, "description": "query heads"},
        "num_kv_heads": {"type": "const", "value": hkv, "description": "key/value heads"},
        "head_dim": {"type": "const", "value": 128, "description": "head dimension"},
    }
    idx = lambda axis, what: _tensor([axis], "int32", what)  # noqa: E731
    out_specs = lambda rows: {  # noqa: E731
        "output": _tensor([rows, "num_qo_heads", "head_dim"], "bfloat16", "attention output"),
        "lse": _tensor([rows, "num_qo_heads"], "float32", "natural-log logsumexp of the scaled scores"),
    }
    cache = lambda: _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16", "paged cache")  # noqa: E731
    var = lambda what: {"type": "var", "description": what}  # noqa: E731
    derived = {"type": "derived", "function": "layout"}
    records = []

    # ragged prefill h32/kv4/d128
    name = "gqa_ragged_prefill_causal_h32_kv4_d128"
    _write_json(
        ROOT / "definitions" / "gqa_ragged" / f"{name}.json",
        {
            "name": name,
            "op_type": "gqa_ragged",
            "description": GQA_DESC.format(
                what="ragged prefill: sequence i's queries are rows qo_indptr[i] to "
                "qo_indptr[i+1] of q and its keys/values rows kv_indptr[i] to kv_indptr[i+1] of k and v"
            ),
            "axes": {
                **heads(32, 4),
                "total_q": var("query tokens of the batch"),
                "total_kv": var("key/value tokens of the batch"),
                "len_indptr": var("sequences + 1"),
            },
            "inputs": {
                "q": _tensor(["total_q", "num_qo_heads", "head_dim"], "bfloat16", "queries"),
                "k": _tensor(["total_kv", "num_kv_heads", "head_dim"], "bfloat16", "keys"),
                "v": _tensor(["total_kv", "num_kv_heads", "head_dim"], "bfloat16", "values"),
                "qo_indptr": idx("len_indptr", "query row pointers (CSR), qo_indptr[0] = 0"),
                "kv_indptr": idx("len_indptr", "key/value row pointers (CSR), kv_indptr[0] = 0"),
            },
            "outputs": out_specs("total_q"),
            "reference": RAGGED_REFERENCE,
            "tags": ["ptxbench", "suite:gqa", "causal"],
            "constraints": [
                "kv_indptr[i+1] - kv_indptr[i] >= qo_indptr[i+1] - qo_indptr[i] >= 1",
                "qo_indptr[-1] = total_q",
                "kv_indptr[-1] = total_kv",
            ],
        },
    )
    batches: list[tuple[list[int], list[int] | None]] = [
        (_lens(rng, 33, 16294, 16), None),
        ([4096], None),
        (_lens(rng, 64, 6000, 8), None),
    ]
    prefix = _lens(rng, 8, 8000, 64)
    batches.append((_lens(rng, 8, 3000, 32), prefix))
    rows = []
    for q_lens, pre in batches:
        kv_lens = [a + b for a, b in zip(q_lens, pre, strict=True)] if pre else list(q_lens)
        axes = {"total_q": sum(q_lens), "total_kv": sum(kv_lens), "len_indptr": len(q_lens) + 1}
        inputs = {
            "q": {"type": "random"},
            "k": {"type": "random"},
            "v": {"type": "random"},
            "qo_indptr": derived,
            "kv_indptr": derived,
        }
        rows.append(_row(name, axes, inputs, {"q_lens": q_lens, "kv_lens": kv_lens}))
    (ROOT / "workloads" / "gqa_ragged").mkdir(parents=True, exist_ok=True)
    (ROOT / "workloads" / "gqa_ragged" / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
    records.append(
        {
            "name": "GqaRaggedPrefill",
            "definition": name,
            "family": "gqa_ragged_prefill",
            "summary": "causal GQA ragged prefill h32/kv4/d128 (33 sequences, 16,294 tokens, and 3 more "
            f"batches); {FLASHINFER_TIMED}",
            "baseline": "flashinfer_gqa_ragged_prefill",
            "flops": PREFILL_FLOPS,
            "default_workload": json.loads(rows[0])["workload"]["uuid"],
            "split": "validation",
            "held_out": True,
        }
    )

    # paged prefill and decode, h24/kv8/d128, page size 1
    paged_axes = lambda rows_axis: {  # noqa: E731
        **heads(24, 8),
        "page_size": {"type": "const", "value": 1, "description": "tokens per page"},
        **(
            {"total_q": var("query tokens of the batch")}
            if rows_axis == "total_q"
            else {"batch_size": var("sequences")}
        ),
        "num_pages": var("pages in the cache"),
        "len_indptr": var("sequences + 1"),
        "num_kv_indices": var("pages referenced by the batch"),
    }
    for kind in ("prefill", "decode"):
        prefill = kind == "prefill"
        name = f"gqa_paged_{'prefill_causal' if prefill else 'decode'}_h24_kv8_d128_ps1"
        rows_axis = "total_q" if prefill else "batch_size"
        inputs_spec = {
            "q": _tensor([rows_axis, "num_qo_heads", "head_dim"], "bfloat16", "queries"),
            "k_cache": cache(),
            "v_cache": cache(),
            **(
                {"qo_indptr": idx("len_indptr", "query row pointers (CSR), qo_indptr[0] = 0")}
                if prefill
                else {}
            ),
            "kv_indptr": idx("len_indptr", "page pointers into kv_indices (CSR), kv_indptr[0] = 0"),
            "kv_indices": idx("num_kv_indices", "page of each key/value token, sequence by sequence"),
        }
        what = (
            "paged prefill: sequence i's queries are rows qo_indptr[i] to qo_indptr[i+1] of q; its keys and "
            "values are the pages kv_indices[kv_indptr[i]:kv_indptr[i+1]] of the caches, in order"
            if prefill
            else "paged decode: one query per sequence (row i of q); its keys and values are the pages "
            "kv_indices[kv_indptr[i]:kv_indptr[i+1]] of the caches, in order"
        )
        _write_json(
            ROOT / "definitions" / "gqa_paged" / f"{name}.json",
            {
                "name": name,
                "op_type": "gqa_paged",
                "description": GQA_DESC.format(what=what),
                "axes": paged_axes(rows_axis),
                "inputs": inputs_spec,
                "outputs": out_specs(rows_axis),
                "reference": PAGED_PREFILL_REFERENCE if prefill else PAGED_DECODE_REFERENCE,
                "tags": ["ptxbench", "suite:gqa", *(["causal"] if prefill else [])],
                "constraints": [
                    "kv_indices are distinct pages < num_pages",
                    "kv_indptr[-1] = num_kv_indices",
                    *(
                        ["kv_indptr[i+1] - kv_indptr[i] >= qo_indptr[i+1] - qo_indptr[i] >= 1"]
                        if prefill
                        else ["len_indptr = batch_size + 1"]
                    ),
                ],
            },
        )
        specs: list[tuple[list[int] | None, list[int], int]]  # (q_lens, kv_lens, num_pages)
        if prefill:
            specs = [([892], [892], 43676)]
            q4 = _lens(rng, 4, 2048, 64)
            specs.append((q4, [a + b for a, b in zip(q4, _lens(rng, 4, 6000, 256), strict=True)], 60000))
            q16 = _lens(rng, 16, 4000, 16)
            specs.append((q16, list(q16), 30000))
        else:
            specs = [
                (None, _lens(rng, 15, 9625, 32), 42784),
                (None, _lens(rng, 64, 64000, 64), 100000),
                (None, [8192], 20000),
                (None, _lens(rng, 128, 40000, 16), 80000),
            ]
        rows = []
        for i, (seq_q, kv_lens, pages) in enumerate(specs):
            axes = {
                rows_axis: sum(seq_q or []) if prefill else len(kv_lens),
                "num_pages": pages,
                "len_indptr": len(kv_lens) + 1,
                "num_kv_indices": sum(kv_lens),
            }
            params = {**({"q_lens": seq_q} if prefill else {}), "kv_lens": kv_lens, "layout_seed": 1000 + i}
            inputs = {
                "q": {"type": "random"},
                "k_cache": {"type": "random"},
                "v_cache": {"type": "random"},
                **({"qo_indptr": derived} if prefill else {}),
                "kv_indptr": derived,
                "kv_indices": derived,
            }
            rows.append(_row(name, axes, inputs, params))
        (ROOT / "workloads" / "gqa_paged").mkdir(parents=True, exist_ok=True)
        (ROOT / "workloads" / "gqa_paged" / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
        q_rows = "total_q" if prefill else "batch_size"
        records.append(
            {
                "name": "GqaPagedPrefill" if prefill else "GqaPagedDecode",
                "definition": name,
                "family": f"gqa_paged_{kind}",
                "summary": (
                    "causal GQA paged prefill h24/kv8/d128 ps1 (one 892-token sequence, 43,676-page cache, "
                    "and 2 more batches)"
                    if prefill
                    else "GQA paged decode h24/kv8/d128 ps1 (batch 15, 9,625 pages, 42,784-page cache, and "
                    "3 more "
                    "batches)"
                )
                + f"; {FLASHINFER_TIMED}",
                "baseline": f"flashinfer_gqa_{'paged_prefill' if prefill else 'paged_decode'}",
                "flops": PREFILL_FLOPS if prefill else "4 * num_qo_heads * head_dim * num_kv_indices",
                "bytes": f"4 * {q_rows} * num_qo_heads * head_dim + 4 * {q_rows} * num_qo_heads"
                " + 4 * num_kv_indices * page_size * num_kv_heads * head_dim"
                f" + {8 if prefill else 4} * len_indptr + 4 * num_kv_indices",
                **({} if prefill else {"targets": {"sm_90a": ["tma"], "sm_100a": ["tma"]}}),
                "default_workload": json.loads(rows[0])["workload"]["uuid"],
                "split": "test",
                "held_out": True,
            }
        )
    return records


def main() -> None:
    files = {
        "gemm.json": (
            "The GEMM shape suite: N x K projections of five models, each at five M.",
            gemm_records(),
        ),
        "mha.json": (
            "MHA forward (with LSE) and backward, causal and not, at head dimensions 64 and 96.",
            mha_records(),
        ),
        "gqa.json": ("GQA ragged and paged prefill and paged decode (bf16 output, fp32 LSE).", gqa_records()),
    }
    for file, (description, records) in files.items():
        _write_json(ROOT / "tasks" / file, {"description": description, "tasks": records})


if __name__ == "__main__":
    main()
