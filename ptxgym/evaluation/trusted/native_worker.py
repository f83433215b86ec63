"""The trusted side of a native runner (``evaluation/runner``): a ``WorkerHandle`` for ``ptxgym-runner``.

``candidate_process = "native"`` (``settings.candidate_process``) makes the local evaluator run each
candidate's ``.so`` in ``ptxgym-runner`` instead of the Python worker. The runner speaks the worker's
protocol: every command goes down as its ``protocol.py`` model in JSON (``model_dump_json``; an
attach's ``blob``, a CUDA tensor, is left out: the runner maps only guard-page blobs), every reply comes
back as ``protocol.Reply`` JSON in the same frames, read and validated by ``WorkerHandle``'s own code,
so everything the evaluator does after a reply is unchanged.

What differs from a Python worker's spawn:

* when the host sandbox is on, the runner confines itself at the ``sandbox`` command with
  ``runner/jail.py``'s jail, sent in that command (``jail_spec``; applied by ``runner/confine.h``), after
  its CUDA driver, runtime and CUPTI are set up and the arena is attached, before any candidate exists,
  as the Python worker does. A jail applied before exec (``ptxgym/confine``'s launcher, ``at_exec``)
  stopped the driver's initialisation on the H200 (cuInit: CUDA_ERROR_OPERATING_SYSTEM), so it is
  only for runners without a GPU; the ``sandbox`` reply reports the layers the runner observes in force;
* its environment is minimal: ``PATH``, the ``CUDA_*``/``NVIDIA_*`` variables (device selection), the
  CUDA JIT cache, ``TMPDIR`` and ``HOME`` in its scratch directory;
* file descriptors an attach needs go on a socket the runner names with ``--fd-sock`` (stdin is
  ``/dev/null``);
* a candidate's ``.so`` is copied into the runner's scratch directory before ``load`` (the jail reads
  nothing else of the evaluator's); a copy, not a link, so a candidate cannot rewrite the build cache.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptxgym.confine import launch, seccomp
from ptxgym.confine.launch import Jail
from ptxgym.evaluation.protocol import ApplySandbox, Attach, Command, Load, is_secret_name
from ptxgym.evaluation.runner.build import build_runner, plan
from ptxgym.evaluation.runner.jail import GpuFiles, cupti_files, gpu_files, runner_jail
from ptxgym.evaluation.trusted.pool import WorkerHandle, WorkerPool

HW_PREPARE = True
"""Whether a runner asked to (``Attach.hw_prepare``, ``ApplySandbox.hw_prepare``) queries its context's
hardware-counter availability before its jail applies (on the H200 the range profiler's query fails
inside the jail: CUPTI_ERROR_UNKNOWN; ``bench/results/runner_hw_probe_2026-12-05.txt``); False only for
diagnostics (``bench/runner_hw_probe.py``)."""


def jail_spec(jail: Jail, kept_fds: tuple[int, ...] = ()) -> dict:
    """The jail as ``runner/confine.h`` applies it: rlimits, Landlock rules, assembled seccomp rows.

    ``kept_fds``: the runner's protocol pipes, which its filter lets nothing close or replace
    (``seccomp.network_filter``).
    """
    rows = None
    if jail.families is not None:
        machine = os.uname().machine
        rows = [list(r) for r in seccomp.network_filter(machine, tuple(jail.families), kept_fds)]
    rules = dataclasses.asdict(jail.landlock) if jail.landlock is not None else None
    return {"rlimits": dict(jail.rlimits), "landlock": rules, "filter": rows}


LANDLOCK_AT_EXEC = False
"""Whether runners get Landlock from the launcher (before exec, so before the CUDA driver starts any
thread) and the rest of their jail at the ``sandbox`` command. Below Landlock ABI 8 (the H200: ABI 7) a
jail applied after the driver's set-up binds only the calling thread; the runner then has each earlier
helper thread restrict itself from a signal handler (``runner/confine.h`` ``restrict_others``), else code
run on one (a signal handler, a host callback) could read and write anywhere. Off until the H200 shows
the driver starts under it: a whole jail applied before exec made ``cuInit`` fail there even without
Landlock, so seccomp, rlimits or no_new_privs is the suspect (``bench/runner_jail_probe.py`` plays each
layer alone, ``Landlock only`` among them)."""


class NativeUnavailable(RuntimeError):
    """The native runner cannot serve on this host (why, for the record)."""


@dataclass(frozen=True)
class NativeSpec:
    """How to start runners on this host."""

    binary: Path
    """The built ``ptxgym-runner``."""
    device: int
    """CUDA device ordinal."""
    gpu: GpuFiles | None
    """The GPU files the runner opens and its jail allows; None: a CPU runner (``host_blobs``)."""
    libs: tuple[Path, ...] = ()
    """Files the runner links outside the system directories (``jail.cupti_files``): its jail reads them."""
    cupti: bool = False
    """Whether the runner was built with its CUPTI path."""
    cupti_missing: str = ""
    """Why not, if it was not."""

    @property
    def host_blobs(self) -> bool:
        """The CPU test path: runs are memfds mapped in host memory."""
        return self.gpu is None


def native_spec(device: int, cupti_needed: bool) -> NativeSpec:
    """Build the runner and resolve its GPU files; ``NativeUnavailable`` says why it cannot be used.

    Call it after this process initialised CUDA (the driver's files are read from ``/proc/self/maps``).
    ``cupti_needed``: the evaluator times with CUPTI, so a runner without its CUPTI path is unusable
    (its timings would not be comparable with the baseline's).
    """
    try:
        build = plan()
        if not build.cuda:
            raise NativeUnavailable("no cuda.h was found: the runner would have no GPU path")
        binary = build_runner()
        maps = Path("/proc/self/maps").read_text()
        gpu = gpu_files(maps, _toolkit_cudart())
    except NativeUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - any reason is recorded, and the Python worker serves
        raise NativeUnavailable(f"{type(exc).__name__}: {exc}"[:800]) from exc
    if gpu.cudart is None:
        raise NativeUnavailable("no libcudart (neither mapped here nor in the toolkit): candidates need it")
    if cupti_needed and build.cupti_lib is None:
        raise NativeUnavailable(
            f"the evaluator times with CUPTI but the runner has no CUPTI path ({build.cupti_missing})"
        )
    libs = cupti_files(build.cupti_lib)
    return NativeSpec(binary, device, gpu, libs, build.cupti_lib is not None, build.cupti_missing)


def _toolkit_cudart() -> Path | None:
    """The toolkit's versioned libcudart (when this process has none mapped)."""
    try:
        from ptxgym.cpu.toolchain import find_toolchain

        dirs = find_toolchain().lib_dirs
    except Exception:  # noqa: BLE001 - no toolkit: the mapped copy is the only candidate
        return None
    found = [p for d in dirs for p in sorted(d.glob("libcudart.so.*"))]
    return found[0].resolve() if found else None


def runner_environ(base: dict[str, str] | os._Environ[str], scratch: Path) -> dict[str, str]:
    """A runner's environment: PATH, device selection, JIT cache, TMPDIR and HOME in scratch."""
    env = {"PATH": "/usr/bin:/bin"}
    env.update(
        {
            k: v
            for k, v in base.items()
            if k.startswith(("CUDA_", "NVIDIA_")) and not is_secret_name(k) and k != "CUDA_INJECTION64_PATH"
        }
    )
    env.update({"CUDA_CACHE_PATH": str(scratch / "cuda-cache"), "TMPDIR": str(scratch), "HOME": str(scratch)})
    return env


class NativeHandle(WorkerHandle):
    """The trusted side of one runner process (the interface of ``WorkerHandle``)."""

    def __init__(
        self, spec: NativeSpec, log_dir: Path, sandboxed: bool = False, at_exec: bool | str = False
    ) -> None:
        """Start one runner; ``at_exec`` says where its jail is applied.

        False: by the runner itself at the ``sandbox`` command
        (the default: the only form the H200's driver started under); True, all of it by the launcher
        before exec; ``"landlock"``, Landlock by the launcher (so every thread the driver later starts is
        inside it, with no need of Landlock ABI 8) and the rest (no_new_privs, seccomp, rlimits) by the
        runner at the ``sandbox`` command (``LANDLOCK_AT_EXEC``).
        """
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.spec = spec
        self.landlock_at_exec = False
        """Whether Landlock was applied by the launcher and the rest of the jail is the runner's."""
        self.log_path = Path(tempfile.mkstemp(prefix="runner-", suffix=".log", dir=log_dir)[1])
        self.scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=log_dir))
        self._fds, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [str(spec.binary), "--fd-in", str(cmd_r), "--fd-out", str(rep_w)]
        self.protocol_fds = (cmd_r, rep_w)
        """The runner's command and reply pipes, by their numbers in the runner (``pass_fds`` keeps them)."""
        argv += ["--fd-sock", str(child.fileno()), "--parent-pid", str(os.getpid())]
        argv += ["--device", str(spec.device)]
        if spec.gpu is None:
            argv.append("--host-blobs")
        else:
            argv += ["--libcuda", str(spec.gpu.libcuda)]
            argv += ["--preload", str(spec.gpu.cudart)] if spec.gpu.cudart else []
        self.jail = runner_jail(spec.binary, self.scratch, spec.gpu, spec.libs) if sandboxed else None
        if self.jail is not None and at_exec == "landlock" and self.jail.landlock is not None:
            argv = launch.command(Jail(landlock=self.jail.landlock), argv)
            self.jail = dataclasses.replace(self.jail, landlock=None)
            self.landlock_at_exec = True
        elif self.jail is not None and at_exec:
            argv, self.jail = launch.command(self.jail, argv), None
        out_r, out_w = os.pipe()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=out_w,
            pass_fds=(cmd_r, rep_w, child.fileno()),
            cwd=self.scratch,
            start_new_session=True,
            env=runner_environ(os.environ, self.scratch),
        )
        for fd in (cmd_r, rep_w, out_w):
            os.close(fd)
        child.close()
        self._connected(cmd_w, rep_r, out_r)
        self.loaded = 0

    def _encode(self, cmd: Command, pickler=None) -> bytes:
        """The command as JSON (the blob tensor of an attach left out; a candidate copied into scratch)."""
        if isinstance(cmd, Attach):
            prepare = cmd.hw_prepare and HW_PREPARE
            cmd = cmd.model_copy(update={"hw_prepare": prepare, "hw_warm": cmd.hw_warm and prepare})
            return cmd.model_dump_json(exclude={"blob"}).encode()
        if isinstance(cmd, ApplySandbox) and self.jail is not None and cmd.mode != "off":
            spec = {**jail_spec(self.jail, self.protocol_fds), "landlock_at_exec": self.landlock_at_exec}
            spec["hw_prepare"] = cmd.hw_prepare and HW_PREPARE
            return json.dumps({**cmd.model_dump(mode="json"), "jail": spec}).encode()
        if isinstance(cmd, Load) and cmd.kind == "so" and cmd.path:
            self.loaded += 1
            inside = self.scratch / f"candidate-{self.loaded}.so"
            shutil.copyfile(cmd.path, inside)
            cmd = cmd.model_copy(update={"path": str(inside)})
        return cmd.model_dump_json().encode()


DROP_AFTER_FAILURES = 3
"""Runner set-ups failing in a row after which an evaluator stops using runners for its life
(``NativeRunners.failed``)."""


class NativeRunners:
    """The native runners of one evaluator: built on first use, dropped (with the reason) on failure.

    ``choose`` says, per subject, whether it runs in a runner: only candidates (a library baseline needs
    its vendor library, so it stays in the Python worker), only on a guard-page arena (the runner maps
    nothing else), and only while runners can be set up; otherwise the Python worker serves and ``why``
    records the reason, logged once.
    """

    def __init__(self, wanted: bool, device: int, spares: int, log_dir: Path, sandboxed: bool) -> None:
        self.wanted, self.device, self.spares = wanted, device, spares
        self.log_dir, self.sandboxed = log_dir, sandboxed
        self.pool: WorkerPool | None = None
        self.spec: NativeSpec | None = None
        self.why = "" if wanted else "candidate_process is 'python' (PTXGYM_CANDIDATE_PROCESS)"
        """Why candidates do not run in a runner ('' while they do)."""
        self.failures = {False: 0, True: 0}
        """Runner set-ups that failed since the last one of the same kind that worked (``failed``), by
        whether they made the counter query (``hw``)."""

    def _start(self, cupti_needed: bool) -> WorkerPool | None:
        if self.pool is not None or self.why:
            return self.pool
        try:
            spec = native_spec(self.device, cupti_needed)
        except NativeUnavailable as exc:
            self.drop(f"the native runner is unavailable: {exc}")
            return None
        self.spec = spec
        self.pool = WorkerPool(
            self.device,
            self.spares,
            log_dir=self.log_dir,
            sandboxed=self.sandboxed,
            factory=lambda log_dir, sandboxed: NativeHandle(
                spec, log_dir, sandboxed, at_exec="landlock" if LANDLOCK_AT_EXEC else False
            ),
        )
        return self.pool

    def choose(self, candidate: bool, guard_pages: bool, cupti_needed: bool) -> WorkerPool | None:
        """The runners' pool for this subject, or None (the Python worker; ``note`` says why)."""
        if not self.wanted or not candidate:
            return None
        if not guard_pages:
            return None
        return self._start(cupti_needed)

    def note(self, used: bool, guard_pages: bool, candidate: bool = True) -> str:
        """What ran the subject, for the verdict's record."""
        if used:
            return "native: ptxgym-runner"
        if self.wanted and not candidate:
            return "python: a library baseline runs in the Python worker"
        if self.wanted and not guard_pages and not self.why:
            return "python: the arena has no guard pages (the native runner maps only guard-page blobs)"
        return f"python: {self.why}" if self.wanted else "python"

    def failed(self, why: str, hw: bool = False) -> str:
        """A runner could not be set up for one subject, which falls back to the Python worker; the note.

        After ``DROP_AFTER_FAILURES`` in a row of one kind (``hw``: set-ups that made the counter query,
        ``Attach.hw_prepare``, or not) the runners are dropped for the evaluator's life. One failure (a
        start that timed out under load, say) costs that subject alone: in the worker it reads no hardware
        counters, so its target credit is withheld, and before, one such failure withheld every later
        candidate's (a reviewer's find). Counted by kind because a failure that comes only with the query
        would otherwise be reset by every candidate between that needs none (a later review's find), and
        every target candidate would fall back for the evaluator's life without a word.
        """
        self.failures[hw] += 1
        if self.failures[hw] >= DROP_AFTER_FAILURES:
            kind = " with the counter query" if hw else ""
            self.drop(f"{self.failures[hw]} runner set-ups{kind} failed in a row; the last: {why}")
            return f"python: {self.why}"
        logging.getLogger(__name__).warning("ptxgym: one candidate runs in the Python worker: %s", why)
        return f"python: {why}"[:800]

    def worked(self, hw: bool = False) -> None:
        """A runner was set up (``hw``: with the counter query): ``failed``'s count of that kind restarts.

        One with the query also shows that a plain set-up works, so it restarts both counts.
        """
        self.failures[hw] = 0
        if hw:
            self.failures[False] = 0

    def drop(self, why: str) -> None:
        """Stop using runners for this evaluator's life (the reason is kept and logged once)."""
        if not self.why:
            self.why = why[:800]
            logging.getLogger(__name__).warning("ptxgym: candidates run in the Python worker: %s", self.why)
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def close(self) -> None:
        """Kill the spare runners."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
