"""What of nvcc's output the model sees (``ptxgym.cpu.compile_log``), on real logs.

``tests/fixtures/compile_logs/*.log`` are nvcc 13.0 outputs recorded on the CPU build host with the build
stage (scratch paths already cleaned), for one-line kernels: an error in the kernel (``own_error``), an
error inside a pack header (``header_error``; the header tree was under
``/root/.cache/ptxgym/include/561e46280a211c1c``), a ptxas error in inline PTX (``ptxas_error``), a warning
and the resource report (``warning``), and, built with the jail off, ``#include`` and ``.include`` of a
file outside the solution (``/tmp/hb/fx/secret.txt``, three made-up lines): what leaked before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxgym.cpu.compile_log import error_message, shown_log
from ptxgym.cpu.ptxas import parse_ptxas_report

LOGS = Path(__file__).parents[1] / "fixtures" / "compile_logs"
HEADER_TREE = Path("/root/.cache/ptxgym/include/561e46280a211c1c")
SECRET = ("alpha_secret_line_one", "beta secret line two", "gamma_3")


def _log(name: str) -> str:
    return (LOGS / f"{name}.log").read_text()


def _shown(name: str, public: tuple[Path, ...] = (HEADER_TREE, Path("/usr/local/cuda"))) -> str:
    return shown_log(_log(name), ["kernel.cu"], public)


@pytest.mark.parametrize("name", ["include_secret", "asm_include_secret"])
def test_nothing_of_a_file_outside_the_solution_is_shown(name: str) -> None:
    raw, shown = _log(name), _shown(name)
    assert any(s in raw for s in SECRET), "the fixture must hold the leak it guards against"
    assert not any(s in shown for s in SECRET), shown
    assert "not shown]" in shown and "secret.txt" not in shown


def test_diagnostics_in_the_solution_keep_their_source_line_and_caret() -> None:
    assert _shown("own_error") == _log("own_error").rstrip("\n") + "\n"
    message, deterministic = error_message(_log("own_error"), _shown("own_error"), 2, "limits")
    assert deterministic and 'kernel.cu(5): error: expected a ";"' in message and "x[0] = y;" in message


def test_a_header_diagnostic_is_kept_without_the_header_text() -> None:
    shown = _shown("header_error")
    assert shown.count("common.cuh(140): error: floating-point template parameter is nonstandard") == 1
    assert "template <float N>" not in shown  # the header's line, echoed under the error
    assert "2 errors detected in the compilation of" in shown
    assert "[4 lines of compiler output about files outside the solution not shown]" in shown
    # a header that is not one of the allowed roots counts as any other file: nothing of it is shown
    assert "common.cuh" not in _shown("header_error", public=())
    # no host path: the allowed roots are shown as <sys>/
    assert str(HEADER_TREE) not in shown and "<sys>/sm90a/headers/common.cuh(140): error" in shown


def test_assembler_messages_about_a_header_folder_s_file_are_not_shown() -> None:
    """The assembler reads no header: its errors located in an allowed folder quote a file `.include`d."""
    log = f"{HEADER_TREE}/x.profile:7: Error: no such instruction: `secret_token +=$(TOP)/lib:'\n"
    shown = shown_log(log, ["kernel.cu"], (HEADER_TREE,))
    assert "secret_token" not in shown and "not shown" in shown


def test_a_file_the_jail_refuses_reads_as_missing() -> None:
    """`Permission denied` would tell the model that a path it named exists behind the jail."""
    log = "cc1plus: fatal error: /srv/solutions/Gemm.cu: Permission denied\ncompilation terminated.\n"
    shown = shown_log(log, ["kernel.cu"], ())
    assert "Permission denied" not in shown and "<sys>/Gemm.cu: No such file or directory" in shown
    assert "/srv/" not in shown  # and no host folder


def test_ptxas_errors_warnings_and_the_resource_report_stay() -> None:
    assert _shown("ptxas_error") == _log("ptxas_error").rstrip("\n") + "\n"
    shown = _shown("warning")
    assert shown == _log("warning").rstrip("\n") + "\n" and "not shown" not in shown
    assert parse_ptxas_report(shown) == parse_ptxas_report(_log("warning")) != []


def test_intermediates_and_tool_lines_count_as_the_solution() -> None:
    log = (
        "ccXyZ.s: Assembler messages:\n"
        "ccXyZ.s:5: Error: file not found: /etc/passwd\n"
        "kernel.cudafe1.cpp:6: Error: junk\n"
        "kernel.cu: In function 'void run()':\n"
        "kernel.cu:3:5: error: 'x' was not declared in this scope\n"
        "    3 |   x = 1;\n"
        "      |   ^\n"
        "kernel.cu:(.text+0x1c): undefined reference to `missing()'\n"
        "/usr/bin/ld: kernel.o: in function `run':\n"
        "collect2: error: ld returned 1 exit status\n"
        "nvlink error   : Undefined reference to '_Z3foov' in 'kernel.o'\n"
        "nvcc fatal   : Unsupported gpu architecture 'compute_1'\n"
    )
    shown = shown_log(log, {"kernel.cu": "void run() {\n\n  x = 1;\n}\n"}, [])
    assert shown == log.replace("/etc/passwd", "<sys>/passwd").replace("/usr/bin/ld", "<sys>/ld")
    assert "    3 |   x = 1;" not in shown_log(log, ["kernel.cu"], [])  # its text unknown: no quote shown


def test_a_quoted_line_is_shown_only_where_it_is_the_solution_s_own() -> None:
    """GCC reads its quote from disk: under a forged own header it quoted another file (a review's find).

    `#line 1 "/etc/ld.so.cache"` located a `#pragma GCC warning` there, and the message's newline forged
    `kernel.cu:1:1:` under which GCC's quote of the cache's first line was kept (screen off).
    """
    source = {"kernel.cu": 'int a;\n#pragma GCC warning "zz"\n'}
    log = (
        "/etc/ld.so.cache:1:21: warning: zz\n"
        "kernel.cu:1:1: warning: x\n"
        "    1 | glibc-ld.so.cache1.1\n"
        "      |                     ^~~~\n"
        "kernel.cu:1:5: warning: unused\n"
        "    1 | int a;\n"
    )
    shown = shown_log(log, source, [])
    assert "glibc" not in shown and "ld.so.cache" not in shown, shown
    assert "    1 | int a;" in shown  # the solution's own line, quoted


def test_relative_paths_that_leave_the_build_directory_are_foreign() -> None:
    log = "../../etc/passwd(1): error: identifier root is undefined\n  root:x:0:0\n  ^\n"
    shown = shown_log(log, ["kernel.cu"], [])
    assert "root" not in shown and "passwd" not in shown


def test_a_quoted_binary_line_is_not_split_into_kept_pieces() -> None:
    """Lines end at newlines only (a tenth review, screen off: a line of cudafe++).

    A form feed or a file separator in a quoted binary line split it, and its indented pieces were kept
    under a forged own header.
    """
    log = (
        "/usr/local/cuda/bin/cudafe++:8400:21: warning: zz\n"
        "kernel.cu:1:1: warning: x\n"
        " 8400 | \x0c      \x1c  /dvs/p4/build/sw/rel/edg/src/debug.c proc_debug_option\x0b   more\n"
    )
    shown = shown_log(log, {"kernel.cu": "int a;\n"}, [])
    assert "/dvs/p4" not in shown and "proc_debug_option" not in shown and "more" not in shown, shown
    controls = shown_log("kernel.cu:1:1: warning: a\x0cb\x1b[31m\r\n", {"kernel.cu": "int a;\n"}, [])
    assert controls == "kernel.cu:1:1: warning: a?b?[31m\n"


def test_a_kept_line_names_no_host_folder() -> None:
    """Every absolute path's folders are <sys>/, except in GCC's quotes of the solution's own lines.

    The linker's lines named /usr/lib/gcc/... and the toolkit's lib/ (a review).
    """
    log = (
        "/usr/bin/ld: kernel.o: multiple definition of `_init'; "
        "/usr/lib/gcc/x86_64-linux-gnu/12/../../../x86_64-linux-gnu/crti.o:(.init+0x0): first defined here\n"
        "/usr/bin/ld: /usr/local/cuda-13.0/lib/libcudadevrt.a(cuda_device_runtime.o):(.bss+0x8): multiple\n"
        "kernel.cu:1:9: error: x\n"
        "    1 | int a = /usr/x/;\n"
    )
    shown = shown_log(log, {"kernel.cu": "int a = /usr/x/;\n"}, [])
    for path in ("/usr/bin", "/usr/lib", "/usr/local", "cuda-13.0/lib"):
        assert path not in shown.replace("    1 | int a = /usr/x/;", ""), (path, shown)
    assert "<sys>/crti.o" in shown and "<sys>/libcudadevrt.a" in shown and "    1 | int a = /usr/x/;" in shown
