"""A tiny causal LM and tokenizer built locally from a config: no hub download, seconds to train.

For CPU smoke runs, CI and quick GPU benches of the trainers, never for real kernels. The tokenizer is a
BPE trained on the given texts (kernel sources, task prompts): byte-level, so any text encodes, with
ChatML-style special tokens and a chat template that marks the assistant text with
``{% generation %}`` (so TRL's ``assistant_only_loss`` works as well as prompt-completion loss). Each
message header ends in the special token ``<|im_sep|>``, so a prompt rendered with the generation
prompt is always a token prefix of the prompt plus its answer (no BPE merge crosses it).

``whole_text_merges=True`` trains BPE without splitting on spaces, so frequent multi-word strings
(up to ``max_token_chars`` characters) become single tokens: a kernel then needs about a quarter as
many tokens as with word-level BPE, which is what lets a CPU test teach a 2-layer model a kernel in a
minute.

The model is a Llama architecture (``LlamaForCausalLM``) with tied embeddings. (Not Qwen2: for a
``qwen2`` config ``AutoTokenizer`` loads ``Qwen2Tokenizer``, which replaces the saved pre-tokenizer, so a
saved tiny model would no longer tokenize as it was trained.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_sep|>"]
EXTRA_TOKENS = ["<think>", "</think>"]

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "<|im_start|>assistant<|im_sep|>{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}\n"
    "{%- else -%}"
    "<|im_start|>{{ message['role'] }}<|im_sep|>{{ message['content'] }}<|im_end|>\n"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant<|im_sep|>{%- endif -%}"
)


@dataclass(frozen=True)
class TinyConfig:
    """Size of the tiny model and its tokenizer."""

    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 256
    layers: int = 2
    heads: int = 4
    max_positions: int = 8192
    whole_text_merges: bool = True
    max_token_chars: int | None = 16
    """Longest token the BPE may learn, in characters (keeps whole-text merges from swallowing a file)."""
    seed: int = 0


def train_tokenizer(texts: Iterable[str], config: TinyConfig = TinyConfig()) -> Any:
    """A fast byte-level BPE tokenizer trained on ``texts``, with the chat template set."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=not config.whole_text_merges
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=config.max_token_chars,
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_sep|>"],
    )
    fast.add_tokens(EXTRA_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_model(tokenizer: Any, config: TinyConfig = TinyConfig()) -> Any:
    """A randomly initialised Llama causal LM sized by ``config`` for ``tokenizer``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(config.seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def build_tiny(
    texts: Iterable[str], out_dir: str | Path | None = None, config: TinyConfig = TinyConfig()
) -> tuple[Any, Any]:
    """Tokenizer and model; saved to ``out_dir`` (a fresh directory) when given."""
    tok = train_tokenizer(texts, config)
    model = tiny_model(tok, config)
    if out_dir is not None:
        out = Path(out_dir)
        if out.exists() and any(out.iterdir()):
            raise FileExistsError(f"{out} is not empty; save a tiny model into a fresh directory")
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tok.save_pretrained(out)
    return model, tok


def corpus_for_tasks(
    task_ids: Iterable[str], kernels: Iterable[str] = (), variant: str | None = None
) -> list[str]:
    """Texts to train a tiny tokenizer on: the task prompts, their feedback vocabulary and kernels."""
    from ptxgym.knowledge_packs.prompting import build_task_prompt
    from ptxgym.records.tasks import get_task, require_not_test

    task_ids = list(task_ids)
    require_not_test(task_ids, "a training corpus")
    texts = []
    for tid in task_ids:
        p = build_task_prompt(get_task(tid), variant)
        texts += [p.system, p.user]
    return texts + list(kernels)
