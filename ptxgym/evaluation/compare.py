"""Output poisoning and the element-by-element comparison with the reference.

Runs in the trusted process on torch tensors (CUDA there, CPU in the unit tests). Nothing here trusts
the candidate: outputs are poisoned with a recognisable bit pattern before every call, so an element
the candidate never wrote is told apart from one it wrote as NaN.

Rule per element (the paper's, every element must pass): ``|out - ref| <= atol`` or
``|out - ref| / |ref| <= rtol``. Per output, also ``||out - ref|| / ||ref|| <= rel_norm``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ptxgym.records.feedback import Status
from ptxgym.records.tasks import Tolerance

# Signalling-NaN payloads that no arithmetic produces (a GPU canonicalises computed NaNs to the quiet
# form), written through an integer view so the bits survive exactly.
_POISON_BITS = {
    "bfloat16": ("int16", 0x7FA5),
    "float16": ("int16", 0x7D5A),
    "float32": ("int32", 0x7FA5A5A5),
    "float64": ("int64", 0x7FF5A5A5A5A5A5A5),
    "int64": ("int64", -0x5A5A5A5A5A5A5A5B),
    "int32": ("int32", -0x5A5A5A5B),
    "int16": ("int16", -0x5A5B),
    "int8": ("int8", -0x5B),
    "uint8": ("uint8", 0xA5),
}


def _dtype_name(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def same_bits(a, b) -> bool:
    """Whether two tensors of one shape and dtype hold identical bits (a write of -0.0 over 0.0 differs).

    Compared as 8-byte words where their size and offset allow that view (a quarter of the elements of a
    bf16 comparison to materialise and reduce), else as bytes.
    """
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    try:
        return torch.equal(flat_a.view(torch.int64), flat_b.view(torch.int64))
    except RuntimeError:  # a size or storage offset the 8-byte view refuses
        return torch.equal(flat_a.view(torch.uint8), flat_b.view(torch.uint8))


def poison_spec(tensor) -> tuple[str, int] | None:
    """(integer view dtype, bit pattern) used to poison a tensor of this dtype, or None (bool)."""
    return _POISON_BITS.get(_dtype_name(tensor))


def poison_(tensor) -> None:
    """Fill a tensor in place with its dtype's poison pattern."""
    import torch

    spec = poison_spec(tensor)
    if spec is None:
        return
    view_dtype, bits = spec
    tensor.view(getattr(torch, view_dtype)).fill_(bits)


def unwritten_mask(tensor):
    """Boolean mask of elements that still hold the poison pattern (all False for unpoisonable dtypes)."""
    import torch

    spec = poison_spec(tensor)
    if spec is None:
        return torch.zeros_like(tensor, dtype=torch.bool)
    view_dtype, bits = spec
    return tensor.view(getattr(torch, view_dtype)) == bits


@dataclass
class OutputCheck:
    """Comparison of one output tensor with its expected value."""

    name: str
    status: Status
    """PASSED, UNWRITTEN, NONFINITE or INCORRECT_NUMERICAL."""
    numel: int
    unwritten: int = 0
    nonfinite: int = 0
    mismatched: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rel_norm_error: float | None = None
    first_bad_index: list[int] | None = None
    message: str = ""

    @property
    def mismatch_ratio(self) -> float:
        """Fraction of elements that failed the element rule (unwritten and non-finite count as failed)."""
        return (self.mismatched / self.numel) if self.numel else 0.0


@dataclass
class SetCheck:
    """Outcome of one call: inputs intact, and every output compared."""

    status: Status
    outputs: list[OutputCheck] = field(default_factory=list)
    mutated_inputs: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def passed(self) -> bool:
        """Whether the call was correct."""
        return self.status is Status.PASSED


def _index(flat_index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat_index % dim if dim else 0)
        flat_index //= dim if dim else 1
    return list(reversed(out))


def _first_true(mask) -> int:
    """Flat index of the first True element (argmax returns the first maximum)."""
    import torch

    return int(mask.reshape(-1).to(torch.uint8).argmax())


def compare_output(name: str, out, expected, tol: Tolerance) -> OutputCheck:
    """Compare one output with its expected value (same shape) under a tolerance.

    Written for 100M-element outputs checked many times per turn: a handful of full passes and one
    device-to-host transfer of all statistics when the output is fine.
    """
    shape = tuple(out.shape)
    if tuple(expected.shape) != shape:
        return OutputCheck(
            name,
            Status.INCORRECT_SHAPE,
            out.numel(),
            message=f"{name}: shape {shape}, expected {tuple(expected.shape)}",
        )
    o = out.float()
    return unwritten_or_nonfinite(name, out, o) or numerical(name, o, expected.float(), tol)


def unwritten_or_nonfinite(name: str, out, o=None) -> OutputCheck | None:
    """The failed check of an output that holds poison or a NaN or infinity anywhere, else None.

    ``o``: ``out`` as fp32, if the caller has it.
    """
    numel = out.numel()
    shape = tuple(out.shape)
    unwritten = unwritten_mask(out)
    if bool(unwritten.any()):
        n_unwritten = int(unwritten.sum())
        first = _index(_first_true(unwritten), shape)
        return OutputCheck(
            name,
            Status.UNWRITTEN,
            numel,
            unwritten=n_unwritten,
            mismatched=n_unwritten,
            first_bad_index=first,
            message=f"{name}: {n_unwritten} of {numel} elements were never written (first at {first})",
        )
    finite = (out.float() if o is None else o).isfinite()
    if not bool(finite.all()):
        n_nonfinite = numel - int(finite.sum())
        first = _index(_first_true(~finite), shape)
        return OutputCheck(
            name,
            Status.NONFINITE,
            numel,
            nonfinite=n_nonfinite,
            mismatched=n_nonfinite,
            first_bad_index=first,
            message=f"{name}: {n_nonfinite} of {numel} elements are NaN or infinite (first at {first})",
        )
    return None


def numerical(
    name: str, o, r, tol: Tolerance, locate: Callable[[list[int]], list[int]] | None = None, of: str = ""
) -> OutputCheck:
    """The element rule and the norm rule of ``tol`` on fp32 ``o`` against ``r`` (same shape).

    ``locate``: where an index of ``o`` lies in the whole output (``o`` a sample of it: ``sampled.py``);
    ``of``: what the counted elements are, in messages (e.g. " sampled").
    """
    import torch

    shape = tuple(o.shape)
    numel = o.numel()
    diff = (o - r).abs_()
    ref_abs = r.abs()
    # fails both rules: |d| > atol and |d| > rtol * |ref|  (i.e. |d| / |ref| > rtol, also where ref == 0)
    bad = (diff > tol.atol) & (diff > tol.rtol * ref_abs)
    rel = torch.where(ref_abs > 0, diff / ref_abs, torch.zeros((), device=diff.device))
    stats = torch.stack(
        [bad.sum().double(), diff.max().double(), rel.max().double(), diff.norm().double(), r.norm().double()]
    ).tolist()
    n_bad, max_abs, max_rel, err_norm, ref_norm = int(stats[0]), *stats[1:]
    rel_norm = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    check = OutputCheck(
        name,
        Status.PASSED,
        numel,
        mismatched=n_bad,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        rel_norm_error=rel_norm,
    )
    allowed_bad = int((1.0 - tol.required_match) * numel)
    if n_bad > allowed_bad:
        at = _index(_first_true(bad), shape)
        first = locate(at) if locate is not None else at
        check.status = Status.INCORRECT_NUMERICAL
        check.first_bad_index = first
        check.message = (
            f"{name}: {n_bad} of {numel}{of} elements ({n_bad / numel:.2%}) exceed atol={tol.atol} and "
            f"rtol={tol.rtol}; max abs error {max_abs:.4g}, max rel error {max_rel:.4g}; first at {first}: "
            f"got {float(o[tuple(at)]):.6g}, expected {float(r[tuple(at)]):.6g}"
        )
    elif rel_norm > tol.rel_norm:
        check.status = Status.INCORRECT_NUMERICAL
        check.message = (
            f"{name}: relative norm error {rel_norm:.4g}{' over the sample' if of else ''} exceeds "
            f"{tol.rel_norm} although every element is within atol/rtol"
        )
    return check


_ORDER = [Status.INCORRECT_SHAPE, Status.UNWRITTEN, Status.NONFINITE, Status.INCORRECT_NUMERICAL]


def check_call(
    outputs: dict, expected: dict, inputs: dict, expected_inputs: dict, tol: Tolerance
) -> SetCheck:
    """Check one call: inputs bit-identical to what was handed in, then every output.

    ``outputs``/``expected`` map output names to tensors; ``inputs`` are the buffers the candidate saw
    and ``expected_inputs`` the trusted copies they must still equal.
    """
    import torch

    mutated = [n for n, t in inputs.items() if not torch.equal(t, expected_inputs[n])]
    if mutated:
        return SetCheck(
            Status.INPUT_MUTATED,
            mutated_inputs=mutated,
            message=f"the candidate modified its input(s) {', '.join(mutated)}; inputs are read-only",
        )
    return outcome([compare_output(n, outputs[n], expected[n], tol) for n in outputs])


def outcome(checks: list[OutputCheck]) -> SetCheck:
    """A call's outcome from its outputs' checks: passed, or the first failure by ``_ORDER``'s rank."""
    failed = [c for c in checks if c.status is not Status.PASSED]
    if not failed:
        return SetCheck(Status.PASSED, outputs=checks)
    worst = min(failed, key=lambda c: _ORDER.index(c.status))
    return SetCheck(worst.status, outputs=checks, message=worst.message)
