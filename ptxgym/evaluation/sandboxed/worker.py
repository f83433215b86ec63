"""The disposable candidate worker: ``python -m ptxgym.evaluation.sandboxed.worker``.

One worker process serves exactly one candidate (or one baseline timing) and is then killed. It starts
warm (torch, CUDA context, TVM-FFI) before any candidate exists, maps the trusted evaluator's input and
output buffers through CUDA IPC, loads the candidate's shared object with ``tvm_ffi.load_module`` and
calls its entry point on the harness stream when told to. It owns nothing that decides a verdict: the
trusted side poisons outputs, perturbs inputs, checks every result and measures wall time itself.

Before a candidate's shared object is loaded the trusted side sends ``sandbox``: the worker, warm and
attached, applies the host sandbox (``sandbox.py``: no network, no writes outside its scratch directory,
process limits) and replies with the report of each layer, before any candidate code exists in it. A
``load`` of a shared object without that command is refused.

The blob arrives as a CUDA IPC handle inside the attach command, or (guard pages, ``Attach.vmm``) as a
POSIX file descriptor on stdin, a Unix socket (``SCM_RIGHTS``), that the worker imports and maps itself
(``evaluation/vmm.py``). stdin is replaced by /dev/null when the sandbox command arrives, before any
candidate code exists.

Each call: device-wide sync, L2 flush, reset of persisting L2 lines, device-wide sync, start event
(and CUPTI timestamp), the call, stream event, device-wide sync, device event. Replies are JSON on a
dedicated pipe (stdout and stderr go to a log file the trusted side reads when the worker dies).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pickle
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ptxgym.evaluation.protocol import (
    MAX_SASS_ROWS,
    ApplySandbox,
    Arg,
    Attach,
    AttachResult,
    Call,
    CallResult,
    Command,
    Exit,
    Hello,
    Load,
    Reply,
    SandboxReport,
    SassRow,
    ScalarArg,
    Spans,
    TrialBegin,
    TrialEnd,
    VmmBlob,
    parse_command,
)

_T0 = time.perf_counter()
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the thread that spawned it exits; exit now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(70)


NO_HW_COUNTS = (
    "HwCountError: the Python worker reads no hardware counters (CUPTI's range profiler is read by the "
    "native runner only)"
)
"""The ``hw_count_error`` of every hardware-counted call in the Python worker."""


class _Cuda:
    """Driver-level facts through cuda.bindings (context identity, sticky errors, persisting L2)."""

    def __init__(self) -> None:
        try:
            from cuda.bindings import driver, runtime
        except ImportError:
            driver = runtime = None
        self.driver, self.runtime = driver, runtime

    def context_id(self) -> int | None:
        """Unique id of the current CUDA context (None if it cannot be read)."""
        if self.driver is None:
            return None
        try:
            err, ctx = self.driver.cuCtxGetCurrent()
            if int(err) != 0 or not int(ctx):
                return None
            err, ident = self.driver.cuCtxGetId(ctx)
        except (AttributeError, TypeError, RuntimeError):
            return None
        return int(ident) if int(err) == 0 else None

    def sticky_error(self) -> str:
        """'' if the context is healthy, else the CUDA error name and text."""
        if self.driver is None:
            return ""
        try:
            (err,) = self.driver.cuCtxSynchronize()
            if int(err) == 0:
                return ""
            _, name = self.driver.cuGetErrorName(err)
            _, text = self.driver.cuGetErrorString(err)
        except (AttributeError, TypeError, RuntimeError) as exc:
            return f"(context state unreadable: {exc})"
        return f"{_s(name)}: {_s(text)}"

    def reset_persisting_l2(self) -> None:
        if self.runtime is not None:
            self.runtime.cudaCtxResetPersistingL2Cache()

    def zero_persisting_limit(self) -> None:
        if self.runtime is not None:
            self.runtime.cudaDeviceSetLimit(self.runtime.cudaLimit.cudaLimitPersistingL2CacheSize, 0)


def _s(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Worker:
    """Command loop of one worker."""

    def __init__(self, conn_in: Connection, conn_out: Connection, device: int) -> None:
        import torch
        import tvm_ffi  # noqa: F401 - warm the import before any candidate exists

        self.torch = torch
        self.conn_in, self.conn_out, self.device = conn_in, conn_out, device
        torch.cuda.set_device(device)
        torch.zeros(1, device=f"cuda:{device}").add_(1)
        torch.cuda.synchronize()
        self.cuda = _Cuda()
        self.context_id = self.cuda.context_id()
        self.stream = torch.cuda.Stream(device=device)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self.tiny = torch.zeros(1, device=f"cuda:{device}")
        self.args: list[list] = []
        self.outputs: list[list] = []
        self.flush: Any = None
        self.fn: Any = None
        self.copy_back = False
        self.cupti: Any = None
        self.sass: Any = None
        self.arena = ""
        self.sandbox: SandboxReport | None = None
        self.vmm: Any = None

    # ---------------------------------------------------------------------------------------- loop

    def serve(self) -> None:
        """Say hello, then answer commands until told to exit or the parent goes away."""
        hello = Hello(
            pid=os.getpid(),
            device=self.device,
            warm_s=round(time.perf_counter() - _T0, 3),
            torch=self.torch.__version__,
            context_id=self.context_id,
        )
        self._send(Reply(seq=0, ok=True, hello=hello))
        expected = 1
        while True:
            try:
                raw = self.conn_in.recv_bytes()
            except EOFError:
                return
            try:
                cmd = parse_command(pickle.loads(raw))
            except Exception as exc:  # noqa: BLE001 - e.g. a CUDA IPC handle that cannot be opened
                print(traceback.format_exc(), file=sys.stderr, flush=True)
                self._send(Reply(seq=expected, ok=False, error=f"invalid command: {exc}"[:4000]))
                expected += 1
                continue
            expected = cmd.seq + 1
            reply = self._dispatch(cmd)
            self._send(reply)
            if isinstance(cmd, Exit):
                return

    def _send(self, reply: Reply) -> None:
        self.conn_out.send_bytes(reply.model_dump_json().encode())

    def _dispatch(self, cmd: Command) -> Reply:
        seq = cmd.seq
        handler = getattr(self, f"_op_{cmd.op}", None)
        if handler is None:
            return Reply(seq=seq, ok=False, error=f"unknown command {cmd.op!r}")
        try:
            return handler(seq, cmd)
        except Exception as exc:  # noqa: BLE001 - reported to the trusted side with the CUDA state
            text = f"{type(exc).__name__}: {exc}"
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            return Reply(seq=seq, ok=False, error=text[:4000], cuda_error=self.cuda.sticky_error())

    # ------------------------------------------------------------------------------------ commands

    def _op_exit(self, seq: int, cmd: Exit) -> Reply:
        return Reply(seq=seq, ok=True)

    def _op_attach(self, seq: int, cmd: Attach) -> Reply:
        torch = self.torch
        blob = cmd.blob if cmd.vmm is None else self._map_vmm(cmd.vmm)
        self.args, self.outputs = argument_views(blob, cmd.sets)
        self.flush = torch.empty(cmd.flush_bytes, dtype=torch.uint8, device=f"cuda:{self.device}")
        cupti_ok, cupti_error = self._start_cupti(cmd.cupti, cmd.module_census)
        self.arena = cmd.arena
        return Reply(
            seq=seq,
            ok=True,
            attach=AttachResult(
                arena=self.arena, cupti=cupti_ok, cupti_error=cupti_error, flush_bytes=self.flush.numel()
            ),
        )

    def _map_vmm(self, spec: VmmBlob):
        """Import the guard-page runs from the fds sent with the command and map them (``vmm.py``)."""
        import socket

        from ptxgym.evaluation import vmm

        want = len(spec.runs)
        with socket.socket(fileno=os.dup(0)) as channel:
            channel.settimeout(30.0)
            _, fds, _, _ = socket.recv_fds(channel, 1, want)
        handles = []
        try:
            if len(fds) != want:
                raise RuntimeError(f"expected {want} file descriptor(s) with the attach, got {len(fds)}")
            handles = [vmm.import_fd(fd) for fd in fds]
        except Exception:
            vmm.release_handles(handles)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        if self.vmm is not None:
            self.vmm.release()
        runs = [(r.offset, r.size) for r in spec.runs]
        self.vmm = vmm.MappedBlob(handles, spec.total, spec.page, runs, self.device)
        return self.vmm.tensor()

    def _start_cupti(self, wanted: bool, module_census: bool = False) -> tuple[bool, str]:
        if not wanted:
            return False, "not requested"
        if self.cupti is not None:
            return True, ""
        try:
            from ptxgym.evaluation.sandboxed.cupti_spans import CuptiSpans

            spans = CuptiSpans(module_census)
            spans.begin()
            t0 = spans.now()
            self.tiny.add_(1)
            self.torch.cuda.synchronize()
            spans.window(0, t0, spans.now())
            got, _ = spans.end()
        except Exception as exc:  # noqa: BLE001 - any failure means: time with events instead
            return False, f"{type(exc).__name__}: {exc}"[:500]
        if got.get(0) is None:
            return False, "CUPTI recorded no activity for a probe kernel"
        self.cupti = spans
        return True, ""

    def _op_sandbox(self, seq: int, cmd: ApplySandbox) -> Reply:
        """Apply the host sandbox (once, before the candidate is loaded) and report its layers."""
        from ptxgym.evaluation.sandboxed import sandbox

        if self.sandbox is not None:
            return Reply(seq=seq, ok=False, error="the sandbox is already applied in this worker")
        _close_fd_socket()
        try:
            self.sandbox = sandbox.apply(cmd.mode, Path(cmd.scratch))
        except (sandbox.SandboxError, ValueError) as exc:
            return Reply(seq=seq, ok=False, error=str(exc)[:4000])
        return Reply(seq=seq, ok=True, sandbox=self.sandbox)

    def _op_load(self, seq: int, cmd: Load) -> Reply:
        kind = cmd.kind
        if kind == "so" and self.sandbox is None:
            return Reply(
                seq=seq,
                ok=False,
                error="refusing to load a candidate before the 'sandbox' command (its mode 'off' runs "
                "the candidate unsandboxed)",
            )
        if kind == "noop":
            tiny, flush, busy = self.tiny, self.flush, cmd.busy_memsets
            if busy and flush is None:
                return Reply(seq=seq, ok=False, error="a busy no-op needs the attach's L2-flush buffer")

            def noop(*_):
                tiny.add_(1)
                for _ in range(busy):
                    flush.fill_(1)

            self.fn, self.copy_back = noop, False
        elif kind == "baseline":
            from ptxgym.evaluation.sandboxed import library_baselines as baselines

            try:  # set-up (a library's planning) happens here, at load, for every set: never in a call
                self.fn = baselines.bind(cmd.function, dict(cmd.options), self.args)
            except Exception as exc:  # noqa: BLE001 - a library that cannot load is the baseline's verdict
                why = f"baseline {cmd.function!r} could not be set up: {type(exc).__name__}: {exc}"
                return Reply(seq=seq, ok=False, error=why[:4000], cuda_error=self.cuda.sticky_error())
            self.copy_back = True
        elif kind == "so":
            import tvm_ffi

            try:
                module = tvm_ffi.load_module(cmd.path)
                self.fn = module[cmd.entry]
            except Exception as exc:  # noqa: BLE001 - a load failure is the candidate's verdict
                return Reply(
                    seq=seq,
                    ok=False,
                    error=f"loading {cmd.entry!r} failed: {exc}"[:4000],
                    cuda_error=self.cuda.sticky_error(),
                )
            self.copy_back = False
        else:
            return Reply(seq=seq, ok=False, error=f"unknown load kind {kind!r}")
        self._enter_stream()
        return Reply(seq=seq, ok=True)

    def _enter_stream(self) -> None:
        import tvm_ffi

        self.torch.cuda.set_stream(self.stream)
        self._ffi_stream = tvm_ffi.use_torch_stream()
        self._ffi_stream.__enter__()
        self.cuda.zero_persisting_limit()

    def _op_trial_begin(self, seq: int, cmd: TrialBegin) -> Reply:
        self.cuda.zero_persisting_limit()
        if self.cupti is not None and cmd.cupti:
            self.cupti.begin()
        return Reply(seq=seq, ok=True)

    def _op_trial_end(self, seq: int, cmd: TrialEnd) -> Reply:
        if self.cupti is None:
            return Reply(seq=seq, ok=True, spans=Spans())
        spans, counts = self.cupti.end()
        kernels, modules = self.cupti.census()
        outside, nearest = self.cupti.strays()
        return Reply(
            seq=seq,
            ok=True,
            spans=Spans(
                spans=spans,
                activities=counts,
                kernels=kernels,
                modules=modules,
                census_error=self.cupti.census_error,
                incomplete=self.cupti.incomplete,
                flushes=self.cupti.flushes,
                outside=outside,
                empty_nearest_us=nearest,
                ran_in=self.cupti.ran_in(),
                launched_in=self.cupti.launched_in(),
                launch_known=self.cupti.launch_known(),
            ),
        )

    def _op_call(self, seq: int, cmd: Call) -> Reply:
        if cmd.count:
            return self._counted_call(seq, cmd)
        if cmd.hw_count:  # no range profiler here: a plain call, and why there are no counters
            plain = self._op_call(seq, cmd.model_copy(update={"hw_count": False}))
            return plain.model_copy(update={"hw_count_error": NO_HW_COUNTS}) if plain.ok else plain
        torch = self.torch
        args = self.args[cmd.set]
        ev0, ev1, ev2 = self.events
        torch.cuda.synchronize()
        if cmd.flush:
            self.flush.zero_()
            self.cuda.reset_persisting_l2()
        torch.cuda.synchronize()
        timed = self.cupti is not None and cmd.timed
        t_start = self.cupti.now() if timed else 0
        h0 = time.perf_counter()
        ev0.record(self.stream)
        result = self.fn(*args)
        ev1.record(self.stream)
        torch.cuda.synchronize()
        host_ms = (time.perf_counter() - h0) * 1e3
        if timed:
            self.cupti.window(seq, t_start, self.cupti.now())
        ev2.record(self.stream)
        ev2.synchronize()
        if self.copy_back and result is not None:
            self._copy_outputs(cmd.set, result)
        lost = self._context_lost()
        if lost:
            return Reply(seq=seq, ok=False, error=lost, cuda_error=self.cuda.sticky_error())
        return Reply(
            seq=seq,
            ok=True,
            call=CallResult(
                ev_stream_ms=ev0.elapsed_time(ev1), ev_device_ms=ev0.elapsed_time(ev2), host_ms=host_ms
            ),
        )

    def _counted_call(self, seq: int, cmd: Call) -> Reply:
        """One call under CUPTI's SASS metrics (``sass_counts.py``); the counter starts at the first one.

        With ``cmd.timed`` (a counted call inside an activity trial) its CUPTI window is recorded too, so
        the trial's census sees its kernels; the trusted side takes no latency from it.
        """
        torch = self.torch
        torch.cuda.synchronize()
        window = self.cupti is not None and cmd.timed
        t_start = self.cupti.now() if window else 0
        outcome: dict[str, Any] = {}

        def run() -> None:
            outcome["result"] = self.fn(*self.args[cmd.set])
            torch.cuda.synchronize()

        rows: list[SassRow] | None = None
        error = ""
        try:
            if self.sass is None:
                from ptxgym.evaluation.sandboxed.sass_counts import SassCounter

                self.sass = SassCounter(self.device)
            counted = self.sass.count(run)
            rows = [
                SassRow(
                    function=c.function[:4096],
                    pc=c.pc_offset,
                    inst=c.values.get("inst_executed", 0),
                    threads=c.values.get("thread_inst_executed_true", 0),
                )
                for c in counted[:MAX_SASS_ROWS]
            ]
        except Exception as exc:  # noqa: BLE001 - reported; the trusted side keeps its other proofs
            error = f"{type(exc).__name__}: {exc}"[:500]
        if "result" not in outcome:  # the counter failed before the call ran: run it plainly
            run()
        if window:
            self.cupti.window(seq, t_start, self.cupti.now())
        if self.copy_back and outcome["result"] is not None:
            self._copy_outputs(cmd.set, outcome["result"])
        lost = self._context_lost()
        if lost:
            return Reply(seq=seq, ok=False, error=lost, cuda_error=self.cuda.sticky_error())
        return Reply(seq=seq, ok=True, counts=rows, count_error=error)

    def _copy_outputs(self, index: int, result) -> None:
        values = result if isinstance(result, tuple | list) else (result,)
        for dst, src in zip(self.outputs[index], values, strict=True):
            dst.copy_(src.reshape(dst.shape))
        self.torch.cuda.synchronize()

    def _context_lost(self) -> str:
        now = self.cuda.context_id()
        if self.context_id is not None and now != self.context_id:
            return (
                f"the CUDA context of the worker changed during the call (id {self.context_id} -> {now}): "
                "the candidate reset or replaced the device context (cudaDeviceReset?)"
            )
        return ""


def _close_fd_socket() -> None:
    """Replace stdin (the trusted side's fd socket) with /dev/null: the candidate never gets the channel."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def argument_views(blob: Any, sets: list[list[Arg]]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Per input set, the call's arguments (views of ``blob`` and scalars) and its output views."""
    import torch

    all_args, all_outs = [], []
    for entry in sets:
        args: list[Any] = []
        outs: list[Any] = []
        for arg in entry:
            if isinstance(arg, ScalarArg):
                args.append(arg.value)
                continue
            dtype = getattr(torch, arg.dtype)
            nbytes = _numel(arg.shape) * torch.empty((), dtype=dtype).element_size()
            view = blob[arg.offset : arg.offset + nbytes].view(dtype).view(arg.shape)
            args.append(view)
            if arg.role == "out":
                outs.append(view)
        all_args.append(args)
        all_outs.append(outs)
    return all_args, all_outs


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--fd-in N --fd-out M --device D --parent-pid P``."""
    parser = argparse.ArgumentParser(prog="ptxgym.evaluation.sandboxed.worker")
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid)
    conn_in = Connection(args.fd_in, readable=True, writable=False)
    conn_out = Connection(args.fd_out, readable=False, writable=True)
    Worker(conn_in, conn_out, args.device).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
