"""``ptxgym`` entry point: ``main(argv) -> int`` so tests can call it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ptxgym.cli.errors import EXIT_USAGE, USAGE_ERRORS, usage_message

#: Subcommand modules under ptxgym.cli; each has ``register(subparsers)`` and ``run(args) -> int``.
COMMANDS = ["tasks", "check", "eval", "report", "serve", "train", "audit"]


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
    """Parse ``argv`` and run the subcommand; return the exit code (2: bad input, said in one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except USAGE_ERRORS as exc:
        flags = _option_strings(parser, args.command)
        print(f"ptxgym {args.command}: {usage_message(exc, flags)}", file=sys.stderr)
        return EXIT_USAGE


def _option_strings(parser: argparse.ArgumentParser, command: str) -> list[str]:
    """Every ``--flag`` of a subcommand (messages about a config field name the flag instead)."""
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        sub = getattr(action, "choices", None) or {}
        if command in sub:
            return [o for a in sub[command]._actions for o in a.option_strings]
    return []


def entry() -> None:
    """Console-script entry point; a reader that goes away (``ptxgym check FILE | head``) ends it quietly."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        code = 0
    sys.exit(code)
