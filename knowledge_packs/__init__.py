"""Knowledge packs: architecture parameters, PTX wrapper headers, contracts and patterns per GPU target.

Folders (package data, all text written for ptxgym):

- ``sm90a/``: Hopper (H100/H200) parameters, contract, debug hints, wrapper headers, expert solutions.
- ``sm100a/``: Blackwell (B200) parameters, contract, wrapper headers and validation kernels. These
  compile for sm_100a and show the tcgen05 SASS families; none has run on a B200 (none was available).
- ``patterns/``: operator recipes (warp-specialised GEMM, FlashAttention-3 style forward with the
  corrected Algorithm 2, attention backward schedule, Blackwell tcgen05 GEMM).
- ``variants.json``: the named prompt variants (the paper's ablation ladder) per architecture.

Usage::

    from ptxgym.knowledge_packs import render_variant, variant_names

    variant_names("sm_90a")        # ['params', 'templates', 'contract', 'patterns-gemm', ...]
    pack = render_variant("sm90a", "contract")
    pack.text, pack.parts, pack.tokens, pack.tokenizer
"""

from .tokens import count_tokens, default_tokenizer_name
from .variants import (
    PACK_ROOT,
    PromptPack,
    UnknownVariantError,
    ablation_ladder,
    render_part,
    render_variant,
    variant_names,
    variant_parts,
)

__all__ = [
    "PACK_ROOT",
    "PromptPack",
    "UnknownVariantError",
    "ablation_ladder",
    "count_tokens",
    "default_tokenizer_name",
    "render_part",
    "render_variant",
    "variant_names",
    "variant_parts",
]
