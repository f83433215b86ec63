"""Verified calls on new values checked on a secret sample of independent indices.

A verified timed call on a new draw needs the reference for its values, computed while the GPU is held
for the candidate: on the H100 the MHA forward 4x48x4096x128's six such calls per evaluation (the
verified pool's new draws) spent 0.63 s of its 3.06 s (``bench/results/gpu_cost_2026-12-05_default_h100.txt``,
``time_verify``). Where a task declares ``independent_axes`` (``TaskRecord``: the outputs at one index
of those leading axes depend only on the inputs at that index, such as the batch and heads of attention
or the rows of a GEMM), such a call is checked on a sample instead: after the call, a secret share of
the indices (``EvalSettings.verify_sample_share``, drawn in the trusted process) is cut out of every
input, the unchanged reference runs on that cut alone, and the same cut of the outputs must match it.
The whole of every output is still scanned for poison (an element never written) and NaN or infinity.

What it leaves, and what closes it. The sample is drawn after the call, in the trusted process, so a
candidate cannot aim its errors at indices outside it. But it knows which calls are timed (the command
says so) and can do the whole work on correctness calls alone; and where it recognises the verified
pool's entries, on those too. Against sampled checks alone, an output wrong at k of U indices passes one
check with probability about (1 - n/U)^k for n sampled (MHA forward: n = 48 of 192 heads at 0.25, so a
kernel skipping one head passes 75% of checks, one skipping 4 heads 32%; a reviewer's cheat skipping
one head of eight on timed calls passed 4 of 60 sessions). So in every timing one verified call on a
new draw, at a secret place in a secret trial (``Session._whole_place``), is also checked against its
whole reference: a kernel that skips work on every timed call fails it. That whole check runs after the
timing's last call, never at its trial's end (where its longer reference lengthened the gap before the
next trial: a kernel honest until it saw that gap passed 13 of 30 sessions in a reviewer's test). One
that skips k indices on a share g of its timed calls passes the whole check with probability 1 - g and
each sampled one with about 1 - g (1 - (1 - n/U)^k), for a gain of g x k / U of the work (skipping 10
heads of 192 on half the calls, 2.6% of the work, passes the MHA forward's six sampled checks and its
whole one with ~1%: 0.53^6 x 0.5). With the pool's six new draws per evaluation that is six sampled
references and one whole: ~0.26 s of reference work instead of 0.63 s (an estimate from those figures,
taking a sample's cost as its share); without the pool (whose counted calls draw new values too), 11
sampled and one whole instead of 11 whole.

Whole checks, always: correctness calls (sign flips of the seeded sets) and pool entries (their stored
references); and every check where sampling would be a weaker test: fewer than ``MIN_UNITS`` indices,
or a tolerance that lets some elements fail (``required_match`` below 1, as the MHA backward's: a
sample's share of that allowance is a noisier test, and honest kernels near it would fail more often).

A declaration that is false would make wrong references, so it is tested once per arena, where the
whole reference of the first seeded set is at hand: the reference on a sample must match that sample
of the whole one (``AGREEMENT``), or sampling is off for the arena (``Arena.sampling``
says why) and every check runs the whole reference.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ptxgym.evaluation.compare import OutputCheck, SetCheck, numerical, outcome, unwritten_or_nonfinite
from ptxgym.records.tasks import Task

MIN_UNITS = 64
"""Fewer independent indices than this: every check runs the whole reference (a GEMM of 4 rows would
have a sample of one row, and skipping a quarter of it would pass three checks in four)."""
AGREEMENT = 0.05
"""How close the self-test wants the two references: every element within the task's tolerance and each
output's relative norm difference within this share of the task's ``rel_norm`` (a reference on fewer
indices may only round differently, as a GEMM on fewer rows can: cuBLAS may pick another algorithm)."""


@dataclass(frozen=True)
class Sample:
    """A secret set of indices of a task's independent axes (flattened, in increasing order)."""

    lead: tuple[int, ...]
    """The sizes of the independent axes."""
    picks: tuple[int, ...]

    @property
    def units(self) -> int:
        """How many indices the independent axes have."""
        return math.prod(self.lead)

    def describe(self) -> str:
        """E.g. ``48 of 192 indices``."""
        return f"{len(self.picks)} of {self.units} indices"


def units(task: Task) -> int:
    """How many indices the task's independent axes span (0 without any)."""
    if not task.independent_axes:
        return 0
    values = task.definition.axis_values(task.workload)
    return math.prod(values[a] for a in task.independent_axes)


def draw(task: Task, share: float, rng: random.Random) -> Sample | None:
    """A sample of ``share`` of the task's independent indices (at least one), or None for the whole."""
    total = units(task)
    n = max(1, math.ceil(share * total)) if total else 0
    if not total or n >= total:
        return None
    values = task.definition.axis_values(task.workload)
    lead = tuple(values[a] for a in task.independent_axes)
    return Sample(lead, tuple(sorted(rng.sample(range(total), n))))


def cut(task: Task, tensors: dict[str, Any], sample: Sample) -> dict[str, Any]:
    """``tensors`` (inputs or outputs by name) with the sample cut out of those its axes lead.

    A cut tensor keeps its rank: its independent axes become 1, ..., 1, n (the sample's size), so a
    reference that reads its sizes from its arguments runs on the cut unchanged. Other values pass whole.
    """
    import torch

    lead = len(sample.lead)
    out: dict[str, Any] = {}
    index = None
    for name, value in tensors.items():
        spec = task.definition.inputs.get(name) or task.definition.outputs.get(name)
        shape = spec.shape if spec is not None else None
        if not shape or shape[:lead] != list(task.independent_axes) or not hasattr(value, "reshape"):
            out[name] = value
            continue
        if index is None or index.device != value.device:
            index = torch.tensor(sample.picks, dtype=torch.long, device=value.device)
        rest = tuple(value.shape[lead:])
        flat = value.reshape(sample.units, *rest)
        out[name] = flat.index_select(0, index).reshape(*([1] * (lead - 1)), len(sample.picks), *rest)
    return out


def cut_shapes(task: Task, sample: Sample) -> dict[str, tuple[int, ...]]:
    """The shape of every input and output once cut (``cut``)."""
    lead = len(sample.lead)
    shapes = task.shapes()
    for name, spec in [*task.definition.inputs.items(), *task.definition.outputs.items()]:
        if spec.shape and spec.shape[:lead] == list(task.independent_axes):
            shapes[name] = (*([1] * (lead - 1)), len(sample.picks), *shapes[name][lead:])
    return shapes


def locator(sample: Sample) -> Callable[[list[int]], list[int]]:
    """Where an index into a cut output lies in the whole output."""

    def locate(at: list[int]) -> list[int]:
        lead = len(sample.lead)
        unit = sample.picks[at[lead - 1]]
        whole = []
        for size in reversed(sample.lead):
            whole.append(unit % size)
            unit //= size
        return [*reversed(whole), *at[lead:]]

    return locate


def check(outputs: dict[str, Any], expected: dict[str, Any], task: Task, sample: Sample) -> SetCheck:
    """Every output scanned whole for poison and non-finite values, then its sample against ``expected``.

    ``expected``: the reference run on the cut inputs (the same sample).
    """
    tol = task.tolerance
    got = cut(task, outputs, sample)
    checks: list[OutputCheck] = []
    where = locator(sample)
    for name, out in outputs.items():
        failed = unwritten_or_nonfinite(name, out)
        if failed is None:
            failed = numerical(name, got[name].float(), expected[name].float(), tol, where, " sampled")
        checks.append(failed)
    return outcome(checks)
