"""A native runner for candidates: a small C++ process with no interpreter, no torch, no vendor library.

Issue 11, requirement 1. By default (``candidate_process = "native"``, ``PTXGYM_CANDIDATE_PROCESS``,
``settings.candidate_process``; ``python`` is the way before) the local evaluator runs every candidate
of a guard-page arena in ``ptxgym-runner`` instead of the Python worker (``sandboxed/worker.py``), through
``trusted/native_worker.py`` (``NativeHandle``, a ``WorkerHandle``; ``NativeRunners``, the choice and
the fallback). The CPU path is tested (``tests/evaluation/test_native_runner.py``, ``test_native_worker.py``);
the GPU path ran on the H200 (``bench/results/gpu_tests_2026-12-04_native_jailed.txt``: every test of
``test_native_runner_gpu.py`` passed, jailed; the expert GEMM at 1.0112x in the runner vs 1.0117x in
the Python worker).

What exists
-----------
* ``runner.cc`` (+ ``json.h``; ``args.h``: the DLTensor/TVMFFIAny arguments of every input set;
  ``host_blob.h``: the CPU test blob; ``report.h``: the sandbox report; ``cuda_path.h``: the driver
  API, opened with ``dlopen`` of the exact file the trusted side names; ``cupti_api.h``: the CUPTI
  interface, whose definitions ``cupti_path.h`` brings): the ``ptxgym-runner`` executable. It links
  libc, libdl, libstdc++, ``libtvm_ffi.so`` and, built with CUPTI, ``libcupti``; the driver and the
  candidate's ``libcudart`` (preloaded by exact path) are opened at run time. It speaks the worker's
  protocol (below) and serves every command the evaluator sends a candidate's process.
* ``build.py``: compiles it with the host ``g++`` into ``<cache>/runner/<hash>/`` (sources, flags and
  compiler version in the key); ``-DPTXGYM_RUNNER_CUDA`` when ``cuda.h`` is found,
  ``-DPTXGYM_RUNNER_CUPTI`` and libcupti when ``cupti.h``, ``libcupti.so*`` and ``cupti_path.h`` are.
* ``jail.py``: ``runner_jail``, the rules of a runner's jail (Landlock reads limited to the system
  libraries, tvm-ffi, the runner's own libcupti files, scratch and, on the GPU, the exact driver and
  runtime files resolved from the trusted process's ``/proc/self/maps`` (``gpu_files``) plus the device
  nodes, ``/sys`` and a few ``/proc`` facts; writes to scratch only; no sockets; the worker's rlimits).
* ``confine.h``: the runner applies that jail to itself at the ``sandbox`` command (rlimits,
  ``no_new_privs``, Landlock, the seccomp socket filter on every thread), after its CUDA set-up: on the
  H200 a jail applied before exec by ``ptxgym/confine``'s launcher stopped ``cuInit``
  (CUDA_ERROR_OPERATING_SYSTEM) whichever layer it held, even without Landlock
  (``bench/results/runner_jail_probe_2026-12-04_at_exec.txt``); the launcher form stays for CPU
  runners (``NativeHandle(..., at_exec=True)``).

Protocol
--------
Commands are the ``protocol.py`` command models as JSON (``model_dump_json``; an attach's ``blob``, a
CUDA tensor, is left out), replies are ``protocol.Reply`` JSON, in ``multiprocessing.Connection``'s
frames (a 4-byte big-endian length, then the bytes) on two pipes, so ``WorkerHandle`` reads and
validates them with its own code; the hello (seq 0) has ``torch`` "" and ``runner`` (its version).
File descriptors of an attach travel just before it on a Unix socket (``SCM_RIGHTS``, ``--fd-sock``),
closed at ``sandbox`` and before a load. stdout and stderr (the candidate's output) go to the pool's
``OutputCapture``.

* ``attach``: guard-page blobs only (``Attach.vmm``: each run's POSIX fd imported and mapped at its
  offset, the holes unmapped); a plain blob is refused with an error naming the Python worker (the
  evaluator never sends one: it chooses the worker for plain arenas). Builds every input set's
  arguments (views checked to lie inside one mapped run), allocates the ``flush_bytes`` L2-flush
  buffer, starts the candidate's CUDA runtime on the primary context (``cudaSetDevice``, ``cudaFree(0)``:
  a runtime that cannot start in the jail fails the set-up, not the candidate), starts CUPTI when asked
  (a probe memset must show up in its spans) or says why not.
* ``sandbox``: the runner applies the jail the command carries (``native_worker.jail_spec``;
  ``confine.h``); an error there is an error reply and nothing loads after it (the evaluator falls back
  to the worker). The reply is the ``SandboxReport`` of what the runner observes in force
  (``NoNewPrivs`` and ``Seccomp`` in its status, a refused probe socket, a refused ``/etc/passwd``, its
  rlimits, its environment; below Landlock ABI 8 the CUDA driver's earlier helper
  threads restrict themselves from a signal handler, ``confine.h`` ``restrict_others``, and the
  filesystem layer is ``partial`` when one of them could not be reached, named in its detail); mode
  ``strict`` refuses a layer that is not in force.
* ``load``: ``noop`` (a 4-byte memset on the stream: the calibration's subject) or ``so`` (refused
  before ``sandbox``; ``dlopen`` of the copy the trusted side put in scratch, ``__tvm_ffi_<entry>``);
  ``baseline`` is refused (a library baseline stays in the Python worker, vendor library and all).
* ``trial_begin`` / ``trial_end``: the persisting-L2 limit zeroed; CUPTI's records begun and cut into
  ``Spans`` (empty without CUPTI).
* ``call``: context sync, L2 flush (memset of the flush buffer) and ``cuCtxResetPersistingL2Cache``,
  sync, CUPTI start, event 0, the call (TVM-FFI's stream is the runner's), event 1, sync, CUPTI window,
  event 2: ``CallResult`` ``ev_stream_ms``/``ev_device_ms``/``host_ms``. A context whose
  ``cuCtxGetId`` changed is an error reply (as the worker's), a failed call's reply carries the sticky
  error (``cuCtxSynchronize``'s name and text). ``Call.count``: the call under CUPTI's SASS metrics
  (``cupti::count_json``), or ``count_error`` with the reason. ``Call.hw_count``: the call under
  CUPTI's range profiler (``cupti::hw_count_json``, ``cupti_range.h``: hardware counters, one pass, no
  patching), ``HwCounts`` in ``hw_counts`` or ``hw_count_error`` with the reason.

Known limits
------------
The candidate still shares the runner's address space: its host code can write a forged frame to the
reply fd or patch the runner's memory (its timings and counts). What changed is that there is no
interpreter to hijack and no vendor library to borrow (cuBLAS cannot even be read); the strict reply
validation turns clumsy forgery into a violation, and the measurements that must not be forgeable have
to come from outside the process.

Not done
--------
* The default is ``native`` since 2026-12-05 (twelfth session). What backs the flip: on the H200 the
  evaluator's GPU suite, the five experts and the runner's own GPU tests (verified pool, hardware
  counters in the jail) passed in the runner (bench/results/gpu_tests_2026-12-05_*); after the thread
  broadcast and the kept protocol pipes the runner's GPU tests passed again (H200, stage ``s12``), the
  throughput mix ran in it (``throughput_2026-12-05_native_h200.txt``), and ``ptxgym audit`` judged all
  15 hostile cases as expected there with the hardware-counted call on (H100,
  ``audit_2026-12-05_native_h100.txt``; without that call ``instrumented_wgmma`` was paid, so
  ``EvalSettings.hw_counters`` is on by default too). Not yet run at the flip's commit: the five experts
  through the default path (``bench/gpu_session.sh flip``).
* The library baselines still run in the Python worker (a bridge ``.so`` with the same TVM-FFI entry,
  like ``bench/parity_bridge.cc``, would time them through the runner too).
* Timing: the runner did not make the trusted wall clock tighter (calibration IQR 0.23-0.57 ms per call
  vs 0.05-0.18 in the worker, two plays: ``bench/results/wall_allowance_2026-12-04_native_vs_python.txt``);
  the spread looks like the trusted side's, not the candidate process's (next: interleave trivial calls
  with the timed ones and compare medians with their standard error instead of 5 x IQR).
"""

__all__: list[str] = []  # a folder of modules: import them by name
