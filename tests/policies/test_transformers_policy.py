"""TransformersPolicy on a tiny Qwen2 model and a byte-level BPE tokenizer built locally (no hub)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ptxgym.knowledge_packs.prompting import build_task_prompt  # noqa: E402
from ptxgym.policies import Conversation, SamplingParams  # noqa: E402
from ptxgym.policies.transformers_policy import TransformersConfig, TransformersPolicy  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny(path: Path) -> Path:
    """A 2-layer Qwen2 with a 512-token byte-level BPE trained on the task prompt; saved to ``path``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    text = build_task_prompt(get_task("Gemm-sm90a")).text
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([text] * 4, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.add_tokens(["<think>", "</think>"])
    tok.chat_template = CHATML
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    torch.set_num_threads(1)
    return build_tiny(tmp_path_factory.mktemp("tiny-qwen2"))


SAMPLING = SamplingParams(temperature=1.0, top_k=50, top_p=0.95, max_tokens=24)


def test_two_turn_episode_through_the_env(tiny_dir: Path) -> None:
    import gymnasium

    import ptxgym  # noqa: F401

    pol = TransformersPolicy(
        TransformersConfig(model=str(tiny_dir), sampling=SAMPLING, seed=0, history="full")
    )
    env = gymnasium.make(
        "ptxgym/Gemm-sm90a-v0", evaluator="none", max_turns=2, variant="none"
    )  # tiny context
    obs, info = env.reset(seed=0)
    conv = Conversation.from_prompt(info["prompt"], task_id="Gemm-sm90a")
    statuses = []
    for turn in range(2):
        action = pol.act(obs, conv)
        assert action.completion_tokens is not None and 0 < action.completion_tokens <= 24
        assert action.prompt_tokens == pol.count_tokens(pol._render(pol.build_prompt(obs, conv)))
        assert [m.role for m in action.messages][-1] == "user" and len(action.messages) == 2 + 2 * turn
        obs, reward, terminated, truncated, info = env.step(action.text)
        statuses.append(info["feedback"].status.value)
        conv = conv.add(action.text, obs["text"], action.reasoning)
    assert truncated and not terminated
    assert statuses == ["EXTRACT_ERROR", "EXTRACT_ERROR"]  # a random model writes no kernel
    env.close()


def test_batch_sample_and_history_budget(tiny_dir: Path) -> None:
    pol = TransformersPolicy(
        TransformersConfig(
            model=str(tiny_dir), sampling=SAMPLING, seed=1, history="latest", max_context_tokens=3000
        )
    )
    assert pol.max_parallel == 1
    conv = Conversation(system="sys", user="Write the kernel.", task_id="Gemm-sm90a")
    long = conv.add("x" * 40_000, "Turn 1 result: EXTRACT_ERROR").add(
        "```cpp\n//v2\n```", "Turn 2 result: ..."
    )
    actions = pol.act_batch([({}, conv), ({}, long)])
    assert len(actions) == 2 and all(a.finish_reason in ("stop", "length") for a in actions)
    assert actions[1].dropped_turns == 1 and actions[1].messages[2].content == "```cpp\n//v2\n```"
    samples = pol.sample({}, conv, n=3)
    assert len(samples) == 3


def test_lora_adapter_is_loaded_with_peft(tiny_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    peft_model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    )
    peft_model.save_pretrained(tmp_path / "adapter")
    pol = TransformersPolicy(
        TransformersConfig(model=str(tiny_dir), lora=str(tmp_path / "adapter"), sampling=SAMPLING, seed=0)
    )
    assert type(pol.model).__name__ == "PeftModelForCausalLM"
    assert any("lora_A" in name for name, _ in pol.model.named_parameters())
    assert pol.act({}, Conversation(user="hi")).completion_tokens


def test_think_block_becomes_reasoning(tiny_dir: Path) -> None:
    pol = TransformersPolicy(TransformersConfig(model=str(tiny_dir), sampling=SAMPLING))
    from ptxgym.policies.chat import split_reasoning

    assert split_reasoning("<think>tile 128x128</think>\n```cpp\nk\n```") == (
        "```cpp\nk\n```",
        "tile 128x128",
    )
    assert split_reasoning("plan</think>answer") == ("answer", "plan")
    assert pol.describe()["history"] == "full"
