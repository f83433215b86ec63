"""The proof tools read their reports from files the candidate cannot write, never from its output (no GPU).

The tools are stand-ins (fake_tools/ncu, fake_tools/compute-sanitizer: they run the driver and write a
report the way the real tools do); the driver is hostile_driver.py, which applies the real host sandbox
and then forges reports on its stdout and in the report directory. What runs for real: the evaluator's
command lines, ``driver_argv``'s sandbox arguments, ``tool_environ``, ``run_tool``, ``ProofDirs``, the
report reading and parsing, ``check_executed``/``run_memcheck`` and ``with_proofs``.
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from ptxgym.evaluation.sandboxed.sandbox import landlock_abi
from ptxgym.evaluation.trusted import memcheck, ncu
from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, GpuVerdict, MemcheckMode
from ptxgym.evaluation.trusted.proofs import run_proofs
from ptxgym.evaluation.trusted.tools import Gate, ProofDirs, driver_argv, read_fd, run_tool, sealed_file
from ptxgym.evaluation.trusted.verdicts import ProofResults, with_proofs
from ptxgym.records.arch import HOPPER
from ptxgym.records.feedback import Proof, Stage, Status, Verdict
from ptxgym.records.tasks import get_task

HERE = Path(__file__).resolve().parent
NCU_FIXTURES = HERE.parent / "fixtures" / "ncu"
FORGED_CSV = NCU_FIXTURES / "expert_gemm_derived.csv"
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
    assert "--exit-now" not in driver_argv(Path("i.pt"), Path("c.so"), "run", 0, "profile")
    assert driver_argv(Path("i.pt"), Path("c.so"), "run", 0, "profile", exit_now=True)[-1] == "--exit-now"


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
    proofs, walls = run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, SETTINGS, scratch, "on", True)
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.PASSED and set(walls) == {"memcheck", "execute"}
    assert got.memcheck.clean is True and got.target.executed is Verdict.NO and not got.target.credited
    assert got.evidence.memory_safety == [Proof.MEMCHECK] and got.evidence.kernel_census == [
        Proof.NCU_OFFLINE
    ]
    assert list(scratch.iterdir()) == []  # the proof directories are removed


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="no host C++ compiler")
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_the_drivers_sandbox_library_is_built_before_any_tool_runs(tools, monkeypatch, tmp_path, sandbox):
    """Built by the trusted side before the first tool starts (its gate's GPU phase builds nothing)."""
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    built_when_run: list[bool] = []

    def spy(real):
        def run(*args, **kwargs):
            built_when_run.append(any((tmp_path / "cache").glob("runner/broadcast-*/libptxgym-broadcast.so")))
            return real(*args, **kwargs)

        return run

    monkeypatch.setattr(memcheck, "run_tool", spy(memcheck.run_tool))
    monkeypatch.setattr(ncu, "run_tool", spy(ncu.run_tool))
    scratch = tmp_path / "evaluator"
    scratch.mkdir()
    run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, SETTINGS, scratch, sandbox, True)
    assert len(built_when_run) >= 2  # memcheck, then the profile (and its read-back)
    assert built_when_run == [sandbox == "on"] * len(built_when_run)


def test_run_proofs_stops_at_a_failed_memcheck(tools, monkeypatch, tmp_path):
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    proofs, walls = run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, SETTINGS, tmp_path, "on", True)
    assert set(walls) == {"memcheck"} and proofs.target is None
    assert with_proofs(_passed(), proofs).status is Status.PROOF_FAILED


def test_run_proofs_finds_a_foreign_kernel(tools, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    proofs, _ = run_proofs(GEMM, _candidate(["_Z4peekv"]), Path("i.pt"), 0, SETTINGS, tmp_path, "on", True)
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.FOREIGN_KERNEL and "gemm_tiled(" in got.message


# ------------------------------------------------------------------------ in-band counts as the proof

NO_MEMCHECK = SETTINGS.model_copy(update={"memcheck": MemcheckMode.NEVER})


def _in_band(mmas: int, crosscheck: bool):
    """The in-band proof of a counted call that executed ``mmas`` m64n256k16 wgmmas (0: SIMT only)."""
    from ptxgym.evaluation.protocol import SassRow
    from ptxgym.evaluation.trusted.proofs import InBand
    from ptxgym.evaluation.trusted.sass_join import in_band_info, in_band_target

    pcs = {OWN[0]: {0x0: "LDG.E", 0x10: "HGMMA.64x256x16.F32.BF16", 0x20: "FFMA"}}
    rows = [SassRow(function=OWN[0], pc=0x20, inst=10**6, threads=32 * 10**6)]
    if mmas:
        rows.append(SassRow(function=OWN[0], pc=0x10, inst=4 * mmas, threads=128 * mmas))
    record = in_band_target(rows, "", pcs, HOPPER, GEMM.flops)
    target, note = in_band_info(record, HOPPER)
    assert target is not None, note
    return InBand(target=target, crosscheck=crosscheck)


def test_in_band_counts_are_the_proof_without_a_second_run(tools, monkeypatch, tmp_path):
    """Not cross-checked: no tool runs at all (the hostile driver would hang), the verdict is in-band's."""
    monkeypatch.setenv("FAKE_DRIVER_MODE", "hang")
    in_band = _in_band(0, crosscheck=False)
    proofs, walls = run_proofs(
        GEMM, _candidate(OWN), Path("i.pt"), 0, NO_MEMCHECK, tmp_path, "on", False, in_band
    )
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.PASSED and walls["execute"] < 1.0
    assert got.target.executed is Verdict.NO and "in-band" in got.target.message
    assert got.evidence.target_executed == [Proof.CUPTI_IN_BAND] and got.memcheck is None


def test_a_cross_check_that_agrees_adds_nsight_compute(tools, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")  # its profile: the decoy's SIMT run, no wgmma executed
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    proofs, _ = run_proofs(
        GEMM, _candidate(OWN), Path("i.pt"), 0, NO_MEMCHECK, tmp_path, "on", False, _in_band(0, True)
    )
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.PASSED, got.message
    assert got.evidence.target_executed == [Proof.CUPTI_IN_BAND, Proof.NCU_OFFLINE]
    assert got.details["ncu_target"]["executed"] == "no"


def test_a_forged_in_band_count_is_caught_by_the_cross_check(tools, monkeypatch, tmp_path):
    """The worker claims every product on wgmma; Nsight Compute saw SIMT code: PROOF_FAILED, unpaid."""
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    forged = _in_band(GEMM.flops // (2 * 64 * 256 * 16), crosscheck=True)
    assert forged.target.credited
    proofs, _ = run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, NO_MEMCHECK, tmp_path, "on", False, forged)
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.PROOF_FAILED and "disagree with Nsight Compute" in got.message
    assert got.timing is None or got.timing.speedup is None


def test_without_in_band_counts_nsight_compute_stands_and_says_why(tools, monkeypatch, tmp_path):
    from ptxgym.evaluation.trusted.proofs import InBand

    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))
    why = InBand(note="in-band counts failed: libcupti could not be loaded")
    proofs, _ = run_proofs(GEMM, _candidate(OWN), Path("i.pt"), 0, NO_MEMCHECK, tmp_path, "on", False, why)
    got = with_proofs(_passed(), proofs)
    assert got.status is Status.PASSED and got.evidence.target_executed == [Proof.NCU_OFFLINE]
    assert "libcupti could not be loaded" in got.target.message


def test_a_target_kernel_launched_only_in_the_counted_call_earns_no_work_credit():
    """A decoy: the counted call runs a wgmma kernel the timed calls never launched.

    The census saw it once, in the counted call's own window, while a SIMT kernel did the timed calls' work.
    """
    from ptxgym.evaluation.protocol import SassRow
    from ptxgym.evaluation.trusted.sass_join import Census, in_band_info, in_band_target

    pcs = {"_Z4simtv": {0x0: "FFMA"}, "_Z4mmav": {0x10: "HGMMA.64x256x16.F32.BF16"}}
    mmas = int(GEMM.flops // (2 * 64 * 256 * 16))
    rows = [
        SassRow(function="_Z4simtv", pc=0x0, inst=10**6, threads=32 * 10**6),
        SassRow(function="_Z4mmav", pc=0x10, inst=4 * mmas, threads=128 * mmas),
    ]
    record = in_band_target(rows, "", pcs, HOPPER, GEMM.flops)
    assert record["target_functions"] == ["_Z4mmav"] and record["work"] == "yes"
    census = Census({"_Z4simtv": 150, "_Z4mmav": 1}, calls=150)
    decoy, _ = in_band_info(record, HOPPER, census)
    assert decoy is not None and decoy.executed is Verdict.YES and decoy.work is Verdict.NO
    assert not decoy.credited and "the timed calls did not all launch (_Z4mmav; 150" in decoy.message
    few, _ = in_band_info(record, HOPPER, Census({"_Z4simtv": 150, "_Z4mmav": 3}, calls=150))
    assert few is not None and not few.credited  # a reviewer's decoy: the counted call and two timed ones
    honest, _ = in_band_info(record, HOPPER, Census({"_Z4simtv": 150, "_Z4mmav": 151}, calls=150))
    assert honest is not None and honest.credited
    one_call, _ = in_band_info(record, HOPPER, Census({"_Z4simtv": 1, "_Z4mmav": 2}, calls=1))
    assert one_call is not None and one_call.credited  # one timed call and the counted call in a window
    unseen, _ = in_band_info(record, HOPPER, None)  # no census: the counts alone
    assert unseen is not None and unseen.credited
    said, _ = in_band_info(record, HOPPER, Census({"_Z4simtv": 150}, calls=150, error="buffer lost"))
    assert said is not None and said.work is Verdict.UNKNOWN and not said.credited  # the worker's word


def test_in_band_info_refuses_counts_it_cannot_place():
    from ptxgym.evaluation.protocol import SassRow
    from ptxgym.evaluation.trusted.sass_join import in_band_info, in_band_target

    pcs = {"k": {0x10: "HGMMA.64x256x16.F32.BF16"}}
    foreign = in_band_target([SassRow(function="other", pc=0x10, inst=4, threads=128)], "", pcs, HOPPER, 1.0)
    assert in_band_info(foreign, HOPPER) == (
        None,
        "1 counted row(s) are not instructions of the built module",
    )
    assert in_band_info(in_band_target([], "", pcs, HOPPER, 1.0), HOPPER)[0] is None
    assert in_band_info({"error": "x"}, HOPPER) == (None, "in-band counts failed: x")


def test_memcheck_runs_where_guard_pages_do_not():
    from ptxgym.evaluation.trusted.base import memcheck_due

    assert not memcheck_due(MemcheckMode.AUTO, first_correct=True, guard_pages=True)
    assert memcheck_due(MemcheckMode.AUTO, first_correct=True, guard_pages=False)
    assert not memcheck_due(MemcheckMode.AUTO, first_correct=False, guard_pages=False)
    assert memcheck_due(MemcheckMode.ALWAYS, first_correct=False, guard_pages=True)
    assert not memcheck_due(MemcheckMode.NEVER, first_correct=True, guard_pages=False)


def test_no_report_is_taken_after_a_failed_profile(tmp_path):
    """The report is taken while the GPU is held: not where its result would not be used."""
    report = tmp_path / "profile.ncu-rep"
    report.write_text("a report of a run that failed")
    for code, late in ((1, False), (None, True)):
        got = ncu._take(report, code, late)
        assert got.written and got.data is None and got.reason == "the profile failed"
    assert ncu._take(report, 0, False).data == report.read_bytes()
    assert not ncu._take(tmp_path / "none.ncu-rep", 0, False).written


def test_a_sealed_file_cannot_be_changed_by_any_way_in():
    fd = sealed_file(b"report bytes")
    try:
        assert read_fd(fd) == "report bytes"
        with pytest.raises(PermissionError):
            os.write(fd, b"forged")
        again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)  # as another process would reach it through /proc
        try:
            with pytest.raises(PermissionError):
                os.write(again, b"forged")
            with pytest.raises(PermissionError):
                os.ftruncate(again, 0)
        finally:
            os.close(again)
        assert read_fd(fd) == "report bytes" and read_fd(fd, limit=4) is None
    finally:
        os.close(fd)


class TamperingHold:
    """The evaluator's queue, and another candidate's process that forges the report when it lets go.

    Each time the hold ends, the expert's HGMMA rows are written where the profile left its report, as a
    partial jail's hole would allow.
    """

    def __init__(self, report: Path) -> None:
        self.report, self.holds, self.inside = report, 0, False

    @contextmanager
    def hold(self):
        self.holds += 1
        self.inside = True
        try:
            yield
        finally:
            self.inside = False
            if self.report.parent.is_dir():
                self.report.write_text(FORGED_CSV.read_text())


def _gated(dirs: ProofDirs, holds: TamperingHold) -> tuple[ncu.ProfileOutcome, Gate]:
    gate = Gate(holds.hold)
    try:
        out = ncu.check_executed(
            HOPPER,
            Path("i.pt"),
            Path("c.so"),
            "run",
            0,
            60,
            None,
            "k",
            task_flops=GEMM.flops,
            dirs=dirs,
            gate=gate,
        )
    finally:
        gate.close()
    return out, gate


def test_the_report_is_converted_outside_the_hold_from_what_was_taken_under_it(tools, monkeypatch):
    """The slow conversion (``ncu --import``) holds no GPU, and a report forged after the hold is not read."""
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("FAKE_IMPORT_SLEEP", "0.4")
    holds = TamperingHold(tools.report / "profile.ncu-rep")
    out, gate = _gated(tools, holds)
    assert holds.holds == 1 and "HGMMA" in holds.report.read_text()  # the forgery was written, and ignored
    assert out.target.executed is Verdict.NO and not out.failed and out.profiled  # the decoy's SIMT profile
    assert gate.outside_s >= 0.4 and gate.read_s < 0.4
    assert gate.record()["proof_convert"] == round(gate.outside_s, 4)


def test_where_the_tool_will_not_read_from_memory_it_converts_under_the_hold_again(tools, monkeypatch):
    """The fallback holds the GPU again and converts the bytes taken under the first hold, not the file."""
    monkeypatch.setenv("FAKE_DRIVER_MODE", "honest")
    monkeypatch.setenv("FAKE_TOOL_MODE", "no-fd-import")
    monkeypatch.setenv("FAKE_IMPORT_SLEEP", "0.4")
    holds = TamperingHold(tools.report / "profile.ncu-rep")
    out, gate = _gated(tools, holds)
    assert holds.holds == 2
    assert out.target.executed is Verdict.NO and not out.failed and out.profiled
    assert gate.read_s >= 0.4 and gate.outside_s >= 0.4  # the refused conversion, then the held one


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_tool_started_in_a_pinned_gpu_turn_runs_on_every_core():
    """A proof tool run inside a turn (``gated_proofs`` off) must not inherit the turn's cores alone."""
    from ptxgym.evaluation.trusted.gpu_queue import GpuQueue

    usable = sorted(os.sched_getaffinity(0))
    script = "import os, time; time.sleep(0.3); print(sorted(os.sched_getaffinity(0)))"
    with GpuQueue(cpus=(usable[-1],)).turn():
        run = run_tool([sys.executable, "-c", script], 30)
    assert run.returncode == 0 and run.output.strip() == str(usable), run.output


@pytest.mark.parametrize("exit_now", [True, False])
def test_the_cross_checks_driver_ends_as_the_settings_say(tmp_path, monkeypatch, exit_now):
    """``EvalSettings.ncu_exit_now`` reaches the profiled driver's command line (``EXIT_NOW_MODES``)."""
    from ptxgym.evaluation.trusted import proofs

    seen: list[list[str]] = []

    def check(*args, **kwargs):
        seen.append(driver_argv(args[1], args[2], args[3], args[4], "profile", exit_now=kwargs["exit_now"]))
        return ncu.ProfileOutcome(ncu._info(HOPPER, Verdict.UNKNOWN, {}, "spy"), failed="spy")

    monkeypatch.setattr(ncu, "check_executed", check)
    cand = BuiltCandidate(
        task_id=GEMM.id, so_path="c.so", source_sha256="0", artifact_sha256="0", static_target=True
    )
    settings = EvalSettings(ncu_exit_now=exit_now)
    proofs._ncu(proofs._Run(GEMM, cand, tmp_path / "i.pt", 0, settings, tmp_path, "on"))
    assert len(seen) == 1 and ("--exit-now" in seen[0]) is exit_now
    assert EvalSettings().ncu_exit_now  # the default since s58
