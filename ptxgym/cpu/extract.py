"""Extract stage: pull the CUDA source out of a model response.

Rules (a precise EXTRACT_ERROR message for each way it can fail; this module never raises):

* Fenced blocks (```` ``` ```` or ``~~~``, any indentation) whose info string names C/C++/CUDA
  (``cuda``, ``cu``, ``cpp``, ``c++``, ``cc``, ``cxx``, ``c``, ``cuh``, ...) are candidates; a bare
  fence counts only when its body looks like a CUDA kernel.
* Of several candidates, the last one that looks like a kernel (a TVM-FFI export, a ``__global__``
  function or a ``TensorView`` parameter) wins; failing that, the last non-empty C/C++/CUDA block.
* A block whose closing fence is missing (a truncated response) runs to the end of the text.
* Empty text, text over the size cap, binary junk (NUL bytes, control characters, undecodable bytes),
  no code block, and blocks only in other languages are reported as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_RESPONSE_CHARS = 1_000_000
"""Responses longer than this are rejected unread (no model writes a megabyte of kernel)."""
MAX_CONTROL_FRACTION = 0.001
"""Share of control characters (other than tab, newline, CR, form feed) above which text is binary."""

CUDA_FENCES = frozenset(
    {
        "cuda",
        "cu",
        "cuh",
        "cpp",
        "c++",
        "cc",
        "cxx",
        "c",
        "h",
        "hpp",
        "hh",
        "hxx",
        "cuda-c",
        "cuda-cpp",
        "cuda-c++",
        "cudacpp",
        "ptx-cuda",
    }
)
_FENCE_OPEN = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
_KERNEL_MARKERS = re.compile(r"TVM_FFI_DLL_EXPORT_TYPED_FUNC|__global__|\bTensorView\b")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Extracted:
    """Outcome of extraction: ``code`` is None exactly when extraction failed (see ``message``)."""

    code: str | None
    fence: str | None
    """Info string of the chosen fence (``cuda``, ``cpp``, ... ``""`` for a bare fence)."""
    message: str
    """What was taken, or why nothing could be."""

    @property
    def ok(self) -> bool:
        """Whether a code block was extracted."""
        return self.code is not None


@dataclass(frozen=True)
class _Block:
    info: str
    body: str
    closed: bool
    line: int
    """1-based line of the opening fence."""

    @property
    def lang(self) -> str:
        return self.info.split()[0].lower().strip(".{}") if self.info.split() else ""

    @property
    def is_cuda_lang(self) -> bool:
        return self.lang in CUDA_FENCES

    @property
    def looks_like_kernel(self) -> bool:
        return bool(_KERNEL_MARKERS.search(self.body))


def _fail(message: str) -> Extracted:
    return Extracted(code=None, fence=None, message=message)


def _decode(text: object) -> tuple[str | None, str | None]:
    """(text, None) or (None, error message) for anything that is not usable text."""
    if text is None:
        return None, "the response is empty (None); answer with the kernel in a ```cuda code block"
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, f"the response is not valid UTF-8 text (bad byte at offset {exc.start}): binary junk"
    if not isinstance(text, str):
        return None, f"the response must be text, got {type(text).__name__}"
    return text, None


def _binary_problem(text: str) -> str | None:
    """Why the text looks like binary data, or None."""
    if "\x00" in text:
        offset = text.index("\x00")
        return f"the response contains NUL bytes (first at offset {offset}): binary junk, not text"
    controls = len(_CONTROL.findall(text))
    if controls > max(8, MAX_CONTROL_FRACTION * len(text)):
        return f"the response contains {controls} control characters: binary junk, not text"
    bad = text.count("\ufffd")
    if bad > max(8, MAX_CONTROL_FRACTION * len(text)):
        return f"the response contains {bad} undecodable characters (U+FFFD): binary junk, not text"
    return None


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in order; an unclosed last block runs to the end of the text."""
    lines = text.split("\n")
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        blocks.append(_Block(info=info, body="\n".join(lines[i + 1 : j]), closed=j < len(lines), line=i + 1))
        i = j + 1
    return blocks


def _choose(blocks: list[_Block]) -> _Block | None:
    candidates = [b for b in blocks if b.is_cuda_lang or (b.lang == "" and b.looks_like_kernel)]
    for block in reversed(candidates):
        if block.looks_like_kernel and block.body.strip():
            return block
    for block in reversed(candidates):
        if block.is_cuda_lang and block.body.strip():
            return block
    return None


def _no_block_message(blocks: list[_Block]) -> str:
    if not blocks:
        return "no fenced code block found; answer with the complete kernel source in a ```cuda block"
    langs = sorted({b.lang or "(no language)" for b in blocks})
    if all(not b.body.strip() for b in blocks if b.is_cuda_lang) and any(b.is_cuda_lang for b in blocks):
        return "the ```cuda/```cpp code block is empty; put the complete kernel source inside it"
    return (
        f"found {len(blocks)} code block(s) but none in CUDA/C++ (languages: {', '.join(langs)}); "
        "the kernel must be CUDA C++ in a ```cuda or ```cpp block"
    )


def extract_code(text: str, *, allow_bare_source: bool = False) -> Extracted:
    """Extract the kernel source from a model response. Never raises.

    ``allow_bare_source`` accepts a text with no fences at all when it looks like a kernel (for
    ``ptxgym check FILE`` on a plain ``.cu`` file); model responses keep the default.
    """
    decoded, error = _decode(text)
    if decoded is None:
        return _fail(error or "unusable response")
    if len(decoded) > MAX_RESPONSE_CHARS:
        return _fail(
            f"the response is {len(decoded):,} characters, over the {MAX_RESPONSE_CHARS:,}-"
            "character limit; nothing was extracted (send only the kernel)"
        )
    if not decoded.strip():
        return _fail("the response is empty; answer with the kernel in a ```cuda code block")
    problem = _binary_problem(decoded)
    if problem:
        return _fail(problem)
    decoded = decoded.replace("\r\n", "\n")
    blocks = _blocks(decoded)
    if not blocks and allow_bare_source and _KERNEL_MARKERS.search(decoded):
        return Extracted(code=decoded, fence=None, message="took the whole text as source (no code fence)")
    chosen = _choose(blocks)
    if chosen is None:
        return _fail(_no_block_message(blocks))
    label = chosen.lang or "bare"
    where = f"the ```{label} block at line {chosen.line}"
    if len(blocks) > 1:
        where += f" (block {blocks.index(chosen) + 1} of {len(blocks)})"
    note = "" if chosen.closed else "; its closing fence is missing (truncated response?), took it to the end"
    return Extracted(code=chosen.body + "\n", fence=chosen.lang, message=f"took {where}{note}")
