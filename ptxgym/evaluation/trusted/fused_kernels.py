"""The Triton kernels of ``fused_inputs.py`` (imported only there, on first use; see it for what they do).

Module-level functions: Triton resolves a kernel's callees among its module's globals.
"""

import triton
import triton.language as tl


@triton.jit
def _put(priv, shared, source, signs, start, n, inner, use_source, r, BLOCK: tl.constexpr):
    """One quarter of a ``fill_kernel`` program: BLOCK elements from ``start``."""
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(source + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(signs + offs // inner, mask=mask, other=1.0)
    v = (tl.where(use_source != 0, s, r) * g).to(priv.dtype.element_ty)
    tl.store(priv + offs, v, mask=mask)
    tl.store(shared + offs, v, mask=mask)


@triton.jit(do_not_specialize=["seed_index", "n", "inner", "use_source"])
def fill_kernel(priv, shared, source, signs, seeds, seed_index, n, inner, use_source, BLOCK: tl.constexpr):
    """4 x BLOCK elements per program, each a standard normal or ``source``'s value, times its sign.

    The normals: Philox keyed by ``seeds[seed_index]``, counter = the element's place in its quarter.
    """
    pid = tl.program_id(0)
    seed = tl.load(seeds + seed_index)
    r0, r1, r2, r3 = tl.randn4x(seed, pid * BLOCK + tl.arange(0, BLOCK))
    base = pid * (4 * BLOCK)
    _put(priv, shared, source, signs, base, n, inner, use_source, r0, BLOCK)
    _put(priv, shared, source, signs, base + BLOCK, n, inner, use_source, r1, BLOCK)
    _put(priv, shared, source, signs, base + 2 * BLOCK, n, inner, use_source, r2, BLOCK)
    _put(priv, shared, source, signs, base + 3 * BLOCK, n, inner, use_source, r3, BLOCK)


@triton.jit(do_not_specialize=["n"])
def differ_kernel(a, b, flag, n, BLOCK: tl.constexpr):
    """Add 1 to ``flag`` for each block of BLOCK words where ``a`` and ``b`` differ."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(a + offs, mask=mask, other=0)
    y = tl.load(b + offs, mask=mask, other=0)
    if tl.sum((x != y).to(tl.int32), axis=0) > 0:
        tl.atomic_add(flag, 1)
