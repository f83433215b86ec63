"""``ptxgym report RUN_DIR``: the summary table and Fast_p plots of an evaluation run."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` parser."""
    p = sub.add_parser("report", help="tables and Fast_p plots of an evaluation run")
    p.add_argument("run_dir", help="run directory of `ptxgym eval` (or a trajectories.jsonl file)")
    p.add_argument("--out", default=None, help="output folder (default RUN_DIR/report)")
    p.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the table, write summary.md/json and fast_p.png."""
    from ptxgym.runner.metrics import Summary
    from ptxgym.runner.report import format_table, load_run, write_report

    records, problems = load_run(args.run_dir)  # a missing file: one line, exit 2 (cli.main)
    for p in problems:
        print(f"ptxgym report: {p}", file=sys.stderr)
    if not records:
        print(f"ptxgym report: no turn records in {args.run_dir}", file=sys.stderr)
        return 1
    try:
        paths = write_report(args.run_dir, args.out, plots=not args.no_plots)
    except ImportError as exc:  # the tables need nothing more; say why the plot is missing
        print(
            f"ptxgym report: no plot, it needs matplotlib ({exc}): pip install 'ptxgym[eval]'",
            file=sys.stderr,
        )
        paths = write_report(args.run_dir, args.out, plots=False)
    summary = Summary.model_validate_json(paths["summary_json"].read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps(summary.model_dump(mode="json"), indent=2))
    else:
        print(format_table(summary))
        print("\nwrote: " + ", ".join(str(p) for p in paths.values()))
    return 0
