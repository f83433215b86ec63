"""How the ``ptxgym`` command reports bad input: one line on stderr, exit status 2, no traceback.

This is the one place: a subcommand raises (``UsageError`` for what it checks itself; the library's
``PtxgymError``, ``ValueError`` and friends for what it finds) and ``ptxgym.cli.main`` turns the exception
into ``ptxgym COMMAND: message`` and exit status 2. A message about a config field names the flag the user
typed (``--turns``, not ``turns``) when the subcommand has one of that name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from pydantic import ValidationError

from ptxgym.records.errors import PtxgymError, UsageError, validation_summary

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

__all__ = ["EXIT_USAGE", "USAGE_ERRORS", "UsageError", "usage_message"]


def usage_message(exc: BaseException, flags: Iterable[str] = ()) -> str:
    """One line for a usage error; a field that is also a flag of the command is named as the flag.

    pydantic's multi-line reports are folded to ``field: message`` (the first few errors); ``flags`` are
    the option strings of the subcommand (``--turns``, ``--reward``...).
    """
    if isinstance(exc, ValidationError):
        return _fields_as_flags(validation_summary(exc), set(flags))
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split())


def _fields_as_flags(text: str, flags: set[str]) -> str:
    """``turns: Input should be ...`` -> ``--turns: Input should be ...`` where the flag exists.

    Fields are matched by their last dotted part (``policy.model`` -> ``--model``).
    """

    def as_flag(match: re.Match[str]) -> str:
        flag = "--" + match.group(1).rsplit(".", 1)[-1].replace("_", "-")
        return f"{flag}:" if flag in flags else match.group(0)

    return re.sub(r"(?:^|(?<=; ))([a-z][a-z0-9_.]*):", as_flag, text)
