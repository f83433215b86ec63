"""Prompt variants: named selections of knowledge-pack parts, rendered into one prompt text.

The variant table (``variants.json`` beside this file) reproduces the paper's ablation ladder for each
architecture: ``params`` (architecture parameters only) -> ``templates`` (+ PTX wrapper headers) ->
``contract`` (+ architecture contract; Hopper also + debug hints; the paper's default pack) ->
``patterns-gemm`` / ``patterns-attn-fwd`` / ``patterns-attn-bwd`` (+ the matching pattern document)
and ``full`` (every pattern). A variant lists its parts and may extend another variant, whose parts
come first; globs expand in sorted order, then each header moves after the pack headers it
``#include``s, so the rendered order is one a model can paste top to bottom. Parts that do not exist
(yet) are skipped and reported in ``PromptPack.missing`` (``strict=True`` raises instead).
"""

from __future__ import annotations

import functools
import posixpath
import re
import warnings
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ptxgym.records.arch import get_arch
from ptxgym.records.errors import PtxgymError

from .tokens import Encoder, count_tokens

PACK_ROOT = Path(__file__).resolve().parent
"""Folder holding the packs; part paths are relative to it."""

TABLE_PATH = PACK_ROOT / "variants.json"

HEADER_SUFFIXES = (".cuh", ".h", ".hpp")
"""Parts embedded as fenced cpp blocks; everything else is inlined as Markdown."""

_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


class UnknownVariantError(PtxgymError, KeyError):
    """A prompt variant or architecture that the variant table does not define."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown prompt variant"


class VariantSpec(BaseModel):
    """One row of the variant table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    extends: str | None = Field(None, description="Variant whose parts come first.")
    parts: list[str] = Field(description="Paths or globs relative to the packs folder.")


class ArchVariants(BaseModel):
    """The variants of one architecture."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str = Field(description="Human name, e.g. 'sm_90a (Hopper: H100, H200)'.")
    variants: dict[str, VariantSpec]


class VariantTable(BaseModel):
    """The whole ``variants.json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    about: str = ""
    ladder: list[str] = Field(description="Ablation order: each variant's parts contain the previous one's.")
    archs: dict[str, ArchVariants]

    @model_validator(mode="after")
    def _check(self) -> VariantTable:
        for arch, table in self.archs.items():
            absent = [name for name in self.ladder if name not in table.variants]
            if absent:
                raise ValueError(f"{arch}: ladder variants {absent} are not defined")
            for name in table.variants:
                _chain(table, name, arch)  # raises on unknown bases and cycles
        return self


class PromptPack(BaseModel):
    """A rendered prompt variant: the text a policy puts in the system message, and its size."""

    model_config = ConfigDict(frozen=True)

    arch: str = Field(description="Canonical architecture name, e.g. sm_90a.")
    variant: str = Field(description="Variant name, e.g. contract.")
    text: str = Field(description="The rendered pack: Markdown with headers as fenced cpp blocks.")
    parts: list[str] = Field(description="Paths (relative to the packs folder) that were rendered, in order.")
    missing: list[str] = Field(
        default_factory=list, description="Listed paths or globs that matched no file."
    )
    chars: int = Field(description="len(text).")
    tokens: int = Field(description="Token count of text, by `tokenizer`.")
    tokenizer: str = Field(description="What counted the tokens, or the estimate's name (estimate:...).")


def _chain(table: ArchVariants, name: str, arch: str) -> list[VariantSpec]:
    """The specs from the root base down to ``name``."""
    chain: list[VariantSpec] = []
    seen: set[str] = set()
    current: str | None = name
    while current is not None:
        if current in seen:
            raise ValueError(f"{arch}: variant {name!r} extends itself through {sorted(seen)}")
        if current not in table.variants:
            raise ValueError(f"{arch}: variant {name!r} extends unknown variant {current!r}")
        seen.add(current)
        spec = table.variants[current]
        chain.append(spec)
        current = spec.extends
    return chain[::-1]


@functools.cache
def load_table(path: Path = TABLE_PATH) -> VariantTable:
    """Parse and validate the variant table."""
    return VariantTable.model_validate_json(path.read_text(encoding="utf-8"))


def _arch_key(arch: str, table: VariantTable) -> tuple[str, str]:
    """(table key such as 'sm90a', canonical name such as 'sm_90a') for any accepted spelling."""
    try:
        spec = get_arch(arch)
    except PtxgymError:
        spec = None
    if spec is None or spec.short not in table.archs:
        valid = sorted(table.archs)
        raise UnknownVariantError(f"unknown architecture {arch!r} for knowledge packs; valid: {valid}")
    return spec.short, spec.name


def variant_names(arch: str) -> list[str]:
    """Variant names of an architecture: the ablation ladder first, then any extra variants."""
    table = load_table()
    key, _ = _arch_key(arch, table)
    extra = sorted(n for n in table.archs[key].variants if n not in table.ladder)
    return [*table.ladder, *extra]


def ablation_ladder() -> list[str]:
    """The paper's ablation order (every architecture defines all of these)."""
    return list(load_table().ladder)


def _expand(pattern: str) -> list[str]:
    """Relative paths matching one part entry (a literal path or a glob), sorted."""
    if any(ch in pattern for ch in "*?["):
        return sorted(p.relative_to(PACK_ROOT).as_posix() for p in PACK_ROOT.glob(pattern) if p.is_file())
    return [pattern] if (PACK_ROOT / pattern).is_file() else []


def variant_parts(arch: str, variant: str) -> tuple[list[str], list[str]]:
    """(present parts in render order, listed entries that matched nothing) of one variant."""
    table = load_table()
    key, name = _arch_key(arch, table)
    variants = table.archs[key].variants
    if variant not in variants:
        raise UnknownVariantError(
            f"unknown prompt variant {variant!r} for {name}; valid: {variant_names(arch)}"
        )
    present: list[str] = []
    missing: list[str] = []
    for spec in _chain(table.archs[key], variant, key):
        for entry in spec.parts:
            found = _expand(entry)
            if not found:
                missing.append(entry)
            present.extend(p for p in found if p not in present)
    return dependency_order(present), missing


def _includes(header: str, candidates: set[str]) -> list[str]:
    """The other parts that ``header`` includes with ``#include "..."`` (resolved beside it)."""
    text = (PACK_ROOT / header).read_text(encoding="utf-8")
    here = posixpath.dirname(header)
    found = (posixpath.normpath(posixpath.join(here, inc)) for inc in _QUOTED_INCLUDE.findall(text))
    return [p for p in found if p in candidates and p != header]


def dependency_order(parts: list[str]) -> list[str]:
    """Reorder the header parts so every header follows the pack headers it includes.

    Listed (sorted) order is kept wherever the includes allow it, so a model can paste the headers
    top to bottom into one file. Markdown parts keep their positions.
    """
    headers = [p for p in parts if is_header(p)]
    deps = {h: _includes(h, set(headers)) for h in headers}
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(h: str) -> None:
        if h in ordered or h in visiting:  # done, or an include cycle (guarded headers): keep going
            return
        visiting.add(h)
        for dep in deps[h]:
            visit(dep)
        visiting.discard(h)
        ordered.append(h)

    for h in headers:
        visit(h)
    queue = iter(ordered)
    return [next(queue) if is_header(p) else p for p in parts]


def is_header(part: str) -> bool:
    """Whether a part is embedded as code rather than inlined as Markdown."""
    return part.endswith(HEADER_SUFFIXES)


def render_part(part: str) -> str:
    """One part as prompt text: Markdown verbatim, headers as a fenced cpp block under their name."""
    body = (PACK_ROOT / part).read_text(encoding="utf-8").strip("\n")
    if not is_header(part):
        return body
    return f"File `{part}`:\n```cpp\n{body}\n```"


_HEADERS_NOTE = (
    "## PTX wrapper headers\n"
    "The files below are C++ wrappers around the PTX this architecture's fast kernels need; their "
    "comments state the PTX syntax and the rules each instruction imposes. Your answer is one kernel "
    "file with no include path: paste the wrappers you use into it in the order given here (each file "
    'comes after the files it includes) and delete the `#include "..."` lines that name pack headers.'
)


def render_text(arch: str, variant: str, parts: list[str]) -> str:
    """Assemble the parts of a variant into one prompt text."""
    table = load_table()
    key, _ = _arch_key(arch, table)
    chunks = [f"# Knowledge pack for {table.archs[key].title}, variant `{variant}`"]
    headers_started = False
    for part in parts:
        if is_header(part) and not headers_started:
            chunks.append(_HEADERS_NOTE)
            headers_started = True
        chunks.append(render_part(part))
    return "\n\n".join(chunks) + "\n"


def render_variant(
    arch: str, variant: str, *, tokenizer: Encoder | None = None, strict: bool = False
) -> PromptPack:
    """Render a named prompt variant for an architecture (``sm_90a``, ``sm90a``, ``sm_100a`` ...).

    Raises UnknownVariantError (a KeyError) listing the valid names for an unknown architecture or
    variant. Listed parts that do not exist are skipped with a warning and reported in
    ``missing``; with ``strict=True`` they raise FileNotFoundError. ``tokenizer`` (anything with an
    ``encode`` method) gives exact token counts for that model; see ``tokens.count_tokens``.
    """
    _, name = _arch_key(arch, load_table())
    parts, missing = variant_parts(arch, variant)
    if missing:
        message = f"knowledge pack {name}/{variant}: no file matches {missing} under {PACK_ROOT}"
        if strict:
            raise FileNotFoundError(message)
        warnings.warn(message, stacklevel=2)
    text = render_text(arch, variant, parts)
    tokens, counted_by = count_tokens(text, tokenizer)
    return PromptPack(
        arch=name,
        variant=variant,
        text=text,
        parts=parts,
        missing=missing,
        chars=len(text),
        tokens=tokens,
        tokenizer=counted_by,
    )
