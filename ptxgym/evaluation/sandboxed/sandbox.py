"""The host sandbox of a candidate worker: what the candidate's C++ host code may still do.

A candidate's shared object runs host code inside the worker (static constructors when it is loaded,
``run`` at every call). DESIGN.md section 4 asks that this code reach no network, write nowhere outside a
scratch directory and live under process limits. The worker applies the sandbox once (``apply``), after
its warm-up, when torch, the CUDA context, CUPTI, TVM-FFI and the arena's IPC buffers are in place (device
files already open keep working: Landlock checks only new opens) and before the candidate is loaded.
Nothing lifts it again. The layers, in the order they are reported:

1. ``no_new_privs`` (prctl): exec can never gain privileges; unprivileged seccomp and Landlock need it.
2. ``network`` (a seccomp-BPF filter assembled here, no libseccomp): ``socket()`` fails with EACCES for
   every address family except AF_UNIX and AF_NETLINK, so no TCP, UDP, raw or packet sockets;
   ``io_uring_setup`` (io_uring can open sockets without the socket syscall), ``ptrace``,
   ``process_vm_readv``/``writev`` and ``pidfd_getfd`` (reaching into the trusted evaluator) fail with
   EPERM; a syscall of a foreign ABI (x32 numbers, ``int 0x80``) fails with ENOSYS. A probe socket
   confirms the filter took effect.
3. ``filesystem`` (Landlock): creating, writing, truncating, removing, renaming or linking files only
   beneath the worker's scratch directory and ``/proc/self``, plus writing to the device nodes CUDA and
   the C library use (``/dev/nvidia*``, ``/dev/null`` and the like; not disks). Not ``/dev/shm``: a
   file there outlives the worker (a candidate could carry what it saw to a later candidate's session,
   or fill the host's memory), and nothing the worker runs after the sandbox needs it (the native
   runner's jail, scratch only, serves the same calls on the H200). The one-shot process Nsight
   Compute or compute-sanitizer profiles (``driver.py``) keeps it writable: their front ends may talk
   through it (not verified otherwise), and no verified pool serves those runs. Reading and executing
   stay allowed everywhere but in ``/proc``, where a worker reads only its own entry and a few system
   facts (another process's entry would show the trusted evaluator's environment to a worker running as
   root; the profiled process keeps every read). With Landlock ABI >= 6 the worker also cannot send signals to
   processes outside its sandbox (it cannot kill the trusted evaluator).
4. ``rlimits`` (per process): no core files, files of at most 64 MiB (Python ignores SIGXFSZ, so a longer
   write fails with EFBIG; this covers the worker's log too), a cap on open files, and a cap on the
   tasks of the user (RLIMIT_NPROC counts every thread of the uid, so the cap is the visible count plus
   headroom; the kernel does not enforce it for root or CAP_SYS_RESOURCE/CAP_SYS_ADMIN). No
   address-space limit: CUDA reserves huge virtual ranges. ``apply(..., rlimits=False)`` leaves this layer
   to ``apply_rlimits``, later: the profiled process jailed before CUDA (``driver.py``) takes it just
   before the candidate loads, after CUDA and the sanitizer's injected library have started.
5. ``environment``: working directory and TMPDIR in scratch, credential-like and proxy variables
   removed. The pool spawns a sandboxed worker with ``worker_environ`` already, so the secrets never
   reach it (not even ``/proc/self/environ``) and CUDA's JIT cache is private to the worker (a candidate
   cannot poison a cache that another process loads kernels from).

Threads. When the sandbox is applied the worker already has CUDA, CUPTI and torch helper threads.
rlimits belong to the process. seccomp is installed with SECCOMP_FILTER_FLAG_TSYNC, which puts the
filter, and no_new_privs, on every thread; the report counts the threads that have both (from
``/proc/self/task``). Landlock restricts the calling thread and everything it starts later; only
Landlock ABI 8 (Linux 7.0, LANDLOCK_RESTRICT_SELF_TSYNC) also restricts the threads that already exist.
Below ABI 8 each earlier thread restricts itself from a signal handler (``_restrict_others``, the
native runner's broadcast): code a candidate had run on one of them (a signal handler it sent there, a
CUDA host callback) could otherwise write outside scratch. A thread the broadcast cannot reach (one
blocking signal 32 with a raw system call), or a host without a C++ compiler to build it, leaves the
layer ``partial``, with the reason.

Every layer fails soft with its reason in mode ``on``; mode ``strict`` turns an unavailable layer into
a ``SandboxError``; mode ``off`` applies nothing. Not covered: reading files outside ``/proc`` (a
candidate can read what the user can, other candidates' build products included; with no network and no
writes outside scratch its only ways out are its outputs and its log: the native runner reads only what
it needs), connecting to Unix sockets by path, host memory limits (use a cgroup).
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import resource
import socket
import tempfile
from pathlib import Path

from ptxgym.confine import landlock, seccomp
from ptxgym.confine.libc import set_no_new_privs
from ptxgym.confine.seccomp import (  # noqa: F401 - re-exported: the filter's API as tests and tools know it
    JEQ,
    JGE,
    LD_ABS,
    OFF_ARCH,
    OFF_ARG0,
    OFF_NR,
    RET,
    RET_ALLOW,
    RET_ERRNO,
    network_filter,
    syscall_number,
)
from ptxgym.confine.tasks import privileged, user_tasks
from ptxgym.evaluation.protocol import (  # noqa: F401 - check_mode, worker_environ: part of this API
    MODES,
    SandboxLayer,
    SandboxReport,
    check_mode,
    is_secret_name,
    worker_environ,
)
from ptxgym.records.errors import InfraError

LAYERS = ("no_new_privs", "network", "filesystem", "rlimits", "environment")
MAX_FILE_BYTES = 64 << 20
"""RLIMIT_FSIZE of a sandboxed worker."""
MAX_OPEN_FILES = 4096
"""RLIMIT_NOFILE of a sandboxed worker (raised above the highest descriptor already open, if need be)."""
TASK_HEADROOM = 512
"""RLIMIT_NPROC = tasks of the user visible now + this."""
DEFERRED = "deferred: applied later by apply_rlimits, just before the candidate loads"
"""The rlimits layer's detail in a report of ``apply(..., rlimits=False)``."""
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts")
"""Writable /dev entries besides ``nvidia*`` (``/dev/shm`` is not writable: module docstring)."""


class SandboxError(InfraError):
    """The sandbox cannot be applied as asked (strict mode with a layer unavailable, or no scratch dir)."""


def apply(mode: str, scratch: Path, shm: bool = False, rlimits: bool = True) -> SandboxReport:
    """Sandbox this process (every layer, best effort) and report what is enforced.

    ``shm``: also let it write ``/dev/shm`` (the one-shot profiled process of ``driver.py``, whose
    profiler or sanitizer front end may talk through it; never a worker: module docstring, layer 3).
    ``rlimits=False``: leave the rlimits layer to ``apply_rlimits`` (reported ``off``, deferred).

    Raises ``SandboxError`` when ``scratch`` is not a directory, or in mode ``strict`` when a layer is
    unavailable (the layers that did apply stay applied; the process should be discarded).
    """
    mode = check_mode(mode)
    scratch = Path(scratch).resolve()
    if not scratch.is_dir():
        raise SandboxError(f"the worker's scratch directory {scratch} does not exist; the pool creates it")
    if mode == "off":
        return SandboxReport(mode="off", layers=[SandboxLayer(name=n, state="off") for n in LAYERS])
    tasks = None if not rlimits or privileged() else user_tasks()  # before Landlock hides /proc entries
    nnp_error = set_no_new_privs()
    if nnp_error:
        network = _unavailable("network", f"needs no_new_privs ({nnp_error})")
        filesystem = _unavailable("filesystem", f"needs no_new_privs ({nnp_error})")
    else:
        filesystem = _landlock(scratch, shm)
        network = _seccomp()  # last of the two: its TSYNC spreads no_new_privs to every thread
    limits = _rlimits(tasks) if rlimits else SandboxLayer(name="rlimits", state="off", detail=DEFERRED)
    layers = [_no_new_privs_coverage(nnp_error), network, filesystem, limits, _environment(scratch)]
    report = SandboxReport(mode=mode, layers=layers)
    missing = [x for x in layers if x.state == "unavailable"]
    if mode == "strict" and missing:
        raise SandboxError(
            "strict sandbox mode, but these layers are unavailable here: "
            + "; ".join(f"{x.name} ({x.detail})" for x in missing)
            + ". Use a kernel with seccomp and Landlock, or mode 'on' to run with what is available."
        )
    return report


# ------------------------------------------------------------------------------------ syscalls


def _unavailable(name: str, why: str) -> SandboxLayer:
    return SandboxLayer(name=name, state="unavailable", detail=why)


def _task_field(field: str) -> list[str]:
    """The value of one ``/proc/self/task/*/status`` field for every thread of this process."""
    values = []
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # the thread ended while we looked
            continue
        match = re.search(rf"^{field}:\s*(\S+)", text, re.M)
        values.append(match.group(1) if match else "")
    return values


def _no_new_privs_coverage(error: str) -> SandboxLayer:
    if error:
        return _unavailable("no_new_privs", error)
    flags = _task_field("NoNewPrivs")
    done = sum(v == "1" for v in flags)
    if done == len(flags):
        return SandboxLayer(name="no_new_privs", state="active", detail=f"set on all {done} threads")
    return SandboxLayer(
        name="no_new_privs",
        state="partial",
        detail=f"set on {done} of {len(flags)} threads (seccomp TSYNC, which spreads it, did not apply)",
    )


# ------------------------------------------------------------------------------ network (seccomp)


def _seccomp() -> SandboxLayer:
    machine = platform.machine()
    if machine not in seccomp.ARCHES:
        return _unavailable("network", f"no syscall table for {machine} (x86_64 and aarch64 only)")
    ret = seccomp.install(network_filter(machine), tsync=True)
    if ret > 0:
        return _unavailable("network", f"thread {ret} could not take the filter (SECCOMP_FILTER_FLAG_TSYNC)")
    if ret < 0:
        return _unavailable("network", f"seccomp(SET_MODE_FILTER, TSYNC): {os.strerror(-ret)}")
    try:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except PermissionError:
        pass
    except OSError as exc:
        return _unavailable("network", f"filter installed, but the probe socket failed otherwise ({exc})")
    else:
        probe.close()
        return _unavailable("network", "filter installed, but a probe AF_INET socket still opened")
    modes = _task_field("Seccomp")
    filtered = sum(v == "2" for v in modes)
    detail = (
        f"socket() refused (EACCES) for every family but AF_UNIX and AF_NETLINK; io_uring, ptrace, "
        f"process_vm_readv/writev, pidfd_getfd refused (EPERM); on {filtered} of {len(modes)} threads"
    )
    state = "active" if filtered == len(modes) else "partial"
    return SandboxLayer(name="network", state=state, detail=detail)


# ---------------------------------------------------------------------------- filesystem (Landlock)


def landlock_abi() -> tuple[int, str]:
    """(Landlock ABI version, '') or (0, why it is unavailable)."""
    return landlock.abi()


def _writable_paths(scratch: Path, write: int, shm: bool = False) -> list[tuple[Path, int]]:
    """Where the sandboxed worker may still write, with the rights granted beneath each."""
    dev = Path("/dev")
    nodes = [p for p in sorted(dev.glob("nvidia*")) if p.exists()]
    nodes += [dev / name for name in DEVICE_NODES if (dev / name).exists()]
    paths = [(scratch, write)]
    if shm and (dev / "shm").is_dir():
        paths.append((dev / "shm", write))
    paths += [(node, write) for node in nodes]  # file rules keep only the file rights (write, truncate)
    paths.append((Path("/proc/self"), write & landlock.FILE_RIGHTS))  # /proc/<pid>: thread names, oom score
    return paths


_PINNED: list[int] = []
"""O_PATH descriptors of the ``/proc`` entries a rule names, open for the process's life: a rule is tied to
an inode, and procfs makes a new one for an evicted entry (memory pressure), which no rule names (a
reviewer's find: the worker lost ``/proc/self`` in 4 of 6 runs after the page cache was dropped)."""


def _pin(path: Path) -> None:
    try:
        _PINNED.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
    except OSError:
        pass  # the rule's own open reports it


def _proc_elsewhere() -> list[str]:
    """Mount points of procfs outside ``/proc`` (every other process's entry is readable there)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(" - ", 1)
        mount = line.split()[4] if len(line.split()) > 4 else ""
        if len(fields) == 2 and fields[1].split()[:1] == ["proc"] and not (mount + "/").startswith("/proc/"):
            out.append(mount)
    return out


def _readable_paths(scratch: Path) -> list[Path]:
    """Where a worker may read: everything but ``/proc``, of which only its own entry and system facts.

    Another process's ``/proc/<pid>`` would show the trusted evaluator's environment (its secrets, to a
    worker running as root), command line and memory map. The list of facts is the runner's
    (``runner/jail.DRIVER_READ``).
    """
    from ptxgym.evaluation.runner.jail import DRIVER_READ

    top = [p for p in sorted(Path("/").iterdir()) if p.name != "proc"]
    facts = [Path(p) for p in DRIVER_READ if p.startswith("/proc/") and Path(p).exists()]
    return [*top, *facts, scratch]


def _landlock(scratch: Path, shm: bool = False) -> SandboxLayer:
    """Writes beneath scratch (``_writable_paths``); a worker's reads too (``_readable_paths``).

    The one-shot profiled process (``shm``) keeps every read: its profiler's or sanitizer's injected
    library may read what a worker does not (not verified on a GPU).
    """
    abi, why = landlock_abi()
    if not abi:
        return _unavailable("filesystem", why)
    write = landlock.write_rights(abi)
    read = 0 if shm else landlock.READ
    scoped = landlock.SCOPE_SIGNAL if abi >= 6 else 0
    try:
        ruleset = landlock.Ruleset(abi, write | read, 0, scoped)
    except OSError as exc:
        return _unavailable("filesystem", str(exc.strerror))
    with ruleset:
        rules = _writable_paths(scratch, write, shm)
        rules += [(path, read) for path in (_readable_paths(scratch) if read else [])]
        for path, rights in rules:
            if path.is_relative_to("/proc"):
                _pin(path)
            error = ruleset.allow(path, rights)
            if error and path == scratch:
                return _unavailable("filesystem", error)
        threads = len(_task_field("Tgid"))
        # ABI 8 restricts every thread at once (all-or-nothing); else each other thread restricts itself
        tsync = abi >= 8 and ruleset.restrict_self(landlock.RESTRICT_SELF_TSYNC) == 0
        others, note = (True, "") if tsync or threads <= 1 else _restrict_others(ruleset.fd)
        ret = 0 if tsync else ruleset.restrict_self(0)
        if ret < 0:
            return _unavailable("filesystem", f"landlock_restrict_self: {os.strerror(-ret)}")
    detail = (
        f"writes only beneath {scratch}{', /dev/shm' if shm else ''}, /proc/self and to /dev/nvidia*, "
        "/dev/null-like nodes"
        f"{'' if shm else '; reads nothing of /proc but its own entry and system facts'} "
        f"(Landlock ABI {abi}{'; no signals to processes outside the sandbox' if scoped else ''})"
    )
    elsewhere = _proc_elsewhere() if read else []
    if elsewhere:
        return SandboxLayer(
            name="filesystem",
            state="partial",
            detail=f"{detail}; but procfs is also mounted at {', '.join(elsewhere)[:300]}, where every "
            "process's entry stays readable",
        )
    if others:
        return SandboxLayer(name="filesystem", state="active", detail=f"{detail}; all threads{note}")
    return SandboxLayer(
        name="filesystem",
        state="partial",
        detail=f"{detail}; enforced on the calling thread and all it starts, not on every one of the "
        f"{threads - 1} threads that existed before (ABI {abi} < 8 has no LANDLOCK_RESTRICT_SELF_TSYNC): "
        f"{note}",
    )


def _restrict_others(ruleset_fd: int) -> tuple[bool, str]:
    """Every other thread restricts itself with the ruleset: (all did, what happened).

    Below Landlock ABI 8 ``restrict_self`` binds only the calling thread, and CUDA's, CUPTI's and torch's
    helper threads exist before the sandbox; code a candidate runs on one (a signal handler it sends
    there, a host callback) could otherwise write anywhere. The native runner's broadcast
    (``runner/confine.h`` ``restrict_others``: a signal-32 handler on each thread) does it, compiled as
    a small library (``runner.build.build_broadcast``, once per host into the cache).
    """
    from ptxgym.evaluation.runner.build import build_broadcast

    try:
        lib = ctypes.CDLL(str(build_broadcast()))
    except Exception as exc:  # noqa: BLE001 - no compiler, a failed build: the layer says so (partial)
        return False, f"the thread broadcast library is unavailable: {exc}"[:600]
    broadcast = lib.ptxgym_restrict_others
    broadcast.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    broadcast.restype = ctypes.c_int
    note = ctypes.create_string_buffer(4096)
    restricted = broadcast(ruleset_fd, note, len(note))
    if restricted < 0:
        return False, f"outside Landlock: {note.value.decode(errors='replace')}"
    return True, f" ({restricted} earlier thread(s) restricted themselves from a signal handler)"


# ------------------------------------------------------------------------------------------ rlimits


def _cap(which: int, value: int) -> int:
    """Set soft and hard limit to ``value`` (or the current hard limit if that is lower)."""
    _, hard = resource.getrlimit(which)
    new = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (new, new))
    return new


def apply_rlimits(mode: str) -> SandboxLayer:
    """Apply the rlimits layer alone (module docstring, layer 4), for a process that deferred it.

    It counts the user's tasks now, so ``/proc`` must still show them: before ``apply``, or after
    ``apply(..., shm=True)``, which keeps every read. Mode ``off`` applies nothing; mode ``strict`` raises
    ``SandboxError`` when the layer is unavailable.
    """
    mode = check_mode(mode)
    if mode == "off":
        return SandboxLayer(name="rlimits", state="off")
    layer = _rlimits(None if privileged() else user_tasks())
    if mode == "strict" and layer.state == "unavailable":
        raise SandboxError(f"strict sandbox mode, but the rlimits layer is unavailable here: {layer.detail}")
    return layer


def _rlimits(tasks: int | None) -> SandboxLayer:
    """``tasks``: the user's tasks, counted while /proc shows them (None: privileged, nproc not enforced)."""
    done, gaps = [], []
    try:
        done.append(f"core={_cap(resource.RLIMIT_CORE, 0)}")
        done.append(f"fsize={_cap(resource.RLIMIT_FSIZE, MAX_FILE_BYTES) >> 20} MiB")
        highest = max((int(fd) for fd in os.listdir("/proc/self/fd")), default=0)
        done.append(f"nofile={_cap(resource.RLIMIT_NOFILE, max(MAX_OPEN_FILES, highest + 256))}")
        if tasks is None:
            gaps.append("nproc not enforced (the worker runs as root or with CAP_SYS_RESOURCE/CAP_SYS_ADMIN)")
        else:
            nproc = _cap(resource.RLIMIT_NPROC, tasks + TASK_HEADROOM)
            done.append(f"nproc={nproc} ({tasks} tasks of the user now)")
    except (OSError, ValueError) as exc:
        gaps.append(f"setrlimit failed: {exc}")
    if not done:
        return _unavailable("rlimits", "; ".join(gaps))
    return SandboxLayer(name="rlimits", state="partial" if gaps else "active", detail=", ".join(done + gaps))


# -------------------------------------------------------------------------------------- environment


def _environment(scratch: Path) -> SandboxLayer:
    os.chdir(scratch)
    removed = sorted(k for k in os.environ if is_secret_name(k))
    for name in removed:
        del os.environ[name]  # unsetenv: gone for getenv() in the candidate's C++ too
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)
    gaps = []
    cache = os.environ.get("CUDA_CACHE_PATH", "")
    if not cache or not Path(cache).resolve().is_relative_to(scratch):
        os.environ["CUDA_CACHE_PATH"] = str(scratch / "cuda-cache")
        gaps.append("CUDA_CACHE_PATH was not in scratch at spawn (set now, possibly too late for CUDA)")
    if removed:
        gaps.append(
            f"{len(removed)} credential-like variables removed now ({', '.join(removed)[:300]}), but they "
            "stay readable in /proc/self/environ (spawn the worker with worker_environ)"
        )
    detail = "; ".join([f"cwd, TMPDIR and CUDA_CACHE_PATH in {scratch}", *gaps])
    return SandboxLayer(name="environment", state="partial" if gaps else "active", detail=detail)
