"""Fixtures for policy tests: a real local HTTP server speaking the OpenAI chat API."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "fake_openai_server", Path(__file__).with_name("fake_openai_server.py")
)
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)


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


@pytest.fixture
def dead_url() -> str:
    """A URL on a port nothing listens on (bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
