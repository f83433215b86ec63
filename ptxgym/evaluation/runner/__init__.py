"""A native runner for candidates: a small C++ process with no interpreter, no torch, no vendor library.

PROTOTYPE (issue 11, requirement 1). Nothing uses it yet: the evaluator still runs candidates in the
Python worker (``sandboxed/worker.py``). Every GPU path below is written and compiled but UNTESTED ON A
GPU; only the CPU path has run (``tests/evaluation/test_native_runner.py``).

What exists
-----------
* ``runner.cc`` (+ ``json.h``, ``cuda_path.h``): the ``ptxgym-runner`` executable. It links only libc,
  libdl, libstdc++ and ``libtvm_ffi.so``; the CUDA driver is opened with ``dlopen`` when a GPU blob is
  attached, never on the CPU path. Commands: ``attach`` (a CPU memfd, or a guard-page blob of VMM fds),
  ``load`` (``dlopen(RTLD_NOW|RTLD_LOCAL)`` and ``dlsym("__tvm_ffi_<entry>")``, the symbol
  ``TVM_FFI_DLL_EXPORT_TYPED_FUNC`` defines), ``call`` (DLTensor-backed ``TVMFFIAny`` arguments, the
  safe-call ABI, the raised error's kind and message on failure), ``exit``.
* ``build.py``: compiles it with the host ``g++`` into ``<cache>/runner/<hash>/`` (sources, flags and
  compiler version in the key); ``-DPTXGYM_RUNNER_CUDA`` when ``cuda.h`` is found.
* ``wire.py``: the messages (frozen models); ``client.py``: ``RunnerClient`` starts the runner and
  validates every reply (``ProtocolViolation``, ``RunnerDied``, ``RunnerTimeout``, as ``trusted/pool.py``
  does for the Python worker).
* ``jail.py``: ``runner_jail``, the ``ptxgym/confine`` launcher's rules for a runner (Landlock reads
  limited to the system libraries, tvm-ffi and the scratch directory holding the candidate; writes to
  the scratch directory only; no new sockets). ``RunnerClient(jail=...)`` starts the runner through the
  launcher, which execs it, so no interpreter is left. Tested on the CPU; its GPU rules are a guess.

Wire format
-----------
Two pipes, each a stream of frames: a 4-byte big-endian length, then one UTF-8 JSON object. Commands
carry ``op`` and ``seq`` (1, 2, ...); every reply carries ``seq`` (echoed), ``ok`` and either ``error``
(at most 4000 characters) or the op's result (``attach``, ``call``). The runner sends ``{"seq": 0,
"ok": true, "hello": {"pid", "version"}}`` unasked at start. File descriptors an attach needs travel
just before it on a third channel, a Unix socket (``SCM_RIGHTS``), which the runner closes at ``load``.
The candidate's stdout/stderr go to the trusted side's log file, not to the reply pipe.

Differences from the Python worker's loading
--------------------------------------------
``tvm_ffi.load_module`` also fills ``__tvm_ffi__library_ctx``, unpacks ``__tvm_ffi__library_bin`` and
initialises context symbols; the runner only resolves the exported function, which is all a
``ptxgym.cpu.build`` candidate (one ``TVM_FFI_DLL_EXPORT_TYPED_FUNC``, its cubin in cudart's fat binary)
needs. The candidate's ``libtvm_ffi.so`` must be the runner's (same soname: the loader reuses the copy
already mapped), or TVM-FFI's current stream and error slot would be two different ones.

Known limits (by design of a same-process runner)
-------------------------------------------------
The candidate still shares the runner's address space: its host code can write a forged frame to the
reply fd or patch the runner's memory. What changed is that there is no interpreter to hijack and no
vendor library to borrow; the strict reply validation turns clumsy forgery into a violation, and the
measurements that must not be forgeable have to come from outside the process (next steps).

Untested (no GPU this session)
------------------------------
Every line under ``PTXGYM_RUNNER_CUDA``: the VMM import and mapping (mirrors ``evaluation/vmm.py``), the
primary-context retain, the stream installed with ``TVMFFIEnvSetStream``, the CUDA-event timing
(``ev_ms``). First GPU check: attach a ``trusted/guards.py`` blob, run a ``ptxgym.cpu.build`` candidate,
compare outputs and ``ev_ms`` with the Python worker's on the same arena
(``tests/evaluation/test_native_runner_gpu.py`` does the first half; never run yet).

Next steps to make it the worker
--------------------------------
1. Parity with ``sandboxed/worker.py``: L2 flush buffer and persisting-L2 reset before a call, trial
   begin/end, the sticky-error check after a call, the ``Reply`` fields of ``protocol.py`` (or a
   translation in the client), and the library baselines as a bridge ``.so`` exporting the same TVM-FFI
   entry (like ``bench/parity_bridge.cc``) so cuBLAS/cuDNN load only in a baseline's runner.
2. CUPTI in C: activity records (kernel spans per timed call) and the SASS-metrics counted call, ported
   from ``sandboxed/cupti_spans.py`` and ``sass_counts.py``; better still, measured from a separate
   process so the candidate cannot forge them.
3. Confinement on the GPU: run ``test_native_runner_gpu.py[jailed]`` and narrow ``jail.GPU_READ`` to what
   the driver really opens (``strace -f -e trace=openat`` of a runner); add the worker's rlimits (address
   space, processes) and make the pool copy the candidate into the runner's scratch before ``load``.
4. Output capture through the pool's ``OutputCapture`` (a capped log plus tail) instead of a plain file;
   pre-warmed spares in ``trusted/pool.py`` with ``RunnerClient`` behind ``WorkerHandle``'s interface.
"""

__all__: list[str] = []  # a folder of modules: import them by name
