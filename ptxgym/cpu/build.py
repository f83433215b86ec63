"""Build stage: nvcc a Solution into a TVM-FFI shared object, under limits, through a content cache.

``build_solution`` runs, in order:

1. the source policy (``screen.check_source``; on by default, since the compiler's own error
   messages would otherwise echo files a hostile ``#include`` reaches);
2. a cache lookup: ``<cache>/builds/<key[:2]>/<key>`` where the key hashes the solution content, the
   nvcc flags, the arch, the toolchain fingerprint, the policy rules and ``BUILD_VERSION``. Successes,
   deterministic compile errors and artifact verdicts are cached; timeouts and out-of-memory failures
   are not;
3. nvcc in a fresh scratch directory whose ``src/`` holds the solution files (none in nvcc's own working
   folder, which its steps search first), every source compiled as CUDA (``-x cu``), inside the build jail
   (``jail``: Landlock lets nvcc and its tools read only the toolkit, the host compiler, TVM-FFI and
   the allowed headers and write only the scratch directory; no sockets), in its own process group,
   with a wall-time limit (the whole group is killed on expiry -> COMPILE_TIMEOUT) and RLIMIT_AS /
   RLIMIT_FSIZE / RLIMIT_CPU / RLIMIT_CORE (and RLIMIT_NPROC for non-root users);
4. the log cut to the compiler's own diagnostics about the solution's files (``compile_log``), shown only
   after a failed build's assembly passed the backstop;
5. on success: the host-assembly backstop over nvcc's kept host translation, the host compiler's
   preprocessed input and its assembly (``host_asm``), the size caps, the entry-point export check, the
   artifact policy (imports and DT_NEEDED against the allowlists, host syscall scan) and the ptxas
   resource report;
6. an atomic rename of the scratch directory into the cache, so concurrent builds of one key are safe
   (the loser discards its copy and uses the winner's); the cache's disk use is bounded, least recently
   used entries going first (``cache_size``, ``PTXGYM_BUILD_CACHE_MB``).

Flags (DESIGN.md): ``-O3 -shared -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -std=c++17
-gencode=<arch> -cudart shared -lineinfo -Xptxas -v -I<tvm-ffi> -L<tvm-ffi> -ltvm_ffi -L<libcuda> -lcuda``,
plus ``-keep -keep-dir .ptxgym-keep -Xcompiler -save-temps=obj`` (the intermediates, for the backstop;
they change no machine code and are deleted after the build).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ptxgym.cpu import scan_helpers
from ptxgym.cpu.cache_size import Pruner, evict, touch
from ptxgym.cpu.compile_log import clean_log, error_message, shown_log
from ptxgym.cpu.host_asm import ALLOWED, host_asm_in_assembly, host_asm_in_translation
from ptxgym.cpu.jail import (
    FSIZE_LIMIT_BYTES,
    Confinement,
    build_jail,
    confinement,
    run_jailed,
    tool_paths,
)
from ptxgym.cpu.ptxas import parse_ptxas_report, ptxas_warnings
from ptxgym.cpu.screen import (
    ScreenVerdict,
    artifact_size_problem,
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

BUILD_VERSION = "ptxgym-build-v7"
"""Part of every cache key: bump when the build procedure or the cache record format changes (flags,
toolchain and policy rules enter the key by themselves)."""
MAX_KEPT_BYTES = 128 << 20
"""Largest host translation or assembly file the backstop reads (an honest kernel's: a few MiB)."""
SO_NAME = "kernel.so"
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")
COMPILED_STEM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A compiled source's name before its suffix: nvcc's intermediates are ``<stem>.cpp1.ii``,
``<stem>.cudafe1.cpp``, ``<stem>.ii``, ``<output>_dlink.s``...; a stem with a dot could pass for one
(``leak.cpp1.cu``'s host compiler input is ``leak.cpp1.ii``, which a reviewer got the backstop to skip as
nvcc's own)."""
KEEP_DIR = ".ptxgym-keep"
"""Where nvcc keeps its intermediates (``-keep-dir``) until the backstop has read them."""
SOURCE_DIR = "src"
"""Where the solution's files are written, below the build folder nvcc runs in: none of them may sit in
its working directory, which nvcc's own steps search first (the device link's ``-I.``, the host pass's
``-include cuda_runtime.h``): a candidate ``stddef.h`` there once replaced the toolkit's in the device
link, where no source rule or host translation sees it (a reviewer's find). Nor can a source then take a
name the build writes itself (``meta.json``, ``kernel.so``, the keep folder)."""
KEEP_FLAGS = ("-keep", "-keep-dir", KEEP_DIR, "-Xcompiler", "-save-temps=obj")
"""nvcc keeps its intermediates, and the host compiler its assembly (``*.s``), for the backstop; added to
``nvcc_flags`` by the build itself (the folder must exist first)."""
LOG_CHARS = 6000


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
    solution: Solution,
    arch: ArchSpec,
    toolchain: Toolchain,
    include_dirs: Sequence[Path] = (),
    confined: str = "landlock",
) -> str:
    """Content address of a build (trusted include directories count by their files' contents).

    ``confined`` is the kind of confinement (``jail.Confinement.kind``): an unconfined build never
    serves a confined one.
    """
    parts = [
        BUILD_VERSION,
        confined,
        policy_fingerprint(),
        solution.content_hash(),
        arch.name,
        toolchain.fingerprint,
        *nvcc_flags(arch, toolchain, include_dirs),
        *KEEP_FLAGS,
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
    when no compiler is usable, and ``jail.JailError`` when the build cannot be confined as
    ``PTXGYM_SANDBOX`` demands (set-up problems, not the candidate's). With ``use_cache=False`` the
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
    jailing = confinement()  # raises JailError in strict mode without Landlock
    key = build_key(solution, arch, toolchain, include_dirs, jailing.kind)
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
        outcome = _compile(solution, arch, toolchain, stage, key, limits, include_dirs, jailing)
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
    stems: dict[str, str] = {}
    for src in solution.sources:
        if src.path.endswith(COMPILED_SUFFIXES):
            stem = PurePosixPath(src.path).stem
            if not COMPILED_STEM.fullmatch(stem) or stem.endswith("_dlink"):
                return (
                    f"compiled source {src.path!r}: its name before the suffix must be letters, digits and _ "
                    "(no dots), not ending in _dlink: nvcc names its intermediate files after it"
                )
            if stem in stems:  # nvcc names its intermediates by the stem: one would overwrite another
                return f"sources {stems[stem]!r} and {src.path!r} share a stem ({stem!r}): rename one"
            stems[stem] = src.path
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
        path = stage / SOURCE_DIR / PurePosixPath(src.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src.content, encoding="utf-8", errors="replace")
    (stage / KEEP_DIR).mkdir()
    entry = solution.spec.entry_file
    others = [s.path for s in solution.sources if s.path != entry and s.path.endswith(COMPILED_SUFFIXES)]
    return [f"{SOURCE_DIR}/{p}" for p in (entry, *sorted(others))]


def _compile(
    solution: Solution,
    arch: ArchSpec,
    toolchain: Toolchain,
    stage: Path,
    key: str,
    limits: tuple[float, int],
    include_dirs: Sequence[Path],
    jailing: Confinement,
) -> BuildOutcome:
    timeout_s, memory_mb = limits
    inputs = _write_sources(solution, stage)
    flags = [*nvcc_flags(arch, toolchain, include_dirs), *KEEP_FLAGS]
    # every source as CUDA: a plain C++ file too goes through cudafe++, whose host translation the
    # backstop reads (g++ alone would leave none)
    argv = [str(toolchain.nvcc), *flags, "-o", SO_NAME, "-x", "cu", *inputs]
    start = time.perf_counter()
    jail = build_jail(toolchain, include_dirs, stage, limits, jailing)
    env = toolchain.subprocess_env(stage)
    try:
        returncode, timed_out, raw_log = run_jailed(argv, stage, env, timeout_s, jail)
        log = clean_log(raw_log, stage, KEEP_DIR, SOURCE_DIR)
        own = {s.path: s.content for s in solution.sources}
        # header folders, whose diagnostics the model may see: not a readable file (/etc/ld.so.cache) nor a
        # tool's own folder (the toolkit's bin/ holds nvcc.profile); the host compiler's are named by it
        # (its include/ sat inside a readable folder whose name has none: its path showed unmasked)
        tools = tool_paths(toolchain)
        headers = [p for p in tools.read if p.is_dir() and "include" in p.name] + list(tools.headers)
        public = [*toolchain.include_dirs, *headers, *include_dirs]
        shown = shown_log(log, own, public)
        base = dict(
            command=_shorten_argv(argv, toolchain),
            log=truncate(shown, LOG_CHARS),
            nvcc_version=toolchain.nvcc_version,
            confinement=jailing.detail,
        )
        if timed_out:
            info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, **base)
            message = (
                f"nvcc did not finish within the {timeout_s:g} s limit and was killed; the kernel takes "
                "too long to compile (huge unrolled loops, deep template recursion or macro expansion?)"
            )
            return _failure(Status.COMPILE_TIMEOUT, message, info=info, key=key, cacheable=False)
        so_path = stage / SO_NAME
        if returncode != 0 or not so_path.is_file():
            # a failed build's assembly is checked before its log is shown: assembler errors can quote a
            # file an .include pulled in (a reviewer's find)
            verdict = _host_asm_backstop(stage / KEEP_DIR, inputs, complete=False)
            if verdict is not None:
                info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, confinement=jailing.detail)
                return _backstop_refusal(verdict, info, key)
            info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, **base)
            limit_text = f"{memory_mb} MiB address space, {FSIZE_LIMIT_BYTES >> 20} MiB per file"
            message, deterministic = error_message(log, shown, returncode, limit_text)
            return _failure(Status.COMPILE_ERROR, message, info=info, key=key, cacheable=deterministic)
        verdict = _host_asm_backstop(stage / KEEP_DIR, inputs)
        if verdict is not None:
            so_path.unlink()
            info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, **base)
            return _backstop_refusal(verdict, info, key)
        return _inspect(solution, arch, toolchain, so_path, log, base, start, key)
    finally:
        shutil.rmtree(stage / KEEP_DIR, ignore_errors=True)


def _backstop_refusal(verdict: ScreenVerdict, info: CompileInfo, key: str) -> BuildOutcome:
    """The STATIC_REJECT of a backstop verdict.

    One whose scan ran out of time is not cached: a stalled host may have caused it
    (``scan_helpers.TIMEOUT_RULE``).
    """
    cacheable = verdict.rule != scan_helpers.TIMEOUT_RULE
    return _failure(
        Status.STATIC_REJECT, verdict.message, screen_verdict=verdict, info=info, key=key, cacheable=cacheable
    )


def _host_asm_backstop(keep: Path, inputs: Sequence[str], complete: bool = True) -> ScreenVerdict | None:
    """A STATIC_REJECT verdict if nvcc's host translation, or the host assembly, holds inline assembly.

    Both read what the compilers saw (``host_asm.host_asm_in_translation``, ``host_asm_in_assembly``), not
    the source: no spelling the source screen misreads gets past them. ``complete``: the build succeeded,
    so every kept file must be there; a failed one is checked on what it left.
    """
    stems = {PurePosixPath(p).stem for p in inputs}  # COMPILED_STEM: none can pass for nvcc's own files
    preprocessed = sorted({keep / f"{stem}.ii" for stem in stems} | set(keep.glob("*_dlink.ii")))
    kept = (
        sorted(keep.glob("*.cudafe1.cpp"))
        + [p for p in preprocessed if p.is_file()]
        + sorted(keep.glob("*.s"))
    )
    missing = [f"{stem}{suffix}" for stem in sorted(stems) for suffix in (".cudafe1.cpp", ".ii", ".s")]
    missing = [name for name in missing if not (keep / name).is_file()]
    if complete and (missing or not any(keep.glob("*_dlink.s"))):  # reading nothing would pass anything
        what = ", ".join(missing) or "the device link's assembly"
        return ScreenVerdict(False, "host-asm", f"host-asm: nvcc left no {what} to check")
    if any(p.stat().st_size > MAX_KEPT_BYTES for p in kept):
        message = f"host-asm: nvcc's host translation is over {MAX_KEPT_BYTES >> 20} MiB, too large to check"
        return ScreenVerdict(False, "host-asm", message)
    return scan_helpers.scan(kept, scan_kept)  # off the interpreter that times candidates


def scan_kept(kept: Sequence[Path]) -> ScreenVerdict | None:
    """The backstop's scan of nvcc's kept files (``_host_asm_backstop``): the first host asm, or None.

    ``.s`` files are host assembly (``host_asm_in_assembly``); ``.ii`` the host compiler's preprocessed
    input and the rest nvcc's host translation (``host_asm_in_translation``). Run by a helper process
    (``scan_helpers.py``) where there is one.
    """
    for path in kept:
        text = path.read_text(encoding="utf-8", errors="replace")  # the same text in a helper and here
        if path.suffix == ".s":
            at = host_asm_in_assembly(text)
            if at:
                message = f"host-asm: inline assembly reached the host assembler: `{at[1]}`; {ALLOWED}"
                return ScreenVerdict(False, "host-asm", message)
            continue
        found = host_asm_in_translation(text, preprocessed=path.suffix == ".ii")
        if found:
            file, line, text = found
            file = file.removeprefix(f"{SOURCE_DIR}/")
            snippet = " ".join(text.split())[:120]
            message = f"host-asm: inline assembly in host code at {file}:{line}: `{snippet}`; {ALLOWED}"
            return ScreenVerdict(False, "host-asm", message, file=file, line=line)
    return None


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
    too_large = artifact_size_problem(so_path)
    if too_large is not None:
        so_path.unlink()
        info = CompileInfo(ok=False, wall_s=time.perf_counter() - start, **base)
        return _failure(Status.STATIC_REJECT, too_large.message, screen_verdict=too_large, info=info, key=key)
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


_PRUNER = Pruner()
"""This process's trigger of the cache's size bound (``cache_size``)."""


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
    _PRUNER.added_entry(builds_dir(), entry, settings.build_cache_mb() << 20)
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
        evict(entry)
        return None
    touch(entry)  # recently used: the last to be pruned (cache_size)
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
