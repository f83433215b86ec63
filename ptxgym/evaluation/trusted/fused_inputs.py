"""A timed call's input preparation in one GPU pass per input, and the input check in one more (Triton).

Every timed call of a trial, warm-up included, gets fresh values (``arena.py``): with torch ops that is
a draw (``torch.randn`` into a new tensor), the set's signs on the redrawn inputs of a sign group (a
second tensor), a copy into the shared buffers, and after the call a comparison of the shared buffers
with the private copy (``compare.same_bits``: an 8-byte equality map, then its reduction). On the H100 a
new draw of the MHA forward's 604 MB of Q, K and V cost 2.2 ms a call (``verify_cost``, s40), about as
long as the expert kernel's 2.5 ms, paid on all 193 calls of an evaluation.

``fill`` does the draw, the signs and both writes in one kernel: each element is a standard normal
(Box-Muller on two 16-bit halves of a Philox word: each lane's Philox call gives eight normals; radius
bounded at 4.9) keyed by a secret key, times its sign, stored in the input's dtype into the private
tensor and into the shared buffer: 4 bytes written per bf16 element where the torch path moves about
14. A program works inside one sign group (one sign load, unmasked vector stores but at a group's end);
sign groups smaller than a program are the gather variant's (each element loads its sign: small inputs
only, ``why_not``). A verified call's preparation must not be shorter or longer than any other's (the
candidate could time the gap before its call, ``arena.py``), and here it is the same kernel on the same
sizes: a timed call's keys are drawn from the session's generator, a verified pool entry's were drawn
once and stored with its reference (``verified_pool.py``: an entry is its keys, so its values are this
kernel's draw, of the very distribution of every other timed call's, and need no memory of their own).
Until the thirty-second session an entry held torch's draw and the kernel read it (or, for any other
call, the set's seeded values, read and discarded, to take as long): a read of every fresh input per
timed call, and a tell, since torch's normals pass 4.9 about once per million elements and these never.

The first version (``tl.randn4x``: four normals per Philox call, libdevice's accurate sine and cosine,
which reduce their argument through local memory, and a per-element sign index) was no cheaper than the
torch ops on an H100: for the MHA forward ``fill`` took 1.62 ms for its 1.8 GB, a whole preparation
2.25 ms against 2.04 with torch ops (``bench/results/prepare_cost_2026-12-06_s45_fused_h100.txt``).
This version, side by side with the torch ops on an H100, cut the MHA forward expert's wait for its
inputs from 0.22 to 0.08-0.09 s a turn (``gpu_cost_2026-12-07_s51_*_h100.txt``): the default
(``EvalSettings.fused_inputs``).

``differ_all`` compares pairs of tensors' bits (as 8-byte words where the view allows, else bytes), one
pass each, each program adding 1 to its pair's counter only where its block differs; one host read of
the counters ends it (the torch path syncs once per input).

Both run only where they can (``why_not``): a CUDA device (or Triton's interpreter), Triton importable,
a float input of 16 or 32 bits, contiguous, at most 2^31 elements, and a sign group over the input's
leading axes (GEMM A and B, the attention V and dO). Elsewhere the arena keeps the torch path, and says
why (``Arena.fused``). The kernels are compiled in the trusted process when its first arena is built
(``Arena._plan_fused``), or loaded from Triton's cache, which no candidate can write: the jails confine
a candidate's writes to its scratch directory (``sandboxed/sandbox.py``, the runner's ``confine.h``), as
they must for the package's own files.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os

FILL_BLOCKS = (1024, 512, 256, 128)
"""Lanes per ``fill`` program, largest first (each lane's Philox call yields eight normals)."""
FILL_WASTE = 1 / 8
"""The share of a sign group's lanes a ``fill`` block may leave idle (past the group's end)."""
MIN_GROUP = 8 * FILL_BLOCKS[-1]
"""Elements a sign group of a large input must hold for ``fill`` (a smaller one would leave most of each
program idle: the torch path is cheaper there)."""
LARGE = 1 << 20
"""Elements from which an input is large (``MIN_GROUP``); a small one's idle lanes cost little."""
DIFFER_BLOCK = 4096
"""Words per ``differ`` program."""
MAX_ELEMENTS = (1 << 31) - 8 * FILL_BLOCKS[0]
"""Philox counters (program x lanes) are 32-bit."""
FLAG_SLOTS = 16
"""Inputs one ``differ_all`` can compare (one counter each)."""
FLOAT_DTYPES = ("bfloat16", "float16", "float32")


def _on(tensor):
    """The tensor's CUDA device made current for a launch (Triton launches on the current device)."""
    import torch

    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()


def _kernels():
    """The Triton kernels' module (imported on first use: ``import ptxgym`` needs no Triton)."""
    from ptxgym.evaluation.trusted import fused_kernels

    return fused_kernels


@functools.cache
def triton_missing() -> str:
    """Why Triton cannot run here ("" when it can)."""
    try:
        import triton  # noqa: F401 - only whether it imports
        import triton.language  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means the torch path
        return f"Triton does not import: {type(exc).__name__}: {exc}"[:300]
    return ""


def interpreted() -> bool:
    """Whether Triton runs its kernels in its interpreter (``TRITON_INTERPRET=1``: on CPU tensors too).

    The CPU tests use it to run the arena's fused path where no GPU is (``tests/evaluation``).
    """
    return os.environ.get("TRITON_INTERPRET") == "1"


def why_not(tensor, sign_lead: int | None) -> str:
    """Why ``fill`` cannot prepare this input ("" when it can).

    ``sign_lead``: how many leading axes the input's sign group spans (0: no group; None: a group that
    does not lead the input's axes, or more than one group).
    """
    if tensor.device.type != "cuda" and not interpreted():
        return f"the arena is on {tensor.device}, not a CUDA device"
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in FLOAT_DTYPES:
        return f"an input of dtype {dtype} (the kernel draws {', '.join(FLOAT_DTYPES)})"
    if not tensor.is_contiguous():
        return "an input that is not contiguous"
    if tensor.numel() > MAX_ELEMENTS:
        return f"an input of {tensor.numel()} elements (at most {MAX_ELEMENTS})"
    if sign_lead is None:
        return "a sign group that does not lead the input's axes"
    inner = math.prod(tensor.shape[sign_lead:])
    if tensor.numel() >= LARGE and inner < MIN_GROUP:
        return f"sign groups of {inner} elements (at least {MIN_GROUP})"
    return triton_missing()


def fill_block(inner: int) -> int:
    """Lanes per ``fill`` program for sign groups of ``inner`` elements.

    The largest of ``FILL_BLOCKS`` that leaves at most ``FILL_WASTE`` of the lanes idle, else the smallest.
    """
    for block in FILL_BLOCKS:
        if -(-inner // (8 * block)) * 8 * block <= inner * (1 + FILL_WASTE):
            return block
    return FILL_BLOCKS[-1]


def seeds(generator, count: int, device):
    """``count`` secret Philox keys from the session's generator, on the device (no host sync)."""
    import torch

    return torch.randint(0, 1 << 62, (count,), generator=generator, device=device, dtype=torch.int64)


def fill(shared, signs, keys, index: int):
    """Fresh values for ``shared`` (written in place) and their private copy (returned).

    ``signs``: float32, one per index of the input's leading sign axes (flattened), or a single 1.0.
    ``keys[index]``: the Philox key. The values depend on the key and on the grouping (``signs.numel()``),
    so a draw is made again, bit for bit, with the same key and as many signs (``verified_pool.py``).
    """
    import torch

    private = torch.empty_like(shared)
    n = shared.numel()
    if n == 0:
        return private
    inner = n // signs.numel()
    gather = inner < MIN_GROUP  # a small input's small sign groups (why_not): each element its sign
    block = fill_block(n if gather else inner)
    per_group = -(-(n if gather else inner) // (8 * block))
    grid = (per_group if gather else signs.numel() * per_group,)
    with _on(shared):
        _kernels().fill_kernel[grid](
            private,
            shared,
            signs,
            keys,
            index,
            n,
            inner,
            per_group,
            BLOCK=block,
            GATHER=gather,
            num_warps=max(1, block // 256),  # at least 4 lanes a thread: vector accesses
        )
    return private


def flag(device):
    """The counters ``differ_all`` adds to (one set per arena: allocated once, not within a trial)."""
    import torch

    return torch.zeros(FLAG_SLOTS, dtype=torch.int32, device=device)


def differ(a, b, counter) -> bool:
    """Whether two tensors of one shape and dtype hold different bits (one pass, one host read).

    ``counter``: a ``flag`` on their device.
    """
    return bool(differ_all([(a, b)], counter))


def differ_all(pairs, counter, share: float = 1.0, keys=None) -> list[int]:
    """The indices of the pairs of tensors whose bits differ: a pass over each, one host read for all.

    At most ``FLAG_SLOTS`` pairs; ``counter``: a ``flag`` on their device, zeroed here. ``share`` below 1:
    each pair is compared on about that share of its blocks of ``DIFFER_BLOCK`` words only, drawn by
    Philox keyed by ``keys[slot]`` (``seeds``, secret), with replacement: a difference confined to ``k``
    blocks goes unseen with a probability of about exp(-share x k) (``sampled_blocks``).
    """
    if len(pairs) > counter.numel():
        raise ValueError(f"{len(pairs)} pairs to compare, counters for {counter.numel()}")
    counter.zero_()
    known = differ_into(pairs, counter, list(range(len(pairs))), share, keys)
    found = counter[: len(pairs)].tolist() if pairs else []
    return sorted(set(known) | {i for i, hits in enumerate(found) if hits})


def differ_into(pairs, counter, slots: list[int], share: float = 1.0, keys=None) -> list[int]:
    """``differ_all``'s comparisons, added to ``counter[slots[i]]`` for pair i, with no host read.

    Nothing is zeroed or read: the counters accumulate until their owner reads them (the GPU work is
    queued on the current stream, in order with the calls around it). ``keys[i]`` keys pair i's draw.
    Returns the indices of the pairs known to differ without a comparison (shape or dtype).
    """
    import torch
    import triton

    if share < 1.0 and (keys is None or keys.numel() < len(pairs)):
        raise ValueError(f"a sampled comparison of {len(pairs)} pairs needs as many keys")
    if len(slots) != len(pairs) or any(not 0 <= k < counter.numel() for k in slots):
        raise ValueError(f"slots {slots} for {len(pairs)} pairs and {counter.numel()} counters")
    known = []
    for i, (a, b) in enumerate(pairs):
        if a.shape != b.shape or a.dtype != b.dtype:
            known.append(i)
            continue
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)
        try:
            x, y = flat_a.view(torch.int64), flat_b.view(torch.int64)
        except RuntimeError:  # a size or storage offset the 8-byte view refuses
            x, y = flat_a.view(torch.uint8), flat_b.view(torch.uint8)
        n = x.numel()
        if n == 0:
            continue
        blocks = triton.cdiv(n, DIFFER_BLOCK)
        drawn = sampled_blocks(blocks, share)
        with _on(a):
            if drawn < blocks:
                _kernels().differ_sampled_kernel[(drawn,)](
                    x, y, counter, slots[i], n, keys, i, blocks, BLOCK=DIFFER_BLOCK
                )
            else:
                _kernels().differ_kernel[(blocks,)](x, y, counter, slots[i], n, BLOCK=DIFFER_BLOCK)
    return known


def sampled_blocks(blocks: int, share: float) -> int:
    """How many blocks a comparison at ``share`` draws among ``blocks`` (all of them at 1)."""
    return blocks if share >= 1.0 else min(blocks, max(1, math.ceil(blocks * share)))
