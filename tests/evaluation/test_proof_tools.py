"""The proof tools read their reports from files the candidate cannot write, never from its output (no GPU).

The tools are stand-ins (fake_tools/ncu, fake_tools/compute-sanitizer: they run the driver and write a
report the way the real tools do); the driver is hostile_driver.py, which applies the real host sandbox
and then forges reports on its stdout and in the report directory. What runs for real: the evaluator's
command lines, ``driver_argv``'s sandbox arguments, ``tool_environ``, ``run_tool``, ``ProofDirs``, the
report reading and parsing, ``check_executed``/``run_memcheck`` and ``with_proofs``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ptxgym.evaluation.sandboxed.sandbox import landlock_abi
from ptxgym.evaluation.trusted import memcheck, ncu
from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, GpuVerdict, MemcheckMode
from ptxgym.evaluation.trusted.proofs import run_proofs
from ptxgym.evaluation.trusted.tools import ProofDirs, driver_argv, run_tool
from ptxgym.evaluation.trusted.verdicts import ProofResults, with_proofs
from ptxgym.records.arch import HOPPER
from ptxgym.records.feedback import Proof, Stage, Status, Verdict
from ptxgym.records.tasks import get_task

HERE = Path(__file__).resolve().parent
NCU_FIXTURES = HERE.parent / "fixtures" / "ncu"
SECRET = "s3cr3t-value-never-shown"
GEMM = get_task("Gemm-sm90a")
LANDLOCK = landlock_abi()[0] > 0


@pytest.fixture
def tools(monkeypatch, tmp_path):
    """Fake tools first on PATH, the hostile driver in place of the real one, a secret in the environment."""
    monkeypatch.setenv("PATH", f"{HERE / 'fake_tools'}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_DRIVER", str(HERE / "hostile_driver.py"))
    monkeypatch.setenv("FAKE_NCU_PROFILE", str(NCU_FIXTURES / "decoy_wgmma.csv"))  # what really ran: SIMT
    monkeypatch.setenv("PTXGYM_AUDIT_API_TOKEN", SECRET)
    monkeypatch.setenv("PYTHONPATH", str(HERE.parents[1]))
    dirs = ProofDirs.create(tmp_path)
    yield dirs
    dirs.remove()


def _profile(dirs: ProofDirs):
    return ncu.check_executed(
        HOPPER, Path("inputs.pt"), Path("cand.so"), "run", 0, 60, None, "k", task_flops=GEMM.flops, dirs=dirs
    )


def _passed() -> GpuVerdict:
    return GpuVerdict(status=Status.PASSED, stage=Stage.DONE, message="correct")


def test_driver_argv_sandboxes_the_driver(tmp_path):
    argv = driver_argv(Path("i.pt"), Path("c.so"), "run", 0, "memcheck", scratch=tmp_path, sandbox="strict")
    assert argv[-4:] == ["--scratch", str(tmp_path), "--sandbox", "strict"]
    assert "--scratch" not in driver_argv(Path("i.pt"), Path("c.so"), "run", 0, "profile")


def test_a_forged_ncu_csv_on_stdout_is_not_a_yes(tools):
    out = _profile(tools)
    assert "HGMMA.64x256x16" in out.tail  # the forgery was printed, and ignored
    assert out.target.executed is Verdict.NO and out.target.counts == {} and not out.failed
    assert out.target.work is Verdict.NO and out.target.mma_share == 0.0
    attempts = (tools.scratch / "attempts.txt").read_text()
    if LANDLOCK:
        assert "written" not in attempts and attempts.count("denied") == 2
    assert with_proofs(_passed(), ProofResults(target=out.target)).status is Status.PASSED  # SIMT: no credit


@pytest.mark.parametrize("mode", ["no-report", "garbled"])
def test_a_missing_or_unreadable_report_is_a_failed_proof(tools, monkeypatch, mode):
    monkeypatch.setenv("FAKE_TOOL_MODE", mode)
    out = _profile(tools)
    assert out.target.executed is Verdict.UNKNOWN and out.failed and out.profiled
    got = with_proofs(_passed(), ProofResults(target=out.target, profile_failed=out.failed))
    assert got.status is Status.PROOF_FAILED and got.evidence.target_executed == []


def test_the_census_flags_kernels_not_in_the_module(tools):
    own = ["_Z10gemm_tiledPK13__nv_bfloat16S1_PS_iii"]
    out = ncu.check_executed(
        HOPPER, Path("i.pt"), Path("c.so"), "run", 0, 60, None, "k", module_kernels=own, dirs=tools
    )
    assert out.census and out.foreign == ()
    out = ncu.check_executed(
        HOPPER, Path("i.pt"), Path("c.so"), "run", 0, 60, None, "k", module_kernels=["_Z4peekv"], dirs=tools
    )
    assert out.foreign and out.foreign[0].startswith("gemm_tiled(")


def test_a_forged_sanitizer_error_is_neither_a_memory_error_nor_a_leak(tools):
    info, _, tail = memcheck.run_memcheck(Path("i.pt"), Path("c.so"), "run", 0, 60, tools)
    assert "Invalid __global__ read" in tail  # printed on stdout, exit 86, but the tool's own report is clean
    assert info.ran and info.clean is None and "exit 86" in info.first_error
    assert SECRET not in tail and SECRET not in info.first_error
    assert "PTXGYM_AUDIT_API_TOKEN" not in (tools.scratch / "env.txt").read_text().split()
    got = with_proofs(_passed(), ProofResults(memcheck=info))
    assert got.status is Status.PROOF_FAILED and SECRET not in got.message


def test_memcheck_without_a_report_is_a_failed_proof_even_with_a_forged_one_attempted(tools, monkeypatch):
    monkeypatch.setenv("FAKE_TOOL_MODE", "no-report")
    info, _, _ = memcheck.run_memcheck(Path("i.pt"), Path("c.so"), "run", 0, 60, tools)
    if LANDLOCK:
        assert (tools.scratch / "attempts.txt").read_text() == "memcheck.txt: denied (13)"
        assert info.clean is None and "wrote no report" in info.first_error


def test_memcheck_clean_report_and_clean_exit_is_clean(tools, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    info, _, _ = memcheck.run_memcheck(Path("i.pt"), Path("c.so"), "run", 0, 60, tools)
    assert info.ran and info.clean is True


def test_memcheck_timeout_is_a_failed_proof(tools, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER_MODE", "hang")
    info, wall, _ = memcheck.run_memcheck(Path("i.pt"), Path("c.so"), "run", 0, 3, tools)
    assert info.clean is None and "timed out after 3 s" in info.first_error and wall < 30


def test_memcheck_reads_errors_from_its_report():
    report = (HERE.parent / "fixtures" / "memcheck" / "oob_read.txt").read_text()
    run = run_tool([sys.executable, "-c", "raise SystemExit(86)"], 30)
    info = memcheck.memcheck_info(report, run, 30)
    assert info.clean is False and info.first_error.startswith("Invalid __global__ read of size 2 bytes")


def test_run_tool_keeps_only_the_tail_of_a_flood():
    run = run_tool([sys.executable, "-c", "print('x' * (1 << 22)); print('END')"], 60)
    assert run.returncode == 0 and run.output.endswith("END\n") and len(run.output) <= 64 << 10


def _candidate(kernels: list[str]) -> BuiltCandidate:
    return BuiltCandidate(
        task_id=GEMM.id,
        so_path=Path("cand.so"),
        source_sha256="ab" * 32,
        artifact_sha256="cd" * 32,
        static_target=True,
        kernels=kernels,
    )


SETTINGS = EvalSettings(memcheck=MemcheckMode.ALWAYS, memcheck_timeout_s=60, profile_timeout_s=60)
OWN = ["_Z10gemm_tiledPK13__nv_bfloat16S1_PS_iii", "_Z14never_launchedmmPf"]


def test_run_proofs_end_to_end_honest(tools, monkeypatch, tmp_path):
    """memcheck clean, then the profile: a SIMT kernel with a decoy passes, proven, with no target credit."""
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    scratch = tmp_path / "evaluator"
    scratch.mkdir()
    proofs, walls = run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, SETTINGS, scratch, "on")
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.PASSED and set(walls) == {"memcheck", "execute"}
    assert got.memcheck.clean is True and got.target.executed is Verdict.NO and not got.target.credited
    assert got.evidence.memory_safety == [Proof.MEMCHECK] and got.evidence.kernel_census == [
        Proof.NCU_OFFLINE
    ]
    assert list(scratch.iterdir()) == []  # the proof directories are removed


def test_run_proofs_stops_at_a_failed_memcheck(tools, monkeypatch, tmp_path):
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    proofs, walls = run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, SETTINGS, tmp_path, "on")
    assert set(walls) == {"memcheck"} and proofs.target is None
    assert with_proofs(_passed(), proofs).status is Status.PROOF_FAILED


def test_run_proofs_finds_a_foreign_kernel(tools, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    proofs, _ = run_proofs(GEMM, _candidate(["_Z4peekv"]), Path("i.pt"), 0, SETTINGS, tmp_path, "on")
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.FOREIGN_KERNEL and "gemm_tiled(" in got.message
