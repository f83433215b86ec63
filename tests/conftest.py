"""Shared test set-up: markers that skip cleanly (and visibly) when the hardware or tool is absent."""

from __future__ import annotations

import functools
import importlib.util
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# A real local HTTP server speaking the OpenAI chat API (policies, runner and CLI tests use it).
_spec = importlib.util.spec_from_file_location(
    "fake_openai_server", Path(__file__).parent / "policies" / "fake_openai_server.py"
)
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)


@functools.cache
def gpu_reason() -> str | None:
    """None when a CUDA GPU is usable from torch, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    return None


@functools.cache
def nvcc_reason() -> str | None:
    """None when ptxgym finds a CUDA compiler, else why not."""
    try:
        from ptxgym.cpu.toolchain import find_toolchain

        find_toolchain()
    except Exception as exc:  # noqa: BLE001 - any failure means "skip the nvcc tests", with the reason
        return f"no CUDA toolchain: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip gpu- and nvcc-marked tests with the precise reason when the machine lacks them."""
    for item in items:
        if "gpu" in item.keywords and gpu_reason():
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {gpu_reason()}"))
        if "nvcc" in item.keywords and nvcc_reason():
            item.add_marker(pytest.mark.skip(reason=f"nvcc test: {nvcc_reason()}"))


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test session gets its own build/baseline cache unless PTXGYM_CACHE_DIR is set."""
    import os

    if not os.environ.get("PTXGYM_CACHE_DIR"):
        os.environ["PTXGYM_CACHE_DIR"] = str(tmp_path_factory.mktemp("ptxgym-cache"))


@pytest.fixture(autouse=True, scope="module")
def _gpu_files_one_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist (``-n 2``) with a GPU: gpu test files run one at a time.

    Each file's module fixtures (an evaluator, its workers) and tests then have the GPU to themselves
    (CPU-only files may run alongside), so the timings they assert are not disturbed by another worker's.
    A file lock in the run's shared temporary folder; serial runs and machines without a GPU take none.
    """
    import os

    here = request.node.path
    gpu_here = any(i.path == here and i.get_closest_marker("gpu") for i in request.session.items)
    if not os.environ.get("PYTEST_XDIST_WORKER") or not gpu_here or gpu_reason():
        yield
        return
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent  # xdist gives each worker a folder in the run's own
    with open(shared / "ptxgym-gpu.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def have(tool: str) -> bool:
    """Whether a command is on PATH."""
    return shutil.which(tool) is not None


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[Callable[[dict], fake.FakeServer]]:
    """Factory: ``fake_server(script)`` starts one; all are stopped after the test."""
    servers: list = []

    def _start(script: dict):
        s = fake.start_server(script, tmp_path / f"server{len(servers)}")
        servers.append(s)
        return s

    yield _start
    for s in servers:
        s.stop()
