"""Task records: the shipped suite, record checks, dataset folders as task sources.

The shipped suite validates, counts and splits as documented; records are checked against the schema and
the data; any FlashInfer-Trace folder is a task source; adding a task is adding JSON.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from ptxgym.records.arch import BLACKWELL, HOPPER
from ptxgym.records.errors import PtxgymError, SchemaError, UnknownTaskError
from ptxgym.records.task_record import BASELINES, Baseline, TaskRecord
from ptxgym.records.tasks import (
    HeldOutTaskError,
    catalog,
    catalog_ids,
    get_task,
    load_dataset,
    require_not_test,
    solution_definition,
    tasks_in_split,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace_dataset"
DATA = Path(__file__).parents[2] / "envs" / "data"

# Tasks per family in the shipped catalog (each on sm_90a and sm_100a).
FAMILIES = {
    "gemm": 2 * (1 + 15),
    "mha_fwd": 2 * (2 + 4),
    "mha_bwd": 2 * (2 + 4),
    "gqa_ragged_prefill": 2,
    "gqa_paged_prefill": 2,
    "gqa_paged_decode": 2,
}


def test_families_and_architectures() -> None:
    tasks = catalog().values()
    assert Counter(t.family for t in tasks) == FAMILIES
    assert Counter(t.arch for t in tasks) == {"sm_90a": 31, "sm_100a": 31}
    assert catalog_ids() == list(catalog())  # registration reads ids from the records alone


def test_gemm_suite_counts_and_shapes() -> None:
    gemms = [t for t in catalog().values() if t.family == "gemm" and not t.primary]
    for t in gemms:
        ms = sorted(w.axes["M"] for w in t.family_workloads)
        assert ms == [128, 400, 1024, 3000, 8192] and t.workload.axes["M"] == 8192
        for w in t.family_workloads:
            a = t.definition.axis_values(w)
            assert t.with_workload(w.uuid).flops == 2.0 * a["M"] * a["N"] * a["K"]
        assert t.baseline.name == "cublas" and t.arch_spec in (HOPPER, BLACKWELL)
    # the suite's 7168x5120 task keeps the primary's M=8192 workload (same uuid) as its default
    assert get_task("Gemm7168x5120-sm90a").workload == get_task("Gemm-sm90a").workload


def test_mha_suite() -> None:
    for d in (64, 96):
        for kind in ("Fwd", "Bwd"):
            for causal in ("", "Causal"):
                _check_mha(get_task(f"Mha{kind}D{d}{causal}-sm90a"), get_task(f"Mha{kind}{causal}-sm90a"), d)


def _check_mha(t, primary, d: int) -> None:
    assert t.definition.axes["D"].value == d
    assert sorted(w.axes["S"] for w in t.family_workloads) == [1024, 2048, 4096, 8192]
    assert t.baseline == primary.baseline and t.tolerance == primary.tolerance
    assert t.flops == primary.flops * d / 128  # same S=4096 default, same FLOP rule
    assert (t.split, t.held_out) == (("train", False) if d == 64 else ("test", True))


def test_gqa_tasks_time_flashinfer_else_the_torch_reference_and_count_bytes_read() -> None:
    decode = get_task("GqaPagedDecode-sm90a")
    assert decode.baseline == BASELINES["flashinfer_gqa_paged_decode"]
    assert decode.baseline.requires == "flashinfer" and decode.baseline.fallback == "torch_reference"
    assert "PyTorch reference" in BASELINES[decode.baseline.fallback].library
    for name, kind in (("GqaRaggedPrefill", "ragged_prefill"), ("GqaPagedPrefill", "paged_prefill")):
        for arch in ("sm90a", "sm100a"):
            assert get_task(f"{name}-{arch}").baseline.function == f"gqa_{kind}_flashinfer"
    assert decode.arch_spec.target_opcodes == ("UTMALDG", "UTMASTG", "UTMAREDG")  # TMA only
    assert decode.workload.axes == {
        "batch_size": 15,
        "num_pages": 42784,
        "len_indptr": 16,
        "num_kv_indices": 9625,
    }
    # bytes: the referenced pages of K and V, not the whole cache
    kv_read = 2 * 9625 * 1 * 8 * 128 * 2
    assert kv_read < decode.min_bytes < kv_read * 1.05
    ragged = get_task("GqaRaggedPrefill-sm100a")
    assert ragged.workload.axes["total_q"] == 16294 and ragged.workload.axes["len_indptr"] == 34
    prefill = get_task("GqaPagedPrefill-sm90a")
    assert prefill.workload.axes["total_q"] == 892 and prefill.workload.axes["num_pages"] == 43676
    assert prefill.flops == 4 * 24 * 128 * (892 * 893 / 2)


def test_splits_and_held_out() -> None:
    test_ids = {t.id for t in tasks_in_split("test")}
    assert "MhaFwdD96-sm90a" in test_ids and "GqaPagedDecode-sm100a" in test_ids
    assert "Gemm5120x2048-sm90a" in test_ids and "Gemm-sm90a" not in test_ids
    assert {t.split for t in catalog().values()} == {"train", "validation", "test"}
    trained = {t.definition.name for t in tasks_in_split("train")}
    for t in catalog().values():
        if t.held_out:
            assert t.split != "train" and t.definition.name not in trained
    with pytest.raises(ValueError, match="unknown split"):
        tasks_in_split("dev")


def test_require_not_test() -> None:
    require_not_test(["Gemm-sm90a", get_task("Gemm4096x5376-sm90a")])  # train and validation pass
    with pytest.raises(HeldOutTaskError, match="MhaBwdD96-sm100a is in the test split"):
        require_not_test(["Gemm-sm90a", "MhaBwdD96-sm100a"], purpose="SFT data")


# ------------------------------------------------------------------------------------ workloads


def test_with_workload_by_uuid_index_and_axes() -> None:
    t = get_task("Gemm4096x4096-sm90a")
    small = t.with_workload({"M": 128})
    assert small.workload.axes == {"M": 128} and small.flops == 2.0 * 128 * 4096 * 4096
    assert small.min_bytes == 2 * (128 * 4096 + 4096 * 4096 + 128 * 4096)
    assert t.with_workload(small.workload.uuid) == small
    assert t.with_workload(1) == small  # index into the family, in file order
    assert t.with_workload(t.workload.uuid) is t
    assert small.id == t.id  # the task is the same; only the workload played changes
    with pytest.raises(ValueError, match="no workload of Gemm4096x4096-sm90a with axes"):
        t.with_workload({"M": 5})
    with pytest.raises(ValueError, match="out of range"):
        t.with_workload(9)
    with pytest.raises(ValueError, match="has no workload 'nope'"):
        t.with_workload("nope")


# ------------------------------------------------------------------------------------ records


def _record(**kw) -> dict:
    return {"name": "X", "definition": "gemm_n4096_k4096", "family": "gemm", "baseline": "cublas", **kw}


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"baseline": "flashattention9"}, "unknown baseline"),
        ({"flops": "2 * M * N * K; import os"}, "does not parse"),
        ({"bytes": "open('x')"}, "calls open"),
        ({"targets": {"sm_80": ["wgmma"]}}, "unknown architecture"),
        ({"targets": {"sm_90a": ["tcgen05"]}}, "unknown or empty"),
        ({"targets": {"sm_100a": []}}, "unknown or empty"),
        ({"split": "train", "held_out": True}, "cannot be in the train split"),
        ({"split": "holdout"}, "split"),
        ({"workloads": ["a"], "default_workload": "b"}, "not in workloads"),
        ({"name": "1bad"}, "name"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_records_are_rejected(changes: dict, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        TaskRecord.model_validate(_record(**changes))


def _copy_fixture(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(FIXTURE, root)
    return root


def _write_records(root: Path, records: list[dict]) -> None:
    (root / "tasks").mkdir(exist_ok=True)
    (root / "tasks" / "mine.json").write_text(json.dumps({"tasks": records}))


def test_adding_a_task_is_adding_json(tmp_path: Path) -> None:
    root = _copy_fixture(tmp_path)
    _write_records(
        root,
        [
            {
                "name": "TinyGemm",
                "definition": "gemm_n256_k512",
                "family": "gemm",
                "baseline": "cublas",
                "flops": "2 * M * N * K",
                "workloads": ["fixture-m256", "fixture-m1000"],
                "default_workload": "fixture-m1000",
                "targets": {"sm_90a": ["tma"]},
                "split": "validation",
            }
        ],
    )
    tasks = load_dataset(root)
    assert list(tasks) == ["TinyGemm@sm_90a"]
    t = tasks["TinyGemm@sm_90a"]
    assert t.workload.axes == {"M": 1000} and t.flops == 2.0 * 1000 * 256 * 512
    assert [w.uuid for w in t.family_workloads] == ["fixture-m256", "fixture-m1000"]
    assert t.arch_spec.target_family.startswith("TMA") and t.split == "validation"
    assert t.env_id == "ptxgym/Trace-v0" and t.env_kwargs == {"dataset": str(root.resolve()), "task": t.id}


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        ({"definition": "gemm_nope"}, "no definition 'gemm_nope'"),
        ({"workloads": ["fixture-m7", "ghost"]}, "workloads \\['ghost'\\] are not workloads"),
        ({"flops": "2 * M * N * Q"}, "unknown name 'Q'"),
        ({"flops": "M - 100"}, "finite and >= 0"),  # fails on the M=7 workload, and says which
    ],
)
def test_dataset_records_are_checked_against_the_data(tmp_path: Path, record: dict, needle: str) -> None:
    root = _copy_fixture(tmp_path)
    base = {"name": "T", "definition": "gemm_n256_k512", "family": "gemm", "baseline": "cublas"}
    _write_records(root, [{**base, **record}])
    with pytest.raises(SchemaError, match=needle):
        load_dataset(root)


def test_held_out_task_may_not_share_a_trained_definition(tmp_path: Path) -> None:
    root = _copy_fixture(tmp_path)
    base = {"definition": "gemm_n256_k512", "family": "gemm", "baseline": "cublas"}
    _write_records(root, [{"name": "A", **base}, {"name": "B", **base, "split": "test", "held_out": True}])
    with pytest.raises(SchemaError, match="held out but a train-split task uses its definition"):
        load_dataset(root)


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no dataset folder"):
        load_dataset(tmp_path / "missing")
    with pytest.raises(SchemaError, match="no definitions/ folder"):
        load_dataset(tmp_path)


# ------------------------------------------------------------------------------------ datasets


def test_dataset_folder_without_records() -> None:
    tasks = load_dataset(FIXTURE)
    assert list(tasks) == ["gemm_n256_k512@sm_90a", "gemm_n256_k512@sm_100a"]
    t = tasks["gemm_n256_k512@sm_90a"]
    assert t.baseline.name == "cublas"  # a plain fp16 GEMM: cuBLAS applies
    assert t.flop_formula == "2 * M * N * K" and t.workload.axes == {"M": 7}
    assert [w.axes["M"] for w in t.family_workloads] == [7, 256, 1000]
    assert t.multi_file_prompt and t.split == "train" and t.source == str(FIXTURE.resolve())


def test_dataset_lookup_forms() -> None:
    by_dataset = get_task("gemm_n256_k512@sm90a", dataset=FIXTURE)
    assert by_dataset.id == "gemm_n256_k512@sm_90a"
    assert get_task("gemm_n256_k512@sm_90a") == by_dataset  # remembered for later lookups by id
    with pytest.raises(UnknownTaskError, match="no task 'Gemm-sm90a' in dataset"):
        get_task("Gemm-sm90a", dataset=FIXTURE)
    assert get_task("gemm_n4096_k4096@sm_90a").id == "Gemm4096x4096-sm90a"  # catalog definitions too
    with pytest.raises(PtxgymError, match="unknown architecture"):
        get_task("gemm_n256_k512@sm_80", dataset=FIXTURE)


def test_non_gemm_dataset_definitions_time_the_torch_reference(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    for sub in ("definitions", "workloads"):
        (root / sub).mkdir(parents=True)
    for name in ("mha_with_lse_d128", "gqa_paged_decode_h24_kv8_d128_ps1"):
        src = next(DATA.glob(f"definitions/*/{name}.json"))
        shutil.copy(src, root / "definitions" / src.name)
        wl = next(DATA.glob(f"workloads/*/{name}.jsonl"))
        shutil.copy(wl, root / "workloads" / wl.name)
    tasks = load_dataset(root)
    assert {t.baseline.name for t in tasks.values()} == {"torch_reference"}
    assert {t.flops for t in tasks.values()} == {0.0}  # no record, no FLOP formula: unknown
    decode = tasks["gqa_paged_decode_h24_kv8_d128_ps1@sm_90a"]
    assert len(decode.family_workloads) == 4 and decode.workload.params is not None


def test_solution_definition_is_found_beside_the_solution(tmp_path: Path) -> None:
    sol = FIXTURE / "solutions" / "fixture" / "gemm" / "gemm_n256_k512" / "naive_two_files.json"
    found = solution_definition("gemm_n256_k512", path=sol)
    assert found is not None and found.inputs["A"].dtype == "float16"
    assert solution_definition("gemm_n7168_k5120").name == "gemm_n7168_k5120"  # type: ignore[union-attr]
    assert solution_definition("nowhere", path=tmp_path / "x.json") is None


def test_target_families_per_architecture() -> None:
    assert HOPPER.with_families(["wgmma", "tma"]) is HOPPER  # the defaults are the arch itself
    assert BLACKWELL.with_families(["tcgen05"]) is BLACKWELL
    tma = HOPPER.with_families(["tma"])
    assert tma.is_target_opcode("UTMALDG.2D") and not tma.is_target_opcode("UTMACCTL.PF")
    assert not tma.is_target_opcode("HGMMA.64x128x16.F32.BF16") and tma.mma_opcodes == ()
    both = BLACKWELL.with_families(["tcgen05", "tma"])
    assert both.is_target_opcode("UTMALDG.2D") and both.is_target_opcode("UTCHMMA")
    assert both.mma_opcodes == BLACKWELL.mma_opcodes and "or TMA" in both.target_family
    with pytest.raises(PtxgymError, match="expected a non-empty subset"):
        HOPPER.with_families(["tcgen05"])


def test_every_baseline_names_a_library_function_and_a_fallback_that_needs_nothing() -> None:
    from ptxgym.evaluation.sandboxed import library_baselines

    for key, b in BASELINES.items():
        assert callable(getattr(library_baselines, b.function)), key
        if b.requires is not None:
            assert b.fallback in BASELINES and BASELINES[b.fallback].requires is None, key
    flashinfer = sorted(k for k, b in BASELINES.items() if b.requires == "flashinfer")
    assert flashinfer == [f"flashinfer_gqa_{k}" for k in ("paged_decode", "paged_prefill", "ragged_prefill")]
    with pytest.raises(ValidationError, match="names no fallback"):
        Baseline(name="x", library="x", function="gemm_cublas", requires="flashinfer")
