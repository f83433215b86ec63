"""Policy stage: static rules over the candidate's source and over the built shared object.

Two layers, because either alone fails (research/ptxbench.md, FACTS.md):

* ``check_source``: rules over the comment-stripped source (line splices joined, comments blanked,
  string literals kept apart), so a banned word in a comment is fine and a variable called
  ``cublas_like_tile`` is not mistaken for a cuBLAS call. It rejects vendor libraries (cuBLAS,
  cuBLASLt, cuDNN, CUTLASS, CuTe), dynamic loading, includes that reach outside the toolchain or the
  solution's own files, file probes and embedding (``__has_include``, ``#embed``, ``.incbin``),
  system calls in inline assembly, inline assembly in host code (``host_asm``), binary bytes and
  oversized sources.
* ``check_artifact``: what the built ``.so`` imports (dynamic symbols) and needs (``DT_NEEDED``),
  against allowlists (no function that loads GPU code at run time or looks it up by name:
  ``CODE_LOADING``), plus a scan of its host code for system-call instructions. This is the layer
  that catches what regex cannot see, e.g. ``dlopen`` spelled by token pasting and a library name
  computed at run time. It is only meaningful because the build uses ``-cudart shared`` (FACTS.md).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import posixpath
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ptxgym.cpu import host_asm
from ptxgym.cpu.host_asm import ALLOWED, find_host_asm

MAX_SOURCE_CHARS = 256 * 1024
"""Cap on the total size of a solution's source files."""
MAX_SOURCE_FILES = 32
_TOOL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ScreenVerdict:
    """Outcome of a policy check; ``rule`` names the broken rule when ``ok`` is False."""

    ok: bool
    rule: str | None
    message: str
    file: str | None = None
    line: int | None = None


PASS = ScreenVerdict(ok=True, rule=None, message="passed the source screen")


# ---------------------------------------------------------------------------------------- lexing


@dataclass(frozen=True)
class _Views:
    """One source file, spliced and split into views that keep character offsets aligned."""

    code: str
    """Comments blanked (newlines kept); string literals intact."""
    bare: str
    """Comments and the insides of string/char literals blanked."""
    strings: list[tuple[int, str]]
    """(offset, text) of each run of adjacent string literals, concatenated."""
    line_starts: list[int]
    line_map: list[int]
    """Original 1-based line of each spliced line."""

    def line_of(self, offset: int) -> int:
        return self.line_map[bisect.bisect_right(self.line_starts, offset) - 1]


_TOKEN = re.compile(
    r"""(?P<cline>//[^\n]*)
      | (?P<cblock>/\*.*?(?:\*/|\Z))
      | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^ ()\\\t\n"]{0,16})\()
      | (?P<str>(?:u8|[uUL])?"(?P<strbody>(?:[^"\\\n]|\\.)*)(?:"|$))
      | (?P<chr>(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*(?:'|$))
      | (?P<num>\.?\d(?:[eEpP][+-]|'(?=\w)|[\w.])*)
      | (?P<ident>[A-Za-z_$\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*)""",
    re.S | re.X | re.M,
)
_BLANK = re.compile(r"[^\n]")
_SPACES = str.maketrans("\f\v", "  ")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _splice(text: str) -> tuple[str, list[int]]:
    """Join backslash-newline continuations (translation phase 2); original line of each new line.

    As the compiler reads it: a leading byte-order mark is dropped, a lone carriage return ends a line,
    a form feed or vertical tab is a space (a directive may hold them between ``#`` and its name).
    """
    text = text.removeprefix("\ufeff")  # a byte-order mark, which the compiler drops too
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_SPACES)
    physical = text.split("\n")
    logical: list[str] = []
    line_map: list[int] = []
    pending: list[str] = []
    start = 1
    for number, line in enumerate(physical, start=1):
        if not pending:
            start = number
        stripped = line.rstrip(" \t")
        if stripped.endswith("\\") and number < len(physical):
            pending.append(stripped[:-1])
            continue
        logical.append("".join(pending) + line)
        line_map.append(start)
        pending = []
    return "\n".join(logical), line_map


def _tokens(text: str) -> Iterator[tuple[str, int, int, tuple[int, int] | None]]:
    """(kind, start, end, span of a literal's contents or None) of each token the views care about.

    A raw string's end (``)delim"``) is found with ``str.find``, once per delimiter that has none left:
    an opener with no end is the identifier before its quote (as nvcc would reject it anyway), so text
    full of unterminated openers lexes in linear time.
    """
    unclosed: dict[str, int] = {}  # delimiter -> an offset after which its end does not occur
    pos = 0
    while m := _TOKEN.search(text, pos):
        kind, start = m.lastgroup or "", m.start()
        if kind == "raw":
            delim, body = m.group("delim"), m.end()
            close = -1 if unclosed.get(delim, len(text) + 1) <= body else text.find(f'){delim}"', body)
            if close < 0:
                unclosed[delim] = min(unclosed.get(delim, body), body)
                quote = text.index('"', start)
                yield "ident", start, quote, None
                pos = quote
                continue
            pos = close + len(delim) + 2
            yield kind, start, pos, (body, close)
            continue
        elif kind == "str":
            yield kind, start, m.end(), m.span("strbody")
        elif kind == "chr":
            token = m.group()
            first = token.index("'") + 1
            last = len(token) - 1 if len(token) > first and token.endswith("'") else len(token)
            yield kind, start, m.end(), (start + first, start + max(first, last))
        else:
            yield kind, start, m.end(), None
        pos = m.end()


def _lex(text: str) -> _Views:
    spliced, line_map = _splice(text)
    code, bare = [], []
    runs: list[tuple[int, int, str]] = []  # start, end, concatenated contents of adjacent literals
    pos = 0
    for kind, start, end, span in _tokens(spliced):
        between = spliced[pos:start]
        code.append(between)
        bare.append(between)
        token = spliced[start:end]
        if kind in ("cline", "cblock"):
            # A comment is one space to the compiler, newlines and all: `#/*<newline>*/define` is a
            # directive, so the views join its lines too (offsets stay aligned; line numbers come
            # from the spliced text).
            blank = " " * len(token)
            code.append(blank)
            bare.append(blank)
        elif span is not None:
            a, b = span
            code.append(token)
            bare.append(spliced[start:a] + _BLANK.sub(" ", spliced[a:b]) + spliced[b:end])
            if kind in ("raw", "str"):
                if runs and not spliced[runs[-1][1] : start].strip():
                    runs[-1] = (runs[-1][0], end, runs[-1][2] + spliced[a:b])
                else:
                    runs.append((start, end, spliced[a:b]))
        else:
            code.append(token)
            bare.append(token)
        pos = end
    code.append(spliced[pos:])
    bare.append(spliced[pos:])
    starts = [0] + [i + 1 for i, ch in enumerate(spliced) if ch == "\n"]
    return _Views("".join(code), "".join(bare), [(s, t) for s, _, t in runs], starts, line_map)


# ----------------------------------------------------------------------------------------- rules


_DIRECTIVE = re.compile(
    r"^[ \t]*(?:#|%:)[ \t]*(?P<name>include_next|include|import|embed)\b[ \t]*(?P<arg>.*)$", re.M
)
_SAFE_HEADER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+\-./]*")
_BANNED_HEADERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^cublas", re.I), "cuBLAS/cuBLASLt header"),
    (re.compile(r"^cudnn", re.I), "cuDNN header"),
    (re.compile(r"^(cutlass|cute)(/|\.h|$)", re.I), "CUTLASS/CuTe header"),
    (re.compile(r"^(cusparse|cusolver|cufft|cutensor|nvshmem|nccl)", re.I), "vendor math/comm library"),
    (re.compile(r"^dlfcn\.h$"), "dynamic-loading header"),
)
_SOURCE_RULES: tuple[tuple[str, str, re.Pattern[str], str], ...] = (
    # (rule, view, pattern, what)
    (
        "vendor-library",
        "bare",
        re.compile(r"\bcublas[A-Z]\w*\s*\(|\bcublas[A-Z]\w*_t\b|\bcublasLt\w*"),
        "cuBLAS/cuBLASLt API",
    ),
    ("vendor-library", "bare", re.compile(r"\bcudnn[A-Z]\w*|\bcudnn_frontend\b"), "cuDNN API"),
    (
        "vendor-library",
        "bare",
        re.compile(r"\b(?:cutlass|cute)\s*::|\bnamespace\s+(?:cutlass|cute)\b"),
        "CUTLASS/CuTe",
    ),
    (
        "dynamic-loading",
        "bare",
        re.compile(
            r"\b(?:dlopen|dlmopen|dlsym|dlvsym|dlinfo|dladdr1?|dl_iterate_phdr|__libc_dlopen_mode|"
            r"__libc_dlsym)\b"
        ),
        "dynamic loading",
    ),
    ("file-probe", "code", re.compile(r"\b__has_include(?:_next)?\b|\b__has_embed\b"), "file probe"),
    ("file-probe", "code", re.compile(r"\bGCC\s+dependency\b"), "file probe (#pragma GCC dependency)"),
    ("asm-injection", "code", host_asm.ASM_STRING_ATTRIBUTE, "an attribute whose string the assembler reads"),
    (
        "asm-injection",
        "code",
        re.compile(r"^[ \t]*(?:#|%:)[ \t]*(?:ident|sccs)\b", re.M),
        "#ident/#sccs (its string reaches the assembler)",
    ),
    ("syscall", "code", re.compile(r"\b(?:syscall|sysenter)\b|\bint\s*\$?0x80\b|\bsvc\s+#?0"), "system call"),
)
_ASM_STRING_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("asm-file-access", re.compile(r"\.(?:incbin|include)\b", re.I), "assembler file inclusion"),
    ("syscall", re.compile(r"\b(?:syscall|sysenter)\b|\bint\s*\$?0x80\b|\bsvc\s+#?0"), "system call in asm"),
)


def _reject(
    rule: str, what: str, file: str, views: _Views | None = None, offset: int | None = None, snippet: str = ""
) -> ScreenVerdict:
    line = views.line_of(offset) if views is not None and offset is not None else None
    where = f"{file}:{line}" if line else file
    snippet = " ".join(snippet.split())[:120]
    message = f"{rule}: {what} at {where}" + (f": `{snippet}`" if snippet else "")
    return ScreenVerdict(ok=False, rule=rule, message=message, file=file, line=line)


def _include_target(arg: str) -> tuple[str | None, str]:
    """(path, kind) for the operand of an include directive; kind is quote, angle or computed."""
    arg = arg.strip()
    m = re.match(r'"([^"\n]*)"', arg) or re.match(r"<([^>\n]*)>", arg)
    if m:
        return m.group(1), "quote" if arg[0] == '"' else "angle"
    return None, "computed"


def _check_include(path: str, kind: str, file: str, files: set[str]) -> tuple[str, str] | None:
    """(rule, what) if the include is not allowed: a solution file, or a plain toolchain header path."""
    if kind == "quote":
        target = posixpath.normpath(posixpath.join(posixpath.dirname(file), path))
        if target in files or posixpath.normpath(path) in files:
            return None
    parts = path.split("/")
    if not _SAFE_HEADER.fullmatch(path) or ".." in parts or "" in parts or "." in parts:
        return "include-path", f"include of {path!r}, which is neither a toolchain header nor a solution file"
    for pattern, what in _BANNED_HEADERS:
        if pattern.search(path):
            return "vendor-library" if "dlfcn" not in path else "dynamic-loading", f"{what} <{path}>"
    return None


def _check_directives(views: _Views, file: str, files: set[str]) -> ScreenVerdict | None:
    for m in _DIRECTIVE.finditer(views.code):
        name, arg = m.group("name"), m.group("arg")
        if name == "embed":
            return _reject("file-embed", "#embed directive", file, views, m.start(), m.group())
        path, kind = _include_target(arg)
        if path is None:
            return _reject(
                "include-computed", f"#{name} of a macro-computed path", file, views, m.start(), m.group()
            )
        bad = _check_include(path, kind, file, files)
        if bad:
            return _reject(bad[0], bad[1], file, views, m.start(), m.group())
    return None


_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,8}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "v": "\v", "f": "\f", "a": "\a", "b": "\b", "0": "\0"}


def _unescape(body: str) -> str:
    """Decode the C escape sequences of a string literal's contents (an escaped ``s`` spells syscall)."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        try:
            if esc[0] in "xuU":
                return chr(int(esc[1:], 16))
            if esc[0] in "01234567":
                return chr(int(esc, 8))
        except (ValueError, OverflowError):
            return " "
        return _SIMPLE_ESCAPES.get(esc, esc)

    return _ESCAPE.sub(one, body)


def _check_file(file: str, views: _Views, files: set[str]) -> ScreenVerdict | None:
    verdict = _check_directives(views, file, files)
    if verdict:
        return verdict
    for rule, view, pattern, what in _SOURCE_RULES:
        m = pattern.search(getattr(views, view))
        if m:
            line_text = views.code.splitlines()[views.code.count("\n", 0, m.start())]
            return _reject(rule, f"{what} (`{m.group().strip()}`)", file, views, m.start(), line_text)
    for offset, string in views.strings:
        decoded = _unescape(string)
        for rule, pattern, what in _ASM_STRING_RULES:
            m = pattern.search(decoded)
            if m:
                return _reject(
                    rule, f"{what} (`{m.group()}` in a string literal)", file, views, offset, string
                )
    # the file's literals joined: a macro between two of them may expand to nothing (`".inc" E "bin"`)
    literals = [(offset, _unescape(string)) for offset, string in views.strings]
    joined = "".join(text for _, text in literals)
    for rule, pattern, what in _ASM_STRING_RULES:
        if m := pattern.search(joined):
            ends = itertools.accumulate(len(text) for _, text in literals)
            at = next(offset for (offset, _), end in zip(literals, ends, strict=True) if end > m.start())
            return _reject(rule, f"{what} (`{m.group()}` across the string literals)", file, views, at)
    return None


def check_source(
    code: str, extra_files: dict[str, str] | None = None, *, entry_name: str = "kernel.cu"
) -> ScreenVerdict:
    """Apply the source rules to the entry file and every other file of the solution. Never raises."""
    files = {entry_name: code, **(extra_files or {})}
    for name, text in files.items():
        if not isinstance(text, str):
            return _reject("binary", f"file content is {type(text).__name__}, not text", name)
    total = sum(len(t) for t in files.values())
    if len(files) > MAX_SOURCE_FILES:
        return _reject("size", f"{len(files)} source files (limit {MAX_SOURCE_FILES})", entry_name)
    if total > MAX_SOURCE_CHARS:
        return _reject("size", f"source of {total:,} characters (limit {MAX_SOURCE_CHARS:,})", entry_name)
    names = set(files)
    views: dict[str, _Views] = {}
    for name, text in files.items():
        bad = _CONTROL.search(text)
        if bad:
            line = text.count("\n", 0, bad.start()) + 1
            message = f"binary: control byte {bad.group()!r} in the source at {name}:{line}"
            return ScreenVerdict(False, "binary", message, file=name, line=line)
        views[name] = _lex(text)
        verdict = _check_file(name, views[name], names)
        if verdict:
            return verdict
    probe = host_asm.pasted_condition({n: v.bare for n, v in views.items()})
    if probe is not None:
        file, offset, macro = probe
        what = f"a #if/#elif condition using {macro}, which pastes tokens (it could spell __has_include)"
        return _reject("file-probe", what, file, views[file], offset)
    found = find_host_asm({n: v.bare for n, v in views.items()}, {n: v.code for n, v in views.items()})
    if found:
        v = views[found.file]
        line_text = v.code.splitlines()[v.code.count("\n", 0, found.offset)]
        return _reject("host-asm", f"{found.what}; {ALLOWED}", found.file, v, found.offset, line_text)
    return PASS


def check_solution_sources(sources: Iterable[tuple[str, str]], entry_name: str) -> ScreenVerdict:
    """``check_source`` over (path, content) pairs, e.g. a ``Solution``'s sources."""
    files = dict(sources)
    return check_source(files.pop(entry_name, ""), files, entry_name=entry_name)


# ----------------------------------------------------------------------------------- artifact check

NEEDED_ALLOWED = frozenset(
    {
        "libtvm_ffi.so",
        "libcudart.so.13",
        "libcuda.so.1",
        "libstdc++.so.6",
        "libgcc_s.so.1",
        "libc.so.6",
        "libm.so.6",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }
)

_LIBC_ALLOWED = frozenset(
    """
malloc free calloc realloc aligned_alloc posix_memalign memalign
memcpy memmove memset memcmp memchr strlen strnlen strcmp strncmp strcpy strncpy strcat strncat strchr strrchr
strstr strdup strerror strtol strtoul strtoll strtoull strtod strtof atoi atol atof abs labs llabs
printf fprintf sprintf snprintf vprintf vfprintf vsnprintf vsprintf puts fputs fputc putc putchar fflush
fwrite
stdout stderr abort exit __assert_fail __stack_chk_fail __stack_chk_guard __errno_location
qsort bsearch rand srand clock_gettime __cxa_atexit __cxa_finalize __cxa_thread_atexit_impl __dso_handle
__tls_get_addr __gmon_start__ _ITM_registerTMCloneTable _ITM_deregisterTMCloneTable __libc_single_threaded
__printf_chk __fprintf_chk __sprintf_chk __snprintf_chk __vsnprintf_chk __vfprintf_chk __vsprintf_chk
__memcpy_chk __memmove_chk __memset_chk __strcpy_chk __strncpy_chk __strcat_chk __fwrite_chk
__isoc23_strtol __isoc23_strtoul __isoc23_strtoll __isoc23_strtoull __isoc99_sscanf __isoc23_sscanf sscanf
pthread_once pthread_mutex_lock pthread_mutex_unlock pthread_mutex_trylock pthread_mutex_init
pthread_mutex_destroy pthread_key_create pthread_key_delete pthread_getspecific pthread_setspecific
pthread_self pthread_equal pthread_cond_wait pthread_cond_signal pthread_cond_broadcast
pthread_cond_destroy pthread_rwlock_rdlock pthread_rwlock_wrlock pthread_rwlock_unlock
""".split()
)
_MATH = re.compile(
    r"(?:sqrt|cbrt|rsqrt|exp|exp2|expm1|log|log2|log10|log1p|pow|fabs|floor|ceil|round|lround|"
    r"llround|trunc|fmod|remainder|fmax|fmin|fma|sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|"
    r"erf|erfc|ldexp|frexp|modf|hypot|nearbyint|rint|lrint|llrint|copysign|nextafter|sincos|"
    r"__isnan|__isinf|__finite|__isnanf|__isinff|__finitef)[fl]?"
)
_CXX_ALLOWED = re.compile(  # std::, libstdc++ internals, the C++ ABI, operator new/delete, tvm::ffi
    r"_Z(?:T[VTIS]|GV)?(?:N[KVR]*)?(?:St|Sa|Sb|Ss|Si|So|Sd|9__gnu_cxx|10__cxxabiv|3tvm3ffi)\w*"
    r"|_Z(?:nw|na|dl|da)\w*|_ZT[IS]P?K?[a-z]"
)
_CXX_DENIED = re.compile(r"filesystem|fstream|filebuf|6thread|this_thread|random_device|stdio_filebuf")
_CXX_RUNTIME = re.compile(r"__cxa_\w+|__gxx_personality_v0|_Unwind_\w+|__aarch64_\w+")
_TVMFFI_DENIED = frozenset(
    {
        "TVMFFIFunctionGetGlobal",
        "TVMFFIFunctionSetGlobal",
        "TVMFFIFunctionSetGlobalFromMethodInfo",
        "TVMFFIEnvSetStream",
        "TVMFFIEnvModLookupFromImports",
        "TVMFFIEnvModRegisterContextSymbol",
        "TVMFFIEnvModRegisterSystemLibSymbol",
        "TVMFFIEnvRegisterCAPI",
        "TVMFFISetCustomAllocator",
        "TVMFFIEnvSetDLPackManagedTensorAllocator",
    }
)
_DYNSYM = re.compile(
    r"^[ \t]*\d+:[ \t]+[0-9a-fA-F]+[ \t]+\S+[ \t]+\w+[ \t]+(?P<bind>\w+)[ \t]+\w+"
    r"(?:[ \t]+\[[^\]\n]*\])?[ \t]+(?P<ndx>\w+)[ \t]+(?P<name>\S+)",
    re.M,
)
_HOST_SYSCALL = re.compile(r"\t(?:syscall|sysenter)\b|\tint\s+\$0x80\b|\tsvc\s")
CODE_LOADING = re.compile(
    r"cu(?:Module|Library)Load\w*|cudaLibraryLoad\w*"  # load a module, cubin, fatbin or library
    r"|cuLink(?:Create|AddData|AddFile|Complete|Destroy)\w*"  # JIT-link one in memory
    r"|cuModule(?:GetFunction|GetGlobal|EnumerateFunctions|GetFunctionCount)\w*"  # look inside one
    r"|cu(?:da)?Library(?:Get|Enumerate)\w*"
    r"|cuGetProcAddress\w*|cudaGetDriverEntryPoint\w*|cu(?:da)?GetExportTable\w*"  # any driver function
)
"""Driver and runtime API functions that load GPU code at run time or look code up by name, as declared
in CUDA 13's ``cuda.h`` and ``cuda_runtime_api.h`` (versioned spellings such as ``cuLinkCreate_v2`` and
``cuGetProcAddress_v2`` included). With them a candidate could launch a cubin it carries as bytes while
its built module holds decoys, or fetch any of them through a pointer; no candidate needs them: its
kernels are launched from the module it built (``<<<...>>>``, ``cudaLaunchKernel*``), and driver
functions such as ``cuTensorMapEncodeTiled`` are imported by name (``-lcuda``)."""


HOST_CALLBACKS = re.compile(r"cu(?:da)?LaunchHostFunc\w*|cu(?:da)?StreamAddCallback\w*")
"""Runtime and driver functions that run a host function on a thread of the CUDA driver. Below Landlock ABI
8 the driver's threads started before the jail are outside it, so such a callback could read what the
candidate's own thread may not; no candidate needs one."""


def policy_fingerprint() -> str:
    """Hash of the rules and allowlists; part of the build cache key, so no cached verdict outlives them."""
    parts = [
        *sorted(NEEDED_ALLOWED),
        *sorted(_LIBC_ALLOWED),
        _MATH.pattern,
        _CXX_ALLOWED.pattern,
        _CXX_DENIED.pattern,
        _CXX_RUNTIME.pattern,
        *sorted(_TVMFFI_DENIED),
        _HOST_SYSCALL.pattern,
        CODE_LOADING.pattern,
        HOST_CALLBACKS.pattern,
        *(p.pattern for _, _, p, _ in _SOURCE_RULES),
        *(p.pattern for _, p, _ in _ASM_STRING_RULES),
        str(MAX_SOURCE_CHARS),
        hashlib.sha256(Path(host_asm.__file__).read_bytes()).hexdigest(),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def import_allowed(name: str, driver_names: frozenset[str] | None = None) -> bool:
    """Whether a dynamic import (version suffix stripped) is on the allowlist."""
    if CODE_LOADING.fullmatch(name) or HOST_CALLBACKS.fullmatch(name):
        return False
    if name in _LIBC_ALLOWED or _MATH.fullmatch(name) or _CXX_RUNTIME.fullmatch(name):
        return True
    if name.startswith("_Z"):
        return bool(_CXX_ALLOWED.fullmatch(name)) and not _CXX_DENIED.search(name)
    if name.startswith("TVMFFI"):
        return name not in _TVMFFI_DENIED
    if re.fullmatch(r"cuda[A-Z]\w*|__cuda\w+", name):
        return True
    if re.fullmatch(r"cu[A-Z]\w*", name):
        return driver_names is None or name in driver_names
    return False


@dataclass(frozen=True)
class DynamicInfo:
    """Dynamic-linking facts of a shared object."""

    imports: list[str]
    """Undefined dynamic symbols, without version suffixes, sorted."""
    exports: list[str]
    """Defined global dynamic symbols."""
    needed: list[str]
    """DT_NEEDED entries, in order."""


_TOOL_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
MAX_ARTIFACT_BYTES = 64 << 20
"""Largest built object inspected (the inspection tools' output grows with it; kernels need a few MiB)."""
MAX_HOST_CODE_BYTES = 16 << 20
"""Largest total of executable sections (host code) inspected; objdump prints a line per instruction."""
_SECTION = re.compile(
    r"^\s*\[\s*\d+\]\s+\S+\s+\S+\s+[0-9a-fA-F]+\s+[0-9a-fA-F]+\s+(?P<size>[0-9a-fA-F]+)\s+"
    r"[0-9a-fA-F]+\s+(?P<flags>[A-Za-z]*)",
    re.M,
)


def _tool(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, env=_TOOL_ENV)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{argv[0]} did not finish within {_TOOL_TIMEOUT_S:g} s") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc.stdout


def artifact_size_problem(so_path: Path) -> ScreenVerdict | None:
    """A STATIC_REJECT verdict for a built object too large to inspect (before any tool reads it)."""
    size = Path(so_path).stat().st_size
    if size > MAX_ARTIFACT_BYTES:
        what = f"the built object is {size / 2**20:.1f} MiB (limit {MAX_ARTIFACT_BYTES >> 20} MiB)"
        return ScreenVerdict(False, "artifact-size", f"artifact-size: {what}", file=Path(so_path).name)
    out = _tool(["readelf", "-W", "-S", str(so_path)])
    code = sum(int(m.group("size"), 16) for m in _SECTION.finditer(out) if "X" in m.group("flags"))
    if code > MAX_HOST_CODE_BYTES:
        what = f"its executable sections hold {code / 2**20:.1f} MiB (limit {MAX_HOST_CODE_BYTES >> 20} MiB)"
        return ScreenVerdict(False, "artifact-size", f"artifact-size: {what}", file=Path(so_path).name)
    return None


def read_dynamic(so_path: Path) -> DynamicInfo:
    """Imports, exports and DT_NEEDED of a shared object (``readelf -W -d --dyn-syms``)."""
    out = _tool(["readelf", "-W", "-d", "--dyn-syms", str(so_path)])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    imports, exports = set(), set()
    for m in _DYNSYM.finditer(out):
        bind, ndx, name = m.group("bind"), m.group("ndx"), m.group("name").split("@")[0]
        if not name:
            continue
        if ndx == "UND":
            imports.add(name)
        elif bind in ("GLOBAL", "WEAK"):
            exports.add(name)
    return DynamicInfo(imports=sorted(imports), exports=sorted(exports), needed=needed)


def host_syscall_sites(so_path: Path) -> list[str]:
    """Disassembled system-call instructions in the host code (``objdump -d``), as text lines.

    The disassembly is read line by line as objdump writes it (never held whole), within the tools' time
    limit.
    """
    argv = ["objdump", "-d", "--no-show-raw-insn", str(so_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_TOOL_ENV)
    timer = threading.Timer(_TOOL_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        sites = [line.strip() for line in proc.stdout if _HOST_SYSCALL.search(line)]
        code = proc.wait()
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
    if code != 0:
        why = f"did not finish within {_TOOL_TIMEOUT_S:g} s" if code < 0 else f"failed (exit {code})"
        raise RuntimeError(f"objdump {why}")
    return sites


def check_artifact(
    so_path: Path,
    *,
    driver_names: frozenset[str] | None = None,
    loader: Callable[[Path], DynamicInfo] = read_dynamic,
) -> tuple[ScreenVerdict, list[str], list[str]]:
    """Check a built ``.so``: (verdict, imports, needed). ``driver_names`` restricts ``cu*`` imports.

    Raises RuntimeError only when the inspection tools themselves fail (an infrastructure fault).
    """
    info = loader(Path(so_path))
    bad_needed = [lib for lib in info.needed if lib not in NEEDED_ALLOWED]
    if bad_needed:
        verdict = ScreenVerdict(
            False,
            "needed-library",
            f"needed-library: the shared object needs {', '.join(bad_needed)}; only "
            f"{', '.join(sorted(NEEDED_ALLOWED))} are allowed",
            file=Path(so_path).name,
        )
        return verdict, info.imports, info.needed
    loading = [name for name in info.imports if CODE_LOADING.fullmatch(name)]
    if loading:
        verdict = ScreenVerdict(
            False,
            "code-loading",
            f"code-loading: the shared object imports {', '.join(loading[:8])}, which load GPU code at run "
            "time or look it up by name; only the kernels built from this source may run. Launch them "
            "directly (<<<...>>> or cudaLaunchKernel*) and call driver functions such as "
            "cuTensorMapEncodeTiled by name (the build links -lcuda)",
            file=Path(so_path).name,
        )
        return verdict, info.imports, info.needed
    banned = [name for name in info.imports if not import_allowed(name, driver_names)]
    if banned:
        shown = ", ".join(banned[:12]) + (f" and {len(banned) - 12} more" if len(banned) > 12 else "")
        verdict = ScreenVerdict(
            False,
            "banned-import",
            f"banned-import: the shared object imports {shown}; candidates may call only "
            "the CUDA runtime/driver, TVM-FFI and basic libc/libstdc++/libm functions",
            file=Path(so_path).name,
        )
        return verdict, info.imports, info.needed
    sites = host_syscall_sites(Path(so_path))
    if sites:
        verdict = ScreenVerdict(
            False,
            "syscall",
            f"syscall: host code contains system-call instructions ({'; '.join(sites[:3])})",
            file=Path(so_path).name,
        )
        return verdict, info.imports, info.needed
    return PASS, info.imports, info.needed
