"""Toolchain discovery: nvcc, the CUDA headers and libraries, cuobjdump/nvdisasm and TVM-FFI.

One place decides which compiler builds candidates. Search order for nvcc:

1. ``PTXGYM_NVCC`` (an nvcc executable), then ``PTXGYM_CUDA_HOME`` (a toolkit root);
2. ``nvcc`` on ``PATH``, then ``$CUDA_HOME``/``$CUDA_PATH``, then ``/usr/local/cuda``;
3. the PyPI toolchain wheels (``nvidia-cuda-nvcc``, ``-runtime``, ``-crt``, ``-cccl``, ``nvidia-nvvm``),
   which lay a toolkit out under ``site-packages/nvidia/cu13``.

The toolkit root and its include/library directories are read from nvcc itself (``nvcc --dryrun``
prints the ``TOP``, ``INCLUDES`` and ``LIBRARIES`` of its ``nvcc.profile``), so wrapper scripts and
symlinked installs resolve correctly.

Two link-time gaps are filled in a small directory under the cache (``Toolchain.link_dir``):

* no ``libcuda.so`` stub (CPU build hosts have no driver, and the wheels ship no stub): a stub with
  soname ``libcuda.so.1`` that defines every driver-API name of ``cuda.h`` is generated with gcc, so
  ``-lcuda`` links and a candidate that calls the driver records ``DT_NEEDED libcuda.so.1``. (An
  *empty* stub is not enough: the linker's ``--as-needed`` default drops a library that resolves no
  symbol, and the driver calls would then be unresolved at load time.)
* no unversioned ``libcudart.so`` (the runtime wheel ships only ``libcudart.so.13``): a symlink, so
  ``-cudart shared`` links.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ptxgym.records import settings
from ptxgym.records.errors import ToolchainNotFoundError

SYSTEM_CUDA_HOME = Path("/usr/local/cuda")
"""The conventional toolkit location, searched after PATH and CUDA_HOME."""
_PROBE_TIMEOUT_S = 60.0
_WHEEL_SUBDIR = "cu13"
_DRIVER_NAME = re.compile(r"\bcu[A-Z][A-Za-z0-9_]*")
_INSTALL_HINT = (
    "Install a CUDA 13 toolkit (system nvcc), or the PyPI toolchain: "
    "pip install 'ptxgym[toolchain]' (nvidia-cuda-nvcc, nvidia-cuda-runtime, nvidia-cuda-crt, "
    "nvidia-cuda-cccl, nvidia-nvvm), or point PTXGYM_NVCC / PTXGYM_CUDA_HOME at one."
)


@dataclass(frozen=True)
class Toolchain:
    """Everything the build and SASS stages need, resolved to absolute paths."""

    nvcc: Path
    """The nvcc executable (may be a wrapper script)."""
    cuda_home: Path
    """Toolkit root (nvcc's ``TOP``)."""
    nvcc_version: str
    """Release, e.g. ``13.0``."""
    nvcc_build: str
    """Full version, e.g. ``V13.0.88``."""
    source: str
    """How nvcc was found: PTXGYM_NVCC, PTXGYM_CUDA_HOME, PATH, CUDA_HOME, /usr/local/cuda or wheels."""
    include_dirs: tuple[Path, ...]
    """CUDA include directories nvcc searches (from its profile)."""
    lib_dirs: tuple[Path, ...]
    """CUDA library directories nvcc links against (from its profile)."""
    host_compiler: str
    """``gcc --version`` first line (the host compiler nvcc drives)."""
    tvm_ffi_include: Path
    tvm_ffi_lib_dir: Path
    tvm_ffi_version: str
    libcuda_dir: Path
    """Directory holding ``libcuda.so`` for ``-lcuda``: the toolkit's stubs or a generated stub."""
    link_dir: Path
    """Generated directory with whatever the toolkit lacks for linking (stub, cudart symlink)."""
    cuobjdump: Path | None = None
    cuobjdump_version: str | None = None
    nvdisasm_dir: Path | None = None
    """Directory of nvdisasm, which cuobjdump runs for ``--dump-sass``."""
    notes: tuple[str, ...] = field(default=())
    """What discovery had to work around (shown by ``describe``)."""

    @property
    def fingerprint(self) -> str:
        """Hash of everything about the toolchain that can change a build product."""
        parts = (
            self.nvcc_build,
            str(self.cuda_home.resolve()),
            self.host_compiler,
            str(self.tvm_ffi_include),
            self.tvm_ffi_version,
            str(self.libcuda_dir),
        )
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]

    def link_flags(self) -> list[str]:
        """``-L``/``-l`` flags for TVM-FFI, the driver stub and the toolkit libraries.

        cudart itself comes from ``-cudart shared``; the toolkit's library directories are passed
        explicitly because not every nvcc profile names the directory the files are in.
        """
        dirs = [self.tvm_ffi_lib_dir, self.libcuda_dir]
        if self.link_dir not in dirs and any(self.link_dir.glob("*.so")):
            dirs.append(self.link_dir)
        dirs += [d for d in self.lib_dirs if d not in dirs]
        return [*(f"-L{d}" for d in dirs), "-ltvm_ffi", "-lcuda"]

    def subprocess_env(self, tmpdir: Path | None = None) -> dict[str, str]:
        """A clean environment for nvcc/cuobjdump: no NVCC_*_FLAGS, C locale, tools on PATH."""
        path_dirs = [str(self.nvcc.parent), str(self.cuda_home / "bin")]
        if self.nvdisasm_dir is not None:
            path_dirs.append(str(self.nvdisasm_dir))
        path_dirs.append(os.environ.get("PATH", "/usr/bin:/bin"))
        env = {"PATH": os.pathsep.join(path_dirs), "LC_ALL": "C", "LANG": "C"}
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
            env["HOME"] = str(tmpdir)
        elif "HOME" in os.environ:
            env["HOME"] = os.environ["HOME"]
        return env

    def describe(self) -> str:
        """A few lines for logs and the CLI."""
        lines = [
            f"nvcc       {self.nvcc} ({self.nvcc_build}, found via {self.source})",
            f"cuda home  {self.cuda_home}",
            f"host cc    {self.host_compiler}",
            f"tvm-ffi    {self.tvm_ffi_version} ({self.tvm_ffi_include})",
            f"libcuda    {self.libcuda_dir}",
            f"cuobjdump  {self.cuobjdump or 'not found'}"
            + (f" ({self.cuobjdump_version})" if self.cuobjdump_version else ""),
        ]
        return "\n".join(lines + [f"note       {n}" for n in self.notes])


def find_toolchain() -> Toolchain:
    """Discover the toolchain once per process; raise ToolchainNotFoundError saying how to fix it.

    Call ``find_toolchain.cache_clear()`` after changing ``PTXGYM_NVCC``/``PTXGYM_CUDA_HOME``. A
    remembered toolchain whose generated link files were deleted (a cleared cache) is rediscovered.
    """
    toolchain = _discover()
    if not (toolchain.libcuda_dir / "libcuda.so").exists() or not toolchain.link_dir.is_dir():
        _discover.cache_clear()
        toolchain = _discover()
    return toolchain


@functools.cache
def _discover() -> Toolchain:
    nvcc, source = _locate_nvcc()
    profile = _nvcc_profile(nvcc)
    cuda_home = Path(settings.cuda_home_override() or profile["TOP"]).resolve()
    include_dirs = tuple(_existing(profile["include_dirs"])) or (cuda_home / "include",)
    # Some wheel releases (13.0) point their profile at lib64/ while the files sit in lib/.
    lib_dirs = tuple(_existing([*profile["lib_dirs"], str(cuda_home / "lib64"), str(cuda_home / "lib")]))
    _check_headers(include_dirs)
    version, build = _nvcc_version(nvcc)
    host = _host_compiler()
    tvm_inc, tvm_lib, tvm_version = _tvm_ffi()
    notes: list[str] = []
    link_dir = _link_dir(build, cuda_home)
    libcuda_dir = _libcuda_dir(lib_dirs, include_dirs, link_dir, notes)
    _ensure_cudart_link(lib_dirs, link_dir, notes)
    cuobjdump, nvdisasm_dir = _locate_cuobjdump(cuda_home)
    return Toolchain(
        nvcc=nvcc,
        cuda_home=cuda_home,
        nvcc_version=version,
        nvcc_build=build,
        source=source,
        include_dirs=include_dirs,
        lib_dirs=lib_dirs,
        host_compiler=host,
        tvm_ffi_include=tvm_inc,
        tvm_ffi_lib_dir=tvm_lib,
        tvm_ffi_version=tvm_version,
        libcuda_dir=libcuda_dir,
        link_dir=link_dir,
        cuobjdump=cuobjdump,
        cuobjdump_version=_tool_release(cuobjdump) if cuobjdump else None,
        nvdisasm_dir=nvdisasm_dir,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------------------------ locating


def wheel_roots() -> list[Path]:
    """``site-packages/nvidia/cu13`` folders of installed PyPI CUDA wheels (may be empty)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    roots = [Path(p) / _WHEEL_SUBDIR for p in spec.submodule_search_locations]
    return [r for r in roots if r.is_dir()]


def _is_exe(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _locate_nvcc() -> tuple[Path, str]:
    """First nvcc of the search order, with the name of the rule that found it."""
    override = settings.nvcc_override()
    if override:
        path = Path(override).expanduser()
        if not _is_exe(path):
            raise ToolchainNotFoundError(
                f"PTXGYM_NVCC={override!r} is not an executable file. "
                "Point it at nvcc or unset it to let ptxgym search."
            )
        return path.absolute(), "PTXGYM_NVCC"
    home = settings.cuda_home_override()
    if home:
        path = Path(home).expanduser() / "bin" / "nvcc"
        if not _is_exe(path):
            raise ToolchainNotFoundError(
                f"PTXGYM_CUDA_HOME={home!r} has no executable bin/nvcc. "
                "Point it at a CUDA toolkit root or unset it."
            )
        return path.absolute(), "PTXGYM_CUDA_HOME"
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path).absolute(), "PATH"
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and _is_exe(Path(root) / "bin" / "nvcc"):
            return (Path(root) / "bin" / "nvcc").absolute(), var
    if _is_exe(SYSTEM_CUDA_HOME / "bin" / "nvcc"):
        return SYSTEM_CUDA_HOME / "bin" / "nvcc", str(SYSTEM_CUDA_HOME)
    for wheel_root in wheel_roots():
        if _is_exe(wheel_root / "bin" / "nvcc"):
            return wheel_root / "bin" / "nvcc", "wheels"
    raise ToolchainNotFoundError(
        f"no nvcc found (PTXGYM_NVCC, PATH, CUDA_HOME, /usr/local/cuda, "
        f"site-packages/nvidia/{_WHEEL_SUBDIR}). {_INSTALL_HINT}"
    )


def _run(argv: list[str], what: str) -> str:
    """Run a probe command; its stdout+stderr, or ToolchainNotFoundError."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, env={**os.environ, "LC_ALL": "C"}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainNotFoundError(f"{what} failed to run ({shlex.join(argv)}): {exc}") from exc
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise ToolchainNotFoundError(f"{what} failed (exit {proc.returncode}): {out.strip()[-800:]}")
    return out


def _nvcc_profile(nvcc: Path) -> dict:
    """TOP, include and library directories as nvcc resolves them (``nvcc --dryrun``)."""
    with tempfile.TemporaryDirectory(prefix="ptxgym-probe-") as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("")
        out = _run([str(nvcc), "--dryrun", "-c", str(src), "-o", str(Path(tmp) / "probe.o")], "nvcc --dryrun")
    values: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"#\$ (TOP|INCLUDES|SYSTEM_INCLUDES|LIBRARIES)=(.*)", line)
        if m:
            values[m.group(1)] = m.group(2)
    if "TOP" not in values:
        raise ToolchainNotFoundError(
            f"could not read the toolkit root from `{nvcc} --dryrun`. "
            f"Set PTXGYM_CUDA_HOME. Output: {out[-500:]}"
        )
    includes = shlex.split(values.get("INCLUDES", "")) + shlex.split(values.get("SYSTEM_INCLUDES", ""))
    include_dirs = [a[2:] for a in includes if a.startswith("-I")]
    include_dirs += [b for a, b in zip(includes, includes[1:], strict=False) if a == "-isystem"]
    lib_dirs = [a[2:] for a in shlex.split(values.get("LIBRARIES", "")) if a.startswith("-L")]
    return {"TOP": values["TOP"], "include_dirs": include_dirs, "lib_dirs": lib_dirs}


def _existing(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p).resolve()
        if path.is_dir() and path not in out:
            out.append(path)
    return out


def _find_file(dirs: tuple[Path, ...] | list[Path], rel: str) -> Path | None:
    for d in dirs:
        if (d / rel).exists():
            return d / rel
    return None


def _check_headers(include_dirs: tuple[Path, ...]) -> None:
    """The headers every candidate needs, with the wheel that provides each."""
    required = {
        "cuda_runtime.h": "nvidia-cuda-runtime",
        "cuda.h": "nvidia-cuda-runtime",
        "crt/host_config.h": "nvidia-cuda-crt",
        "nv/target": "nvidia-cuda-cccl",
    }
    missing = [f"{h} (pip install {pkg})" for h, pkg in required.items() if not _find_file(include_dirs, h)]
    if missing:
        dirs = ", ".join(map(str, include_dirs))
        raise ToolchainNotFoundError(
            f"the CUDA toolkit is incomplete: missing {', '.join(missing)} in {dirs}. {_INSTALL_HINT}"
        )


def _nvcc_version(nvcc: Path) -> tuple[str, str]:
    out = _run([str(nvcc), "--version"], "nvcc --version")
    m = re.search(r"release (\d+\.\d+), (V[\d.]+)", out)
    if not m:
        raise ToolchainNotFoundError(f"unrecognised `nvcc --version` output: {out[-300:]}")
    return m.group(1), m.group(2)


def _tool_release(tool: Path) -> str | None:
    """``V13.5.37``-style version of a CUDA tool, or None if it does not say."""
    try:
        out = _run([str(tool), "--version"], f"{tool.name} --version")
    except ToolchainNotFoundError:
        return None
    m = re.search(r"release [\d.]+, (V[\d.]+)", out)
    return m.group(1) if m else None


def _host_compiler() -> str:
    """nvcc drives gcc/g++ from PATH; both must exist."""
    for exe in ("gcc", "g++"):
        if shutil.which(exe) is None:
            raise ToolchainNotFoundError(
                f"nvcc needs a host C++ compiler but `{exe}` is not on PATH. "
                "Install one (e.g. apt-get install g++)."
            )
    return _run(["gcc", "--version"], "gcc --version").splitlines()[0].strip()


def _tvm_ffi() -> tuple[Path, Path, str]:
    """Include dir, library dir and version of the installed apache-tvm-ffi (without importing it)."""
    spec = importlib.util.find_spec("tvm_ffi")
    hint = "pip install apache-tvm-ffi (the TVM-FFI ABI every candidate exports)"
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainNotFoundError(f"the tvm_ffi package is not installed: {hint}")
    root = Path(list(spec.submodule_search_locations)[0])
    include, lib_dir = root / "include", root / "lib"
    if not (include / "tvm" / "ffi" / "tvm_ffi.h").is_file() or not (lib_dir / "libtvm_ffi.so").is_file():
        raise ToolchainNotFoundError(
            f"tvm_ffi at {root} lacks include/tvm/ffi/tvm_ffi.h or lib/libtvm_ffi.so: reinstall it ({hint})"
        )
    try:
        version = importlib.metadata.version("apache-tvm-ffi")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return include, lib_dir, version


# ---------------------------------------------------------------------------------- link-time gaps


def _link_dir(nvcc_build: str, cuda_home: Path) -> Path:
    key = hashlib.sha256(f"{nvcc_build}\0{cuda_home}".encode()).hexdigest()[:16]
    path = settings.cache_dir() / "toolchain" / key / "lib"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _libcuda_dir(
    lib_dirs: tuple[Path, ...], include_dirs: tuple[Path, ...], link_dir: Path, notes: list[str]
) -> Path:
    """The toolkit's ``libcuda.so`` stub directory, or ``link_dir`` with a generated stub."""
    for d in lib_dirs:
        if (d / "libcuda.so").exists():
            return d
    cuda_h = _find_file(include_dirs, "cuda.h")
    assert cuda_h is not None  # _check_headers ran first
    names = sorted(set(_DRIVER_NAME.findall(cuda_h.read_text(errors="replace"))))
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    stub, marker = link_dir / "libcuda.so", link_dir / f"libcuda.{digest}.ok"
    if not (stub.exists() and marker.exists()):
        _build_driver_stub(names, stub)
        marker.touch()
    notes.append(f"no libcuda.so stub in the toolkit: generated {stub} ({len(names)} driver symbols)")
    return link_dir


def _build_driver_stub(names: list[str], target: Path) -> None:
    """Compile a shared object with soname libcuda.so.1 defining every name; atomic replace."""
    with tempfile.TemporaryDirectory(prefix="ptxgym-stub-", dir=target.parent) as tmp:
        src = Path(tmp) / "libcuda_stub.c"
        src.write_text("".join(f"void {n}(void) {{}}\n" for n in names))
        out = Path(tmp) / "libcuda.so"
        _run(
            ["gcc", "-shared", "-fPIC", "-nostdlib", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)],
            "building the libcuda.so link stub",
        )
        os.replace(out, target)


def libcuda_stub_symbols(toolchain: Toolchain) -> frozenset[str]:
    """Driver-API names declared by the toolkit's ``cuda.h`` (the allowlist of ``cu*`` imports)."""
    return _driver_names(tuple(toolchain.include_dirs))


@functools.cache
def _driver_names(include_dirs: tuple[Path, ...]) -> frozenset[str]:
    cuda_h = _find_file(include_dirs, "cuda.h")
    if cuda_h is None:
        return frozenset()
    return frozenset(_DRIVER_NAME.findall(cuda_h.read_text(errors="replace")))


def _ensure_cudart_link(lib_dirs: tuple[Path, ...], link_dir: Path, notes: list[str]) -> None:
    """``-cudart shared`` links ``-lcudart``: add ``libcudart.so`` if only the versioned file exists."""
    if _find_file(lib_dirs, "libcudart.so"):
        return
    versioned = next((p for d in lib_dirs for p in sorted(d.glob("libcudart.so.*"))), None)
    if versioned is None:
        raise ToolchainNotFoundError(
            f"no libcudart.so(.13) in {', '.join(map(str, lib_dirs))}: "
            "pip install nvidia-cuda-runtime or use a full toolkit."
        )
    link = link_dir / "libcudart.so"
    if not (link.is_symlink() and link.resolve() == versioned.resolve()):
        tmp = link_dir / f".libcudart.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(versioned)
        os.replace(tmp, link)
    notes.append(f"toolkit has only {versioned.name}: linked {link}")


def _locate_cuobjdump(cuda_home: Path) -> tuple[Path | None, Path | None]:
    """cuobjdump and the directory of the nvdisasm it needs (toolkit, PATH, then wheels)."""
    candidates = [cuda_home / "bin"]
    on_path = shutil.which("cuobjdump")
    if on_path:
        candidates.append(Path(on_path).parent)
    candidates += [r / "bin" for r in wheel_roots()]
    cuobjdump = next((d / "cuobjdump" for d in candidates if _is_exe(d / "cuobjdump")), None)
    if cuobjdump is None:
        return None, None
    nv_path = shutil.which("nvdisasm")
    disasm_dirs = [
        cuobjdump.parent,
        cuda_home / "bin",
        *([Path(nv_path).parent] if nv_path else []),
        *(r / "bin" for r in wheel_roots()),
    ]
    nvdisasm_dir = next((d for d in disasm_dirs if _is_exe(d / "nvdisasm")), None)
    return cuobjdump, nvdisasm_dir


find_toolchain.cache_clear = _discover.cache_clear  # type: ignore[attr-defined]
