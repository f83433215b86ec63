"""Running the NVIDIA command-line tools (ncu, compute-sanitizer) on a one-shot, sandboxed driver process.

Both tools run the candidate in a fresh process of their own (``driver.py``); the whole process group
is killed on timeout, so a hanging candidate cannot outlive its check.

What a tool says is read only from the report the tool itself writes through its own output option
(``ncu --export`` read back with ``--import ... --log-file``, ``compute-sanitizer --log-file``), into
``ProofDirs.report``: a directory the candidate cannot write, because the driver applies the host sandbox
(``sandbox.py``: writes only beneath ``ProofDirs.scratch``) before it loads the candidate. The combined
stdout/stderr of a run carries the candidate's own output too: it is kept (capped) as a log tail and
never parsed as proof. The tools run with the worker's scrubbed environment (``worker_environ``: no
credential-like variables, TMPDIR and CUDA's cache in the candidate's scratch).

The GPU phase of a run (``Gate``). A tool run is mostly host work: the tool's front end starting, the
driver's interpreter and imports, the input file read, and (for Nsight Compute) the report written and
read back. Only the part between the driver's CUDA initialisation and the tool's exit uses the GPU. With
a gate the driver stops before it initialises CUDA (``--gate DIR``, the gate's private directory, on its
command line, which every tool passes on unchanged: it creates ``ready`` there and waits for ``go``), so
the start-up runs beside other candidates' GPU work, and the caller takes the GPU (``Gate.hold``, the
evaluator's queue) only to let the driver go, wait for the tool's process group to end, and take the
report (``run_tool``'s ``read``: while the GPU is held no other candidate's code is alive, so none can
touch the report between the tool's exit and its taking; what needs no GPU, such as Nsight Compute's
conversion of the taken bytes, runs after the hold on a copy nobody can change, ``sealed_file``, and
``Gate.held`` takes the GPU again for a step that cannot). A gated run whose command line lacks its
gate is refused (it would run unheld). Nothing before the gate is the candidate's: its code is loaded
after it (and after the sandbox), so what runs beside another candidate's timing is trusted code that
has not touched the GPU. The go is authenticated: the driver's command line carries the SHA-256 of a
secret that only ``go`` holds, written under the hold, so another candidate's process (whose jail may be
partial, ``sandbox.py``) cannot let a driver go early. What such a process could still do is delete or
plant ``ready`` (the run then ends as the evaluator's INFRA_ERROR, ``GateError``: no candidate code ran,
so ``candidate_ran`` stays False and the trainers skip it rather than score it, ``train/env_reward.py``;
or its GPU phase starts early): it costs the victim a sample, pays the attacker nothing, and needs the
partial jail's hole.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxgym.confine import cores
from ptxgym.confine.groups import kill_group
from ptxgym.evaluation.protocol import worker_environ
from ptxgym.records.errors import InfraError

OUTPUT_TAIL_BYTES = 64 << 10
"""How much of a tool run's combined stdout/stderr is kept (the end); the rest is dropped unread."""
MAX_REPORT_BYTES = 64 << 20
"""A report file larger than this is not read (the tool never writes one that large for one call)."""
GATE_READY, GATE_GO = "ready", "go"
BOOT_TIMEOUT_S = 300.0
"""How long a gated run may take to reach its gate (tool start-up and imports; not the candidate's)."""
_POLL_S = 0.005
GROUP_GRACE_S = 60.0
"""How long a run that used the GPU waits, the GPU still held, for its killed group's last member."""


@dataclass
class Gate:
    """The GPU phase of gated tool runs (module docstring): how to hold the GPU, and the seconds spent.

    ``hold`` is a context manager factory (the evaluator's ``GpuQueue.turn(resume=True)``); the seconds
    accumulate over every run through this gate (Nsight Compute's profile may run twice).
    """

    hold: Callable[[], AbstractContextManager[object]]
    boot_timeout_s: float = BOOT_TIMEOUT_S
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ptxgym-gate-")))
    """The private directory of the ``ready`` and ``go`` files (the driver's ``--gate``)."""
    secret: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    """What ``go`` holds; the driver knows only its hash (``key``)."""
    boot_s: float = 0.0
    """Start-up seconds before the driver reached the gate (no GPU held)."""
    queue_s: float = 0.0
    """Seconds waited for the GPU once the driver was ready."""
    gpu_s: float = 0.0
    """Seconds the GPU was held (from letting the driver go to the tool's exit and the report's reading)."""
    read_s: float = 0.0
    """Of ``gpu_s``, the seconds of taking the report (``run_tool``'s ``read``, after the exit, and any
    read-back that had to hold the GPU again: ``held``)."""
    outside_s: float = 0.0
    """Seconds of the report's conversion after the hold, holding no GPU (``ncu.read_profile``)."""

    @property
    def key(self) -> str:
        """SHA-256 of the secret: the driver's ``--gate-key``."""
        return gate_key(self.secret)

    def argv(self) -> list[str]:
        """The driver's gate arguments."""
        return ["--gate", str(self.dir), "--gate-key", self.key]

    def close(self) -> None:
        """Remove the gate's directory."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def record(self) -> dict[str, float]:
        """The stage walls of the gated runs."""
        return {
            "proof_boot": round(self.boot_s, 4),
            "proof_queue": round(self.queue_s, 4),
            "proof_gpu": round(self.gpu_s, 4),
            "proof_read": round(self.read_s, 4),
            "proof_convert": round(self.outside_s, 4),
        }

    def held(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` under the hold once more (a read-back that cannot run outside it), counted as reading."""
        t0 = time.perf_counter()
        with self.hold():
            t1 = time.perf_counter()
            self.queue_s += t1 - t0
            try:
                return fn()
            finally:
                spent = time.perf_counter() - t1
                self.read_s += spent
                self.gpu_s += spent


def gate_key(secret: str) -> str:
    """The hash a driver compares ``go``'s content with."""
    return hashlib.sha256(secret.encode()).hexdigest()


class GateError(InfraError):
    """A gated run's driver never reached its gate: no candidate code ran, so the evaluator's fault."""


@dataclass(frozen=True)
class ToolRun:
    """Outcome of one tool invocation."""

    returncode: int | None
    output: str
    """The last ``OUTPUT_TAIL_BYTES`` of stdout and stderr together (candidate output included: a log,
    never a proof)."""
    timed_out: bool
    wall_s: float
    read: Any = None
    """What ``run_tool``'s ``read`` returned (the report, read once the tool's group was gone)."""


@dataclass(frozen=True)
class ProofDirs:
    """The directories of one proof run, under a fresh private root.

    ``report`` receives the tool's report, written by the tool's front end; ``scratch`` is the only place
    the sandboxed driver (and so the candidate) may write. They are siblings, so the candidate cannot
    write a report.
    """

    root: Path

    @property
    def report(self) -> Path:
        """Where the tool writes its report."""
        return self.root / "report"

    @property
    def scratch(self) -> Path:
        """The driver's sandbox scratch directory (cwd, TMPDIR, CUDA cache)."""
        return self.root / "candidate"

    @classmethod
    def create(cls, parent: Path | None = None) -> ProofDirs:
        """A new root (mode 0700) with both directories."""
        root = Path(tempfile.mkdtemp(prefix="ptxgym-proof-", dir=parent))
        dirs = cls(root)
        dirs.report.mkdir(mode=0o700)
        dirs.scratch.mkdir(mode=0o700)
        return dirs

    def renew_scratch(self) -> bool:
        """An empty scratch directory again (a second run must not find what the first one wrote).

        The candidate may have made folders unreadable (``chmod 000``; as root that stops nothing): they
        are opened up first. False if the scratch could not be renewed (no second run then).
        """
        try:
            os.chmod(self.scratch, 0o700)
            for top, folders, _ in os.walk(self.scratch):  # top-down: each folder opened before entered
                for name in folders:
                    if not os.path.islink(os.path.join(top, name)):
                        os.chmod(os.path.join(top, name), 0o700)
        except OSError:
            pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        try:
            self.scratch.mkdir(mode=0o700)
        except OSError:
            return False
        return True

    def remove(self) -> None:
        """Delete the root and everything under it."""
        shutil.rmtree(self.root, ignore_errors=True)


def find_tool(name: str) -> str | None:
    """Absolute path of ``ncu`` or ``compute-sanitizer`` (PATH, CUDA toolkit, Nsight Compute installs)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [
        f"/usr/local/cuda/bin/{name}",
        *sorted(glob.glob(f"/opt/nvidia/nsight-compute/*/{name}")),
        f"/usr/local/cuda/compute-sanitizer/{name}",
    ]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def driver_argv(
    inputs: Path,
    so_path: Path | None,
    entry: str,
    device: int,
    mode: str,
    baseline: str | None = None,
    options: dict | None = None,
    scratch: Path | None = None,
    sandbox: str = "on",
    gate: Gate | None = None,
    exit_now: bool = False,
) -> list[str]:
    """The driver command line a tool wraps (a candidate's .so, or a baseline function by name).

    With ``scratch`` the driver applies the host sandbox (mode ``sandbox``) before loading the target;
    with ``gate`` it waits at that gate before CUDA (module docstring). ``exit_now``: a profile's driver
    ends without the interpreter's teardown (``driver.EXIT_NOW_MODES``).
    """
    target = (
        ["--so", str(so_path)]
        if baseline is None
        else ["--baseline", baseline, "--options", json.dumps(options or {})]
    )
    confine = ["--scratch", str(scratch), "--sandbox", sandbox] if scratch is not None else []
    if gate is not None:
        confine += gate.argv()
    return [
        sys.executable,
        "-P",  # no working directory on sys.path: the candidate writes there (its scratch)
        "-m",
        "ptxgym.evaluation.sandboxed.driver",
        "--inputs",
        str(inputs),
        *target,
        "--entry",
        entry,
        "--device",
        str(device),
        "--mode",
        mode,
        *confine,
        *(["--exit-now"] if exit_now else []),
    ]


def tool_environ(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a tool run: the worker's scrubbed one (``worker_environ``) plus ``extra``.

    ``PYTHONSAFEPATH``: no Python started in the run puts its working directory (the candidate's
    scratch, which an earlier run of the same candidate could fill with modules) on ``sys.path``.
    """
    return {**worker_environ(os.environ, scratch), "PYTHONSAFEPATH": "1", **(extra or {})}


def sealed_file(data: bytes) -> int:
    """A descriptor of an in-memory file holding ``data``, sealed: nobody can change, grow or shrink it.

    The seals (``F_SEAL_WRITE``, ``F_SEAL_GROW``, ``F_SEAL_SHRINK``, then ``F_SEAL_SEAL``) belong to the
    file, not to this descriptor, so a write through any other way in (``/proc/<pid>/fd/N`` reopened for
    writing) fails with EPERM too. No path names it but ``/proc/<pid>/fd/N``. The caller closes it.
    """
    fd = os.memfd_create("ptxgym-sealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int = MAX_REPORT_BYTES) -> str | None:
    """The text of an in-memory file from its start, or None if it is larger than ``limit``."""
    if os.fstat(fd).st_size > limit:
        return None
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def read_report(path: Path) -> str | None:
    """The text of a report file the tool wrote, or None if there is none (or it is absurdly large)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_REPORT_BYTES:
            return None
        return path.read_text(errors="replace")
    except OSError:
        return None


def run_tool(
    argv: list[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    gate: Gate | None = None,
    read: Callable[[int | None, bool], Any] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ToolRun:
    """Run a tool, its stdout+stderr to a private temporary file; then end its whole process group.

    The working directory defaults to the temp directory, so a source checkout in the caller's
    directory cannot shadow the installed package in the driver. Only the tail of the output is read.
    ``read(returncode, timed_out)`` is called once the tool's process group is gone (with a ``gate``,
    before the GPU is let go: module docstring); its result is ``ToolRun.read``. With a ``gate``,
    ``timeout_s`` bounds the GPU phase, and a driver that does not reach its gate (it ends first, or the
    start-up outlasts the gate's limit) raises ``GateError``, holding no GPU. ``pass_fds``: descriptors the
    tool inherits under their numbers (``/proc/self/fd/N`` names them on its command line).
    """
    t0 = time.perf_counter()
    if gate is not None:
        if str(gate.dir) not in argv or gate.key not in argv:
            raise ValueError(f"a gated tool run must pass its gate to the driver ({' '.join(gate.argv())})")
        for name in (GATE_READY, GATE_GO):  # an earlier run through this gate left them
            (gate.dir / name).unlink(missing_ok=True)
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=str(cwd) if cwd is not None else tempfile.gettempdir(),
            pass_fds=pass_fds,
        )
        cores.pin_process(proc.pid, cores.usable())  # started in a pinned GPU turn: not on its cores alone

        def tail() -> str:
            size = out.seek(0, os.SEEK_END)
            out.seek(max(0, size - OUTPUT_TAIL_BYTES))
            return out.read().decode(errors="replace")

        if gate is None:
            timed_out = _end(proc, timeout_s, grace_s=GROUP_GRACE_S)  # the caller may hold the GPU
            got = read(proc.returncode, timed_out) if read is not None else None
        else:
            timed_out, got = _gated(proc, timeout_s, gate, read, tail)
        text = tail()
    return ToolRun(None if timed_out else proc.returncode, text, timed_out, time.perf_counter() - t0, got)


def _end(proc: subprocess.Popen, timeout_s: float, grace_s: float = 5.0) -> bool:
    """Wait for the tool's exit (at most ``timeout_s``), then end its process group; timed out?

    Whatever the candidate left running in the group (a forked child) dies with the run, as with a
    worker's group (``WorkerHandle.kill``), and is awaited (a CUDA context takes a moment to go); the
    jails refuse ``setsid``/``setpgid``, so nothing leaves the group. Where the run used the GPU the wait
    for the group is long (``GROUP_GRACE_S``): the GPU is not let go while a member may still use it.
    """
    try:
        proc.wait(timeout=max(0.0, timeout_s))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    if not kill_group(proc, grace_s):
        print(f"ptxgym: a proof run's process group outlived {grace_s:g} s after SIGKILL", file=sys.stderr)
    return timed_out


def _gated(
    proc: subprocess.Popen,
    timeout_s: float,
    gate: Gate,
    read: Callable[[int | None, bool], Any] | None,
    tail: Callable[[], str],
) -> tuple[bool, Any]:
    """Start-up without the GPU, then the GPU phase and ``read`` under ``gate.hold``: (timed out, read)."""
    t0 = time.perf_counter()
    ready = gate.dir / GATE_READY
    while not ready.exists() and proc.poll() is None and time.perf_counter() - t0 <= gate.boot_timeout_s:
        time.sleep(_POLL_S)
    t1 = time.perf_counter()
    gate.boot_s += t1 - t0
    if not ready.exists():
        still = proc.poll() is None
        _end(proc, 0.0)
        why = (
            f"did not reach its GPU gate within {gate.boot_timeout_s:g} s"
            if still
            else f"ended (exit {proc.returncode}) before its GPU gate"
        )
        raise GateError(
            f"the proof tool's driver {why}, before any candidate code was loaded: {tail()[-800:]}"
        )
    with gate.hold():
        t2 = time.perf_counter()
        gate.queue_s += t2 - t1
        part = gate.dir / f"{GATE_GO}.part"
        part.write_text(gate.secret)
        part.replace(gate.dir / GATE_GO)
        timed_out = _end(proc, timeout_s, grace_s=GROUP_GRACE_S)
        (gate.dir / GATE_GO).unlink(missing_ok=True)  # the secret is not left lying about
        t3 = time.perf_counter()
        got = read(proc.returncode, timed_out) if read is not None else None
        t4 = time.perf_counter()
        gate.read_s += t4 - t3
        gate.gpu_s += t4 - t2
    return timed_out, got
