"""The confinement of a runner: the rules ``runner/confine.h`` applies at the ``sandbox`` command.

The trusted side sends this jail in the runner's ``sandbox`` command (``native_worker.jail_spec``); the
runner applies it to itself after its CUDA set-up and before any candidate code exists, as the Python
worker does. (``ptxgym/confine``'s launcher can apply the same jail before exec, ``NativeHandle(...,
at_exec=True)``, but on the H200 the driver could not initialise under it: cuInit returned
CUDA_ERROR_OPERATING_SYSTEM; so that form is for runners without a GPU.) Landlock then allows:

* read and execute: the runner binary and its ELF interpreter (the kernel checks execute on both);
* read: the files the runner links outside the system (its ``libcupti`` and the ``libnvperf_*`` beside
  it, single files: cuBLAS in the same directory stays unreadable), the system library directories
  (libc, libstdc++), ``/etc/ld.so.cache``, tvm-ffi's library directory, ``/proc/self`` (the runner
  reads its own status for the sandbox report) and the scratch directory (where the trusted side puts
  the candidate's ``.so`` before ``load``); every file mapping, executable ones included, needs a
  readable file, so this also bounds which files can be mapped executable;
* with ``gpu``: exactly the GPU files the trusted side resolved (``GpuFiles``: the driver's
  ``libcuda.so*`` and ``libnvidia-*`` files mapped in the trusted process after its CUDA init and the
  ``libcudart`` the candidate links; symlinks resolved, single files, never their directories), the
  NVIDIA device nodes (read/write), ``/proc/driver/nvidia``, ``/sys`` and a few ``/proc`` facts the
  driver reads (``DRIVER_READ``), plus ``settings.runner_read_extra()`` (an escape hatch);
* write: the scratch directory only; devices: ``/dev/null`` (and the GPU's nodes);
* no new sockets of any family (seccomp), no core dumps, files of at most 64 MiB, 4096 open files, and
  the user's tasks capped at those visible now + 512 (not enforced for root, as in ``sandbox.py``).

Anonymous executable memory (a JIT) is not restricted.
"""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ptxgym.confine import landlock
from ptxgym.confine.launch import Jail, LandlockRules
from ptxgym.confine.tasks import privileged, user_tasks
from ptxgym.records import settings

SYSTEM_READ = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache")
"""Where the runner's own libraries (libc, libstdc++, libgcc) come from."""
DRIVER_READ = (
    "/proc/self",
    "/proc/driver/nvidia",
    "/sys",
    "/proc/devices",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/modules",
    "/proc/version",
    "/proc/sys/vm",
    "/proc/sys/kernel",
)
"""What the CUDA driver reads besides its libraries and device nodes (system facts, no secrets)."""
MAX_FILE_BYTES = 64 << 20
"""RLIMIT_FSIZE of a runner (as the Python worker's sandbox)."""
MAX_OPEN_FILES = 4096
"""RLIMIT_NOFILE of a runner."""
TASK_HEADROOM = 512
"""RLIMIT_NPROC = tasks of the user visible now + this."""
_DRIVER_FILE = re.compile(r"^(libcuda\.so|libnvidia-(?!ml\.)[\w.-]*\.so)")
"""The driver's files (NVML, ``libnvidia-ml``, is a monitoring library the runner does not need)."""
_CUDART_FILE = re.compile(r"^libcudart\.so")


@dataclass(frozen=True)
class GpuFiles:
    """The exact files a runner on the GPU may read besides the system libraries (resolved paths)."""

    libcuda: Path
    """The driver library the runner dlopens (``--libcuda``)."""
    driver: tuple[Path, ...] = ()
    """Every other driver file (``libnvidia-*``) mapped in the trusted process."""
    cudart: Path | None = None
    """The CUDA runtime the candidate links (preloaded by exact path); None: not found."""

    def all(self) -> tuple[Path, ...]:
        """Every file, each once."""
        files = [self.libcuda, *self.driver, *([self.cudart] if self.cudart else [])]
        return tuple(dict.fromkeys(files))


def mapped_files(maps: str) -> list[Path]:
    """The distinct file paths of a ``/proc/<pid>/maps`` text, in order of appearance."""
    seen: dict[Path, None] = {}
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            seen.setdefault(Path(parts[5].removesuffix(" (deleted)")), None)
    return list(seen)


def _ldconfig(name: str) -> Path | None:
    """The path ``ldconfig -p`` gives for the soname ``name`` (None if unknown)."""
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in out.stdout.splitlines():
            if line.strip().startswith(name + " ") and "=>" in line:
                return Path(line.split("=>", 1)[1].strip())
    return None


def cupti_files(cupti_lib: Path | None) -> tuple[Path, ...]:
    """The libcupti a runner links and the ``libnvperf_*`` files beside it (its profiler back end)."""
    if cupti_lib is None:
        return ()
    nvperf = sorted({p.resolve() for p in cupti_lib.parent.glob("libnvperf_*.so*")})
    return (cupti_lib.resolve(), *nvperf)


def gpu_files(maps: str, cudart: Path | None = None) -> GpuFiles:
    """The GPU files of a runner from the trusted process's maps text (after its CUDA init).

    ``libcuda.so*`` and ``libnvidia-*`` files mapped there are the driver's; ``libcudart`` mapped there
    is the runtime the candidate will find (else ``cudart``). Raises ``FileNotFoundError`` when no
    driver library can be found (neither mapped nor in ldconfig's cache).
    """
    mapped = mapped_files(maps)
    driver = [p.resolve() for p in mapped if _DRIVER_FILE.match(p.name)]
    libcuda = next((p for p in driver if p.name.startswith("libcuda.so")), None)
    if libcuda is None:
        found = _ldconfig("libcuda.so.1")
        if found is None or not found.exists():
            raise FileNotFoundError("no libcuda.so.1: not mapped in this process and not in ldconfig's cache")
        libcuda = found.resolve()
    runtime = next((p.resolve() for p in mapped if _CUDART_FILE.match(p.name)), None) or cudart
    others = tuple(dict.fromkeys(p for p in driver if p != libcuda))
    return GpuFiles(libcuda=libcuda, driver=others, cudart=runtime.resolve() if runtime else None)


def elf_interpreter(binary: Path) -> Path | None:
    """The program interpreter (``PT_INTERP``) of a 64-bit little-endian ELF executable, resolved."""
    data = binary.read_bytes()
    if data[:5] != b"\x7fELF\x02" or data[5] != 1:
        return None
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for k in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + k * phentsize)
        if p_type == 3:  # PT_INTERP
            name = data[p_offset : p_offset + p_filesz].rstrip(b"\0").decode()
            return Path(name).resolve()
    return None


def runner_rlimits() -> dict[str, int]:
    """The runner's resource limits (those of the Python worker's sandbox)."""
    limits = {"RLIMIT_CORE": 0, "RLIMIT_FSIZE": MAX_FILE_BYTES, "RLIMIT_NOFILE": MAX_OPEN_FILES}
    if not privileged():
        limits["RLIMIT_NPROC"] = user_tasks() + TASK_HEADROOM
    return limits


def runner_jail(
    binary: Path, scratch: Path, gpu: GpuFiles | None = None, libs: tuple[Path, ...] = ()
) -> Jail:
    """The jail of one runner whose candidate will be loaded from beneath ``scratch``.

    ``libs``: files the runner itself links outside the system directories (``cupti_files``).

    Without Landlock on this kernel the jail has no file rules (the runner's sandbox report then says
    the filesystem layer is unavailable; strict mode refuses it).
    """
    import tvm_ffi.libinfo as info

    interpreter = elf_interpreter(binary)
    execute = (str(binary), *([str(interpreter)] if interpreter else []))
    read = [*SYSTEM_READ, str(Path(info.find_libtvm_ffi()).resolve().parent), str(scratch), "/proc/self"]
    read += [str(p) for p in libs]
    devices = ["/dev/null"]
    if gpu is not None:
        read += [*DRIVER_READ, *(str(p) for p in gpu.all()), *settings.runner_read_extra()]
        nodes = [*Path("/dev").glob("nvidia*"), *Path("/dev").glob("nvidia-caps/*")]
        devices += [str(p) for p in sorted(nodes) if not p.is_dir()]
    abi, _ = landlock.abi()
    rules = LandlockRules(read=tuple(read), execute=execute, write=(str(scratch),), devices=tuple(devices))
    return Jail(rlimits=runner_rlimits(), landlock=rules if abi else None, families=())
