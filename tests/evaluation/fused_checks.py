"""Checks of ``fused_inputs`` run in Triton's interpreter on CPU tensors (``test_fused_inputs.py``).

Each ``check_*`` raises AssertionError on a failure; ``python fused_checks.py NAME [cuda]`` runs one (or
``all``), on CPU tensors in the interpreter or, with ``cuda``, on the GPU with the compiled kernels. The
interpreter must be on before Triton's kernels are defined, so they run in a child process with
``TRITON_INTERPRET=1`` (the test sets it), never in the pytest process. ``compiled`` (not in ``all``)
compiles every kernel variant ahead of time, without the interpreter or a GPU.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from ptxgym.evaluation.trusted import fused_inputs

DEVICE = "cpu"
"""Where the checks run (``cuda``: the compiled kernels on GPU 0)."""
SHAPE = (4, 6, 37, 41)
"""Leading sign axes (4, 6), 1517 elements under each sign, 36408 in all: no whole number of programs."""


SMALL_GROUPS = (4, 6, 5, 7)
"""The same sign axes over 35 elements each: fewer than a program holds (``fill``'s gather variant)."""


def _signs(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, SHAPE[:2], generator=g).float().mul_(2).sub_(1).reshape(-1).to(DEVICE)


def _keys(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=DEVICE)


def _fill(dtype, keys, index=0, signs=None, shape=SHAPE):
    shared = torch.full(shape, 7.0, dtype=dtype, device=DEVICE)
    one = torch.ones(1, device=DEVICE)
    private = fused_inputs.fill(shared, one if signs is None else signs, keys, index)
    return private, shared


def check_draw() -> None:
    """A standard normal per element, the same in both copies; a key gives the same draw, another not."""
    assert fused_inputs.interpreted() == (DEVICE == "cpu")
    assert fused_inputs.why_not(torch.zeros(SHAPE, device=DEVICE), 2) == ""
    small_groups = torch.zeros(1 << 10, 1 << 10, dtype=torch.bfloat16, device=DEVICE)  # a large input
    assert "sign groups of 1024" not in fused_inputs.why_not(small_groups, 1)
    assert "sign groups of 512" in fused_inputs.why_not(small_groups.view(2048, 512), 1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        keys = _keys(11, 12)
        private, shared = _fill(dtype, keys)
        assert private.dtype == dtype and private.shape == SHAPE
        assert torch.equal(private.view(-1).view(torch.uint8), shared.view(-1).view(torch.uint8))
        x = private.float()
        assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05, (x.mean(), x.std())
        assert (x == 7.0).sum() < 3, "the shared buffer's old values were left"
        again, _ = _fill(dtype, keys)
        assert torch.equal(again, private), "one key, one draw"
        other, _ = _fill(dtype, keys, index=1)
        assert (other != private).float().mean() > 0.99, "another key, another draw"
        tail = x.view(-1)[-100:]
        assert tail.std() > 0.5, "the last program's masked tail was drawn too"


def check_signs() -> None:
    """The signs of the leading axes multiply the draw exactly (sign flips commute with rounding)."""
    signs = _signs(3)
    assert (signs < 0).any() and (signs > 0).any()
    for dtype, shape in ((torch.bfloat16, SHAPE), (torch.float32, SHAPE), (torch.bfloat16, SMALL_GROUPS)):
        keys = _keys(5)
        plain, _ = _fill(dtype, keys, signs=torch.ones_like(signs), shape=shape)  # the same groups, all +1
        signed, shared = _fill(dtype, keys, signs=signs, shape=shape)
        want = plain * signs.reshape(*SHAPE[:2], 1, 1).to(dtype)
        assert torch.equal(signed, want) and torch.equal(shared, want), shape
        assert (plain.float().std() - 1).abs() < 0.1, shape


def check_differ() -> None:
    """Any changed bit is found, in 8-byte words and in bytes (a tail the word view refuses)."""
    a = torch.randn(9768).to(torch.bfloat16).to(DEVICE)
    flag = fused_inputs.flag(DEVICE)
    assert not fused_inputs.differ(a, a.clone(), flag)
    for where in (0, 4000, 9767):
        b = a.clone()
        b[where] = -b[where]
        assert fused_inputs.differ(a, b, flag), where
    z = torch.zeros(64, dtype=torch.float32, device=DEVICE)
    minus = z.clone()
    minus[63] = -0.0
    assert fused_inputs.differ(z, minus, flag), "-0.0 over 0.0 is a write"
    odd = torch.randn(3).to(torch.bfloat16).to(DEVICE)  # 6 bytes: no 8-byte view
    assert not fused_inputs.differ(odd, odd.clone(), flag)
    changed = odd.clone()
    changed[2] += 1
    assert fused_inputs.differ(odd, changed, flag)
    assert fused_inputs.differ(a, a[:-1].clone(), flag), "another shape differs"
    assert not fused_inputs.differ(a[:0], a[:0].clone(), flag)


def check_sampled() -> None:
    """A sampled comparison: what differs everywhere is always found, one block at about the share.

    64.5 blocks of words (a partial last one), 1/8 drawn per comparison: 9 programs, each a Philox draw
    among the blocks; a change in one block is found in about 1 - exp(-9/65) = 13% of comparisons, the
    last partial block included; a key is needed, and a key gives the same draw.
    """
    words = int(64.5 * fused_inputs.DIFFER_BLOCK)
    a = torch.randn(2 * words, device=DEVICE)  # float32: two elements a word
    flag = fused_inputs.flag(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(5)
    assert fused_inputs.sampled_blocks(65, 0.125) == 9 and fused_inputs.sampled_blocks(3, 0.125) == 1
    assert fused_inputs.sampled_blocks(65, 1.0) == 65 and fused_inputs.sampled_blocks(1, 0.01) == 1

    def found(b) -> bool:
        keys = fused_inputs.seeds(gen, 1, DEVICE)
        return bool(fused_inputs.differ_all([(a, b)], flag, 0.125, keys))

    same = a.clone()
    assert not any(found(same) for _ in range(20)), "nothing differs: nothing found"
    everywhere = a + 1
    assert all(found(everywhere) for _ in range(20)), "every block differs: always found"
    for where in (2 * 3 * fused_inputs.DIFFER_BLOCK + 7, 2 * words - 1):  # a middle block, the last one
        b = a.clone()
        b[where] = -b[where]
        hits = sum(found(b) for _ in range(200))
        assert 8 <= hits <= 48, (where, hits)  # binomial(200, 0.13): mean 26, sd 4.8
    keys = fused_inputs.seeds(gen, 1, DEVICE)
    b = a.clone()
    b[5] += 1
    first = fused_inputs.differ_all([(a, b)], flag, 0.125, keys)
    assert all(fused_inputs.differ_all([(a, b)], flag, 0.125, keys) == first for _ in range(5))
    try:
        fused_inputs.differ_all([(a, b)], flag, 0.125)
    except ValueError as exc:
        assert "keys" in str(exc)
    else:
        raise AssertionError("a sampled comparison without keys ran")


def check_arena_sampled() -> None:
    """The arena's check after a timed call samples at ``input_check_share``; the last check is whole.

    K of the tiny attention is two blocks of words: one is drawn per check, so a one-element write is
    found in about half of the checks right after the call, a write into all of K in every one, and a
    write left in place by the final check (``mutated_inputs``), always.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from evaltest_helpers import tiny_task

    from ptxgym.evaluation.trusted.arena import Arena

    task = tiny_task("MhaFwd-sm90a", B=1, H=2, S=128, D=128)
    with tempfile.TemporaryDirectory() as scratch:
        device = 0 if DEVICE == "cuda" else "cpu"
        arena = Arena(task, [1], device, Path(scratch), fused=True, input_check_share=0.125)
        assert arena.fused.startswith("on:"), arena.fused
        gen = torch.Generator(device=arena.device).manual_seed(1)
        k = arena.sets[0].shared_in["K"].view(-1)
        assert k.numel() * k.element_size() == 2 * 8 * fused_inputs.DIFFER_BLOCK
        hits = 0
        for _ in range(60):
            arena.prepare(0, gen, fresh=True)
            kept = k[-3].clone()
            k[-3] += 1  # in the second block
            arena.hold(0, False, {})
            k[-3] = kept
            hits += arena.mutated_inputs() == ["K"]
            arena.restore()
        assert 12 <= hits <= 48, hits  # binomial(60, 1/2)
        for _ in range(10):
            arena.prepare(0, gen, fresh=True)
            kept = k.clone()
            k.neg_()
            arena.hold(0, False, {})
            k.copy_(kept)
            assert arena.mutated_inputs() == ["K"]
            arena.restore()
        arena.prepare(0, gen, fresh=True)
        k[-3] += 1
        assert arena.mutated_inputs() == ["K"], "a write left in place: the last check compares whole"
        arena.close()


def check_arena_deferred() -> None:
    """With ``deferred_checks`` the checks after timed calls are read once, by ``mutated_inputs``.

    A write the check right after the call saw and that was put back before the read is still found;
    nothing is read before (no host read after the call); a restore forgets an earlier session's.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from evaltest_helpers import tiny_task

    from ptxgym.evaluation.trusted.arena import Arena

    task = tiny_task("MhaFwd-sm90a", B=2, H=3, S=16, D=8)
    with tempfile.TemporaryDirectory() as scratch:
        device = 0 if DEVICE == "cuda" else "cpu"
        arena = Arena(task, [1, 2], device, Path(scratch), fused=True, deferred_checks=True)
        assert arena.fused.startswith("on:") and arena._pending is not None, arena.fused
        gen = torch.Generator(device=arena.device).manual_seed(1)
        v = arena.sets[1].shared_in["V"].view(-1)
        arena.prepare(1, gen, fresh=True)
        arena.hold(1, False, {})  # a clean call
        arena.prepare(1, gen, fresh=True)
        kept = v[7].clone()
        v[7] += 1
        arena.hold(1, False, {})  # queued: the write is seen on the device...
        v[7] = kept
        assert arena._mutated == set() and int(arena._pending.sum()) == 1  # ...and not read yet
        arena.prepare(0, gen, fresh=True)
        arena.hold(0, False, {})
        assert arena.mutated_inputs() == ["V"]  # read here, though put back before
        arena.restore()
        assert arena.mutated_inputs() == [] and int(arena._pending.sum()) == 0
        arena.prepare(1, gen, fresh=True)
        v[3] += 1  # found by the next preparation's check of the last values (``_retire_fresh``)
        arena.prepare(1, gen, fresh=True)
        arena.restore()  # a new session forgets it
        assert arena.mutated_inputs() == []
        arena.prepare(1, gen, fresh=True)
        v[3] += 1
        arena.prepare(1, gen, fresh=True)
        assert arena.mutated_inputs() == ["V"]
        arena.close()


def check_arena() -> None:
    """The arena's fused path: the shared buffers equal the private copy.

    A pool entry is its keys alone (no values stored): a call on it gets ``fill``'s draw for those keys,
    the same kernel and distribution as any timed call's, times the set's signs as in the torch path;
    its stored reference checks the outputs. A write into the inputs is found by the fused comparison.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from evaltest_helpers import tiny_task

    from ptxgym.evaluation.trusted import verified_pool
    from ptxgym.evaluation.trusted.arena import Arena

    task = tiny_task("MhaFwd-sm90a", B=2, H=3, S=16, D=8)
    with tempfile.TemporaryDirectory() as scratch:
        device = 0 if DEVICE == "cuda" else "cpu"
        arena = Arena(task, [1, 2, 3], device, Path(scratch), pool_size=2, fused=True)
        assert arena.fused.startswith("on:"), arena.fused
        assert set(arena.fresh) == {"Q", "K", "V"} and arena.pool.active
        gen = torch.Generator(device=arena.device).manual_seed(1)
        arena.prepare(0, gen, perturb=True, fresh=False)  # a correctness call: the set's signs change
        s = arena.sets[0]
        assert any((x < 0).any() for x in s.state), "the set has signs to apply"
        entry = arena.pool.entries[None][0]
        assert entry.keys is not None and entry.fresh == {}
        arena.prepare(0, gen, fresh=True, entry=entry)
        want = arena.perturb.expected_inputs(verified_pool.entry_values(arena, entry, 0), s.state)
        for name in ("Q", "K", "V"):
            assert torch.equal(s.fresh[name], want[name]), name
            assert torch.equal(s.shared_in[name], want[name]), name
        assert s.pool_reference is entry.reference
        assert not arena.verify(0).passed  # the outputs poisoned: nothing computed yet
        s.shared_out["O"].copy_(arena.expected_outputs(0)["O"])
        s.shared_out["LSE"].copy_(arena.expected_outputs(0)["LSE"])
        assert arena.verify(0).passed, "the stored reference of the keys' draw, times the output signs"
        arena.prepare(0, gen, fresh=True)
        for name in ("Q", "K", "V"):
            assert torch.equal(s.shared_in[name], s.fresh[name]) and not torch.equal(
                s.fresh[name], want[name]
            )
        assert arena.mutated_inputs() == []
        kept = s.shared_in["K"].view(-1)[5].clone()
        s.shared_in["K"].view(-1)[5] += 1  # the candidate writes into an input
        arena.hold(0, False, {})  # the check right after the call (the fused comparison)
        s.shared_in["K"].view(-1)[5] = kept  # and puts it back before the next one
        assert arena.mutated_inputs() == ["K"], arena.mutated_inputs()
        arena.close()


def check_arena_pool_groups() -> None:
    """A keyed pool entry on inputs ``fill`` draws group by group (GEMM A and B: rows of K = 1024).

    The draw depends on the grouping (the programs' sizes follow a group's), so an entry's values are
    drawn again with as many signs as the set's groups (``verified_pool.keyed_values``): a call on the
    entry, after a correctness call changed the signs, holds exactly those values times the signs, and
    its stored reference passes.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from evaltest_helpers import tiny_task

    from ptxgym.evaluation.trusted import verified_pool
    from ptxgym.evaluation.trusted.arena import Arena

    task = tiny_task("Gemm-sm90a", M=16, N=16, K=1024)
    with tempfile.TemporaryDirectory() as scratch:
        device = 0 if DEVICE == "cuda" else "cpu"
        arena = Arena(task, [1], device, Path(scratch), pool_size=1, fused=True)
        assert arena.fused.startswith("on:"), arena.fused
        s = arena.sets[0]
        groups = {n: arena.fill_signs(s.state, g).numel() for n, g in arena.fill_plan.items()}
        assert groups == {"A": 16, "B": 16}, groups  # sign groups of 1024: fill's grouped variant
        gen = torch.Generator(device=arena.device).manual_seed(2)
        arena.prepare(0, gen, perturb=True, fresh=False)
        entry = arena.pool.entries[None][0]
        arena.prepare(0, gen, fresh=True, entry=entry)
        want = arena.perturb.expected_inputs(verified_pool.entry_values(arena, entry, 0), s.state)
        assert all(torch.equal(s.shared_in[n], want[n]) for n in ("A", "B"))
        s.shared_out["C"].copy_(arena.expected_outputs(0)["C"])
        assert arena.verify(0).passed
        arena.close()


def check_compiled() -> None:
    """Every kernel variant ``fill`` and ``differ_all`` launch compiles for Hopper and Blackwell, no GPU.

    The interpreter runs Python, not Triton's compiler: a kernel it runs may still be refused compiled
    (a block assigned to a scalar's name was). Ahead of time, from the launch's argument types (pointers
    of each input dtype, 32-bit counts, the 64-bit count of a byte view past 2^31 words).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ptxgym.evaluation.trusted import fused_kernels

    assert not fused_inputs.interpreted(), "compiled variants: run without TRITON_INTERPRET"
    pointers = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}
    ints = dict.fromkeys(("seed_index", "n", "inner", "per_group"), "i32")
    for arch in (90, 100):
        target = GPUTarget("cuda", arch, 32)
        for dtype in fused_inputs.FLOAT_DTYPES:
            ptr = pointers[dtype]
            sig = {"priv": ptr, "shared": ptr, "signs": "*fp32", "seeds": "*i64", **ints}
            sig |= {"BLOCK": "constexpr", "GATHER": "constexpr"}
            for block in fused_inputs.FILL_BLOCKS:
                for gather in (False, True):
                    consts = {"BLOCK": block, "GATHER": gather}
                    triton.compile(ASTSource(fused_kernels.fill_kernel, sig, consts), target=target)
        for word, count in (("*i64", "i32"), ("*u8", "i32"), ("*u8", "i64")):
            sig = {"a": word, "b": word, "flag": "*i32", "slot": "i32", "n": count, "BLOCK": "constexpr"}
            consts = {"BLOCK": fused_inputs.DIFFER_BLOCK}
            triton.compile(ASTSource(fused_kernels.differ_kernel, sig, consts), target=target)
            sig |= {"seeds": "*i64", "seed_index": "i32", "blocks": "i32"}
            order = ("a", "b", "flag", "slot", "n", "seeds", "seed_index", "blocks", "BLOCK")
            sig = {k: sig[k] for k in order}
            triton.compile(ASTSource(fused_kernels.differ_sampled_kernel, sig, consts), target=target)


if __name__ == "__main__":
    DEVICE = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    names = [n.removeprefix("check_") for n in list(globals()) if n.startswith("check_")]
    names.remove("compiled")  # "all": the kernels run; compiled ahead of time only by name (a CPU test)
    for name in names if sys.argv[1] == "all" else [sys.argv[1]]:
        globals()[f"check_{name}"]()
    print("passed")
