"""Does the exported entry point take the task's arguments? A static check of the source, before nvcc.

The solution ABI passes the definition's inputs, then its outputs, to the exported function (scalars as
plain C++ values). A kernel written for another task (a GEMM's ``run(A, B, C)`` answered to an attention
task) would build and then fail at its first call; this check names the mismatch at once. It reads the
``TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, function)`` line and the definition of ``function`` (the last
component of a qualified name). When either cannot be found with certainty (macros, overloads, a
declaration in another file), it says nothing: the run stage then decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_EXPORT = re.compile(r"TVM_FFI_DLL_EXPORT_TYPED_FUNC\s*\(\s*(\w+)\s*,\s*([\w:]+)\s*\)")


def _parameters(text: str) -> int:
    """Parameters in a C++ parameter list (commas at bracket depth 0; ``void`` and empty are 0)."""
    body = text.strip()
    if body in ("", "void"):
        return 0
    depth, count = 0, 1
    for ch in body:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count


def entry_arity(sources: Mapping[str, str], entry: str) -> int | None:
    """How many parameters the function exported as ``entry`` takes, or None when not certain."""
    text = "\n".join(sources.values())
    exported = [m.group(2) for m in _EXPORT.finditer(text) if m.group(1) == entry]
    if len(exported) != 1:
        return None
    name = exported[0].split("::")[-1]
    defs = re.findall(rf"\b{re.escape(name)}\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:noexcept\s*)?\{{", text)
    if len(defs) != 1:
        return None
    return _parameters(defs[0])


def signature_problem(sources: Mapping[str, str], entry: str, expected: int, names: list[str]) -> str | None:
    """A message when the exported function's parameter count is not the task's, else None."""
    got = entry_arity(sources, entry)
    if got is None or got == expected:
        return None
    return (
        f"the exported entry point {entry!r} takes {got} parameter(s), but this task passes {expected} "
        f"({', '.join(names)}: the inputs, then the outputs); is this kernel written for another task?"
    )
