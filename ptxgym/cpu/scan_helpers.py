"""Helper processes for the build's backstop scan, off the interpreter that times candidates.

Builds run on threads of the env's own process (``pipeline.run_batch``; one thread per env under
``ptxgym eval --concurrency`` and the throughput bench's stream schedule), the process in which the
local evaluator takes the trusted wall clock of every timed call (``trusted/session.py``, ``_call``).
The interpreter's lock is one for all of them: a timing thread back from a blocking call (the reply's
read, a device synchronisation) waits for the lock while a build thread runs Python, up to the switch
interval (5 ms) per wait, and a call's wall holds several such waits. Measured on a CPU host with the
native runner's host path (``bench/wall_gil.py``): a trusted round trip of ~0.03 ms took 5-10 ms while
another thread ran Python all the time, and its tail grew at a third of the time. The backstop's scan of
nvcc's intermediates (``build._host_asm_backstop``) was most of a build's interpreter time (cProfile of
the expert GEMM's build: ~85%); it runs here instead, in long-lived helper processes of our own code
(this interpreter with its flags, this process's ``ptxgym`` first on its path: ``helper_argv``; started
on first use, ``PTXGYM_SCAN_HELPERS`` at most), one request per scan: the kept files' paths in, the
verdict out, a line of JSON each way.

Nothing is trusted less for it: a helper is our code reading the same files, and anything that goes
wrong with one (it cannot start, dies, or answers nonsense) makes the scan run in this process instead,
as before, so no build passes unscanned; a helper that imported another ``ptxgym`` than this process's
(its ready line names the files of its scan) serves none. A scan that outlives ``SCAN_TIMEOUT_S`` (an
ordinary kernel's takes under a second) kills its helper and refuses the build (``TIMEOUT_RULE``, a
STATIC_REJECT: only a source that makes the scan crawl gets near that limit, or a host whose other busy
work starves helpers run under ``SCHED_IDLE`` (``PTXGYM_BUILD_PRIORITY=idle``); not cached, in case a
stalled host did): the same scan in this process would hold the build thread, and the lock, as long.
``PTXGYM_SCAN_HELPERS`` (``records.settings.scan_helpers``): how many helpers at most; 0 scans in this
process. A helper starts only when every other one is busy scanning, so a process whose builds come one
at a time (a Ray worker's task) has one; each holds ~50 MB (its interpreter and ``ptxgym``'s imports,
measured on the CPU host).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ptxgym.confine import cores
from ptxgym.confine.launch import idle_priority
from ptxgym.cpu.jail import build_cores, builds_idle
from ptxgym.cpu.screen import ScreenVerdict
from ptxgym.records import settings

log = logging.getLogger(__name__)

SCAN_TIMEOUT_S = 120.0
"""Longest wait for one scan (an honest translation's takes well under a second; the largest file the
backstop reads is ``build.MAX_KEPT_BYTES``)."""
START_TIMEOUT_S = 60.0
"""Longest wait for a new helper's ready line (its interpreter and imports: ~0.4 s on a CPU host)."""
TIMEOUT_RULE = "host-asm-timeout"
"""``ScreenVerdict.rule`` of a scan that did not finish: a refusal that is not cached."""
READY = "ready"

Scan = Callable[[Sequence[Path]], ScreenVerdict | None]


class HelperFailed(Exception):
    """A helper could not give a verdict (start, death, malformed answer): scan in this process instead."""


class _Helper:
    """One helper process and its pipes."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
        )
        try:
            cores.pin(self.proc.pid, build_cores())  # with the builds, off the timing cores
            if builds_idle():
                idle_priority(self.proc.pid)  # and at their priority
            line = self._line(time.monotonic() + START_TIMEOUT_S)
            if line.strip() != ready_line():
                raise HelperFailed(f"a scan helper started without our ready line (got {line[:120]!r})")
        except BaseException:
            self.kill()  # a slow, silent or foreign helper goes at once
            raise

    def _line(self, deadline: float) -> str:
        """The next line of the helper's output by ``deadline`` ('' at its end); ``TimeoutError`` past it."""
        assert self.proc.stdout is not None
        poller = select.poll()  # not select(): no limit on the descriptor's number
        poller.register(self.proc.stdout.fileno(), select.POLLIN)
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1e3):
            raise TimeoutError
        return self.proc.stdout.readline()

    def scan(self, files: Sequence[Path], timeout_s: float) -> ScreenVerdict | None:
        """The helper's verdict on ``files``; ``TimeoutError`` past ``timeout_s``, else ``HelperFailed``."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"files": [str(p) for p in files]}) + "\n")
            self.proc.stdin.flush()
            line = self._line(time.monotonic() + timeout_s)
        except TimeoutError:
            raise  # an OSError too, but no broken pipe: the caller refuses the build
        except (OSError, ValueError) as exc:
            raise HelperFailed(f"the scan helper's pipe broke ({exc})") from exc
        if not line:
            raise HelperFailed(f"the scan helper ended (exit {self.proc.poll()})")
        return _decode(line)

    def close_pipes(self) -> None:
        """Close this process's ends of the helper's pipes."""
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def kill(self) -> None:
        """Kill the helper and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.close_pipes()
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass


def ready_line() -> str:
    """What a helper says once it has imported its scan: ``READY`` and the files of that scan.

    The caller compares it with its own: a helper that found another ``ptxgym`` (an older install beside
    a checkout: a reviewer's find) would scan by other rules, so it serves no scan.
    """
    from ptxgym.cpu import build, host_asm

    return f"{READY} {Path(build.__file__).resolve()} {Path(host_asm.__file__).resolve()}"


def helper_argv() -> list[str]:
    """The command of a helper: this interpreter with its flags, this ``ptxgym`` first on its path."""
    root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {root!r}); from {__name__} import main; raise SystemExit(main())"
    flags: list[str] = getattr(subprocess, "_args_from_interpreter_flags", list)()  # -X utf8, -E: ours
    return [sys.executable, *flags, "-P", "-c", code]


def _decode(line: str) -> ScreenVerdict | None:
    """A helper's answer line as a verdict; ``HelperFailed`` for an error or anything malformed."""
    try:
        answer = json.loads(line)
        if answer.get("error"):
            raise HelperFailed(f"the scan helper failed: {answer['error']}")
        raw = answer["verdict"]
        if raw is None:
            return None
        return ScreenVerdict(
            ok=bool(raw["ok"]),
            rule=raw["rule"],
            message=str(raw["message"]),
            file=raw.get("file"),
            line=raw.get("line"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HelperFailed(f"the scan helper answered {line[:80]!r}") from exc


def _encode(verdict: ScreenVerdict | None) -> str:
    """A verdict as a helper's answer line (JSON, ASCII)."""
    if verdict is None:
        return json.dumps({"verdict": None})
    raw = {"ok": verdict.ok, "rule": verdict.rule, "message": verdict.message}
    return json.dumps({"verdict": {**raw, "file": verdict.file, "line": verdict.line}})


class HelperPool:
    """At most ``size`` helpers, each serving one scan at a time; callers beyond that wait for one."""

    def __init__(self, size: int, argv: Sequence[str] | None = None) -> None:
        self.size = size
        self.argv = list(argv) if argv is not None else helper_argv()
        self._cond = threading.Condition()
        self._idle: list[_Helper] = []
        self._live: set[_Helper] = set()
        self._count = 0
        """Helpers started or starting (a slot each), idle or serving."""
        self._pid = os.getpid()
        self.fallbacks = 0
        """Scans that ran in this process because a helper failed (``HelperFailed``)."""

    def _take(self) -> _Helper | None:
        """An idle helper, a new one while fewer than ``size`` exist, else wait; None if one cannot start."""
        with self._cond:
            while not self._idle and self._count >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        helper = None
        try:
            helper = _Helper(self.argv)
        except Exception as exc:  # noqa: BLE001 - any failure to start: this process scans instead
            why = str(exc) or type(exc).__name__  # a TimeoutError says nothing of itself
            log.warning("a scan helper did not start (%s): scanning in this process", why)
        finally:
            if helper is None:
                self._drop(None)  # the slot is freed whatever ended the start, an interrupt included
        if helper is not None:
            with self._cond:
                self._live.add(helper)
        return helper

    def _give(self, helper: _Helper) -> None:
        with self._cond:
            self._idle.append(helper)
            self._cond.notify()

    def _drop(self, helper: _Helper | None) -> None:
        """Kill ``helper`` (if any) and free its slot."""
        if helper is not None:
            helper.kill()
        with self._cond:
            if helper is not None:
                self._live.discard(helper)
            self._count -= 1
            self._cond.notify()

    def _fallback(self, files: Sequence[Path], local: Scan) -> ScreenVerdict | None:
        with self._cond:
            self.fallbacks += 1
        return local(files)

    def scan(
        self, files: Sequence[Path], local: Scan, timeout_s: float = SCAN_TIMEOUT_S
    ) -> ScreenVerdict | None:
        """``local(files)`` as a helper computes it; in this process if no helper can."""
        files = [Path(p).resolve() for p in files]  # the helper's working folder is not ours
        helper = self._take()
        if helper is None:
            return self._fallback(files, local)
        try:
            verdict = helper.scan(files, timeout_s)
        except TimeoutError:
            self._drop(helper)
            message = (
                f"host-asm: the scan of nvcc's host translation did not finish within {timeout_s:g} s (an "
                "ordinary kernel's takes under a second): the build is refused; make its host code smaller"
            )
            return ScreenVerdict(False, TIMEOUT_RULE, message)
        except Exception as exc:  # noqa: BLE001 - HelperFailed or anything else: this process scans instead
            log.warning("%s: scanning in this process", exc)
            self._drop(helper)
            return self._fallback(files, local)
        except BaseException:
            self._drop(helper)  # an interrupt mid-scan: the helper's answer would be read by no one
            raise
        self._give(helper)
        return verdict

    def pids(self) -> list[int]:
        """The process ids of the live helpers (a diagnostic: ``bench/build_cpu.py`` reads their CPU)."""
        with self._cond:
            return [h.proc.pid for h in self._live]

    def close(self) -> None:
        """Kill every idle helper (busy ones end with their scan's pipe)."""
        with self._cond:
            idle, self._idle = self._idle, []
        for helper in idle:
            self._drop(helper)

    def forget(self) -> None:
        """In a forked child: close the pipes of the parent's helpers, which stay the parent's."""
        for helper in list(self._live):
            helper.close_pipes()


_pool: HelperPool | None = None
_pool_lock = threading.Lock()


def pool() -> HelperPool | None:
    """This process's helpers (None: ``PTXGYM_SCAN_HELPERS`` is 0); a forked child makes its own."""
    global _pool
    size = settings.scan_helpers()
    if size == 0:
        return None
    with _pool_lock:
        if _pool is None or _pool.size != size:
            if _pool is not None:
                _pool.close()  # a new size: the old pool's idle helpers go
            _pool = HelperPool(size)
        return _pool


def _after_fork_in_child() -> None:
    """A forked child starts with no helpers of its own (and a lock no thread of the parent holds)."""
    global _pool, _pool_lock
    _pool_lock = threading.Lock()
    if _pool is not None:
        _pool.forget()
    _pool = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def scan(files: Sequence[Path], local: Scan) -> ScreenVerdict | None:
    """``local(files)`` (the backstop's scan), run by a helper process when there are helpers."""
    helpers = pool()
    return local(files) if helpers is None else helpers.scan(files, local)


@atexit.register
def _close() -> None:
    if _pool is not None and _pool._pid == os.getpid():
        _pool.close()


def main() -> int:
    """A helper: one JSON request per line on stdin (``{"files": [...]}``), one verdict per line out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the evaluator's Ctrl-C is its own; stdin's end stops us
    from ptxgym.cpu.build import scan_kept

    print(ready_line(), flush=True)
    for line in sys.stdin:
        try:
            files = [Path(p) for p in json.loads(line)["files"]]
            answer = _encode(scan_kept(files))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, which scans in its own process
            answer = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]})
        print(answer, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
