"""How the ``ptxgym`` command reports bad input: one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import json

from pydantic import ValidationError

from ptxgym.records.errors import PtxgymError

#: What bad input raises; each becomes one line on stderr and exit status 2. Anything else is a bug and
#: keeps its traceback.
USAGE_ERRORS = (
    PtxgymError,
    ValueError,
    KeyError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    json.JSONDecodeError,
)
EXIT_USAGE = 2


def usage_message(exc: BaseException) -> str:
    """One line for a usage error (pydantic's multi-line reports are folded to their first error)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        text = f"{where}: {first.get('msg', exc)}" if where else str(first.get("msg", exc))
    elif isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    else:
        text = str(exc)
    return " ".join(text.split())
