"""Build stage: nvcc a Solution into a TVM-FFI shared object, under limits, through a content cache.

``build_solution`` runs, in order:

1. the source policy (``screen.check_source``; on by default, since the compiler's own error
   messages would otherwise echo files a hostile ``#include`` reaches);
2. a cache lookup: ``<cache>/builds/<key[:2]>/<key>`` where the key hashes the solution content, the
   nvcc flags, the arch, the toolchain fingerprint, the policy rules and ``BUILD_VERSION``. Successes,
   deterministic compile errors and artifact verdicts are cached; timeouts and out-of-memory failures
   are not;
3. nvcc in a fresh scratch directory that holds only the solution files, in its own process group,
   with a wall-time limit (the whole group is killed on expiry -> COMPILE_TIMEOUT) and RLIMIT_AS /
   RLIMIT_FSIZE / RLIMIT_CPU / RLIMIT_CORE (and RLIMIT_NPROC for non-root users) set by a tiny exec
   launcher, which stays thread-safe where ``preexec_fn`` is not;
4. on success: the entry-point export check, the artifact policy (imports and DT_NEEDED against the
   allowlists, host syscall scan) and the ptxas resource report;
5. an atomic rename of the scratch directory into the cache, so concurrent builds of one key are safe
   (the loser discards its copy and uses the winner's).

Flags (DESIGN.md): ``-O3 -shared -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -std=c++17
-gencode=<arch> -cudart shared -lineinfo -Xptxas -v -I<tvm-ffi> -L<tvm-ffi> -ltvm_ffi -L<libcuda> -lcuda``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ptxgym.cpu.ptxas import parse_ptxas_report, ptxas_warnings
from ptxgym.cpu.screen import (
    ScreenVerdict,
    check_artifact,
    check_solution_sources,
    policy_fingerprint,
    read_dynamic,
)
from ptxgym.cpu.toolchain import Toolchain, find_toolchain, libcuda_stub_symbols
from ptxgym.records import settings
from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import CompileInfo, Status, truncate
from ptxgym.records.schema import Solution, SupportedLanguage

BUILD_VERSION = "ptxgym-build-v2"
"""Part of every cache key: bump when the build procedure or the cache record format changes (flags,
toolchain and policy rules enter the key by themselves)."""
SO_NAME = "kernel.so"
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")
FSIZE_LIMIT_BYTES = 512 * 1024 * 1024
LOG_HEAD_BYTES, LOG_TAIL_BYTES = 384 * 1024, 128 * 1024
MESSAGE_CHARS = 1500
LOG_CHARS = 6000
_OOM = re.compile(r"out of memory|bad_alloc|memory exhausted|cannot allocate memory|Killed signal", re.I)
_ERROR_LINE = re.compile(r"\b(?:error|fatal)\b|^ptxas (?:error|fatal)|undefined reference", re.I)
_TMPXFT = re.compile(r"tmpxft_[0-9a-fA-F]+_[0-9a-fA-F]+-\d+_")

# Runs as the child of a plain fork+exec (no preexec_fn, so it is safe from threads): sets the limits
# in its own process, then execs nvcc, whose children inherit them.
_LAUNCHER = """
import os, resource, sys
names = ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_NPROC")
for name, value in zip(names, map(int, sys.argv[1].split(","))):
    if value < 0:
        continue
    res = getattr(resource, name)
    soft, hard = resource.getrlimit(res)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(res, (value, value))
os.execvp(sys.argv[2], sys.argv[2:])
"""


@dataclass(frozen=True)
class BuildOutcome:
    """Result of ``build_solution``: ``status`` None means a usable shared object at ``so_path``."""

    status: Status | None
    """None when built; else COMPILE_ERROR, COMPILE_TIMEOUT or STATIC_REJECT."""
    message: str
    so_path: Path | None
    info: CompileInfo
    screen_verdict: ScreenVerdict | None = None
    """The verdict that rejected the candidate (source or artifact), for STATIC_REJECT."""
    warnings: list[str] = field(default_factory=list)
    """ptxas advisories (spills, serialized wgmma)."""
    key: str | None = None
    """Cache key of the build."""
    cacheable: bool = True
    """False for outcomes that depend on load or limits (timeouts, out-of-memory kills)."""

    @property
    def ok(self) -> bool:
        """Whether a shared object was built and passed the artifact policy."""
        return self.status is None


def nvcc_flags(arch: ArchSpec, toolchain: Toolchain, include_dirs: Sequence[Path] = ()) -> list[str]:
    """Every nvcc flag except the inputs and ``-o``."""
    return [
        "-O3",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-Xcompiler",
        "-fvisibility=hidden",
        "-std=c++17",
        f"-gencode={arch.gencode}",
        "-cudart",
        "shared",
        "-lineinfo",
        "-Xptxas",
        "-v",
        f"-I{toolchain.tvm_ffi_include}",
        *(f"-I{Path(d).resolve()}" for d in include_dirs),
        *toolchain.link_flags(),
    ]


def build_key(
    solution: Solution, arch: ArchSpec, toolchain: Toolchain, include_dirs: Sequence[Path] = ()
) -> str:
    """Content address of a build (trusted include directories count by their files' contents)."""
    parts = [
        BUILD_VERSION,
        policy_fingerprint(),
        solution.content_hash(),
        arch.name,
        toolchain.fingerprint,
        *nvcc_flags(arch, toolchain, include_dirs),
        *(_tree_hash(Path(d)) for d in include_dirs),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def builds_dir() -> Path:
    """Root of the build cache."""
    path = settings.cache_dir() / "builds"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_solution(
    solution: Solution,
    arch: ArchSpec,
    *,
    toolchain: Toolchain | None = None,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    use_cache: bool = True,
    screen: bool = True,
    include_dirs: Sequence[Path] = (),
) -> BuildOutcome:
    """Build a solution for an arch. Never raises for anything in the solution's content.

    ``include_dirs`` are trusted header directories (e.g. a knowledge pack's ``headers/``) added with
    ``-I``; the solution's own files always sit beside the entry file. Raises ToolchainNotFoundError
    when no compiler is usable (a set-up problem, not the candidate's). With ``use_cache=False`` the
    product lands in a fresh temporary directory the caller owns.
    """
    problem = _unbuildable(solution)
    if problem:
        return _failure(Status.COMPILE_ERROR, problem)
    if screen:
        verdict = check_solution_sources(
            ((s.path, s.content) for s in solution.sources), solution.spec.entry_file
        )
        if not verdict.ok:
            return _failure(Status.STATIC_REJECT, verdict.message, screen_verdict=verdict)
    toolchain = toolchain or find_toolchain()
    key = build_key(solution, arch, toolchain, include_dirs)
    entry = builds_dir() / key[:2] / key
    if use_cache:
        cached = _load(entry, key)
        if cached is not None:
            return cached
    stage = _stage_dir(key, use_cache)
    try:
        limits = (
            timeout_s if timeout_s is not None else settings.compile_timeout_s(),
            memory_mb if memory_mb is not None else settings.compile_memory_mb(),
        )
        outcome = _compile(solution, arch, toolchain, stage, key, limits, include_dirs)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if outcome.status is not None and not (use_cache and outcome.cacheable):
        shutil.rmtree(stage, ignore_errors=True)
        return outcome
    if not use_cache:
        return outcome  # the caller owns the temporary directory of so_path
    return _commit(stage, entry, outcome)


# ------------------------------------------------------------------------------------------ compile


def _unbuildable(solution: Solution) -> str | None:
    spec = solution.spec
    if spec.language not in (SupportedLanguage.CUDA, SupportedLanguage.CPP):
        return f"solution language {spec.language.value!r} is not built by nvcc (expected cuda or cpp)"
    if spec.binding not in (None, "tvm-ffi"):
        return f"binding {spec.binding!r} is not supported; export the entry point through TVM-FFI"
    if not spec.entry_file.endswith(COMPILED_SUFFIXES):
        return f"entry file {spec.entry_file!r} is not a compilable source ({', '.join(COMPILED_SUFFIXES)})"
    if not re.fullmatch(r"[A-Za-z_]\w*", spec.entry_symbol):
        return f"entry symbol {spec.entry_symbol!r} is not a C identifier"
    return None


def _failure(
    status: Status,
    message: str,
    *,
    screen_verdict: ScreenVerdict | None = None,
    info: CompileInfo | None = None,
    key: str | None = None,
    cacheable: bool = True,
) -> BuildOutcome:
    return BuildOutcome(
        status=status,
        message=message,
        so_path=None,
        info=info or CompileInfo(ok=False),
        screen_verdict=screen_verdict,
        key=key,
        cacheable=cacheable,
    )


def _stage_dir(key: str, use_cache: bool) -> Path:
    if not use_cache:
        return Path(tempfile.mkdtemp(prefix="ptxgym-build-"))
    tmp_root = builds_dir() / "tmp"
    tmp_root.mkdir(exist_ok=True)
    stage = tmp_root / f"{key[:16]}-{uuid.uuid4().hex[:12]}"
    stage.mkdir()
    return stage


def _write_sources(solution: Solution, stage: Path) -> list[str]:
    """Write every source file; return the relative paths nvcc compiles (entry file first)."""
    for src in solution.sources:
        path = stage / PurePosixPath(src.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src.content, encoding="utf-8", errors="replace")
    entry = solution.spec.entry_file
    others = [s.path for s in solution.sources if s.path != entry and s.path.endswith(COMPILED_SUFFIXES)]
    return [entry, *sorted(others)]


def _compile(
    solution: Solution,
    arch: ArchSpec,
    toolchain: Toolchain,
    stage: Path,
    key: str,
    limits: tuple[float, int],
    include_dirs: Sequence[Path],
) -> BuildOutcome:
    timeout_s, memory_mb = limits
    inputs = _write_sources(solution, stage)
    argv = [str(toolchain.nvcc), *nvcc_flags(arch, toolchain, include_dirs), "-o", SO_NAME, *inputs]
    start = time.perf_counter()
    returncode, timed_out, raw_log = _run_limited(argv, stage, toolchain, timeout_s, memory_mb)
    log = _clean_log(raw_log, stage)
    base = dict(
        command=_shorten_argv(argv, toolchain),
        log=truncate(log, LOG_CHARS),
        nvcc_version=toolchain.nvcc_version,
    )
    so_path = stage / SO_NAME
    if timed_out:
        info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, **base)
        message = (
            f"nvcc did not finish within the {timeout_s:g} s limit and was killed; the kernel takes "
            "too long to compile (huge unrolled loops, deep template recursion or macro expansion?)"
        )
        return _failure(Status.COMPILE_TIMEOUT, message, info=info, key=key, cacheable=False)
    if returncode != 0 or not so_path.is_file():
        info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, **base)
        message, deterministic = _error_message(log, returncode, memory_mb)
        return _failure(Status.COMPILE_ERROR, message, info=info, key=key, cacheable=deterministic)
    return _inspect(solution, arch, toolchain, so_path, log, base, start, key)


def _inspect(
    solution: Solution,
    arch: ArchSpec,
    toolchain: Toolchain,
    so_path: Path,
    log: str,
    base: dict,
    start: float,
    key: str,
) -> BuildOutcome:
    """Export check, artifact policy and ptxas report of a freshly built object."""
    dynamic = read_dynamic(so_path)
    symbol = solution.spec.entry_symbol
    resources = parse_ptxas_report(log)
    fields = dict(
        base,
        ok=True,
        resources=resources,
        imports=dynamic.imports,
        needed=dynamic.needed,
        artifact_sha256=_sha256(so_path),
    )
    if f"__tvm_ffi_{symbol}" not in dynamic.exports:
        info = CompileInfo(wall_s=time.perf_counter() - start, **fields)
        message = (
            f"the shared object does not export the entry point `{symbol}`: add "
            f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, <host function>) to {solution.spec.entry_file}"
        )
        so_path.unlink()
        return _failure(Status.COMPILE_ERROR, message, info=info, key=key)
    verdict, _, _ = check_artifact(
        so_path, driver_names=libcuda_stub_symbols(toolchain), loader=lambda _p: dynamic
    )
    info = CompileInfo(wall_s=time.perf_counter() - start, **fields)
    if not verdict.ok:
        so_path.unlink()
        return _failure(Status.STATIC_REJECT, verdict.message, screen_verdict=verdict, info=info, key=key)
    count = f"{len(resources)} kernel{'s' if len(resources) != 1 else ''}"
    message = f"built {SO_NAME} for {arch.name} ({count}) in {info.wall_s:.1f} s"
    return BuildOutcome(
        status=None, message=message, so_path=so_path, info=info, warnings=ptxas_warnings(log), key=key
    )


def _limits(timeout_s: float, memory_mb: int) -> str:
    mem = memory_mb * 1024 * 1024 if memory_mb > 0 else -1
    cpu = int(timeout_s) + 30
    nproc = -1 if os.geteuid() == 0 else _user_tasks() + 512
    return ",".join(str(v) for v in (mem, FSIZE_LIMIT_BYTES, 0, cpu, nproc))


def _user_tasks() -> int:
    """Threads owned by this user (RLIMIT_NPROC counts them all), read from /proc."""
    uid, total = os.getuid(), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                total += int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[17])
        except (OSError, IndexError, ValueError):
            continue
    return total


def _run_limited(
    argv: list[str], cwd: Path, toolchain: Toolchain, timeout_s: float, memory_mb: int
) -> tuple[int, bool, str]:
    """(returncode, timed_out, output) of argv under limits, in its own process group."""
    launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, _limits(timeout_s, memory_mb)]
    log_path = cwd / ".nvcc.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*launcher, *argv],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=toolchain.subprocess_env(cwd),
            process_group=0,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if timed_out or proc.poll() is None:
                _kill_group(proc)
    text = _read_capped(log_path)
    log_path.unlink(missing_ok=True)
    return proc.returncode, timed_out, text


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGKILL nvcc's whole process group and wait (bounded) until no member is still running."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + grace_s
    while _group_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # cicc/cudafe++ run beside nvcc and take a moment to die


def _group_running(pgid: int) -> bool:
    """Whether a live (non-zombie) process of the group remains, read from /proc."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _read_capped(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as f:
        if size <= LOG_HEAD_BYTES + LOG_TAIL_BYTES:
            data = f.read()
        else:
            head = f.read(LOG_HEAD_BYTES)
            f.seek(size - LOG_TAIL_BYTES)
            cut = f"\n[... {size - LOG_HEAD_BYTES - LOG_TAIL_BYTES} bytes cut ...]\n".encode()
            data = head + cut + f.read()
    return data.decode("utf-8", errors="replace")


def _clean_log(log: str, stage: Path) -> str:
    """Scratch paths and nvcc temp-file prefixes out, so messages read ``kernel.cu(12): error``."""
    for prefix in (f"{stage}/", str(stage)):
        log = log.replace(prefix, "")
    return _TMPXFT.sub("", log)


def _error_message(log: str, returncode: int, memory_mb: int) -> tuple[str, bool]:
    """(message, deterministic): the first errors of the nvcc output, or why nvcc was killed."""
    excerpt = _excerpt(log)
    oom = _OOM.search(log) is not None
    if returncode < 0 or oom:
        cause = "ran out of memory" if oom else f"was killed by {signal.Signals(-returncode).name}"
        limits = f"{memory_mb} MiB address space, {FSIZE_LIMIT_BYTES >> 20} MiB per file"
        message = f"nvcc {cause} (limits: {limits}); the kernel is too large to compile.\n{excerpt}"
        return message.strip(), False
    if not excerpt:
        excerpt = truncate(log.strip(), MESSAGE_CHARS) or "(no output)"
    return f"nvcc failed (exit {returncode}):\n{excerpt}", True


def _excerpt(log: str) -> str:
    lines = [ln for ln in log.splitlines() if not ln.startswith("ptxas info")]
    picked: list[str] = []
    errors = 0
    for i, line in enumerate(lines):
        if not _ERROR_LINE.search(line):
            continue
        errors += 1
        if errors <= 6:
            picked.append(line.rstrip())
            for follow in lines[i + 1 : i + 3]:  # EDG prints the source line and a caret under errors
                if follow.startswith("  ") and not _ERROR_LINE.search(follow):
                    picked.append(follow.rstrip())
    text = "\n".join(picked)
    if errors > 6:
        text += f"\n({errors} error lines in total; the compile log has more)"
    return text[:MESSAGE_CHARS]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _shorten_argv(argv: list[str], toolchain: Toolchain) -> list[str]:
    names = {
        str(toolchain.nvcc): "nvcc",
        str(toolchain.tvm_ffi_include): "$TVM_FFI/include",
        str(toolchain.tvm_ffi_lib_dir): "$TVM_FFI/lib",
        str(toolchain.libcuda_dir): "$LIBCUDA",
        str(toolchain.link_dir): "$PTXGYM_LINK",
        str(toolchain.cuda_home): "$CUDA_HOME",
    }
    out = []
    for arg in argv:
        for path, name in names.items():
            arg = arg.replace(path, name)
        out.append(arg)
    return out


# --------------------------------------------------------------------------------------------- cache


def _record(outcome: BuildOutcome) -> dict:
    """The JSON cache record of an outcome."""
    return {
        "build_version": BUILD_VERSION,
        "status": outcome.status.value if outcome.status else None,
        "message": outcome.message,
        "screen": None if outcome.screen_verdict is None else dataclasses.asdict(outcome.screen_verdict),
        "warnings": outcome.warnings,
        "compile": outcome.info.model_dump(mode="json"),
    }


def _commit(stage: Path, entry: Path, outcome: BuildOutcome) -> BuildOutcome:
    """Move the staged build into the cache atomically; a concurrent winner's entry is used instead."""
    record = _record(outcome)
    (stage / "meta.json").write_text(json.dumps(record, indent=1))
    entry.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(stage, entry)
    except OSError:
        shutil.rmtree(stage, ignore_errors=True)
        winner = _load(entry, outcome.key or "")
        if winner is not None:
            return winner
        return outcome  # the entry is unreadable (being repaired); our result is still valid
    so_path = entry / SO_NAME if outcome.so_path is not None else None
    return BuildOutcome(
        status=outcome.status,
        message=outcome.message,
        so_path=so_path,
        info=outcome.info,
        screen_verdict=outcome.screen_verdict,
        warnings=outcome.warnings,
        key=outcome.key,
    )


def _load(entry: Path, key: str) -> BuildOutcome | None:
    """The cached outcome under ``entry``, or None (absent, stale or damaged entries are evicted)."""
    meta = entry / "meta.json"
    if not meta.is_file():
        return None
    try:
        record = json.loads(meta.read_text())
        status = Status(record["status"]) if record["status"] else None
        info = CompileInfo.model_validate(record["compile"])
        so_path = entry / SO_NAME
        if status is None and (not so_path.is_file() or _sha256(so_path) != info.artifact_sha256):
            raise ValueError("artifact missing or changed")
    except (OSError, ValueError, KeyError, TypeError):
        _evict(entry)
        return None
    screen_verdict = ScreenVerdict(**record["screen"]) if record.get("screen") else None
    info = info.model_copy(update={"cache_hit": True, "wall_s": 0.0})
    message = record["message"] if status else f"{record['message']} (cached)"
    return BuildOutcome(
        status=status,
        message=message,
        so_path=so_path if status is None else None,
        info=info,
        screen_verdict=screen_verdict,
        warnings=record.get("warnings", []),
        key=key,
    )


def _evict(entry: Path) -> None:
    trash = entry.with_name(f"{entry.name}.evict-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)
