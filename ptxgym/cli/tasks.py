"""``ptxgym tasks``: list the task catalog and the Gymnasium ids."""

from __future__ import annotations

import argparse
import json

from ptxgym.records.tasks import catalog


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``tasks`` parser."""
    p = sub.add_parser("tasks", help="list tasks and their Gymnasium ids")
    p.add_argument("--arch", help="only tasks of this architecture (sm_90a, sm_100a)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the catalog."""
    tasks = [t for t in catalog().values() if not args.arch or t.arch_spec.name == _norm(args.arch)]
    rows = [
        {
            "id": t.id,
            "env_id": t.env_id,
            "definition": t.definition.name,
            "arch": t.arch,
            "workload": t.definition.axis_values(t.workload),
            "baseline": t.baseline.library,
            "target": t.arch_spec.target_family,
            "gflop": round(t.flops / 1e9, 1),
            "summary": t.summary,
        }
        for t in tasks
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(str(r["env_id"])) for r in rows) if rows else 10
    print(f"{'env id':<{width}}  {'definition':<26} {'GFLOP':>8}  baseline")
    for r in rows:
        print(f"{r['env_id']:<{width}}  {r['definition']:<26} {r['gflop']:>8}  {r['baseline']}")
    return 0


def _norm(arch: str) -> str:
    from ptxgym.records.arch import get_arch

    return get_arch(arch).name
