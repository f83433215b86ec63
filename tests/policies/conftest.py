"""Fixtures for policy tests (``fake_server``, the local OpenAI server, lives in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def dead_url() -> str:
    """A URL on a port nothing listens on (bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
