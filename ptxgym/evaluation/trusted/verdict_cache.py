"""The verdict cache: a candidate already evaluated is answered from memory, when that answer is true.

A key names what decides a verdict besides the evaluator's own settings: the task (its whole record:
definition, workload, tolerance, baseline) and the built artifact (its SHA-256, entry symbol, kernels and
static target). The same source builds to the same artifact (the build cache), and a source differing
only where the compiler does not look (a comment) usually does too, so both hit. One cache belongs to one
evaluator; the verdict-deciding settings are the evaluator's own (a failure found under them is a fact
about the artifact), and ``lookup`` applies the current memcheck schedule.

What is reused, and where (``reusable``):

- A failure that found a counterexample or a fault of the candidate (wrong values, NaN, unwritten or
  mutated buffers, a bad memory access, a foreign kernel: ``CANDIDATE_FAULTS``) is true of the artifact
  on that task whatever the inputs: reused in any episode.
- ``PASSED`` is reused only inside the episode that earned it (same episode id and secret input seed;
  a candidate without an input seed, as tools and tests make them, never gets a reused pass):
  a pass is a claim about the inputs it was checked on. Across episodes each gets fresh inputs, so a
  kernel that is right only on lucky inputs cannot pass once and then be paid from the cache forever.
  A pass without a memcheck run is not reused where the memcheck schedule demands one (the episode's
  first correct turn under ``MemcheckMode.FIRST_CORRECT``, or ``AUTO`` taken as it, since the cache does not
  know the arena).
- Nothing else is stored: infrastructure errors, ``NOT_EVALUATED``, timeouts, crashes, runtime errors,
  timing anomalies and failed proofs can come from the machine's state rather than from the candidate.

A hit says so: ``GpuVerdict.cache_hit`` (``Feedback.cache_hit``) and a note in the message. Whether a
resubmitted kernel earns reward again is the reward's decision (it sees the flag and the history).
"""

from __future__ import annotations

import collections
import hashlib
import threading
from dataclasses import dataclass

from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, GpuVerdict, memcheck_due
from ptxgym.records.feedback import WRONG_RESULT, Proof, Status
from ptxgym.records.tasks import Task

#: Failures that are facts about the artifact on the task, whatever the inputs or the machine's state: the
#: trusted side saw wrong outputs or inputs, or a proof tool saw a bad access or a foreign kernel.
#: ``RUNTIME_ERROR`` and ``CRASH`` are not among them: GPU memory taken by another process, or a worker
#: killed from outside, look the same, and a cached one would deny a good kernel for good.
CANDIDATE_FAULTS: frozenset[Status] = WRONG_RESULT | {Status.MEMORY_ERROR, Status.FOREIGN_KERNEL}


@dataclass(frozen=True)
class Entry:
    """A stored verdict and the episode it was earned in."""

    verdict: GpuVerdict
    episode_id: str
    input_seed: int | None
    turn: int


def task_fingerprint(task: Task) -> str:
    """SHA-256 of the whole task record (definition, workload, tolerance, baseline)."""
    return hashlib.sha256(task.model_dump_json().encode()).hexdigest()


def cache_key(task: Task, candidate: BuiltCandidate) -> str:
    """What decides a verdict besides the evaluator's settings: the task and the built artifact."""
    parts = [
        task_fingerprint(task),
        candidate.artifact_sha256,
        candidate.entry_symbol,
        str(candidate.static_target),
        "census" if candidate.kernels is not None else "no census",
        *(candidate.kernels or ()),
    ]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def storable(verdict: GpuVerdict) -> bool:
    """Whether a verdict is a fact about the candidate (module docstring), so worth keeping."""
    return verdict.status is Status.PASSED or verdict.status in CANDIDATE_FAULTS


def reusable(entry: Entry, candidate: BuiltCandidate, settings: EvalSettings) -> bool:
    """Whether a stored verdict answers this candidate's turn truthfully (module docstring)."""
    if entry.verdict.status in CANDIDATE_FAULTS:
        return True
    if entry.verdict.status is not Status.PASSED:
        return False
    same_episode = (
        bool(candidate.episode_id)
        and candidate.input_seed is not None
        and entry.episode_id == candidate.episode_id
        and entry.input_seed == candidate.input_seed
    )
    due = memcheck_due(settings.memcheck, candidate.first_correct_in_episode, guard_pages=False)
    memcheck_ran = entry.verdict.memcheck is not None and entry.verdict.memcheck.ran
    return same_episode and (memcheck_ran or not due)


def profiled(verdict: GpuVerdict) -> bool:
    """Whether Nsight Compute checked the verdict's target (such a pass is reused first, never redrawn)."""
    return Proof.NCU_OFFLINE in verdict.evidence.target_executed


class VerdictCache:
    """Bounded (least recently used) verdicts of one evaluator; thread-safe."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: collections.OrderedDict[str, list[Entry]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, task: Task, candidate: BuiltCandidate, settings: EvalSettings) -> GpuVerdict | None:
        """The stored verdict that truthfully answers this turn, marked as a hit; None on a miss."""
        if self.max_entries <= 0:
            return None
        key = cache_key(task, candidate)
        with self._lock:
            usable = [e for e in self._entries.get(key, []) if reusable(e, candidate, settings)]
            found = next((e for e in usable if profiled(e.verdict)), usable[0] if usable else None)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        return mark_hit(found)

    def forget(self, task: Task, candidate: BuiltCandidate) -> None:
        """Drop every stored verdict of this artifact (a re-evaluation of a reused pass did not pass)."""
        with self._lock:
            self._entries.pop(cache_key(task, candidate), None)

    def store(self, task: Task, candidate: BuiltCandidate, verdict: GpuVerdict) -> None:
        """Keep a verdict that is a fact about the candidate (``storable``); the oldest key goes first."""
        if self.max_entries <= 0 or verdict.cache_hit or not storable(verdict):
            return
        entry = Entry(verdict, candidate.episode_id, candidate.input_seed, candidate.turn)
        key = cache_key(task, candidate)
        with self._lock:
            entries = self._entries.setdefault(key, [])
            entries.append(entry)
            del entries[:-4]  # a few episodes' passes per artifact are plenty
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


def mark_hit(entry: Entry) -> GpuVerdict:
    """The stored verdict as this turn's answer: flagged, with a note naming where it came from."""
    v = entry.verdict
    where = f"turn {entry.turn} of this episode" if v.status is Status.PASSED else "an earlier evaluation"
    note = f"(verdict reused from {where}: the same built artifact on the same task)"
    details = {**v.details, "cache": {"hit": True, "from_turn": entry.turn}}
    return v.model_copy(
        update={
            "cache_hit": True,
            "message": f"{v.message} {note}".strip(),
            "stage_wall_s": {},
            "details": details,
        }
    )
