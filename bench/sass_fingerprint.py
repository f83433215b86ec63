"""SASS fingerprint of the five expert solutions, built through the product's build stage (CPU only).

Prints, per solution, a hash of its ``cuobjdump -sass`` text (the lines naming the artifact dropped) and
its line count. Two commits whose fingerprints agree build the same machine code, so GPU figures measured
on one hold for the other. Usage: ``python bench/sass_fingerprint.py [--out FILE]``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import subprocess
import sys
from pathlib import Path

from ptxgym.cpu.build import build_solution
from ptxgym.cpu.sass import dump_sass
from ptxgym.cpu.toolchain import find_toolchain
from ptxgym.knowledge_packs.include_tree import pack_include_dirs
from ptxgym.knowledge_packs.variants import PACK_ROOT
from ptxgym.records.schema import Solution
from ptxgym.records.tasks import get_task

SOLUTIONS = ("Gemm", "MhaFwd", "MhaFwdCausal", "MhaBwd", "MhaBwdCausal")
_HEADER = ("Fatbin", "code for", "host =", "compile_size", "arch =")


def fingerprint(name: str) -> tuple[str, int]:
    """(hash, lines) of the SASS of one expert solution."""
    task = get_task(f"{name}-sm90a")
    source = (PACK_ROOT / "sm90a" / "solutions" / f"{name}.cu").read_text()
    solution = Solution.from_cuda_source(source, task.definition.name, arch=task.arch)
    built = build_solution(solution, task.arch_spec, include_dirs=pack_include_dirs(task.arch))
    if built.status is not None or built.so_path is None:
        raise SystemExit(f"{name}: build failed: {built.message}")
    sass = dump_sass(built.so_path, find_toolchain())
    body = [line for line in sass.splitlines() if not line.lstrip().startswith(_HEADER)]
    return hashlib.sha256("\n".join(body).encode()).hexdigest()[:16], len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    lines = [f"# SASS fingerprints, {datetime.date.today()}, commit {commit.strip() or '?'}"]
    lines += [f"{name:14s} {h} {n} lines" for name in SOLUTIONS for h, n in [fingerprint(name)]]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
