"""The blob's layout: where each buffer lies, and the guard regions around every one of them.

Every input and output buffer of every input set is preceded and followed by a *guard region*: bytes of
the blob no call may touch, filled with a secret per-arena byte pattern (drawn from ``secrets`` on the
trusted side; the candidate never sees it before its first call, and each byte is random, so a write of
any value is caught with probability 1 - 1/256 per byte written). After every candidate call
(correctness, warm-up and timed calls alike) the trusted side compares all guard bytes with its private
copy: one concatenation of the guard regions into a preallocated buffer and one ``torch.equal`` (two
kernels over a few MiB and one host sync, outside the timed window, like the input-mutation check).
A changed byte is a ``MEMORY_ERROR`` verdict naming the buffer and the offset; the guards are then
re-filled so a lenient session (the baseline) keeps checking.

Layout ``plain`` (the default, one ordinary device allocation shared through CUDA IPC)::

    [guard >= GUARD_BYTES][buffer][pad + guard >= GUARD_BYTES][buffer] ... [guard to the blob's end]

Buffers start at ``GUARD_BYTES``-aligned offsets (64 KiB: 16 host pages, 256-byte aligned for every
dtype), and every byte of the blob that is not a buffer is guard: the alignment padding after a buffer
and the blob's tail too, so nothing in the blob is free scratch space for a candidate.

Layout ``vmm`` (``EvalSettings.guard_pages``, ``evaluation/vmm.py``): each buffer gets its own run of
``page``-sized mapped pages with an unmapped page after it (and before it, but for the first), and lies
at the *end* of its run (start rounded down to 256 bytes), so a read or write past its end leaves the
mapping and faults in the worker itself; the first page of a run holds at least ``GUARD_BYTES`` of guard
before the buffer. Only mapped bytes are guards there; the holes cost address space, not memory.
"""

from __future__ import annotations

from dataclasses import dataclass

GUARD_BYTES = 64 << 10
"""Minimum guard before and after every buffer (64 KiB; page aligned for 4 KiB and 64 KiB host pages)."""
ALIGN = 256
"""Alignment of every buffer's start (the widest vector access and TMA need 128 or less)."""


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Slot:
    """One buffer of the blob."""

    set: int
    role: str
    """'in' or 'out'."""
    name: str
    offset: int
    nbytes: int

    @property
    def end(self) -> int:
        """One past its last byte."""
        return self.offset + self.nbytes

    def label(self) -> str:
        """'output C of input set 1'."""
        kind = "output" if self.role == "out" else "input"
        return f"{kind} {self.name} of input set {self.set}"


@dataclass(frozen=True)
class Gap:
    """One guard region: blob bytes [start, end), between the buffers ``prev`` and ``next`` (or an end)."""

    start: int
    end: int
    prev: Slot | None
    next: Slot | None

    @property
    def nbytes(self) -> int:
        """Its size."""
        return self.end - self.start

    def where(self, offset: int) -> str:
        """An offset inside the gap, named from the nearer buffer."""
        after = offset - self.start
        before = self.end - offset
        if self.prev is not None and (self.next is None or after < before):
            return f"{after} byte(s) past the end of {self.prev.label()}"
        if self.next is not None:
            return f"{before} byte(s) before the start of {self.next.label()}"
        return f"blob offset {offset}"


@dataclass(frozen=True)
class Mapping:
    """One run of mapped pages (``vmm`` layout): blob bytes [offset, offset + size).

    Each run is backed by an allocation of its own: the driver maps only whole allocations (on the H200 a
    run at a non-zero offset of a shared allocation was refused with CUDA_ERROR_NOT_SUPPORTED).
    """

    offset: int
    size: int


@dataclass(frozen=True)
class Layout:
    """Where everything lies in the blob."""

    slots: tuple[Slot, ...]
    gaps: tuple[Gap, ...]
    total: int
    """Bytes of the blob (of reserved address space, in the ``vmm`` layout)."""
    mappings: tuple[Mapping, ...] = ()
    """``vmm`` layout only: the mapped runs (everything else of ``total`` is unmapped)."""
    page: int = 0
    """``vmm`` layout only: the mapping granularity."""

    @property
    def guard_bytes(self) -> int:
        """Bytes of all guard regions together (what each check compares)."""
        return sum(g.nbytes for g in self.gaps)

    @property
    def physical_bytes(self) -> int:
        """Device memory the layout needs."""
        return sum(m.size for m in self.mappings) if self.mappings else self.total

    def offsets(self, index: int) -> dict[str, int]:
        """Buffer name -> offset for input set ``index``."""
        return {s.name: s.offset for s in self.slots if s.set == index}

    def locate(self, offset: int) -> Gap:
        """The gap holding a blob offset (ValueError if it is inside a buffer or outside the blob)."""
        for gap in self.gaps:
            if gap.start <= offset < gap.end:
                return gap
        raise ValueError(f"offset {offset} is not in a guard region of this layout")


Sizes = list[list[tuple[str, str, int]]]
"""Per input set, (role, name, bytes) of each buffer in order."""


def plain_layout(sizes: Sizes, min_total: int, round_to: int, guard: int = GUARD_BYTES) -> Layout:
    """Buffers at ``guard``-aligned offsets, ``guard`` bytes apart; the total rounded up to ``round_to``."""
    if guard <= 0 or guard % ALIGN:
        raise ValueError(f"the guard must be a positive multiple of {ALIGN} bytes, got {guard}")
    slots, offset = [], guard
    for index, buffers in enumerate(sizes):
        for role, name, nbytes in buffers:
            slots.append(Slot(index, role, name, offset, nbytes))
            offset = _up(offset + nbytes, guard) + guard
    total = max(min_total, _up(offset, round_to))
    return Layout(tuple(slots), _complement(slots, 0, total), total)


def vmm_layout(sizes: Sizes, page: int, guard: int = GUARD_BYTES) -> Layout:
    """Each buffer at the end of its own run of mapped pages, an unmapped page after each run.

    The first run starts at the blob's first byte (a tensor over the span must start at a mapped address);
    every later run follows an unmapped page, so each buffer has a hole after it and, but for the first,
    before its leading guard.
    """
    if page <= 0 or page % ALIGN:
        raise ValueError(f"the mapping granularity must be a positive multiple of {ALIGN}, got {page}")
    slots, maps, gaps = [], [], []
    va = 0
    for index, buffers in enumerate(sizes):
        for role, name, nbytes in buffers:
            size = _up(_up(nbytes, ALIGN) + guard, page)
            start = va + size - _up(nbytes, ALIGN)
            slot = Slot(index, role, name, start, nbytes)
            slots.append(slot)
            maps.append(Mapping(va, size))
            gaps.append(Gap(va, start, None, slot))
            if slot.end < va + size:
                gaps.append(Gap(slot.end, va + size, slot, None))
            va = va + size + page
    return Layout(tuple(slots), tuple(gaps), va, tuple(maps), page)


def _complement(slots: list[Slot], start: int, end: int) -> tuple[Gap, ...]:
    gaps, prev, at = [], None, start
    for slot in sorted(slots, key=lambda s: s.offset):
        if slot.offset > at:
            gaps.append(Gap(at, slot.offset, prev, slot))
        prev, at = slot, slot.end
    if end > at:
        gaps.append(Gap(at, end, prev, None))
    return tuple(gaps)


# ----------------------------------------------------------------------------------- the guard check


@dataclass(frozen=True)
class GuardBreach:
    """Guard bytes a call changed."""

    changed: int
    """Bytes changed over all guard regions."""
    regions: int
    """Guard regions with a changed byte."""
    first: int
    """Blob offset of the first changed byte."""
    message: str


class Guards:
    """The secret pattern of one blob's guard regions, the fill and the check (torch tensors)."""

    def __init__(self, blob, layout: Layout, seed: int) -> None:
        import torch

        self.blob, self.layout = blob, layout
        gen = torch.Generator(device=blob.device).manual_seed(seed)
        n = layout.guard_bytes
        self.pattern = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen, device=blob.device)
        """The private copy of every guard byte, regions concatenated in layout order."""
        self._seen = torch.empty_like(self.pattern)
        self._pending = torch.zeros((), dtype=torch.bool, device=blob.device)
        """Whether a queued check (``queue_check``) found a changed byte; read by ``take_pending``."""
        self._views = [blob[g.start : g.end] for g in layout.gaps]
        self._at = [0]
        for g in layout.gaps:
            self._at.append(self._at[-1] + g.nbytes)
        self.fill()

    def fill(self) -> None:
        """Write the pattern into every guard region."""
        for k, view in enumerate(self._views):
            view.copy_(self.pattern[self._at[k] : self._at[k + 1]])

    def check(self) -> GuardBreach | None:
        """None if every guard byte holds the pattern; else the breach, with the guards re-filled."""
        import torch

        if not self._views:
            return None
        torch.cat(self._views, out=self._seen)
        if torch.equal(self._seen, self.pattern):
            return None
        breach = self._describe()
        self.fill()
        return breach

    def queue_check(self) -> None:
        """``check``'s comparison queued on the GPU, its outcome kept on the device for ``take_pending``.

        No host read and no wait: it runs right after the call, in order with the work around it.
        """
        import torch

        if not self._views:
            return
        torch.cat(self._views, out=self._seen)
        torch.logical_or(self._pending, (self._seen != self.pattern).any(), out=self._pending)

    def take_pending(self) -> GuardBreach | None:
        """The breach a queued check found since the last read (one host read), else None.

        Described from the guards as they are now (``check``, which re-fills them); where the bytes were
        put back since, the breach says so without a place.
        """
        if not self._views or not bool(self._pending):
            return None
        self._pending.zero_()
        breach = self.check()
        if breach is not None:
            return breach
        message = (
            "the candidate wrote outside its buffers: guard bytes changed after a call and were put back "
            "before the check at the trial's end; a call may write only its outputs, within their bounds"
        )
        return GuardBreach(changed=0, regions=0, first=-1, message=message)

    def _describe(self) -> GuardBreach:
        import torch

        changed = self._seen != self.pattern
        total = int(changed.sum())
        regions, first = 0, -1
        for k, gap in enumerate(self.layout.gaps):
            part = changed[self._at[k] : self._at[k + 1]]
            if not bool(part.any()):
                continue
            regions += 1
            if first < 0:
                first = gap.start + int(part.to(torch.uint8).argmax())
        gap = self.layout.locate(first)
        more = f", and {regions - 1} more guard region(s)" if regions > 1 else ""
        message = (
            f"the candidate wrote outside its buffers: {total} guard byte(s) changed, the first "
            f"{gap.where(first)} (blob offset {first}){more}; a call may write only its outputs, "
            "within their bounds"
        )
        return GuardBreach(changed=total, regions=regions, first=first, message=message)
