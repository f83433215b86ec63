"""CUPTI activity spans inside a worker: all GPU work of a call, on every stream.

For each timed call the worker takes a CUPTI host timestamp after a device-wide synchronisation (the L2
flush is done by then) and another after the call's closing synchronisation. Every kernel, memcpy and
memset whose start lies in that window belongs to the call, whichever stream or host thread launched
it, and so does a kernel that starts before the window and runs ``RUN_IN_NS`` or more into it
(``Records``); the call's GPU time is max(end) - min(start) over them. CUPTI timestamps and
``get_timestamp`` share one clock, but not exactly: on the H100 an honest kernel's start was stamped
0.6-8.9 us before the window its launch lay in, so with the start rule alone such a call had no GPU time
(1 to 48 of a trial's 50 calls, a TIMING_ANOMALY for an honest kernel:
``bench/results/throughput_2026-12-06_s38_*``). A memcpy or memset keeps the start rule: the runner's L2
flush, a memset, ends just before every window. A kernel shorter than the skew that runs first in a call
can be stamped wholly before its window. What such a kernel can do is bounded by the skew: it must end
within ~9 us of GPU time after its call began, so its work is under the wall cross-check's 0.3 ms floor,
and its MMA work at the GPU's dense BF16 peak (~1 PFLOP/s, ~9 GFLOP) is at most 1.5-4.4% of a primary
task's FLOPs (GEMM 601, MHA forward 412, causal 206 GFLOP), far under the 50% the target credit needs
(``feedback.MIN_MMA_SHARE``); not so for the suite's smallest tasks (a GEMM at M = 128 is ~6 GFLOP),
whose whole work a foreign kernel under names of its own could do unseen inside the skew. So a kernel
also belongs to the window its launch lies in: the native runner collects the launch API calls'
activity records (host stamps, on the windows' clock) and joins them to the kernel records by CUPTI's
correlation id (``Record``, ``launch``; the runner's ``join_launches``; every launch came back on the
H100: ``bench/results/gpu_tests_2026-12-06_s42_runner_h100.txt``). This worker collects none: its
kernels keep the stamp rules alone. A module that defines the built module's kernel names is
FOREIGN_KERNEL whenever it runs (``census.py``).

The same records carry the in-band kernel census: the name of every kernel that belongs to a timed
window, and every module the driver loaded in the process since tracing began (its cubin's SHA-256 and
the functions its ELF symbol table defines), so the trusted side can tell a kernel of the built module
from one of the same name loaded from memory (``evaluation/trusted/census.py``).

This runs in the candidate's process, so the candidate can disable or disturb it; the trusted side
therefore treats these spans as claims and cross-checks them against its own wall clock.
"""

from __future__ import annotations

import bisect
import ctypes
import hashlib
import itertools
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ptxgym.cpu.cubin_symbols import elf_functions
from ptxgym.evaluation.protocol import LoadedModule

_BUFFER_BYTES = 8 * 1024 * 1024
_MAX_CUBIN_BYTES = 1 << 30
SETTLE_S = 0.03
"""The longest a trial's end waits for CUPTI to complete its records (``settle_flush``; the runner's
``kSettleNs``). An honest trial's records are back at the first default flush; a window with no record
(a call that launched nothing) waits this long once per trial."""


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
        self._records: list[Record] = []
        self.incomplete = 0
        """Records of this trial handed back without their timestamps (``complete``): counted, not cut."""
        self.flushes = 0
        """Default flushes the last ``end`` made (``settle_flush``)."""
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
                start, end = int(act.start), int(act.end)
                if not complete(start, end):
                    self.incomplete += 1
                    continue
                name = kernel_name(act.name) if kind == self._kernel_kind else ""
                self._records.append((start, end, name))

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
        self.incomplete = self.flushes = 0
        for kind in self._kinds:
            self._cupti.activity_enable(kind)
        self._enabled = True

    def window(self, seq: int, start_ns: int, end_ns: int) -> None:
        """Register the host window of one timed call."""
        self._windows.append((seq, start_ns, end_ns))

    def end(self) -> tuple[dict[int, float | None], dict[int, int]]:
        """Stop collecting; per call: span in ms (None if no activity) and activity count."""
        if self._enabled:
            self.flushes = settle_flush(
                lambda forced: self._cupti.activity_flush_all(1 if forced else 0),
                lambda: every_window_seen(self._records, self._windows),
            )
            for kind in self._kinds:
                self._cupti.activity_disable(kind)
            self._enabled = False
        return spans_by_window(self._records, self._windows)

    def strays(self) -> tuple[int, float | None]:
        """After ``end``: its records in no window, and its empty windows' nearest kernels (``strays``)."""
        return strays(self._records, self._windows)

    def ran_in(self) -> int:
        """After ``end``: its kernel records that belong to a window only by running into it (``ran_in``)."""
        return ran_in(self._records, self._windows)

    def launched_in(self) -> int:
        """After ``end``: its kernel records in a window only by their launch (``launched_in``).

        None here: this worker collects no launch records.
        """
        return launched_in(self._records, self._windows)

    def launch_known(self) -> int:
        """After ``end``: its kernel records whose launch is known (``launch_known``; none here)."""
        return launch_known(self._records)

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


UNNAMED_KERNEL = "(unnamed kernel)"
"""A kernel record's name when CUPTI gives none or an empty one (``kernel_name``)."""


def kernel_name(name: object) -> str:
    """A kernel record's name as the census reads it (the runner's ``kernel_name``).

    A kernel record without a name (None, or empty: the record's field allows it; whether a crafted
    module can launch a nameless function was not tried, so none is let through) is ``UNNAMED_KERNEL``,
    never "" (a memcpy's or memset's, which the census passes over) nor "None": no built module defines
    that name, so the census finds it foreign.
    """
    return str(name) if name else UNNAMED_KERNEL


def complete(start: int, end: int) -> bool:
    """Whether a record's timestamps are filled in: a forced flush hands back incomplete ones with 0."""
    return start != 0 and end != 0 and end >= start


RUN_IN_NS = 50_000
"""How far past a window's start a kernel that started before it must run to belong to it (``Records``;
the runner's ``kRunInNs``): an honest kernel stamped a few us early runs on for nearly its whole length,
while a kernel that ended just before the window (the Python worker's L2 flush, a ``zero_``; the range
profiler's WaitNs before the hardware-counted call) could reach past its start only by a stamp that
much late."""


def run_in(lo: int) -> int:
    """The end a kernel starting before ``lo`` must reach to belong to its window (at most 2**64 - 1)."""
    return min(lo + RUN_IN_NS, _UINT64_MAX)


Record = tuple[int, int, str] | tuple[int, int, str, int]
"""(start, end, name) of a GPU activity (a memcpy's or memset's name is ""), and for a kernel whose
launch is known, the host stamp of the API call that launched it (the runner joins it by CUPTI's
correlation id; this worker does not collect launch records, so its kernels' launches are unknown)."""


def launch(record: Record) -> int:
    """A record's launch stamp (0: unknown)."""
    return record[3] if len(record) > 3 else 0


class Records:
    """A trial's records sorted for the window look-ups (``belonging``; the runner's ``Records``).

    A record belongs to a window [lo, hi] when it starts inside it, or when it is a kernel (a named
    record) that starts before lo and ends at least ``RUN_IN_NS`` past it: a stamp skewed early (module
    docstring), or a kernel launched before the window that runs into it, whose whole run then counts in
    the call's span and census (before, such a kernel escaped both); or when it is a kernel whose launch
    (``launch``: the host stamp of its launch API call) lies inside it, whatever its own stamps say: a
    kernel shorter than the skew, stamped wholly before its window. Sorted look-ups: a trial may hold
    many records.
    """

    def __init__(self, records: list[Record]) -> None:
        self.by_start = sorted(records, key=lambda r: r[0])
        self.starts = [r[0] for r in self.by_start]
        kernels = [r for r in self.by_start if r[2]]
        self.kernel_starts = [r[0] for r in kernels]
        self.kernel_ends = [r[1] for r in kernels]
        self.reach = list(itertools.accumulate(self.kernel_ends, max))
        """The furthest end among the kernels up to each one (by start)."""
        self.by_launch = sorted((r for r in kernels if launch(r)), key=launch)
        self.launches = [launch(r) for r in self.by_launch]

    def _launched(self, lo: int, hi: int) -> list[Record]:
        """The kernels launched inside [lo, hi] (none where hi < lo)."""
        a = bisect.bisect_left(self.launches, lo)
        return self.by_launch[a : max(a, bisect.bisect_right(self.launches, hi))]

    def _inside(self, lo: int, hi: int) -> tuple[int, int]:
        """The records starting inside [lo, hi]: by_start[a:b] (empty where hi < lo)."""
        a = bisect.bisect_left(self.starts, lo)
        return a, max(a, bisect.bisect_right(self.starts, hi))

    def belonging(self, lo: int, hi: int) -> tuple[int, int, int]:
        """(count, min start, max end) of the records that belong to [lo, hi]; count 0: none (0, 0)."""
        a, b = self._inside(lo, hi)
        count = b - a
        first = self.starts[a] if count else 0
        last = max((r[1] for r in self.by_start[a:b]), default=0)
        k, reach = bisect.bisect_left(self.kernel_starts, lo), run_in(lo)  # kernels before lo: [0, k)
        if k and self.reach[k - 1] >= reach:
            j = bisect.bisect_left(self.reach, reach, 0, k)  # the earliest-starting one that runs in
            count += sum(self.kernel_ends[i] >= reach for i in range(j, k))
            first = self.kernel_starts[j]
            last = max(last, self.reach[k - 1])
        for start, end, *_ in self._launched(lo, hi):  # neither starting inside nor running in
            if lo <= start <= hi or (start < lo and end >= reach):
                continue
            first, last = (min(first, start), max(last, end)) if count else (start, end)
            count += 1
        return count, first, last

    def holds(self, lo: int, hi: int) -> bool:
        """Whether a record belongs to [lo, hi] (sorted look-ups alone)."""
        a, b = self._inside(lo, hi)
        k = bisect.bisect_left(self.kernel_starts, lo)
        return b > a or (k > 0 and self.reach[k - 1] >= run_in(lo)) or bool(self._launched(lo, hi))


def every_window_seen(records: list[Record], windows: list[tuple[int, int, int]]) -> bool:
    """Whether a record belongs to every window (``Records``): all back, unless a call launched nothing."""
    index = Records(records)
    return all(index.holds(lo, hi) for _, lo, hi in windows)


def settle_flush(
    flush: Callable[[bool], Any],
    seen: Callable[[], bool],
    wait_s: float = SETTLE_S,
    clock: Callable[[], float] = time.monotonic,
    nap: Callable[[], Any] = lambda: time.sleep(0.0002),
) -> int:
    """A trial's last flushes; the number of default flushes made.

    ``flush(False)`` (CUPTI's default flush: only buffers whose records are all complete) until
    ``seen()`` or ``wait_s`` has passed, ``nap()`` between tries; then ``flush(True)`` (forced: the rest,
    incomplete records too, with timestamps of 0). Honest calls' records went missing on a loaded host
    (no GPU time, and the candidate, timed twice, a TIMING_ANOMALY:
    ``bench/results/throughput_2026-12-06_s33_spares4_h100.txt``); a forced flush at once would drop
    any CUPTI had not completed, which this rules out. It was not that loss's cause: the lossy trials
    of ``throughput_2026-12-06_s35_quiet_h100.txt`` had no incomplete record (``strays`` now says where
    the records fell).
    """
    tries, until = 0, clock() + wait_s
    while True:
        flush(False)
        tries += 1
        if seen() or clock() >= until:
            break
        nap()
    flush(True)
    return tries


def placements(records: list[Record], windows: list[tuple[int, int, int]]) -> list[int]:
    """Per record: 0 in no window, 1 starting inside one, 2 a kernel running into one, 3 launched in one.

    3: a kernel launched inside a window that neither starts inside one nor runs into one (``Records``).
    Sorted look-ups (the runner's ``placement``).
    """
    spans = sorted((lo, hi) for _, lo, hi in windows)
    los, reach, top = [lo for lo, _ in spans], [], 0
    for _, hi in spans:
        top = max(top, hi)
        reach.append(top)  # the furthest end among windows starting at or before this one

    def inside(t: int, at: int) -> bool:
        return at > 0 and reach[at - 1] >= t  # at: the windows starting at or before t, [0, at)

    def placed(r: Record) -> int:
        start, end, name = r[0], r[1], r[2]
        at = bisect.bisect_right(los, start)
        if inside(start, at):
            return 1
        if not name:
            return 0
        if at < len(los) and run_in(los[at]) <= end:
            return 2  # a kernel running into the next window
        t = launch(r)
        return 3 if t and inside(t, bisect.bisect_right(los, t)) else 0

    return [placed(r) for r in records]


def in_some_window(records: list[Record], windows: list[tuple[int, int, int]]) -> list[bool]:
    """Per record, whether it belongs to some window (``Records``)."""
    return [p > 0 for p in placements(records, windows)]


def ran_in(records: list[Record], windows: list[tuple[int, int, int]]) -> int:
    """Kernel records that belong to a window only by running into it (diagnostic: stamps skewed early)."""
    return sum(p == 2 for p in placements(records, windows))


def launched_in(records: list[Record], windows: list[tuple[int, int, int]]) -> int:
    """Kernel records that belong to a window only by their launch (diagnostic: stamped wholly before it)."""
    return sum(p == 3 for p in placements(records, windows))


def launch_known(records: list[Record]) -> int:
    """Kernel records whose launch is known (diagnostic: whether the correlation join works)."""
    return sum(bool(r[2]) and bool(launch(r)) for r in records)


def strays(records: list[Record], windows: list[tuple[int, int, int]]) -> tuple[int, float | None]:
    """Where a trial's records fell that its windows did not hold (diagnostic; the runner's ``strays``).

    How many records belong to no window (``Records``), and over the windows holding none, the median
    (the lower middle one) of the signed distance from the window to the nearest kernel record's start,
    in us (negative: before its start; positive: after its end; ties to the earlier record; a distance
    past ``_INT64_MAX`` ns counts as that); None when there is none. Sorted look-ups: a trial may hold
    many records.
    """
    outside = sum(not placed for placed in in_some_window(records, windows))
    index = Records(records)
    kernels = index.kernel_starts
    offsets = []
    for _, lo, hi in windows:
        if index.holds(lo, hi) or not kernels:
            continue
        after = bisect.bisect_left(kernels, lo)  # none inside the window nor running into it
        before_d = min(lo - kernels[after - 1], _INT64_MAX) if after else None
        after_d = min(kernels[after] - hi, _INT64_MAX) if after < len(kernels) else None
        if before_d is not None and (after_d is None or before_d <= after_d):
            offsets.append(-before_d)
        elif after_d is not None:
            offsets.append(after_d)
    return outside, (statistics.median_low(offsets) / 1e3 if offsets else None)


_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


def spans_by_window(
    records: list[Record], windows: list[tuple[int, int, int]]
) -> tuple[dict[int, float | None], dict[int, int]]:
    """Per window: (max end - min start) in ms over the records that belong to it, and their count."""
    spans: dict[int, float | None] = {}
    counts: dict[int, int] = {}
    index = Records(records)
    for seq, lo, hi in windows:
        count, first, last = index.belonging(lo, hi)
        counts[seq] = count
        spans[seq] = (last - first) / 1e6 if count else None
    return spans, counts


def kernels_by_window(records: list[Record], windows: list[tuple[int, int, int]]) -> dict[str, int]:
    """Launches per kernel name over the kernel records (non-empty names) that belong to some window."""
    counted: Counter[str] = Counter()
    for record, placed in zip(records, in_some_window(records, windows), strict=True):
        if record[2] and placed:
            counted[record[2]] += 1
    return dict(counted)
