"""The exception tree of ptxgym.

Failure model: anything wrong with an *action* (the model's text, its code, its kernel) is never an
exception out of ``env.step``; it becomes a Feedback with a precise status. Exceptions are for
mistakes of the *user* of the library (a bad task id, a missing toolchain, a bad config) and for
infrastructure faults the caller must see. Every message says what was expected, what was found and
what to do.
"""

from __future__ import annotations


class PtxgymError(Exception):
    """Base class of every error ptxgym raises on purpose."""


class UsageError(PtxgymError, ValueError):
    """Bad input from the user of a command or function (a flag, a file, a name).

    The ``ptxgym`` command prints its message as one line and exits with status 2.
    """


class UnknownTaskError(PtxgymError, KeyError):
    """A task id or definition name that the catalog does not hold."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown task"


class SchemaError(PtxgymError, ValueError):
    """A FlashInfer-Trace record that does not validate."""


class ToolchainNotFoundError(PtxgymError, RuntimeError):
    """nvcc, cuobjdump or the TVM-FFI headers could not be found."""


class EvaluatorUnavailableError(PtxgymError, RuntimeError):
    """A GPU evaluator was asked for but cannot run here (no GPU, no torch, ...)."""


class InfraError(PtxgymError, RuntimeError):
    """The evaluation infrastructure itself failed (not the candidate)."""


def validation_summary(exc: Exception, limit: int = 3) -> str:
    """A pydantic ``ValidationError`` as one short line: ``field: message`` for the first ``limit`` errors.

    pydantic's own text spans several lines per error (input value, documentation link); a user needs
    the field and what is wrong with it. Any other exception gives its ``str``.
    """
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return " ".join(str(exc).split())
    parts = []
    items = errors()
    for err in items[:limit]:
        where = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return " ".join(("; ".join(parts) + more).split())
