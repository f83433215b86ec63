"""The trusted side of one native runner process: start it, send commands, validate every reply.

The runner is started in its own session with three inherited descriptors: the read end of the command
pipe, the write end of the reply pipe and one end of a Unix socket for file descriptors (``SCM_RIGHTS``).
With a ``Jail`` it is started through ``ptxgym/confine``'s launcher, which confines itself and execs the
runner (no interpreter is left). Its stdin is ``/dev/null``; its stdout and stderr (the candidate's
output) go to a log file, never to the reply pipe. Frames are a 4-byte big-endian length and one JSON
object. A reply that is longer than ``MAX_REPLY_BYTES``, does not parse into ``wire.Reply``, or does not
echo the awaited sequence number is a ``ProtocolViolation``; a closed pipe is ``RunnerDied`` (with the
exit status); silence is ``RunnerTimeout``.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from ptxgym.confine import launch
from ptxgym.confine.launch import Jail
from ptxgym.evaluation.child_errors import (
    ProtocolViolation,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
    describe_exit,
)
from ptxgym.evaluation.runner.wire import MAX_COMMAND_BYTES, MAX_REPLY_BYTES, Command, Reply

RunnerError = WorkerError
"""The runner did not answer a command properly (the worker's error family: the same verdicts)."""
RunnerTimeout = WorkerTimeout
RunnerDied = WorkerDied


class RunnerClient:
    """One runner process and its channels."""

    def __init__(
        self,
        binary: Path,
        log_dir: Path,
        timeout_s: float = 30.0,
        jail: Jail | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Start ``binary``; with ``jail``, through ``ptxgym/confine``'s launcher (see ``jail.py``).

        The runner gets a scrubbed environment (``PATH`` only) and ``cwd`` (default ``log_dir``) as its
        working directory; the log of its output is written in ``log_dir``.
        """
        cmd_r, self._cmd_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        self._fds, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.log_path = Path(tempfile.mkstemp(prefix="runner-", suffix=".log", dir=log_dir)[1])
        argv = [str(binary), "--fd-in", str(cmd_r), "--fd-out", str(rep_w)]
        argv += ["--fd-sock", str(child_sock.fileno())]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                launch.command(jail, argv) if jail else argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(cmd_r, rep_w, child_sock.fileno()),
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin"},
                cwd=cwd or log_dir,
            )
        for fd in (cmd_r, rep_w):
            os.close(fd)
        child_sock.close()
        self.seq = 0
        try:
            self.hello = self._receive(0, timeout_s).hello
            if self.hello is None:
                raise ProtocolViolation("the first reply carries no hello", self.log_tail())
        except RunnerError:
            self.kill()
            raise

    @property
    def pid(self) -> int:
        """The runner's process id (also its process group id)."""
        return self.proc.pid

    def request(self, cmd: Command, timeout_s: float = 30.0, fds: Sequence[int] = ()) -> Reply:
        """Send ``cmd`` (``fds`` first, on the fd socket) and return its validated reply."""
        self.seq += 1
        body = cmd.model_dump_json().encode()
        body = body[:-1] + f',"seq":{self.seq}}}'.encode()
        if len(body) > MAX_COMMAND_BYTES:
            raise ValueError(f"command of {len(body)} bytes exceeds the runner's {MAX_COMMAND_BYTES}")
        if fds:
            try:
                socket.send_fds(self._fds, [b"F"], list(fds))
            except OSError as exc:
                raise RunnerError(
                    f"the runner closed its fd socket ({exc}): file descriptors go only before a load",
                    self.log_tail(),
                ) from exc
        try:
            os.write(self._cmd_w, struct.pack(">I", len(body)) + body)
        except OSError as exc:
            raise self._died(f"the runner stopped reading commands ({exc})") from exc
        return self._receive(self.seq, timeout_s)

    # ------------------------------------------------------------------------------------- reading

    def _receive(self, expected: int, timeout_s: float) -> Reply:
        deadline = time.monotonic() + timeout_s
        (length,) = struct.unpack(">I", self._read_exact(4, deadline))
        if length > MAX_REPLY_BYTES:
            raise ProtocolViolation(
                f"reply of {length} bytes exceeds {MAX_REPLY_BYTES}: something else wrote to the channel",
                self.log_tail(),
            )
        raw = self._read_exact(length, deadline)
        try:
            reply = Reply.model_validate_json(raw)
        except ValidationError as exc:
            raise ProtocolViolation(
                f"malformed reply ({length} bytes: {raw[:80]!r})", self.log_tail()
            ) from exc
        if reply.seq != expected:
            raise ProtocolViolation(
                f"reply to command {reply.seq} arrived while {expected} was awaited", self.log_tail()
            )
        return reply

    def _read_exact(self, n: int, deadline: float) -> bytes:
        data = b""
        while len(data) < n:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._rep_r], [], [], max(0.0, left))
            if not ready:
                raise RunnerTimeout(
                    f"no complete reply before the deadline ({len(data)} bytes)", self.log_tail()
                )
            chunk = os.read(self._rep_r, n - len(data))
            if not chunk:
                raise self._died("the runner ended without replying")
            data += chunk
        return data

    def _died(self, message: str) -> RunnerDied:
        try:
            code: int | None = self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            code = None
        return RunnerDied(f"{message} ({describe_exit(code)})", self.log_tail(), code)

    # ----------------------------------------------------------------------------------- lifecycle

    def log_tail(self, limit: int = 3000) -> str:
        """The last ``limit`` bytes of the runner's stdout and stderr."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - limit))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the runner's process group, reap it and close the channels."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout=10.0)
        for fd in (self._cmd_w, self._rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.close()
