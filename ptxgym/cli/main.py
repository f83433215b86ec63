"""``ptxgym`` entry point: ``main(argv) -> int`` so tests can call it."""

from __future__ import annotations

import argparse
import importlib
import sys

#: Subcommand modules under ptxgym.cli; each has ``register(subparsers)`` and ``run(args) -> int``.
COMMANDS = ["tasks", "check", "eval", "report", "serve", "train"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="ptxgym",
        description="GPU-kernel optimisation with architecture-specific PTX as an RL environment.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"ptxgym.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
