"""Compile ``ptxgym-runner`` from ``runner.cc`` into the cache, keyed by a hash of what goes into it.

The host C++ compiler (``g++``, else ``c++``, from PATH) builds
the runner against tvm-ffi's headers and ``libtvm_ffi.so`` (found with ``tvm_ffi.libinfo``, rpath set so
the runner needs no ``LD_LIBRARY_PATH``). When the CUDA toolkit's ``cuda.h`` is found (the same
discovery as the candidate build, ``ptxgym.cpu.toolchain``) the GPU path is compiled in
(``-DPTXGYM_RUNNER_CUDA``); the runner still never links ``libcuda``: it opens the driver at run time,
and only for a GPU blob. When ``cupti.h`` (the toolkit's include directory or ``extras/CUPTI/include``),
a ``libcupti.so*`` beside the toolkit's libraries and ``cupti_path.h`` are all found, the CUPTI path is
compiled in too (``-DPTXGYM_RUNNER_CUPTI``, linked to that libcupti file with an rpath to its
directory); without them the runner answers ``cupti: false`` and ``count_error`` with the reason.
The product lands in ``<cache>/runner/<key>/ptxgym-runner``, written to a
temporary name first and renamed, so concurrent builds of one key are safe.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ptxgym.records import settings
from ptxgym.records.errors import ToolchainNotFoundError

HERE = Path(__file__).resolve().parent
SOURCES = (
    "runner.cc",
    "json.h",
    "args.h",
    "host_blob.h",
    "report.h",
    "confine.h",
    "cuda_path.h",
    "cupti_api.h",
    "cupti_path.h",
    "cupti_logic.h",
    "cupti_range.h",
    "hw_logic.h",
    "cubin_elf.h",
    "sha256.h",
    "utf8.h",
)
"""Every file the runner is compiled from (all that exist count in the cache key)."""
BUILD_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class RunnerBuild:
    """How the runner is compiled on this host."""

    compiler: str
    """The C++ compiler executable."""
    flags: tuple[str, ...]
    """Every argument but the output path."""
    cuda: bool
    """Whether the GPU path is compiled in (``cuda.h`` found)."""
    cupti_lib: Path | None = None
    """The libcupti file the CUPTI path links (None: no CUPTI path, see ``cupti_missing``)."""
    cupti_missing: str = ""
    """Why the CUPTI path is not compiled in ('' when it is)."""


def _compiler() -> str:
    for name in ("g++", "c++"):
        found = shutil.which(name)
        if found:
            return found
    raise ToolchainNotFoundError(
        "no C++ compiler on PATH (looked for g++ and c++): the native runner is built with the host "
        "compiler; install g++ (e.g. apt-get install g++) or put one on PATH"
    )


def _cuda_include() -> Path | None:
    """The CUDA include directory holding ``cuda.h``, or None (no toolkit: a CPU-only runner)."""
    try:
        from ptxgym.cpu.toolchain import find_toolchain

        dirs = find_toolchain().include_dirs
    except Exception:  # no toolkit at all: the runner is still useful on the CPU
        return None
    return next((d for d in dirs if (d / "cuda.h").is_file()), None)


def _cupti(cuda: Path | None) -> tuple[Path | None, Path | None, str]:
    """(include dir with cupti.h, the libcupti file, '') or (None, None, why not)."""
    if cuda is None:
        return None, None, "no CUDA toolkit (cuda.h) found"
    if not (HERE / "cupti_path.h").is_file():
        return None, None, "cupti_path.h (the runner's CUPTI code) is not in this tree"
    root = cuda.parent if cuda.name == "include" else cuda.parent.parent
    heads = [d for d in (cuda, root / "extras" / "CUPTI" / "include") if (d / "cupti.h").is_file()]
    if not heads:
        return None, None, f"no cupti.h beside {cuda}"
    lib_dirs = [root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"]
    lib_dirs += [root / "extras" / "CUPTI" / "lib64"]
    try:
        from ptxgym.cpu.toolchain import find_toolchain

        lib_dirs = [*find_toolchain().lib_dirs, *lib_dirs]
    except Exception:  # noqa: BLE001 - the fixed places above still count
        pass
    for d in lib_dirs:
        files = sorted(d.glob("libcupti.so*"), key=lambda p: (len(p.name), p.name)) if d.is_dir() else []
        if files:
            return heads[0], files[0], ""
    return None, None, f"no libcupti.so* in {', '.join(map(str, lib_dirs))}"


def build_host_library(source: str, out: Path, name: str = "cand") -> Path:
    """A TVM-FFI C++ ``source`` built with the host compiler into ``out/<name>.so`` (the runner's CPU path).

    The candidates of the runner's CPU tests and benches (``--host-blobs``: no GPU); raises
    ``subprocess.CalledProcessError`` with the compiler's output when the source does not build.
    """
    import tvm_ffi.libinfo as info

    (out / f"{name}.cc").write_text(source)
    lib_dir = Path(info.find_libtvm_ffi()).parent
    cmd = [_compiler(), "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{info.find_include_path()}"]
    cmd += [f"-I{info.find_dlpack_include_path()}", str(out / f"{name}.cc"), "-o", str(out / f"{name}.so")]
    cmd += [f"-L{lib_dir}", "-ltvm_ffi", f"-Wl,-rpath,{lib_dir}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out / f"{name}.so"


def plan() -> RunnerBuild:
    """The compiler and flags for this host."""
    import tvm_ffi.libinfo as info

    include = Path(info.find_include_path())
    dlpack = Path(info.find_dlpack_include_path())
    lib_dir = Path(info.find_libtvm_ffi()).parent
    cuda = _cuda_include()
    cupti_inc, cupti_lib, cupti_missing = _cupti(cuda)
    cupti = (
        [f"-I{cupti_inc}", "-DPTXGYM_RUNNER_CUPTI", str(cupti_lib), f"-Wl,-rpath,{cupti_lib.parent}"]
        if cupti_inc and cupti_lib
        else []
    )
    flags = [
        "-std=c++17",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{include}",
        f"-I{dlpack}",
        *([f"-I{cuda}", "-DPTXGYM_RUNNER_CUDA"] if cuda else []),
        str(HERE / "runner.cc"),
        f"-L{lib_dir}",
        "-ltvm_ffi",
        f"-Wl,-rpath,{lib_dir}",
        *cupti,
        "-ldl",
    ]
    return RunnerBuild(
        compiler=_compiler(),
        flags=tuple(flags),
        cuda=cuda is not None,
        cupti_lib=cupti_lib,
        cupti_missing=cupti_missing,
    )


def key(build: RunnerBuild) -> str:
    """Hash of the sources, the flags and the compiler's version."""
    return _key(SOURCES, build.compiler, build.flags)


def _key(sources: Sequence[str], compiler: str, flags: Sequence[str]) -> str:
    """Hash of ``sources`` (those of this folder that exist), ``compiler``'s version and ``flags``."""
    digest = hashlib.sha256()
    for name in (n for n in sources if (HERE / n).is_file()):
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    digest.update("\0".join([compiler, version.stdout, *flags]).encode())
    return digest.hexdigest()[:20]


def build_runner(cache: Path | None = None) -> Path:
    """The path of a built ``ptxgym-runner`` (compiled on first use, then taken from the cache)."""
    build = plan()
    root = (cache or settings.cache_dir()) / "runner" / key(build)
    return _compiled(root / "ptxgym-runner", build.compiler, list(build.flags), "the native runner")


BROADCAST_SOURCES = ("broadcast.cc", "confine.h", "json.h")
"""Every file the thread broadcast library is compiled from."""


def build_broadcast(cache: Path | None = None) -> Path:
    """The path of ``libptxgym-broadcast.so``: ``confine.h``'s thread broadcast for the Python worker.

    Compiled on first use with the host C++ compiler (no tvm-ffi, no CUDA), then taken from the cache.
    """
    compiler = _compiler()
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-pthread"]
    flags.append(str(HERE / "broadcast.cc"))
    root = (
        (cache or settings.cache_dir()) / "runner" / f"broadcast-{_key(BROADCAST_SOURCES, compiler, flags)}"
    )
    return _compiled(root / "libptxgym-broadcast.so", compiler, flags, "the thread broadcast library")


EXCHANGE_SOURCES = ("exchange.cc",)
"""Every file the trusted side's timed exchange library is compiled from."""


def build_exchange(cache: Path | None = None) -> Path:
    """The path of ``libptxgym-exchange.so``: the trusted side's timed call (``trusted/exchange.py``).

    Compiled on first use with the host C++ compiler (no CUDA headers: it looks the driver up at run
    time), then taken from the cache.
    """
    compiler = _compiler()
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
    flags += [str(HERE / "exchange.cc"), "-ldl"]
    root = (cache or settings.cache_dir()) / "runner" / f"exchange-{_key(EXCHANGE_SOURCES, compiler, flags)}"
    return _compiled(root / "libptxgym-exchange.so", compiler, flags, "the timed exchange library")


def _owned(st: os.stat_result) -> bool:
    """Whether ``st`` is a regular file of this user, writable by its owner alone."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _ours(path: Path) -> bool:
    """Whether ``path`` (not a link) passes ``_owned``."""
    return _owned(os.lstat(path))


def private_copy(product: Path) -> Path:
    """A copy of ``product`` in a new directory only this user can enter, for loading into this process.

    Opened without following a link and checked on the open file (``_owned``), then copied: a
    cache directory others can write (a shared ``PTXGYM_CACHE_DIR``) cannot swap the file between the
    check and the load (a reviewer's find). ``PermissionError`` when the file fails the check.
    """
    fd = os.open(product, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not _owned(os.fstat(fd)):
            raise PermissionError(f"{product} is not a regular file of this user writable by it alone")
        folder = Path(tempfile.mkdtemp(prefix="ptxgym-lib-"))
        copy = folder / product.name
        with os.fdopen(fd, "rb", closefd=False) as src, open(copy, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        os.close(fd)
    os.chmod(copy, 0o500)
    return copy


def _compiled(product: Path, compiler: str, flags: list[str], what: str) -> Path:
    """``product``, compiled with ``compiler flags -o`` unless it is there; concurrent builds are safe.

    One already there is taken only if this user owns it and no one else may write it (the exchange
    library is loaded into the evaluator itself: a file planted in a shared cache would run there).
    """
    if product.is_file() and os.access(product, os.X_OK) and _ours(product):
        return product
    product.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{product.name}-", dir=product.parent)
    os.close(fd)
    try:
        argv = [compiler, *flags, "-o", tmp]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise ToolchainNotFoundError(
                f"compiling {what} failed ({compiler}, exit {done.returncode}):\n{done.stderr[-4000:]}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, product)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return product
