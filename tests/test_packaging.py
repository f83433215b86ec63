"""Packaging: the layout installs as ptxgym.*, import is light, the wheel carries the data."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_does_not_load_heavy_dependencies() -> None:
    code = (
        "import sys, ptxgym, gymnasium; gymnasium.make('ptxgym/Gemm-sm90a-v0', evaluator='none');"
        "heavy = [m for m in ('torch', 'trl', 'vllm', 'sglang', 'transformers') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import ptxgym pulled in: {out.stdout}"


def test_every_package_folder_is_found_by_the_build() -> None:
    """setuptools' package discovery (pyproject ``packages.find``) sees every folder with an __init__."""
    from setuptools import find_packages

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(find_packages(ROOT, include=conf["packages"]["find"]["include"]))
    on_disk = {
        ".".join(Path(d).relative_to(ROOT).parts)
        for d, _, files in os.walk(ROOT / "ptxgym", followlinks=True)
        if "__init__.py" in files
    }
    assert on_disk - found == set(), "package folders the build would leave out"
    for top in ("envs", "rewards", "policies", "train", "knowledge_packs"):
        link = ROOT / "ptxgym" / top
        assert link.is_symlink() and link.resolve() == (ROOT / top).resolve(), f"ptxgym/{top} -> ../{top}"


@pytest.mark.slow
def test_wheel_contains_task_data_and_knowledge_packs(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("ptxgym-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ptxgym/envs/data/definitions/gemm/gemm_n7168_k5120.json" in names
    assert "ptxgym/envs/data/workloads/attention/mha_bwd_d128_causal.jsonl" in names
    assert any(n.startswith("ptxgym/knowledge_packs/") and n.endswith(".md") for n in names)
    assert "ptxgym/audit/kernels/naive.cu" in names and "ptxgym/audit/actions/single_wgmma.cu" in names
    packages = ("envs", "rewards", "policies", "train", "knowledge_packs", "cli", "records", "cpu", "audit")
    for pkg in (*packages, "confine"):
        assert f"ptxgym/{pkg}/__init__.py" in names
    for pkg in ("trusted", "sandboxed"):
        assert f"ptxgym/evaluation/{pkg}/__init__.py" in names
