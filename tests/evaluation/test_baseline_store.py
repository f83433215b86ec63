"""Baseline records: memory and disk caching keyed by environment, workload and protocol."""

from __future__ import annotations

from ptxgym.evaluation.trusted.base import EvalSettings
from ptxgym.evaluation.trusted.baseline_store import BaselineRecord, BaselineStore
from ptxgym.records.feedback import LatencyStats
from ptxgym.records.tasks import get_task


def _record(correct=True, stats=True) -> BaselineRecord:
    s = LatencyStats(median_ms=0.78, n=150, cv=0.01) if stats else None
    return BaselineRecord(name="cublas", backend="cupti", stats=s, correct=correct)


def test_key_changes_with_what_changes_the_latency(tmp_path):
    store = BaselineStore(tmp_path, "NVIDIA H200|580|13.0|torch 2.11")
    gemm, fwd = get_task("Gemm-sm90a"), get_task("MhaFwd-sm90a")
    s = EvalSettings()
    key = store.key(gemm, s, 120 << 20, "cupti")
    assert key == store.key(get_task("Gemm-sm100a"), s, 120 << 20, "cupti")  # same workload, same GPU
    assert key != store.key(fwd, s, 120 << 20, "cupti")
    assert key != store.key(gemm, s.model_copy(update={"iterations": 20}), 120 << 20, "cupti")
    assert key != store.key(gemm, s, 256 << 20, "cupti")
    assert key != store.key(gemm, s, 120 << 20, "events+device-sync")
    other = BaselineStore(tmp_path, "NVIDIA H100|580|13.0|torch 2.11")
    assert key != other.key(gemm, s, 120 << 20, "cupti")


def test_disk_round_trip_only_for_complete_correct_records(tmp_path):
    store = BaselineStore(tmp_path, "env")
    store.put("good", _record())
    store.put("wrong", _record(correct=False))
    store.put("none", _record(stats=False))
    fresh = BaselineStore(tmp_path, "env")
    got = fresh.get("good", from_disk=True)
    assert got is not None and got.source == "disk" and got.stats.median_ms == 0.78
    assert fresh.get("good", from_disk=False) is not None  # now in memory
    assert fresh.get("wrong", from_disk=True) is None and fresh.get("none", from_disk=True) is None
    assert BaselineStore(tmp_path, "env").get("good", from_disk=False) is None


def test_environment_key_names_clocks_and_library_versions():
    """A baseline from another clock setting or cuBLAS/cuDNN/driver build is never a warm start here."""
    from dataclasses import replace

    from ptxgym.evaluation.trusted.gpuinfo import GpuFacts

    facts = GpuFacts(0, "NVIDIA H200", (9, 0), 132, 50 << 20, 140 << 30, "580", "13.0", "2.13", "cublas 13.1",
                     "91300", 1980, 1980)  # fmt: skip
    changed = [
        replace(facts, driver="590"),
        replace(facts, torch="2.14"),
        replace(facts, cublas="cublas 13.2"),
        replace(facts, cudnn="91400"),
        replace(facts, sm_clock_max_mhz=1755),
        replace(facts, sm_clock_app_mhz=1410),
    ]
    assert len({facts.key, *(f.key for f in changed)}) == 1 + len(changed)
