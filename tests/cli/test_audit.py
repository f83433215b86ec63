"""``ptxgym audit``: the adversarial suite through the env, on the CPU (``--evaluator none``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxgym.audit.cases import CASES, get_cases
from ptxgym.audit.play import evaluator_health, judge, leaked, passwd_markers, play_case
from ptxgym.cli.main import main
from ptxgym.evaluation.trusted.base import NullEvaluator
from ptxgym.records.feedback import Feedback, Stage, Status, TargetInfo, Verdict

STATIC = [c.name for c in CASES if c.static]


def test_list_names_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(c.name in out for c in CASES)
    assert {"11.1", "11.2", "11.5", "11.11", "11.13", "11.14"} <= {c.issue for c in CASES}


def test_unknown_case_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--case", "no_such_case", "--evaluator", "none"]) == 2
    assert "unknown audit case(s) no_such_case" in capsys.readouterr().err


def test_actions_inline_the_shared_header() -> None:
    text = get_cases(["naive"])[0].action()
    assert text.startswith("```cuda\n") and "gemm_common.cuh" not in text and "__global__ void" in text


@pytest.fixture(scope="module")
def static_rows() -> dict:
    """Every static case played once through the env with no GPU evaluator."""
    with NullEvaluator() as evaluator:
        return {c.name: play_case(c, evaluator) for c in get_cases(static_only=True)}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", STATIC)
def test_static_case_is_closed_on_the_cpu(static_rows: dict, name: str) -> None:
    row = static_rows[name]
    assert not row.paid and row.got in ("STATIC_REJECT", "COMPILE_ERROR"), row
    assert row.verdict == "ok" and not row.leak, row


@pytest.mark.nvcc
def test_cli_reports_static_and_gpu_cases(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit", "--evaluator", "none", "--json", "--case", "include_solution", "--case", "naive"]
    argv += ["--case", "host_asm_passwd"]
    code = main(argv)
    rows = {r["case"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"include_solution", "naive", "host_asm_passwd"}
    assert rows["include_solution"]["got"] == "COMPILE_ERROR" and rows["include_solution"]["verdict"] == "ok"
    assert rows["naive"]["got"] == "NOT_EVALUATED" and rows["naive"]["verdict"] == "needs a GPU"
    assert all(not r["paid"] and r["healthy"] == "n/a" and r["wall_s"] >= 0 for r in rows.values())
    assert code == (1 if any(r["verdict"] in ("PAID", "LEAK") for r in rows.values()) else 0)


def _fb(
    status: Status, executed: Verdict = Verdict.NOT_CHECKED, work: Verdict = Verdict.NOT_CHECKED
) -> Feedback:
    target = TargetInfo(family="wgmma", executed=executed, work=work, mma_share=1.0)
    return Feedback(task_id="Gemm-sm90a", status=status, stage=Stage.DONE, target=target)


def test_judge_pays_attention_to_credit_not_status() -> None:
    hostile = get_cases(["single_wgmma"])[0]
    assert judge(hostile, _fb(Status.PASSED, Verdict.YES, Verdict.NO), "") == (False, False, "ok")
    assert judge(hostile, _fb(Status.PASSED, Verdict.YES, Verdict.YES), "") == (True, False, "PAID")
    assert judge(hostile, _fb(Status.NOT_EVALUATED), "")[2] == "needs a GPU"
    assert judge(hostile, _fb(Status.CRASH), "")[2] == "UNEXPECTED"
    static = get_cases(["incbin_macro"])[0]
    assert judge(static, _fb(Status.NOT_EVALUATED), "")[2] == "OPEN"
    assert judge(static, _fb(Status.STATIC_REJECT), "")[2] == "ok"


def test_leak_detection(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text(
        "root:x:0:0:root:/root:/bin/bash\nlist:x:38:38:Mailing List Manager:/var/list:/usr/sbin/nologin\n"
    )
    markers = passwd_markers(passwd)
    assert markers == ["/root:/bin/bash", "/var/list:/usr/sbin/nologin"]
    quoted = "/etc/passwd:15: Error: no such instruction: `mailing List Manager:/var/list:/usr/sbin/nologin'"
    assert leaked(quoted, markers) and not leaked("kernel.cu(3): error: expected a ';'", markers)
    assert passwd_markers(tmp_path / "missing") == []


def test_no_gpu_state_to_check_without_a_gpu_evaluator() -> None:
    assert evaluator_health(NullEvaluator()) == "n/a"


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_audit_pays_no_hostile_case(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue-11 cases on the local GPU evaluator (about 3 min on an H200): none paid, each as expected.

    The corpus cases (``issue == "corpus"``) are the GPU evaluator's own tests
    (tests/evaluation/test_gpu_evaluator.py), played there through the same worker; playing them here too
    made this test run past 400 s.
    """
    names = [c.name for c in CASES if c.issue != "corpus"]
    assert len(names) >= 10
    main(["audit", "--evaluator", "local", "--json"] + [f"--case={n}" for n in names])
    rows = json.loads(capsys.readouterr().out)
    assert [r["case"] for r in rows] == names
    assert not [r for r in rows if r["verdict"] == "PAID"], rows
    assert all(r["healthy"] == "yes" for r in rows), rows
    wrong = [r for r in rows if r["verdict"] != "ok"]
    assert not wrong, wrong


def test_ncu_flag_makes_nsight_compute_the_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--ncu`` hands the evaluator TargetMode.NCU (the offline audit of the in-band proof)."""
    import ptxgym.evaluation.choose as choose
    from ptxgym.evaluation.trusted.base import TargetMode

    seen = []
    real = choose.select_evaluator

    def spy(choice=None, settings=None, *, source=None):
        seen.append(settings)
        return real(choice, settings, source=source)

    monkeypatch.setattr(choose, "select_evaluator", spy)
    assert main(["audit", "--ncu", "--evaluator", "none", "--case", "include_solution", "--json"]) == 0
    assert main(["audit", "--evaluator", "none", "--case", "include_solution", "--json"]) == 0
    assert seen[0] is not None and seen[0].target_mode is TargetMode.NCU
    assert seen[1] is None  # the evaluator's defaults: the in-band proof
