"""Choosing SFT rows: duplicate kernels out, problems balanced.

- **Dedup** by a normalised kernel hash: the CUDA block is taken out of the response with the env's own
  extractor, comments are removed and every run of whitespace becomes one space, so two responses that
  differ only in prose, comments or formatting count as the same kernel.
- **Balance** with a per-problem cap (PTXBench Fixit caps 33 rows per definition; ptxbench.md 7.1):
  at most ``cap`` rows per task, the kept ones chosen by a seeded shuffle (reproducible, no bias to the
  first trajectory) or by a score (``best``: highest first).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_SPACE = re.compile(r"\s+")


def extract_answer(text: str) -> str | None:
    """Every file the env would build from a response, as a clean answer (``sft_examples.answer_text``).

    None when there is nothing to build. The same extractor as the pipeline's, so a several-file answer
    keeps all its files (taking one of them alone once labelled an unbuilt fragment PASSED).
    """
    from ptxgym.cpu.extract import extract_sources
    from ptxgym.train.sft_examples import answer_text

    files = extract_sources(text).files
    return None if files is None else answer_text(files)


def normalise_kernel(code: str) -> str:
    """Comments removed, whitespace runs collapsed to one space, ends stripped."""
    code = _BLOCK_COMMENT.sub(" ", code)
    code = _LINE_COMMENT.sub(" ", code)
    return _SPACE.sub(" ", code).strip()


def kernel_hash(text: str) -> str:
    """SHA-256 (16 hex digits) of the normalised files of a response (of the whole text if none).

    Every file, named (a lone ``kernel.cu`` hashes as its normalised text alone): two answers that share
    their entry file but not a header are two kernels.
    """
    from ptxgym.cpu.extract import ENTRY_FILE, extract_sources

    files = extract_sources(text).files
    if files is None:
        body = normalise_kernel(text)
    elif list(files) == [ENTRY_FILE]:
        body = normalise_kernel(files[ENTRY_FILE])
    else:
        body = "\0".join(f"{name}\0{normalise_kernel(files[name])}" for name in sorted(files))
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def dedup(items: Iterable[T], key: Callable[[T], str]) -> tuple[list[T], int]:
    """Keep the first item of each key; return (kept, number dropped)."""
    seen: set[str] = set()
    kept: list[T] = []
    total = 0
    for item in items:
        total += 1
        k = key(item)
        if k not in seen:
            seen.add(k)
            kept.append(item)
    return kept, total - len(kept)


def balance(
    items: Sequence[T],
    group: Callable[[T], str],
    cap: int | None,
    seed: int = 0,
    score: Callable[[T], float] | None = None,
) -> tuple[list[T], int]:
    """At most ``cap`` items per group (seeded shuffle, or highest ``score`` first); keeps group order.

    Returns (kept, number dropped). ``cap=None`` keeps everything.
    """
    if cap is None:
        return list(items), 0
    if cap < 1:
        raise ValueError(f"cap must be >= 1 or None, got {cap}")
    groups: dict[str, list[T]] = defaultdict(list)
    for item in items:
        groups[group(item)].append(item)
    rng = random.Random(seed)
    kept: list[T] = []
    for name in sorted(groups):
        members = list(groups[name])
        if score is not None:
            members.sort(key=score, reverse=True)
        else:
            rng.shuffle(members)
        kept.extend(members[:cap])
    return kept, len(items) - len(kept)
