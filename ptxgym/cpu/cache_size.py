"""Bound on the build cache's disk use: least recently used entries go first.

An RL run builds a new candidate on almost every step, and each cached build keeps its shared object
(up to ``screen.MAX_ARTIFACT_BYTES``) and sources: without a bound the cache fills the disk. ``prune`` walks
``<cache>/builds/<key[:2]>/<key>`` and, when the entries' total is over the limit, evicts the least
recently used (``meta.json``'s mtime: a cache hit touches it, ``touch``) until the total is below
``LOW_WATER`` of it. An entry used in the last ``min_idle_s`` is never evicted: another process may be
about to load its shared object. Staging folders (``builds/tmp``) older than ``STALE_STAGE_S`` are the
remains of a killed build and go too.

``PTXGYM_BUILD_CACHE_MB`` sets the limit (``settings.build_cache_mb``); ``build._commit`` calls ``prune``
once its process has added a sixteenth of the limit since the last walk (``Pruner``).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

LOW_WATER = 0.9
"""A prune stops once the total is below this share of the limit (room for the next builds)."""
MIN_IDLE_S = 600.0
"""An entry used more recently than this is kept whatever the total."""
STALE_STAGE_S = 86400.0
"""A staging folder this old belongs to no running build."""
PRUNE_EVERY = 16
"""``Pruner`` walks the cache each time its process has added ``limit / PRUNE_EVERY`` bytes."""


@dataclass(frozen=True)
class Pruned:
    """What one ``prune`` found and did."""

    entries: int
    total_bytes: int
    evicted: int
    evicted_bytes: int


def evict(entry: Path) -> None:
    """Remove a cache entry: renamed first, so a concurrent reader never sees it half deleted."""
    trash = entry.with_name(f"{entry.name}.evict-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def touch(entry: Path) -> None:
    """Mark an entry used now (its ``meta.json``'s mtime); best effort."""
    try:
        os.utime(entry / "meta.json")
    except OSError:
        pass


def prune(root: Path, limit_bytes: int, min_idle_s: float = MIN_IDLE_S, now: float | None = None) -> Pruned:
    """Evict least recently used entries of the build cache at ``root`` while it is over ``limit_bytes``."""
    now = time.time() if now is None else now
    _remove_stale_stages(root / "tmp", now)
    entries: list[tuple[float, int, Path]] = []
    for shard in _dirs(root):
        if len(shard.name) != 2:
            continue
        for entry in _dirs(shard):
            if ".evict-" in entry.name:
                shutil.rmtree(entry, ignore_errors=True)  # a crashed eviction's remains
                continue
            try:
                used = (entry / "meta.json").stat().st_mtime
            except OSError:
                used = 0.0  # no record: a broken entry, oldest of all
            entries.append((used, _size(entry), entry))
    total = sum(size for _, size, _ in entries)
    evicted = evicted_bytes = 0
    if total > limit_bytes:
        for used, size, entry in sorted(entries, key=lambda e: e[0]):
            if total <= LOW_WATER * limit_bytes or now - used < min_idle_s:
                break
            evict(entry)
            total -= size
            evicted += 1
            evicted_bytes += size
    return Pruned(len(entries), total, evicted, evicted_bytes)


class Pruner:
    """Calls ``prune`` once a process has added enough to the cache since the last walk."""

    def __init__(self) -> None:
        self.added = 0
        self.walked = False

    def added_entry(self, root: Path, entry: Path, limit_bytes: int) -> Pruned | None:
        """Count a new entry's bytes; prune if the process's first, or a ``PRUNE_EVERY``-th of the limit."""
        self.added += _size(entry)
        if self.walked and self.added < limit_bytes / PRUNE_EVERY:
            return None
        self.added, self.walked = 0, True
        return prune(root, limit_bytes)


def _dirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _remove_stale_stages(tmp: Path, now: float) -> None:
    for stage in _dirs(tmp):
        try:
            old = now - stage.stat().st_mtime > STALE_STAGE_S
        except OSError:
            continue
        if old:
            shutil.rmtree(stage, ignore_errors=True)
