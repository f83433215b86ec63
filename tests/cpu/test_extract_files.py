"""Several files in one response: one fenced block per file, named after the language tag."""

from __future__ import annotations

import pytest

from ptxgym.cpu.extract import ENTRY_FILE, MAX_FILES, extract_code, extract_sources, file_name

HEADER = "#pragma once\n__device__ inline float twice(float x) { return 2.f * x; }"
KERNEL = '#include "tile.h"\n__global__ void k(float* y) { y[0] = twice(y[0]); }'


def fence(info: str, body: str) -> str:
    return f"```{info}\n{body}\n```"


def test_two_named_files() -> None:
    got = extract_sources(f"Here:\n{fence('cpp tile.h', HEADER)}\nand\n{fence('cuda kernel.cu', KERNEL)}\n")
    assert got.files == {"tile.h": HEADER + "\n", ENTRY_FILE: KERNEL + "\n"}
    assert got.message == "took 2 files: tile.h (line 2), kernel.cu (line 7)"


@pytest.mark.parametrize(
    ("info", "name"),
    [
        ("cuda kernel.cu", "kernel.cu"),
        ('cpp title="src/tile.h"', "src/tile.h"),
        ("cpp file=tile.cuh", "tile.cuh"),
        ("cu:kernel.cu", "kernel.cu"),
        ("kernel.cu", "kernel.cu"),
        ("cpp ../tile.h", None),
        ("cpp /etc/passwd.h", None),
        ("cpp a/../../b.h", None),
        ("cpp tile.py", None),
        ("cpp", None),
    ],
)
def test_file_names(info: str, name: str | None) -> None:
    assert file_name(info) == name


def test_last_block_of_a_name_wins_and_unnamed_blocks_are_ignored() -> None:
    text = "\n".join(
        [
            fence("cuda kernel.cu", "old"),
            fence("cuda", "__global__ void stray() {}"),
            fence("cuda kernel.cu", KERNEL),
        ]
    )
    got = extract_sources(text)
    assert got.files == {ENTRY_FILE: KERNEL + "\n"}
    assert "replaced an earlier one" in got.message and "1 unnamed code block(s) ignored" in got.message


def test_without_a_kernel_cu_block_the_one_file_rules_apply_and_say_how() -> None:
    text = f"{fence('cpp tile.h', HEADER)}\n{fence('cuda', KERNEL)}\n"
    got = extract_sources(text)
    assert got.files == {ENTRY_FILE: KERNEL + "\n"}
    assert "blocks named tile.h were not taken as files" in got.message and "```cuda kernel.cu" in got.message


@pytest.mark.parametrize(
    "text",
    [
        fence("cuda", KERNEL),
        "prose\n" + fence("cpp", "int x;") + "\n" + fence("cuda", KERNEL) + "\ntrailing",
        "```cuda\n" + KERNEL,  # truncated
        "no code at all",
        "",
    ],
)
def test_one_file_answers_are_extracted_as_before(text: str) -> None:
    old, new = extract_code(text), extract_sources(text)
    assert new.message == old.message
    assert new.files == (None if old.code is None else {ENTRY_FILE: old.code})


def test_limits() -> None:
    many = (
        "\n".join(fence(f"cpp h{i}.h", "int x;") for i in range(MAX_FILES))
        + "\n"
        + fence("cuda kernel.cu", KERNEL)
    )
    got = extract_sources(many)
    assert got.files is None and f"at most {MAX_FILES}" in got.message
    empty = extract_sources(fence("cpp tile.h", HEADER) + "\n" + fence("cuda kernel.cu", "  "))
    assert empty.files is None and "kernel.cu block is empty" in empty.message
    junk = extract_sources("\x00" * 10)
    assert junk.files is None and "NUL bytes" in junk.message
