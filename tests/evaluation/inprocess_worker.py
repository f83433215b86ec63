"""A worker stand-in that runs a Python "candidate" in-process on the arena's own CPU buffers.

The trusted ``Session`` and ``Arena`` run unchanged against it: commands are the real protocol models,
validated with ``parse_command``; the attach layout is decoded by the real worker's ``argument_views``;
every answer is a real ``Reply``. Only the process boundary and the GPU are missing, so what it tests is
the trusted side's judgement of a candidate's *outputs* (caching and replay tricks), not isolation.

Counted calls (``Call.count``) run the candidate like any call and answer one made-up row per call
(``COUNTED_ROW``) or, with ``count_error_in_trial``, that error when asked to count inside an activity
trial (CUPTI refusing SASS metrics while activity tracing is on). With ``spans`` a trial's end reports a
1 ms span for every window the trial recorded and the kernel ``IN_BAND_KERNEL`` once per window (the
CUPTI backend's in-band census), like the real worker. Hardware-counted calls (``Call.hw_count``) run
the candidate and answer ``hw_counts`` (default ``HW_COUNTS``) or ``hw_error``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptxgym.evaluation.protocol import (
    ApplySandbox,
    Attach,
    AttachResult,
    Call,
    CallResult,
    HwCounts,
    Load,
    Reply,
    SandboxReport,
    SassRow,
    Spans,
    TrialBegin,
    TrialEnd,
    parse_command,
)
from ptxgym.evaluation.sandboxed.worker import argument_views

IN_BAND_KERNEL = "gemm_tiled"
"""The kernel name a trial's census reports once per window (``spans=True``)."""
COUNTED_ROW = SassRow(function=IN_BAND_KERNEL, pc=0x10, inst=4, threads=128)
"""The one row every successful counted call reports."""
HW_COUNTS = HwCounts(
    metrics={
        "smsp__inst_executed_pipe_tensor_op_gmma.sum": 4.0,
        "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum": 4096.0,
        "smsp__inst_executed_op_tma_ld.sum": 2.0,
    },
    passes=1,
    ranges=1,
)
"""What a hardware-counted call answers by default (made up; the GPU tests read real counters)."""


class InProcessWorker:
    """Answers commands like a worker; ``candidate(*args)`` writes the outputs of one call."""

    def __init__(
        self,
        candidate: Callable[..., Any],
        scratch: Path,
        library: Callable[..., Any] | None = None,
        sandboxed_library_error: str = "",
        measured: bool = False,
    ) -> None:
        self.candidate = candidate
        self.scratch = scratch
        self.seq = 0
        self.primed: dict[str, object] = {}
        self.args: list[list[Any]] = []
        self.outs: list[list[Any]] = []
        self.loaded = False
        self.calls = 0
        self.library = library
        """Stands in for ``library_baselines`` on a baseline load (None: the real function, on the CPU)."""
        self.sandboxed_library_error = sandboxed_library_error
        """If set, a baseline call under the sandbox fails with this error (the fallback's error path)."""
        self.measured = measured
        """Report 1 ms plus the call's own host time as its GPU time (the wall-clock cross-check holds)."""
        self.sandboxed = False
        self.kind = ""
        self.transcript: list[str] = []
        """Each command as ``op`` (``load:<kind>``, ``call:<set>:<timed>:<flush>``, ``count:<set>:<timed>``),
        in order."""
        self.count_error_in_trial = ""
        """If set, a counted call inside an activity trial answers this count error (no rows)."""
        self.spans = False
        """Report spans and a census for the windows of each trial (the CUPTI backend)."""
        self.silent_count_window = False
        """CUPTI records no activity in a counted call's window (patched kernels unseen by the tracing)."""
        self.count_delay_s = 0.0
        """Extra host time of a counted call (the patching's slowdown)."""
        self.counting = False
        """True while the candidate runs inside a counted call (what a test's candidate may peek at)."""
        self.counted_calls: list[tuple[int, bool]] = []
        """(the candidate's call number, inside an activity trial) of each counted call."""
        self.in_trial = False
        self.windows: list[int] = []
        self.busy = 0
        self.hw_counts: HwCounts | None = HW_COUNTS
        """What a hardware-counted call answers (``Call.hw_count``)."""
        self.hw_error = ""
        """If set, a hardware-counted call answers this error instead."""
        self.hw_counting = False
        """True while the candidate runs inside a hardware-counted call."""
        self.hw_counted_calls: list[tuple[int, bool]] = []
        """(the candidate's call number, inside an activity trial) of each hardware-counted call."""

    def request(self, cmd, timeout_s: float, pickler=None, fds=()) -> Reply:
        self.seq += 1
        cmd = parse_command(cmd.model_copy(update={"seq": self.seq}))
        self.transcript.append(_describe(cmd))
        if isinstance(cmd, Attach):
            self.args, self.outs = argument_views(cmd.blob, cmd.sets)
            cupti = bool(self.spans and cmd.cupti)  # a fake with spans stands for a CUPTI-traced worker
            result = AttachResult(arena=cmd.arena, cupti=cupti, flush_bytes=cmd.flush_bytes)
            return Reply(seq=self.seq, ok=True, attach=result)
        if isinstance(cmd, ApplySandbox):
            self.sandboxed, self.hw_prepare = True, cmd.hw_prepare
            return Reply(seq=self.seq, ok=True, sandbox=SandboxReport(mode=cmd.mode))
        if isinstance(cmd, Load):
            self.loaded, self.kind = cmd.kind in ("so", "baseline"), cmd.kind
            self.busy = cmd.busy_memsets if cmd.kind == "noop" else 0
            if cmd.kind == "baseline":
                try:
                    self.candidate = self._library(cmd)
                except Exception as exc:  # noqa: BLE001 - the real worker's answer to a failed set-up
                    self.loaded = False
                    return Reply(seq=self.seq, ok=False, error=f"baseline could not be set up: {exc}")
        elif isinstance(cmd, TrialBegin):
            self.in_trial, self.windows = cmd.cupti, []
        elif isinstance(cmd, Call) and cmd.count:
            return self._counted(cmd)
        elif isinstance(cmd, Call) and cmd.hw_count:
            return self._hw_counted(cmd)
        elif isinstance(cmd, Call):
            t0 = time.perf_counter()
            if cmd.timed and self.in_trial:
                self.windows.append(self.seq)
            if self.loaded:
                if self.sandboxed and self.sandboxed_library_error and self.kind == "baseline":
                    return Reply(seq=self.seq, ok=False, error=self.sandboxed_library_error)
                self.calls += 1
                returned = self.candidate(*self.args[cmd.set])
                if returned is not None:  # the worker's copy-back of a library that returns its outputs
                    values = returned if isinstance(returned, tuple | list) else (returned,)
                    for dst, src in zip(self.outs[cmd.set], values, strict=True):
                        dst.copy_(src.reshape(dst.shape))
            # Every call really takes the GPU time it reports, within the evaluator's wall for it (a GPU time
            # beyond its wall is a forgery, ``timing.cross_check``): 1 ms of "kernel" after the work, and for
            # the no-op 30 us more per memset of a busy one (matched calibration), as the GPU's would.
            work = time.perf_counter() - t0
            ms = 1.0 + 0.03 * self.busy if not self.loaded else 1.0 + (work * 1e3 if self.measured else 0.0)
            until = time.perf_counter() + (ms if not self.loaded or self.measured else 1.0) * 1e-3 - work
            while time.perf_counter() < until:
                pass
            times = CallResult(ev_stream_ms=ms, ev_device_ms=ms + 0.02, host_ms=ms)
            return Reply(seq=self.seq, ok=True, call=times)
        elif isinstance(cmd, TrialEnd):
            self.in_trial = False
            if not self.spans:
                return Reply(seq=self.seq, ok=True, spans=Spans())
            spans = Spans(
                spans=dict.fromkeys(self.windows, 1.0),
                activities=dict.fromkeys(self.windows, 1),
                kernels={IN_BAND_KERNEL: len(self.windows)} if self.windows else {},
            )
            return Reply(seq=self.seq, ok=True, spans=spans)
        return Reply(seq=self.seq, ok=True)

    def _counted(self, cmd: Call) -> Reply:
        """A counted call: the candidate runs (its outputs are checked); rows, or the in-trial error."""
        inside = self.in_trial and cmd.timed
        if inside and not self.silent_count_window:
            self.windows.append(self.seq)
        self.counting = True
        try:
            self.calls += 1
            self.candidate(*self.args[cmd.set])
        finally:
            self.counting = False
        time.sleep(self.count_delay_s)
        self.counted_calls.append((self.calls, inside))
        if inside and self.count_error_in_trial:
            return Reply(seq=self.seq, ok=True, counts=None, count_error=self.count_error_in_trial)
        return Reply(seq=self.seq, ok=True, counts=[COUNTED_ROW])

    def _hw_counted(self, cmd: Call) -> Reply:
        """A hardware-counted call: the candidate runs; ``hw_counts`` (or ``hw_error``) is the answer.

        Asked inside an activity trial (``timed``), its window is recorded like a timed call's (census).
        """
        if cmd.timed and self.in_trial:
            self.windows.append(self.seq)
        self.hw_counting = True
        try:
            self.calls += 1
            self.candidate(*self.args[cmd.set])
        finally:
            self.hw_counting = False
        self.hw_counted_calls.append((self.calls, self.in_trial))
        if self.hw_error:
            return Reply(seq=self.seq, ok=True, hw_count_error=self.hw_error)
        return Reply(seq=self.seq, ok=True, hw_counts=self.hw_counts)

    def _library(self, cmd: Load) -> Callable[..., Any]:
        if self.library is not None:
            return self.library
        from ptxgym.evaluation.sandboxed import library_baselines

        return library_baselines.bind(cmd.function, dict(cmd.options), self.args)

    def kill(self) -> None:
        """Nothing to kill (kept for the handle's interface)."""

    discard = kill

    def stop(self) -> None:
        """Nothing to stop; the transcript notes when the evaluator asked (``test_deferred_checks.py``)."""
        self.transcript.append("stop")

    def log_tail(self, limit: int = 3000) -> str:
        return ""


def _describe(cmd) -> str:
    if isinstance(cmd, Load):
        return f"load:{cmd.kind}"
    if isinstance(cmd, Call) and cmd.count:
        return f"count:{cmd.set}:{cmd.timed}"
    if isinstance(cmd, Call) and cmd.hw_count:
        return f"hw:{cmd.set}"
    if isinstance(cmd, Call):
        return f"call:{cmd.set}:{cmd.timed}:{cmd.flush}"
    return cmd.op


def run_in_session(
    candidate, arena, settings, scratch, seed: int = 7, pool: bool = False, baseline_ms: float | None = None
):
    """Correctness, then timing (if correct), of ``candidate`` in a CPU session: ``(result, session)``.

    As the evaluator runs a subject; ``pool``: the session may use the arena's verified pool;
    ``baseline_ms``: the baseline the slow cut-off compares with (None: no cut-off).
    """
    from ptxgym.evaluation.protocol import Load
    from ptxgym.evaluation.trusted.session import Session, SessionResult
    from ptxgym.evaluation.trusted.timing import EVENTS

    session = Session(InProcessWorker(candidate, scratch), arena, settings, EVENTS, seed, 10.0)
    session.attach(1, cupti=False)
    if pool:
        session.use_pool()
    session.calibrate(n=3)
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    result = SessionResult()
    session.correctness(result)
    if result.failure is None:
        session.timing(result, crosscheck=False, baseline_ms=baseline_ms)
    return result, session


def is_warmup(settings, index: int) -> bool:
    """Whether a session's call ``index`` (0-based) is a warm-up call.

    Calls in order: the checks, then each trial's warm-up and timed calls (a session without the slow
    cut-off's probe or a counted call).
    """
    timing = index - settings.correctness_sets
    return timing >= 0 and timing % (settings.warmup + settings.iterations) < settings.warmup


class SignedOutputMemory:
    """A GEMM cheat's memory: outputs kept by input magnitudes, replayed with the signs corrected.

    The key is the magnitudes of A[:, 0] and B[:, 0], which sign flips leave alone (the caching attacks'
    common core). ``recall`` runs first in every call: ``replayed_at`` holds the indices of the calls
    it replayed.
    """

    def __init__(self) -> None:
        self.store: dict[tuple, tuple] = {}
        self.replays, self.calls = 0, 0
        self.replayed_at: list[int] = []

    @staticmethod
    def _key(A, B) -> tuple:
        a, b = A[:, 0].float(), B[:, 0].float()
        return a, b, (tuple(a.abs().tolist()), tuple(b.abs().tolist()))

    def recall(self, A, B, C) -> bool:
        """Write the remembered output for these inputs, signs corrected; False if they are new."""
        import torch

        a, b, key = self._key(A, B)
        self.calls += 1
        if key not in self.store:
            return False
        a0, b0, c0 = self.store[key]
        sign = torch.sign(a * a0)[:, None] * torch.sign(b * b0)[None, :]
        C.copy_((c0.float() * sign).to(C.dtype))
        self.replays += 1
        self.replayed_at.append(self.calls - 1)
        return True

    def remember(self, A, B, C) -> None:
        """Keep C (already computed) under these inputs' key."""
        a, b, key = self._key(A, B)
        self.store[key] = (a.clone(), b.clone(), C.clone())


class ByReference:
    """Any task: every call's outputs from the task's own reference (a correct candidate).

    ``wrong_after``: from that call on, off by 1%; ``spoil(outputs, call)``: applied to each call's outputs.
    """

    def __init__(self, run, n_in: int, wrong_after: int | None = None, spoil=None) -> None:
        self.run, self.n_in, self.wrong_after, self.spoil, self.calls = run, n_in, wrong_after, spoil, 0

    def __call__(self, *args):
        self.calls += 1
        ins, outs = args[: self.n_in], args[self.n_in :]
        result = self.run(*ins)
        values = list(result) if len(outs) > 1 else [result]
        for out, value in zip(outs, values, strict=True):
            wrong = self.wrong_after is not None and self.calls > self.wrong_after
            out.copy_(value * 1.01 if wrong and out.dtype.is_floating_point else value)
        if self.spoil is not None:
            self.spoil(outs, self.calls)
