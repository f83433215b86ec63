"""Parse the resource report that ``nvcc -Xptxas -v`` prints, one KernelResources per entry function.

The report looks like this (CUDA 13; older releases also print ``N bytes cmem[0]`` on the ``Used`` line)::

    ptxas info    : Compiling entry function '_Z5heavyPfi' for 'sm_90a'
    ptxas info    : Function properties for _Z5heavyPfi
        528 bytes stack frame, 1316 bytes spill stores, 1344 bytes spill loads
    ptxas info    : Used 32 registers, used 0 barriers, 528 bytes cumulative stack size

Only entry functions (kernels) are reported; properties of non-inlined device functions are skipped.
"""

from __future__ import annotations

import re

from ptxgym.records.feedback import KernelResources

# ptxas's own lines only (``ptxas info``, and the indented frame line under a properties line): the log
# also holds the compiler's diagnostics, whose text a candidate chooses (``#warning Used 9 registers``)
_INFO = re.compile(r"^ptxas info\s*:\s*")
_ENTRY = re.compile(r"^Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPS = re.compile(r"^Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"^\s+(?P<stack>\d{1,12}) bytes stack frame, (?P<st>\d{1,12}) bytes spill stores, "
    r"(?P<ld>\d{1,12}) bytes spill loads"
)
_USED = re.compile(r"^Used (?P<regs>\d{1,12}) registers")
_FIELDS = {
    "barriers": re.compile(r"\bused (\d{1,12}) barriers"),
    "shared_bytes": re.compile(r"\b(\d{1,12}) bytes smem"),
    "constant_bytes": re.compile(r"\b(\d{1,12}) bytes cmem\[0\]"),
}
_WARNING = re.compile(
    r"^ptxas (?:warning\s*:\s*(?P<warn>.*)|info\s*:\s*(?P<info>.*Potential Performance Loss.*))$"
)


def parse_ptxas_report(log: str) -> list[KernelResources]:
    """KernelResources for every entry function in a ``-Xptxas -v`` log, in report order."""
    kernels: dict[str, dict[str, int | None]] = {}
    current: str | None = None
    props_for: str | None = None
    for raw in log.splitlines():
        info = _INFO.match(raw)
        line = raw[info.end() :] if info else ""
        if m := _ENTRY.match(line):
            current = m.group("name")
            kernels.setdefault(current, {})
            props_for = None
        elif m := _PROPS.match(line):
            props_for = m.group("name")
        elif (m := _FRAME.match(raw)) and props_for in kernels:
            kernels[props_for].update(
                stack_bytes=int(m.group("stack")),
                spill_stores=int(m.group("st")),
                spill_loads=int(m.group("ld")),
            )
            props_for = None
        elif (m := _USED.match(line)) and current is not None:
            values = kernels[current]
            values["registers"] = int(m.group("regs"))
            values["shared_bytes"] = 0  # CUDA 13 prints "N bytes smem" only when N > 0
            for key, pattern in _FIELDS.items():
                found = pattern.search(line)
                if found:
                    values[key] = int(found.group(1))
            current = None
    return [KernelResources(kernel=name, **values) for name, values in kernels.items()]


def ptxas_warnings(log: str) -> list[str]:
    """ptxas performance advisories and warnings (e.g. serialized wgmma), deduplicated, in order."""
    seen: dict[str, None] = {}
    for line in log.splitlines():
        m = _WARNING.match(line.strip())
        if m:
            seen.setdefault((m.group("warn") or m.group("info")).strip(), None)
    return list(seen)
