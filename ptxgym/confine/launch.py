"""Run a program confined: a launcher that limits and jails itself, then execs the program.

The parent starts ``command(jail, argv)`` with a plain fork+exec (no ``preexec_fn``, which is unsafe in
a process with threads). The launcher is a bare interpreter (``python -I -S``) that imports this module
without running ``ptxgym/__init__`` and applies, in this order, before ``execvp``:

0. the CPU priority (``Jail.nice``: a build yields the cores to the evaluator's GPU turns; ``Jail.idle``:
   ``SCHED_IDLE``, best effort) and the cores it may run on (``Jail.cpus``, best effort:
   ``confine/cores.py``);
1. resource limits (``Jail.rlimits``; a limit is lowered to the hard limit, never raised);
2. ``no_new_privs``;
3. Landlock, when ``Jail.landlock`` is set: every file-system right the kernel's ABI knows is handled, so
   the program and all its children may read only beneath ``read``, read and execute only beneath
   ``execute``, write only beneath ``write`` (and to the ``devices`` files); TCP bind/connect are denied
   (ABI >= 4) and abstract Unix sockets and signals are scoped to the jail (ABI >= 6);
4. the seccomp socket filter, when ``Jail.families`` is not None (only those address families may open
   sockets; an empty tuple means none).

Every failure ends the launcher with ``JAIL_FAILED`` and one line starting with ``JAIL_PREFIX`` on stderr,
so nothing ever runs less confined than asked.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptxgym.confine import landlock, seccomp
from ptxgym.confine.libc import set_no_new_privs

JAIL_FAILED = 125
"""Exit status of a launcher that could not confine itself."""
JAIL_PREFIX = "ptxgym-jail:"
DEVICE_RIGHTS = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE
"""What a jailed program may do to a ``devices`` file (``/dev/null``)."""

_BOOT = (
    "import sys, types\n"
    "pkg = types.ModuleType('ptxgym'); pkg.__path__ = [sys.argv[1]]; sys.modules['ptxgym'] = pkg\n"
    "from ptxgym.confine.launch import main\n"
    "main(sys.argv[2:])\n"
)
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LandlockRules:
    """Where a jailed program may read, execute and write (absolute paths; missing ones are skipped)."""

    read: tuple[str, ...] = ()
    execute: tuple[str, ...] = ()
    """Read and execute."""
    write: tuple[str, ...] = ()
    """Read, create, write, rename and remove (no device nodes, sockets or fifos)."""
    devices: tuple[str, ...] = ()
    """Files that may be opened for reading and writing, such as /dev/null."""


@dataclass(frozen=True)
class Jail:
    """What the launcher applies before exec."""

    rlimits: dict[str, int] = field(default_factory=dict)
    """``RLIMIT_*`` name -> value for soft and hard limit."""
    landlock: LandlockRules | None = None
    """None: no Landlock (where it is unavailable)."""
    families: tuple[int, ...] | None = None
    """Address families that may open sockets; None: no seccomp filter."""
    nice: int = 0
    """Added to the program's niceness before anything else (0: its parent's CPU priority)."""
    idle: bool = False
    """Run under ``SCHED_IDLE``: any other task that wakes on its core takes the core at once (where the
    kernel refuses, the program runs at its niceness: a priority is no confinement)."""
    cpus: tuple[int, ...] = ()
    """The cores the program and its children may run on (empty: its parent's); a mask the kernel
    refuses is ignored (where a build runs is no confinement)."""


def command(jail: Jail, argv: list[str]) -> list[str]:
    """The argv that runs ``argv`` inside ``jail``."""
    spec = json.dumps(asdict(jail))
    return [sys.executable, "-I", "-S", "-c", _BOOT, str(_PACKAGE_DIR), spec, *argv]


def _fail(message: str) -> None:
    sys.stderr.write(f"{JAIL_PREFIX} {message}\n")
    sys.stderr.flush()
    os._exit(JAIL_FAILED)


def idle_priority(pid: int) -> bool:
    """Put ``pid`` (0: the caller) under ``SCHED_IDLE``; False where refused (``Jail.idle``)."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        return False
    return True


def _set_rlimits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        res = getattr(resource, name)
        _, hard = resource.getrlimit(res)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))


def _write_access(abi: int) -> int:
    make_special = landlock.MAKE_CHAR | landlock.MAKE_BLOCK | landlock.MAKE_SOCK | landlock.MAKE_FIFO
    return landlock.READ | (landlock.write_rights(abi) & ~make_special)


def apply_landlock(rules: LandlockRules) -> str:
    """Restrict the calling process as ``rules`` say; '' or the error."""
    abi, why = landlock.abi()
    if not abi:
        return why
    net = landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP if abi >= 4 else 0
    scoped = landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL if abi >= 6 else 0
    grants = [
        (rules.read, landlock.READ),
        (rules.execute, landlock.READ | landlock.EXECUTE),
        (rules.write, _write_access(abi)),
        (rules.devices, DEVICE_RIGHTS),
    ]
    try:
        with landlock.Ruleset(abi, landlock.fs_rights(abi), net, scoped) as ruleset:
            for paths, rights in grants:
                for path in paths:
                    error = ruleset.allow(path, rights) if os.path.exists(path) else ""
                    if error:
                        return error
            ret = ruleset.restrict_self()
    except OSError as exc:
        return str(exc)
    return f"landlock_restrict_self: {os.strerror(-ret)}" if ret < 0 else ""


def main(args: list[str]) -> None:
    """Launcher entry point: ``args`` = [jail spec (JSON), program, program args...]."""
    raw = json.loads(args[0])
    rules = raw.get("landlock")
    families = raw.get("families")
    if raw.get("cpus"):
        try:
            os.sched_setaffinity(0, raw["cpus"])
        except (OSError, ValueError, TypeError):
            pass  # best effort (Jail.cpus)
    try:
        if raw.get("nice", 0) > 0:
            os.nice(raw["nice"])
        if raw.get("idle"):
            idle_priority(0)
        _set_rlimits(raw.get("rlimits", {}))
    except (OSError, ValueError, AttributeError) as exc:
        _fail(f"nice or setrlimit: {exc}")
    if rules is not None or families is not None:
        error = set_no_new_privs()
        if error:
            _fail(error)
    if rules is not None:
        error = apply_landlock(LandlockRules(**{k: tuple(v) for k, v in rules.items()}))
        if error:
            _fail(f"Landlock: {error}")
    if families is not None:
        ret = seccomp.install(seccomp.network_filter(os.uname().machine, tuple(families)), tsync=False)
        if ret != 0:
            _fail(f"seccomp: {os.strerror(-ret) if ret < 0 else ret}")
    try:
        os.execvp(args[1], args[1:])
    except OSError as exc:
        sys.stderr.write(f"{JAIL_PREFIX} cannot run {args[1]}: {exc.strerror}\n")
        os._exit(127)
