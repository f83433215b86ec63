"""The kernel census: did only the candidate's own module run during its calls?

Two readings feed it. Nsight Compute's offline run (``ncu.py``) names the kernels it profiled. The worker's
CUPTI tracing (``sandboxed/cupti_spans.py``) reports, for the very calls that were timed and (a subset)
verified, every kernel that belongs to a call's window (started inside it, or ran into it:
``cupti_spans.Records``), and every module the driver loaded in the
process with its cubin's SHA-256 and the functions its ELF symbol table defines.

A kernel is the module's when its name is one of the built module's (``is_own_kernel``). A name alone is
not enough: a candidate can load a cubin from memory whose kernels carry the built module's names while
the built module's own copies never run (issue 11 item 11). So the in-band census also asks which loaded
modules define each of the built module's kernel names: in an honest run exactly one image does (the
candidate's module; reloading it gives the same hash), so a second, different image defining one of
those names means code loaded from memory, and the turn is FOREIGN_KERNEL. Library and harness modules
(torch, cuBLAS) do not define the candidate's mangled kernel names, so they never trip it.

The worker's reports are the candidate process's word: they can only take reward away here, never add it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from ptxgym.evaluation.protocol import LoadedModule
from ptxgym.evaluation.trusted.base import BuiltCandidate
from ptxgym.evaluation.trusted.session import CENSUS_OVERFLOW, SessionResult

MAX_NAMES_SHOWN = 5


def _base_name(demangled: str) -> str:
    """``void ns::k<128>(float*)`` -> ``k``: the function's own name in a demangled signature."""
    head = demangled.split("(", 1)[0]
    while "<" in head:
        stripped = re.sub(r"<[^<>]*>", "", head)
        if stripped == head:
            break
        head = stripped
    words = head.split()
    return words[-1].split("::")[-1] if words else ""


def is_own_kernel(profiled: str, module_kernels: Sequence[str]) -> bool:
    """Whether a profiled kernel name is one of the module's kernels (given as mangled names).

    ncu prints demangled names, cuobjdump mangled ones: a kernel is the module's when its name is one of
    them verbatim (``extern "C"`` or mangled) or its function name appears in one as an Itanium source
    name (``<length><name>``). By name only: a kernel loaded from memory under one of the module's names
    passes (issue 11 item 11); library and other foreign names do not.
    """
    name = profiled.strip()
    if name in module_kernels:
        return True
    base = _base_name(name)
    if not base:
        return False
    encoded = re.compile(rf"(?<![0-9]){len(base)}{re.escape(base)}")
    return any(k == base or (k.startswith("_Z") and encoded.search(k)) for k in module_kernels)


def census_failure(
    kernels: Mapping[str, int], modules: Iterable[LoadedModule], module_kernels: Sequence[str]
) -> str:
    """Why the in-band census rejects the run ('' when only the built module's kernels ran).

    ``kernels``: launches by name inside the timed windows; ``modules``: every module loaded in the worker
    after tracing began; ``module_kernels``: the built module's kernels (mangled). A module without device
    code has none, so any kernel that ran is foreign (a library's, reached from host code).
    """
    foreign = [n for n in kernels if not is_own_kernel(n, module_kernels)]
    if foreign:
        shown = ", ".join(foreign[:MAX_NAMES_SHOWN])[:600]
        more = f" and {len(foreign) - MAX_NAMES_SHOWN} more" if len(foreign) > MAX_NAMES_SHOWN else ""
        return (
            f"{len(foreign)} kernel(s) that are not in the candidate's built module ran during its timed "
            f"calls (CUPTI, in band): {shown}{more}"
        )
    own = set(module_kernels)
    images: dict[str, set[str]] = {}
    for module in modules:
        for name in set(module.functions or ()) & own:
            images.setdefault(name, set()).add(module.sha256)
    twice = sorted(n for n, shas in images.items() if len(shas) > 1)
    if twice:
        count = len(images[twice[0]])
        return (
            f"kernel {twice[0][:200]} of the built module is defined by {count} different module images "
            "loaded in the candidate's process: code loaded from memory under the module's kernel names"
        )
    return ""


def in_band_census(
    result: SessionResult, candidate: BuiltCandidate | None, cupti: bool, details: dict
) -> tuple[str, bool]:
    """The in-band census of a subject's timed calls: (why it fails or '', proved).

    ``proved``: the census ran and found only the built module's kernels, from one image. What it saw goes
    to ``details["census"]``. A census the worker could not take (no module records, no CUPTI backend, a
    subject with no kernel list: the baseline, a trusted bridge) proves nothing and fails nothing; one it
    overflowed fails. A loaded module whose functions could not be read (not an ELF image) cannot be
    tied to names: the census is then not proved (``details["census"]["opaque_modules"]``).
    """
    if not cupti or not result.census_trials or candidate is None or candidate.kernels is None:
        return "", False
    opaque = sum(1 for m in result.modules if m.functions is None)
    details["census"] = {
        "kernels": dict(list(result.kernels.items())[:20]),
        "modules_loaded": len(result.modules),
        "opaque_modules": opaque,
        "error": result.census_error,
    }
    if result.census_error == CENSUS_OVERFLOW:
        return f"in-band kernel census: {CENSUS_OVERFLOW}", False
    failure = census_failure(result.kernels, result.modules, candidate.kernels)
    return failure, not failure and not result.census_error and not opaque
