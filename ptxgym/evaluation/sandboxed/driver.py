"""One-shot candidate driver for the profilers: ``python -m ptxgym.evaluation.sandboxed.driver``.

Run under Nsight Compute (``--mode profile``) or compute-sanitizer (``--mode memcheck``) in a fresh,
disposable process. It loads one input set saved by the trusted evaluator, allocates and poisons the
outputs, loads the candidate with TVM-FFI (or, with ``--baseline``, takes a function of
``library_baselines``, to profile the vendor library the same way) and calls it: once outside
any NVTX range (module loading, lazy initialisation), then once inside the NVTX range ``candidate`` that
the profiler filters on. It exits 0 only if both calls returned.

With ``--scratch`` it applies the host sandbox (``sandbox.apply``, mode ``--sandbox``) before the
candidate is loaded: from then on the process writes only beneath that scratch directory, so it cannot
touch the report the tool writes elsewhere (``trusted/tools.py``), and has no network. Nothing the driver
or the candidate prints is a proof; the tools' reports are read from their own files. When depends on
the tool (``EARLY_JAIL_MODES``): under compute-sanitizer before CUDA is initialised, so the threads its
injected library starts at CUDA's start-up are born inside the sandbox (below Landlock ABI 8 the
sandbox reaches threads that already exist only through a signal, and the sanitizer's helper threads
did not survive it: memcheck of a faulting candidate then hung until its time limit,
``bench/results/profiled_probe_2026-12-05_h100*.txt``); under Nsight Compute after CUDA, torch, TVM-FFI
and the buffers are set up, exactly as the worker does (its injected library talks to the front end
over a connection it opens at CUDA's start-up, which the network filter would refuse). Memcheck's early
sandbox leaves out its rlimits layer (``sandbox.apply_rlimits``), which comes just before the candidate
loads: CUDA and the sanitizer's injected library start up free of its file-size cap (which also caps
the shared buffers they may size with ftruncate) and of its task and open-file caps, and no candidate
code runs in between.

With ``--gate DIR --gate-key HASH`` (``trusted/tools.py``, ``Gate``) it stops before CUDA is
initialised, once torch is imported and the input file read: it creates ``ready`` in that directory and
waits for a ``go`` whose content hashes to ``HASH`` (a go another process wrote is ignored), so its
start-up holds no GPU. TVM-FFI is imported after the gate: its import asks torch whether CUDA is
available, which initialises the driver. (Nsight Compute's application replay runs the driver once per
pass: the later passes find the go already given.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

from ptxgym.evaluation.protocol import MODES

EARLY_JAIL_MODES = ("memcheck",)
"""Tool modes whose driver applies the sandbox before CUDA is initialised (module docstring)."""
EXIT_NOW_MODES = ("profile",)
"""Tool modes where ``--exit-now`` applies: the process ends with ``os._exit`` after its calls, without the
interpreter's teardown (torch's, TVM-FFI's, the CUDA context's), which under Nsight Compute held the GPU
turn 0.83-0.88 s after the profiled call on an H100, 0.22-0.24 s without it, the report the same
(``bench/results/ncu_exit_now_2026-12-07_s58_h100.txt``; ``EvalSettings.ncu_exit_now``, on by default).
Never under compute-sanitizer, whose leak check and summary come at the process's orderly end."""
GATE_WAIT_S = 3600.0
"""How long the driver waits at its gate before giving up (the caller died or forgot it)."""


def wait_at_gate(gate: str | None, key: str | None) -> bool:
    """Announce readiness and wait for the go (module docstring); False if it never came."""
    if not gate:
        return True
    os.close(os.open(Path(gate) / "ready", os.O_CREAT | os.O_WRONLY, 0o600))
    deadline = time.monotonic() + GATE_WAIT_S
    while not _go(Path(gate) / "go", key or ""):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _go(path: Path, key: str) -> bool:
    """Whether ``path`` holds the secret whose SHA-256 is ``key``."""
    try:
        secret = path.read_bytes()[:256]
    except OSError:
        return False
    return hashlib.sha256(secret).hexdigest() == key


def _range():
    """push/pop functions of an NVTX implementation (the nvtx package, else torch's)."""
    try:
        import nvtx

        return (lambda name: nvtx.push_range(name)), nvtx.pop_range, "nvtx"
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop, "torch.cuda.nvtx"


def _phase_printer(on: bool):
    """``phase(name)``: with ``--phases`` a ``driver: phase NAME T`` line on stderr, else nothing.

    T is CLOCK_MONOTONIC, the host's clock, so a benchmark can place it among its own times (a log line,
    never parsed as proof).
    """

    def phase(name: str) -> None:
        if on:
            print(f"driver: phase {name} {time.monotonic():.4f}", file=sys.stderr, flush=True)

    return phase


def _target(args, outputs):
    """The callable to drive: the candidate's entry point, or a baseline writing into ``outputs``."""
    if args.so:
        import tvm_ffi

        return tvm_ffi.load_module(args.so)[args.entry]
    import json

    from ptxgym.evaluation.sandboxed import library_baselines as baselines

    fn, options = getattr(baselines, args.baseline), json.loads(args.options)

    def call(*tensors):
        got = fn(*tensors, **options)
        for dst, src in zip(outputs, got or (), strict=False):
            dst.copy_(src.reshape(dst.shape))

    return call


def _jail(args, rlimits: bool = True) -> bool:
    """Apply the host sandbox (``--sandbox`` beneath ``--scratch``) and print its report; False: it failed.

    ``rlimits=False`` leaves the rlimits layer to ``_limit`` (module docstring).
    """
    from ptxgym.evaluation.sandboxed import sandbox

    try:  # shm: the profiler's channel
        report = sandbox.apply(args.sandbox, Path(args.scratch), shm=True, rlimits=rlimits)
    except sandbox.SandboxError as exc:
        print(f"driver: the sandbox could not be applied: {exc}", file=sys.stderr)
        return False
    print(f"driver: sandbox {report.summary()}", file=sys.stderr)
    return True


def _limit(args) -> bool:
    """Apply the rlimits layer ``_jail`` left out (mode ``--sandbox``) and print it; False: it failed."""
    from ptxgym.evaluation.protocol import SandboxReport
    from ptxgym.evaluation.sandboxed import sandbox

    try:
        layer = sandbox.apply_rlimits(args.sandbox)
    except sandbox.SandboxError as exc:
        print(f"driver: the sandbox's rlimits could not be applied: {exc}", file=sys.stderr)
        return False
    print(f"driver: sandbox {SandboxReport(mode=args.sandbox, layers=[layer]).summary()}", file=sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="ptxgym.evaluation.sandboxed.driver")
    parser.add_argument("--inputs", required=True)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--so")
    target.add_argument("--baseline", help="function name in ptxgym.evaluation.sandboxed.library_baselines")
    parser.add_argument("--options", default="{}", help="JSON keyword options of the baseline")
    parser.add_argument("--entry", default="run")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--mode", choices=("profile", "memcheck"), default="profile")
    parser.add_argument(
        "--scratch", help="sandbox the process before loading the target; it may write only here"
    )
    parser.add_argument("--sandbox", choices=MODES, default="on", help="host sandbox mode (with --scratch)")
    parser.add_argument("--gate", help="wait at this gate directory before initialising CUDA")
    parser.add_argument("--gate-key", help="SHA-256 of the go's content")
    parser.add_argument(
        "--phases", action="store_true", help="print each phase's CLOCK_MONOTONIC time (benchmarks: a log)"
    )
    parser.add_argument(
        "--exit-now",
        action="store_true",
        help="profile mode: end the process with os._exit once both calls returned, skipping the "
        "interpreter's teardown (EXIT_NOW_MODES)",
    )
    args = parser.parse_args(argv)
    phase = _phase_printer(args.phases)

    import torch

    from ptxgym.evaluation.compare import poison_

    saved = torch.load(args.inputs, weights_only=True)
    if not wait_at_gate(args.gate, args.gate_key):
        print(f"driver: no go at the gate within {GATE_WAIT_S:.0f} s", file=sys.stderr)
        return 4
    phase("go")
    early = bool(args.scratch) and args.mode in EARLY_JAIL_MODES
    if early and not _jail(args, rlimits=False):
        return 3
    import tvm_ffi  # after the gate: its import initialises CUDA (module docstring)

    phase("ffi")  # the driver API initialised (a profiler's injected library with it), no context yet
    torch.cuda.set_device(args.device)
    phase("cuda")
    dev = torch.device("cuda", args.device)
    inputs = [saved["inputs"][n].to(dev) for n in saved["order"]]
    outputs = [
        torch.empty(shape, dtype=getattr(torch, dtype), device=dev)
        for shape, dtype in saved["outputs"].values()
    ]
    stream = torch.cuda.Stream(device=dev)
    torch.cuda.set_stream(stream)
    push, pop, how = _range()
    torch.cuda.synchronize()
    phase("buffers")
    if args.scratch and not (_limit(args) if early else _jail(args)):
        return 3
    phase("jail")
    fn = _target(args, outputs)  # no candidate code ran before this line
    phase("load")
    with tvm_ffi.use_torch_stream():
        for out in outputs:
            poison_(out)
        torch.cuda.synchronize()
        fn(*inputs, *outputs)
        torch.cuda.synchronize()
        phase("first_call")
        if args.mode == "profile":
            for out in outputs:
                poison_(out)
            torch.cuda.synchronize()
            push("candidate")
            fn(*inputs, *outputs)
            torch.cuda.synchronize()
            pop()
            phase("profiled_call")
    print(f"driver: {args.mode} done ({how})", file=sys.stderr)
    if args.exit_now and args.mode in EXIT_NOW_MODES:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
