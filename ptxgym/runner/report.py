"""Tables and plots of an evaluation run (``ptxgym report RUN_DIR``).

``format_table`` renders the Table-1-style summary as text (or Markdown); ``plot_fast_p`` draws the
Fast_p and Fast_p^Inst curves of every task (mean over prompt variants with the min/max band) into one
PNG with matplotlib (``pip install matplotlib``; imported only here, with the non-interactive Agg
backend); ``write_report`` writes both into ``RUN_DIR/report/``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ptxgym.records.turns import TurnRecord, read_turns
from ptxgym.runner.metrics import (
    Summary,
    SummaryRow,
    default_thresholds,
    outcome,
    paper_ks,
    summarize,
    variant_band,
)

TRAJECTORY_FILE = "trajectories.jsonl"
NO_GPU_NOTE = (
    "No turn was run on a GPU evaluator: only the CPU stages (extract, source screen, nvcc build, SASS "
    "census) ran, so correctness, target-instruction execution and speed are unknown (n/a above). "
    "Correctness and speed need a GPU evaluator (a machine with an NVIDIA GPU of the task's architecture "
    "and `pip install ptxgym[gpu]`; then --evaluator local)."
)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _spd(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def _cells(row: SummaryRow, ks: list[int], gpu: bool = True) -> list[str]:
    """One table row; with ``gpu`` False (no turn ran on a GPU) the rates are n/a, not zeros."""
    rate = _pct if gpu else (lambda _x: "n/a")
    return [
        row.task,
        str(row.trajectories),
        str(row.turns),
        *(rate(row.correct_at.get(k)) for k in ks),
        *(rate(row.target_at.get(k)) for k in ks),
        _spd(row.best_speedup),
        _spd(row.best_speedup_target),
        str(row.not_evaluated),
    ]


def table_header(ks: list[int]) -> list[str]:
    """Column names of the summary table."""
    return [
        "task",
        "traj",
        "turns",
        *(f"correct<={k}" for k in ks),
        *(f"inst<={k}" for k in ks),
        "best",
        "best(inst)",
        "not-eval",
    ]


def format_table(summary: Summary, markdown: bool = False) -> str:
    """The summary as an aligned text table (or a Markdown table), with notes below it."""
    head = table_header(summary.ks)
    gpu = summary.gpu_evaluated or not summary.overall.not_evaluated
    rows = [_cells(r, summary.ks, gpu) for r in summary.rows]
    if len(summary.rows) > 1:
        rows.append(_cells(summary.overall, summary.ks, gpu))
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]

        def fmt(cells: list[str]) -> str:
            pairs = enumerate(zip(cells, widths, strict=True))
            return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs)

        lines = [fmt(head), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]
    lines.append("")
    lines.append(
        "correct<=k: correct turns / turns within the first k turns; inst<=k: correct turns whose "
        "target instructions executed (ncu) / turns; best: best speedup over the baseline."
    )
    if not summary.gpu_evaluated and summary.overall.turns:
        lines += ["", *cpu_table(summary, markdown)]
    if not summary.gpu_evaluated and summary.overall.not_evaluated:
        lines.append("NOTE: " + NO_GPU_NOTE)
    elif not summary.gpu_evaluated and summary.overall.turns:
        mix = ", ".join(f"{k} x{v}" for k, v in summary.overall.statuses.items())
        lines.append(f"NOTE: no turn reached the GPU stage; every turn ended before it ({mix}).")
    elif summary.overall.not_evaluated:
        lines.append(
            f"NOTE: {summary.overall.not_evaluated} turns were not run on a GPU; rates are lower bounds."
        )
    return "\n".join(lines)


#: How a stage a CPU-only turn stopped at reads in the table ("run": built, waiting for a GPU).
STAGE_LABELS = {"run": "run (needs a GPU)", "build": "build (nvcc)", "screen": "source screen"}


def _stages(stages: dict[str, int]) -> str:
    return ", ".join(f"{STAGE_LABELS.get(k, k)} x{v}" for k, v in stages.items())


def cpu_table(summary: Summary, markdown: bool = False) -> list[str]:
    """What the CPU stages learned: built, target family in the SASS, the stage each turn ended at."""
    head = ["task", "turns", "compiled", "static target", "stopped at stage"]
    rows = list(summary.rows) + ([summary.overall] if len(summary.rows) > 1 else [])
    cells = [
        [
            r.task,
            str(r.turns),
            _pct(r.compiled),
            _pct(r.static_target),
            _stages(r.stages),
        ]
        for r in rows
    ]
    title = "Not evaluated on a GPU. What the CPU stages show (compiled: built by nvcc; static target: the "
    title += "target family is in the SASS, not proven to execute):"
    if markdown:
        return [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
            "| " + " | ".join(c) + " |" for c in cells
        ]
    widths = [max(len(x) for x in col) for col in zip(head, *cells, strict=True)]
    fmt = lambda cs: "  ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)).rstrip()  # noqa: E731
    return [title, fmt(head), fmt(["-" * w for w in widths]), *(fmt(c) for c in cells)]


def load_run(run_dir: str | Path) -> tuple[list[TurnRecord], list[str]]:
    """Turn records of a run directory (or a trajectory file) and the problems met reading them."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / TRAJECTORY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {path}")
    return read_turns(path)


def plot_fast_p(records: list[TurnRecord], out: str | Path, title: str = "") -> Path:
    """One subplot per task: Fast_p and Fast_p^Inst over p, mean over variants with the min/max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_task: dict[str, list] = defaultdict(list)
    for r in records:
        by_task[r.task_id].append(outcome(r))
    if not summarize(records).gpu_evaluated:
        return _plot_cpu_only(by_task, Path(out), title, plt)
    tasks = sorted(by_task)
    cols = min(3, max(len(tasks), 1))
    rows = (len(tasks) + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.6 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks, strict=False):
        outs = by_task[task]
        ps = default_thresholds(outs)
        for inst, color, style, label in (
            (False, "tab:blue", "-", "Fast$_p$"),
            (True, "tab:orange", "--", "Fast$_p^{Inst}$"),
        ):
            band = variant_band(outs, ps, require_target=inst)
            ax.plot(band.ps, band.mean, color=color, linestyle=style, label=label, drawstyle="steps-post")
            ax.fill_between(band.ps, band.lo, band.hi, color=color, alpha=0.2, step="post", linewidth=0)
        ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
        n_var = len({o.variant for o in outs})
        ax.set_title(f"{task}  ({len(outs)} turns, {n_var} variant{'s' if n_var != 1 else ''})", fontsize=10)
        ax.set_xlabel("speedup threshold p")
        ax.set_ylabel("fraction of turns")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    for ax in list(axes.flat)[len(tasks) :]:
        ax.axis("off")
    fig.suptitle(
        (title + ": " if title else "") + "Fast_p over speedup threshold p "
        "(line: mean over prompt variants; band: min-max)",
        fontsize=11,
    )
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _plot_cpu_only(by_task: dict[str, list], out: Path, title: str, plt) -> Path:
    """No turn ran on a GPU: bars of what the CPU stages show, and a plot that says so (no flat zeros)."""
    tasks = sorted(by_task)
    compiled = [sum(o.compiled for o in by_task[t]) / len(by_task[t]) for t in tasks]
    static = [sum(o.compiled and o.static_target for o in by_task[t]) / len(by_task[t]) for t in tasks]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(tasks)), 4.0))
    xs = range(len(tasks))
    ax.bar([x - 0.2 for x in xs], compiled, width=0.4, label="compiled", color="tab:blue")
    ax.bar([x + 0.2 for x in xs], static, width=0.4, label="target family in SASS", color="tab:orange")
    ax.set_xticks(list(xs), tasks, rotation=20, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of turns")
    ax.legend(fontsize=8)
    ax.set_title(
        (title + ": " if title else "") + "NOT EVALUATED ON A GPU\nFast_p unknown; what the CPU stages show",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def write_report(
    run_dir: str | Path, out_dir: str | Path | None = None, ks: list[int] | None = None, plots: bool = True
) -> dict[str, Path]:
    """Write summary.md, summary.json and fast_p.png under ``RUN_DIR/report`` (or ``out_dir``)."""
    records, _problems = load_run(run_dir)
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir else (run_dir if run_dir.is_dir() else run_dir.parent) / "report"
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(records, ks or _ks_for(run_dir, records))
    paths = {"summary_md": out / "summary.md", "summary_json": out / "summary.json"}
    paths["summary_md"].write_text(format_table(summary, markdown=True) + "\n", encoding="utf-8")
    paths["summary_json"].write_text(json.dumps(summary.model_dump(mode="json"), indent=2), encoding="utf-8")
    if plots and records:
        paths["fast_p_png"] = plot_fast_p(records, out / "fast_p.png", title=run_dir.name)
    return paths


def _ks_for(run_dir: Path, records: list[TurnRecord]) -> list[int]:
    """The paper's 1/4/8-turn columns, capped by the run's turn budget (run.json) or longest trajectory."""
    meta = run_dir / "run.json" if run_dir.is_dir() else run_dir.with_name("run.json")
    try:
        turns = int(json.loads(meta.read_text(encoding="utf-8"))["config"]["turns"])
    except (OSError, KeyError, ValueError, TypeError):
        turns = max((r.turn + 1 for r in records), default=8)
    return paper_ks(turns)
