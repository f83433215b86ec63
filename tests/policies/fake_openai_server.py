"""A small OpenAI-chat-API server for tests of our client's error paths (stdlib only; binds 127.0.0.1).

Run: ``python fake_openai_server.py SCRIPT.json LOG.jsonl``; it prints ``PORT <n>`` once listening.
SCRIPT holds ``{"model": ..., "max_model_len": ..., "responses": [...], "default": {...}}``. Each
POST /v1/chat/completions consumes the next response (then ``default``):

- ``{"type": "ok", "content": str | [str per choice], "reasoning": str, "reasoning_field":
  "reasoning_content" | "reasoning", "repeat": int, "delay": s, "finish_reason": str}``
- ``{"type": "status", "code": 500, "body": "..."}`` -- an HTTP error
- ``{"type": "drop"}`` -- close the connection without answering
- ``{"type": "overflow"}`` -- HTTP 400 with a context-length message, as vLLM words it

Every request (path and JSON body) is appended to LOG so tests can check what the client sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class State:
    """The script and a cursor into it."""

    def __init__(self, script: dict, log_path: str) -> None:
        self.script, self.log_path = script, log_path
        self.lock = threading.Lock()
        self.i = 0
        self.inflight = 0

    def next(self) -> dict:
        with self.lock:
            items = self.script.get("responses", [])
            item = items[self.i] if self.i < len(items) else self.script.get("default", {"type": "ok"})
            self.i += 1
            return item

    def log(self, entry: dict) -> None:
        with self.lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output quiet
            return

        def _send(self, code: int, payload: dict | str) -> None:
            body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            state.log({"path": self.path, "method": "GET"})
            if self.path.rstrip("/").endswith("/models"):
                model = state.script.get("model", "test-model")
                card = {"id": model, "object": "model"}
                if state.script.get("max_model_len"):
                    card["max_model_len"] = state.script["max_model_len"]
                extra = [{"id": m, "object": "model"} for m in state.script.get("extra_models", [])]
                self._send(200, {"object": "list", "data": [card, *extra]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.inflight += 1
                inflight = state.inflight
            state.log({"path": self.path, "method": "POST", "body": body, "inflight": inflight})
            item = state.next()
            try:
                self._answer(item, body)
            finally:
                with state.lock:
                    state.inflight -= 1

        def _answer(self, item: dict, body: dict) -> None:
            time.sleep(item.get("delay", 0))
            kind = item.get("type", "ok")
            if kind == "drop":
                self.close_connection = True
                self.connection.close()
                return
            if kind == "status":
                self._send(item.get("code", 500), item.get("body", {"error": "injected failure"}))
                return
            if kind == "overflow":
                msg = (
                    "This model's maximum context length is 4096 tokens. However, you requested 9000 "
                    "tokens (5000 in the messages, 4000 in the completion)."
                )
                self._send(400, {"object": "error", "message": msg, "code": 400})
                return
            self._send(200, completion(item, body))

    return Handler


def completion(item: dict, body: dict) -> dict:
    n = int(body.get("n", 1))
    contents = item.get("content", "ok")
    if item.get("repeat"):
        contents = contents * int(item["repeat"])
    if contents is None or isinstance(contents, str):
        contents = [contents] * n
    field = item.get("reasoning_field", "reasoning_content")
    choices = []
    for i in range(n):
        msg = {"role": "assistant", "content": contents[i % len(contents)]}
        if item.get("reasoning") is not None:
            msg[field] = item["reasoning"]
        choices.append({"index": i, "message": msg, "finish_reason": item.get("finish_reason", "stop")})
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": choices,
        "usage": {"prompt_tokens": 123, "completion_tokens": 45 * n, "total_tokens": 123 + 45 * n},
    }


class FakeServer:
    """Test side: a running fake server process, its URL and the requests it saw."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self, method: str = "POST") -> list[dict]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [r for r in rows if r["method"] == method]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()


def start_server(script: dict, workdir: Path) -> FakeServer:
    """Start a fake server process on a free 127.0.0.1 port; return once it listens."""
    workdir.mkdir(parents=True, exist_ok=True)
    script_path, log = workdir / "script.json", workdir / "requests.jsonl"
    script_path.write_text(json.dumps(script))
    proc = subprocess.Popen(
        [sys.executable, __file__, str(script_path), str(log)], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return FakeServer(proc, int(line.split()[1]), log)


def load_module():
    """This module, imported by path (tests in other folders use it without a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fake_openai_server", __file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    script = json.load(open(sys.argv[1], encoding="utf-8"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(State(script, sys.argv[2])))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
