"""``ptxgym tasks``: list the task catalog (or a FlashInfer-Trace dataset folder's tasks) and their ids."""

from __future__ import annotations

import argparse
import json

from ptxgym.records.tasks import catalog, load_dataset


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``tasks`` parser."""
    p = sub.add_parser("tasks", help="list tasks and their Gymnasium ids")
    p.add_argument("--arch", help="only tasks of this architecture (sm_90a, sm_100a)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--dataset",
        metavar="DIR",
        help="list the tasks of a FlashInfer-Trace dataset folder (ids <definition>@<arch>) instead",
    )
    p.add_argument("--split", choices=["train", "validation", "test"], help="only tasks of this split")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the catalog."""
    source = load_dataset(args.dataset) if getattr(args, "dataset", None) else catalog()
    tasks = [t for t in source.values() if not args.arch or t.arch_spec.name == _norm(args.arch)]
    tasks = [t for t in tasks if not getattr(args, "split", None) or t.split == args.split]
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
            "family": t.family,
            "workloads": len(t.family_workloads),
            "split": t.split,
            "held_out": t.held_out,
            "primary": t.primary,
            **({"dataset": t.source} if t.source else {}),
        }
        for t in tasks
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    key, head = ("id", "task id") if getattr(args, "dataset", None) else ("env_id", "env id")
    width = max(len(str(r[key])) for r in rows) if rows else 10
    dwidth = max([26, *(len(str(r["definition"])) for r in rows)])
    print(f"{head:<{width}}  {'definition':<{dwidth}} {'GFLOP':>8}  baseline")
    for r in rows:
        print(f"{r[key]:<{width}}  {r['definition']:<{dwidth}} {r['gflop']:>8}  {r['baseline']}")
    return 0


def _norm(arch: str) -> str:
    from ptxgym.records.arch import get_arch

    return get_arch(arch).name
