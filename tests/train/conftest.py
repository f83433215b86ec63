"""Fixtures of the training tests: the recorded trajectories and kernel files under ``data/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

# Never reach for a model hub from the training tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")


@pytest.fixture(scope="session")
def trajectory_file() -> Path:
    """Eight recorded turns of three Gemm-sm90a trajectories (see data/make_trajectories.py)."""
    return DATA / "trajectories.jsonl"


@pytest.fixture(scope="session")
def records(trajectory_file):
    """The fixture turns as TurnRecords."""
    from ptxgym.train.episodes import load_records

    return load_records([trajectory_file])


@pytest.fixture(scope="session")
def kernel_text():
    """``name -> source`` of the fixture kernels."""

    def read(name: str) -> str:
        return (DATA / "kernels" / f"{name}.cu").read_text()

    return read


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The CPU is shared: one torch thread keeps the tiny trainings fast under load."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
