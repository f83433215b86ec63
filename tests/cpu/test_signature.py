"""The exported entry point must take the task's arguments (a kernel for another task is named at once)."""

from __future__ import annotations

from pathlib import Path

from ptxgym.cpu.signature import entry_arity
from ptxgym.pipeline import Pipeline
from ptxgym.records.feedback import Stage, Status
from ptxgym.records.tasks import get_task

GEMM = (Path(__file__).parents[1] / "data" / "plain_gemm.cu").read_text()


def test_arity_of_plain_and_qualified_exports() -> None:
    assert entry_arity({"k.cu": GEMM}, "run") == 3
    ns = "namespace m { void run(int a, tvm::ffi::Map<int, int> b) {} }\n"
    ns += "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, m::run);"
    assert entry_arity({"k.cu": ns}, "run") == 2
    assert entry_arity({"k.cu": "void f(void) {}\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(run, f);"}, "run") == 0


def test_uncertain_sources_are_left_to_the_run_stage() -> None:
    hidden = "#define EXPORT(x) TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, x)\nvoid f(int a) {}\nEXPORT(f);"
    assert entry_arity({"k.cu": hidden}, "run") is None
    overloads = "void f(int) {}\nvoid f(int, int) {}\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(run, f);"
    assert entry_arity({"k.cu": overloads}, "run") is None


def test_a_gemm_kernel_answered_to_an_attention_task_is_rejected_before_nvcc() -> None:
    fb = Pipeline(get_task("MhaFwd-sm90a"), evaluator=None).run(f"```cuda\n{GEMM}\n```")
    assert fb.status is Status.STATIC_REJECT and fb.stage is Stage.SCREEN
    assert "takes 3 parameter(s), but this task passes 5 (Q, K, V, O, LSE" in fb.message
    assert fb.compile is None  # nvcc never ran
