"""The build jail: nvcc and every tool it runs, confined to what a build needs, under limits.

A candidate's source is input to the preprocessor, the EDG front ends, gcc and the host assembler, and each
of them opens files the source names: ``#include "/etc/passwd"``, ``.incbin`` or ``.include`` in host
assembly (spelled through macros, ``.irp`` or ``.macro``). No text screen can find every spelling, so the
tools themselves are confined (Landlock, applied by ``ptxgym.confine.launch`` before nvcc starts; every
tool nvcc runs inherits it). A jailed build may

* read and execute: the CUDA toolkit (nvcc's ``TOP``), the host compiler's programs (gcc, g++, as, ld,
  sh and gcc's own directory with cc1plus and collect2) and the dynamic loader;
* read: the toolkit's and the host compiler's header directories, the directories of the libraries the
  tools load (``ldd``) and the linker reads (``gcc -print-file-name``), TVM-FFI's ``include/`` and
  ``lib/``, the generated link directory, the build's trusted include directories (the packs' header
  tree, nothing else of the packs) and the loader cache;
* write: its build directory only (nvcc's ``TMPDIR`` and ``HOME`` point there), and ``/dev/null``;
* open no socket at all (seccomp), bind or connect no TCP port (Landlock ABI >= 4), signal nothing
  outside the jail (ABI >= 6);

under the limits: RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CPU, no core files, RLIMIT_NPROC (non-root), and the wall
clock (the whole process group is killed on expiry). Anything else the source names fails with EACCES
and becomes an ordinary compile error, whose log never holds the file's bytes.

``PTXGYM_SANDBOX`` decides: ``on`` jails with Landlock where the kernel has it, and otherwise builds with
the limits and the socket filter only, saying so in ``CompileInfo.confinement`` (the source screen then
is the only guard of file access); ``strict`` refuses to build without Landlock or the socket filter;
``off`` applies the limits only.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ptxgym.confine import cores, landlock, seccomp
from ptxgym.confine.groups import kill_group
from ptxgym.confine.launch import JAIL_FAILED, JAIL_PREFIX, Jail, LandlockRules, command
from ptxgym.confine.tasks import user_tasks
from ptxgym.cpu.toolchain import Toolchain
from ptxgym.records import settings
from ptxgym.records.errors import InfraError

log = logging.getLogger(__name__)

FSIZE_LIMIT_BYTES = 512 * 1024 * 1024
LOG_HEAD_BYTES, LOG_TAIL_BYTES = 384 * 1024, 128 * 1024
_PROBE_TIMEOUT_S = 60.0
_HOST_TOOLS = ("gcc", "g++", "as", "ld", "sh")
_GCC_PROGRAMS = ("cc1plus", "cc1", "collect2")
_LINK_INPUTS = (
    "libc.so",
    "libc.so.6",
    "libc_nonshared.a",
    "libm.so",
    "libm.so.6",
    "libstdc++.so",
    "libgcc_s.so",
    "libgcc_s.so.1",
    "libgcc.a",
    "crti.o",
    "crtn.o",
    "crtbeginS.o",
    "crtendS.o",
)
_LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)", re.M)
_INTERPRETER = re.compile(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)", re.M)
_SCRIPT_PATH = re.compile(r"(?<![\w/.-])(/[\w/.+-]+)")


class JailError(InfraError):
    """The build cannot be confined as the sandbox mode demands (strict without Landlock, or a failure)."""


@dataclass(frozen=True)
class Confinement:
    """How builds are confined here, from ``PTXGYM_SANDBOX`` and what the kernel offers."""

    kind: str
    """``landlock``, ``unconfined`` (no Landlock on this kernel) or ``off`` (``PTXGYM_SANDBOX=off``)."""
    detail: str
    """One sentence for ``CompileInfo.confinement``."""
    sockets_filtered: bool = False
    """Whether the seccomp filter refuses every socket."""


def confinement() -> Confinement:
    """The confinement of the next build. Raises JailError in strict mode when a layer is missing."""
    mode = settings.sandbox_mode()
    if mode == "off":
        return Confinement("off", "none (PTXGYM_SANDBOX=off): nvcc ran under the time and memory limits only")
    abi, why = landlock.abi()
    no_filter = socket_filter_problem()
    if mode == "strict" and (not abi or no_filter):
        missing = f"no Landlock ({why})" if not abi else f"no socket filter ({no_filter})"
        raise JailError(
            f"strict sandbox mode, but builds cannot be confined: {missing}. Use a kernel with Landlock "
            "(5.13 or newer, landlock in the lsm= list) and seccomp, or PTXGYM_SANDBOX=on to build with "
            "what is available (the source screen is then the only guard of file access)."
        )
    network = "no sockets" if not no_filter else f"sockets not filtered ({no_filter})"
    if not abi:
        detail = (
            f"no Landlock ({why}): nvcc could read any file the user can; the source screen was the only "
            f"guard of file access; {network}; time and memory limits"
        )
        return Confinement("unconfined", detail, not no_filter)
    extras = [s for s, need in (("no TCP", 4), ("no signals outside the build", 6)) if abi >= need]
    detail = (
        f"Landlock ABI {abi}: nvcc and its tools read only the toolkit, the host compiler, TVM-FFI and "
        f"the allowed headers, and write only the build directory; {network}"
        + "".join(f"; {s}" for s in extras)
    )
    return Confinement("landlock", detail, not no_filter)


@functools.cache
def socket_filter_problem() -> str:
    """'' when the launcher can install its socket filter on this host, else why not (probed once)."""
    machine = os.uname().machine
    if machine not in seccomp.ARCHES:
        return f"no syscall table for {machine} (x86_64 and aarch64 only)"
    probe = command(Jail(families=()), [sys.executable, "-I", "-S", "-c", ""])
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe failed: {exc}"
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")[:300]


# ------------------------------------------------------------------------------------- what to allow


@dataclass(frozen=True)
class ToolPaths:
    """What nvcc and the tools it drives read and execute (the jail's allowlist, less the build's own)."""

    execute: tuple[Path, ...]
    read: tuple[Path, ...]
    headers: tuple[Path, ...] = ()
    """The host compiler's system header folders (within ``read``): their paths are masked in logs."""


def _probe(argv: list[str]) -> str:
    """stdout+stderr of a probe, '' if it cannot run (a missing ldd, a static binary)."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, env={**os.environ, "LC_ALL": "C"}
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def _absolute(text: str) -> Path | None:
    path = Path(text.strip())
    return path if path.is_absolute() and path.exists() else None


def _compact(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Resolved, existing, without duplicates or paths beneath another one of the set."""
    resolved = sorted({p.resolve() for p in paths if p.exists()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(k) for k in kept if k.is_dir()):
            kept.append(path)
    return tuple(sorted(kept))


@functools.cache
def tool_paths(toolchain: Toolchain) -> ToolPaths:
    """Ask gcc and ldd what the toolkit's and the host compiler's programs need (once per process)."""
    search = toolchain.subprocess_env()["PATH"]
    execute = [toolchain.cuda_home, toolchain.nvcc, Path("/bin/sh")]
    programs = [toolchain.nvcc.resolve(), *sorted((toolchain.cuda_home / "bin").iterdir())]
    programs += sorted((toolchain.cuda_home / "nvvm" / "bin").glob("*"))
    for name in _HOST_TOOLS:
        found = shutil.which(name, path=search)
        if found:
            execute.append(Path(found))
            programs.append(Path(found).resolve())
    gcc = shutil.which("gcc", path=search) or "gcc"
    for name in _GCC_PROGRAMS:
        prog = _absolute(_probe([gcc, f"-print-prog-name={name}"]))
        if prog:
            execute.append(prog.parent)
            programs.append(prog)
    read = [
        *toolchain.include_dirs,
        *toolchain.lib_dirs,
        toolchain.libcuda_dir,
        toolchain.link_dir,
        toolchain.tvm_ffi_include,
        toolchain.tvm_ffi_lib_dir,
        Path("/etc/ld.so.cache"),
        Path("/dev/urandom"),
        Path("/dev/zero"),
    ]
    headers = _host_include_dirs(shutil.which("g++", path=search) or "g++")
    read += headers
    read += _link_input_dirs(gcc)
    for program in programs:
        if program.is_file() and os.access(program, os.X_OK):
            out = _probe(["ldd", str(program)])
            read += [Path(p).parent for p in _LDD_LINE.findall(out)]
            execute += [Path(p) for p in _INTERPRETER.findall(out)]
    return ToolPaths(execute=_compact(execute), read=_compact(read), headers=tuple(headers))


def _host_include_dirs(gxx: str) -> list[Path]:
    """The host compiler's system header directories (``g++ -E -v``)."""
    out = _probe([gxx, "-x", "c++", "-E", "-v", "/dev/null", "-o", "/dev/null"])
    block = out.split("search starts here:")[-1].split("End of search list.")[0]
    return [p for line in block.splitlines() if (p := _absolute(line))]


def _link_input_dirs(gcc: str) -> list[Path]:
    """Directories of the libraries and start files the linker reads, and of what linker scripts name."""
    dirs = []
    for name in _LINK_INPUTS:
        path = _absolute(_probe([gcc, f"-print-file-name={name}"]))
        if path is None:
            continue
        dirs.append(path.resolve().parent)
        if path.stat().st_size < 4096 and path.suffix == ".so":  # libc.so is a linker script
            text = path.read_text(errors="replace")
            if "GROUP" in text or "INPUT" in text:
                dirs += [p.resolve().parent for s in _SCRIPT_PATH.findall(text) if (p := _absolute(s))]
    return dirs


def jail_rules(toolchain: Toolchain, include_dirs: Sequence[Path], stage: Path) -> LandlockRules:
    """The Landlock rules of one build in ``stage``."""
    tools = tool_paths(toolchain)
    read = _compact([*tools.read, *(Path(d) for d in include_dirs)])
    return LandlockRules(
        read=tuple(map(str, read)),
        execute=tuple(map(str, tools.execute)),
        write=(str(stage.resolve()),),
        devices=("/dev/null",),
    )


def build_cores() -> tuple[int, ...]:
    """Where builds and the scan helpers run (``confine/cores.py``; empty: anywhere).

    A bad ``PTXGYM_TIMING_CORES`` is logged once, not raised: the evaluator raises it at its construction,
    and a build goes on.
    """
    global _CORES_WARNED
    try:
        wanted = settings.timing_cores()
    except ValueError as exc:
        if not _CORES_WARNED:
            log.warning("%s: builds run on any core", exc)
            _CORES_WARNED = True
        return ()
    return cores.split(wanted=wanted).builds


_CORES_WARNED = False


def builds_idle() -> bool:
    """Whether builds and the scan helpers run under ``SCHED_IDLE`` (``PTXGYM_BUILD_PRIORITY=idle``).

    A bad value is logged once, not raised (the builds then run at ``BUILD_NICE``).
    """
    global _PRIORITY_WARNED
    try:
        return settings.build_priority() == "idle"
    except ValueError as exc:
        if not _PRIORITY_WARNED:
            log.warning("%s: builds run at niceness +%d", exc, BUILD_NICE)
            _PRIORITY_WARNED = True
        return False


_PRIORITY_WARNED = False


BUILD_NICE = 5
"""Niceness added to every build (nvcc and the tools it runs), so that a batch of concurrent builds on
every core gives way to the evaluator's host side while it holds the GPU: on an H100 host where 16
concurrent builds took 9.4 s each, a GPU turn's calibration took 0.20 s a candidate, against 0.13 s on
one where they took 4.6 s (bench/results/throughput_2026-12-05_stream16_s19_h100.txt; two machines, so a
hint, not a measurement of this change). On an idle host a build runs as fast as before. Not more: the
build's time limit is wall time, and on a host kept busy at niceness 0 (a trainer, an inference server)
a build at +10 would get about a tenth of a core and could reach it (a reviewer's caution).

``PTXGYM_BUILD_PRIORITY=idle`` goes further, for a host that runs little besides the evaluator: builds
under ``SCHED_IDLE`` give the core at once to the runner or the timing thread when they wake (a niceness
only weighs their shares), and get almost nothing beside other busy work."""


def build_jail(
    toolchain: Toolchain,
    include_dirs: Sequence[Path],
    stage: Path,
    limits: tuple[float, int],
    confined: Confinement,
) -> Jail:
    """The jail of one build: limits and priority always; Landlock, socket filter per ``confined``.

    Priority: ``BUILD_NICE``, and ``SCHED_IDLE`` where ``builds_idle``.

    It runs on the cores not kept for the GPU turns (``confine/cores.py``).
    """
    timeout_s, memory_mb = limits
    rlimits = {
        "RLIMIT_FSIZE": FSIZE_LIMIT_BYTES,
        "RLIMIT_CORE": 0,
        "RLIMIT_CPU": int(timeout_s) + 30,
    }
    if memory_mb > 0:
        rlimits["RLIMIT_AS"] = memory_mb * 1024 * 1024
    if os.geteuid() != 0:
        rlimits["RLIMIT_NPROC"] = user_tasks() + 512
    rules = jail_rules(toolchain, include_dirs, stage) if confined.kind == "landlock" else None
    families = () if confined.sockets_filtered else None
    builds = build_cores()
    return Jail(
        rlimits=rlimits, landlock=rules, families=families, nice=BUILD_NICE, idle=builds_idle(), cpus=builds
    )


# ------------------------------------------------------------------------------------------ running


def run_jailed(
    argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float, jail: Jail
) -> tuple[int, bool, str]:
    """(returncode, timed_out, output) of ``argv`` in ``jail``, in its own process group.

    Raises JailError when the launcher could not confine itself (nothing ran).
    """
    log_path = cwd / ".nvcc.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command(jail, argv),
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            process_group=0,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if timed_out or proc.poll() is None:
                kill_group(proc)  # cicc/cudafe++ run beside nvcc and take a moment to die
    text = _read_capped(log_path)
    log_path.unlink(missing_ok=True)
    if proc.returncode == JAIL_FAILED and text.startswith(JAIL_PREFIX):
        raise JailError(f"the build could not be confined: {text.strip()[:500]}")
    return proc.returncode, timed_out, text


def _read_capped(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as f:
        if size <= LOG_HEAD_BYTES + LOG_TAIL_BYTES:
            data = f.read()
        else:
            head = f.read(LOG_HEAD_BYTES).rpartition(b"\n")[0]  # whole lines only: a line's remainder
            f.seek(size - LOG_TAIL_BYTES)  # could start with what the log filter keeps (`nvcc ...`)
            tail = f.read().partition(b"\n")[2]
            cut = f"\n[... {size - len(head) - len(tail)} bytes cut ...]\n".encode()
            data = head + cut + tail
    return data.decode("utf-8", errors="replace")
