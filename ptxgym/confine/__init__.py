"""Linux confinement primitives: Landlock, a seccomp network filter, no_new_privs, and an exec launcher.

The lowest layer of the package (it imports nothing from ptxgym), shared by the two places that run
untrusted input: the build stage, which confines nvcc and every tool it runs (``ptxgym.cpu.jail``), and the
candidate worker's host sandbox (``ptxgym.evaluation.sandboxed.sandbox``). Each module here uses only the
standard library and ctypes, so the launcher can load them in a bare child interpreter (``launch``).

- ``libc``: raw syscalls and ``no_new_privs``;
- ``landlock``: the Landlock ABI, access rights and a ruleset builder;
- ``seccomp``: a classic-BPF assembler and the socket/ptrace filter;
- ``tasks``: whether RLIMIT_NPROC binds this process, and the tasks it counts;
- ``launch``: a tiny launcher that confines itself and then execs a program (thread-safe where
  ``preexec_fn`` is not).
"""

__all__: list[str] = []
