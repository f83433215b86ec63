"""Report rendering: the summary table and the Fast_p PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxgym.cli.main import main
from ptxgym.records.feedback import Feedback, Stage, Status
from ptxgym.records.turns import TurnRecord
from ptxgym.runner.metrics import summarize
from ptxgym.runner.report import format_table


def make_run(run_dir: Path) -> list[TurnRecord]:
    """Two tasks x two variants x two trajectories of 4 turns, with known outcomes."""
    fb = Feedback(task_id="x", status=Status.EXTRACT_ERROR, stage=Stage.EXTRACT).to_json()
    plan = {  # (task, variant) -> per trajectory, per turn: (status, speedup, target)
        ("Gemm-sm90a", "full"): [
            [
                ("COMPILE_ERROR", None, "not_checked"),
                ("PASSED", 0.6, "yes"),
                ("PASSED", 0.95, "yes"),
                ("PASSED", 1.05, "unknown"),
            ],
            [
                ("PASSED", 0.3, "no"),
                ("RUNTIME_ERROR", None, "not_checked"),
                ("PASSED", 0.8, "yes"),
                ("EXTRACT_ERROR", None, "not_checked"),
            ],
        ],
        ("Gemm-sm90a", "params"): [
            [("COMPILE_ERROR", None, "not_checked")] * 3 + [("PASSED", 0.4, "no")],
            [("PASSED", 0.7, "yes")] + [("INCORRECT_NUMERICAL", None, "yes")] * 3,
        ],
        ("MhaFwd-sm90a", "full"): [
            [("PASSED", 0.2, "yes"), ("PASSED", 0.5, "yes"), ("TIMEOUT", None, "no"), ("PASSED", 0.75, "yes")]
        ]
        * 2,
    }
    records = []
    for (task, variant), trajs in plan.items():
        for i, turns in enumerate(trajs):
            for t, (status, spd, target) in enumerate(turns):
                records.append(
                    TurnRecord(
                        run_id="r",
                        trajectory_id=f"{task}/{variant}/{i}",
                        task_id=task,
                        variant=variant,
                        policy="p",
                        turn=t,
                        action="...",
                        status=status,
                        correct=status == "PASSED",
                        target_executed=target,
                        speedup=spd,
                        feedback_json=fb,
                        truncated=t == 3,
                    )
                )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trajectories.jsonl").write_text("".join(r.to_line() + "\n" for r in records))
    return records


def test_table_has_paper_columns_and_values(tmp_path: Path) -> None:
    records = make_run(tmp_path / "run")
    text = format_table(summarize(records, [1, 4]))
    head = text.splitlines()[0].split()
    assert head == [
        "task",
        "traj",
        "turns",
        "correct<=1",
        "correct<=4",
        "inst<=1",
        "inst<=4",
        "best",
        "best(inst)",
        "not-eval",
    ]
    gemm = next(line for line in text.splitlines() if line.startswith("Gemm-sm90a")).split()
    # Gemm: 16 turns, 7 correct; turn 0: 2 of 4 correct (1 with target yes); inst: 0.6, 0.95, 0.8, 0.7.
    assert gemm[1:] == ["4", "16", "50.0%", "43.8%", "25.0%", "25.0%", "1.050x", "0.950x", "0"]
    assert "NOTE" not in text
    md = format_table(summarize(records), markdown=True)
    assert md.startswith("| task | traj |") and "| all |" in md


@pytest.mark.slow
def test_report_writes_png_and_cli_prints_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    make_run(run)
    rc = main(["report", str(run)])
    out = capsys.readouterr().out
    assert rc == 0 and "Gemm-sm90a" in out and "MhaFwd-sm90a" in out
    png = run / "report" / "fast_p.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    from PIL import Image

    with Image.open(png) as img:
        assert img.size[0] > img.size[1] > 300  # two task panels side by side
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["rows"][0]["best_speedup"] == pytest.approx(1.05)
    assert (run / "report" / "summary.md").read_text().startswith("| task |")


def test_report_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no trajectory file" in capsys.readouterr().err
    (tmp_path / "trajectories.jsonl").write_text("")
    assert main(["report", str(tmp_path)]) == 1


def test_no_gpu_note(tmp_path: Path) -> None:
    rec = _cpu_turn(0, Status.NOT_EVALUATED, Stage.RUN, None)
    text = format_table(summarize([rec]))
    assert "Correctness and speed need a GPU evaluator" in text


def test_cpu_stage_failures_are_not_blamed_on_a_missing_gpu() -> None:
    rec = _cpu_turn(0, Status.COMPILE_ERROR, Stage.BUILD, None)
    text = format_table(summarize([rec]))
    assert "no turn reached the GPU stage; every turn ended before it (COMPILE_ERROR x1)" in text
    assert "need a GPU evaluator" not in text


def _cpu_turn(turn: int, status: Status, stage: Stage, static_target: bool | None) -> TurnRecord:
    sass = None if static_target is None else {"arch": "sm_90a", "static_target": static_target}
    fb = Feedback(task_id="Gemm-sm90a", status=status, stage=stage).model_dump(mode="json")
    fb["sass"] = sass
    return TurnRecord(
        run_id="r",
        trajectory_id="Gemm-sm90a/none/0",
        task_id="Gemm-sm90a",
        variant="none",
        policy="p",
        turn=turn,
        action="",
        status=status.value,
        feedback_json=json.dumps(fb),
    )


def test_a_cpu_only_run_reports_what_the_cpu_stages_learned(tmp_path: Path) -> None:
    records = [
        _cpu_turn(0, Status.COMPILE_ERROR, Stage.BUILD, None),
        _cpu_turn(1, Status.NOT_EVALUATED, Stage.RUN, False),
        _cpu_turn(2, Status.NOT_EVALUATED, Stage.RUN, True),
        _cpu_turn(3, Status.NOT_EVALUATED, Stage.RUN, True),
    ]
    summary = summarize(records)
    assert not summary.gpu_evaluated
    assert summary.overall.compiled == 0.75 and summary.overall.static_target == 0.5
    assert summary.overall.stages == {"build": 1, "run": 3}
    text = format_table(summary)
    assert "Not evaluated on a GPU" in text and "75.0%" in text and "50.0%" in text
    (tmp_path / "trajectories.jsonl").write_text("".join(r.to_line() + "\n" for r in records))
    from ptxgym.runner.report import write_report

    png = write_report(tmp_path)["fast_p_png"]
    assert png.stat().st_size > 1000


def test_a_cpu_only_table_shows_unknown_rates_as_na_not_zero() -> None:
    records = [_cpu_turn(0, Status.NOT_EVALUATED, Stage.RUN, True)]
    text = format_table(summarize(records))
    gemm = next(line.split() for line in text.splitlines() if line.startswith("Gemm-sm90a"))
    assert gemm[3:5] == ["n/a", "n/a"]  # correct<=1, inst<=1: unknown without a GPU, not 0.0%
    assert "run (needs a GPU) x1" in text
    compile_only = [_cpu_turn(0, Status.COMPILE_ERROR, Stage.BUILD, None)]
    assert "0.0%" in format_table(summarize(compile_only))  # nothing built: truly 0, not unknown
