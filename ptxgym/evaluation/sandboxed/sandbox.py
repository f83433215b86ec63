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
   beneath the worker's scratch directory, ``/dev/shm`` and ``/proc/self``, plus writing to the device
   nodes CUDA and the C library use (``/dev/nvidia*``, ``/dev/null`` and the like; not disks). Reading
   and executing stay allowed everywhere. With Landlock ABI >= 6 the worker also cannot send signals to
   processes outside its sandbox (it cannot kill the trusted evaluator).
4. ``rlimits`` (per process): no core files, files of at most 64 MiB (Python ignores SIGXFSZ, so a longer
   write fails with EFBIG; this covers the worker's log too), a cap on open files, and a cap on the
   tasks of the user (RLIMIT_NPROC counts every thread of the uid, so the cap is the visible count plus
   headroom; the kernel does not enforce it for root or CAP_SYS_RESOURCE/CAP_SYS_ADMIN). No
   address-space limit: CUDA reserves huge virtual ranges.
5. ``environment``: working directory and TMPDIR in scratch, credential-like and proxy variables
   removed. The pool spawns a sandboxed worker with ``worker_environ`` already, so the secrets never
   reach it (not even ``/proc/self/environ``) and CUDA's JIT cache is private to the worker (a candidate
   cannot poison a cache that another process loads kernels from).

Threads. When the sandbox is applied the worker already has CUDA, CUPTI and torch helper threads.
rlimits belong to the process. seccomp is installed with SECCOMP_FILTER_FLAG_TSYNC, which puts the
filter, and no_new_privs, on every thread; the report counts the threads that have both (from
``/proc/self/task``). Landlock restricts the calling thread and everything it starts later; only
Landlock ABI 8 (Linux 7.0, LANDLOCK_RESTRICT_SELF_TSYNC) also restricts the threads that already exist.
Below ABI 8 the filesystem layer is ``partial``: the candidate's code runs on the calling thread and on
any thread or process it creates, all restricted, but code it manages to have run on a pre-existing
helper thread (a CUDA host callback, for instance) could still write outside scratch.

Every layer fails soft with its reason in mode ``on``; mode ``strict`` turns an unavailable layer into
a ``SandboxError``; mode ``off`` applies nothing. Not covered: reading files (a candidate can read what
the user can, the trusted process's ``/proc/<pid>/environ`` included; with no network and no writes
outside scratch its only ways out are its outputs and its log), connecting to Unix sockets by path,
host memory limits (use a cgroup).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import resource
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts")
"""Writable /dev entries besides ``nvidia*`` and ``shm``."""


class SandboxError(InfraError):
    """The sandbox cannot be applied as asked (strict mode with a layer unavailable, or no scratch dir)."""


def apply(mode: str, scratch: Path) -> SandboxReport:
    """Sandbox this process (every layer, best effort) and report what is enforced.

    Raises ``SandboxError`` when ``scratch`` is not a directory, or in mode ``strict`` when a layer is
    unavailable (the layers that did apply stay applied; the process should be discarded).
    """
    mode = check_mode(mode)
    scratch = Path(scratch).resolve()
    if not scratch.is_dir():
        raise SandboxError(f"the worker's scratch directory {scratch} does not exist; the pool creates it")
    if mode == "off":
        return SandboxReport(mode="off", layers=[SandboxLayer(name=n, state="off") for n in LAYERS])
    nnp_error = _set_no_new_privs()
    if nnp_error:
        network = _unavailable("network", f"needs no_new_privs ({nnp_error})")
        filesystem = _unavailable("filesystem", f"needs no_new_privs ({nnp_error})")
    else:
        filesystem = _landlock(scratch)
        network = _seccomp()  # last of the two: its TSYNC spreads no_new_privs to every thread
    layers = [_no_new_privs_coverage(nnp_error), network, filesystem, _rlimits(), _environment(scratch)]
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

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_PR_SET_NO_NEW_PRIVS = 38


def _syscall(nr: int, *args) -> int:
    """``syscall(nr, ...)``; returns the result, or ``-errno`` on failure."""
    ctypes.set_errno(0)
    ret = _LIBC.syscall(ctypes.c_long(nr), *args)
    return -ctypes.get_errno() if ret == -1 else ret


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


def _set_no_new_privs() -> str:
    """Set no_new_privs on the calling thread; '' or the error."""
    one, zero = ctypes.c_ulong(1), ctypes.c_ulong(0)
    ctypes.set_errno(0)
    if _LIBC.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), one, zero, zero, zero) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
    return ""


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


@dataclass(frozen=True)
class _Arch:
    audit: int
    """AUDIT_ARCH_* value of seccomp_data.arch for this architecture's native syscalls."""
    x32: bool
    """x86_64: syscall numbers with bit 30 set are the x32 ABI (same arch value), to be refused."""
    nr: dict[str, int]


_ARCHES = {
    "x86_64": _Arch(
        0xC000003E,
        True,
        {
            "socket": 41,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "seccomp": 317,
            "io_uring_setup": 425,
            "pidfd_getfd": 438,
        },
    ),
    "aarch64": _Arch(
        0xC00000B7,
        False,
        {
            "socket": 198,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "seccomp": 277,
            "io_uring_setup": 425,
            "pidfd_getfd": 438,
        },
    ),
}
_DENIED = ("io_uring_setup", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")
_ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_NETLINK)
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
# classic BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K
LD_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
# offsets in struct seccomp_data: nr, arch, low 32 bits of args[0] (little-endian)
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16


def syscall_number(name: str, machine: str | None = None) -> int:
    """Number of a syscall the network layer knows, on this machine's (or the given) architecture."""
    return _ARCHES[machine or platform.machine()].nr[name]


def network_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The seccomp-BPF program of the network layer for ``x86_64`` or ``aarch64``: (code, jt, jf, k) rows."""
    arch = _ARCHES[machine]
    program: list[tuple | str] = [("ld", OFF_ARCH), ("jeq", arch.audit, None, "enosys"), ("ld", OFF_NR)]
    if arch.x32:
        program.append(("jge", _X32_SYSCALL_BIT, "enosys", None))
    program.append(("jeq", arch.nr["socket"], "socket", None))
    program += [("jeq", arch.nr[name], "eperm", None) for name in _DENIED]
    program += [
        ("ret", RET_ALLOW),
        "socket",
        ("ld", OFF_ARG0),
        *[("jeq", family, "allow", None) for family in _ALLOWED_FAMILIES],
        ("ret", RET_ERRNO | errno.EACCES),
        "allow",
        ("ret", RET_ALLOW),
        "eperm",
        ("ret", RET_ERRNO | errno.EPERM),
        "enosys",
        ("ret", RET_ERRNO | errno.ENOSYS),
    ]
    return _assemble(program)


def _assemble(program: list) -> list[tuple[int, int, int, int]]:
    """Resolve labels (plain strings) into the relative jump offsets of classic BPF."""
    where, pc = {}, 0
    for item in program:
        if isinstance(item, str):
            where[item] = pc
        else:
            pc += 1
    rows = []
    for item in program:
        if isinstance(item, str):
            continue
        op, *rest = item
        if op == "ld":
            rows.append((LD_ABS, 0, 0, rest[0]))
        elif op == "ret":
            rows.append((RET, 0, 0, rest[0]))
        else:
            k, on_true, on_false = rest
            here = len(rows) + 1
            jt = where[on_true] - here if on_true else 0
            jf = where[on_false] - here if on_false else 0
            if not (0 <= jt < 256 and 0 <= jf < 256):
                raise ValueError(f"BPF jump of {max(jt, jf)} rows at row {here - 1}: beyond 255")
            rows.append((JEQ if op == "jeq" else JGE, jt, jf, k))
    return rows


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp() -> SandboxLayer:
    machine = platform.machine()
    if machine not in _ARCHES:
        return _unavailable("network", f"no syscall table for {machine} (x86_64 and aarch64 only)")
    rows = network_filter(machine)
    table = (_SockFilter * len(rows))(*(_SockFilter(*row) for row in rows))
    prog = _SockFprog(len(rows), table)
    ret = _syscall(
        _ARCHES[machine].nr["seccomp"],
        ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_ulong(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(prog),
    )
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

_NR_CREATE_RULESET, _NR_ADD_RULE, _NR_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8
_FS_WRITE_FILE = 1 << 1
_FS_WRITE_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write, remove, make_*
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_SCOPE_SIGNAL = 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> tuple[int, str]:
    """(Landlock ABI version, '') or (0, why it is unavailable)."""
    ret = _syscall(_NR_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_ulong(_CREATE_RULESET_VERSION))
    if ret > 0:
        return ret, ""
    if -ret == errno.ENOSYS:
        return 0, "the kernel has no Landlock (older than 5.13 or built without CONFIG_SECURITY_LANDLOCK)"
    if -ret == errno.EOPNOTSUPP:
        return 0, "Landlock is built in but disabled (add landlock to the lsm= boot parameter)"
    return 0, f"landlock_create_ruleset: {os.strerror(-ret)}"


def _writable_paths(scratch: Path, write: int) -> list[tuple[Path, int]]:
    """Where the sandboxed worker may still write, with the rights granted beneath each."""
    dev = Path("/dev")
    nodes = [p for p in sorted(dev.glob("nvidia*")) if p.exists()]
    nodes += [dev / name for name in DEVICE_NODES if (dev / name).exists()]
    file_rights = write & (_FS_WRITE_FILE | _FS_TRUNCATE)
    paths = [(scratch, write)]
    if (dev / "shm").is_dir():
        paths.append((dev / "shm", write))
    paths += [(node, write if node.is_dir() else file_rights) for node in nodes]
    paths.append((Path("/proc/self"), file_rights))  # resolves to /proc/<pid>: thread names, oom score
    return paths


def _landlock(scratch: Path) -> SandboxLayer:
    abi, why = landlock_abi()
    if not abi:
        return _unavailable("filesystem", why)
    write = _FS_WRITE_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    scoped = _SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(write, 0, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # older kernels refuse fields they do not know
    ruleset = _syscall(_NR_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_ulong(0))
    if ruleset < 0:
        return _unavailable("filesystem", f"landlock_create_ruleset: {os.strerror(-ruleset)}")
    try:
        for path, rights in _writable_paths(scratch, write):
            error = _add_rule(ruleset, path, rights)
            if error and path == scratch:
                return _unavailable("filesystem", error)
        threads = len(_task_field("Tgid"))
        tsync = abi >= 8
        ret = _restrict_self(ruleset, _RESTRICT_SELF_TSYNC if tsync else 0)
        if ret < 0 and tsync:  # all-or-nothing: nothing was restricted, try the calling thread alone
            tsync = False
            ret = _restrict_self(ruleset, 0)
        if ret < 0:
            return _unavailable("filesystem", f"landlock_restrict_self: {os.strerror(-ret)}")
    finally:
        os.close(ruleset)
    detail = (
        f"writes only beneath {scratch}, /dev/shm, /proc/self and to /dev/nvidia*, /dev/null-like nodes "
        f"(Landlock ABI {abi}{'; no signals to processes outside the sandbox' if scoped else ''})"
    )
    if tsync or threads <= 1:
        return SandboxLayer(name="filesystem", state="active", detail=f"{detail}; all threads")
    return SandboxLayer(
        name="filesystem",
        state="partial",
        detail=f"{detail}; enforced on the calling thread and all it starts, not on the {threads - 1} "
        f"threads that existed before (ABI {abi} < 8 has no LANDLOCK_RESTRICT_SELF_TSYNC)",
    )


def _restrict_self(ruleset: int, flags: int) -> int:
    return _syscall(_NR_RESTRICT_SELF, ctypes.c_long(ruleset), ctypes.c_ulong(flags))


def _add_rule(ruleset: int, path: Path, rights: int) -> str:
    """Allow ``rights`` beneath ``path``; '' or the error."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open {path}: {exc.strerror}"
    try:
        rule = _PathBeneath(rights, fd)
        ret = _syscall(
            _NR_ADD_RULE,
            ctypes.c_long(ruleset),
            ctypes.c_ulong(_RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_ulong(0),
        )
    finally:
        os.close(fd)
    return f"landlock_add_rule({path}): {os.strerror(-ret)}" if ret < 0 else ""


# ------------------------------------------------------------------------------------------ rlimits


def _cap(which: int, value: int) -> int:
    """Set soft and hard limit to ``value`` (or the current hard limit if that is lower)."""
    _, hard = resource.getrlimit(which)
    new = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (new, new))
    return new


def _privileged() -> bool:
    """Root, CAP_SYS_RESOURCE or CAP_SYS_ADMIN: the kernel does not enforce RLIMIT_NPROC."""
    if os.getuid() == 0:
        return True
    caps = _task_field("CapEff")
    effective = int(caps[0], 16) if caps and caps[0] else 0
    return bool(effective & ((1 << 21) | (1 << 24)))


def _user_tasks(uid: int) -> int:
    """Threads of every visible process whose real uid is ``uid`` (what RLIMIT_NPROC counts)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        uids, threads = re.search(r"^Uid:\s*(\d+)", text, re.M), re.search(r"^Threads:\s*(\d+)", text, re.M)
        if uids and threads and int(uids.group(1)) == uid:
            total += int(threads.group(1))
    return total


def _rlimits() -> SandboxLayer:
    done, gaps = [], []
    try:
        done.append(f"core={_cap(resource.RLIMIT_CORE, 0)}")
        done.append(f"fsize={_cap(resource.RLIMIT_FSIZE, MAX_FILE_BYTES) >> 20} MiB")
        highest = max((int(fd) for fd in os.listdir("/proc/self/fd")), default=0)
        done.append(f"nofile={_cap(resource.RLIMIT_NOFILE, max(MAX_OPEN_FILES, highest + 256))}")
        if _privileged():
            gaps.append("nproc not enforced (the worker runs as root or with CAP_SYS_RESOURCE/CAP_SYS_ADMIN)")
        else:
            tasks = _user_tasks(os.getuid())
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
