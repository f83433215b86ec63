"""Build stage with the real nvcc: flags, cache, limits, artifact policy, ptxas report, SASS of real kernels.

Real builds cost about 4 s each on a 2-core host, so the suite builds each test kernel once: the plain
kernel sequentially (it is also the cold-vs-cached timing), the others concurrently in one module fixture.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ptxgym.cpu.build import BuildOutcome, _commit, _load, build_key, build_solution, builds_dir
from ptxgym.cpu.ptxas import parse_ptxas_report, ptxas_warnings
from ptxgym.cpu.screen import check_source
from ptxgym.records.arch import BLACKWELL, HOPPER, ArchSpec
from ptxgym.records.feedback import Status
from ptxgym.records.schema import BuildSpec, Solution, SourceFile, SupportedLanguage

KERNELS = Path(__file__).parents[1] / "kernels"
PTXAS = Path(__file__).parents[1] / "fixtures" / "ptxas"


def solution(files: dict[str, str], entry: str = "kernel.cu::run", arch: str = "sm_90a") -> Solution:
    """A TVM-FFI CUDA solution: path in the solution -> source text."""
    return Solution(
        name="test",
        definition="test",
        author="ptxgym-tests",
        spec=BuildSpec(
            language=SupportedLanguage.CUDA, target_hardware=[arch], entry_point=entry, binding="tvm-ffi"
        ),
        sources=[SourceFile(path=p, content=c) for p, c in files.items()],
    )


def kernel(name: str, **kwargs: str) -> Solution:
    return solution({"kernel.cu": (KERNELS / name).read_text()}, **kwargs)


PLAIN = solution(
    {
        "kernel.cu": (KERNELS / "plain.cu").read_text(),
        "plain_scale.cuh": (KERNELS / "plain_scale.cuh").read_text(),
    },
    entry="kernel.cu::scale_add",
)
CASES: dict[str, tuple[Solution, ArchSpec]] = {
    "wgmma": (kernel("wgmma.cu"), HOPPER),
    "tma": (kernel("tma.cu"), HOPPER),
    "tcgen05": (kernel("tcgen05.cu", arch="sm_100a"), BLACKWELL),
    "tcgen05_on_hopper": (kernel("tcgen05.cu"), HOPPER),
    "dlopen_hidden": (kernel("dlopen_hidden.cu"), HOPPER),
    "cubin_from_bytes": (kernel("cubin_from_bytes.cu"), HOPPER),
    "no_export": (
        solution(
            {
                "kernel.cu": (KERNELS / "plain.cu").read_text(),
                "plain_scale.cuh": (KERNELS / "plain_scale.cuh").read_text(),
            }
        ),
        HOPPER,
    ),
}


# -------------------------------------------------------------------------------------- pure parts


def test_ptxas_report_with_spills_and_a_device_function() -> None:
    resources = {k.kernel: k for k in parse_ptxas_report((PTXAS / "spills_sm90a.log").read_text())}
    assert set(resources) == {"_Z6stagedPf", "_Z5heavyPfi"}  # the helper is no kernel
    heavy, staged = resources["_Z5heavyPfi"], resources["_Z6stagedPf"]
    assert (heavy.registers, heavy.stack_bytes) == (32, 528)
    assert (heavy.spill_stores, heavy.spill_loads) == (1316, 1344)
    assert heavy.barriers == 0 and heavy.shared_bytes == 0
    assert (staged.registers, staged.shared_bytes, staged.barriers, staged.spill_stores) == (10, 4096, 1, 0)


@pytest.mark.parametrize(
    ("name", "kernel_name", "registers", "smem"),
    [
        ("wgmma_sm90a", "_Z10wgmma_tilePK13__nv_bfloat16S1_Pf", 30, 2304),
        ("tma_sm90a", "_Z13tma_tile_copy14CUtensorMap_stP13__nv_bfloat16ii", 12, 8200),
        ("tcgen05_sm100a", "_Z14tmem_roundtripPKfPfi", 10, 4),
        ("plain_sm90a", "_Z12scale_kernelPKfPfif", 12, 0),
    ],
)
def test_ptxas_report_fixtures(name: str, kernel_name: str, registers: int, smem: int) -> None:
    (resources,) = parse_ptxas_report((PTXAS / f"{name}.log").read_text())
    assert (resources.kernel, resources.registers, resources.shared_bytes) == (kernel_name, registers, smem)


def test_ptxas_report_of_older_format_and_warnings() -> None:
    log = (
        "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z1kv\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 168 registers, 16 bytes smem, 400 bytes cmem[0]\n"
        "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized\n"
        "ptxas warning : Registers are spilled to local memory in function '_Z1kv'\n"
    )
    (k,) = parse_ptxas_report(log)
    assert (k.registers, k.shared_bytes, k.constant_bytes) == (168, 16, 400)
    assert (k.stack_bytes, k.spill_stores, k.spill_loads) == (8, 4, 4)
    assert k.barriers is None
    warnings = ptxas_warnings(log)
    assert len(warnings) == 2 and "serialized" in warnings[0] and "spilled" in warnings[1]
    assert parse_ptxas_report("") == [] and parse_ptxas_report("garbage\n\x00") == []


def test_policy_rejects_before_nvcc_runs() -> None:
    start = time.perf_counter()
    outcome = build_solution(solution({"kernel.cu": '#include "/etc/passwd"\nint x;\n'}), HOPPER)
    assert (
        outcome.status is Status.STATIC_REJECT
        and outcome.screen_verdict
        and outcome.screen_verdict.rule == "include-path"
    )
    assert outcome.so_path is None and not outcome.info.ok and outcome.info.command == []
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("spec_change", "needle"),
    [
        ({"language": SupportedLanguage.PYTHON, "entry_point": "kernel.cu::run"}, "not built by nvcc"),
        ({"binding": "torch"}, "binding 'torch'"),
        ({"entry_point": "kernel.cuh::run"}, "not a compilable source"),
    ],
)
def test_unbuildable_specs(spec_change: dict, needle: str) -> None:
    base = solution({"kernel.cu": "int x;", "kernel.cuh": "int y;"})
    spec = base.spec.model_copy(update=spec_change)
    outcome = build_solution(base.model_copy(update={"spec": spec}), HOPPER)
    assert outcome.status is Status.COMPILE_ERROR and needle in outcome.message


# ------------------------------------------------------------------------------------- real builds


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A build cache of this module's own (cold builds really are cold)."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("build-cache")
        mp.setenv("PTXGYM_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def plain_builds(cache_dir: Path) -> tuple[BuildOutcome, BuildOutcome, float, float]:
    """The plain two-file kernel built cold, then again from the cache, with both wall times."""
    start = time.perf_counter()
    cold = build_solution(PLAIN, HOPPER)
    cold_s = time.perf_counter() - start
    start = time.perf_counter()
    cached = build_solution(PLAIN, HOPPER)
    return cold, cached, cold_s, time.perf_counter() - start


@pytest.fixture(scope="module")
def built(cache_dir: Path) -> dict[str, BuildOutcome]:
    """Every other test kernel, built concurrently (also exercises parallel builds into one cache)."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(build_solution, sol, arch) for name, (sol, arch) in CASES.items()}
        return {name: future.result() for name, future in futures.items()}


def _census(outcome: BuildOutcome, arch: ArchSpec):
    from ptxgym.cpu.sass import sass_census
    from ptxgym.cpu.toolchain import find_toolchain

    if find_toolchain().cuobjdump is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    assert outcome.so_path is not None, outcome.message
    return sass_census(outcome.so_path, arch)


@pytest.mark.nvcc
def test_plain_two_file_build(plain_builds) -> None:
    cold = plain_builds[0]
    assert cold.ok and cold.status is None, cold.message
    assert cold.so_path is not None and cold.so_path.is_file() and not cold.info.cache_hit
    info = cold.info
    assert info.ok and info.nvcc_version and info.artifact_sha256 and info.wall_s > 0
    (res,) = info.resources
    assert res.kernel == "_Z12scale_kernelPKfPfif" and res.registers and res.spill_stores == 0
    assert info.needed[:2] == ["libtvm_ffi.so", "libcudart.so.13"] and "libcuda.so.1" not in info.needed
    assert "cudaGetLastError" in info.imports and "TVMFFIEnvGetStream" in info.imports
    for flag in (
        "-O3",
        "-shared",
        "-std=c++17",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-lineinfo",
        "-fvisibility=hidden",
        "-I$TVM_FFI/include",
        "-ltvm_ffi",
        "-lcuda",
    ):
        assert flag in info.command
    assert info.command[0] == "nvcc" and "-cudart shared" in " ".join(info.command)
    assert info.command[-3:] == ["-x", "cu", "src/kernel.cu"]  # sources below nvcc's working folder


@pytest.mark.nvcc
def test_cache_hit_is_much_faster_than_a_build(plain_builds) -> None:
    cold, cached, cold_s, cached_s = plain_builds
    print(f"\nbuild of the plain kernel: cold {cold_s:.3f} s, cached {cached_s * 1000:.2f} ms")
    assert cached.ok and cached.info.cache_hit and cached.info.wall_s == 0.0
    assert cached.so_path == cold.so_path and cached.info.artifact_sha256 == cold.info.artifact_sha256
    assert cached.info.resources == cold.info.resources
    assert cached_s < cold_s / 5, f"cached {cached_s:.3f} s vs cold {cold_s:.3f} s"


@pytest.mark.slow
@pytest.mark.nvcc
def test_static_target_detection_on_real_builds(plain_builds, built) -> None:
    wgmma = _census(built["wgmma"], HOPPER)
    assert wgmma.static_target and wgmma.kernels[0].target_opcodes.get("HGMMA", 0) >= 1
    tma = _census(built["tma"], HOPPER)
    assert tma.static_target and tma.kernels[0].target_opcodes.get("UTMALDG", 0) >= 1
    tcgen05 = _census(built["tcgen05"], BLACKWELL)
    assert tcgen05.arch == "sm_100a" and tcgen05.static_target
    assert {"LDTM", "STTM"} <= set(tcgen05.histogram)
    assert any(op.startswith("UTC") for op in tcgen05.histogram)
    plain = _census(plain_builds[0], HOPPER)
    assert not plain.static_target and plain.kernels and plain.histogram


@pytest.mark.nvcc
@pytest.mark.slow  # the shared `built` fixture: ~21 s of concurrent nvcc builds
def test_driver_api_links_through_libcuda(built) -> None:
    tma = built["tma"]
    assert tma.ok, tma.message
    assert "libcuda.so.1" in tma.info.needed and "cuTensorMapEncodeTiled" in tma.info.imports


@pytest.mark.nvcc
@pytest.mark.slow  # the shared `built` fixture: ~21 s of concurrent nvcc builds
def test_wrong_arch_code_is_a_compile_error_with_ptxas_message(built) -> None:
    outcome = built["tcgen05_on_hopper"]
    assert outcome.status is Status.COMPILE_ERROR and outcome.so_path is None and not outcome.info.ok
    assert "not supported on .target 'sm_90a'" in outcome.message and "tcgen05" in outcome.message
    assert "tmpxft" not in outcome.message and str(builds_dir()) not in outcome.message


@pytest.mark.nvcc
@pytest.mark.slow  # the shared `built` fixture: ~21 s of concurrent nvcc builds
def test_dlopen_without_literal_is_caught_at_symbol_level(built) -> None:
    source = (KERNELS / "dlopen_hidden.cu").read_text()
    assert check_source(source).ok  # regex cannot see it: no dlopen token, no "cublas" literal
    outcome = built["dlopen_hidden"]
    assert outcome.status is Status.STATIC_REJECT and outcome.so_path is None
    assert outcome.screen_verdict is not None and outcome.screen_verdict.rule == "banned-import"
    assert "dlopen" in outcome.message and "dlsym" in outcome.message
    assert {"dlopen", "dlsym"} <= set(outcome.info.imports)
    again = build_solution(CASES["dlopen_hidden"][0], HOPPER)
    assert again.status is Status.STATIC_REJECT and again.info.cache_hit  # verdicts are cached too


@pytest.mark.nvcc
@pytest.mark.slow  # the shared `built` fixture: ~21 s of concurrent nvcc builds
def test_loading_gpu_code_at_run_time_is_caught_at_symbol_level(built) -> None:
    """Issue 11, item 11: a kernel carried as bytes, launched past a decoy of the same name."""
    assert check_source((KERNELS / "cubin_from_bytes.cu").read_text()).ok
    outcome = built["cubin_from_bytes"]
    assert outcome.status is Status.STATIC_REJECT and outcome.so_path is None
    assert outcome.screen_verdict is not None and outcome.screen_verdict.rule == "code-loading"
    for name in ("cuModuleLoadData", "cuModuleGetFunction", "cuGetProcAddress"):
        assert name in outcome.message, outcome.message
    assert "load GPU code at run time" in outcome.message and "cuLaunchKernel" in outcome.info.imports


@pytest.mark.nvcc
@pytest.mark.slow  # the shared `built` fixture: ~21 s of concurrent nvcc builds
def test_missing_entry_export(built) -> None:
    outcome = built["no_export"]
    assert outcome.status is Status.COMPILE_ERROR and outcome.so_path is None
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run" in outcome.message


@pytest.mark.nvcc
def test_syntax_error_keeps_file_and_line(cache_dir: Path) -> None:
    src = "#include <cuda_runtime.h>\n__global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n"
    outcome = build_solution(solution({"kernel.cu": src}), HOPPER)
    assert outcome.status is Status.COMPILE_ERROR and outcome.cacheable
    assert "kernel.cu(3): error" in outcome.message and "undefined_name" in outcome.message
    assert outcome.message.startswith("nvcc failed (exit") and len(outcome.message) < 2000
    assert "undefined_name" in outcome.info.log
    again = build_solution(solution({"kernel.cu": src}), HOPPER)
    assert again.status is Status.COMPILE_ERROR and again.info.cache_hit and again.message == outcome.message


def _processes_under(root: Path) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(root):
                pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.mark.nvcc
def test_compile_bomb_times_out_and_leaves_nothing_running(cache_dir: Path) -> None:
    bomb = kernel("compile_bomb.cu")
    start = time.perf_counter()
    outcome = build_solution(bomb, HOPPER, timeout_s=3)
    elapsed = time.perf_counter() - start
    assert outcome.status is Status.COMPILE_TIMEOUT and not outcome.cacheable
    assert "3 s limit" in outcome.message and outcome.so_path is None
    assert 3.0 <= elapsed < 5.0, elapsed
    assert _processes_under(builds_dir()) == []
    assert not any((builds_dir() / "tmp").iterdir())
    from ptxgym.cpu.toolchain import find_toolchain

    key = build_key(bomb, HOPPER, find_toolchain())
    assert not (builds_dir() / key[:2] / key).exists()  # timeouts are not cached


@pytest.mark.nvcc
def test_memory_limit_ends_as_compile_error(cache_dir: Path) -> None:
    outcome = build_solution(kernel("tma.cu"), HOPPER, memory_mb=256, use_cache=False)
    assert outcome.status is Status.COMPILE_ERROR and not outcome.cacheable
    assert "256 MiB" in outcome.message
    assert "out of memory" in outcome.message or "killed" in outcome.message


@pytest.mark.nvcc
def test_commit_race_keeps_one_entry(plain_builds, tmp_path: Path) -> None:
    cold = plain_builds[0]
    entry = builds_dir() / "ra" / "race-entry"
    results = []
    for i in range(2):
        stage = tmp_path / f"stage{i}"
        shutil.copytree(cold.so_path.parent, stage)
        (stage / "meta.json").unlink()
        outcome = BuildOutcome(
            status=None, message=cold.message, so_path=stage / "kernel.so", info=cold.info, key="race-entry"
        )
        results.append(_commit(stage, entry, outcome))
        assert not stage.exists()
    assert results[0].so_path == results[1].so_path == entry / "kernel.so"
    assert results[1].info.cache_hit  # the loser reads the winner's entry


@pytest.mark.nvcc
def test_damaged_cache_entry_is_evicted(plain_builds) -> None:
    cold = plain_builds[0]
    entry = builds_dir() / "da" / "damaged-entry"
    shutil.copytree(cold.so_path.parent, entry)
    (entry / "kernel.so").write_bytes(b"tampered")
    assert _load(entry, "damaged-entry") is None and not entry.exists()


@pytest.mark.slow
@pytest.mark.nvcc
def test_concurrent_builds_of_one_key(cache_dir: Path) -> None:
    sol = solution({"kernel.cu": (KERNELS / "tcgen05.cu").read_text() + "\n// concurrent\n"}, arch="sm_100a")
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda _: build_solution(sol, BLACKWELL), range(2)))
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    assert len({o.so_path for o in outcomes}) == 1 and len({o.info.artifact_sha256 for o in outcomes}) == 1
    assert not any((builds_dir() / "tmp").iterdir())


LEAK = "/etc/ld.so.cache"  # readable inside the build jail: the loader needs it


@pytest.mark.nvcc
@pytest.mark.slow  # ~8 s of nvcc
def test_a_solution_header_cannot_replace_a_toolkit_header_in_nvcc_s_own_steps() -> None:
    """A solution's `stddef.h` stays its own: the sources sit in `src/`, below nvcc's working folder.

    Beside kernel.cu it replaced the toolkit's in the device link (its `-I.`), where no source rule or
    host translation looked; a section name there ran `.INCBIN` and put a file in the .so (a reviewer's
    find).
    """
    shadow = (
        "#include_next <stddef.h>\n#define CAT(a,b) a##b\n"
        '__attribute__((used, CAT(sec,tion)(".rodata.leak,\\"a\\";.INCBIN \\"'
        + LEAK
        + '\\";#"))) static const char leak_marker[1] = {0};\n'
    )
    kernel = (
        "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/function.h>\n"
        "void run(tvm::ffi::TensorView a) {}\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);\n"
    )
    outcome = build_solution(
        solution({"kernel.cu": kernel, "stddef.h": shadow}), HOPPER, use_cache=False, screen=False
    )
    leaked = outcome.so_path is not None and Path(LEAK).read_bytes()[:4096] in outcome.so_path.read_bytes()
    assert not leaked, outcome.message
    assert outcome.status in (None, Status.STATIC_REJECT), outcome.message  # built clean, or refused


@pytest.mark.nvcc
@pytest.mark.parametrize("path", ["meta.json/unused.cuh", "kernel.so/x.cuh"])
def test_a_source_may_take_any_name_the_build_uses_for_itself(path: str) -> None:
    """A folder named meta.json is an ordinary header folder now that sources live in their own folder.

    It once broke the cache's own write (INFRA_ERROR on demand).
    """
    kernel = "#include <tvm/ffi/function.h>\nint run() { return 0; }\n"
    outcome = build_solution(solution({"kernel.cu": kernel, path: "// nothing\n"}), HOPPER, use_cache=True)
    assert outcome.status is Status.COMPILE_ERROR and "does not export the entry point" in outcome.message


def test_forged_resource_lines_in_the_compiler_s_diagnostics_are_not_read() -> None:
    """Only ptxas's own lines count: a `#warning Used 9 registers` (5000 digits once: INFRA_ERROR)."""
    log = (
        "kernel.cu:1:2: warning: #warning Compiling entry function 'zz' for 'sm_90a'\n"
        "kernel.cu:2:2: warning: #warning Used " + "1" * 5000 + " registers\n"
        "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\n"
        "ptxas info    : Used 32 registers, used 1 barriers\n"
    )
    got = parse_ptxas_report(log)
    assert [(k.kernel, k.registers) for k in got] == [("_Z1kv", 32)]


# the reviewer's line: ``__text_var(c, x)`` is ``x`` only in nvcc's second host pass (crt/host_runtime.h)
TEXT_VAR = (
    r"int leak_anchor __attribute__((__text_var(x, section(__text_var(y, "
    r'".rodata.leak,\"a\"\nlbl: .inc" /**/ "bin \"/etc/ld.so.cache\"\n.section .rodata.x"))))) = 1;'
    "\n"
)


def _plain_with(line: str) -> Solution:
    kernel = (KERNELS / "plain.cu").read_text() + line
    return solution({"kernel.cu": kernel, "plain_scale.cuh": (KERNELS / "plain_scale.cuh").read_text()})


@pytest.mark.nvcc
@pytest.mark.slow  # ~10 s of nvcc
@pytest.mark.parametrize("screen", [True, False])
def test_a_section_hidden_in_nvcc_s_own_host_macros_puts_no_file_in_the_object(screen: bool) -> None:
    """The backstop reads the host compiler's own preprocessed input and assembly.

    nvcc's second host pass expands macros of crt/host_runtime.h that its translation never saw: a
    `section` string there, with `lbl: .incbin` past the statement-start rule, put /etc/ld.so.cache in the
    .so with the screen on (a reviewer's find).
    """
    outcome = build_solution(_plain_with(TEXT_VAR), HOPPER, use_cache=False, screen=screen)
    leaked = outcome.so_path is not None and Path(LEAK).read_bytes()[:4096] in outcome.so_path.read_bytes()
    assert not leaked and outcome.status is Status.STATIC_REJECT, outcome.message


@pytest.mark.nvcc
@pytest.mark.slow
def test_a_failed_build_shows_no_file_an_assembler_include_read() -> None:
    """Assembler errors quoted a non-header file line by line (nvcc.profile) through the shown log."""
    from ptxgym.cpu.toolchain import find_toolchain

    line = TEXT_VAR.replace('.inc" /**/ "bin', '.inc" /**/ "lude').replace(".rodata.", ".data.")
    line = line.replace("/etc/ld.so.cache", str(find_toolchain().cuda_home / "bin" / "nvcc.profile"))
    outcome = build_solution(_plain_with(line), HOPPER, use_cache=False, screen=False)
    text = outcome.message + outcome.info.log
    assert outcome.status in (Status.STATIC_REJECT, Status.COMPILE_ERROR) and outcome.so_path is None, text
    assert "nvcc.profile:" not in text and "no such instruction" not in text, text


# the fifth reviewer's line: section((0, "...")) escaped the quote-anchored rule, `__text__` (empty in
# nvcc's second host pass) split ".inc" from "bin", and `'"` (a character constant to the assembler) opened
# a "string" only our lexer saw
CHAR_QUOTE = (
    r'int leak_anchor __attribute__((__text_var(q, section((0, ".rodata.leak,\"a\"\n.byte \'\" ; .inc" '
    r'__text__ "bin \"/etc/ld.so.cache\" # \""))))) = 1;'
    "\n"
)


@pytest.mark.nvcc
@pytest.mark.slow  # ~10 s of nvcc
@pytest.mark.parametrize("screen", [True, False])
def test_a_character_constant_in_a_section_name_puts_no_file_in_the_object(screen: bool) -> None:
    outcome = build_solution(_plain_with(CHAR_QUOTE), HOPPER, use_cache=False, screen=screen)
    leaked = outcome.so_path is not None and Path(LEAK).read_bytes()[:4096] in outcome.so_path.read_bytes()
    assert not leaked and outcome.status is Status.STATIC_REJECT, outcome.message


# the sixth reviewer's file: a `section)` the rules did not read as an attribute until nvcc's second host
# pass, a name the backstop skipped as nvcc's own preprocessed file (`leak.cpp1.ii`), and a section name
# whose newline the assembler carries inside its string (the `.incbin` looked quoted line by line)
NEWLINE_SECTION = (
    "#define STR(x) #x\n"
    r'int leak_anchor __attribute__((__text_var(a, __text_var(q, section) ("\"abc\ndef\";" STR(.incbin) '
    r'" \"/etc/ld.so.cache\";.section .rodata.y")))) = 1;'
    "\n"
)


def test_a_compiled_source_name_that_could_pass_for_nvcc_s_own_files_is_refused() -> None:
    base = {"kernel.cu": (KERNELS / "plain.cu").read_text()}
    base["plain_scale.cuh"] = (KERNELS / "plain_scale.cuh").read_text()
    for name in ("leak.cpp1.cu", "leak.cpp4.cu", "x.cudafe1.cu", "kernel_dlink.cu", "a.b.cpp"):
        outcome = build_solution(solution({**base, name: "int x = 1;\n"}), HOPPER, use_cache=False)
        assert outcome.status is Status.COMPILE_ERROR and "no dots" in outcome.message, name
    header = solution({**base, "notes.v2.cuh": "// ok\n"}, entry="kernel.cu::scale_add")
    assert build_solution(header, HOPPER, use_cache=False).ok  # a header's name is free


@pytest.mark.nvcc
@pytest.mark.slow  # ~10 s of nvcc
@pytest.mark.parametrize("screen", [True, False])
def test_a_section_name_with_a_newline_puts_no_file_in_the_object(screen: bool) -> None:
    files = {"kernel.cu": (KERNELS / "plain.cu").read_text(), "leak_x.cu": NEWLINE_SECTION}
    files["plain_scale.cuh"] = (KERNELS / "plain_scale.cuh").read_text()
    outcome = build_solution(solution(files), HOPPER, use_cache=False, screen=screen)
    leaked = outcome.so_path is not None and Path(LEAK).read_bytes()[:4096] in outcome.so_path.read_bytes()
    assert not leaked and outcome.status is Status.STATIC_REJECT, outcome.message


@pytest.mark.nvcc
@pytest.mark.parametrize("pragma", ["warning", "error"])
def test_a_forged_own_header_shows_no_line_of_another_file(pragma: str) -> None:
    """A ninth review's log leak (screen off): GCC quoted another file's line under a forged own header.

    `#line` to a readable file, then a pragma whose message forges the header.
    """
    line = f'#line 1 "{LEAK}"\n#pragma GCC {pragma} "zz\\nkernel.cu:1:1: {pragma}: x"\nint after_line = 1;\n'
    outcome = build_solution(_plain_with(line), HOPPER, use_cache=False, screen=False)
    head = Path(LEAK).read_bytes()[:16].decode("latin-1")
    text = outcome.message + outcome.info.log
    assert head not in text and "glibc-ld.so" not in text, text


@pytest.mark.nvcc
def test_a_host_compiler_header_s_path_is_masked_in_the_log() -> None:
    """The host compiler's header folders are shown as <sys>/ like the toolkit's.

    EDG named GCC's own stddef.h by its host path (a tenth review).
    """
    line = "#include <stddef.h>\ntypedef int max_align_t;\n"
    outcome = build_solution(_plain_with(line), HOPPER, use_cache=False)
    text = outcome.message + outcome.info.log
    assert outcome.status is Status.COMPILE_ERROR and "max_align_t" in text, text
    assert "/usr/lib/gcc" not in text and "<sys>/" in text, text
