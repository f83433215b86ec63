"""Policy stage: source rules (with the false positives they must avoid) and the artifact allowlists."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ptxgym.cpu.screen import (
    MAX_ARTIFACT_BYTES,
    MAX_HOST_CODE_BYTES,
    MAX_SOURCE_CHARS,
    artifact_size_problem,
    check_artifact,
    check_solution_sources,
    check_source,
    host_syscall_sites,
    import_allowed,
    read_dynamic,
)

KERNELS = Path(__file__).parents[1] / "kernels"
HONEST = """#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <tvm/ffi/tvm_ffi.h>
#include "helpers.cuh"
__global__ void k(float* x) { x[threadIdx.x] = 1.f; }
"""


@pytest.mark.parametrize(
    "name",
    ["plain.cu", "wgmma.cu", "tma.cu", "tcgen05.cu", "spills.cu", "compile_bomb.cu", "dlopen_hidden.cu"],
)
def test_test_kernels_pass(name: str) -> None:
    extra = {"plain_scale.cuh": (KERNELS / "plain_scale.cuh").read_text()}
    assert check_source((KERNELS / name).read_text(), extra).ok


@pytest.mark.parametrize(
    "code",
    [
        "// cudnn would be faster; we avoid cublasGemmEx( and dlopen here\nint x;",
        "/* #include <cublas_v2.h> \n dlsym */ int y;",
        "int cublas_like_tile = 4; float cudnn_ish; int my_dlopen_counter;",
        'const char* note = "no cublasSgemm( or dlopen( calls";',
        'const char* raw = R"doc(#include "/etc/passwd" and dlopen)doc";',
        "int a = 1'000'000; char c = '\"'; int cublas = 2;",
        '#include "./helpers.cuh"\n#include "cuda_runtime.h"\n#include <sys/types.h>\n'
        "#include <cuda/std/cstdint>\n",
        '__device__ void f() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }',
    ],
)
def test_no_false_positives(code: str) -> None:
    verdict = check_source(code, {"helpers.cuh": ""})
    assert verdict.ok, verdict.message


@pytest.mark.parametrize(
    ("code", "rule", "needle", "line"),
    [
        ('int x;\n#include "/etc/passwd"\n', "include-path", "/etc/passwd", 2),
        ("#include </etc/passwd>\n", "include-path", "/etc/passwd", 1),
        ('#include "../x.cuh"\n', "include-path", "../x.cuh", 1),
        ('#include "helpers/../../x.h"\n', "include-path", "..", 1),
        ('#inc\\\nlude "/etc/shadow"\n', "include-path", "/etc/shadow", 1),
        ('%:include "/etc/passwd"\n', "include-path", "/etc/passwd", 1),
        ("#include_next </proc/self/environ>\n", "include-path", "/proc/self/environ", 1),
        ('#define P "/etc/passwd"\n#include P\n', "include-computed", "macro-computed", 2),
        ('#if __has_include("/root/.ssh/id_rsa")\n#endif\n', "file-probe", "__has_include", 1),
        ('const char d[] = {\n#embed "/etc/passwd"\n};\n', "file-embed", "#embed", 2),
        ('void f() { asm(".incbin \\"/etc/passwd\\""); }', "asm-file-access", ".incbin", 1),
        ('void f() { asm(".inc" "bin \\"/etc/passwd\\""); }', "asm-file-access", ".incbin", 1),
        ('void f() { asm volatile("mov $60, %rax\\n\\tsyscall"); }', "syscall", "syscall", 1),
        ("long f() { return syscall(39); }", "syscall", "syscall", 1),
        ('void f() { asm volatile("\\x73yscall"); }', "syscall", "syscall", 1),
        ("#include <cublas_v2.h>\n", "vendor-library", "cuBLAS", 1),
        ("#include <cublasLt.h>\n", "vendor-library", "cublasLt.h", 1),
        ("#include <cudnn.h>\n", "vendor-library", "cuDNN", 1),
        ("#include <cutlass/gemm/device/gemm.h>\n", "vendor-library", "CUTLASS", 1),
        ("#include <cute/tensor.hpp>\n", "vendor-library", "CuTe", 1),
        ("int x;\nvoid f() { cublasSgemm (h, 0); }", "vendor-library", "cublasSgemm", 2),
        ("cublasHandle_t handle;", "vendor-library", "cublasHandle_t", 1),
        ("cublasLtMatmulDesc_t d;", "vendor-library", "cublasLt", 1),
        ("auto s = cudnnCreate(&h);", "vendor-library", "cudnnCreate", 1),
        ("using T = cutlass::bfloat16_t;", "vendor-library", "cutlass::", 1),
        ("auto t = cute::make_tensor(p);", "vendor-library", "cute::", 1),
        ("#include <dlfcn.h>\n", "dynamic-loading", "dlfcn.h", 1),
        ("void* h = dlopen(name, 2);", "dynamic-loading", "dlopen", 1),
        ("auto f = dlsym(RTLD_DEFAULT, n);", "dynamic-loading", "dlsym", 1),
        ("void* h = dlmopen(0, n, 2);", "dynamic-loading", "dlmopen", 1),
        ("int a;\x00int b;", "binary", "control byte", 1),
        # a directive split by a comment or a form feed is still a directive to the compiler
        ('#/*\n*/include "/etc/passwd"\n', "include-path", "/etc/passwd", 1),
        ('#\x0cinclude "/etc/passwd"\n', "include-path", "/etc/passwd", 1),
        ('int x;\r#include "/etc/passwd"\n', "include-path", "/etc/passwd", 2),  # a lone CR ends a line
        ('#/*\n*/line 1 "zzz.h"\n', "host-asm", "#line", 1),
        ('#/*\n*/define HOSTASM __as ## m__\nHOSTASM("nop");\n', "host-asm", "HOSTASM", 3),
        # strings the host compiler hands to the assembler
        (
            '__attribute__((used, section(".rodata.x\\n.text"))) const int m = 1;',
            "asm-injection",
            "section",
            1,
        ),
        (
            '[[gnu::section(".text.x")]] const unsigned char g[] = {0x0f, 0x05};',
            "asm-injection",
            "section",
            1,
        ),
        ('__attribute__((symver("f@V1\\n.globl x"))) int g() { return 2; }', "asm-injection", "symver", 1),
        ('#ident "a\\n.incbin \\"/etc/hostname\\""\n', "asm-injection", "#ident", 1),
        ('int m __attribute__((section((0, ".rodata.x\\n.text"))));', "asm-injection", "section", 1),
        ('#define E\nconst char* s = ".inc" E "bin /etc/x";\n', "asm-file-access", "across", 2),
        ('#pragma GCC dependency "/srv/solutions/Gemm.cu"\n', "file-probe", "dependency", 1),
        ('_Pragma("GCC dependency \\"/srv/x.cu\\"")\n', "file-probe", "dependency", 1),
        # the lexer reads as the compiler does (second review): a trailing digit separator is no char
        # literal, `$R"(` is an identifier and a string, a leading byte-order mark is dropped
        ("#define EAT(...)\nEAT(1'/*')\n#line 1 \"/usr/include/zz.h\"\n// */\n", "host-asm", "#line", 3),
        ('#define EAT(...)\nEAT($R"(")\n#line 1 "/usr/include/zz.h"\n// )"\n', "host-asm", "#line", 3),
        ('#define EAT(...)\nEAT(\u00e9R"(")\n#line 1 "/usr/include/zz.h"\n// )"\n', "host-asm", "#line", 3),
        ('\ufeff#line 1 "/usr/include/zz.h"\n', "host-asm", "#line", 1),
        (
            '#define CAT(a,b) a##b\n#define HI(x) CAT(__has_,include)(x)\n#if HI("/root/.ssh/a")\n#endif\n',
            "file-probe",
            "HI",
            3,
        ),
    ],
)
def test_rejections_name_rule_and_line(code: str, rule: str, needle: str, line: int) -> None:
    verdict = check_source(code, {"helpers.cuh": ""})
    assert not verdict.ok
    assert verdict.rule == rule and verdict.line == line
    assert verdict.message.startswith(rule + ":") and needle in verdict.message
    assert f"kernel.cu:{line}" in verdict.message


def test_helper_files_are_checked_and_named() -> None:
    verdict = check_source(HONEST, {"helpers.cuh": "// fine\n#include <cudnn.h>\n"})
    assert not verdict.ok and verdict.file == "helpers.cuh" and "helpers.cuh:2" in verdict.message


def test_includes_between_solution_files() -> None:
    files = [
        ("src/kernel.cu", '#include "util/a.cuh"\n'),
        ("src/util/a.cuh", '#include "../common.cuh"\n'),
        ("src/common.cuh", "int c;\n"),
    ]
    assert check_solution_sources(files, "src/kernel.cu").ok
    bad = [("kernel.cu", '#include "missing/../../secret.h"\n')]
    assert check_solution_sources(bad, "kernel.cu").rule == "include-path"


def test_size_cap() -> None:
    verdict = check_source("int x;\n" * (MAX_SOURCE_CHARS // 7 + 10))
    assert not verdict.ok and verdict.rule == "size" and f"{MAX_SOURCE_CHARS:,}" in verdict.message


def test_non_text_content() -> None:
    assert check_source(None).rule == "binary"  # type: ignore[arg-type]
    assert check_source("int x;", {"h.cuh": b"\x00"}).rule == "binary"  # type: ignore[dict-item]


def test_unterminated_raw_strings_lex_in_linear_time() -> None:
    """Each `R"(` without its end once rescanned the rest of the file: 250k characters took 45 s."""
    start = time.perf_counter()
    verdict = check_source("int run() { return 0; }\n" + 'R"(' * 80_000)
    assert time.perf_counter() - start < 5.0 and verdict.ok, verdict.message
    closed = 'const char* s = R"x(asm("nop") )" )x";\nint run() { return 0; }\n'
    assert check_source(closed).ok  # a raw string's text is a literal, not code


def test_hostile_numbers_and_long_macros_stay_fast_and_never_raise() -> None:
    """Numbers and bodies of any length are read in bounded time, never raising.

    A 5000-digit arch guard overflowed int() (INFRA_ERROR); a long macro body made the paste analysis
    quadratic (60k characters: 149 s).
    """
    guard = "#if __CUDA_ARCH__ >= " + "1" * 5000 + "\nint x;\n#endif\nint run() { return 0; }\n"
    assert check_source(guard).ok
    chain = "#define QQ0 __as ## m__\n" + "".join(f"#define QQ{k} QQ{k - 1} ## zz\n" for k in range(1, 8))
    start = time.perf_counter()
    verdict = check_source(chain + "#define X " + "a" * 200_000 + "\nint run() { return 0; }\n")
    assert time.perf_counter() - start < 5.0 and verdict.ok, verdict.message


def test_random_text_never_raises() -> None:
    import random

    rng = random.Random(1)
    alphabet = "#include<>\"'/\\*\n R()cublasLt dlopen asm syscall .incbin __has_include ::cute 0x1'2"
    for _ in range(300):
        verdict = check_source("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))))
        assert verdict.ok or (verdict.rule and verdict.message)


# ---------------------------------------------------------------------------------------- artifacts


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("malloc", True),
        ("memcpy", True),
        ("exit", True),
        ("sqrtf", True),
        ("__cxa_throw", True),
        ("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm", True),
        ("_ZTVNSt7__cxx1115basic_stringbufIcSt11char_traitsIcESaIcEEE", True),
        ("_ZdlPvm", True),
        ("TVMFFIEnvGetStream", True),
        ("cudaLaunchKernelExC", True),
        # a host callback runs on a driver thread, which below Landlock ABI 8 may be outside the jail
        ("cudaLaunchHostFunc", False),
        ("cuLaunchHostFunc", False),
        ("cudaStreamAddCallback", False),
        ("cuStreamAddCallback_ptsz", False),
        ("__cudaRegisterFatBinary", True),
        ("cuTensorMapEncodeTiled", True),
        ("dlopen", False),
        ("dlsym", False),
        ("system", False),
        ("fork", False),
        ("execve", False),
        ("socket", False),
        ("connect", False),
        ("fopen", False),
        ("open", False),
        ("syscall", False),
        ("ptrace", False),
        ("mmap", False),
        ("getenv", False),
        ("pthread_create", False),
        ("cublasGemmEx", False),
        ("cudnnCreate", False),
        ("_ZN2at6matmulERKNS_6TensorES2_", False),
        ("_ZNSt10filesystem6removeERKNS_7__cxx114pathE", False),
        ("_ZNSt14basic_ofstreamIcSt11char_traitsIcEEC1EPKcSt13_Ios_Openmode", False),
        ("TVMFFIFunctionGetGlobal", False),
        ("TVMFFIEnvSetStream", False),
    ],
)
def test_import_allowlist(name: str, allowed: bool) -> None:
    assert import_allowed(name) is allowed


@pytest.mark.parametrize(
    "name",
    [
        "cuModuleLoad",
        "cuModuleLoadData",
        "cuModuleLoadDataEx",
        "cuModuleLoadFatBinary",
        "cuModuleGetFunction",
        "cuModuleGetGlobal_v2",
        "cuModuleEnumerateFunctions",
        "cuLibraryLoadData",
        "cuLibraryLoadFromFile",
        "cuLibraryGetKernel",
        "cuLinkCreate_v2",
        "cuLinkAddData_v2",
        "cuLinkAddFile_v2",
        "cuLinkComplete",
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuGetExportTable",
        "cudaGetDriverEntryPoint",
        "cudaGetDriverEntryPointByVersion",
        "cudaGetExportTable",
        "cudaLibraryLoadData",
        "cudaLibraryLoadFromFile",
        "cudaLibraryGetKernel",
    ],
)
def test_code_loading_imports_are_banned(name: str) -> None:
    assert not import_allowed(name) and not import_allowed(name, frozenset({name}))


@pytest.mark.nvcc
def test_every_code_loading_function_of_the_toolkit_headers_is_banned() -> None:
    """The families named in issue 11, looked up in this toolkit's cuda.h and cuda_runtime_api.h."""
    from ptxgym.cpu.toolchain import find_toolchain

    headers = [d / h for d in find_toolchain().include_dirs for h in ("cuda.h", "cuda_runtime_api.h")]
    text = "".join(h.read_text(errors="replace") for h in headers if h.is_file())
    declared = set(re.findall(r"\b(cu(?:da)?[A-Z]\w*)\s*\(", text))
    family = re.compile(
        r"cu(?:da)?(?:Module|Library)Load|cuLink(?:Create|Add|Complete)|ProcAddress|EntryPoint"
    )
    loading = {n for n in declared if family.match(n) or "ProcAddress" in n or "EntryPoint" in n}
    assert len(loading) >= 15, sorted(loading)
    assert not [n for n in loading if import_allowed(n)]
    kept = ("cuTensorMapEncodeTiled", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaFuncSetAttribute")
    assert all(import_allowed(n) for n in kept)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_artifact_code_loading_says_why(tmp_path: Path) -> None:
    src = "int cuModuleLoadData(void**, const void*);\nint f(void* m) { return cuModuleLoadData(&m, 0); }\n"
    (tmp_path / "m.c").write_text(src)
    so = tmp_path / "libm.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "m.c")], check=True)
    verdict, imports, _ = check_artifact(so, driver_names=frozenset({"cuModuleLoadData"}))
    assert "cuModuleLoadData" in imports
    assert not verdict.ok and verdict.rule == "code-loading" and "cuModuleLoadData" in verdict.message
    assert "load GPU code at run time" in verdict.message and "cuTensorMapEncodeTiled" in verdict.message


def test_driver_imports_limited_to_the_driver_api() -> None:
    names = frozenset({"cuGetErrorString", "cuTensorMapEncodeTiled"})
    assert import_allowed("cuTensorMapEncodeTiled", names)
    assert not import_allowed("cuSecretBackdoor", names)


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _shared_object(tmp_path: Path, name: str, c_source: str, *extra: str) -> Path:
    src, out = tmp_path / f"{name}.c", tmp_path / f"lib{name}.so"
    src.write_text(c_source)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *extra], check=True, capture_output=True
    )
    return out


@needs_gcc
def test_artifact_honest_object_passes(tmp_path: Path) -> None:
    so = _shared_object(
        tmp_path,
        "honest",
        "#include <stdlib.h>\n#include <string.h>\n"
        "void* dup(const void* p, size_t n) {\n"
        "  void* q = malloc(n); memcpy(q, p, n); return q;\n}\n",
    )
    verdict, imports, needed = check_artifact(so)
    assert verdict.ok, verdict.message
    assert {"malloc", "memcpy"} <= set(imports) and "libc.so.6" in needed
    assert "dup" in read_dynamic(so).exports


@needs_gcc
@pytest.mark.parametrize(
    ("c_source", "symbols"),
    [
        ('#include <stdlib.h>\nint f(void) { return system("id"); }\n', ["system"]),
        (
            '#include <dlfcn.h>\nvoid* f(const char* n) { return dlsym(dlopen(n, 2), "x"); }\n',
            ["dlopen", "dlsym"],
        ),
        ('#include <stdio.h>\nvoid* f(void) { return fopen("/etc/passwd", "r"); }\n', ["fopen"]),
    ],
)
def test_artifact_banned_imports_are_named(tmp_path: Path, c_source: str, symbols: list[str]) -> None:
    verdict, imports, _ = check_artifact(_shared_object(tmp_path, "bad", c_source))
    assert not verdict.ok and verdict.rule == "banned-import"
    for symbol in symbols:
        assert symbol in imports and symbol in verdict.message


@needs_gcc
def test_artifact_unknown_needed_library(tmp_path: Path) -> None:
    _shared_object(tmp_path, "extra", "int helper(void) { return 2; }\n", "-Wl,-soname,libextra.so")
    so = _shared_object(
        tmp_path, "needs", "int helper(void);\nint f(void) { return helper(); }\n", f"-L{tmp_path}", "-lextra"
    )
    verdict, _, needed = check_artifact(so)
    assert "libextra.so" in needed
    assert not verdict.ok and verdict.rule == "needed-library" and "libextra.so" in verdict.message


@needs_gcc
def test_artifact_host_syscall_instruction(tmp_path: Path) -> None:
    insn = {"x86_64": "syscall", "aarch64": "svc #0"}.get(platform.machine())
    if insn is None:
        pytest.skip(f"no syscall encoding for {platform.machine()}")
    so = _shared_object(tmp_path, "sys", f'void f(void) {{ __asm__ volatile("{insn}"); }}\n')
    verdict, imports, _ = check_artifact(so)
    assert not verdict.ok and verdict.rule == "syscall", verdict.message
    assert not any(i == "syscall" for i in imports)  # invisible to the import check


def test_artifact_check_of_a_missing_file_is_an_infrastructure_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="readelf"):
        check_artifact(tmp_path / "absent.so")


def test_an_object_too_large_to_inspect_is_rejected_before_any_tool_reads_it(tmp_path: Path) -> None:
    so = tmp_path / "kernel.so"
    with so.open("wb") as f:  # sparse: the size is what counts
        f.truncate(MAX_ARTIFACT_BYTES + 1)
    verdict = artifact_size_problem(so)
    assert verdict is not None and verdict.rule == "artifact-size" and "limit 64 MiB" in verdict.message


@needs_gcc
def test_host_code_too_large_to_disassemble_is_rejected(tmp_path: Path) -> None:
    """objdump prints a line per instruction: 16 MiB of one-byte instructions is ~0.7 GB of text."""
    fill = MAX_HOST_CODE_BYTES + (1 << 20)
    so = _shared_object(
        tmp_path, "big", f'__asm__(".text\\n.fill {fill},1,0x90\\n");\nint f(void) {{ return 1; }}\n'
    )
    verdict = artifact_size_problem(so)
    assert verdict is not None and "executable sections" in verdict.message, verdict
    small = _shared_object(tmp_path, "small", "int f(void) { return 1; }\n")
    assert artifact_size_problem(small) is None and host_syscall_sites(small) == []
