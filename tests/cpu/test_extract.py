"""Extract stage: which block is taken from a model response, and the message for every failure."""

from __future__ import annotations

import pytest

from ptxgym.cpu.extract import MAX_RESPONSE_CHARS, extract_code

KERNEL = """#include <tvm/ffi/tvm_ffi.h>
__global__ void k(float* x) { x[threadIdx.x] = 1.f; }
void run(tvm::ffi::TensorView x) { k<<<1, 32>>>(static_cast<float*>(x.data_ptr())); }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);"""


def fenced(body: str, info: str = "cuda", fence: str = "```") -> str:
    return f"{fence}{info}\n{body}\n{fence}\n"


@pytest.mark.parametrize(
    "info", ["cpp", "cuda", "c++", "cu", "cc", "c", "cxx", "CUDA", "cpp title=kernel.cu"]
)
def test_accepted_fences(info: str) -> None:
    got = extract_code("Here is the kernel.\n\n" + fenced(KERNEL, info) + "\nIt uses wgmma.")
    assert got.ok and got.code == KERNEL + "\n"
    assert got.fence == info.split()[0].lower()


def test_tilde_fence_and_indented_fence() -> None:
    assert extract_code(fenced(KERNEL, "cuda", "~~~")).code == KERNEL + "\n"
    indented = "1. the code:\n   ```cuda\n" + KERNEL + "\n   ```\n"
    assert extract_code(indented).ok


def test_bare_fence_only_when_it_looks_like_cuda() -> None:
    assert extract_code(fenced(KERNEL, "")).code == KERNEL + "\n"
    got = extract_code(fenced("pip install ptxgym", ""))
    assert not got.ok and "none in CUDA/C++" in got.message


def test_last_kernel_block_wins_over_later_snippets() -> None:
    first = KERNEL.replace("1.f", "2.f")
    text = (
        fenced(first, "cpp")
        + "Improved version:\n"
        + fenced(KERNEL, "cuda")
        + "Compile with:\n"
        + fenced("nvcc -O3 kernel.cu", "bash")
        + "A helper alone:\n"
        + fenced("__device__ int helper();", "cpp")
    )
    got = extract_code(text)
    assert got.code == KERNEL + "\n"
    assert "block 2 of 4" in got.message


def test_falls_back_to_last_non_empty_cuda_block() -> None:
    got = extract_code(fenced("int helper() { return 1; }", "cpp") + fenced("", "cpp"))
    assert got.code == "int helper() { return 1; }\n"


def test_missing_closing_fence_is_tolerated_and_said() -> None:
    got = extract_code("Answer:\n```cuda\n" + KERNEL)
    assert got.code == KERNEL + "\n"
    assert "closing fence is missing" in got.message


def test_crlf_line_endings() -> None:
    got = extract_code(fenced(KERNEL, "cuda").replace("\n", "\r\n"))
    assert got.ok and "\r" not in (got.code or "")


def test_allow_bare_source_for_plain_files() -> None:
    assert not extract_code(KERNEL).ok
    got = extract_code(KERNEL, allow_bare_source=True)
    assert got.code == KERNEL and got.fence is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("   \n\t  ", "empty"),
        (None, "empty"),
        ("I would write a kernel with wgmma and TMA.", "no fenced code block"),
        (fenced("import torch\nprint(torch.mm)", "python"), "none in CUDA/C++ (languages: python)"),
        (fenced("", "cuda"), "block is empty"),
        ("```cuda\n\x00\x01\x02ELF\x00\x00" + KERNEL + "\n```", "NUL bytes"),
        ("".join(chr(c) for c in range(1, 32) if c not in (9, 10, 13)) * 20, "control characters"),
        (b"\xff\xfe\x00junk\x80", "not valid UTF-8"),
        (12345, "must be text"),
    ],
)
def test_bad_responses_give_precise_messages(text: object, needle: str) -> None:
    got = extract_code(text)  # type: ignore[arg-type]
    assert got.code is None and got.fence is None and not got.ok
    assert needle in got.message


def test_utf8_bytes_are_accepted() -> None:
    assert extract_code(fenced(KERNEL + "  // µs").encode()).ok


def test_megabytes_are_capped_and_said() -> None:
    text = fenced(KERNEL) + "x" * (3 * 1024 * 1024)
    got = extract_code(text)
    assert not got.ok
    assert f"{MAX_RESPONSE_CHARS:,}-character limit" in got.message and f"{len(text):,}" in got.message


def test_random_printable_text_never_raises() -> None:
    import random

    rng = random.Random(0)
    alphabet = "`~abc{}()<>#\n\t \"'\\/*cpp cuda __global__ TensorView"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        got = extract_code(text)
        assert isinstance(got.message, str) and got.message
        assert got.ok == (got.code is not None)
