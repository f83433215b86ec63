"""Builds see the packs' headers and nothing else of the packs (issue: an #include of a shipped solution)."""

from __future__ import annotations

import pytest

from ptxgym.knowledge_packs.include_tree import header_tree, pack_include_dirs
from ptxgym.knowledge_packs.variants import PACK_ROOT
from ptxgym.pipeline import Pipeline
from ptxgym.records.feedback import Status
from ptxgym.records.tasks import get_task

KERNEL = """
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
{include}
void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {{}}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


def test_the_tree_holds_only_headers() -> None:
    root = header_tree()
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files and all("/headers/" in f and f.endswith((".cuh", ".h", ".hpp")) for f in files)
    assert "sm90a/headers/wgmma.cuh" in files
    assert not any("solutions" in f or "validation" in f for f in files)
    assert (PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu").is_file()  # it exists, just not on the path
    assert all(PACK_ROOT not in d.parents and d != PACK_ROOT for d in pack_include_dirs("sm_90a"))


@pytest.mark.nvcc
@pytest.mark.parametrize(
    "include",
    [
        "#include <sm90a/solutions/Gemm.cu>",
        '#include "../solutions/Gemm.cu"',
        "#include <sm90a/validation/../solutions/Gemm.cu>",
        "#include <sm100a/validation/tcgen05_mma.cu>",
        "#include <variants.json>",
    ],
)
def test_a_shipped_solution_or_pack_file_cannot_be_included(include: str) -> None:
    """The whole action is the include line: it built (and was paid) when the packs were on the path."""
    fb = Pipeline(get_task("Gemm-sm90a"), evaluator=None).run(f"```cpp\n{include}\n```")
    assert fb.status in (Status.COMPILE_ERROR, Status.STATIC_REJECT), fb.message
    solution = (PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu").read_text().splitlines()
    marker = next(line for line in solution if len(line) > 40)  # a line only the solution holds
    assert marker not in fb.message and marker not in (fb.compile.log if fb.compile else "")


@pytest.mark.nvcc
@pytest.mark.parametrize("include", ["#include <sm90a/headers/wgmma.cuh>", '#include "sm90a.cuh"'])
def test_pack_headers_stay_includable(include: str) -> None:
    fb = Pipeline(get_task("Gemm-sm90a"), evaluator=None).run(f"```cpp\n{KERNEL.format(include=include)}```")
    assert fb.status is Status.NOT_EVALUATED, fb.message
