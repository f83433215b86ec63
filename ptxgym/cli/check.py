"""``ptxgym check FILE --task ID [--dataset DIR]``: run the pipeline on one kernel file, print the feedback.

A FlashInfer-Trace Solution ``.json`` is played unchanged (its files and entry point); one written for
another definition, or for one whose dtypes or shapes differ, is ``TASK_MISMATCH``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ptxgym.cli.errors import UsageError
from ptxgym.pipeline import Pipeline
from ptxgym.records.feedback import Status
from ptxgym.records.feedback_text import render_feedback
from ptxgym.records.schema import Solution
from ptxgym.records.tasks import get_task, solution_definition


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``check`` parser."""
    p = sub.add_parser("check", help="run the pipeline on a kernel file and print the feedback")
    p.add_argument(
        "file",
        help="a .cu file, a model response (.md/.txt) with a fenced block, "
        "a FlashInfer-Trace Solution .json, or - for standard input (any of these)",
    )
    p.add_argument("--task", required=True, help="task id (Gemm-sm90a), env id, or definition@arch")
    p.add_argument(
        "--evaluator",
        default=None,
        choices=["auto", "none", "local", "ray"],
        help="GPU evaluator (default: PTXGYM_EVALUATOR or auto)",
    )
    p.add_argument("--json", action="store_true", help="print the Feedback record as JSON")
    p.add_argument(
        "--dataset",
        metavar="DIR",
        help="a FlashInfer-Trace dataset folder that holds the task (--task <definition>@<arch>)",
    )
    p.set_defaults(func=run)


def _as_action(path: str, text: str) -> str:
    """A bare source file (or bare source on stdin) becomes a fenced response; a response is passed as is."""
    if path == "-" or path.endswith((".cu", ".cuh", ".cpp", ".cc")):
        return text if "```" in text else f"```cuda\n{text}\n```"
    return text


def _is_solution_json(path: str, text: str) -> bool:
    """A ``.json`` file, or standard input that is a JSON object (CUDA source never starts with ``{``)."""
    return path.endswith(".json") or (path == "-" and text.lstrip().startswith("{"))


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the kernel passed (or built and was not evaluated), 1 otherwise."""
    from ptxgym.evaluation.choose import select_evaluator

    dataset = getattr(args, "dataset", None)
    task = get_task(args.task, dataset=dataset)
    if args.file == "-":
        text = sys.stdin.read()
    else:
        path = Path(args.file)
        if not path.is_file():
            raise UsageError(f"no such file: {path}")
        text = path.read_text(encoding="utf-8", errors="replace")
    solution = Solution.from_json(text) if _is_solution_json(args.file, text) else None
    source = "--evaluator" if args.evaluator else None
    with select_evaluator(args.evaluator, source=source) as evaluator:
        pipeline = Pipeline(task, evaluator)
        if solution is not None:
            where = None if args.file == "-" else args.file
            own = solution_definition(solution.definition, path=where, dataset=dataset)
            fb = pipeline.run_solution(solution, definition=own)
        else:
            fb = pipeline.run(_as_action(args.file, text))
    print(fb.to_json(indent=2) if args.json else render_feedback(fb))
    return 0 if fb.status in (Status.PASSED, Status.NOT_EVALUATED) else 1
