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
  is in the tensor map, in memory), so SASS counts leave the TMA share unknown (``tma_share`` None).
  A family with no MMA (TMA alone: GqaPagedDecode) is judged by the bytes its loads moved alone
  (``work_verdict(..., mma=False)``), so from counts its work is unknown, never a no that an in-band
  yes from the hardware counters would contradict; only those counters can credit it.

Hardware counters (``hw_share``): the native runner reads CUPTI's range profiler over a second, unpatched
verified call (``Call.hw_count``; the metrics in ``runner/hw_logic.h``, chosen from the host API's list
for GH100 in bench/results/range_profiler_metrics_2026-12-04.txt, all three in one pass)::

    hw_mmas      = smsp__inst_executed_pipe_tensor_op_gmma.sum / 4     (a wgmma: one instruction per warp)
    hw_mma_flops = hw_mmas * flops_per_mma                             (the counted call's mma_flops / mmas)
    tma_share    = l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum / task.min_bytes

* The counter counts warp instructions of the tensor pipe's GMMA ops (HGMMA/QGMMA/IGMMA/BGMMA), not
  their tiles; the FLOPs per MMA come from the SASS-counted call (exact for a kernel that runs the same
  mix in both calls). The MMA share that decides is the smaller of the two calls' (``combined``), so a
  kernel that issues wgmma only in the slow, patched call loses the credit.
* The TMA counter is the bytes global TMA loads read from L2 into the SM (whatever L2 hit or missed):
  the traffic TMA moved towards shared memory. ``min_bytes`` counts inputs and outputs once, so a kernel
  loading every input once through TMA has its inputs' part (GEMM 0.57, attention forward 0.75), a tiled
  one far more (``feedback.MIN_TMA_SHARE`` says why 0.5).
* Known residue: the FLOPs per MMA are the patched call's; a kernel that notices the patching could run
  large tiles there and small ones unpatched, and pass with up to (large / small tile) times fewer real
  wgmma FLOPs, the rest of its products done otherwise (still checked for correctness).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ptxgym.records.arch import ArchSpec
from ptxgym.records.feedback import MIN_MMA_SHARE, MIN_TMA_SHARE, Verdict, work_verdict

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
    mmas: float = 0.0
    """Warpgroup MMAs the rows stand for (``warpgroup_mmas`` summed over sized MMA rows)."""


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
    if not arch.mma_opcodes:  # a copy family (TMA): its work is bytes, which counts cannot size
        return WorkShare(
            None,
            None,
            None,
            Verdict.UNKNOWN,
            "the target family has no MMA; its TMA bytes are unknown from counts",
        )
    flops, mmas, unsized = 0.0, 0.0, set()
    for opcode, inst, threads in rows:
        if not arch.is_mma_opcode(opcode) or inst <= 0 or threads <= 0:
            continue
        tile = tile_flops(opcode)
        if tile is None:
            unsized.add(opcode.split(".")[0])
            continue
        mmas += warpgroup_mmas(inst, threads)
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
        mmas,
    )


GMMA_INST_METRIC = "smsp__inst_executed_pipe_tensor_op_gmma.sum"
"""Range-profiler metric: warp instructions of the tensor pipe's GMMA ops (``runner/hw_logic.h``)."""
TMA_BYTES_METRIC = "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"
"""Range-profiler metric: bytes global TMA loads read from L2 into the SM (``runner/hw_logic.h``)."""
TMA_INST_METRIC = "smsp__inst_executed_op_tma_ld.sum"
"""Range-profiler metric: warp instructions of global TMA loads (UTMALDG, UBLKCP.S.G) executed."""


def smallest_tile_flops(opcodes: Iterable[str], arch: ArchSpec) -> float | None:
    """FLOPs of the smallest MMA tile any of ``opcodes`` spells (None: no sized MMA opcode).

    The hardware counter counts GMMA instructions, not their tiles: sized by the smallest tile the module
    holds, the executed FLOPs are a lower bound (exact for a kernel with one tile shape).
    """
    sized = [t for op in opcodes if arch.is_mma_opcode(op) and (t := tile_flops(op))]
    return float(min(sized)) if sized else None


@dataclass(frozen=True)
class HwShare:
    """The target family's share of one unpatched call's work, from hardware counters (``hw_share``)."""

    mma_flops: float | None
    """GMMA instructions / 4 x the counted call's FLOPs per MMA (None: no FLOPs per MMA known)."""
    mma_share: float | None
    """mma_flops / task FLOPs (None when either is unknown)."""
    tma_bytes: float
    """Bytes TMA loads read from L2."""
    tma_share: float | None
    """tma_bytes / the task's minimal traffic (None without it)."""
    message: str


def tma_share(tma_bytes: float, min_bytes: float) -> float | None:
    """Bytes TMA loads moved over the task's minimal traffic; None without a positive ``min_bytes``."""
    return tma_bytes / min_bytes if min_bytes > 0 else None


def hw_share(
    metrics: dict[str, float], flops_per_mma: float | None, task_flops: float, min_bytes: float
) -> HwShare:
    """Shares of the task's FLOPs and minimal traffic in one hardware-counted call (module docstring).

    Raises ``KeyError`` naming a metric the counters lack (the worker's reply is not trusted to hold them).
    """
    missing = [m for m in (GMMA_INST_METRIC, TMA_BYTES_METRIC) if m not in metrics]
    if missing:
        raise KeyError(f"the hardware counters lack {', '.join(missing)}")
    mmas = metrics[GMMA_INST_METRIC] / WARPGROUP_WARPS
    flops = mmas * flops_per_mma if flops_per_mma is not None else None
    share = flops / task_flops if flops is not None and task_flops > 0 else None
    tma_bytes = metrics[TMA_BYTES_METRIC]
    tma = tma_share(tma_bytes, min_bytes)
    shown = "unknown" if share is None else f"{100 * share:.1f}%"
    shown_tma = "unknown" if tma is None else f"{100 * tma:.1f}%"
    message = (
        f"hardware counters over an unpatched call: {mmas:.6g} wgmma, {shown} of the task's FLOPs; TMA loads "
        f"moved {tma_bytes:.4g} B, {shown_tma} of its minimal traffic {min_bytes:.4g} B (at least "
        f"{100 * MIN_TMA_SHARE:.0f}% needed)"
    )
    return HwShare(flops, share, tma_bytes, tma, message)


def combined(sass_share: float | None, hw_share: float | None) -> float | None:
    """The MMA share that decides: the smaller of the SASS-counted and the hardware-counted call's.

    Without a SASS share there is none; without a hardware one, the SASS share stands.
    """
    if sass_share is None or hw_share is None:
        return sass_share
    return min(sass_share, hw_share)
