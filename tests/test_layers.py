"""The package's layers: every import points down (README, "Architecture").

A module may import from its own group or from a group of a lower rank, never up and never sideways into
another group of the same rank. The two sides of the trust boundary (``evaluation.trusted`` and
``evaluation.sandboxed``) share rank 3 and so cannot import each other; both speak through
``evaluation.protocol``. ``ptxgym/__init__.py`` is the public face and may import any layer; no module
imports it. Lazy imports inside functions count too.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ptxgym"

#: (group prefix, rank). The longest matching prefix names a module's group.
GROUPS: dict[str, int] = {
    "ptxgym.confine": 0,
    "ptxgym.records": 0,
    "ptxgym.cpu": 1,
    "ptxgym.knowledge_packs": 1,
    "ptxgym.evaluation": 1,
    "ptxgym.evaluation.protocol": 1,
    "ptxgym.evaluation.compare": 1,
    "ptxgym.evaluation.child_errors": 1,
    "ptxgym.evaluation.runner": 2,
    "ptxgym.evaluation.sandboxed": 3,
    "ptxgym.evaluation.trusted": 3,
    "ptxgym.evaluation.choose": 4,
    "ptxgym.rewards": 4,
    "ptxgym.pipeline": 5,
    "ptxgym.envs": 6,
    "ptxgym.policies": 6,
    "ptxgym.runner": 7,
    "ptxgym.train": 7,
    "ptxgym.audit": 7,
    "ptxgym.cli": 8,
}


def group_of(module: str) -> str:
    """The longest group prefix of a dotted module name."""
    matches = [g for g in GROUPS if module == g or module.startswith(g + ".")]
    if not matches:
        raise AssertionError(f"module {module} belongs to no layer: add its folder to GROUPS")
    return max(matches, key=len)


def modules() -> dict[str, Path]:
    """Every module of the package (through the links to the top-level folders), by dotted name."""
    found = {}
    paths = [
        Path(d) / f for d, _, files in os.walk(PACKAGE, followlinks=True) for f in files if f.endswith(".py")
    ]
    for path in paths:
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        found[".".join(["ptxgym", *parts])] = path
    return found


def imports(module: str, path: Path) -> set[str]:
    """The ptxgym modules a module imports (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "ptxgym"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.split(".")[0] == "ptxgym":
                out.add(name)
    return out


def test_every_module_has_a_layer() -> None:
    for module in modules():
        if module != "ptxgym":
            group_of(module)


@pytest.mark.parametrize("module", sorted(m for m in modules() if m != "ptxgym"))
def test_imports_point_down(module: str) -> None:
    path = modules()[module]
    mine = group_of(module)
    for target in sorted(imports(module, path)):
        assert target != "ptxgym", f"{module} imports the package root (the public face); import the layer"
        theirs = group_of(target)
        if theirs == mine or mine.startswith(theirs + ".") or theirs.startswith(mine + "."):
            continue
        assert GROUPS[theirs] < GROUPS[mine], (
            f"{module} (layer {mine}, rank {GROUPS[mine]}) imports {target} "
            f"(layer {theirs}, rank {GROUPS[theirs]}): imports must point down"
        )


def test_the_two_sides_of_the_trust_boundary_do_not_import_each_other() -> None:
    for module, path in modules().items():
        for side, other in (("trusted", "sandboxed"), ("sandboxed", "trusted")):
            if module.startswith(f"ptxgym.evaluation.{side}"):
                bad = [t for t in imports(module, path) if t.startswith(f"ptxgym.evaluation.{other}")]
                assert not bad, f"{module} imports {bad}: the sides talk only through evaluation.protocol"
