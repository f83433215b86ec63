"""Disposable worker processes and the pool of pre-warmed spares.

A worker is a fresh interpreter (``python -m ptxgym.evaluation.sandboxed.worker``) in its own session (so the
whole process group can be killed, children included), SIGKILLed when the thread that spawned it exits, with
its own scratch directory as working directory (deleted with it). Its stdout and stderr (the candidate's
printf included) go through a pipe to a reader thread of the trusted side, which keeps the first
``MAX_OUTPUT_BYTES`` in a log file and, past that, only the last ``TAIL_BYTES`` in memory: a printf flood
costs neither disk nor memory, and a worker that writes faster than the reader drains blocks on its
writes. A worker meant for the host sandbox (``sandbox.py``) is spawned with a scrubbed environment
whose CUDA JIT cache and TMPDIR lie in that scratch directory. Commands go down one pipe, JSON replies
come up another; the worker's stdin is a Unix socket that carries file descriptors a command needs
(``SCM_RIGHTS``: the guard-page blob's allocation), which the worker closes before the candidate loads.
Every failure to get a well-formed, matching reply in time is an exception the evaluator turns into a
verdict: ``WorkerTimeout`` (hang), ``WorkerDied`` (exit, abort, segfault) or
``ProtocolViolation``.

Spawning happens on one long-lived thread, because the parent-death signal is tied to the spawning
thread, not the process. A fresh interpreter with CUDA costs about 4 s, so the pool keeps ``spares``
workers warming in the background. A spare warming (importing torch, creating its CUDA context, mapping
the arena) shares the GPU and the host with whatever runs at that moment, so the evaluator does not let
``take`` replace a spare at once (``refill=False``): it refills after the candidate's timed calls
(``fill``), and for the native runners (which start quickly) waits for every warming spare before the
next calibration (``settle``; ``local.QUIET_SPARES`` says why not for Python workers).
"""

from __future__ import annotations

import collections
import os
import pickle
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path

from pydantic import ValidationError

from ptxgym.confine import cores
from ptxgym.confine.groups import kill_group, signal_group
from ptxgym.evaluation.child_errors import (
    ProtocolViolation,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
    describe_exit,
)
from ptxgym.evaluation.protocol import MAX_REPLY_BYTES, Command, Reply, worker_environ

MAX_OUTPUT_BYTES = 1 << 20
"""Bytes of a worker's stdout and stderr kept in its log file (1 MiB); the rest is read and dropped."""
TAIL_BYTES = 64 << 10
"""Bytes of output kept in memory once ``MAX_OUTPUT_BYTES`` are written (the end of a flood, 64 KiB)."""


class OutputCapture:
    """Drains a worker's output pipe on a thread: the first ``limit`` bytes to a file, then a rolling tail."""

    def __init__(self, fd: int, path: Path, limit: int = MAX_OUTPUT_BYTES, tail: int = TAIL_BYTES) -> None:
        self.fd, self.path, self.limit, self.tail_bytes = fd, path, limit, tail
        self.written = 0
        self.dropped = 0
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="ptxgym-worker-output", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with open(self.path, "ab") as log:
            while True:
                try:
                    chunk = os.read(self.fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                keep = chunk[: max(0, self.limit - self.written)]
                if keep:
                    log.write(keep)
                    log.flush()
                    self.written += len(keep)
                rest = chunk[len(keep) :]
                if rest:
                    with self._lock:
                        self.dropped += len(rest)
                        self._tail += rest
                        del self._tail[: -self.tail_bytes]
        os.close(self.fd)

    def settle(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until the pipe is drained to its end."""
        self._thread.join(timeout_s)

    def text(self, limit: int) -> str:
        """The last ``limit`` characters of the output, noting any bytes dropped past the cap."""
        with self._lock:
            dropped, tail = self.dropped, bytes(self._tail)
        if dropped:
            note = f"[{dropped} bytes of output past the first {self.limit} were dropped; the last ones:]\n"
            return note + tail[-limit:].decode(errors="replace")
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - limit))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""


FRAME_GRACE_S = 1.0
"""Time a reply frame that began by a request's deadline still gets to complete."""
SEND_TIMEOUT_S = 60.0
"""Time a command queued without a request (a spare's attach) has to enter the worker's command pipe."""


def _ready(fd: int, event: int, timeout_s: float) -> bool:
    """Whether ``fd`` is ready for ``event`` within ``timeout_s`` (``poll``: no FD_SETSIZE limit).

    ``select.POLLIN``: data or its end; ``select.POLLOUT``: room to write.
    """
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0.0, timeout_s) * 1000.0))


class WorkerHandle:
    """The trusted side of one worker process."""

    def __init__(
        self, argv: list[str], env: dict[str, str] | None, log_dir: Path, sandboxed: bool = False
    ) -> None:
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.log_path = Path(tempfile.mkstemp(prefix="worker-", suffix=".log", dir=log_dir)[1])
        self.scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=log_dir))
        if sandboxed:
            env = worker_environ(os.environ if env is None else env, self.scratch)
        argv = [*argv, "--fd-in", str(cmd_r), "--fd-out", str(rep_w), "--parent-pid", str(os.getpid())]
        out_r, out_w = os.pipe()
        self._fds, child_fds = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen(
            argv,
            stdin=child_fds.fileno(),
            stdout=out_w,
            stderr=out_w,
            pass_fds=(cmd_r, rep_w),
            cwd=self.scratch,
            start_new_session=True,
            env=env,
        )
        for fd in (cmd_r, rep_w, out_w):
            os.close(fd)
        child_fds.close()
        self._connected(cmd_w, rep_r, out_r)

    def _connected(self, cmd_w: int, rep_r: int, out_r: int) -> None:
        """The trusted side's ends of a started child: commands, replies, its output; no command sent."""
        self.output = OutputCapture(out_r, self.log_path)
        os.set_blocking(cmd_w, False)  # commands are written under a deadline (``_write_frame``)
        self._to = Connection(cmd_w, readable=False, writable=True)
        self._from = Connection(rep_r, readable=True, writable=False)
        self.spawned_at = time.monotonic()
        self.seq = 0
        self.pending: collections.deque[int] = collections.deque([0])  # the unasked hello
        self.hello: Reply | None = None
        self.primed: dict[str, object] = {}
        self.dead = False

    @property
    def pid(self) -> int:
        """Process id (also the process group id)."""
        return self.proc.pid

    # ---------------------------------------------------------------------------------------- I/O

    def send(
        self, cmd: Command, pickler=None, fds: Sequence[int] = (), timeout_s: float = SEND_TIMEOUT_S
    ) -> int:
        """Queue a command without waiting for its reply; returns its sequence number.

        ``fds``: file descriptors the command needs (a guard-page blob's allocation), passed first on the
        worker's fd socket (its stdin, a Unix socket) with ``SCM_RIGHTS``; the worker reads them when it
        handles the command. The command is written within ``timeout_s`` (``WorkerTimeout`` past it): a
        worker that stops reading commands while answering ahead (a reviewer's find) had blocked the
        evaluator's write, and its GPU turn, forever. With no command outstanding, a reply already waiting
        is one sent before its command: a protocol violation.
        """
        deadline = time.monotonic() + timeout_s
        data = self._numbered(cmd, pickler)
        try:
            if fds:
                self._fds.settimeout(max(0.001, deadline - time.monotonic()))
                socket.send_fds(self._fds, [b"F"], list(fds))
            self._write_frame(data, deadline)
        except TimeoutError as exc:
            raise WorkerTimeout(
                f"the worker took no command within {timeout_s:.1f} s", self.log_tail()
            ) from exc
        except OSError as exc:
            raise self._died(f"the worker stopped reading commands ({exc})") from exc
        self.pending.append(self.seq)
        return self.seq

    def _numbered(self, cmd: Command, pickler=None) -> bytes:
        """The next command's encoding, numbered (``seq``); refused when a reply came before it."""
        if not self.pending and _ready(self._from.fileno(), select.POLLIN, 0.0) and self.proc.poll() is None:
            raise self._sent_ahead()
        self.seq += 1
        return self._encode(cmd.model_copy(update={"seq": self.seq}), pickler)

    def _sent_ahead(self) -> ProtocolViolation:
        """A reply waiting before its command was written (``_numbered``, ``timed_exchange``)."""
        return ProtocolViolation(
            "a reply arrived before its command was sent: something writes the reply channel ahead",
            self.log_tail(),
        )

    def timed_request(
        self, cmd: Command, timeout_s: float, copies: Sequence[tuple[int, int, int]], stream: int
    ) -> tuple[Reply, float, float]:
        """``request`` for a timed call, its wall read off the interpreter's lock (``exchange.py``).

        ``copies`` (destination, source, bytes) are the trusted copies of the call's outputs, queued on
        ``stream`` once the reply is in and awaited inside the wall. Returns the reply, the command to
        reply time and the whole wall, in ms. Failures raise what ``send`` and ``receive`` raise.
        """
        return self.timed_exchange(self.timed_frame(cmd, timeout_s), timeout_s, copies, stream)

    def timed_frame(self, cmd: Command, timeout_s: float) -> bytes:
        """``timed_exchange``'s command frame, numbered (outstanding only once ``timed_exchange`` sends it).

        ``Session._call`` makes it before the inputs are synchronised, so no Python runs between their
        readiness and the command; a failure in between (the step's budget, the synchronisation) leaves
        no command awaited that was never sent (a reviewer's find), only a skipped number.
        """
        self.drain(timeout_s)
        frame = self._numbered(cmd)
        return struct.pack("!i", len(frame)) + frame

    def timed_exchange(
        self, frame: bytes, timeout_s: float, copies: Sequence[tuple[int, int, int]], stream: int
    ) -> tuple[Reply, float, float]:
        """The exchange of ``timed_frame``'s frame (``timed_request``)."""
        from ptxgym.evaluation.trusted import exchange as ex

        self.pending.append(self.seq)
        try:
            done = ex.exchange(
                self._to.fileno(),
                frame,
                timeout_s,
                self._from.fileno(),
                timeout_s,
                FRAME_GRACE_S,
                copies,
                stream,
            )
        except ex.ExchangeError as exc:
            raise self._exchange_failed(exc, timeout_s) from exc
        reply = self._parse(done.raw)
        if reply.seq != self.pending[0]:
            raise ProtocolViolation(
                f"reply to command {reply.seq} arrived while {self.pending[0]} was awaited: "
                "something else wrote to the reply channel",
                self.log_tail(),
            )
        self.pending.popleft()
        return reply, done.request_ms, done.wall_ms

    def _exchange_failed(self, exc, timeout_s: float) -> Exception:
        """The worker's usual exception for a failed timed exchange (``exchange.ExchangeError``)."""
        from ptxgym.evaluation.trusted import exchange as ex

        if exc.status == ex.WRITE_TIMEOUT:
            return WorkerTimeout(f"the worker took no command within {timeout_s:.1f} s", self.log_tail())
        if exc.status == ex.NO_REPLY and self.proc.poll() is None:
            return WorkerTimeout(f"no reply within {timeout_s:.1f} s", self.log_tail())
        if exc.status == ex.STALLED:
            return WorkerTimeout("a reply stalled (the frame never completed)", self.log_tail())
        if exc.status == ex.AHEAD and self.proc.poll() is None:
            return self._sent_ahead()
        if exc.status == ex.BAD_LENGTH:
            return ProtocolViolation(f"unreadable or oversized reply ({exc})", self.log_tail())
        if exc.status in (ex.NO_CUDA, ex.CUDA_ERROR):
            return RuntimeError(f"the trusted side's timed exchange failed: {exc}")
        if exc.status == ex.WRITE_ERROR:
            return self._died(f"the worker stopped reading commands ({exc})")
        return self._died(f"the worker ended without replying ({exc})")

    def _write_frame(self, data: bytes, deadline: float) -> None:
        """One command frame (``multiprocessing.connection``'s framing), written by ``deadline``."""
        fd, view = self._to.fileno(), memoryview(struct.pack("!i", len(data)) + data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not _ready(fd, select.POLLOUT, left):
                    raise TimeoutError("the command pipe stayed full") from None

    def _encode(self, cmd: Command, pickler=None) -> bytes:
        """One command as the bytes of its frame (the Python worker unpickles them)."""
        return pickler(cmd) if pickler else pickle.dumps(cmd, protocol=pickle.HIGHEST_PROTOCOL)

    def receive(self, timeout_s: float) -> Reply:
        """The reply to the oldest outstanding command."""
        expected = self.pending[0]
        deadline = time.monotonic() + timeout_s
        try:
            ready = self._from.poll(timeout_s)
        except (OSError, EOFError) as exc:
            raise self._died(f"the reply channel broke ({exc})") from exc
        if not ready:
            if self.proc.poll() is not None:
                raise self._died("the worker ended without replying")
            raise WorkerTimeout(f"no reply within {timeout_s:.1f} s", self.log_tail())
        try:
            raw = self._recv_frame(max(deadline, time.monotonic() + FRAME_GRACE_S))
        except EOFError as exc:
            raise self._died("the worker ended without replying") from exc
        except OSError as exc:
            raise ProtocolViolation(f"unreadable or oversized reply ({exc})", self.log_tail()) from exc
        reply = self._parse(raw)
        if reply.seq != expected:
            raise ProtocolViolation(
                f"reply to command {reply.seq} arrived while {expected} was awaited: "
                "something else wrote to the reply channel",
                self.log_tail(),
            )
        self.pending.popleft()
        return reply

    def _recv_frame(self, deadline: float) -> bytes:
        """One reply frame (``multiprocessing.connection``'s length-prefixed framing), read by ``deadline``.

        ``Connection.recv_bytes`` blocks until the whole frame is in: a worker that wrote a header promising
        more bytes than it sends held the evaluator (and the GPU turn) forever (a reviewer's find).
        """
        (size,) = struct.unpack("!i", self._read_exact(4, deadline))
        if size == -1:
            (size,) = struct.unpack("!Q", self._read_exact(8, deadline))
        if not 0 <= size <= MAX_REPLY_BYTES:
            raise OSError(f"bad reply length {size} (limit {MAX_REPLY_BYTES})")
        return self._read_exact(size, deadline)

    def _read_exact(self, n: int, deadline: float) -> bytes:
        fd = self._from.fileno()
        data = bytearray()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not _ready(fd, select.POLLIN, left):
                raise WorkerTimeout(
                    f"a reply stalled after {len(data)} of its {n} bytes (the frame never completed)",
                    self.log_tail(),
                )
            chunk = os.read(fd, n - len(data))
            if not chunk:
                raise EOFError("end of file during a reply")
            data += chunk
        return bytes(data)

    def request(self, cmd: Command, timeout_s: float, pickler=None, fds: Sequence[int] = ()) -> Reply:
        """Send a command and wait for its reply (earlier queued replies are consumed first)."""
        self.drain(timeout_s)
        self.send(cmd, pickler, fds, timeout_s)
        return self.receive(timeout_s)

    def drain(self, timeout_s: float) -> list[Reply]:
        """Collect the replies of every queued command."""
        return [self.receive(timeout_s) for _ in range(len(self.pending))]

    def _parse(self, raw: bytes) -> Reply:
        try:
            return Reply.model_validate_json(raw)
        except ValidationError as exc:
            raise ProtocolViolation(
                f"malformed reply ({len(raw)} bytes: {raw[:80]!r})", self.log_tail()
            ) from exc

    def _died(self, message: str) -> WorkerDied:
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            code = None
        self.output.settle(1.0)
        return WorkerDied(f"{message} ({describe_exit(code)})", self.log_tail(), code)

    # ------------------------------------------------------------------------------------ lifecycle

    def log_tail(self, limit: int = 3000) -> str:
        """The last ``limit`` characters of the worker's stdout and stderr (capped, see ``OutputCapture``)."""
        return self.output.text(limit)

    def kill(self) -> None:
        """SIGKILL the worker's whole process group, reap it and delete its scratch directory.

        Every member of the group is awaited (bounded, ``groups.kill_group``), not only the worker: a
        process the candidate forked (the jails refuse ``setsid``/``setpgid``, so it stays in the group)
        may be tearing a CUDA context down, which must not overlap the next subject's timing.
        """
        if self.dead:
            return
        self.dead = True
        kill_group(self.proc, grace_s=10.0)
        self.output.settle(2.0)
        for conn in (self._to, self._from):
            conn.close()
        self._fds.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def stop(self) -> None:
        """SIGKILL the worker's process group now, without waiting for it (``kill`` reaps it later).

        From here no code of the worker or of anything it started runs on the host; its CUDA context may
        still be torn down (``EvalSettings.early_refill`` starts the next spares meanwhile).
        """
        if not self.dead:
            signal_group(self.proc)

    def discard(self) -> None:
        """Kill and delete the log file."""
        self.kill()
        self.log_path.unlink(missing_ok=True)


class WorkerPool:
    """Hands out fresh workers, keeping ``spares`` of them warming in the background.

    ``factory``: spawn handles with it (``native_worker.NativeHandle``) instead of Python workers.

    ``sandboxed``: spawn every worker ready for the host sandbox (scrubbed environment, private CUDA JIT
    cache); the sandbox itself is applied later, by a command, after the worker's warm-up.
    """

    def __init__(
        self,
        device: int = 0,
        spares: int = 2,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        sandboxed: bool = False,
        factory: Callable[[Path, bool], WorkerHandle] | None = None,
    ) -> None:
        self.device = device
        self.spares = max(0, spares)
        self.argv = argv or [
            sys.executable,
            "-P",  # its working directory is its scratch: never a place to import from
            "-m",
            "ptxgym.evaluation.sandboxed.worker",
            "--device",
            str(device),
        ]
        self.env = env
        self.sandboxed = sandboxed
        self.factory = factory
        """Spawns one handle from (log_dir, sandboxed) instead of the Python worker (the native runner)."""
        self._own_dir = tempfile.TemporaryDirectory(prefix="ptxgym-workers-") if log_dir is None else None
        self.log_dir: Path = Path(self._own_dir.name) if self._own_dir else Path(str(log_dir))
        self._spawner = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ptxgym-spawner", initializer=cores.unpin
        )  # unpinned: it may start in a GPU turn, whose pin (GpuQueue.turn) its spares would inherit
        self._ready: collections.deque[WorkerHandle] = collections.deque()
        self.primer: Callable[[WorkerHandle], None] | None = None
        self.spawned = 0

    def _spawn(self) -> WorkerHandle:
        if self.factory is not None:
            handle = self._spawner.submit(self.factory, self.log_dir, self.sandboxed).result()
        else:
            handle = self._spawner.submit(
                WorkerHandle, self.argv, self.env, self.log_dir, self.sandboxed
            ).result()
        self.spawned += 1
        if self.primer is not None:
            self.primer(handle)
        return handle

    def fill(self) -> None:
        """Start workers until ``spares`` are warming or ready."""
        while len(self._ready) < self.spares:
            self._ready.append(self._spawn())

    @property
    def stock(self) -> int:
        """Spares warming or ready now."""
        return len(self._ready)

    def take(self, refill: bool = True) -> WorkerHandle:
        """A worker for one candidate (the oldest spare, or a new one).

        ``refill``: replace the spare at once; the evaluator passes False and calls ``fill`` when no
        subject is being timed (module docstring).
        """
        handle = self._ready.popleft() if self._ready else self._spawn()
        if refill:
            self.fill()
        return handle

    def settle(self, ready: Callable[[WorkerHandle], None]) -> int:
        """Wait for every spare with ``ready`` (a worker that fails there is dropped); return how many.

        ``ready`` blocks until the spare's start-up replies are in (``LocalGpuEvaluator._ready``): after
        this, no spare of this pool is still starting.
        """
        waited = 0
        for handle in list(self._ready):
            waited += 1
            try:
                ready(handle)
            except WorkerError:
                self._ready.remove(handle)
                handle.discard()
        return waited

    def prime_all(self) -> None:
        """Apply the current primer to every waiting spare (e.g. after the arena changed)."""
        if self.primer is not None:
            for handle in self._ready:
                self.primer(handle)

    def close(self) -> None:
        """Kill every spare and stop the spawner."""
        while self._ready:
            self._ready.popleft().discard()
        self._spawner.shutdown(wait=True)
        if self._own_dir is not None:
            self._own_dir.cleanup()
