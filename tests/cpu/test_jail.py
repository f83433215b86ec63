"""The build jail (``ptxgym.cpu.jail``): nvcc and every tool it runs read only what a build needs.

The hostile sources are built with the source screen off (``screen=False``), so that the jail, not a text
rule, has to stop them. The file they reach for is this test's own secret, outside every folder the jail
allows, or ``/etc/passwd`` for the spellings that leaked it on the H200. Each must fail to build with the
tool saying it could not read the file, and none of the file's lines may appear in the message or the
log. A control compiles the same assembler directives with the jail off and finds the secret inside the
object, so a jail that silently did nothing fails these tests. Landlock is required (this host has it);
elsewhere the tests skip with the kernel's reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ptxgym.confine import landlock
from ptxgym.confine.launch import Jail
from ptxgym.cpu import jail as jail_mod
from ptxgym.cpu.build import build_key, build_solution, nvcc_flags
from ptxgym.cpu.jail import Confinement, JailError, build_jail, confinement, jail_rules, run_jailed
from ptxgym.cpu.toolchain import find_toolchain
from ptxgym.knowledge_packs.include_tree import pack_include_dirs
from ptxgym.knowledge_packs.variants import PACK_ROOT
from ptxgym.records.arch import HOPPER
from ptxgym.records.feedback import Status
from ptxgym.records.schema import BuildSpec, Solution, SourceFile, SupportedLanguage

ABI, WHY = landlock.abi()
pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(not ABI, reason=f"no Landlock on this kernel: {WHY}")]

SECRET_LINES = ("jail-test-secret-alpha:x:0:0", "jail test secret beta line", "gamma_jail_secret = 42;")
# No TVM-FFI headers: the hostile directive is then met about a second into nvcc instead of after the
# headers' ~4 s of host compilation (every other build of the suite shows the jail lets those through).
# With the jail off such a build fails only later, at the missing export, never with "could not read".
KERNEL = """#define S(x) #x
{evil}
extern "C" int run() {{ return 0; }}
"""
HOSTILE = {
    "incbin": r'asm(".section .rodata\n.incbin \"{path}\"\n.previous");',
    "incbin through a macro": r'asm(".section .rodata\n" S(.incbin) " \"{path}\"\n.previous");',
    "incbin in .irp": r'asm(".section .rodata\n.irp f, {path}\n.incbin \"\\f\"\n.endr\n.previous");',
    "incbin in .macro": r'asm(".macro inc f\n.incbin \"\\f\"\n.endm\n.section .rodata\ninc {path}\n"'
    r'".previous");',
    "assembler .include": r'asm(".include \"{path}\"");',
    "#include quoted": '#include "{path}"',
    "#include angled": "#include <{path}>",
    "#include of a macro": '#define P "{path}"\n#include P',
}
# the files exist: a read that fails is the jail's refusal, which the shown log words as a missing file (a
# "Permission denied" would tell the model that the path exists); as reports .incbin's as "file not found"
DENIED = ("No such file or directory", "file not found")


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("outside") / "secret.txt"
    path.write_text("\n".join(SECRET_LINES) + "\n")
    return path


def _solution(code: str) -> Solution:
    return Solution(
        name="hostile",
        definition="hostile",
        author="ptxgym-tests",
        spec=BuildSpec(
            language=SupportedLanguage.CUDA,
            target_hardware=["sm_90a"],
            entry_point="kernel.cu::run",
            binding="tvm-ffi",
        ),
        sources=[SourceFile(path="kernel.cu", content=code)],
    )


def _build_hostile(spelling: str, path: Path):
    code = KERNEL.format(evil=HOSTILE[spelling].replace("{path}", str(path)))
    return build_solution(_solution(code), HOPPER, screen=False, use_cache=False)


@pytest.mark.parametrize(
    "spelling",
    # one spelling in the fast subset (-m "not slow"), every spelling in the full suite (~1 s of nvcc each)
    [pytest.param(s, marks=() if s == "incbin" else pytest.mark.slow) for s in sorted(HOSTILE)],
)
def test_a_file_outside_the_jail_cannot_be_read(spelling: str, secret: Path) -> None:
    outcome = _build_hostile(spelling, secret)
    text = f"{outcome.message}\n{outcome.info.log}"
    assert outcome.so_path is None and not any(line in text for line in SECRET_LINES), text
    if outcome.status is Status.STATIC_REJECT:  # a failed build's host asm is refused before its log shows
        assert outcome.message.startswith("host-asm"), (
            text
        )  # (the jail alone: test_control_without_the_jail_*)
    else:
        assert outcome.status is Status.COMPILE_ERROR, text  # nvcc itself failed: the jail, not a check
        assert any(d in text for d in DENIED) and str(secret) in text and "Permission denied" not in text
    assert outcome.info.confinement and outcome.info.confinement.startswith(f"Landlock ABI {ABI}")


@pytest.mark.parametrize(
    "spelling",
    [
        "incbin through a macro",
        pytest.param("incbin in .irp", marks=pytest.mark.slow),
        pytest.param("#include quoted", marks=pytest.mark.slow),
    ],
)
def test_etc_passwd_cannot_be_read(spelling: str) -> None:
    outcome = _build_hostile(spelling, Path("/etc/passwd"))
    text = f"{outcome.message}\n{outcome.info.log}"
    assert outcome.status in (Status.COMPILE_ERROR, Status.STATIC_REJECT) and outcome.so_path is None, text
    lines = [ln for ln in Path("/etc/passwd").read_text().splitlines() if len(ln) > 8]
    assert lines and not any(line in text for line in lines)


def test_a_shipped_solution_cannot_be_included_by_absolute_path() -> None:
    """Item 1 with the source screen off: the packs' other files are outside the jail, not only off -I."""
    path = PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu"
    code = KERNEL.format(evil=f'#include "{path}"')
    solution = _solution(code)
    outcome = build_solution(
        solution, HOPPER, screen=False, use_cache=False, include_dirs=pack_include_dirs("sm_90a")
    )
    assert path.is_file()  # so its "missing" is the jail's refusal, worded like a missing file's
    assert outcome.status is Status.COMPILE_ERROR and "No such file" in outcome.message, outcome.message
    assert "Permission denied" not in outcome.message + outcome.info.log


def _compile_object(kind: str, directory: Path, secret: Path) -> tuple[int, bytes, str]:
    """nvcc -c of a host .incbin of ``secret`` in the jail of ``kind``: (exit, object bytes, output)."""
    confined = Confinement(kind, "", sockets_filtered=True)
    toolchain = find_toolchain()
    evil = HOSTILE["incbin in .irp"].replace("{path}", str(secret))
    (directory / "evil.cu").write_text(KERNEL.format(evil=evil))
    argv = [str(toolchain.nvcc), *nvcc_flags(HOPPER, toolchain), "-c", "evil.cu", "-o", "evil.o"]
    jail = build_jail(toolchain, (), directory, (120.0, 8192), confined)
    code, _, output = run_jailed(argv, directory, toolchain.subprocess_env(directory), 120.0, jail)
    obj = directory / "evil.o"
    return code, obj.read_bytes() if obj.exists() else b"", output


@pytest.mark.slow  # ~2 s of nvcc
def test_control_without_the_jail_the_assembler_embeds_the_file(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    code, obj, _ = _compile_object("off", tmp_path / "off", secret)
    assert code == 0 and SECRET_LINES[0].encode() in obj  # what the jail is there to stop
    code, obj, output = _compile_object("landlock", tmp_path / "on", secret)
    assert code != 0 and SECRET_LINES[0].encode() not in obj and "file not found" in output


def test_the_rules_allow_the_toolchain_and_nothing_of_the_packs_or_the_user(tmp_path: Path) -> None:
    toolchain = find_toolchain()
    includes = pack_include_dirs("sm_90a")
    rules = jail_rules(toolchain, includes, tmp_path)
    granted = [Path(p) for p in (*rules.read, *rules.execute, *rules.write, *rules.devices)]

    def reachable(path: Path) -> bool:
        return any(path.resolve() == g or path.resolve().is_relative_to(g) for g in granted)

    assert rules.write == (str(tmp_path.resolve()),) and rules.devices == ("/dev/null",)
    assert reachable(toolchain.cuda_home / "bin" / "nvcc") and reachable(toolchain.tvm_ffi_include)
    assert all(reachable(d / "x.cuh") for d in includes)
    for path in (
        PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu",
        PACK_ROOT / "sm100a" / "validation" / "tcgen05_mma.cu",
        Path("/etc/passwd"),
        Path("/proc/self/environ"),
        Path.home() / ".bash_history",
        Path(__file__),
        tmp_path.parent / "elsewhere",
    ):
        assert not reachable(path), path


def test_strict_mode_refuses_to_build_without_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(landlock, "abi", lambda: (0, "simulated: no Landlock"))
    monkeypatch.setenv("PTXGYM_SANDBOX", "strict")
    with pytest.raises(JailError, match="strict sandbox mode.*simulated: no Landlock"):
        build_solution(_solution(KERNEL.format(evil="")), HOPPER, use_cache=False)
    monkeypatch.setenv("PTXGYM_SANDBOX", "on")
    fallback = confinement()
    assert fallback.kind == "unconfined" and "simulated: no Landlock" in fallback.detail
    assert "source screen was the only guard" in fallback.detail
    monkeypatch.setenv("PTXGYM_SANDBOX", "off")
    assert confinement().kind == "off"


def test_the_socket_filter_is_probed_and_its_absence_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    assert jail_mod.socket_filter_problem() == ""  # this host has seccomp
    monkeypatch.setattr(jail_mod, "socket_filter_problem", lambda: "simulated: no seccomp")
    on = confinement()
    assert on.kind == "landlock" and not on.sockets_filtered and "sockets not filtered" in on.detail
    monkeypatch.setenv("PTXGYM_SANDBOX", "strict")
    with pytest.raises(JailError, match="no socket filter"):
        confinement()


def test_an_unconfined_build_never_serves_a_confined_one() -> None:
    toolchain = find_toolchain()
    solution = _solution(KERNEL.format(evil=""))
    keys = {build_key(solution, HOPPER, toolchain, (), kind) for kind in ("landlock", "unconfined", "off")}
    assert len(keys) == 3


def test_a_jail_that_cannot_be_applied_is_an_infrastructure_error(tmp_path: Path) -> None:
    with pytest.raises(JailError, match="could not be confined"):
        run_jailed(["/bin/true"], tmp_path, {}, 30.0, Jail(rlimits={"RLIMIT_NOT_A_LIMIT": 1}))


def test_tool_paths_come_from_the_compilers_own_answers() -> None:
    paths = jail_mod.tool_paths(find_toolchain())
    gxx = subprocess.run(["g++", "-print-prog-name=cc1plus"], capture_output=True, text=True).stdout.strip()
    assert any(Path(gxx).resolve().is_relative_to(p) for p in paths.execute)
    assert any(Path("/usr/include/stdio.h").resolve().is_relative_to(p) for p in paths.read)


def test_a_capped_log_keeps_whole_lines_on_both_sides_of_the_cut(tmp_path) -> None:
    """Whole lines on both sides of the cut (a tenth review's untested risk).

    The tail's first line began part-way through a line: `nvcc ...` there passed the log filter as a
    tool's own message.
    """
    from ptxgym.cpu.jail import LOG_HEAD_BYTES, LOG_TAIL_BYTES, _read_capped

    line = "x" * 99 + "\n"
    body = line * ((LOG_HEAD_BYTES + LOG_TAIL_BYTES) // 100 + 50)
    body = (
        body[: -(LOG_TAIL_BYTES + 40)] + "foreign-stuff nvcc fake tool line\n" + body[-(LOG_TAIL_BYTES + 5) :]
    )
    path = tmp_path / "log"
    path.write_text(body)
    text = _read_capped(path)
    head, cut, tail = text.partition("\n[...")
    assert all(ln == "x" * 99 for ln in head.split("\n")), "the head ends at a whole line"
    after = tail.split("\n", 1)[1]
    assert all(ln in ("", "x" * 99) for ln in after.split("\n")), "the tail starts at a whole line"
    assert len(text) < len(body)


def test_every_build_runs_below_the_evaluators_cpu_priority() -> None:
    from ptxgym.cpu.jail import BUILD_NICE

    for kind in ("off", "landlock"):
        jail = build_jail(find_toolchain(), (), Path("/tmp"), (120.0, 8192), Confinement(kind, "", True))
        assert jail.nice == BUILD_NICE > 0


def test_builds_run_under_sched_idle_only_when_asked(monkeypatch, caplog) -> None:
    from ptxgym.cpu import jail as jail_module

    def made() -> bool:
        confined = Confinement("off", "", True)
        return build_jail(find_toolchain(), (), Path("/tmp"), (120.0, 8192), confined).idle

    monkeypatch.delenv("PTXGYM_BUILD_PRIORITY", raising=False)
    assert not made()
    monkeypatch.setenv("PTXGYM_BUILD_PRIORITY", "idle")
    assert made()
    monkeypatch.setenv("PTXGYM_BUILD_PRIORITY", "realtime")  # no such priority: logged, builds at their nice
    monkeypatch.setattr(jail_module, "_PRIORITY_WARNED", False)
    assert not made()
    assert "PTXGYM_BUILD_PRIORITY must be one of nice, idle" in caplog.text
