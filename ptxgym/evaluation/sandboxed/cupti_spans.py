"""CUPTI activity spans inside a worker: all GPU work of a call, on every stream.

For each timed call the worker takes a CUPTI host timestamp after a device-wide synchronisation (the L2
flush is done by then) and another after the call's closing synchronisation. Every kernel, memcpy and
memset whose start lies in that window belongs to the call, whichever stream or host thread launched
it; the call's GPU time is max(end) - min(start) over them. CUPTI timestamps and ``get_timestamp`` share
one clock.

This runs in the candidate's process, so the candidate can disable or disturb it; the trusted side
therefore treats these spans as claims and cross-checks them against its own wall clock.
"""

from __future__ import annotations

from typing import Any

_BUFFER_BYTES = 8 * 1024 * 1024


class CuptiSpans:
    """Collects GPU activity records and cuts them into per-call spans."""

    def __init__(self) -> None:
        from cupti import cupti

        self._cupti = cupti
        self._kinds = (
            cupti.ActivityKind.CONCURRENT_KERNEL,
            cupti.ActivityKind.MEMCPY,
            cupti.ActivityKind.MEMSET,
        )
        self._kind_ids = {int(k) for k in self._kinds}
        self._records: list[tuple[int, int]] = []
        self._windows: list[tuple[int, int, int]] = []
        self._enabled = False
        cupti.activity_register_callbacks(self._requested, self._completed)

    def _requested(self) -> tuple[int, int]:
        return _BUFFER_BYTES, 0

    def _completed(self, activities: list[Any]) -> None:
        for act in activities:
            if int(act.kind) in self._kind_ids:
                self._records.append((int(act.start), int(act.end)))

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


def spans_by_window(
    records: list[tuple[int, int]], windows: list[tuple[int, int, int]]
) -> tuple[dict[int, float | None], dict[int, int]]:
    """Per window: (max end - min start) in ms over records starting inside it, and their count."""
    spans: dict[int, float | None] = {}
    counts: dict[int, int] = {}
    ordered = sorted(records)
    for seq, lo, hi in windows:
        inside = [r for r in ordered if lo <= r[0] <= hi]
        counts[seq] = len(inside)
        spans[seq] = (max(e for _, e in inside) - min(s for s, _ in inside)) / 1e6 if inside else None
    return spans, counts
