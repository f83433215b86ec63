"""The confinement of a runner: what ``ptxgym/confine``'s launcher applies before it execs the runner.

The launcher (a bare interpreter) limits and jails itself, then ``execve``s ``ptxgym-runner``, so no
interpreter is left in the runner's process. Landlock then allows:

* read and execute: the runner binary and its ELF interpreter (the kernel checks execute on both);
* read: the system library directories (libc, libstdc++), ``/etc/ld.so.cache``, tvm-ffi's library
  directory, the scratch directory (where the trusted side puts the candidate's ``.so`` before
  ``load``); every file mapping, executable ones included, needs a readable file, so this also bounds
  which files can be mapped executable;
* write: the scratch directory only; devices: ``/dev/null``;
* no new sockets (seccomp), no core dumps.

With ``gpu`` the NVIDIA device nodes, ``/proc/self``, ``/proc/driver/nvidia`` and ``/sys`` are added:
UNTESTED ON A GPU (the driver's needs are a best guess from ``sandboxed/sandbox.py``; check them first).
Anonymous executable memory (a JIT) is not restricted.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ptxgym.confine.launch import Jail, LandlockRules

SYSTEM_READ = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache")
"""Where the runner's own libraries (libc, libstdc++, libgcc) come from."""
GPU_READ = ("/proc/self", "/proc/driver/nvidia", "/sys")
"""What the CUDA driver reads (UNTESTED on a GPU)."""


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


def runner_jail(binary: Path, scratch: Path, gpu: bool = False) -> Jail:
    """The jail of one runner whose candidate will be loaded from beneath ``scratch``."""
    import tvm_ffi.libinfo as info

    interpreter = elf_interpreter(binary)
    execute = (str(binary), *([str(interpreter)] if interpreter else []))
    read = (*SYSTEM_READ, str(Path(info.find_libtvm_ffi()).resolve().parent), *(GPU_READ if gpu else ()))
    devices = ["/dev/null"]
    if gpu:
        devices += [str(p) for p in sorted(Path("/dev").glob("nvidia*"))]
    rules = LandlockRules(read=read, execute=execute, write=(str(scratch),), devices=tuple(devices))
    return Jail(rlimits={"RLIMIT_CORE": 0}, landlock=rules, families=())
