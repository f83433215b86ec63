"""Guard regions around every buffer of the blob: the layout arithmetic and the MEMORY_ERROR verdict.

The layout functions are pure arithmetic. The verdict is judged by the real ``Arena`` and ``Session`` on
CPU buffers, with Python "candidates" run in-process (``inprocess_worker.py``) that write a few bytes
past their output or before an input, on some calls only: writes the input/output check alone cannot
see (the outputs are right and the inputs intact).
"""

from __future__ import annotations

import pytest

from ptxgym.evaluation.trusted.guards import ALIGN, GUARD_BYTES, plain_layout, vmm_layout

MiB = 1 << 20
SIZES = [
    [("in", "A", 1000), ("in", "B", 3 * MiB + 2), ("out", "C", 512)],
    [("in", "A", 1000), ("in", "B", 3 * MiB + 2), ("out", "C", 512)],
]


def _covers_exactly(layout) -> None:
    """Slots and gaps tile [0, total) (plain) or the mapped runs (vmm) without overlap."""
    pieces = sorted([(s.offset, s.end) for s in layout.slots] + [(g.start, g.end) for g in layout.gaps])
    for (_, end), (start, _) in zip(pieces, pieces[1:], strict=False):
        assert start >= end  # no overlap
    if layout.mappings:
        mapped = sorted((m.offset, m.offset + m.size) for m in layout.mappings)
        covered = sum(e - s for s, e in pieces)
        assert covered == sum(e - s for s, e in mapped)
        for s, e in pieces:
            assert any(ms <= s and e <= me for ms, me in mapped)
    else:
        assert pieces[0][0] == 0 and pieces[-1][1] == layout.total
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))


def test_plain_layout_puts_a_guard_before_and_after_every_buffer():
    layout = plain_layout(SIZES, min_total=12 * MiB, round_to=2 * MiB)
    _covers_exactly(layout)
    assert [(s.set, s.name) for s in layout.slots] == [(i, n) for i in (0, 1) for n in "ABC"]
    for slot in layout.slots:
        assert slot.offset % GUARD_BYTES == 0 and slot.offset % ALIGN == 0
        before = next(g for g in layout.gaps if g.end == slot.offset)
        after = next(g for g in layout.gaps if g.start == slot.end)
        assert before.nbytes >= GUARD_BYTES and after.nbytes >= GUARD_BYTES
        assert after.prev is slot and before.next is slot
    assert layout.total == 12 * MiB  # the minimum blob (tail is guard too)
    assert layout.gaps[-1].next is None and layout.gaps[-1].end == layout.total
    assert layout.offsets(1)["A"] == layout.slots[3].offset


def test_plain_layout_rounds_a_large_blob_to_whole_pages():
    big = [[("in", "A", 80 * MiB), ("out", "C", 100 * MiB + 6)]]
    layout = plain_layout(big, min_total=12 * MiB, round_to=2 * MiB)
    _covers_exactly(layout)
    assert layout.total % (2 * MiB) == 0 and layout.total >= 180 * MiB + 3 * GUARD_BYTES
    assert layout.guard_bytes == layout.total - 180 * MiB - 6
    with pytest.raises(ValueError, match="multiple of 256"):
        plain_layout(big, 0, 2 * MiB, guard=100)


def test_vmm_layout_ends_every_buffer_at_an_unmapped_page():
    page = 2 * MiB
    layout = vmm_layout(SIZES, page)
    _covers_exactly(layout)
    assert layout.page == page and layout.total % page == 0
    maps = sorted(layout.mappings, key=lambda m: m.offset)
    assert maps[0].offset == 0  # a tensor over the span starts at a mapped byte
    for a, b in zip(maps, maps[1:], strict=False):
        assert b.offset - (a.offset + a.size) == page  # a hole between every two runs
    assert maps[-1].offset + maps[-1].size + page == layout.total
    for slot, run in zip(layout.slots, maps, strict=True):
        run_end = run.offset + run.size
        assert run.offset % page == 0 and run.size % page == 0 and slot.offset % ALIGN == 0
        assert run_end - ALIGN < slot.end <= run_end  # the next page after the buffer is unmapped
        assert slot.offset - run.offset >= GUARD_BYTES  # the guard before it, in its first page
    assert layout.physical_bytes == sum(m.size for m in maps) < layout.total
    exact = vmm_layout([[("in", "A", 4 * MiB)]], page)
    assert exact.slots[0].end == exact.mappings[0].offset + exact.mappings[0].size
    assert len(exact.gaps) == 1  # no tail: the buffer's last byte is the run's last byte


def test_a_gap_names_the_nearer_buffer():
    layout = plain_layout(SIZES, min_total=0, round_to=ALIGN)
    c0, a1 = layout.slots[2], layout.slots[3]
    gap = layout.locate(c0.end + 3)
    assert gap.where(c0.end + 3) == "3 byte(s) past the end of output C of input set 0"
    assert gap.where(a1.offset - 8) == "8 byte(s) before the start of input A of input set 1"
    with pytest.raises(ValueError, match="not in a guard region"):
        layout.locate(c0.offset)


# ------------------------------------------------------------------------------- the real Arena, CPU

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import InProcessWorker, run_in_session  # noqa: E402

from ptxgym.evaluation.protocol import Load  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402

SETTINGS = EvalSettings(warmup=2, iterations=8, trials=2, correctness_sets=3, rotate_sets=3)


def gemm_task():
    return tiny_task("Gemm-sm90a", M=64, N=48, K=32)


def _raw(t):
    """The whole blob as bytes and the byte offset of ``t`` in it (what pointer arithmetic sees)."""
    raw = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    return raw, t.storage_offset() * t.element_size()


def _scribble(t, at: int, n: int = 4) -> None:
    """Write ``n`` bytes at byte ``at`` relative to the start of ``t`` (negative: before it)."""
    raw, base = _raw(t)
    region = raw[base + at : base + at + n]
    region.copy_(region ^ 0x5A)


class OverrunC:
    """A correct GEMM that writes a few bytes past the end of C on call number ``on`` (1-based)."""

    def __init__(self, on: int = 1, before_a: bool = False) -> None:
        self.on, self.before_a, self.calls = on, before_a, 0

    def __call__(self, A, B, C):
        self.calls += 1
        C.copy_((A.float() @ B.float().T).to(C.dtype))
        if self.calls == self.on:
            if self.before_a:
                _scribble(A, -2, 2)
            else:
                _scribble(C, C.numel() * C.element_size(), 3)


def judge(candidate, arena) -> SessionResult:
    return run_in_session(candidate, arena, SETTINGS, arena.scratch)[0]


@pytest.fixture
def arena(tmp_path):
    return Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path)


def test_arena_buffers_lie_between_filled_guards(arena):
    assert arena.check_guards() is None
    for i, s in enumerate(arena.sets):
        for name, t in {**s.shared_in, **s.shared_out}.items():
            assert _raw(t)[1] == arena.layout.offsets(i)[name]
    raw = arena.blob
    gap = arena.layout.gaps[0]
    assert torch.equal(raw[gap.start : gap.end], arena.guards.pattern[: gap.nbytes])
    assert len(set(raw[gap.start : gap.end].tolist())) > 200  # random bytes, not a constant


def test_a_write_past_an_output_is_found_named_and_refilled(arena):
    C = arena.sets[1].shared_out["C"]
    _scribble(C, C.numel() * C.element_size() + 5, 2)
    breach = arena.check_guards()
    assert breach is not None and breach.changed >= 1 and breach.regions == 1
    assert "past the end of output C of input set 1" in breach.message
    assert arena.check_guards() is None  # re-filled


def test_writes_inside_the_buffers_are_not_a_breach(arena):
    for s in arena.sets:
        s.shared_out["C"].fill_(3.0)
        s.shared_in["A"].zero_()
    assert arena.check_guards() is None


def test_restore_refills_guards_an_earlier_worker_wrote(arena):
    _scribble(arena.sets[0].shared_in["B"], -1, 1)
    arena.restore()
    assert arena.check_guards() is None


def test_an_overrun_in_a_correctness_call_is_a_memory_error(arena):
    cheat = OverrunC(on=1)
    result = judge(cheat, arena)
    f = result.failure
    assert f is not None and f.status is Status.MEMORY_ERROR and f.stage is Stage.CHECK, f
    assert "0 byte(s) past the end of output C of input set 0" in f.message
    assert "in a correctness call" in f.message and cheat.calls == 1
    assert arena.verify(0).passed  # the output check alone sees a correct call


def test_an_overrun_in_a_warmup_call_is_a_memory_error_in_timing(arena):
    cheat = OverrunC(on=SETTINGS.correctness_sets + 1, before_a=True)  # the first warm-up call
    result = judge(cheat, arena)
    f = result.failure
    assert f is not None and f.status is Status.MEMORY_ERROR and f.stage is Stage.TIME, f
    assert "2 byte(s) before the start of input A of input set 0" in f.message
    assert arena.mutated_inputs() == []  # not an input write: the bytes lie outside A


@pytest.mark.parametrize("deferred", [True, False])
def test_an_overrun_in_a_timed_call_is_a_memory_error_read_now_or_at_the_trials_end(tmp_path, deferred):
    settings = SETTINGS.model_copy(update={"deferred_call_checks": deferred})
    on = SETTINGS.correctness_sets + 2 + SETTINGS.warmup + 3  # a timed call of the first trial
    cheat = OverrunC(on=on)
    result = run_in_session(cheat, Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path), settings, tmp_path)[0]
    f = result.failure
    assert f is not None and f.status is Status.MEMORY_ERROR and f.stage is Stage.TIME, f
    assert "past the end of output C" in f.message
    assert ("found at the trial's end" in f.message) is deferred
    # read after every call, the trial ends at the breach; read at the trial's end, at the trial's end
    per_trial = SETTINGS.warmup + SETTINGS.iterations + 1  # its calls, the counted one included
    assert cheat.calls < on + (per_trial if deferred else 1)


class OverrunPutBack(OverrunC):
    """Writes past the end of C on call ``on`` and puts the bytes back on the next call."""

    def __call__(self, A, B, C):
        super().__call__(A, B, C)
        if self.calls == self.on:
            self.written = C  # this call's set: the next call may run on another
        if self.calls == self.on + 1:
            C = self.written
            _scribble(C, C.numel() * C.element_size(), 3)  # XOR again: the guard's bytes as they were


def test_a_breach_put_back_before_the_trials_end_is_still_a_memory_error(tmp_path):
    """The queued check compared the guards right after the call: what came after cannot undo it."""
    on = SETTINGS.correctness_sets + 2 + SETTINGS.warmup + 3
    cheat = OverrunPutBack(on=on)
    settings = SETTINGS.model_copy(update={"deferred_call_checks": True})
    result = run_in_session(cheat, Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path), settings, tmp_path)[0]
    f = result.failure
    assert f is not None and f.status is Status.MEMORY_ERROR and f.stage is Stage.TIME, f
    assert "were put back before the check at the trial's end" in f.message and cheat.calls > on + 1


def test_queued_guard_checks_are_read_once_and_forgotten(arena):
    arena.queue_guard_check()
    assert arena.pending_guard_breach() is None
    C = arena.sets[2].shared_out["C"]
    _scribble(C, C.numel() * C.element_size() + 1, 1)
    arena.queue_guard_check()
    arena.queue_guard_check()  # a later clean-or-not check cannot clear an earlier finding
    breach = arena.pending_guard_breach()
    assert breach is not None and "past the end of output C of input set 2" in breach.message
    assert arena.pending_guard_breach() is None and arena.check_guards() is None  # read, re-filled
    _scribble(C, C.numel() * C.element_size() + 1, 1)
    arena.queue_guard_check()
    arena.restore()  # a new session: an earlier session's finding is forgotten, its guards re-filled
    assert arena.pending_guard_breach() is None and arena.check_guards() is None


def test_an_honest_candidate_never_breaches(arena):
    cheat = OverrunC(on=0)
    result = judge(cheat, arena)
    assert result.failure is None and cheat.calls == SETTINGS.calls_per_step


def test_a_lenient_session_records_the_breach_and_goes_on(arena):
    session = Session(InProcessWorker(OverrunC(on=2), arena.scratch), arena, SETTINGS, EVENTS, 7, 10.0)
    session.attach(1, cupti=False)
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    result = SessionResult()
    session.correctness(result, strict=False)
    assert result.failure.status is Status.MEMORY_ERROR and result.calls_checked == 3  # went on
    assert "output C of input set 1" in result.failure.message
    assert arena.check_guards() is None


def test_guard_pages_fall_back_to_the_plain_blob_off_a_gpu(tmp_path):
    arena = Arena(gemm_task(), [1], "cpu", tmp_path, guard_pages=True)
    assert not arena.guard_pages and "need a CUDA device" in arena.guard_pages_error
    assert arena.protection().startswith("off (guard pages need a CUDA device")
    assert arena.attach_fds() == [] and arena.attach_command(1, False).vmm is None
    assert arena.check_guards() is None


def test_an_arena_that_fails_past_its_blob_releases_it(tmp_path, monkeypatch):
    """Out of memory in the references (say) after the blob: the arena closes itself before raising.

    A guard-page blob has no finaliser, so otherwise its mappings and descriptors stayed for the
    process's life (a reviewer's find), and ``LocalGpuEvaluator._new_arena`` retries on exactly that.
    """
    closed = []
    monkeypatch.setattr(Arena, "close", lambda self: closed.append(self.blob.numel()))

    def fail(self, index, seed):
        raise MemoryError("the references did not fit")

    monkeypatch.setattr(Arena, "_make_set", fail)
    with pytest.raises(MemoryError):
        Arena(gemm_task(), [1], "cpu", tmp_path)
    assert len(closed) == 1 and closed[0] > 0


def test_a_guard_page_attach_command_is_a_valid_command():
    from ptxgym.evaluation.protocol import Attach, VmmBlob, VmmRun, parse_command

    page = 2 * MiB
    layout = vmm_layout(SIZES, page)
    runs = [VmmRun(offset=m.offset, size=m.size) for m in layout.mappings]
    spec = VmmBlob(total=layout.total, page=page, runs=runs)
    parsed = parse_command(Attach(arena="a", blob=None, vmm=spec, sets=[], flush_bytes=1))
    assert parsed.vmm is not None
    assert [r.offset for r in parsed.vmm.runs] == [m.offset for m in layout.mappings]
