"""The build cache's size bound: least recently used entries go, recently used ones stay."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ptxgym.cpu import build, cache_size
from ptxgym.cpu.build import BuildOutcome
from ptxgym.records import settings
from ptxgym.records.feedback import CompileInfo, Status

KIB = 1024


def _entry(root: Path, key: str, size: int, used: float) -> Path:
    entry = root / key[:2] / key
    entry.mkdir(parents=True)
    (entry / "kernel.so").write_bytes(b"x" * size)
    (entry / "meta.json").write_text("{}")
    os.utime(entry / "meta.json", (used, used))
    return entry


def test_prune_evicts_the_least_recently_used_until_below_the_low_water(tmp_path: Path) -> None:
    now = time.time()
    old = [_entry(tmp_path, f"a{i}{'0' * 8}", 100 * KIB, now - 10_000 + i) for i in range(5)]
    fresh = _entry(tmp_path, "b" * 10, 100 * KIB, now)  # used just now: kept whatever the total
    untouched = cache_size.prune(tmp_path, limit_bytes=10_000 * KIB, now=now)
    assert untouched.evicted == 0 and all(e.exists() for e in [*old, fresh])
    pruned = cache_size.prune(tmp_path, limit_bytes=350 * KIB, now=now)
    # 600 KiB over a 350 KiB limit: down to 0.9 x 350 = 315 KiB, oldest first
    assert pruned.evicted == 3 and [e.exists() for e in old] == [False, False, False, True, True]
    assert fresh.exists() and pruned.total_bytes <= 0.9 * 350 * KIB + 4 * KIB


def test_recently_used_entries_survive_a_limit_they_exceed(tmp_path: Path) -> None:
    now = time.time()
    entries = [_entry(tmp_path, f"c{i}{'0' * 8}", 100 * KIB, now - 60) for i in range(3)]
    pruned = cache_size.prune(tmp_path, limit_bytes=50 * KIB, now=now)
    assert pruned.evicted == 0 and all(e.exists() for e in entries)


def test_a_stale_staging_folder_goes_a_live_one_stays(tmp_path: Path) -> None:
    now = time.time()
    stale, live = tmp_path / "tmp" / "k-stale", tmp_path / "tmp" / "k-live"
    for folder, age in ((stale, cache_size.STALE_STAGE_S + 60), (live, 5)):
        folder.mkdir(parents=True)
        os.utime(folder, (now - age, now - age))
    cache_size.prune(tmp_path, limit_bytes=1 << 30, now=now)
    assert not stale.exists() and live.exists()


def test_a_cache_hit_makes_an_entry_the_last_to_go(tmp_path: Path, monkeypatch) -> None:
    """``build._load`` touches what it serves; ``build._commit`` prunes as entries arrive."""
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PTXGYM_BUILD_CACHE_MB", "1")
    monkeypatch.setattr(build, "_PRUNER", cache_size.Pruner())
    root = build.builds_dir()
    outcome = BuildOutcome(Status.COMPILE_ERROR, "error", None, CompileInfo(ok=False), key="k")
    keys = [f"{c * 2}{'0' * 30}" for c in "defg"]
    for i, key in enumerate(keys[:3]):
        stage = root / "tmp" / f"stage{i}"
        stage.mkdir(parents=True)
        (stage / "blob").write_bytes(b"y" * (400 * KIB))
        build._commit(stage, root / key[:2] / key, outcome)
    for i, key in enumerate(keys[:3]):  # used long ago, the first the longest
        used = time.time() - 1000 + i
        os.utime(root / key[:2] / key / "meta.json", (used, used))
    assert build._load(root / keys[0][:2] / keys[0], keys[0]) is not None  # the oldest, used now
    build._PRUNER.added = 1 << 30  # the next commit walks the cache
    stage = root / "tmp" / "stage3"
    stage.mkdir()
    (stage / "blob").write_bytes(b"y" * (400 * KIB))
    build._commit(stage, root / keys[3][:2] / keys[3], outcome)
    present = [(root / k[:2] / k).exists() for k in keys]
    # 1.6 MiB over 1 MiB: the two least recently used go (without the touch, the oldest would be first)
    assert present == [True, False, False, True], present


@pytest.mark.parametrize("value", ["0", "-5", "lots", "１２"])
def test_a_bad_limit_is_a_clear_error(monkeypatch, value: str) -> None:
    monkeypatch.setenv("PTXGYM_BUILD_CACHE_MB", value)
    with pytest.raises(ValueError, match="PTXGYM_BUILD_CACHE_MB"):
        settings.build_cache_mb()
