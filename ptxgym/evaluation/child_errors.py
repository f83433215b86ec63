"""How a candidate's process failed to answer: the errors both process handles raise.

Shared by the Python worker's handle (``trusted/pool.py``) and the native runner's
(``trusted/native_worker.py``, a subclass of it), so the verdict code (``trusted/verdicts.py``) maps
either onto the same statuses: a timeout is TIMEOUT, a dead process CRASH, a malformed or forged
reply RUNTIME_ERROR.
"""

from __future__ import annotations

import signal


class WorkerError(Exception):
    """A candidate's process did not answer a command properly."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.log_tail = log_tail


class WorkerTimeout(WorkerError):
    """No complete reply within the time limit (the candidate hangs)."""


class WorkerDied(WorkerError):
    """The process ended (exit, abort, signal) before replying."""

    def __init__(self, message: str, log_tail: str = "", returncode: int | None = None) -> None:
        super().__init__(message, log_tail)
        self.returncode = returncode


class ProtocolViolation(WorkerError):
    """The reply was malformed, too long, or answered another command."""


def describe_exit(returncode: int | None) -> str:
    """'exit code 3' or 'signal SIGSEGV' for a Popen return code."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"
