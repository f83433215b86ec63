r"""SFT examples: the chat record every dataset builder writes, and how it is saved and loaded.

An ``SftExample`` is one conversation whose **last assistant message is the only supervised part**
(PTXBench's ``step_loss_mask``; ptxbench.md 7.3). It is stored two ways in a dataset directory:

- ``examples.jsonl``: one ``SftExample`` per line (the full record, metadata included);
- ``hf/``: a ``datasets.Dataset`` (``save_to_disk``) in TRL's conversational *prompt-completion* format,
  columns ``prompt`` (every message but the last), ``completion`` (the last assistant message), ``id``,
  ``kind``, ``task_id`` and ``metadata`` (JSON text). TRL trains on the completion only
  (``completion_only_loss``), which is exactly "last assistant message only", with any chat template;
- ``manifest.json``: counts per task and kind, and why rows were dropped.

The assistant text of a reasoned answer is ``<think>\\n{reasoning}\\n</think>\\n\\n{answer}``, the form the
Qwen3 chat templates produce and strip from earlier turns.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SFT_SCHEMA = "ptxgym.sft.v1"
Kind = Literal["kernelgen", "fixit"]
MetaValue = str | int | float | bool | None


class Message(BaseModel):
    """One chat message of an SFT example."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class SftExample(BaseModel):
    """One supervised conversation; only the last (assistant) message is trained on."""

    model_config = ConfigDict(frozen=True)

    schema_version: str = SFT_SCHEMA
    id: str = Field("", description="Content hash of the messages (set automatically when empty).")
    kind: Kind
    task_id: str = Field(description="Catalog task id the example is about (balancing key).")
    messages: tuple[Message, ...] = Field(description="system?, user, ..., assistant (the target).")
    metadata: dict[str, MetaValue] = Field(default_factory=dict, description="Provenance and statistics.")

    @model_validator(mode="after")
    def _check(self) -> SftExample:
        if len(self.messages) < 2 or self.messages[-1].role != "assistant":
            raise ValueError("an SFT example needs a prompt and ends with the assistant message it trains on")
        if not self.id:
            object.__setattr__(self, "id", content_id(self.messages))
        return self

    @property
    def prompt(self) -> list[dict[str, str]]:
        """Every message but the last, as TRL conversational dicts."""
        return [m.model_dump() for m in self.messages[:-1]]

    @property
    def completion(self) -> list[dict[str, str]]:
        """The supervised assistant message, as a one-element TRL conversational list."""
        return [self.messages[-1].model_dump()]

    def to_row(self) -> dict[str, Any]:
        """A flat row for ``datasets`` in TRL's prompt-completion format."""
        return {
            "id": self.id,
            "kind": self.kind,
            "task_id": self.task_id,
            "prompt": self.prompt,
            "completion": self.completion,
            "metadata": json.dumps(self.metadata, sort_keys=True),
        }


def content_id(messages: Sequence[Message]) -> str:
    """First 16 hex digits of the SHA-256 of the messages."""
    h = hashlib.sha256()
    for m in messages:
        h.update(f"{m.role}\x00{m.content}\x00".encode())
    return h.hexdigest()[:16]


def with_reasoning(answer: str, reasoning: str | None) -> str:
    """The assistant text: ``<think>`` block (when there is reasoning) then the answer."""
    if not reasoning or not reasoning.strip():
        return answer
    return f"<think>\n{reasoning.strip()}\n</think>\n\n{answer}"


def fenced(code: str, lang: str = "cpp") -> str:
    """A kernel in one fenced block, as the task prompt asks models to answer."""
    return f"```{lang}\n{code.rstrip()}\n```"


def answer_text(files: Mapping[str, str]) -> str:
    """Solution files as the answer the env reads.

    One fenced block for a lone ``kernel.cu``, else a block named after each file (the entry file first),
    as the env's several-file form asks.
    """
    from ptxgym.cpu.extract import ENTRY_FILE

    if list(files) == [ENTRY_FILE]:
        return fenced(files[ENTRY_FILE])
    names = sorted(files, key=lambda n: (n != ENTRY_FILE, n))
    return "\n\n".join(f"```cuda {name}\n{files[name].rstrip()}\n```" for name in names)


def save_examples(
    examples: Sequence[SftExample],
    out_dir: str | Path,
    dropped: Mapping[str, int] | None = None,
    formats: Iterable[str] = ("jsonl", "hf"),
) -> Path:
    """Write ``examples.jsonl``, the Hugging Face dataset under ``hf/`` and ``manifest.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    formats = set(formats)
    if unknown := formats - {"jsonl", "hf"}:
        raise ValueError(f"unknown dataset formats {sorted(unknown)}; use jsonl and/or hf")
    if "jsonl" in formats:
        with (out / "examples.jsonl").open("w", encoding="utf-8") as fh:
            for ex in examples:
                fh.write(json.dumps(ex.model_dump(mode="json"), ensure_ascii=False) + "\n")
    if "hf" in formats:
        to_hf_dataset(examples).save_to_disk(str(out / "hf"))
    manifest = {
        "schema": SFT_SCHEMA,
        "rows": len(examples),
        "by_task": dict(sorted(Counter(e.task_id for e in examples).items())),
        "by_kind": dict(sorted(Counter(e.kind for e in examples).items())),
        "dropped": dict(sorted((dropped or {}).items())),
        "assistant_chars": sum(len(e.messages[-1].content) for e in examples),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def to_hf_dataset(examples: Sequence[SftExample]) -> Any:
    """A ``datasets.Dataset`` in prompt-completion format (imports ``datasets``)."""
    from datasets import Dataset

    rows = [e.to_row() for e in examples]
    if not rows:
        raise ValueError("no examples to write: every candidate was filtered out (see the dropped counts)")
    return Dataset.from_list(rows)


def read_examples(path: str | Path) -> list[SftExample]:
    """Examples from ``examples.jsonl`` (or a dataset directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "examples.jsonl"
    lines = p.read_text(encoding="utf-8").splitlines()
    return [SftExample.model_validate_json(line) for line in lines if line.strip()]


def load_sft_dataset(path: str | Path) -> Any:
    """A prompt-completion ``datasets.Dataset`` from a dataset directory (``hf/``) or an examples JSONL."""
    p = Path(path)
    if (p / "hf").is_dir():
        from datasets import load_from_disk

        return load_from_disk(str(p / "hf"))
    if p.is_dir() and (p / "dataset_info.json").is_file():
        from datasets import load_from_disk

        return load_from_disk(str(p))
    return to_hf_dataset(read_examples(p))
