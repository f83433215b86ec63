"""CUPTI activity spans inside a worker: all GPU work of a call, on every stream.

For each timed call the worker takes a CUPTI host timestamp after a device-wide synchronisation (the L2
flush is done by then) and another after the call's closing synchronisation. Every kernel, memcpy and
memset whose start lies in that window belongs to the call, whichever stream or host thread launched
it; the call's GPU time is max(end) - min(start) over them. CUPTI timestamps and ``get_timestamp`` share
one clock.

The same records carry the in-band kernel census: the name of every kernel that started inside a timed
window, and every module the driver loaded in the process since tracing began (its cubin's SHA-256 and
the functions its ELF symbol table defines), so the trusted side can tell a kernel of the built module
from one of the same name loaded from memory (``evaluation/trusted/census.py``).

This runs in the candidate's process, so the candidate can disable or disturb it; the trusted side
therefore treats these spans as claims and cross-checks them against its own wall clock.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections import Counter
from typing import Any

from ptxgym.cpu.cubin_symbols import elf_functions
from ptxgym.evaluation.protocol import LoadedModule

_BUFFER_BYTES = 8 * 1024 * 1024
_MAX_CUBIN_BYTES = 1 << 30


class CuptiSpans:
    """Collects GPU activity records and cuts them into per-call spans."""

    def __init__(self, module_census: bool = False) -> None:
        from cupti import cupti

        self._cupti = cupti
        self._kinds = (
            cupti.ActivityKind.CONCURRENT_KERNEL,
            cupti.ActivityKind.MEMCPY,
            cupti.ActivityKind.MEMSET,
        )
        self._kind_ids = {int(k) for k in self._kinds}
        self._kernel_kind = int(cupti.ActivityKind.CONCURRENT_KERNEL)
        self._records: list[tuple[int, int, str]] = []
        self._windows: list[tuple[int, int, int]] = []
        self._modules: dict[int, LoadedModule] = {}
        self._enabled = False
        self._subscriber: Any = None
        cupti.activity_register_callbacks(self._requested, self._completed)
        # Module loads come from the callback API (the activity API produces no module records), from now
        # on: the candidate's module (and any module it loads itself) is loaded after this, lazily at its
        # first launch.
        self.census_error = "" if module_census else "module records not requested"
        if module_census:
            try:
                self._subscriber = cupti.subscribe(self._on_resource, None)
                cupti.enable_callback(
                    1, self._subscriber, cupti.CallbackDomain.RESOURCE, cupti.CallbackIdResource.MODULE_LOADED
                )
            except Exception as exc:  # noqa: BLE001 - no module records; the census says why
                self.census_error = f"CUPTI module callback unavailable: {exc}"[:300]

    def _requested(self) -> tuple[int, int]:
        return _BUFFER_BYTES, 0

    def _completed(self, activities: list[Any]) -> None:
        for act in activities:
            kind = int(act.kind)
            if kind in self._kind_ids:
                name = str(act.name) if kind == self._kernel_kind else ""
                self._records.append((int(act.start), int(act.end), name))

    def _on_resource(self, userdata: Any, domain: Any, cbid: Any, cbdata: Any) -> None:
        """CUPTI's module-loaded callback: hash the cubin while the driver still holds it."""
        try:
            self._module(_ModuleData.from_address(_descriptor(cbdata)))
        except Exception as exc:  # noqa: BLE001 - a record we cannot read must not stop the tracing
            self.census_error = f"unreadable CUPTI module record: {exc}"[:300]

    def _module(self, data: Any) -> None:
        """Record one loaded module (``CUpti_ModuleResourceData``: moduleId, cubinSize, pCubin)."""
        try:
            self._read_module(int(data.moduleId), int(data.pCubin or 0), int(data.cubinSize))
        except Exception as exc:  # noqa: BLE001 - noted; the census then proves nothing
            self.census_error = f"unreadable CUPTI module record: {exc}"[:300]

    def _read_module(self, module_id: int, ptr: int, size: int) -> None:
        if not ptr or not 0 < size <= _MAX_CUBIN_BYTES:
            self._modules[module_id] = LoadedModule(sha256="", size=size, functions=None)
            return
        image = ctypes.string_at(ptr, size)
        self._modules[module_id] = LoadedModule(
            sha256=hashlib.sha256(image).hexdigest(), size=size, functions=elf_functions(image)
        )

    def now(self) -> int:
        """CUPTI host timestamp, ns (same clock as the activity records)."""
        return int(self._cupti.get_timestamp())

    def begin(self) -> None:
        """Start collecting for a trial."""
        self._records.clear()
        self._windows.clear()
        for kind in self._kinds:
            self._cupti.activity_enable(kind)
        self._enabled = True

    def window(self, seq: int, start_ns: int, end_ns: int) -> None:
        """Register the host window of one timed call."""
        self._windows.append((seq, start_ns, end_ns))

    def end(self) -> tuple[dict[int, float | None], dict[int, int]]:
        """Stop collecting; per call: span in ms (None if no activity) and activity count."""
        if self._enabled:
            self._cupti.activity_flush_all(1)
            for kind in self._kinds:
                self._cupti.activity_disable(kind)
            self._enabled = False
        return spans_by_window(self._records, self._windows)

    def census(self) -> tuple[dict[str, int], list[LoadedModule]]:
        """After ``end``: kernel launches inside the trial's windows by name, and new modules.

        Modules are those loaded since the previous census, each reported once.
        """
        kernels = kernels_by_window(self._records, self._windows)
        modules = list(self._modules.values())
        self._modules.clear()
        return kernels, modules


class _ModuleData(ctypes.Structure):
    """``CUpti_ModuleResourceData`` as cupti_callbacks.h lays it out."""

    _fields_ = [("moduleId", ctypes.c_uint32), ("cubinSize", ctypes.c_size_t), ("pCubin", ctypes.c_void_p)]


class _ResourceData(ctypes.Structure):
    """``CUpti_ResourceData``: context, resource handle (a union of pointers), resource descriptor."""

    _fields_ = [("context", ctypes.c_void_p), ("handle", ctypes.c_void_p), ("descriptor", ctypes.c_void_p)]


def _descriptor(cbdata: Any) -> int:
    """The address of a resource callback's ``CUpti_ModuleResourceData``.

    The binding hands the callback data over as an object with ``resource_descriptor`` or as the address
    of the C struct; both are read.
    """
    if hasattr(cbdata, "resource_descriptor"):
        return int(cbdata.resource_descriptor)
    address = int(cbdata.ptr) if hasattr(cbdata, "ptr") else int(cbdata)
    descriptor = _ResourceData.from_address(address).descriptor
    if not descriptor:
        raise ValueError("the resource callback carried no module data")
    return int(descriptor)


def spans_by_window(
    records: list[tuple[int, int, str]], windows: list[tuple[int, int, int]]
) -> tuple[dict[int, float | None], dict[int, int]]:
    """Per window: (max end - min start) in ms over records starting inside it, and their count."""
    spans: dict[int, float | None] = {}
    counts: dict[int, int] = {}
    ordered = sorted(records)
    for seq, lo, hi in windows:
        inside = [r for r in ordered if lo <= r[0] <= hi]
        counts[seq] = len(inside)
        spans[seq] = (max(r[1] for r in inside) - min(r[0] for r in inside)) / 1e6 if inside else None
    return spans, counts


def kernels_by_window(
    records: list[tuple[int, int, str]], windows: list[tuple[int, int, int]]
) -> dict[str, int]:
    """Launches per kernel name over the records (kernels: non-empty names) starting inside any window."""
    counted: Counter[str] = Counter()
    for start, _, name in records:
        if name and any(lo <= start <= hi for _, lo, hi in windows):
            counted[name] += 1
    return dict(counted)
