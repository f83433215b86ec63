"""FlashInfer-Trace records load and dump unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxgym.records.errors import SchemaError
from ptxgym.records.schema import Definition, Solution, Trace, Workload, read_jsonl, write_jsonl
from ptxgym.records.tasks import load_definitions

FIX = Path(__file__).parents[1] / "fixtures" / "trace"


@pytest.mark.parametrize("name", sorted(load_definitions()))
def test_definition_round_trip(name: str) -> None:
    d = load_definitions()[name]
    again = Definition.from_json(d.to_json())
    assert again == d
    assert json.loads(again.to_json()) == json.loads(d.to_json())


def test_solution_round_trip_multi_file_and_entry_point() -> None:
    raw = json.loads((FIX / "solution_gemm_two_files.json").read_text())
    sol = Solution.from_json(raw)
    assert sol.spec.entry_file == "kernel.cu" and sol.spec.entry_symbol == "gemm_entry"
    assert [s.path for s in sol.sources] == ["kernel.cu", "tile.h"]
    assert sol.to_dict() == raw  # nothing lost, nothing added
    renamed = sol.model_copy(update={"name": "other"})
    assert renamed.content_hash() == sol.content_hash()


def test_trace_jsonl_round_trip(tmp_path: Path) -> None:
    traces = read_jsonl(FIX / "traces_gemm.jsonl", Trace)
    assert traces[0].evaluation.performance.speedup_factor == pytest.approx(0.5187)
    assert traces[1].solution is None and traces[1].evaluation is None
    out = tmp_path / "t.jsonl"
    write_jsonl(out, traces)
    original = [json.loads(line) for line in (FIX / "traces_gemm.jsonl").read_text().splitlines()]
    assert [json.loads(line) for line in out.read_text().splitlines()] == original


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        (
            {
                "name": "x",
                "op_type": "g",
                "axes": {},
                "inputs": {"A": {"shape": ["M"], "dtype": "float32"}},
                "outputs": {},
                "reference": "def run(A): return A",
            },
            "axis 'M'",
        ),
        (
            {
                "name": "x",
                "op_type": "g",
                "axes": {},
                "inputs": {},
                "outputs": {},
                "reference": "def forward(): pass",
            },
            "function run",
        ),
    ],
)
def test_definition_errors_name_the_problem(record: dict, needle: str) -> None:
    with pytest.raises(SchemaError, match=needle):
        Definition.from_json(record)


@pytest.mark.parametrize("path", ["/etc/passwd", "../up.h", "a/../../b.cu", ""])
def test_solution_rejects_escaping_paths(path: str) -> None:
    raw = json.loads((FIX / "solution_gemm_two_files.json").read_text())
    raw["sources"][1]["path"] = path
    with pytest.raises(SchemaError, match="relative"):
        Solution.from_json(raw)


@pytest.mark.parametrize("path", ["$(cd src;sh p.sh).cu", "a b.cu", "`x`.cuh", "a/;b.h", "x.cu\n"])
def test_solution_paths_hold_no_shell_or_odd_characters(path: str) -> None:
    """Path parts are names only: nvcc runs its steps through a shell.

    A file named `$(cd src;sh p.sh).cu` ran commands in the build jail and slipped a file past every
    check (a reviewer's find, through a Solution record).
    """
    raw = json.loads((FIX / "solution_gemm_two_files.json").read_text())
    raw["sources"][1]["path"] = path
    with pytest.raises(SchemaError, match="letters, digits"):
        Solution.from_json(raw)


@pytest.mark.parametrize("path", ["a/b-c_d.cuh", "x+y.cu", "sub/v2.0/k.inl"])
def test_solution_paths_of_ordinary_names_are_kept(path: str) -> None:
    raw = json.loads((FIX / "solution_gemm_two_files.json").read_text())
    raw["sources"][1]["path"] = path
    assert Solution.from_json(raw).sources[1].path == path


def test_workload_axes_must_be_positive() -> None:
    with pytest.raises(SchemaError):
        Workload.from_json({"uuid": "u", "axes": {"M": 0}, "inputs": {}})
