"""HTTP transports for OpenAI-compatible servers (vLLM, SGLang), with one error vocabulary.

Two transports speak the same two calls, ``chat(body)`` (POST /chat/completions) and ``models()``
(GET /models), and return the server's JSON as a plain dict, so extra response fields such as
``reasoning_content`` (SGLang) and ``reasoning`` (vLLM) survive untouched:

- ``OpenAIClientTransport``: the ``openai`` client (``pip install openai``; in the vllm/sglang extras),
  with its own retries switched off (``max_retries=0``) so that one retry policy governs both transports;
- ``UrllibTransport``: the standard library only, for machines without ``openai``.

Both raise ``TransportError`` with ``kind`` in {"connect", "dropped", "timeout", "status"} and the HTTP
status and body text where there is one; the policy decides what to retry.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any


class TransportError(Exception):
    """One failed request, classified."""

    def __init__(self, kind: str, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.kind, self.status, self.body = kind, status, body

    @property
    def retryable(self) -> bool:
        """Connection trouble, 5xx and 429 are worth another try; other statuses are not."""
        if self.kind != "status":
            return True
        return self.status is not None and (self.status >= 500 or self.status == 429)


class UrllibTransport:
    """Plain ``urllib.request`` JSON calls."""

    name = "urllib"

    def __init__(self, base_url: str, api_key: str = "EMPTY", timeout: float = 3600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _request(self, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - user-given http(s) URL
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")[:4000]
            raise TransportError("status", f"HTTP {exc.code}: {text[:500]}", exc.code, text) from exc
        except urllib.error.URLError as exc:
            raise _classify_os_error(exc.reason) from exc
        except (http.client.RemoteDisconnected, http.client.IncompleteRead, ConnectionError) as exc:
            msg = f"the server closed the connection ({type(exc).__name__})"
            raise TransportError("dropped", msg) from exc
        except TimeoutError as exc:
            raise TransportError("timeout", f"no answer within {timeout:.0f} s") from exc
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            msg = f"the server sent a response that is not JSON: {raw[:200]!r}"
            raise TransportError("dropped", msg) from exc

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /chat/completions."""
        return self._request("POST", "/chat/completions", body, self.timeout)

    def models(self, timeout: float = 10.0) -> dict[str, Any]:
        """GET /models."""
        return self._request("GET", "/models", None, timeout)

    def close(self) -> None:
        """Nothing to release."""


def _classify_os_error(reason: object) -> TransportError:
    if isinstance(reason, ConnectionRefusedError):
        return TransportError("connect", "connection refused")
    if isinstance(reason, TimeoutError):
        return TransportError("timeout", "the connection timed out")
    if isinstance(reason, socket.gaierror):
        return TransportError("connect", f"host name not resolved ({reason})")
    if isinstance(reason, ConnectionError):
        return TransportError("dropped", f"connection failed ({type(reason).__name__})")
    return TransportError("connect", f"cannot connect ({reason})")


class OpenAIClientTransport:
    """The ``openai`` client, used for its connection pooling; our retry policy wraps it."""

    name = "openai"

    def __init__(self, base_url: str, api_key: str = "EMPTY", timeout: float = 3600.0) -> None:
        import openai

        self._openai = openai
        self.base_url = base_url.rstrip("/")
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=0)

    def _wrap(self, fn: Any) -> dict[str, Any]:
        oa = self._openai
        try:
            return fn()
        except oa.APITimeoutError as exc:
            raise TransportError("timeout", "no answer in time") from exc
        except oa.APIConnectionError as exc:
            cause = exc.__cause__
            while cause is not None and not isinstance(cause, OSError) and cause.__cause__ is not None:
                cause = cause.__cause__
            if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause or "").lower():
                raise TransportError("connect", "connection refused") from exc
            raise TransportError("dropped", f"connection error ({cause or exc})") from exc
        except oa.APIStatusError as exc:
            text = exc.response.text[:4000] if exc.response is not None else str(exc)
            msg = f"HTTP {exc.status_code}: {text[:500]}"
            raise TransportError("status", msg, exc.status_code, text) from exc

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /chat/completions through ``client.chat.completions.create``."""
        body = dict(body)
        std = {k: body.pop(k) for k in ("model", "messages")}
        extra = {k: v for k, v in body.items() if k not in _OPENAI_KWARGS}
        known = {k: v for k, v in body.items() if k in _OPENAI_KWARGS}
        return self._wrap(
            lambda: self.client.chat.completions.create(**std, **known, extra_body=extra or None).model_dump()
        )

    def models(self, timeout: float = 10.0) -> dict[str, Any]:
        """GET /models (raw JSON, so server-specific fields such as max_model_len survive)."""
        return self._wrap(lambda: self.client.get("/models", cast_to=object, options={"timeout": timeout}))

    def close(self) -> None:
        """Close the HTTP pool."""
        self.client.close()


_OPENAI_KWARGS = {
    "n",
    "max_tokens",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "logprobs",
    "top_logprobs",
}


def make_transport(kind: str, base_url: str, api_key: str, timeout: float):
    """``auto`` (the openai client when importable, else urllib), ``openai`` or ``urllib``."""
    if kind not in {"auto", "openai", "urllib"}:
        raise ValueError(f"transport must be auto, openai or urllib, got {kind!r}")
    if kind in {"auto", "openai"}:
        try:
            return OpenAIClientTransport(base_url, api_key, timeout)
        except ImportError:
            if kind == "openai":
                raise ImportError("transport='openai' needs the openai package: pip install openai") from None
    return UrllibTransport(base_url, api_key, timeout)
