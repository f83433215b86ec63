"""The trusted evaluator's buffers for one task: input sets, outputs, reference outputs, fresh values.

Everything a candidate's worker may touch lives in one device allocation (the *blob*), shared with the
worker through CUDA IPC: the input sets and their output buffers. Everything that decides a verdict
stays private to the trusted process: the pristine inputs of each set, the reference outputs, the sign
state of its perturbations and the private copy of any fresh values (the shared inputs must equal what
the trusted side says they hold after every call). The blob is one allocation sized to a whole number of
2 MiB pages above the caching allocator's large-segment bound, so no private tensor can share the
IPC-mapped segment. Every buffer in it lies between guard regions that hold a secret pattern, checked
after every call (``guards.py``): a write outside the buffers is a MEMORY_ERROR.

Sets are generated once per arena (seeds recorded) and their fp32 references computed once. Two ways to
give a call new values at the same addresses:

* correctness calls (``prepare(..., fresh=False)``): exact sign flips of the set (``perturb.py``); the
  expected output follows from the stored reference for free.
* timed calls, warm-up included (``prepare(..., fresh=True)``): fresh values, a new draw of the
  workload's distribution for every input in ``fresh`` (``inputs.fresh_names``), generated on the
  device with the session's secret generator and copied into the set's buffers before the call is sent
  (outside the timed window). No earlier call saw these values, so an output replayed from an earlier
  call (cached by pointer, or with signs corrected) is wrong, and a cache keyed on sampled input values
  never hits. The reference for them is computed only if the call is verified (``verify``), once;
  or, where the session may use the arena's verified pool (``verified_pool.py``), a verified call
  takes a pool entry instead of a new draw: secret values drawn with the arena, whose reference was
  computed then, copied (times the set's signs) into the same buffers at the same place.

Cost of fresh values, per call of a trial (warm-up included), on the trusted side's GPU and outside
the timed window, with torch ops: one device draw of the fresh inputs, one device copy into the shared
buffers and one comparison with the previous draw (the input-mutation check, bit for bit on 8-byte words:
``compare.same_bits``); with ``fused`` (``EvalSettings.fused_inputs``, on by default) one Triton
kernel per input does the draw, the signs and both copies, and one more the comparison
(``fused_inputs.py``). With torch ops, about five passes over the fresh
inputs' bytes: GEMM 8192x7168x5120 157 MB, MHA forward 604 MB, MHA backward 201 MB (dO only). At H200
bandwidth that is roughly 0.2 ms, 0.8 ms and 0.3 ms per call, 0.04-0.15 s per evaluation at the
default 3 x 60 calls (estimates from bytes, not measurements; measured: bench/prepare_cost.py). In a
trial that verifies some calls (``hold``) the comparison runs right after each call, over every input
of its set: for the MHA backward also its seeded Q, K, V, O and LSE (~0.6 GB more per call, an
estimate of ~0.2 ms), and the outputs are copied (117 MB, 201 MB, 604 MB). Per *verified* timed call, one fp32
reference run on the device for that call's values (about 0.6, 1.6 and 4 TFLOP of fp32 math for the
three). Measured on the H200 (bench/results/gpu_cost_2026-12-04_in_band*.txt, ``time_verify``): 0.61 s
(GEMM) and 4.1 s (MHA forward) for 39 verified calls, i.e. ~16 and ~105 ms each; 0.14 s and 0.95 s at
the default 9 (``EvalSettings.verify_timed_fraction``), with every matmul in fp32 SIMT. Since then the
matmuls whose operands are bf16 inputs (all of the GEMM's 0.6 TFLOP, half of the MHA forward's, 2 of
the backward's 5) run on TF32 tensor cores, exactly as accurate (``precision.py``); the attention
references stay dominated by their fp32 elementwise passes over S x S per head (an estimate; the lead's
``bench/gpu_cost.py`` re-run measures it). A verified call builds what the inputs must hold once, for
the reference and the input check, without the sign products of the inputs its fresh draw replaced.
Fresh values (``time_inputs``): 0.06-0.09 s (GEMM) and 0.16 s (MHA forward) per evaluation.
Unverified calls never run it. Correctness calls cost no reference (sign flips of the seeded sets).
The verified pool (``EvalSettings.verified_pool``) moves those references out of the step for the
sessions allowed to use it: once per arena, K = 10 draws and references (per set for the backward),
i.e. the 9 + 1 verified calls' reference work of one evaluation done once (``build_s["pool"]``; an
estimate from the figures above: ~0.2 s GEMM, ~1 s MHA forward, more for the backward's 30), held on
the device (1.2 GB, 2.0 GB, 18 GB with the fused preparation: ``verified_pool.py``), and again for an
entry after ``verified_pool_uses`` sessions (amortised ~K/32 references per session). Before the
call a verified call does exactly the work of any other timed call (a draw, the set's signs on the
redrawn inputs of a sign group, a copy), the entry taking the draw's place (with the fused preparation,
its keys the new keys' place: the same kernel, ``_fill_fresh``): a shorter preparation before verified
calls was a gap the candidate could time to know which calls are checked (on the MHA forward about 0.6 ms
of 1.7: the draw's 0.72 less the signs on V, bench/results/prepare_cost_2026-12-05.txt).
Every draw-path call so pays one pass for the signs (GEMM A and B, MHA forward V). At verification an
entry costs the stored outputs times the output signs (one pass): no reference run.
After every call the guard regions are compared with their private copy: one copy and one comparison of
their bytes (64 KiB around each buffer plus the blob's rounding tail: 2 MiB for the GEMM's three
sets; 18 MiB with guard pages, whose first page of each run is guard) and one host sync, outside the timed
window; small workloads compare at most their 12 MiB minimum blob.

Input checks after timed calls. With the fused kernels the check after each timed call (``hold``, or the
set's next preparation, ``_retire_fresh``) compares a secret draw of ``input_check_share`` of each input's
blocks (``fused_inputs.differ_all``; ``EvalSettings.input_check_share``, 1/8 by default), the same amount of
work after every call, verified or not (a longer check after a verified call would be a gap the candidate
could time). What a write into an input can gain is using it as scratch or leaving a mark for a later call;
both touch many blocks or many calls, and a write confined to k blocks of one call goes unseen with
probability about exp(-share x k) (blocks are drawn with replacement; one block of one call: 0.88; the same
block on all 60 calls of a trial: ~6e-4). What it cannot hide: a write that lasts to the timing's end (its
last check compares every set whole, ``mutated_inputs``), a write in a correctness call (``verify``, whole),
and a verified call's outputs, which are checked against the reference for what the inputs had to hold, not
what the candidate left in them. The torch path (no kernels) compares every bit. With ``deferred_checks``
(``EvalSettings.deferred_call_checks``) these checks' outcomes stay on the device, added up per input, and
are read once by ``mutated_inputs`` (``_take_pending``): the comparison still runs right after each call,
in order with it, so a write put back later is still seen, but no call waits for a host read of it.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import random
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxgym.evaluation.compare import SetCheck, check_call, compare_output, outcome, poison_, same_bits
from ptxgym.evaluation.protocol import HW_PREPARE_ATTEMPTS, Arg, Attach, ScalarArg, TensorArg, VmmBlob, VmmRun
from ptxgym.evaluation.trusted import fused_inputs, sampled
from ptxgym.evaluation.trusted.guards import GuardBreach, Guards, plain_layout, vmm_layout
from ptxgym.evaluation.trusted.inputs import (
    draw_fresh,
    fresh_names,
    generate_inputs,
    load_reference,
    reference_options,
    run_reference,
    torch_dtype,
)
from ptxgym.evaluation.trusted.perturb import SignPerturbation
from ptxgym.evaluation.trusted.verified_pool import PoolEntry, VerifiedPool, build_pool, renew
from ptxgym.records.tasks import Task

_PAGE = 2 << 20
_MIN_BLOB = 12 << 20


@dataclass
class InputSet:
    """One input set: shared buffers, the trusted copies, the reference, the perturbation state."""

    seed: int
    shared_in: dict[str, Any]
    shared_out: dict[str, Any]
    base_in: dict[str, Any]
    """Private pristine inputs; the shared ones must equal them with ``state`` applied."""
    reference: dict[str, Any]
    state: list = field(default_factory=list)
    fresh: dict[str, Any] | None = None
    """Private copies of the fresh values the shared buffers hold now (None: seeded values x ``state``)."""
    fresh_reference: dict[str, Any] | None = None
    """The reference for ``fresh``, computed on first verification."""
    pool_reference: dict[str, Any] | None = None
    """The stored reference of the pool entry ``fresh`` came from (None: a new draw), signs not applied."""
    inputs_checked: bool = False
    """Whether the inputs were compared right after the call on ``fresh`` (``hold``): no second compare."""


@dataclass
class Held:
    """A verified timed call's outputs and what decides them, kept for its check at the trial's end."""

    index: int
    outputs: dict[str, Any]
    """Private copies of the set's outputs right after the call."""
    state: list
    """The set's sign state for that call."""
    fresh: dict[str, Any] | None
    """The new draw the call ran on (None: a pool entry, or the seeded values x ``state``)."""
    pool_reference: dict[str, Any] | None
    """The pool entry's stored reference (None: a new draw, or no fresh values)."""
    whole: bool = False
    """A new draw checked against its whole reference even where others are sampled (``sampled.py``)."""


def torch_zeros_on(device) -> None:
    """Run one tiny CUDA op on ``device`` from this thread, so its primary context is current here."""
    import torch

    torch.zeros(1, device=device).add_(1)
    torch.cuda.synchronize(device)


def ipc_pickle(obj: Any) -> bytes:
    """Pickle with torch's reducers, so CUDA tensors travel as IPC handles."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers the CUDA tensor reducers

    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _poison_outputs(s: InputSet) -> None:
    """Fill a set's outputs with their dtype's poison pattern (``compare.poison_``): a skipped write shows."""
    for out in s.shared_out.values():
        poison_(out)


class Arena:
    """Input sets, outputs and references of one task on one device."""

    def __init__(
        self,
        task: Task,
        seeds: list[int],
        device: int,
        scratch: Path,
        guard_pages: bool = False,
        pool_size: int = 0,
        pool_reserve: int = 0,
        pool_max_uses: int = 0,
        sample_share: float = 1.0,
        fused: bool = True,
        input_check_share: float = 1.0,
        deferred_checks: bool = False,
    ) -> None:
        """Build the blob, the seeded sets and their references, and the verified pool.

        ``pool_size``: entries of the verified pool per key (``verified_pool.py``; 0: no pool), built
        only if ``pool_reserve`` device bytes stay free; each renewed after ``pool_max_uses`` sessions.
        ``sample_share``: of the task's independent indices, what a verified call on a new draw checks
        (``sampled.py``; 1: the whole reference). ``fused``: prepare timed calls' fresh values and check
        the inputs with one Triton kernel each where it can (``fused_inputs.py``;
        ``EvalSettings.fused_inputs``; ``self.fused`` says). ``input_check_share``: with the kernels, the
        share of each input's blocks that the check after a timed call compares (``_changed``;
        ``EvalSettings.input_check_share``). ``deferred_checks``: with the kernels, those checks' outcomes
        stay on the device until read (``_take_pending``; ``EvalSettings.deferred_call_checks``).
        """
        import torch

        self.task = task
        self.id = f"{task.id}-{uuid.uuid4().hex[:8]}"
        self.built_at = time.monotonic()
        """When it was built (``LocalGpuEvaluator._short_too_long``)."""
        self.device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        self.scratch = scratch
        self.namespace = load_reference(task)
        self.options = reference_options(task, self.namespace)
        self.perturb = SignPerturbation(task.definition, task.definition.axis_values(task.workload))
        self.fresh = fresh_names(task, self.namespace)
        """Inputs a timed call redraws."""
        self._mutated: set[str] = set()
        self._reserved = 0
        """Held calls the allocator has room for (``reserve_holds``)."""
        self.reference_s = 0.0
        """Wall seconds of the slowest reference run of the seeded sets (the step budget uses it)."""
        self.build_s = {"inputs": 0.0, "references": 0.0, "pool": 0.0}
        """Wall seconds spent building the seeded sets: input generation (derived inputs included, e.g.
        the fp32 forward state of an attention backward) and fp32 reference runs (once per arena); and
        the verified pool's draws and references (once per arena, plus its renewals)."""
        self.shapes = task.shapes()
        self._layout: list[list[Arg]] = []
        self._vmm: Any = None
        self._vmm_fds: list[int] = []
        self.guard_pages_error = ""
        """Why guard pages were asked for but not used (the blob fell back to one plain allocation)."""
        self._inputs_file: Path | None = None
        self.blob = self._allocate(len(seeds), guard_pages)
        try:  # a failure past the blob (out of memory in the references, say) must not leak its mappings
            self.guards = Guards(self.blob, self.layout, secrets.randbits(63))
            """The guard regions around every buffer, filled with this arena's secret pattern."""
            self.sets = [self._make_set(i, seed) for i, seed in enumerate(seeds)]
            self._sample_rng: random.Random = random.SystemRandom()
            self.sample_share = 1.0
            """Of the independent indices, what a verified call on a new draw checks (``sampled.py``)."""
            self.sampling_runs = 0
            """Reference runs of the self-test of sampling (``_test_sampling``: 0 or 1)."""
            self.sampling = self._test_sampling(sample_share)
            """Whether verified calls on new draws are checked on a sample, and why not (``sampled.py``)."""
            self.sampled_checks = 0
            """Verified calls checked on a sample so far."""
            self.input_check_share = input_check_share
            """Of each input's blocks, what the check after a timed call compares (``_changed``)."""
            self.deferred_checks = deferred_checks
            """Whether those checks' outcomes wait on the device for one read (``_take_pending``)."""
            self._check_generator = torch.Generator(device=self.device).manual_seed(secrets.randbits(63))
            """Keys of the sampled checks' block draws (secret, like every draw of the arena)."""
            self._pending: Any = None
            """Per input (``_slots``), the checks after timed calls that found it changed, not yet read
            (``_changed(..., sampled=True)``; read by ``_take_pending``); None: each check reads its own."""
            self._slots: dict[str, int] = {}
            self._fill: dict[str, int | None] | None = None
            """Per fresh input, the sign group ``fused_inputs.fill`` applies (None: the torch path)."""
            self.fused = self._plan_fused(fused)
            """Whether timed calls' inputs are prepared and checked by ``fused_inputs``, and why not."""
            self._pool_generator = torch.Generator(device=self.device).manual_seed(secrets.randbits(63))
            t = time.perf_counter()
            self.pool: VerifiedPool = build_pool(
                self, pool_size, pool_reserve, pool_max_uses, self._pool_generator
            )
            """Verified draws with their references (``verified_pool.py``); empty when off or not built."""
        except BaseException:
            with contextlib.suppress(Exception):  # a sticky CUDA error must not mask the first one
                self.close()
            with contextlib.suppress(Exception):  # close's synchronisation failed: release all the same
                self._release_vmm()
            raise
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.build_s["pool"] += time.perf_counter() - t

    # ------------------------------------------------------------------------------------ building

    def _tensor_names(self) -> list[tuple[str, str]]:
        defn = self.task.definition
        roles = [("in", n) for n, s in defn.inputs.items() if s.shape is not None]
        return roles + [("out", n) for n in defn.outputs]

    def _nbytes(self, name: str) -> int:
        import torch

        spec = self.task.definition.inputs.get(name) or self.task.definition.outputs[name]
        n = 1
        for d in self.shapes[name]:
            n *= d
        return n * torch.empty((), dtype=torch_dtype(spec.dtype)).element_size()

    def _allocate(self, n_sets: int, guard_pages: bool):
        """The blob: every buffer between guard regions (``guards.py``), with guard pages if asked."""
        import torch

        sizes = [[(role, name, self._nbytes(name)) for role, name in self._tensor_names()]] * n_sets
        if guard_pages and self.device.type != "cuda":
            self.guard_pages_error = f"guard pages need a CUDA device, not {self.device}"
        elif guard_pages:
            try:
                return self._allocate_vmm(sizes)
            except Exception as exc:  # noqa: BLE001 - any failure: fall back to the plain blob
                self._release_vmm()
                self.guard_pages_error = f"{type(exc).__name__}: {exc}"[:500]
        self.layout = plain_layout(sizes, _MIN_BLOB, _PAGE)
        self._offsets = [self.layout.offsets(i) for i in range(n_sets)]
        return torch.empty(self.layout.total, dtype=torch.uint8, device=self.device)

    def _allocate_vmm(self, sizes):
        """The blob as a virtual-memory reservation with an unmapped page after every buffer (``vmm.py``)."""
        from ptxgym.evaluation import vmm

        torch_zeros_on(self.device)  # the trusted thread's CUDA context is current
        index = self.device.index or 0
        self.layout = vmm_layout(sizes, vmm.granularity(index))
        runs = [(m.offset, m.size) for m in self.layout.mappings]
        handles, self._vmm_fds = vmm.create_runs([size for _, size in runs], index)
        self._vmm = vmm.MappedBlob(handles, self.layout.total, self.layout.page, runs, index)
        self._offsets = [self.layout.offsets(i) for i in range(len(sizes))]
        return self._vmm.tensor()

    def _release_vmm(self) -> None:
        import os

        if self._vmm is not None:
            self._vmm.release()
            self._vmm = None
        for fd in self._vmm_fds:
            os.close(fd)
        self._vmm_fds = []

    @property
    def guard_pages(self) -> bool:
        """Whether the blob has an unmapped page after every buffer (a virtual-memory blob)."""
        return bool(self.layout.mappings)

    def protection(self, why_off: str = "") -> str:
        """How out-of-bounds accesses are caught (a verdict's ``details["guard_pages"]``)."""
        if self.guard_pages:
            return "on: an unmapped page follows every buffer; guard regions checked after every call"
        why = self.guard_pages_error or why_off
        return f"off{f' ({why})' if why else ''}: guard regions checked after every call"

    def _view(self, offset: int, name: str):
        spec = self.task.definition.inputs.get(name) or self.task.definition.outputs[name]
        dtype = torch_dtype(spec.dtype)
        return self.blob[offset : offset + self._nbytes(name)].view(dtype).view(self.shapes[name])

    def _make_set(self, index: int, seed: int) -> InputSet:
        import torch

        defn = self.task.definition
        offsets = self._offsets[index]
        t = time.perf_counter()
        values = generate_inputs(self.task, self.namespace, seed, self.device)
        shared_in, base_in = {}, {}
        entry: list[Arg] = []
        for name in defn.inputs:
            value = values[name]
            if not hasattr(value, "shape"):
                entry.append(ScalarArg(value=value))
                continue
            view = self._view(offsets[name], name)
            view.copy_(value)
            shared_in[name] = view
            base_in[name] = value
            dtype = str(value.dtype).removeprefix("torch.")
            entry.append(TensorArg(role="in", offset=offsets[name], shape=self.shapes[name], dtype=dtype))
        del values
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.build_s["inputs"] += time.perf_counter() - t
        t = time.perf_counter()
        reference = run_reference(self.task, self.namespace, base_in)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.reference_s = max(self.reference_s, time.perf_counter() - t)
        self.build_s["references"] += time.perf_counter() - t
        shared_out = {}
        for name, spec in defn.outputs.items():
            shared_out[name] = self._view(offsets[name], name)
            poison_(shared_out[name])
            entry.append(
                TensorArg(role="out", offset=offsets[name], shape=self.shapes[name], dtype=spec.dtype)
            )
        self._layout.append(entry)
        return InputSet(
            seed=seed,
            shared_in=shared_in,
            shared_out=shared_out,
            base_in=base_in,
            reference=reference,
            state=self.perturb.identity(self.device),
        )

    def _plan_fused(self, wanted: bool) -> str:
        """Use ``fused_inputs`` for every fresh input if it can prepare each; compile its kernels now."""
        import torch

        if not wanted:
            return "off: EvalSettings.fused_inputs is off"
        if not self.fresh:
            return "off: no input is redrawn for timed calls"
        plan: dict[str, int | None] = {}
        for name in self.fresh:
            groups = [i for i, g in enumerate(self.perturb.groups) if name in g.inputs]
            axes = self.task.definition.inputs[name].shape or []
            lead: int | None = 0
            if len(groups) > 1:
                lead = None
            elif groups:
                g = self.perturb.groups[groups[0]]
                lead = len(g.axes) if tuple(axes[: len(g.axes)]) == g.axes else None
            why = fused_inputs.why_not(self.sets[0].shared_in[name], lead)
            if why:
                return f"off: {name}: {why}"
            plan[name] = groups[0] if groups else None
        self._one = torch.ones(1, dtype=torch.float32, device=self.device)
        self._flag = fused_inputs.flag(self.device)
        names = list(self.sets[0].shared_in)
        if self.deferred_checks and len(names) <= fused_inputs.FLAG_SLOTS:
            self._pending = fused_inputs.flag(self.device)
            self._slots = {n: k for k, n in enumerate(names)}
        try:  # compiled (or loaded from Triton's cache) here, not in a candidate's first timed call
            keys = fused_inputs.seeds(torch.Generator(device=self.device).manual_seed(0), 1, self.device)
            for name, group in plan.items():  # a scratch of two of its sign groups: the same variant
                shared = self.sets[0].shared_in[name]
                inner = shared.numel() // (1 if group is None else self.sets[0].state[group].numel())
                scratch = torch.zeros(2 * inner, dtype=shared.dtype, device=self.device)
                two = torch.ones(2, dtype=torch.float32, device=self.device)
                fused_inputs.fill(scratch, two, keys, 0)
                fused_inputs.differ_all([(shared, shared)], self._flag)
                # and the sampled comparison of a call's check (where the input has blocks to draw among)
                fused_inputs.differ_all([(shared, shared)], self._flag, self.input_check_share, keys)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot build or run: the torch path
            return f"off: the kernels failed: {type(exc).__name__}: {exc}"[:500]
        self._fill = plan
        return "on: one Triton pass per fresh input (draw, signs, both copies) and per input check"

    def _changed(self, pairs: dict[str, tuple[Any, Any]], sampled: bool = False) -> list[str]:
        """The names whose two tensors' bits differ.

        By ``compare.same_bits`` each, or where the kernels are in use by ``fused_inputs.differ_all`` (one
        pass each, one host read for all). ``sampled``: a timed call's check, which with the kernels
        compares a secret draw of ``input_check_share`` of each input's blocks (module docstring, "Input
        checks after timed calls"); the torch path compares everything.
        """
        if self._fill is not None and len(pairs) <= fused_inputs.FLAG_SLOTS:
            names, share, keys = list(pairs), 1.0, None
            if sampled and self.input_check_share < 1.0:
                share = self.input_check_share
                keys = fused_inputs.seeds(self._check_generator, len(pairs), self.device)
            if sampled and self._pending is not None and all(n in self._slots for n in names):
                slots = [self._slots[n] for n in names]
                known = fused_inputs.differ_into(list(pairs.values()), self._pending, slots, share, keys)
                return [names[i] for i in known]  # the rest when read (``_take_pending``)
            found = fused_inputs.differ_all(list(pairs.values()), self._flag, share, keys)
            return [names[i] for i in found]
        return [n for n, (a, b) in pairs.items() if not same_bits(a, b)]

    def _take_pending(self) -> None:
        """Read the checks after timed calls (one host read for all since the last), into ``_mutated``.

        They run on the GPU right after each call, in order with it (the next call's inputs are written
        after them), but are read only here: no host read, and no wait for the GPU, after every call.
        """
        if self._pending is None:
            return
        hits = self._pending.tolist()
        self._pending.zero_()
        self._mutated.update(n for n, k in self._slots.items() if hits[k])

    def _test_sampling(self, share: float) -> str:
        """Turn sampled checks on if the reference on a sample matches that sample of a whole reference."""
        axes = ", ".join(self.task.independent_axes)
        if share >= 1.0:
            return "off: EvalSettings.verify_sample_share is 1 (every check runs the whole reference)"
        if not axes:
            return "off: the task declares no independent axes"
        if self.task.tolerance.required_match < 1.0:
            share = 1 - self.task.tolerance.required_match
            return (
                f"off: the task's tolerance lets {share:.2g} of the elements fail (required_match): a "
                "sample's share of that allowance is a noisier test than the whole's"
            )
        n = sampled.units(self.task)
        if n < sampled.MIN_UNITS:
            return f"off: its independent axes ({axes}) have {n} indices, fewer than {sampled.MIN_UNITS}"
        sample = sampled.draw(self.task, share, self._sample_rng)
        if sample is None:
            return f"off: a share {share:g} of the {n} indices of ({axes}) is all of them"
        t = time.perf_counter()
        s = self.sets[0]
        self.sampling_runs += 1
        try:
            got = self._sampled_reference(s.base_in, sample)
        except Exception as exc:  # noqa: BLE001 - a reference that cannot run on a cut: whole checks
            return f"off: the reference does not run on a sample of ({axes}): {exc}"[:500]
        finally:
            self.build_s["references"] += time.perf_counter() - t
        whole = sampled.cut(self.task, s.reference, sample)
        check = outcome([compare_output(n, got[n], whole[n], self.task.tolerance) for n in whole])
        bound = sampled.AGREEMENT * self.task.tolerance.rel_norm
        drift = [c for c in check.outputs if c.rel_norm_error is not None and c.rel_norm_error > bound]
        if check.passed and drift:
            check.message = (
                f"{drift[0].name}: relative norm difference {drift[0].rel_norm_error:.3g} > {bound:g}"
            )
        if not check.passed or drift:
            return (
                f"off: the reference on {sample.describe()} of ({axes}) differs from that cut of the whole "
                f"reference ({check.message}): the task's independent_axes do not hold"
            )[:500]
        self.sample_share = share
        return f"on: {sample.describe()} of ({axes}) per verified call on a new draw (share {share:g})"

    def _sampled_reference(self, inputs: dict[str, Any], sample: sampled.Sample) -> dict[str, Any]:
        cut = sampled.cut(self.task, inputs, sample)
        return run_reference(self.task, self.namespace, cut, sampled.cut_shapes(self.task, sample))

    def _sampled_check(self, outputs: dict[str, Any], inputs: dict[str, Any]) -> SetCheck | None:
        """``outputs`` checked on a new secret sample against the reference for ``inputs``; None: off."""
        sample = (
            sampled.draw(self.task, self.sample_share, self._sample_rng) if self.sample_share < 1 else None
        )
        if sample is None:
            return None
        self.sampled_checks += 1
        return sampled.check(outputs, self._sampled_reference(inputs, sample), self.task, sample)

    # ------------------------------------------------------------------------------------- per call

    def attach_command(
        self,
        flush_bytes: int,
        cupti: bool,
        module_census: bool = False,
        hw_prepare: bool = False,
        hw_warm: bool = False,
        hw_prepare_attempts: int = HW_PREPARE_ATTEMPTS,
    ) -> Attach:
        """The command that maps this arena into a worker (send it with ``attach_fds``)."""
        if not self.guard_pages:
            return Attach(
                arena=self.id,
                blob=self.blob,
                sets=self._layout,
                flush_bytes=flush_bytes,
                cupti=cupti,
                module_census=module_census,
                hw_prepare=hw_prepare,
                hw_warm=hw_warm,
                hw_prepare_attempts=hw_prepare_attempts,
            )
        runs = [VmmRun(offset=m.offset, size=m.size) for m in self.layout.mappings]
        spec = VmmBlob(total=self.layout.total, page=self.layout.page, runs=runs)
        return Attach(
            arena=self.id,
            blob=None,
            vmm=spec,
            sets=self._layout,
            flush_bytes=flush_bytes,
            cupti=cupti,
            module_census=module_census,
            hw_prepare=hw_prepare,
            hw_warm=hw_warm,
            hw_prepare_attempts=hw_prepare_attempts,
        )

    def attach_fds(self) -> list[int]:
        """File descriptors the attach command needs (one per guard-page run, in order), else none."""
        return list(self._vmm_fds) if self.guard_pages else []

    def renew_pool(self) -> None:
        """Redraw the pool entries that served their sessions (``verified_pool.renew``; before a session)."""
        self.build_s["pool"] += renew(self, self.pool, self._pool_generator)

    def prepare(
        self,
        index: int,
        generator,
        perturb: bool = True,
        fresh: bool = False,
        entry: PoolEntry | None = None,
    ) -> None:
        """Give set ``index`` new values in place (same addresses) and poison its outputs.

        ``fresh``: redraw the ``fresh`` inputs (a timed call); otherwise the set returns to its seeded
        values and is sign-flipped (a correctness call). Sign groups still flip the inputs not redrawn.
        ``entry``: with ``fresh``, the fresh inputs come from this pool entry (a verified call), times
        the set's signs like every input of a sign group, instead of a new draw (``verified_pool.py``).
        """
        s = self.sets[index]
        redraw = fresh and bool(self.fresh)
        self._retire_fresh(s, rewrite=not redraw)
        flip = [n for n in self.perturb.changed_inputs if not (redraw and n in self.fresh)]
        if perturb and flip:
            signs = self.perturb.draw(generator, self.device)
            self.perturb.apply_inputs({n: s.shared_in[n] for n in flip}, signs)
            s.state = self.perturb.compose(s.state, signs)
        if redraw:
            # The same GPU work before every timed call, pool entry or not (a draw, the set's signs on
            # the redrawn inputs of a sign group, a copy): a shorter preparation would tell the
            # candidate, from the gap before its call, that this call will be verified.
            if self._fill is not None:
                s.fresh = self._fill_fresh(s, generator, entry)
            else:
                drawn = draw_fresh(self.task, self.fresh, generator, self.device)
                source = entry.fresh if entry is not None else drawn
                kept = tuple(n for n in self.perturb.changed_inputs if n not in self.fresh)
                s.fresh = self.perturb.expected_inputs(source, s.state, skip=kept)
                for name, value in s.fresh.items():
                    s.shared_in[name].copy_(value)
            s.pool_reference = entry.reference if entry is not None else None
        _poison_outputs(s)

    def rest(self, index: int) -> None:
        """A warm-up call's preparation without a draw (``EvalSettings.warmup_redraw`` off).

        The set keeps the values the previous call left (fresh or seeded); only its outputs are poisoned.
        Its inputs are compared after the call as after any other (``hold``), and otherwise before the
        set's next draw replaces them (``_retire_fresh``).
        """
        s = self.sets[index]
        s.inputs_checked = False
        _poison_outputs(s)

    def _fill_fresh(self, s: InputSet, generator, entry: PoolEntry | None) -> dict[str, Any]:
        """``prepare``'s fresh values by ``fused_inputs.fill``: the same kernel work, entry or not.

        A new draw's keys come from the session's generator; an entry's are its stored ones (the keys are
        drawn either way, so that a verified call's preparation launches what any other's does). The
        draw, times the set's signs, goes into the shared buffers and a private copy.
        """
        assert self._fill is not None
        keys = fused_inputs.seeds(generator, len(self._fill), self.device)
        if entry is not None:
            assert entry.keys is not None, "the pool is built after the fused plan, its entries keyed"
            keys = entry.keys
        fresh = {}
        for k, (name, group) in enumerate(self._fill.items()):
            fresh[name] = fused_inputs.fill(s.shared_in[name], self.fill_signs(s.state, group), keys, k)
        return fresh

    @property
    def fill_plan(self) -> dict[str, int | None] | None:
        """Per fresh input, the sign group ``fused_inputs.fill`` applies (None: the torch path)."""
        return self._fill

    def fill_signs(self, state, group: int | None):
        """The signs ``fused_inputs.fill`` multiplies a fresh input by: its group's in ``state``, or one."""
        return state[group].reshape(-1) if group is not None else self._one

    def _retire_fresh(self, s: InputSet, rewrite: bool) -> None:
        """Forget a set's fresh values, noting any the candidate overwrote; ``rewrite``: back to seeded."""
        if s.fresh is None:
            return
        if not s.inputs_checked:
            pairs = {n: (s.shared_in[n], v) for n, v in s.fresh.items()}
            self._mutated.update(self._changed(pairs, sampled=True))
        s.fresh, s.fresh_reference, s.pool_reference, s.inputs_checked = None, None, None, False
        if rewrite:
            others = tuple(n for n in s.base_in if n not in self.fresh)
            want = self.perturb.expected_inputs(s.base_in, s.state, skip=others)
            for name in self.fresh:
                s.shared_in[name].copy_(want[name])

    def expected_inputs(self, index: int) -> dict[str, Any]:
        """What the shared inputs of set ``index`` must hold now (private tensors)."""
        s = self.sets[index]
        fresh = s.fresh or {}
        want = self.perturb.expected_inputs(s.base_in, s.state, skip=tuple(fresh))
        want.update(fresh)
        return want

    def expected_outputs(self, index: int, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        """The reference outputs for what set ``index`` holds now (run once per fresh draw, when asked).

        After a pool entry: its stored reference times the set's output signs. ``inputs``:
        ``expected_inputs(index)`` if the caller already has it.
        """
        s = self.sets[index]
        if s.fresh is None:
            return self.perturb.expected(s.reference, s.state)
        if s.fresh_reference is None and s.pool_reference is not None:
            s.fresh_reference = self.perturb.expected(s.pool_reference, s.state)
        elif s.fresh_reference is None:
            want = inputs if inputs is not None else self.expected_inputs(index)
            s.fresh_reference = run_reference(self.task, self.namespace, want)
        return s.fresh_reference

    def verify(self, index: int) -> SetCheck:
        """Inputs of set ``index`` intact and its outputs equal to the reference for its current values.

        A new draw's outputs are checked on a sample (``sampled.py``).
        """
        s = self.sets[index]
        want = self.expected_inputs(index)
        if s.fresh is not None and s.pool_reference is None and s.fresh_reference is None:
            inputs = check_call({}, {}, s.shared_in, want, self.task.tolerance)
            if not inputs.passed:
                return inputs
            check = self._sampled_check(s.shared_out, want)  # a new draw: its reference on a sample
            if check is not None:
                return check
        return check_call(
            s.shared_out, self.expected_outputs(index, want), s.shared_in, want, self.task.tolerance
        )

    def copy_outputs(self, index: int) -> dict[str, Any]:
        """Private copies of set ``index``'s outputs (queued on the trusted side's stream).

        Taken right after every call's reply, and the call's wall ends only once they are done
        (``Session._call``): a reply the worker sends before its work has finished (another thread of its
        process can write the reply channel) no longer shortens the wall, since this read of the outputs
        runs after that work, or finds it unfinished.
        """
        return {name: t.clone() for name, t in self.sets[index].shared_out.items()}

    def output_slots(self, index: int) -> tuple[dict[str, Any], list[tuple[int, int, int]]] | None:
        """``copy_outputs``'s copies for a timed exchange that runs them itself (``exchange.py``).

        Empty private tensors and the (destination, source, bytes) copies that fill them; None where that
        cannot be: an output not contiguous on a CUDA device.
        """
        shared = self.sets[index].shared_out
        if any(t.device.type != "cuda" or not t.is_contiguous() for t in shared.values()):
            return None
        slots = {name: t.new_empty(t.shape) for name, t in shared.items()}
        copies = [(slots[n].data_ptr(), t.data_ptr(), t.nbytes) for n, t in shared.items() if t.nbytes]
        return slots, copies

    def hold(self, index: int, keep: bool, outputs: dict[str, Any], whole: bool = False) -> Held | None:
        """Keep a timed call's output copies (``copy_outputs``) if ``keep``: a verified call (``check_held``).

        Every call of a trial that verifies some of its calls takes the copy, kept or not, and none is
        checked before the trial ends: a check right after a verified call would lengthen the gap before
        the next one, telling the candidate which calls were verified (after the last of a trial's
        verified calls, the rest of the trial could not be checked).

        The inputs are compared with what they must hold then too (every input of the set, bit for bit;
        a write is noted for ``mutated_inputs``), the check a verified call made before it was deferred:
        a candidate that wrote into its inputs after computing would otherwise restore them unseen.
        ``whole``: a new draw's check runs its whole reference, never a sample (``sampled.py``).
        """
        s = self.sets[index]
        want = self.expected_inputs(index)
        self._mutated.update(self._changed({n: (t, want[n]) for n, t in s.shared_in.items()}, sampled=True))
        s.inputs_checked = s.fresh is not None
        if not keep:
            return None
        fresh = s.fresh if s.pool_reference is None else None  # an entry's outputs need only its reference
        return Held(index, outputs, s.state, fresh, s.pool_reference, whole)

    def reserve_holds(self, kept: int) -> None:
        """Have the allocator hold room for ``kept`` held calls before the first trial that defers.

        A kept call's copies stay allocated until its trial ends; the first time, the next allocations
        would have to grow the allocator, which the worker can see in the device's free memory
        (``cudaMemGetInfo``) right after a verified call. Allocated once per arena and freed at once:
        the caching allocator keeps the blocks.
        """
        import torch

        if kept <= self._reserved:
            return
        s = self.sets[0]
        outputs = [{n: torch.empty_like(t) for n, t in s.shared_out.items()} for _ in range(kept + 2)]
        fresh = [
            {n: torch.empty_like(s.shared_in[n]) for n in self.fresh}
            for _ in range(len(self.sets) + kept + 1)
        ]
        del outputs, fresh
        self._reserved = kept

    def check_held(self, held: Held) -> SetCheck:
        """The outputs a verified call left (``hold``) against the reference for what it ran on.

        Its inputs were compared right after the call (``hold``); a write shows in ``mutated_inputs``.
        """
        s = self.sets[held.index]
        if held.pool_reference is not None:
            expected = self.perturb.expected(held.pool_reference, held.state)
        elif held.fresh is None:
            expected = self.perturb.expected(s.reference, held.state)
        else:
            want = self.perturb.expected_inputs(s.base_in, held.state, skip=tuple(held.fresh))
            want.update(held.fresh)
            check = None if held.whole else self._sampled_check(held.outputs, want)  # on a sample
            if check is not None:
                return check
            expected = run_reference(self.task, self.namespace, want)
        return check_call(held.outputs, expected, {}, {}, self.task.tolerance)

    def check_guards(self) -> GuardBreach | None:
        """Whether the last call wrote outside its buffers (``guards.py``); a breach re-fills the guards."""
        return self.guards.check()

    def queue_guard_check(self) -> None:
        """``check_guards`` queued on the GPU, read by ``pending_guard_breach`` (``Guards.queue_check``)."""
        self.guards.queue_check()

    def pending_guard_breach(self) -> GuardBreach | None:
        """A breach the queued guard checks found since the last read (``Guards.take_pending``)."""
        return self.guards.take_pending()

    def _damaged(self):
        """(shared tensor, what it must hold, input name) for every input of any set that differs."""
        import torch

        for i, s in enumerate(self.sets):
            want = self.expected_inputs(i)
            for n, t in s.shared_in.items():
                if not torch.equal(t, want[n]):
                    yield t, want[n], n

    def mutated_inputs(self) -> list[str]:
        """Names of inputs (in any set) that differ from what they must hold, or did before a redraw."""
        self._take_pending()
        return sorted(self._mutated | {n for _, _, n in self._damaged()})

    def restore(self) -> list[str]:
        """Rewrite every shared input that differs from what it must hold; return the names rewritten.

        A candidate that writes to its inputs gets INPUT_MUTATED, but the buffers it wrote are shared with
        every later worker of this arena: without this, the next candidates would inherit the damage (and
        be judged INPUT_MUTATED or compared against a reference of other inputs). Called before each
        worker session; costs one comparison pass over the inputs when nothing was touched. Guard regions
        an earlier worker wrote are re-filled too, the last fresh values of every set give way to its
        seeded ones (the last call on a set may have brought a pool entry), and every set's outputs are
        poisoned: a set is poisoned
        again only when a call is prepared on it, so without this the first calls of the next session
        could read what the last one left in another set's outputs (a message from one candidate to the
        next, such as the verified pool's entries it recognised: ``verified_pool.py``, Reuse).
        """
        import torch

        for s in self.sets:  # the last fresh values (a verified call's may be a pool entry): back to seeded
            self._retire_fresh(s, rewrite=True)
        self._take_pending()
        self._mutated.clear()
        self.guards.take_pending()  # an earlier session's queued checks: read and forgotten
        self.guards.check()  # re-fills any guard an earlier worker wrote
        fixed = set()
        for tensor, want, name in list(self._damaged()):
            tensor.copy_(want)
            fixed.add(name)
        for s in self.sets:
            _poison_outputs(s)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return sorted(fixed)

    @property
    def seeds(self) -> list[int]:
        """Seeds of the input sets."""
        return [s.seed for s in self.sets]

    def inputs_file(self) -> Path:
        """The first set's current input values saved for one-shot driver processes (ncu, memcheck)."""
        import torch

        if self._inputs_file is None:
            path = self.scratch / f"{self.id}-inputs.pt"
            want = self.expected_inputs(0)
            torch.save(
                {
                    "inputs": {n: t.cpu() for n, t in want.items()},
                    "order": [n for n in self.task.definition.inputs if n in want],
                    "outputs": {
                        n: (list(self.shapes[n]), spec.dtype)
                        for n, spec in self.task.definition.outputs.items()
                    },
                },
                path,
            )
            self._inputs_file = path
        return self._inputs_file

    def close(self) -> None:
        """Drop the saved inputs file, a guard-page blob's mappings and the device memory the arena holds.

        The verified pool's entries (2.7-24 GB of tensors outside the blob), the sets' tensors and a plain
        blob go too: a turn whose proofs still run keeps this object alive, and an arena closed to make
        room (``LocalGpuEvaluator._new_arena``) must free its memory now, not when the last such turn
        ends (a reviewer's find). A closed arena serves nothing more.
        """
        if self._inputs_file is not None:
            self._inputs_file.unlink(missing_ok=True)
        if self._vmm is not None and self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        self._release_vmm()
        if hasattr(self, "pool"):  # in place: a pending turn's draws (Session.draws, result.pool) hold it
            self.pool.entries.clear()
            self.pool.nbytes, self.pool.error = 0, "the arena is closed"
        if hasattr(self, "guards"):
            del self.guards  # its views of the blob
        self.sets = []
        self.blob = None
