"""The Triton kernels of ``fused_inputs.py`` (imported only there, on first use; see it for what they do).

Module-level functions: Triton resolves a kernel's callees among its module's globals. Compiled, the
normals use the GPU's approximate special functions (``sin.approx``, ``cos.approx``, ``lg2.approx``,
``sqrt.approx``: libdevice's accurate sine and cosine reduce their argument through local memory, and made
the first version of ``fill`` compute-bound); Triton's interpreter has no libdevice, so there they are
the accurate ones (the same formula).
"""

import triton
import triton.language as tl

from ptxgym.evaluation.trusted.fused_inputs import interpreted

if interpreted():

    @triton.jit
    def _sin(x):
        return tl.sin(x)

    @triton.jit
    def _cos(x):
        return tl.cos(x)

    @triton.jit
    def _log2(x):
        return tl.log2(x)

else:
    from triton.language.extra.cuda import libdevice

    @triton.jit
    def _sin(x):
        return libdevice.fast_sinf(x)

    @triton.jit
    def _cos(x):
        return libdevice.fast_cosf(x)

    @triton.jit
    def _log2(x):
        return libdevice.fast_log2f(x)


@triton.jit
def _normals(word):
    """Two standard normals from one 32-bit word: 16-bit uniforms, Box-Muller.

    The radius from the high half, u in (0, 1) (|z| at most 4.9); the angle from the low half, in
    (-pi, pi), where the approximate sine and cosine are accurate to about 2^-21.
    """
    u = ((word >> 16).to(tl.float32) + 0.5) * (1.0 / 65536.0)
    angle = ((word & 0xFFFF).to(tl.float32) - 32767.5) * (6.283185307179586 / 65536.0)
    radius = tl.sqrt(-1.3862943611198906 * _log2(u))  # -2 ln u = -2 ln(2) log2(u)
    return radius * _cos(angle), radius * _sin(angle)


@triton.jit
def _put(
    priv,
    shared,
    signs,
    sign,
    inner,
    start,
    end,
    full,
    r,
    BLOCK: tl.constexpr,
    GATHER: tl.constexpr,
):
    """An eighth of a fill program: BLOCK elements from ``start`` (``full``: all before ``end``).

    Times ``sign``, or with ``GATHER`` each element's own sign (``signs[offset // inner]``).
    """
    offs = start + tl.arange(0, BLOCK)
    if full:  # unmasked: vector stores
        if GATHER:  # a new name: compiled, a block may not take a scalar's name (the interpreter allows it)
            times = tl.load(signs + offs // inner)
        else:
            times = sign
        v = (r * times).to(priv.dtype.element_ty)
        tl.store(priv + offs, v)
        tl.store(shared + offs, v)
    else:
        mask = offs < end
        if GATHER:
            times = tl.load(signs + offs // inner, mask=mask, other=1.0)
        else:
            times = sign
        v = (r * times).to(priv.dtype.element_ty)
        tl.store(priv + offs, v, mask=mask)
        tl.store(shared + offs, v, mask=mask)


@triton.jit(do_not_specialize=["seed_index", "n", "per_group"])
def fill_kernel(
    priv,
    shared,
    signs,
    seeds,
    seed_index,
    n,
    inner,
    per_group,
    BLOCK: tl.constexpr,
    GATHER: tl.constexpr,
):
    """8 x BLOCK elements per program: a standard normal times its sign.

    Sign group ``g`` holds elements [g x inner, (g + 1) x inner). Grouped (the GPU's path), a program
    works in one group, ``per_group`` programs each: one sign per program. With ``GATHER`` (sign groups
    smaller than a program: small inputs only, ``fused_inputs.fill``), the programs cover the input in
    order and each element loads its sign. The normals: Philox keyed by ``seeds[seed_index]``, counter =
    the program's index x BLOCK + the lane, each of its four words two normals.
    """
    pid = tl.program_id(0)
    if GATHER:
        g = pid * 0
        start = pid.to(tl.int64) * (8 * BLOCK)
        end = n.to(tl.int64)
    else:
        g = pid // per_group
        start = g.to(tl.int64) * inner + (pid - g * per_group).to(tl.int64) * (8 * BLOCK)
        end = (g + 1).to(tl.int64) * inner
    full = start + 8 * BLOCK <= end
    sign = tl.load(signs + g)
    seed = tl.load(seeds + seed_index)
    w0, w1, w2, w3 = tl.randint4x(seed, pid * BLOCK + tl.arange(0, BLOCK))
    a, b = _normals(w0)
    _put(priv, shared, signs, sign, inner, start, end, full, a, BLOCK, GATHER)
    _put(priv, shared, signs, sign, inner, start + BLOCK, end, full, b, BLOCK, GATHER)
    a, b = _normals(w1)
    _put(priv, shared, signs, sign, inner, start + 2 * BLOCK, end, full, a, BLOCK, GATHER)
    _put(priv, shared, signs, sign, inner, start + 3 * BLOCK, end, full, b, BLOCK, GATHER)
    a, b = _normals(w2)
    _put(priv, shared, signs, sign, inner, start + 4 * BLOCK, end, full, a, BLOCK, GATHER)
    _put(priv, shared, signs, sign, inner, start + 5 * BLOCK, end, full, b, BLOCK, GATHER)
    a, b = _normals(w3)
    _put(priv, shared, signs, sign, inner, start + 6 * BLOCK, end, full, a, BLOCK, GATHER)
    _put(priv, shared, signs, sign, inner, start + 7 * BLOCK, end, full, b, BLOCK, GATHER)


@triton.jit
def _differ_block(a, b, flag, slot, start, n, BLOCK: tl.constexpr):
    """Add 1 to ``flag[slot]`` if the BLOCK words from ``start`` differ between ``a`` and ``b``."""
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:  # unmasked: vector loads
        x = tl.load(a + offs)
        y = tl.load(b + offs)
    else:
        mask = offs < n
        x = tl.load(a + offs, mask=mask, other=0)
        y = tl.load(b + offs, mask=mask, other=0)
    if tl.sum((x != y).to(tl.int32), axis=0) > 0:
        tl.atomic_add(flag + slot, 1)


@triton.jit(do_not_specialize=["slot"])
def differ_kernel(a, b, flag, slot, n, BLOCK: tl.constexpr):
    """Add 1 to ``flag[slot]`` for each block of BLOCK words where ``a`` and ``b`` differ."""
    _differ_block(a, b, flag, slot, tl.program_id(0).to(tl.int64) * BLOCK, n, BLOCK)


@triton.jit(do_not_specialize=["slot", "seed_index", "blocks"])
def differ_sampled_kernel(a, b, flag, slot, n, seeds, seed_index, blocks, BLOCK: tl.constexpr):
    """``differ_kernel`` on one block of BLOCK words per program, drawn among ``blocks``.

    The block: a Philox word keyed by ``seeds[seed_index]`` at the program's index, modulo ``blocks``
    (draws with replacement: a block may be drawn twice, the share is an upper bound).
    """
    seed = tl.load(seeds + seed_index)
    word = tl.randint(seed, tl.program_id(0))
    _differ_block(a, b, flag, slot, (word.to(tl.int64) & 0xFFFFFFFF) % blocks * BLOCK, n, BLOCK)
