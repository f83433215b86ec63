"""The include path of every candidate build: the packs' ``headers/`` folders and nothing else.

Builds must not reach the expert solutions, validation kernels, notes or any other file of the packs (a
one-line ``#include <sm90a/solutions/Gemm.cu>`` once earned near-maximal reward). So the headers are
copied into a tree of their own, content-addressed under the cache directory, laid out as in the packs
(``<arch>/headers/<file>``), and only that tree goes on the include path:

- ``-I <tree>``: ``#include <sm90a/headers/wgmma.cuh>`` works as the prompts say;
- ``-I <tree>/<arch>/headers``: ``#include "sm90a.cuh"`` works, and the headers' own relative includes.

The tree is written once per header content (atomically: a temporary folder renamed into place).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ptxgym.knowledge_packs.variants import PACK_ROOT
from ptxgym.records import settings
from ptxgym.records.arch import ARCHS, get_arch

HEADER_SUFFIXES = (".cuh", ".h", ".hpp")


def _headers() -> list[Path]:
    """Every header of every architecture's ``headers/`` folder (relative to the pack root)."""
    found = []
    for arch in ARCHS.values():
        folder = PACK_ROOT / arch.short / "headers"
        if folder.is_dir():
            found += [
                p.relative_to(PACK_ROOT) for p in sorted(folder.iterdir()) if p.suffix in HEADER_SUFFIXES
            ]
    return found


def header_tree() -> Path:
    """The content-addressed tree holding only the packs' headers (created on first use)."""
    files = _headers()
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.as_posix().encode() + b"\0" + (PACK_ROOT / rel).read_bytes() + b"\0")
    root = settings.cache_dir() / "include" / digest.hexdigest()[:16]
    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root.parent))
    for rel in files:
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PACK_ROOT / rel, staging / rel)
    try:
        os.rename(staging, root)
    except OSError:  # another process made it first: theirs is identical
        shutil.rmtree(staging, ignore_errors=True)
    return root


def pack_include_dirs(arch: str) -> list[Path]:
    """The include directories of a build for ``arch``: the header tree and the arch's headers in it."""
    root = header_tree()
    headers = root / get_arch(arch).short / "headers"
    return [root, headers] if headers.is_dir() else [root]
