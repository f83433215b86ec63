"""How much of the task's work the target instruction family did: executed MMA FLOPs / task FLOPs.

Input: the executed counts per SASS instruction of one candidate call, as rows of (opcode with
modifiers, ``inst_executed``, ``thread_inst_executed_true``) (Nsight Compute's source page, or any
in-band source of the same counts). Output: ``WorkShare`` (the ``TargetInfo`` fields ``mma_flops``,
``mma_share``, ``tma_share`` and ``work``).

Formula (Hopper, ``wgmma.mma_async``)::

    mma_flops = sum over MMA rows of  ops(row) * tile_flops(opcode)
    ops(row)  = min(thread_inst_executed_true / 128, inst_executed / 4)
    tile_flops(OP.MxNxK...) = 2 * M * N * K          (M * N * K for a sparse ``.SP`` opcode)
    mma_share = mma_flops / task.flops

Assumptions, each from a measurement or the instruction's definition:

* A wgmma is a warpgroup instruction: the 4 warps (128 threads) of a warpgroup each execute the HGMMA
  instruction once per MMA of one M x N x K tile, so one MMA counts 4 in ``inst_executed`` (per warp)
  and 128 in ``thread_inst_executed_true`` (per thread whose predicate is true). Measured on the H200
  (bench/results/expert_gemm.txt): the shipped GEMM expert, 1792 tiles x 2 warpgroups x 80 k-blocks
  x 4 HGMMA.64x256x16 = 1,146,880 MMAs, showed 146,800,640 = 128 x 1,146,880 predicate-true threads,
  i.e. exactly the task's 2 x 8192 x 7168 x 5120 FLOPs (share 1.000). The minimum of the two counts is
  taken so that neither a partly predicated-off instruction nor an inflated thread count adds FLOPs.
* The opcode spells the tile: ``HGMMA.64x256x16.F32.BF16`` is one m64n256k16 MMA (2*64*256*16 FLOPs);
  fp8 ``QGMMA.64xNx32``, tf32 ``HGMMA.64xNx8`` likewise. A sparse MMA (``.SP``, 2:4 structured A)
  multiplies half the operand pairs its K spells, so it counts half. The FLOPs are those of the
  instruction, whatever data it reads: the share proves the volume of target MMA work, not that its
  results reach the outputs (the correctness check covers the outputs).
* The task's FLOPs (``Task.flops``) are its matrix-product FLOPs (GEMM 2MNK, attention 4BHS^2D forward,
  10BHS^2D backward, half for causal), so an expert kernel's share is about 1.0: 1.000 for the GEMM and
  the MHA forward, 1.031 for the causal forward (its diagonal tiles are computed whole), measured as
  above (bench/results/expert_eval_2026-12-03.txt). A share above 1 is normal; only the minimum matters.
* An MMA opcode without a spelled tile (Blackwell's tcgen05 ``UTC*MMA`` keeps its shape in an instruction
  descriptor register) cannot be sized from counts: the share is unknown, never a yes.
* TMA bytes: a ``UTMALDG`` count says how many copies ran, not how many bytes each moved (the box size
  is in the tensor map, in memory), so the TMA share is unknown from counts alone (``tma_share`` None)
  until a GPU measurement (e.g. a DRAM/L2 traffic counter over the TMA unit) provides the bytes; it is
  reported, never required and never a yes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import MIN_MMA_SHARE, Verdict, work_verdict

WARPGROUP_THREADS = 128
"""Threads of a warpgroup: one wgmma counts this many predicate-true thread instructions."""
WARPGROUP_WARPS = 4
"""Warps of a warpgroup: one wgmma counts this many warp-level instructions."""

_TILE = re.compile(r"^[A-Z0-9]+\.(\d+)x(\d+)x(\d+)(?:\.|$)")


@dataclass(frozen=True)
class WorkShare:
    """The target family's share of one call's work."""

    mma_flops: float | None
    """Executed target-MMA FLOPs (None: an MMA row whose tile the opcode does not spell)."""
    mma_share: float | None
    """mma_flops / task FLOPs (None when either is unknown)."""
    tma_share: float | None
    """Always None from counts: the bytes of a TMA copy are not in its opcode (module docstring)."""
    work: Verdict
    """``work_verdict(mma_share)``: yes at or above ``MIN_MMA_SHARE``."""
    message: str


def tile_flops(opcode: str) -> int | None:
    """FLOPs of one MMA whose opcode spells its tile (``HGMMA.64x256x16.F32.BF16`` -> 524288), else None."""
    match = _TILE.match(opcode)
    if match is None:
        return None
    m, n, k = (int(g) for g in match.groups())
    dense = 2 * m * n * k
    sparse = "SP" in opcode.upper().split(".")[1:]
    return dense // 2 if sparse else dense


def warpgroup_mmas(inst_executed: int, threads_true: int) -> float:
    """MMAs a row's counts stand for: the smaller of the per-warp and the per-thread reading."""
    return min(threads_true / WARPGROUP_THREADS, inst_executed / WARPGROUP_WARPS)


def work_share(rows: Iterable[tuple[str, int, int]], arch: ArchSpec, task_flops: float) -> WorkShare:
    """The share of ``task_flops`` the family's MMAs executed in the rows of one call (module docstring)."""
    flops, unsized = 0.0, set()
    for opcode, inst, threads in rows:
        if not arch.is_mma_opcode(opcode) or inst <= 0 or threads <= 0:
            continue
        tile = tile_flops(opcode)
        if tile is None:
            unsized.add(opcode.split(".")[0])
            continue
        flops += warpgroup_mmas(inst, threads) * tile
    if unsized:
        names = ", ".join(sorted(unsized))
        return WorkShare(
            None,
            None,
            None,
            Verdict.UNKNOWN,
            f"the tile of {names} is not spelled in its opcode, so its FLOPs cannot be counted: "
            "work share unknown",
        )
    share = flops / task_flops if task_flops > 0 else None
    verdict = work_verdict(share)
    shown = "unknown" if share is None else f"{100 * share:.1f}%"
    need = f"{100 * MIN_MMA_SHARE:.0f}%"
    return WorkShare(
        flops,
        share,
        None,
        verdict,
        f"target MMAs executed {flops:.4g} FLOPs, {shown} of the task's {task_flops:.4g} (at least {need} "
        f"needed); TMA bytes share unknown from counts",
    )
