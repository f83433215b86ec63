"""Exact input perturbations: change input values in place, know the new expected outputs for free.

Correctness calls must see changing inputs, and their outputs must be checkable without re-running the
slow fp32 reference. Random sign flips along some axes do both: flipping signs is exact in floating
point, and for the operators here the outputs change by the same (products of) signs. Sign flips alone
are not enough for timed calls: a candidate can compute each set once and replay its outputs with the
signs corrected, so timed calls get fresh values instead (``arena.py``); the flips remain for the
correctness calls and for inputs a timed call does not redraw.

A *sign group* is a random +-1 vector over some definition axes, multiplied into some inputs and
(exactly) into some outputs:

* GEMM ``C = A B^T``: rows of A (axis M) flip rows of C; rows of B (axis N) flip columns of C.
* attention forward: V per (b, h) flips O (LSE is unchanged).
* attention backward: dO per (b, h) flips dQ, dK and dV.

Every call therefore changes every output but the forward's LSE, which is what defeats caches of
outputs. Other exact flips exist (Q and K together; V and O together in the backward) but were dropped:
they leave the attention probabilities unchanged, so they defeat no cache the groups above do not, and
they tripled the bytes the trusted side moves per call. A definition matching none of these gets no
groups: its timed calls then only rotate input sets.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxgym.records.schema import Definition


@dataclass(frozen=True)
class SignGroup:
    """One random sign vector over ``axes``, applied to ``inputs`` and, exactly, to ``outputs``."""

    axes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _has(defn: Definition, names: tuple[str, ...], axes: tuple[str, ...]) -> bool:
    for name in names:
        spec = defn.inputs.get(name) or defn.outputs.get(name)
        if spec is None or not spec.shape or not set(axes) <= set(spec.shape):
            return False
        if not spec.dtype.startswith(("float", "bfloat")):
            return False
    return True


def groups_for(defn: Definition) -> tuple[SignGroup, ...]:
    """The sign groups that apply to a definition (empty if its structure is not recognised)."""
    ins, outs = set(defn.inputs), set(defn.outputs)
    bh = ("B", "H")
    if defn.op_type == "gemm" and ins == {"A", "B"} and outs == {"C"}:
        candidates: tuple[SignGroup, ...] = (
            SignGroup(("M",), ("A",), ("C",)),
            SignGroup(("N",), ("B",), ("C",)),
        )
    elif defn.op_type == "attention" and ins == {"Q", "K", "V"} and outs == {"O", "LSE"}:
        candidates = (SignGroup(bh, ("V",), ("O",)),)
    elif (
        defn.op_type == "attention"
        and ins == {"Q", "K", "V", "O", "dO", "LSE"}
        and outs == {"dQ", "dK", "dV"}
    ):
        candidates = (SignGroup(bh, ("dO",), ("dQ", "dK", "dV")),)
    else:
        return ()
    ok = all(_has(defn, g.inputs + g.outputs, g.axes) for g in candidates)
    return candidates if ok else ()


class SignPerturbation:
    """Draws sign flips for one definition and maps them onto inputs and expected outputs."""

    def __init__(self, defn: Definition, axis_values: dict[str, int]) -> None:
        self.defn = defn
        self.axis_values = axis_values
        self.groups = groups_for(defn)

    @property
    def active(self) -> bool:
        """Whether any perturbation applies (otherwise timed calls only rotate input sets)."""
        return bool(self.groups)

    @property
    def changed_inputs(self) -> tuple[str, ...]:
        """Inputs whose values a perturbation changes."""
        return tuple(dict.fromkeys(n for g in self.groups for n in g.inputs))

    def identity(self, device) -> list:
        """The neutral state (all signs +1)."""
        import torch

        return [torch.ones(self._shape(g), dtype=torch.float32, device=device) for g in self.groups]

    def draw(self, generator, device) -> list:
        """Fresh random +-1 vectors, one per group."""
        import torch

        out = []
        for g in self.groups:
            bits = torch.randint(0, 2, self._shape(g), generator=generator, device=device, dtype=torch.int8)
            out.append(bits.to(torch.float32).mul_(2).sub_(1))
        return out

    def apply_inputs(self, tensors: dict, signs: list) -> None:
        """Multiply the inputs of every group in place by their broadcast signs (those in ``tensors``)."""
        for g, s in zip(self.groups, signs, strict=True):
            for name in g.inputs:
                t = tensors.get(name)
                if t is not None:
                    t.mul_(self._broadcast(s, g, name).to(t.dtype))

    @staticmethod
    def compose(state: list, signs: list) -> list:
        """The cumulative state after applying ``signs`` on top of ``state``."""
        return [a * b for a, b in zip(state, signs, strict=True)]

    def expected_inputs(self, base: dict, state: list, skip: tuple[str, ...] = ()) -> dict:
        """What the inputs must hold: ``base`` with the cumulative signs applied.

        New tensors for the changed inputs, the base tensors themselves for the others and for those in
        ``skip`` (inputs the caller replaces anyway, e.g. a timed call's fresh values).
        """
        out = dict(base)
        for g, s in zip(self.groups, state, strict=True):
            for name in g.inputs:
                if name not in skip:
                    out[name] = out[name] * self._broadcast(s, g, name).to(base[name].dtype)
        return out

    def expected(self, base: dict, state: list) -> dict:
        """Expected outputs for inputs perturbed by ``state`` relative to the inputs of ``base``."""
        out = {}
        for name, ref in base.items():
            value = ref
            for g, s in zip(self.groups, state, strict=True):
                if name in g.outputs:
                    value = value * self._broadcast(s, g, name).to(ref.dtype)
            out[name] = value
        return out

    def _shape(self, g: SignGroup) -> tuple[int, ...]:
        return tuple(self.axis_values[a] for a in g.axes)

    def _broadcast(self, signs, g: SignGroup, name: str):
        spec = self.defn.inputs.get(name) or self.defn.outputs[name]
        axes = spec.shape or []  # a scalar (shape None) carries no sign axis
        shape = [self.axis_values[a] if a in g.axes else 1 for a in axes]
        order = [a for a in axes if a in g.axes]
        perm = [g.axes.index(a) for a in order]
        return signs.permute(*perm).reshape(shape)
