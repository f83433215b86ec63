"""Host-side inline assembly: found in the candidate's source (screen) and in nvcc's host translation (build).

Device inline assembly (PTX) is what the product is about. Host inline assembly is never needed by a
candidate, and it is how one reaches the host assembler's file directives (``.incbin``, ``.include``,
built by ``.irp``/``.macro`` or by the preprocessor) or hand-written system calls. So it is rejected, twice:

**The source rule** (``find_host_asm``, run by the source screen; conservative, so it may refuse code the
compiler would have kept on the device). An ``asm``/``__asm``/``__asm__`` token, or a use of a macro of the
solution that can produce one, is allowed only

* inside the body of a function declared ``__global__``, or ``__device__`` without ``__host__`` (blocks
  and lambdas inside such a body belong to it; member functions of a local class need their own
  ``__device__``); the solution's own object-like macros are expanded in the declaration, so
  ``#define DEV __device__ __forceinline__`` works;
* or in lines that only the device pass compiles: the first branch of ``#ifdef __CUDA_ARCH__``,
  ``#if defined(__CUDA_ARCH__)`` or ``#if __CUDA_ARCH__ >= N`` (N > 0, possibly ``&&``-combined), and the
  later branches of ``#ifndef __CUDA_ARCH__``.

Everything else is host code: file scope, host functions, ``__host__ __device__`` functions, class bodies,
initializers and lambdas outside device functions, and every line of a file compiled as plain C++
(``.cpp``/``.cc``/``.cxx``) or included by one. A macro *can produce asm* when its replacement list holds an
asm token, pastes tokens (``##`` can spell one), or uses another such macro. ``#define``/``#undef`` of the
names the rule relies on (the asm spellings, ``__device__``, ``__global__``, ``__host__``,
``__CUDA_ARCH__``) and line directives (``#line``, ``# 12 "file"``, which would re-attribute code to
another file) are rejected. Macros of headers outside the solution are not expanded here.

**The build backstop** reads what the compilers saw, never the source, so no spelling the screen misreads
gets past it, and it trusts no line marker (a ``#line`` can name any file):

* ``host_asm_in_translation`` over nvcc's host translation (``-keep``: the ``*.cudafe1.cpp`` files, device
  bodies in ``#if 0``) and over the host compiler's own preprocessed input (``-save-temps``: ``*.ii``,
  after nvcc's second macro pass): no asm token but symbol labels, no attribute whose string reaches the
  assembler, no ``#ident``;
* ``host_asm_in_assembly`` over the host compiler's assembly (``*.s``): no inline asm block but nvcc's
  fatbinary, no file or macro directive, nothing GCC itself never writes (``;``, character constants, a
  label with more after it).
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ASM = re.compile(r"\b(?:asm|__asm|__asm__)\b")
ASM_STRING_ATTRIBUTE = re.compile(
    r"\b(?:__)?(?:section|symver|alias|ifunc|weakref|fentry_name|fentry_section)(?:__)?\s*\("
)
"""An attribute whose string the host compiler hands to the assembler (``section(".x\n.incbin ...")``
writes assembler lines, and puts bytes in ``.text``); no candidate needs one."""
PROTECTED = frozenset({"asm", "__asm", "__asm__", "__device__", "__global__", "__host__", "__CUDA_ARCH__"})
"""Names a solution may not #define or #undef."""
HOST_ONLY_SUFFIXES = (".cpp", ".cc", ".cxx")
_PASTE_ROUNDS = 8
_ARGS_CHARS = 4096
_OPEN = re.compile(r"[ \t\n]*\(")
_HEAD_CHARS = 8192
"""Declarations longer than this are not parsed: what follows them counts as host code."""
ALLOWED = (
    "inline assembly is allowed only in __global__ or __device__ (not __host__ __device__) functions, "
    "or under #ifdef __CUDA_ARCH__; host code may not use it"
)

_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(?P<name>[A-Za-z_]\w*|\d+)?(?P<rest>.*)$", re.M)
_DEFINE = re.compile(r"(?P<name>[A-Za-z_]\w*)(?P<params>\([^)]*\))?(?P<body>.*)", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_PASTE_TOKEN = re.compile(r"##|\w+|\S")
_SCAN = re.compile(r"[{};]|[A-Za-z_]\w*")
_CLASS_HEAD = re.compile(r"^(?:[\w:\s]*\s)?(?:class|struct|union|enum)\b")
_TEMPLATE = re.compile(r"\btemplate\s*<")
_ATTRIBUTE = re.compile(r"\b(?:alignas|__align__|__attribute__|__declspec)\s*\(")
_QUOTE_INCLUDE = re.compile(r'^[ \t]*(?:#|%:)[ \t]*include[ \t]*"([^"\n]*)"', re.M)
_DEVICE_GUARD = re.compile(
    r"^\(?\s*(?:defined\s*\(?\s*__CUDA_ARCH__\s*\)?|__CUDA_ARCH__\s*(?:>=\s*(?P<ge>\d+)|>\s*\d+|==\s*(?P<eq>\d+)))"
    r"\s*\)?$"
)
_HOST_GUARD = re.compile(r"^\(?\s*!\s*defined\s*\(?\s*__CUDA_ARCH__\s*\)?\s*\)?$")


@dataclass(frozen=True)
class HostAsm:
    """One place where host code may hold inline assembly."""

    file: str
    offset: int
    """Character offset in the (spliced) text given to ``find_host_asm``."""
    what: str


# ------------------------------------------------------------------------------------ the source rule


def find_host_asm(files: Mapping[str, str], code: Mapping[str, str] | None = None) -> HostAsm | None:
    """The first use of inline assembly outside device code, over every file of a solution, or None.

    ``files`` maps each path to its text with comments and the insides of literals blanked and line
    splices joined (``screen``'s ``bare`` view), so offsets match that view; ``code`` is the same with the
    literals kept (``screen``'s ``code`` view), where the rule reads include paths (default: ``files``).
    """
    for name, text in files.items():
        for m in _DIRECTIVE.finditer(text):
            directive, rest = m.group("name") or "", m.group("rest")
            if directive in ("define", "undef"):
                target = _IDENT.match(rest.strip())
                if target and target.group() in PROTECTED:
                    what = f"#{directive} {target.group()} (a name this rule relies on)"
                    return HostAsm(name, m.start(), what)
            elif directive == "line" or directive.isdigit():
                spelled = f"# {directive}" if directive.isdigit() else "#line"
                what = f"{spelled} (a line directive re-attributes code to another file)"
                return HostAsm(name, m.start(), what)
    macros, pasting = _macro_kinds(files.values())
    object_macros = _object_macros(files.values())
    host_only = _host_only_files(code if code is not None else files)
    for name, text in files.items():
        found = _scan_file(name, text, (macros, pasting), object_macros, name in host_only)
        if found:
            return found
    return None


_CONDITION = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(?:if|elif)\b(?P<cond>.*)$", re.M)


def pasted_condition(files: Mapping[str, str]) -> tuple[str, int, str] | None:
    """(file, offset, macro) of the first ``#if``/``#elif`` using a macro built by token pasting, or None.

    ``files`` as for ``find_host_asm``. ``__has_include`` spelled by pasting (``CAT(__has_,include)``)
    escapes the source screen's file-probe rule, and it tells a missing file (false) from one the jail
    refuses (a fatal error): a file-existence oracle (a reviewer's find). No kernel needs a pasted
    preprocessor condition. A macro counts when its body pastes or it uses such a macro, transitively.
    """
    defs = list(_definitions(files.values()))
    users = _users(defs)
    pasting = {name: "" for name, _, body in defs if "##" in body}
    _spread(pasting, users)
    for name, text in files.items():
        for m in _CONDITION.finditer(text):
            used = [w for w in _IDENT.findall(m.group("cond")) if w in pasting]
            if used:
                return name, m.start(), used[0]
    return None


def _users(defs: list[tuple[str, str | None, str]]) -> dict[str, set[str]]:
    """Identifier -> the macros whose replacement list uses it."""
    users: dict[str, set[str]] = {}
    for name, _, body in defs:
        for ident in set(_IDENT.findall(body)):
            users.setdefault(ident, set()).add(name)
    return users


def _definitions(texts: Iterable[str]) -> Iterable[tuple[str, str | None, str]]:
    """(name, parameter list or None, replacement list) of every #define."""
    for text in texts:
        for m in _DIRECTIVE.finditer(text):
            if m.group("name") == "define" and (d := _DEFINE.match(m.group("rest").strip())):
                yield d.group("name"), d.group("params"), d.group("body")


def _macro_kinds(texts: Iterable[str]) -> tuple[dict[str, str], set[str]]:
    """(macros that produce an asm token -> why, pasting macros whose uses must be looked at).

    A macro that pastes (``##``) can spell ``asm`` only from the pieces it pastes: its own tokens next to
    ``##`` and its arguments. Its uses are checked where they appear (``_scan_file``), unless its own
    pieces can spell asm (then every use is asm: ``#define H __as ## m__``); a macro that passes its
    parameters on to a pasting macro is a pasting macro too. Each round is linear in the
    macros' text; when more than ``_PASTE_ROUNDS`` rounds would be needed, every pasting macro counts as
    producing asm.
    """
    defs = list(_definitions(texts))
    found: dict[str, str] = {}
    pasting: set[str] = set()
    spelling: set[str] = set()
    users = _users(defs)
    for name, _, body in defs:
        if ASM.search(body):
            found[name] = f"macro {name} (it expands to inline assembly)"
        elif "##" in body:
            pasting.add(name)
    _spread_pasting(pasting, defs, users)
    parsed = [(name, body, _params(params), _Parens(body)) for name, params, body in defs]
    for _ in range(_PASTE_ROUNDS):
        changed = _spread(found, users)
        targets = _targets(found)
        for name, body, params, parens in parsed:
            if name in found:
                continue
            own = _pasted(body) - params
            if _could_spell_asm(own, targets):
                spelling.add(name)  # its own pieces: asm whatever it is given
            if name in spelling or any(
                _could_spell_asm(parens.arguments(m.end()), targets) for m in _uses(body, pasting)
            ):
                found[name] = f"macro {name} (it pastes tokens that can spell asm)"
                changed = True
        if not changed:
            return found, pasting - spelling
    for name in pasting - set(found):
        found[name] = f"macro {name} (it pastes tokens through more macros than this rule follows)"
    return found, pasting - spelling


def _spread(found: dict[str, str], users: Mapping[str, set[str]]) -> bool:
    """Mark every macro that uses an asm macro, transitively; whether any was added."""
    queue, added = list(found), False
    while queue:
        used = queue.pop()
        for user in users.get(used, ()):
            if user not in found:
                found[user] = f"macro {user} (it uses {used})"
                queue.append(user)
                added = True
    return added


def _spread_pasting(
    pasting: set[str], defs: list[tuple[str, str | None, str]], users: Mapping[str, set[str]]
) -> None:
    """Add every macro that passes its parameters on to a pasting macro, transitively."""
    by_name: dict[str, list[tuple[str | None, str]]] = {}
    for name, params, body in defs:
        by_name.setdefault(name, []).append((params, body))
    queue = list(pasting)
    while queue:
        used = queue.pop()
        for user in users.get(used, ()):
            if user in pasting:
                continue
            for params, body in by_name[user]:
                parens = _Parens(body)
                uses = (m for m in _IDENT.finditer(body) if m.group() == used)
                if any(_passes(parens.arguments(m.end()), _params(params)) for m in uses):
                    pasting.add(user)
                    queue.append(user)
                    break


def _pasted(body: str) -> set[str]:
    """The identifiers next to a ``##`` of a macro body (one pass over its tokens)."""
    tokens = _PASTE_TOKEN.findall(body)
    return {
        t
        for i, t in enumerate(tokens)
        if t != "##"
        and ((i > 0 and tokens[i - 1] == "##") or (i + 1 < len(tokens) and tokens[i + 1] == "##"))
        and _IDENT.fullmatch(t)
    }


def _targets(asm_macros: Mapping[str, str]) -> str:
    """What a paste could aim at, as one searchable string: asm and every asm macro's name."""
    return "\0".join(["__asm__", *asm_macros])


def _params(params: str | None) -> set[str]:
    return set(_IDENT.findall(params or "")) | {"__VA_ARGS__"}


def _uses(text: str, names: set[str]) -> Iterable[re.Match[str]]:
    return (m for m in _IDENT.finditer(text) if m.group() in names)


class _Parens:
    """The matching ``)`` of every ``(`` of a text, found in one pass."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.close: dict[int, int] = {}
        stack: list[int] = []
        for m in re.finditer(r"[()]", text):
            if m.group() == "(":
                stack.append(m.start())
            elif stack:
                self.close[stack.pop()] = m.end()

    def arguments(self, end: int) -> list[str] | None:
        """The identifiers of the argument list that follows offset ``end``.

        [] when no list follows; None when it does not close within ``_ARGS_CHARS`` (then it may hold
        anything).
        """
        m = _OPEN.match(self.text, end)
        if not m:
            return []
        start = m.end() - 1
        stop = self.close.get(start)
        if stop is None or stop - start > _ARGS_CHARS:
            return None
        return _IDENT.findall(self.text, start, stop)


def _passes(arguments: list[str] | None, params: set[str]) -> bool:
    """Whether a macro body hands some of its parameters to a use (an unreadable list may)."""
    return arguments is None or bool(set(arguments) & params)


def _could_spell_asm(pieces: Iterable[str] | None, targets: str) -> bool:
    """Whether pasting these identifiers (with others) could form asm or an asm macro's name."""
    return pieces is None or any(piece in targets for piece in pieces)


def _object_macros(texts: Iterable[str]) -> dict[str, str]:
    return {name: body for name, params, body in _definitions(texts) if params is None}


def _host_only_files(files: Mapping[str, str]) -> set[str]:
    """Files compiled as plain C++ and the solution files they include, transitively."""
    todo = [name for name in files if name.endswith(HOST_ONLY_SUFFIXES)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for path in _QUOTE_INCLUDE.findall(files[name]):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), path))
            todo += [t for t in (target, posixpath.normpath(path)) if t in files]
    return seen


def _device_lines(text: str) -> set[int]:
    """Line numbers (0-based) that only the device pass compiles (``__CUDA_ARCH__`` guards)."""
    device: set[int] = set()
    stack: list[list[bool]] = []  # per open #if: [this branch device-only, later branches device-only]
    for number, line in enumerate(text.split("\n")):
        m = re.match(r"[ \t]*(?:#|%:)[ \t]*(\w+)(.*)", line)
        if m:
            name, cond = m.group(1), m.group(2).strip()
            if name in ("if", "ifdef", "ifndef"):
                if name == "ifdef":
                    cond = f"defined({cond})"
                elif name == "ifndef":
                    cond = f"!defined({cond})"
                stack.append([_is_device_guard(cond), bool(_HOST_GUARD.match(cond))])
            elif name == "elif" and stack:
                stack[-1][0] = stack[-1][1] or _is_device_guard(cond)
            elif name == "else" and stack:
                stack[-1][0] = stack[-1][1]
            elif name == "endif" and stack:
                stack.pop()
            continue
        if any(frame[0] for frame in stack):
            device.add(number)
    return device


def _is_device_guard(cond: str) -> bool:
    """Whether a #if condition is false whenever ``__CUDA_ARCH__`` is undefined (the host pass)."""
    for part in cond.split("&&"):
        m = _DEVICE_GUARD.match(part.strip())
        # N > 0 and N != 0 as digits (a 5000-digit number once overflowed int(): INFRA_ERROR)
        if m and "||" not in cond and (m.group("ge") or "1").strip("0") and (m.group("eq") or "1").strip("0"):
            return True
    return False


def _code_only(text: str) -> str:
    """Directive lines blanked (newlines and offsets kept)."""
    return _DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def _expand(words: list[str], macros: Mapping[str, str], depth: int = 8) -> set[str]:
    out = set(words)
    for _ in range(depth):
        more = {w for name in out & set(macros) for w in _IDENT.findall(macros[name])} - out
        if not more:
            break
        out |= more
    return out


def _without_groups(head: str) -> str:
    """The declaration head without ``template <...>`` lists and attributes (``alignas(16)`` ...)."""
    for pattern, pair in ((_TEMPLATE, "<>"), (_ATTRIBUTE, "()")):
        while m := pattern.search(head):
            depth, i = 1, m.end()
            while i < len(head) and depth:
                depth += {pair[0]: 1, pair[1]: -1}.get(head[i], 0)
                i += 1
            head = head[: m.start()] + " " + head[i:]
    return head


_Scope = tuple[str, bool, str]
"""(kind, device-only, where: how a message names it)."""


def _open_scope(head: str, parent: _Scope, object_macros: Mapping[str, str]) -> _Scope:
    """The scope a ``{`` opens after ``head``, inside ``parent``."""
    kind, device, where = parent
    if len(head) > _HEAD_CHARS:
        return "block", False, "code after a declaration too long for this rule to parse"
    plain = _without_groups(head)
    is_class = bool(_CLASS_HEAD.match(plain.strip())) and "(" not in plain
    if kind in ("function", "block"):
        return ("class", False, "a class body") if is_class else ("block", device, where)
    words = set(_IDENT.findall(plain))
    if "namespace" in words or re.fullmatch(r'\s*extern\s*"\s*"\s*', plain):
        return "namespace", False, "file or namespace scope"
    if is_class:
        return "class", False, "a class body"
    if "(" in plain:
        marks = _expand(_IDENT.findall(head), object_macros)
        if "__global__" in marks or ("__device__" in marks and "__host__" not in marks):
            return "function", True, "a device function"
        both = "__device__" in marks
        return "function", False, "a __host__ __device__ function" if both else "a host function"
    return "block", False, "an initializer or lambda outside device code"  # or what this rule cannot parse


def _scan_file(
    name: str,
    text: str,
    kinds: tuple[Mapping[str, str], set[str]],
    object_macros: Mapping[str, str],
    host_only: bool,
) -> HostAsm | None:
    macros, pasting = kinds
    targets = _targets(macros)
    device_lines = set() if host_only else _device_lines(text)
    code = _code_only(text)
    line_starts = [0] + [i + 1 for i, ch in enumerate(code) if ch == "\n"]
    parens = _Parens(code)
    stack: list[_Scope] = [("namespace", False, "file or namespace scope")]
    head_start = 0
    events = [
        (d.start(), d.group("name")) for d in _DIRECTIVE.finditer(text) if d.group("name") in _CONDITIONAL
    ]
    groups: list[list[_Scope]] = []  # per open conditional group: the scopes at its #if
    next_event = 0
    for m in _SCAN.finditer(code):
        while next_event < len(events) and events[next_event][0] < m.start():
            at, directive = events[next_event]
            next_event += 1
            _conditional(directive, stack, groups)
            head_start = max(head_start, at)  # a head counts from its last conditional (below)
        token = m.group()
        if token == "{":
            stack.append(_open_scope(code[head_start : m.start()], stack[-1], object_macros))
            head_start = m.end()
        elif token in ("}", ";"):
            if token == "}" and len(stack) > 1:
                stack.pop()
            head_start = m.end()
        elif ASM.fullmatch(token) or token in macros or token in pasting:
            device = stack[-1][1] and not host_only
            if device or bisect.bisect_right(line_starts, m.start()) - 1 in device_lines:
                continue
            if token in pasting and not _could_spell_asm(parens.arguments(m.end()), targets):
                continue
            what = f"`{token}`" if token not in macros else macros[token]
            if token in pasting:
                what = f"macro {token} (given pieces that it can paste into asm)"
            where = "a file compiled as host C++" if host_only else stack[-1][2]
            return HostAsm(name, m.start(), f"{what} in {where}")
    return None


_CONDITIONAL = frozenset({"if", "ifdef", "ifndef", "elif", "else", "endif"})


def _conditional(name: str, stack: list[_Scope], groups: list[list[_Scope]]) -> None:
    """Keep the scopes honest across a conditional group.

    Each branch starts from the scopes at its ``#if``, and the code after ``#endif`` is back in them: a
    candidate's ``#if 0`` holding ``__device__ void f() {`` made the code after it look like a device
    body (the compiler never sees that brace). A group whose branches balance their braces changes
    nothing. A declaration's head counts only from the last conditional directive before its brace
    (``#if 0 / __device__ void f() / #else / void g() / #endif {`` read as one device head once): at
    worst a device function is taken for a host one, and its asm refused.
    """
    if name in ("if", "ifdef", "ifndef"):
        groups.append(list(stack))
    elif groups:
        stack[:] = groups[-1]
        if name == "endif":
            groups.pop()


# ------------------------------------------------------------------------------- the build backstop

_MARKER = re.compile(r'^#\s*(\d+)(?:\s+"((?:[^"\\]|\\.)*)")?')
_LITERAL = re.compile(r'(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


_LABEL = re.compile(r'\b(?:asm|__asm|__asm__)\s*\(\s*"[A-Za-z_][A-Za-z0-9_]*"\s*\)')
"""An asm label naming a symbol (``__asm__("memchr")``, as glibc's headers rename functions): no
instruction, and what it names is still an import the artifact check judges. An asm *statement* with
such a string (``__asm__("nop");``) is caught in the assembly instead (``host_asm_in_assembly``)."""
_GLOBL = re.compile(r'\b(?:asm|__asm|__asm__)\s*\(\s*"\.globl[ \t]+[A-Za-z_][A-Za-z0-9_]*"\s*\)')
"""A top-level asm making one symbol global: libstdc++ 13's ``<iostream>`` writes
``__asm (".globl _ZSt21ios_base_library_initv")`` to pull in the stream initialiser. It reads nothing
and runs nothing (a symbol it names but does not define is an import, judged by the artifact check);
in the assembly it is a line of its own (``_GLOBL_LINE``)."""
_GLOBL_LINE = re.compile(r"\t?\.globl[ \t]+[A-Za-z_][A-Za-z0-9_]*")
_GAS_FILE_OR_MACRO = re.compile(
    r"(?<![\w$@])\.(?:incbin|include|irpc?|irepc?|rept?|macro|altmacro|noaltmacro|purgem|exitm|endm|endr|"
    r"mri|if\w*|elseif|else|endif|print|warning|error|err|fail|abort)\b",
    re.I,
)
"""Assembler directives GCC never writes: reading a file; building text (macros, repetitions under every
spelling: a reviewer's ``.irep`` is ``.irp``, ``.rep`` is ``.rept``); choosing text (conditional
assembly); writing to the log; leaving the standard syntax (``.mri``). Anywhere outside a string (after a
``;`` or a label too) and in any case."""
_GAS_NEVER = re.compile(r";|/\*|\*/")
"""What GCC never writes outside a string of its assembly: a statement separator, a block comment."""
_GAS_FIRST = re.compile(r"[ \t]*(?P<name>\.[A-Za-z_.$][\w.$]*)(?P<colon>[ \t]*:)?")
"""A line's leading directive (or, with the colon, a label whose name starts with a dot)."""
GCC_DIRECTIVES = frozenset(
    ".text .data .bss .section .previous .pushsection .popsection .globl .weak .hidden .protected .internal "
    ".local .comm .lcomm .type .size .align .p2align .balign .file .loc .ident .string .ascii .asciz .byte "
    ".short .value .long .int .quad .octa .zero .skip .space .uleb128 .sleb128 .set .2byte .4byte .8byte "
    ".base64 .nops .tls_common".split()
)
"""The directives the host assembly may begin a line with (and ``.cfi_*``): those GCC writes for host
C++ (the experts, the test kernels and a host-heavy file with streams, containers, exceptions, statics
and thread-locals wrote a subset) and nvcc's fatbinary and registration code. Any other directive came
from a string the compiler copied verbatim: refused, whatever GAS does with it (a list of what to block
had missed ``.irep``)."""


def _gcc_directive(name: str) -> bool:
    return name in GCC_DIRECTIVES or name.startswith(".cfi_")


_LABEL_AND_MORE = re.compile(r"^[^\s#][^\s:]*:[ \t]*[^\s#]")
"""A label followed by more on its line: GCC writes each label alone."""
_GAS_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|\'')
"""A string of the assembler, or a character constant's quote (the assembler reads ``'"`` as the
character ``"``, not as a string's start): GCC writes the latter nowhere."""
_FATBIN_HEAD = ['\t.section .nv_fatbin, "a"', ".align 8", "fatbinData:"]
_QUAD = re.compile(r"\.quad 0x[0-9a-f]+(?:, ?0x[0-9a-f]+)*")
_TRAILER = re.compile(
    r'\t\.ident\t"GCC: [^"\n]*"|\t\.section\t\.note\.GNU-stack,"",@progbits'
    r'|\t\.section\t\.note\.gnu\.property,"a"|\t\.align 8|\t\.long\t(?:[0-9]f - [0-9]f|5|0x[0-9a-f]{1,8})'
    r'|[0-4]:|\t\.string\t"GNU"'
)
"""What GCC writes after the last top-level asm of a file, which it then leaves without ``#NO_APP``: its
``.ident``, the stack note and, where control-flow protection is on (Ubuntu's GCC by default: the device
host refused every expert before this was known), the GNU property note (data only)."""


_NVCC_SECTIONS = re.compile(
    r'__attribute__\s*\(\(\s*section\s*\(\s*"(?:__nv_module_id|\.nvFatBinSegment)"\s*\)\s*\)\)'
)
"""The two section attributes of nvcc's own stub (``*.cudafe1.stub.c``), in the host compiler's input."""


def host_asm_in_translation(text: str, preprocessed: bool = False) -> tuple[str, int, str] | None:
    """The first host asm of a ``*.cudafe1.cpp`` host translation, or None; (file, line, source line).

    Every line outside the device bodies (``#if 0``) counts, whichever file the line markers give it to
    (a ``#line`` the source screen missed once gave a candidate's asm to a header): an ``asm`` token that
    is not a symbol label (``_LABEL``), an attribute whose string reaches the assembler
    (``ASM_STRING_ATTRIBUTE``) and ``#ident``/``#sccs``. The markers only name the file in the message.
    The headers a kernel may include have no other such line in their host code (their asm is labels,
    device code and libstdc++ 13's top-level symbol export, ``_GLOBL``); one that had would be refused
    too.

    ``preprocessed``: ``text`` is the host compiler's own preprocessed input (``*.ii``): nvcc's second
    host pass expands macros of ``crt/host_runtime.h`` that the translation never saw (a reviewer hid a
    ``section`` attribute in ``__text_var``); there nvcc's stub adds two section attributes of its own
    (``_NVCC_SECTIONS``) and its fatbinary's top-level ``asm(`` (checked in the assembly).
    """
    current, line, skip = "", 0, 0
    for raw in text.split("\n"):
        stripped = raw.lstrip()
        if stripped.startswith("#"):
            marker = _MARKER.match(stripped)
            if marker:
                line = int(marker.group(1)[:9])
                if marker.group(2) is not None:
                    current = marker.group(2)  # normalised only for the message
                continue
            directive = stripped[1:].split()[0] if stripped[1:].split() else ""
            if not skip and directive in ("ident", "sccs"):
                return posixpath.normpath(current) if current else current, line, raw.strip()
            if skip and directive in ("if", "ifdef", "ifndef"):
                skip += 1
            elif _IF_ZERO.match(stripped):
                skip = 1
            elif skip and directive == "endif":
                skip -= 1
            line += 1
            continue
        if not skip and _may_match(raw):
            if preprocessed:  # asm statements show in the assembly (nvcc's fatbin is one); labels here
                blanked = "" if raw.startswith("asm(") else _LITERAL.sub('""', _allowed_asm(raw))
                attributes = _NVCC_SECTIONS.sub(" ", raw)
            else:
                blanked = _LITERAL.sub('""', _allowed_asm(raw))
                attributes = raw
            if ASM.search(blanked) or ASM_STRING_ATTRIBUTE.search(_LITERAL.sub('""', attributes)):
                return posixpath.normpath(current) if current else current, line, raw.strip()
        line += 1
    return None


_IF_ZERO = re.compile(r"#\s*if\s+0\s*$")
_MAY = re.compile(r"asm|section|symver|alias|ifunc|weakref|fentry")
"""A substring of every match of ``ASM`` or ``ASM_STRING_ATTRIBUTE`` (blanking strings only removes text)."""


def _may_match(line: str) -> bool:
    """Whether ``line`` could hold an asm token or string attribute (``ASM``, ``ASM_STRING_ATTRIBUTE``).

    A line without any of ``_MAY``'s words cannot, and needs no further expression: a translation is
    mostly header lines, and the scan of the GEMM expert's took 0.42 s of the build process's interpreter
    per file (held under its lock, which concurrent builds share), under 0.15 s with this test first.
    """
    return _MAY.search(line) is not None


def _allowed_asm(line: str) -> str:
    """``line`` without its symbol labels (``_LABEL``) and symbol exports (``_GLOBL``)."""
    return _LABEL.sub(" ", _GLOBL.sub(" ", line))


def host_asm_in_assembly(text: str) -> tuple[int, str] | None:
    """The first inline asm or file directive of a host ``.s`` file (GCC's output), or None; (line, text).

    GCC opens every inline asm with ``#APP`` (and closes it with ``#NO_APP``, but not after the last
    top-level one of a file): any such block but nvcc's fatbinary data (``_is_fatbin``, once per file) and
    symbol exports (``_GLOBL_LINE``: GCC merges top-level asm into one block) is host assembly however it
    was spelled; no line may read a file or build text with assembler macros (``_GAS_FILE_OR_MACRO``),
    wherever it came from (a string the compiler hands the assembler verbatim: a section name, a symbol
    version, ``#ident``); and a line that begins with a directive begins with one GCC writes
    (``GCC_DIRECTIVES``).
    """
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if ("'" in line or '"' in line) and any(_unclosed(m.group()) for m in _GAS_TOKEN.finditer(line)):
            return number, line.strip()[:120]
        bare = _GAS_TOKEN.sub('""', line)
        # GCC writes one statement per line: never a `;`, a label with more after it, these directives, or
        # a block comment (the assembler deletes it, joining `.inc/**/bin`, and reads no quote inside it)
        if _GAS_FILE_OR_MACRO.search(bare) or _GAS_NEVER.search(bare) or _LABEL_AND_MORE.match(bare):
            return number, line.strip()[:120]
        first = _GAS_FIRST.match(bare)
        if first and not first.group("colon") and not _gcc_directive(first.group("name")):
            return number, line.strip()[:120]
    fatbins, i = 0, 0
    while i < len(lines):
        if lines[i] != "#APP":
            i += 1
            continue
        start, block = i, []
        i += 1
        while i < len(lines) and lines[i] != "#NO_APP":
            block.append(lines[i])
            i += 1
        block = [line for line in block if not _GLOBL_LINE.fullmatch(line)]  # top-level asm merges
        if not any(line.strip() for line in block):
            continue
        if fatbins == 0 and _is_fatbin(block, closed=i < len(lines)):
            fatbins += 1
            continue
        return start + 1, (block[0] if block else "#APP").strip()[:120]
    return None


def _unclosed(token: str) -> bool:
    r"""A character constant's quote, or a string that the line ends inside.

    GCC writes neither, and the assembler carries such a string over the newline (a section name
    ``"abc\ndef"`` hid a ``.incbin`` in what a line-by-line reading took for the next string).
    """
    return token == "'" or not _GAS_STRING.fullmatch(token)


_GAS_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
"""An assembler string closed on its line."""


def _is_fatbin(block: list[str], closed: bool) -> bool:
    """Whether an ``#APP`` block is nvcc's fatbinary (``*.fatbin.c``'s top-level asm) and nothing more."""
    if block[:3] != _FATBIN_HEAD:
        return False
    k = 3
    while k < len(block) and _QUAD.fullmatch(block[k]):
        k += 1
    if k == 3 or k >= len(block) or block[k] != ".text":
        return False
    rest = [line for line in block[k + 1 :] if line.strip()]
    return not rest if closed else all(_TRAILER.fullmatch(line) for line in rest)
