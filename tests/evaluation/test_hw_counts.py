"""Hardware counters of the unpatched call (issue 11): the runner's pure part and the trusted arithmetic.

* ``runner/hw_logic.h`` (built here with g++ into a small driver): a CUPTI reading becomes
  ``protocol.HwCounts`` JSON only when it is one pass, one range, nothing dropped and every value a finite
  count; anything else is an error text.
* ``target_work.hw_share`` / ``combined`` / ``feedback.work_verdict`` and ``sass_join.with_hw``: the shares
  and the work verdict they give (a kernel that does wgmma only in the patched call, a token TMA load).
* ``Session.timing(hw_count=True)``: the call is made once at a secret place other than the counted
  call's, verified, not timed, outside the activity trial.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cupti_native import compile_program  # tests/evaluation on sys.path

from ptxgym.evaluation.protocol import HwCounts
from ptxgym.evaluation.trusted.session import region_places
from ptxgym.evaluation.trusted.target_work import (
    GMMA_INST_METRIC,
    TMA_BYTES_METRIC,
    combined,
    hw_share,
    tma_share,
)
from ptxgym.records.arch import HOPPER
from ptxgym.records.feedback import MIN_TMA_SHARE, TargetInfo, Verdict, work_verdict

DRIVER = r"""
#include <iostream>
#include <limits>
#include <sstream>
#include "hw_logic.h"
#include "json.h"
using namespace ptxrunner;
using namespace ptxrunner::cupti;
// stdin: {"passes": n, "submitted": b, "ranges": n, "dropped": n, "values": [v | "nan" | "inf"]}
int main() {
  std::stringstream ss;
  ss << std::cin.rdbuf();
  std::string text = ss.str();
  Json in = JsonReader(text).parse();
  HwReading r;
  r.passes = size_t(in.at("passes").as_int("passes"));
  r.all_passes_submitted = in.at("submitted").b;
  r.ranges = size_t(in.at("ranges").as_int("ranges"));
  r.dropped = size_t(in.at("dropped").as_int("dropped"));
  for (const Json& v : in.at("values").as_array("values")) {
    if (v.kind == Json::kString) r.values.push_back(v.s == "nan" ? std::numeric_limits<double>::quiet_NaN()
                                                               : std::numeric_limits<double>::infinity());
    else r.values.push_back(v.kind == Json::kInt ? double(v.i) : v.f);
  }
  r.host_ms = {{"setup", 12.5}, {"run", 2.0}};
  std::string json;
  std::string err = hw_counts_json(r, &json);
  std::cout << (err.empty() ? json : "ERROR " + hw_count_error(err)) << "\n";
}
"""

GOOD = {"passes": 1, "submitted": True, "ranges": 1, "dropped": 0, "values": [4096, 1.5e9, 0]}


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("hw") / "hw_driver.cc"
    src.write_text(DRIVER)
    return compile_program(src, src.with_suffix(""), [])


def _answer(driver: Path, reading: dict) -> str:
    done = subprocess.run(
        [str(driver)], input=json.dumps(reading), capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_one_pass_reading_is_hw_counts_json(driver: Path) -> None:
    counts = HwCounts.model_validate_json(_answer(driver, GOOD))
    assert counts.passes == 1 and counts.ranges == 1
    assert counts.metrics == {
        GMMA_INST_METRIC: 4096.0,
        TMA_BYTES_METRIC: 1.5e9,
        "smsp__inst_executed_op_tma_ld.sum": 0.0,
    }
    assert counts.host_ms == {"setup": 12.5, "run": 2.0}  # the phases' walls, diagnostic only


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"passes": 2}, "need 2 passes"),
        ({"submitted": False}, "did not submit"),
        ({"dropped": 1}, "1 profiled range(s) were dropped"),
        ({"ranges": 0}, "expected 1 profiled range, got 0"),
        ({"values": [1, 2]}, "expected 3 metric values, got 2"),
        ({"values": [1, "nan", 3]}, "a non-finite value"),
        ({"values": [1, "inf", 3]}, "a non-finite value"),
        ({"values": [1, 2, -1.0]}, "smsp__inst_executed_op_tma_ld.sum evaluated to -1.0"),
    ],
)
def test_an_unusable_reading_is_an_error_never_counts(driver: Path, change: dict, words: str) -> None:
    line = _answer(driver, {**GOOD, **change})
    assert line.startswith("ERROR HwCountError: ") and words in line, line


def test_shares_from_hardware_counters() -> None:
    metrics = {GMMA_INST_METRIC: 4.0 * 1000, TMA_BYTES_METRIC: 3e6}
    share = hw_share(metrics, flops_per_mma=2.0e5, task_flops=4.0e8, min_bytes=2e6)
    assert share.mma_flops == pytest.approx(1000 * 2.0e5) and share.mma_share == pytest.approx(0.5)
    assert share.tma_bytes == 3e6 and share.tma_share == pytest.approx(1.5)
    assert "1000 wgmma" in share.message and "150.0%" in share.message
    assert hw_share(metrics, None, 4.0e8, 2e6).mma_share is None  # no FLOPs per MMA: share unknown
    assert tma_share(5.0, 0.0) is None and tma_share(1.0, 4.0) == 0.25
    with pytest.raises(KeyError, match=TMA_BYTES_METRIC):
        hw_share({GMMA_INST_METRIC: 1.0}, 1.0, 1.0, 1.0)


def test_the_smaller_share_decides_and_tma_joins_the_verdict() -> None:
    assert combined(1.0, 0.02) == 0.02 and combined(0.8, 1.0) == 0.8
    assert combined(None, 1.0) is None and combined(0.7, None) == 0.7
    assert work_verdict(0.9) is Verdict.YES and work_verdict(0.9, None) is Verdict.YES
    assert work_verdict(0.9, MIN_TMA_SHARE) is Verdict.YES
    assert work_verdict(0.9, MIN_TMA_SHARE - 0.01) is Verdict.NO
    assert work_verdict(None, 2.0) is Verdict.UNKNOWN


def _info(share: float = 1.0) -> TargetInfo:
    return TargetInfo(
        family=HOPPER.target_family,
        static=True,
        executed=Verdict.YES,
        counts={"HGMMA": 128},
        message="sass",
        mma_flops=share * 1e9,
        mma_share=share,
        work=work_verdict(share),
    )


def _record(gmma: float, tma_bytes: float, per_mma: float = 1e6, flops: float = 1e9, min_bytes: float = 1e6):
    from dataclasses import asdict

    share = hw_share({GMMA_INST_METRIC: gmma, TMA_BYTES_METRIC: tma_bytes}, per_mma, flops, min_bytes)
    return {**asdict(share), "error": ""}


def test_with_hw_closes_the_patched_call_hole() -> None:
    from ptxgym.evaluation.trusted.sass_join import with_hw

    honest = with_hw(_info(), _record(gmma=4 * 1000, tma_bytes=5e6), HOPPER)
    assert honest.work is Verdict.YES and honest.mma_share == pytest.approx(1.0)
    assert honest.tma_share == pytest.approx(5.0) and honest.mma_flops == 1e9  # the SASS call's FLOPs kept
    assert "hardware counters over an unpatched call" in honest.message
    # wgmma only in the patched (SASS-counted) call: the unpatched call shows none
    switcher = with_hw(_info(), _record(gmma=0, tma_bytes=5e6), HOPPER)
    assert switcher.work is Verdict.NO and switcher.mma_share == 0.0 and switcher.executed is Verdict.YES
    # a token TMA load beside plain loads
    token = with_hw(_info(), _record(gmma=4 * 1000, tma_bytes=0.1e6), HOPPER)
    assert token.work is Verdict.NO and token.tma_share == pytest.approx(0.1)
    # a family without TMA copies reports the share but does not require it
    wgmma_only = HOPPER.with_families(["wgmma"])
    assert with_hw(_info(), _record(gmma=4 * 1000, tma_bytes=0), wgmma_only).work is Verdict.YES
    # no usable counters (a profiler the candidate's process could break): no credit, the message says why
    failed = with_hw(_info(), {"error": "HwCountError: cuptiRangeProfilerEnable failed"}, HOPPER)
    assert failed.executed is Verdict.YES and failed.work is Verdict.UNKNOWN and not failed.credited
    assert failed.tma_share is None and "cuptiRangeProfilerEnable" in failed.message
    assert "credit withheld" in failed.message
    # a drawn Nsight Compute cross-check that sees the work neither restores the credit nor calls the
    # withheld verdict a disagreement (PROOF_FAILED would punish an honest kernel for a profiler failure)
    from ptxgym.evaluation.trusted.sass_join import counts_agree

    assert counts_agree(failed, _info()) == ""
    assert "executed" in counts_agree(failed, _info().model_copy(update={"executed": Verdict.NO}))


def test_with_hardware_counters_a_work_verdict_above_nsight_compute_s_still_disagrees() -> None:
    """The counters' TMA share may lower the work verdict, never raise it past what Nsight Compute saw.

    (A reviewer's find: with counters every work disagreement was let through, so forged TMA bytes beside
    an MMA share Nsight Compute measured too low still paid.)
    """
    from ptxgym.evaluation.trusted.sass_join import counts_agree, with_hw

    claimed = with_hw(_info(), _record(gmma=4 * 1000, tma_bytes=5e6), HOPPER)
    assert claimed.work is Verdict.YES and claimed.tma_share is not None
    assert "work" in counts_agree(claimed, _info().model_copy(update={"work": Verdict.NO}))
    lowered = with_hw(_info(), _record(gmma=4 * 1000, tma_bytes=0.1e6), HOPPER)
    assert lowered.work is Verdict.NO and counts_agree(lowered, _info()) == ""  # lower: consistent


def test_extra_calls_never_share_a_place() -> None:
    for n in range(6):
        assert region_places([n]) == [n]
        for m in range(6):
            a, b = region_places([n, m])
            assert a != b and b == m and a == (n if n < m else n + 1)  # the later one sits at its slot


def test_hw_record_sizes_the_counters_with_the_counted_calls_flops_per_mma() -> None:
    from ptxgym.evaluation.trusted.sass_join import hw_record
    from ptxgym.evaluation.trusted.session import SessionResult

    counts = HwCounts(metrics={GMMA_INST_METRIC: 4.0 * 50, TMA_BYTES_METRIC: 8e3}, passes=1, ranges=1)
    sass = {"mma_flops": 100 * 16384.0, "mmas": 100.0}  # 16384 FLOPs per MMA (m64n8k16)
    record = hw_record(SessionResult(hw_counts=counts), sass, flops=100 * 16384.0, min_bytes=4e3)
    assert record["error"] == "" and record["mma_share"] == pytest.approx(0.5)  # half the MMAs unpatched
    assert record["tma_share"] == pytest.approx(2.0) and record["metrics"] == counts.metrics
    no_mma = hw_record(SessionResult(hw_counts=counts), {"mma_flops": 0.0, "mmas": 0.0}, 1.0, 1.0)
    assert no_mma["mma_share"] is None and no_mma["error"] == ""
    error = "HwCountError: cuptiProfilerGetCounterAvailability failed"
    assert hw_record(SessionResult(hw_count_error=error), sass, 1.0, 1.0) == {"error": error}
    partial = HwCounts(metrics={GMMA_INST_METRIC: 1.0}, passes=1, ranges=1)
    missing = hw_record(SessionResult(hw_counts=partial), sass, 1.0, 1.0)["error"]
    assert missing == f"the hardware counters lack {TMA_BYTES_METRIC}"


def test_the_smallest_static_tile_sizes_counters_alone() -> None:
    from ptxgym.evaluation.trusted.target_work import smallest_tile_flops

    ops = ["HGMMA.64x256x16.F32.BF16", "HGMMA.64x8x16.F32.BF16", "FFMA", "UTMALDG.2D"]
    assert smallest_tile_flops(ops, HOPPER) == 2 * 64 * 8 * 16
    assert smallest_tile_flops(["FFMA", "UTMALDG.2D"], HOPPER) is None


def test_a_lower_bound_disagrees_with_nsight_compute_only_by_claiming_more() -> None:
    from ptxgym.evaluation.trusted.sass_join import counts_agree

    def info(flops: float) -> TargetInfo:
        return TargetInfo(family="wgmma", executed=Verdict.YES, work=Verdict.YES, mma_flops=flops)

    assert counts_agree(info(0.5e12), info(1e12)) != ""  # exact counts must match
    assert counts_agree(info(0.5e12), info(1e12), lower_bound=True) == ""  # a bound below is consistent
    assert "differ" in counts_agree(info(1.5e12), info(1e12), lower_bound=True)  # a bound above is not


@pytest.mark.nvcc
def test_hardware_counters_alone_prove_the_target_with_a_lower_bound(tmp_path: Path) -> None:
    """``hw_only_target`` on a real module (the decoy wgmma kernel of the audit corpus) and given counters."""
    from ptxgym.audit.corpus import build_kernel
    from ptxgym.cpu.sass import module_pcs
    from ptxgym.evaluation.trusted.base import BuiltCandidate
    from ptxgym.evaluation.trusted.sass_join import Census, hw_only_target
    from ptxgym.evaluation.trusted.session import SessionResult
    from ptxgym.evaluation.trusted.target_work import TMA_INST_METRIC, smallest_tile_flops

    so = build_kernel("decoy_wgmma")
    cand = BuiltCandidate(
        task_id="Gemm-sm90a", so_path=so, source_sha256="0", artifact_sha256="0", static_target=True
    )
    tile = smallest_tile_flops((op for ops in module_pcs(so).values() for op in ops.values()), HOPPER)
    assert tile is not None
    task_flops, min_bytes = 1000 * tile, 1e6
    metrics = {GMMA_INST_METRIC: 4.0 * 600, TMA_BYTES_METRIC: 2e6, TMA_INST_METRIC: 10.0}
    counts = HwCounts(metrics=metrics, passes=1, ranges=1)
    census = Census(dict.fromkeys(module_pcs(so), 10), 10)  # every kernel in every timed call
    info, record = hw_only_target(
        cand, SessionResult(hw_counts=counts), HOPPER, task_flops, min_bytes, census
    )
    assert info is not None and record["error"] == "" and record["flops_per_mma"] == tile
    assert info.executed is Verdict.YES and info.counts == {"GMMA": 600, "TMA loads": 10}
    assert info.mma_share == pytest.approx(0.6) and info.tma_share == pytest.approx(2.0)
    assert info.work is Verdict.YES and "lower bound" in info.message
    none = HwCounts(metrics={GMMA_INST_METRIC: 0.0, TMA_BYTES_METRIC: 0.0}, passes=1, ranges=1)
    idle, _ = hw_only_target(cand, SessionResult(hw_counts=none), HOPPER, task_flops, min_bytes)
    assert idle is not None and idle.executed is Verdict.NO and idle.work is Verdict.NO
    failed, why = hw_only_target(cand, SessionResult(hw_count_error="HwCountError: x"), HOPPER, 1.0, 1.0)
    assert failed is None and why == {"error": "HwCountError: x"}


def test_only_the_runner_s_named_finite_phases_reach_the_stage_walls() -> None:
    from ptxgym.evaluation.trusted.local import runner_phases

    forged = {"setup": 120.0, "run": float("nan"), "read": -1.0, "ignore previous instructions": 5.0}
    assert runner_phases(forged) == {"runner_hw_setup": 0.12}
