"""The ground floor: records every other layer shares, and nothing that runs a tool.

``errors`` (one exception tree), ``settings`` (the one reader of ``PTXGYM_*``), ``schema``
(FlashInfer-Trace), ``arch`` (architecture specs), ``tasks`` (the catalog), ``feedback`` (the per-turn
record) and ``feedback_text`` (its rendering for a model), ``turns`` (trajectory JSONL records),
``version``. Modules here import only each other.
"""

from ptxgym.records.arch import ArchSpec, get_arch
from ptxgym.records.errors import PtxgymError, UnknownTaskError
from ptxgym.records.feedback import Feedback, Stage, Status, Verdict
from ptxgym.records.feedback_text import render_feedback
from ptxgym.records.schema import Definition, Solution, Trace, Workload
from ptxgym.records.tasks import Task, catalog, get_task
from ptxgym.records.turns import TurnRecord, read_turns
from ptxgym.records.version import __version__

__all__ = [
    "ArchSpec",
    "Definition",
    "Feedback",
    "PtxgymError",
    "Solution",
    "Stage",
    "Status",
    "Task",
    "Trace",
    "TurnRecord",
    "UnknownTaskError",
    "Verdict",
    "Workload",
    "__version__",
    "catalog",
    "get_arch",
    "get_task",
    "read_turns",
    "render_feedback",
]
