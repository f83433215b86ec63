"""Target architectures and their instruction families.

A task names an architecture (``sm_90a`` Hopper, ``sm_100a`` Blackwell). The architecture fixes the
nvcc gencode and the SASS opcodes that count as "the target instruction family": the tensor-core and
tensor-memory-accelerator instructions a fast kernel on that chip must use. Static presence of one of
them in the SASS is necessary; execution is proven only at run time (Nsight Compute).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ptxgym.records.errors import PtxgymError


@dataclass(frozen=True)
class ArchSpec:
    """One target architecture."""

    name: str
    """Canonical name, e.g. ``sm_90a``."""
    short: str
    """Name used in env ids, e.g. ``sm90a``."""
    family: str
    """Marketing family, e.g. Hopper."""
    gpus: tuple[str, ...]
    """GPUs of this architecture, e.g. H100, H200."""
    compute_capability: tuple[int, int]
    target_family: str
    """Human name of the required instruction family."""
    target_opcodes: tuple[str, ...]
    """Regexes over SASS opcodes (the mnemonic without modifiers) that count as the target family."""
    excluded_opcodes: tuple[str, ...] = ()
    """Opcodes that match a target regex but do not count (TMA cache control and prefetch)."""
    mma_opcodes: tuple[str, ...] = ()
    """Regexes over SASS mnemonics of the family's matrix-multiply instructions, whose executed FLOPs
    are the target's share of the task's work (``ptxgym.evaluation.trusted.target_work``)."""

    @property
    def gencode(self) -> str:
        """The nvcc ``-gencode`` value."""
        num = self.name.removeprefix("sm_")
        return f"arch=compute_{num},code=sm_{num}"

    def with_families(self, families: tuple[str, ...] | list[str]) -> ArchSpec:
        """This architecture with only some of its instruction families as the target (``TARGET_FAMILIES``).

        The default families give back this very object, so a task that keeps them is unchanged.
        """
        known = TARGET_FAMILIES[self.name]
        unknown = [f for f in families if f not in known]
        if unknown or not families:
            raise PtxgymError(
                f"target families {list(families)} for {self.name}: expected a non-empty subset of "
                f"{sorted(known)}"
            )
        chosen = tuple(dict.fromkeys(families))
        if chosen == DEFAULT_FAMILIES[self.name]:
            return self
        return dataclasses.replace(
            self,
            target_family=" or ".join(known[f].text for f in chosen),
            target_opcodes=tuple(op for f in chosen for op in known[f].opcodes),
            excluded_opcodes=tuple(dict.fromkeys(op for f in chosen for op in known[f].excluded)),
            mma_opcodes=tuple(op for f in chosen for op in known[f].mma),
        )

    def is_mma_opcode(self, opcode: str) -> bool:
        """Whether a SASS opcode is one of the family's matrix-multiply instructions."""
        base = opcode.split(".")[0].strip()
        return any(re.fullmatch(p, base) for p in self.mma_opcodes)

    def is_target_opcode(self, opcode: str) -> bool:
        """Whether a SASS opcode (e.g. ``HGMMA.64x128x16.F32.BF16``) belongs to the target family."""
        base = opcode.split(".")[0].strip()
        if base in self.excluded_opcodes:
            return False
        return any(re.fullmatch(p, base) for p in self.target_opcodes)


HOPPER = ArchSpec(
    name="sm_90a",
    short="sm90a",
    family="Hopper",
    gpus=("H100", "H200", "H20", "GH200"),
    compute_capability=(9, 0),
    target_family="wgmma (*GMMA) tensor-core MMA or TMA bulk tensor copies (UTMALDG/UTMASTG/UTMAREDG)",
    target_opcodes=(r"[A-Z]*GMMA", r"UTMALDG", r"UTMASTG", r"UTMAREDG"),
    excluded_opcodes=("UTMACCTL", "UTMAPF", "UTMACMDFLUSH"),
    mma_opcodes=(r"[A-Z]*GMMA",),
)

BLACKWELL = ArchSpec(
    name="sm_100a",
    short="sm100a",
    family="Blackwell",
    gpus=("B200", "GB200"),
    compute_capability=(10, 0),
    target_family="tcgen05 (UTC* tensor-core and tensor-memory ops, LDTM, STTM)",
    target_opcodes=(r"UTC[A-Z0-9]*", r"LDTM", r"STTM"),
    mma_opcodes=(r"UTC[A-Z0-9]*MMA[A-Z0-9]*",),
)

ARCHS: dict[str, ArchSpec] = {a.name: a for a in (HOPPER, BLACKWELL)}


@dataclass(frozen=True)
class TargetFamily:
    """One instruction family a task may require on an architecture."""

    text: str
    """How prompts and feedback name it."""
    opcodes: tuple[str, ...]
    """Regexes over SASS opcode mnemonics."""
    excluded: tuple[str, ...] = ()
    """Mnemonics that match but do not count."""
    mma: tuple[str, ...] = ()
    """Its matrix-multiply mnemonics (``ArchSpec.mma_opcodes``); none for a copy family such as TMA."""


_TMA = TargetFamily(
    "TMA bulk tensor copies (UTMALDG/UTMASTG/UTMAREDG)",
    (r"UTMALDG", r"UTMASTG", r"UTMAREDG"),
    ("UTMACCTL", "UTMAPF", "UTMACMDFLUSH"),
)
TARGET_FAMILIES: dict[str, dict[str, TargetFamily]] = {
    "sm_90a": {
        "wgmma": TargetFamily("wgmma (*GMMA) tensor-core MMA", (r"[A-Z]*GMMA",), mma=HOPPER.mma_opcodes),
        "tma": _TMA,
    },
    "sm_100a": {
        "tcgen05": TargetFamily(
            "tcgen05 (UTC* tensor-core and tensor-memory ops, LDTM, STTM)",
            BLACKWELL.target_opcodes,
            mma=BLACKWELL.mma_opcodes,
        ),
        "tma": _TMA,
    },
}
"""Instruction families a task record may name per architecture (its ``targets``)."""
DEFAULT_FAMILIES: dict[str, tuple[str, ...]] = {"sm_90a": ("wgmma", "tma"), "sm_100a": ("tcgen05",)}
"""The families of ``HOPPER`` and ``BLACKWELL`` themselves (what a task gets when its record names none)."""


def get_arch(name: str) -> ArchSpec:
    """Look up an architecture by ``sm_90a``, ``sm90a`` or ``90a``."""
    key = name.strip().lower().replace("sm", "").lstrip("_")
    for arch in ARCHS.values():
        if arch.name.removeprefix("sm_") == key:
            return arch
    raise PtxgymError(f"unknown architecture {name!r}; expected one of {sorted(ARCHS)}")


def arch_for_capability(major: int, minor: int) -> ArchSpec | None:
    """The architecture whose kernels run natively on a device of this compute capability."""
    for arch in ARCHS.values():
        if arch.compute_capability == (major, minor):
            return arch
    return None


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet ceilings of one GPU, used for the speed-of-light floor (a generous lower bound)."""

    name: str
    arch: str
    bf16_dense_flops: float
    """Dense BF16 tensor-core FLOP/s."""
    hbm_bytes_per_s: float
    sms: int


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("H100", "sm_90a", 989e12, 3.35e12, 132),
        GpuSpec("H200", "sm_90a", 989e12, 4.8e12, 132),
        GpuSpec("B200", "sm_100a", 2250e12, 8.0e12, 148),
    )
}


def gpu_spec(device_name: str, arch: str = "sm_90a") -> GpuSpec:
    """Ceilings for a device name such as 'NVIDIA H200'; the fastest of the arch if unknown."""
    for key, spec in GPUS.items():
        if key in device_name.upper():
            return spec
    same = [g for g in GPUS.values() if g.arch == arch] or list(GPUS.values())
    return max(same, key=lambda g: (g.bf16_dense_flops, g.hbm_bytes_per_s))
