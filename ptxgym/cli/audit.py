"""``ptxgym audit``: play the adversarial suite through the env and print what each case got.

Columns: case, issue item, expected verdict, status got, reward paid (the chosen reward's total),
paid (correctness, speed or target credit), evaluator healthy after, wall seconds, verdict
(``ptxgym.audit.play``). Exit status 1 when a hostile case was paid or leaked a file, else 0. Without a
GPU (``--evaluator none``) the static cases are decided by the CPU stages and the others say "needs a
GPU". ``--ncu`` proves the target family with Nsight Compute on every candidate (``TargetMode.NCU``),
the offline audit of the in-band counts that back it by default.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from ptxgym.audit.play import AuditRow

_COLUMNS = (
    ("case", 18),
    ("issue", 6),
    ("expected", 34),
    ("got", 20),
    ("reward", 7),
    ("paid", 5),
    ("healthy", 8),
    ("wall_s", 7),
    ("verdict", 12),
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``audit`` parser."""
    p = sub.add_parser("audit", help="play the adversarial suite through the env and report what was paid")
    p.add_argument(
        "--evaluator",
        default=None,
        choices=["auto", "none", "local"],
        help="GPU evaluator (default: PTXGYM_EVALUATOR or auto); none: CPU stages only",
    )
    p.add_argument(
        "--case", action="append", dest="cases", metavar="NAME", help="play only this case (repeat)"
    )
    p.add_argument("--static", action="store_true", help="only the cases the CPU stages decide")
    p.add_argument(
        "--ncu",
        action="store_true",
        help="prove the target family with Nsight Compute on every candidate (TargetMode.NCU) instead of "
        "the in-band counts: the offline audit of the in-band proof",
    )
    p.add_argument("--reward", default="staged", help="reward spec whose total is reported (default: staged)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)


def _table(rows: list[AuditRow]) -> str:
    head = " ".join(name.ljust(width) for name, width in _COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = [r.case, r.issue, r.expected, r.got, f"{r.reward:.3f}", "YES" if r.paid else "no"]
        cells += [r.healthy, f"{r.wall_s:.1f}", r.verdict]
        lines.append(" ".join(str(c)[: w + 8].ljust(w) for c, (_, w) in zip(cells, _COLUMNS, strict=True)))
    counts = Counter(r.verdict for r in rows)
    lines.append("")
    lines.append(f"{len(rows)} cases: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Play the chosen cases; exit 1 when a hostile case was paid or leaked."""
    from ptxgym.audit.cases import get_cases
    from ptxgym.audit.play import play_case
    from ptxgym.evaluation.choose import select_evaluator
    from ptxgym.evaluation.trusted.base import EvalSettings, TargetMode
    from ptxgym.rewards import resolve_reward

    cases = get_cases(args.cases, static_only=args.static)
    if args.list:
        for c in cases:
            print(f"{c.name:18s} {c.task:14s} {c.issue:6s} {c.expected}")
        return 0
    resolve_reward(args.reward)  # a bad spec is a usage error before any work
    source = "--evaluator" if args.evaluator else None
    settings = EvalSettings(target_mode=TargetMode.NCU) if args.ncu else None
    rows = []
    with select_evaluator(args.evaluator, settings, source=source) as evaluator:
        for case in cases:
            row = play_case(case, evaluator, args.reward)
            rows.append(row)
            if not args.json:
                print(f"{row.case}: {row.got} -> {row.verdict}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        print(_table(rows))
    return 1 if any(r.failed for r in rows) else 0
