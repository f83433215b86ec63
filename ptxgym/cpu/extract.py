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

Several files (``extract_sources``): when a block names ``kernel.cu`` in its info string (```` ```cuda
kernel.cu ````; also ``title=kernel.cu`` or ``cuda:kernel.cu``), every block that names a file becomes
that file (the last block of a name wins) and unnamed blocks are ignored. Names are relative paths of
letters, digits, ``_ . -`` and ``/`` with a C/C++/CUDA extension, at most ``MAX_FILES`` of them; the
entry file is ``kernel.cu``. Without a block named ``kernel.cu`` the one-file rules above apply.
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
ENTRY_FILE = "kernel.cu"
"""The file of a response that holds the entry point (``kernel.cu::run``)."""
MAX_FILES = 16
_FILE_NAME = re.compile(
    r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}(?:/[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}){0,3}"
    r"\.(?:cu|cuh|h|hh|hpp|hxx|cpp|cc|cxx|inl|inc)"
)
_NAME_KEYS = ("title=", "file=", "filename=", "path=", "name=")
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
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no file, hash or log line can hold it
        return None, f"the response is not valid Unicode (lone surrogate at offset {exc.start}): binary junk"
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


def _prepare(text: object) -> tuple[str | None, str]:
    """(usable text with CRLF normalised, "") or (None, why it is unusable)."""
    decoded, error = _decode(text)
    if decoded is None:
        return None, error or "unusable response"
    if len(decoded) > MAX_RESPONSE_CHARS:
        return None, (
            f"the response is {len(decoded):,} characters, over the {MAX_RESPONSE_CHARS:,}-"
            "character limit; nothing was extracted (send only the kernel)"
        )
    if not decoded.strip():
        return None, "the response is empty; answer with the kernel in a ```cuda code block"
    problem = _binary_problem(decoded)
    if problem:
        return None, problem
    return decoded.replace("\r\n", "\n"), ""


def extract_code(text: str, *, allow_bare_source: bool = False) -> Extracted:
    """Extract the kernel source from a model response. Never raises.

    ``allow_bare_source`` accepts a text with no fences at all when it looks like a kernel (for
    ``ptxgym check FILE`` on a plain ``.cu`` file); model responses keep the default.
    """
    decoded, error = _prepare(text)
    if decoded is None:
        return _fail(error)
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


@dataclass(frozen=True)
class ExtractedFiles:
    """Outcome of extracting one or several files: ``files`` is None exactly when extraction failed."""

    files: dict[str, str] | None
    """Path -> content; the entry file is ``ENTRY_FILE``."""
    message: str

    @property
    def ok(self) -> bool:
        """Whether source files were extracted."""
        return self.files is not None


def file_name(info: str) -> str | None:
    """The file a fence's info string names (```` ```cuda kernel.cu ````, ``title="a.h"``, ``cu:a.cu``)."""
    for token in info.split():
        token = token.strip()
        for key in _NAME_KEYS:
            if token.lower().startswith(key):
                token = token[len(key) :]
        token = token.strip("\"'`")
        if ":" in token:
            token = token.split(":", 1)[1]
        if _FILE_NAME.fullmatch(token):
            return token
    return None


def extract_sources(text: str, *, allow_bare_source: bool = False) -> ExtractedFiles:
    """Extract the solution files of a model response (one file, or several; see the module doc)."""
    decoded, error = _prepare(text)
    if decoded is None:
        return ExtractedFiles(None, error)
    blocks = _blocks(decoded)
    named = [(b, n) for b in blocks if (n := file_name(b.info)) is not None and _named_lang_ok(b, n)]
    if not any(n == ENTRY_FILE for _, n in named):
        got = extract_code(decoded, allow_bare_source=allow_bare_source)
        if got.code is None:
            return ExtractedFiles(None, got.message)
        others = sorted({n for _, n in named})
        hint = (
            f" (blocks named {', '.join(others)} were not taken as files: name the entry block "
            f"{ENTRY_FILE}, e.g. ```cuda {ENTRY_FILE}, to send several files)"
            if others
            else ""
        )
        return ExtractedFiles({ENTRY_FILE: got.code}, got.message + hint)
    files: dict[str, str] = {}
    lines: dict[str, int] = {}
    for block, name in named:
        files[name], lines[name] = block.body + "\n", block.line
    if len(files) > MAX_FILES:
        return ExtractedFiles(None, f"the response names {len(files)} files; at most {MAX_FILES} are taken")
    if not files[ENTRY_FILE].strip():
        return ExtractedFiles(None, f"the {ENTRY_FILE} block is empty; put the entry point (run) in it")
    taken = ", ".join(f"{n} (line {lines[n]})" for n in files)
    notes = []
    if len(named) > len(files):
        notes.append("a later block of the same name replaced an earlier one")
    unnamed = sum(1 for b in blocks if file_name(b.info) is None and (b.is_cuda_lang or b.looks_like_kernel))
    if unnamed:
        notes.append(f"{unnamed} unnamed code block(s) ignored")
    if any(not b.closed for b, _ in named):
        notes.append("a closing fence is missing (truncated response?)")
    return ExtractedFiles(files, f"took {len(files)} files: {taken}" + "".join(f"; {n}" for n in notes))


def _named_lang_ok(block: _Block, name: str) -> bool:
    """A named block counts when its language is C/C++/CUDA, absent, or the name itself."""
    return block.is_cuda_lang or block.lang in ("", name.lower()) or block.lang.endswith(":" + name.lower())
