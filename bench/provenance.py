"""The commit a bench measured, for the header of its results file.

``$COMMIT`` first: the device machine's copy of the tree carries stale git metadata, so the caller that
knows the commit (``bench/gpu_tests.sh`` and the device command lines) passes it; otherwise git's HEAD.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """``$COMMIT``, else the short HEAD of this checkout, else 'unknown'."""
    if os.environ.get("COMMIT"):
        return os.environ["COMMIT"]
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"
