"""``envs/data/make_suite.py`` writes exactly the suite data that is committed (CPU).

The generator is the suite's provenance: a record edited by hand (a baseline, ``independent_axes``) and
not in the generator would be lost the next time someone runs it. Run on a copy of ``envs/data``, it
must leave every file byte for byte as committed and add none.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "envs" / "data"


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_the_generator_rewrites_the_committed_suite_unchanged(tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(DATA, copy, ignore=shutil.ignore_patterns("__pycache__"))
    spec = importlib.util.spec_from_file_location("make_suite_under_test", copy / "make_suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ROOT == copy
    module.main()
    before, after = _files(DATA), _files(copy)
    assert sorted(after) == sorted(before)
    changed = [name for name in before if after[name] != before[name]]
    assert not changed, f"make_suite.py would rewrite {changed}"
