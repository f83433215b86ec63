"""A worker stand-in that runs a Python "candidate" in-process on the arena's own CPU buffers.

The trusted ``Session`` and ``Arena`` run unchanged against it: commands are the real protocol models,
validated with ``parse_command``; the attach layout is decoded by the real worker's ``argument_views``;
every answer is a real ``Reply``. Only the process boundary and the GPU are missing, so what it tests is
the trusted side's judgement of a candidate's *outputs* (caching and replay tricks), not isolation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptxgym.evaluation.protocol import (
    Attach,
    AttachResult,
    Call,
    CallResult,
    Load,
    Reply,
    Spans,
    TrialEnd,
    parse_command,
)
from ptxgym.evaluation.sandboxed.worker import argument_views


class InProcessWorker:
    """Answers commands like a worker; ``candidate(*args)`` writes the outputs of one call."""

    def __init__(self, candidate: Callable[..., Any], scratch: Path) -> None:
        self.candidate = candidate
        self.scratch = scratch
        self.seq = 0
        self.primed: dict[str, object] = {}
        self.args: list[list[Any]] = []
        self.loaded = False
        self.calls = 0

    def request(self, cmd, timeout_s: float, pickler=None, fds=()) -> Reply:
        self.seq += 1
        cmd = parse_command(cmd.model_copy(update={"seq": self.seq}))
        if isinstance(cmd, Attach):
            self.args, _ = argument_views(cmd.blob, cmd.sets)
            result = AttachResult(arena=cmd.arena, cupti=False, flush_bytes=cmd.flush_bytes)
            return Reply(seq=self.seq, ok=True, attach=result)
        if isinstance(cmd, Load):
            self.loaded = cmd.kind == "so"
        elif isinstance(cmd, Call):
            if self.loaded:
                self.calls += 1
                self.candidate(*self.args[cmd.set])
            times = CallResult(ev_stream_ms=1.0, ev_device_ms=1.02, host_ms=1.0)
            return Reply(seq=self.seq, ok=True, call=times)
        elif isinstance(cmd, TrialEnd):
            return Reply(seq=self.seq, ok=True, spans=Spans())
        return Reply(seq=self.seq, ok=True)

    def kill(self) -> None:
        """Nothing to kill (kept for the handle's interface)."""

    discard = kill

    def log_tail(self, limit: int = 3000) -> str:
        return ""
