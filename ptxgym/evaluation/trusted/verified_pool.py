"""A resident pool of verified draws: the references of verified timed calls, computed once per arena.

Every timed call gets fresh values (``arena.py``); a *verified* one also needs the fp32 reference for
them, run while the GPU is held for the candidate (H200: ~16 ms per GEMM 8192x7168x5120 call, ~105 ms
per MHA forward 4x48x4096x128 call, more for the backward; issue 11). The pool moves that work out of
the step: K secret draws of the ``fresh`` inputs, from the arena's own secret generator (never a
session's), each kept on the device with its reference, built once with the arena (``Arena.build_s``
``"pool"``). A verified timed call puts one entry (times its set's current signs, below) into its
set's shared buffers where an unverified one puts a new draw: same distribution, dtype, buffers and
place (``Arena.prepare``, outside the timed window), so values tell the candidate nothing. Where the
arena prepares timed calls with ``fused_inputs.fill`` (the default on a GPU) an entry is the Philox keys
of its draw: the call's fill draws with them where another call draws with new keys, the same kernel
and the same distribution, and the entry holds no values (before the thirty-second session it held
``torch.randn``'s, whose normals pass the fill's bound of 4.9 about once per million elements: a
verified call's inputs could be told by a scan). On the torch path the entry holds its values and the
call copies them where another copies a new ``draw_fresh``. The entries are private: the shared buffers
get a copy, so a candidate writing its inputs damages only the copy (``Arena._retire_fresh`` and the
input check see it as before).

Signs. An entry's reference is for its fresh values beside its set's *pristine* other inputs. A call
on an entry puts into the buffers what a seeded set would hold with the entry as its base: every input
of every sign group times the set's cumulative signs (``SignPerturbation.expected_inputs``, the entry's
fresh inputs included), so its expected outputs are the stored reference times the output signs
(``SignPerturbation.expected``): exact whichever inputs a group flips, fresh or not. The catalog's
groups flip only fresh inputs (GEMM A and B, the forward's V, the backward's dO), but a definition whose
group flips a kept input is handled the same way (tested with the GEMM's B kept).

Keys. Where every tensor input is fresh (GEMM, MHA forward) an entry serves any set; where some are
kept (the backward keeps Q, K, V, O, LSE: ``inputs.fresh_names``) entries are per set, K for each set.

Reuse. Within one session an entry serves at most one call: ``PoolDraws`` draws them without
replacement in an order from the session's secret seed; calls beyond K fall back to a new draw and
its reference (the path without a pool), never a repeat. Across sessions entries repeat, which is
sound only if nothing a candidate's process learns reaches a later session's process: a candidate
that recognised an entry would know its call is verified (only verified calls use entries) and could
skip the work of every other call. Where this holds (``persistence``):

* the trusted library baseline: no candidate code;
* the native runner under its jail (``runner/jail.py``): it writes only its scratch directory, which
  ``WorkerHandle.kill`` deletes with it, and reads no other runner's scratch; the blob it shares is
  poisoned (outputs: a set's before every call on it, every set's before every session), restored
  (inputs, ``Arena.restore`` before every session) and guarded (the padding, re-filled), so nothing of
  a session survives there. Assumed, not checked here:
  the driver hands a new process no device memory an earlier one left behind. Its jail must be in
  force on every thread (filesystem layer ``active``): below Landlock ABI 8 (the H200 measured ABI 7)
  the CUDA driver's threads from before the jail restrict themselves (``runner/confine.h``'s broadcast);
  one it cannot reach leaves the layer ``partial`` (code run there could write anywhere), and such a
  runner uses the pool only with ``EvalSettings.verified_pool_partial_jail``.

The evaluator builds a pool only where a candidate could use it (``LocalGpuEvaluator._pool_usable``:
native runners wanted, with Landlock; each session then checks its runner's report); the baseline
alone, measured once per arena, is not worth its memory. Where it does not, sessions use no pool: the
Python worker (its sandbox let a candidate write ``/dev/shm``, which outlives the process, until that
was closed in ``sandbox.py``; it reads every file but other processes' ``/proc`` entries, and its
candidates share an interpreter and torch with the collectors), and with the sandbox off, anything. A
channel this module cannot close remains everywhere: what the feedback shows the policy (a crash's log
tail, up to 3000 characters) could carry fingerprints of a session's inputs into a later candidate's
source. So every
entry is renewed (a new draw and reference) after serving ``max_uses`` sessions: an exported
fingerprint names a verified call for at most that many later sessions. And a fingerprint is worth
nothing while it holds: in each trial ``EvalSettings.pool_new_draws_per_trial`` of the verified calls
(two by default, at secret places among them, prepared like every other call) draw new values and run
their reference, so a candidate that computes only the calls bringing a known entry fails the step
(garbage on a share f of the others passes with probability (1 - f)^(2 x trials): 1.6% at f = 0.5;
with one new draw per trial a reviewer's cheat passed 8% of its sessions at f ~ 0.55, as (1 - f)^3
predicts). An entry so serves verified calls in place of references only for the other calls: one per
trial by default (``verified_per_trial`` - 2).

Memory (K = 10, the default ``trials x verified_per_trial + 1``; the definition's dtypes). A keyed
entry (``fused_inputs.fill``) is its reference outputs: GEMM 8192x7168x5120 C 117 MB, 1.2 GB per
arena; MHA forward 4x48x4096x128 O 201 MB + LSE 3 MB, 2.0 GB; MHA backward dQ, dK, dV 604 MB per entry
and set, 18 GB for 3 sets. On the torch path an entry also holds its fresh inputs: GEMM A 84 MB + B
73 MB (2.7 GB in all), MHA forward Q, K, V 604 MB (8.1 GB), MHA backward dO 201 MB (24 GB). A pool that
would leave less than ``reserve`` bytes of the device free, or whose allocation fails, is not built
and the arena runs without one (``VerifiedPool.error`` says why; a verdict's
``details["verified_pool"]``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from ptxgym.evaluation.protocol import SandboxReport
from ptxgym.evaluation.trusted import fused_inputs
from ptxgym.evaluation.trusted.inputs import draw_fresh, run_reference


@dataclass
class PoolEntry:
    """One secret draw of the fresh inputs and its reference outputs (private, never shared)."""

    fresh: dict[str, Any]
    """The fresh inputs' values, as drawn (no signs); empty for a keyed entry (``keys``)."""
    reference: dict[str, Any]
    """The reference outputs for the draw beside its set's pristine kept inputs."""
    uses: int = 0
    """Sessions this entry served since it was drawn."""
    keys: Any = None
    """Where the arena prepares fresh inputs with ``fused_inputs.fill``: the draw's Philox keys (one per
    fresh input, on the device), the draw itself made again by every call that takes the entry."""


@dataclass
class VerifiedPool:
    """The entries of one arena, by key (None: any set; else a set index)."""

    size: int
    entries: dict[int | None, list[PoolEntry]] = field(default_factory=dict)
    error: str = ""
    """Why the arena has no pool ("" when it has one, or none was asked for)."""
    nbytes: int = 0
    """Device bytes the entries hold."""
    max_uses: int = 0
    """Sessions an entry serves before it is renewed (0: never renewed)."""
    renewed: int = 0
    """Entries renewed so far."""

    @property
    def active(self) -> bool:
        """Whether any entry exists."""
        return any(self.entries.values())

    def key(self, index: int) -> int | None:
        """The key whose entries serve set ``index`` (None when entries serve any set)."""
        return None if None in self.entries else index

    def describe(self) -> str:
        """The pool for a verdict's details: its size and bytes, or why there is none."""
        if self.active:
            keys = "any set" if None in self.entries else f"each of {len(self.entries)} sets"
            return f"on: {self.size} entries for {keys}, {self.nbytes / 1e9:.2f} GB"
        return f"off: {self.error}" if self.error else "off"


def entry_bytes(tensors: dict[str, Any]) -> int:
    """Bytes of the tensors in ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors.values() if hasattr(t, "numel"))


def build_pool(arena, size: int, reserve: int, max_uses: int, generator) -> VerifiedPool:
    """Draw ``size`` entries per key for ``arena`` (its sets already built); on failure, an empty pool.

    ``reserve``: device bytes that must stay free after the pool (checked on a CUDA device before any
    entry is drawn, from the first entry's size). ``generator``: the arena's own secret generator.
    """
    import torch

    pool = VerifiedPool(size=size, max_uses=max_uses)
    if size <= 0:
        return pool
    if not arena.fresh:
        pool.error = "no input of this workload is redrawn by a timed call"
        return pool
    kept = [n for n in arena.sets[0].base_in if n not in arena.fresh]
    keys: list[int | None] = list(range(len(arena.sets))) if kept else [None]
    try:
        first = _draw(arena, 0 if keys[0] is None else keys[0], generator)
        need = entry_bytes(first.fresh) + entry_bytes(first.reference) + entry_bytes({"keys": first.keys})
        total = need * size * len(keys)
        if arena.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(arena.device)
            if free - (total - need) < reserve:
                raise MemoryError(
                    f"a pool of {total / 1e9:.2f} GB would leave {(free - total + need) / 1e9:.2f} GB of the "
                    f"device free, less than the {reserve / 1e9:.2f} GB kept for candidates"
                )
        for key in keys:
            pool.entries[key] = [first] if not pool.entries else []
            while len(pool.entries[key]) < size:
                pool.entries[key].append(_draw(arena, 0 if key is None else key, generator))
        pool.nbytes = total
    except Exception as exc:  # noqa: BLE001 - out of memory or any failure: the path without a pool
        pool.entries.clear()
        pool.error = f"{type(exc).__name__}: {exc}"[:500]
        if arena.device.type == "cuda":
            torch.cuda.empty_cache()
    return pool


def _draw(arena, index: int, generator) -> PoolEntry:
    """One entry for set ``index``: new fresh values and the reference beside the set's pristine inputs.

    With the arena's fused preparation (``Arena.fill_plan``) the values are ``fused_inputs.fill``'s draw
    for new secret keys (``keyed_values``) and only the keys are kept: every timed call's values then
    come from one kernel and one distribution, and the entry holds its reference alone.
    """
    keys = None
    if arena.fill_plan is None:
        fresh = draw_fresh(arena.task, arena.fresh, generator, arena.device)
    else:
        keys = fused_inputs.seeds(generator, len(arena.fill_plan), arena.device)
        fresh = keyed_values(arena, keys, index)
    inputs = dict(arena.sets[index].base_in)
    inputs.update(fresh)
    reference = run_reference(arena.task, arena.namespace, inputs)
    return PoolEntry(fresh={} if keys is not None else fresh, reference=reference, keys=keys)


def keyed_values(arena, keys, index: int) -> dict[str, Any]:
    """The fresh values a keyed entry stands for on set ``index``: ``fill``'s draw, signs all +1.

    The same grouping as a call's (as many signs as the set's group has), so a call that multiplies the
    draw by its set's signs gets these values times those signs, bit for bit.
    """
    import torch

    s = arena.sets[index]
    values = {}
    for k, (name, group) in enumerate(arena.fill_plan.items()):
        ones = torch.ones_like(arena.fill_signs(s.state, group))
        values[name] = fused_inputs.fill(torch.empty_like(s.base_in[name]), ones, keys, k)
    return values


def entry_values(arena, entry: PoolEntry, index: int) -> dict[str, Any]:
    """An entry's fresh values for set ``index`` (unsigned): stored, or drawn again from its keys."""
    return entry.fresh if entry.keys is None else keyed_values(arena, entry.keys, index)


def renew(arena, pool: VerifiedPool, generator) -> float:
    """Redraw every entry that served ``max_uses`` sessions; the wall seconds it took."""
    if not pool.max_uses:
        return 0.0
    t = time.perf_counter()
    for key, entries in pool.entries.items():
        for i, entry in enumerate(entries):
            if entry.uses >= pool.max_uses:
                entries[i] = _draw(arena, 0 if key is None else key, generator)
                pool.renewed += 1
    if arena.device.type == "cuda":
        import torch

        torch.cuda.synchronize(arena.device)
    return time.perf_counter() - t


class PoolDraws:
    """One session's draws from a pool: each entry at most once, in a secret order."""

    def __init__(self, pool: VerifiedPool, rng: random.Random) -> None:
        self.pool, self.rng = pool, rng
        self._left: dict[int | None, list[int]] = {}
        self.taken: list[tuple[int, int]] = []
        """(set index, entry number) of every entry taken, in order."""
        self.fallbacks = 0
        """Verified calls that found no entry left (served by a new draw and its reference)."""

    def take(self, index: int) -> PoolEntry | None:
        """An entry for a verified call on set ``index`` never taken before in this session, or None."""
        key = self.pool.key(index)
        entries = self.pool.entries.get(key)
        if not entries:
            return None
        left = self._left.get(key)
        if left is None:
            left = self._left[key] = self.rng.sample(range(len(entries)), len(entries))
        if not left:
            self.fallbacks += 1
            return None
        number = left.pop()
        self.taken.append((index, number))
        entry = entries[number]
        entry.uses += 1
        return entry

    def record(self) -> dict:
        """JSON-ready figures of this session's use of the pool."""
        return {"entries": len(self.taken), "fallbacks": self.fallbacks}


def barrier(baseline: bool, native: bool, report: SandboxReport | None, partial_jail: bool) -> str:
    """Why a subject's session may not use the pool ("" when it may; module docstring, "Reuse").

    ``baseline``: the trusted library; ``native``: a native runner serves the candidate; ``report``: its
    sandbox as it reported it; ``partial_jail``: accept a filesystem layer in force on every thread but
    those the CUDA driver started before the jail (Landlock ABI < 8: ``runner/__init__.py``).
    """
    if baseline:
        return ""
    if not native:
        return "the Python worker is not jailed like a runner (a candidate could carry entries on)"
    layers = {x.name: x.state for x in report.layers} if report is not None else {}
    state = layers.get("filesystem", "off")
    if state == "active" or (state == "partial" and partial_jail):
        return ""
    return f"the runner's filesystem jail is {state}: code on a thread it does not cover could write anywhere"
