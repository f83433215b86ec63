"""What of nvcc's output the model sees: the compiler's own diagnostics about the candidate's files.

nvcc's raw output can echo other files: a diagnostic located in an included file quotes that file's line,
and a file the preprocessor or the assembler was made to read shows up line by line in its errors (888
bytes of a host's ``/etc/passwd`` once reached an observation this way). The build jail keeps such files
unreadable; this filter makes sure the log would not carry them anyway. ``shown_log`` keeps

* diagnostics located in the solution's own files or in nvcc's intermediates of them (``kernel.cu(12):
  error: ...``, ``kernel.cu:12:5: error: ...``, ``ptxas kernel.ptx, line 9; error ...``), with the source
  line and caret the compiler prints under them and their instantiation context; GCC's quoted line
  (``   12 | text``) only where it is that line of the solution's file: GCC reads the quote from disk,
  and a ``#line`` naming another file plus a message with a newline that forges an own header once
  showed a line of ``/etc/ld.so.cache`` (screen off);
* diagnostics located in the allowed headers (the toolkit, the host compiler's, TVM-FFI's, the packs'),
  without the quoted source line;
* the tools' own messages that name no file (``ptxas info``/``warning``/``error``, the resource report
  lines under them, ``nvlink``, ``nvcc``, ``fatbinary``, ``collect2``, linker ``undefined reference``
  lines, ``N errors detected in the compilation of``);

and drops everything else, saying how many lines it dropped. Diagnostics located in any other file are
dropped whole. The allowed roots' paths are shown as ``<sys>/...`` (no host path reaches the model), and
a file the jail refuses reads as missing.
"""

from __future__ import annotations

import posixpath
import re
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path

from ptxgym.records.feedback import truncate

MESSAGE_CHARS = 1500
_TMPXFT = re.compile(r"tmpxft_[0-9a-fA-F]+_[0-9a-fA-F]+-\d+_")
_OOM = re.compile(r"out of memory|bad_alloc|memory exhausted|cannot allocate memory|Killed signal", re.I)
_ERROR_LINE = re.compile(r"\b(?:error|fatal)\b|^ptxas (?:error|fatal)|undefined reference", re.I)
# file(12): error ... (EDG: cudafe++, cicc), file:12:5: error ... (gcc), file:12: Error: ... (as)
_LOCATED = re.compile(
    r"^(?P<file>[^\s:(][^:(]*?)(?:\((?P<edg>\d+)\)|:(?P<gnu>\d+)(?::\d+)?):\s*"
    r"(?P<kind>(?:catastrophic |fatal )?error|warning|note|remark|Error|Warning|Info)\b"
)
_IN_FILE = re.compile(r"^(?:In file included from|\s+from)\s+(?P<file>[^:]+):\d+")
_FILE_CONTEXT = re.compile(r"^(?P<file>[^\s:][^:]*): (?:In (?:function|member function|instantiation)|At )")
_LINKER_REF = re.compile(r"^(?P<file>[^\s:(][^:(]*):\(\.[\w.$]+\+0x[0-9a-fA-F]+\): ")
_PTXAS_AT = re.compile(r"^ptxas (?P<file>\S+), line \d+;")
_ASSEMBLER = re.compile(r"^(?P<file>[^\s:][^:]*): Assembler messages:$")
_TOOL = re.compile(
    r"^(?:ptxas|nvlink|nvcc|fatbinary|cicc|cudafe\+\+|collect2|cc1plus|cc1|g\+\+|gcc)\b"
    r"|^(?:\S*/)?(?:[\w.-]*-)?ld(?:\.bfd|\.gold)?: "
    r"|^\d+ (?:catastrophic )?errors? detected in the compilation of "
    r"|^[Cc]ompilation terminated\.$|^Remark: The warnings can be suppressed"
    r"|^\[\.\.\. \d+ bytes cut \.\.\.\]$"
)
_RESOURCES = re.compile(r"^\s+\d+ bytes stack frame, \d+ bytes spill stores, \d+ bytes spill loads$")
_CONTEXT = re.compile(r"^\s+(?:detected during|instantiation of|required from|In instantiation of)")
_INTERMEDIATE = re.compile(
    r"^(?:[\w.-]+\.(?:ptx|cubin|s|cudafe1\.\w+|ii|fatbin(?:\.c)?|module_id|o)|\{standard input\})$"
)
_DENIED = re.compile(r": Permission denied\b")
_LOCATIONS = (_LOCATED, _IN_FILE, _FILE_CONTEXT, _LINKER_REF, _PTXAS_AT, _ASSEMBLER)


def clean_log(log: str, stage: Path, keep_dir: str, source_dir: str = "") -> str:
    """Scratch paths, nvcc's kept-files folder, the sources' folder and temp-file prefixes out.

    What remains names the solution's files as the model wrote them: ``kernel.cu(12): error``.
    """
    for prefix in (f"{stage}/", str(stage), f"{keep_dir}/"):
        log = log.replace(prefix, "")
    if source_dir:
        log = re.sub(rf"(?<![\w./-]){re.escape(source_dir)}/", "", log)
    return _TMPXFT.sub("", log)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")
"""Characters no diagnostic of ours needs (tabs stay): shown as ``?``."""
_QUOTE = re.compile(r"^\s*(?P<line>\d+) \| ?(?P<text>.*)$")
"""GCC's quote of a source line under a diagnostic."""


class _Filter:
    """The line-by-line state of ``shown_log``."""

    def __init__(self, own_files: Mapping[str, str] | Iterable[str], public_roots: Iterable[Path]) -> None:
        contents = own_files if isinstance(own_files, Mapping) else {}
        self.own = {posixpath.normpath(f) for f in own_files}
        # numbered as GCC numbers them: at newlines only
        self.lines = {posixpath.normpath(f): text.split("\n") for f, text in contents.items()}
        self.public = sorted({str(p) for r in public_roots for p in (Path(r), Path(r).resolve())})
        self.follow = "none"  # what may follow the last diagnostic: all (own), context (public), none
        self.file = ""  # the file of the last own diagnostic
        self.dropped = 0

    def quoted(self, quote: re.Match[str]) -> bool:
        """Whether GCC's quote is the line it names of the last diagnostic's own file."""
        lines = self.lines.get(self.file)
        number = int(quote.group("line")[:9])
        if not lines or not 1 <= number <= len(lines):
            return False
        text, source = quote.group("text").rstrip(), lines[number - 1].rstrip()
        return text in (source, source.expandtabs(8), source.expandtabs(1))

    def origin(self, file: str) -> str:
        """own, public or foreign."""
        path = posixpath.normpath(file.strip())
        if path in self.own or ("/" not in path and _INTERMEDIATE.match(path)):
            return "own"
        if path.startswith("/") and any(path == r or path.startswith(r + "/") for r in self.public):
            return "public"
        return "foreign"

    def keep(self, line: str) -> bool:
        located = next((m for rx in _LOCATIONS if (m := rx.match(line))), None)
        if located:
            origin = self.origin(located.group("file"))
            assembler = located.re is _ASSEMBLER or (
                located.re is _LOCATED and located.group("kind") in ("Error", "Warning", "Info")
            )
            if assembler and origin == "public":  # the assembler reads no header: a file .include'd
                origin = "foreign"
            self.follow = {"own": "all", "public": "context"}.get(origin, "none")
            self.file = posixpath.normpath(located.group("file").strip()) if origin == "own" else ""
            return origin != "foreign"
        if _TOOL.search(line) or _RESOURCES.match(line):
            self.follow = "none"
            return True
        if not line.strip():
            return True
        indented = line[:1].isspace()
        if indented and self.follow == "all" and (quote := _QUOTE.match(line)):
            return self.quoted(quote)
        if indented and (self.follow == "all" or (self.follow == "context" and _CONTEXT.match(line))):
            return True
        if not indented:
            self.follow = "none"
        return False


def shown_log(log: str, own_files: Mapping[str, str] | Iterable[str], public_roots: Iterable[Path]) -> str:
    """The part of a cleaned nvcc log the model may see (see the module docstring).

    ``own_files``: the solution's files, path to text (their names alone: GCC's quoted lines go, since
    none can be checked).
    """
    state = _Filter(own_files, public_roots)
    kept: list[str] = []
    # lines end at "\n" only, as the compilers write them: str.splitlines() also ends one at a form feed,
    # \x1c-\x1e or U+2028, which split a binary file's line that GCC quoted into indented pieces (a review)
    for line in log.split("\n"):
        line = _CONTROL.sub("?", line.removesuffix("\r"))
        if state.keep(line):
            if line.strip() or (kept and kept[-1].strip()):
                kept.append(line.rstrip())
        else:
            state.dropped += 1
    text = _masked("\n".join(kept).strip("\n"), state.public)
    if state.dropped:
        noun = "line" if state.dropped == 1 else "lines"
        text += f"\n[{state.dropped} {noun} of compiler output about files outside the solution not shown]"
    return text + "\n" if text else ""


_ABSOLUTE_DIRS = re.compile(r"(?<![\w.>~-])/(?:[\w.+-]+/)+")
"""The folders of an absolute path (``/usr/bin/`` of ``/usr/bin/ld``)."""


def _masked(text: str, public_roots: list[str]) -> str:
    """Host paths out of the shown log; a refused file reads as missing.

    Every allowed root is ``<sys>/``, and so are the folders of any other absolute path a kept line names
    (the linker's lines named ``/usr/lib/gcc/...`` and the toolkit's ``lib/``: a review), except in GCC's
    quotes of the solution's own lines. A ``Permission denied`` would tell the model that a path it named
    exists behind the jail.
    """
    for root in sorted(public_roots, key=len, reverse=True):
        if root not in ("", "/"):
            text = text.replace(root + "/", "<sys>/")
    lines = [ln if _QUOTE.match(ln) else _ABSOLUTE_DIRS.sub("<sys>/", ln) for ln in text.split("\n")]
    return _DENIED.sub(": No such file or directory", "\n".join(lines))


def error_message(log: str, shown: str, returncode: int, limits: str) -> tuple[str, bool]:
    """(message, deterministic) of a failed build: the first errors of the shown log, or why nvcc died.

    ``log`` is the whole cleaned log (to recognise an out-of-memory kill); ``limits`` names the limits.
    """
    excerpt = _excerpt(shown)
    oom = _OOM.search(log) is not None
    if returncode < 0 or oom:
        cause = "ran out of memory" if oom else f"was killed by {signal.Signals(-returncode).name}"
        message = f"nvcc {cause} (limits: {limits}); the kernel is too large to compile.\n{excerpt}"
        return message.strip(), False
    if not excerpt:
        excerpt = truncate(shown.strip(), MESSAGE_CHARS) or "(no output)"
    return f"nvcc failed (exit {returncode}):\n{excerpt}", True


def _excerpt(log: str) -> str:
    lines = [ln for ln in log.splitlines() if not ln.startswith("ptxas info")]
    picked: list[str] = []
    errors = 0
    for i, line in enumerate(lines):
        if not _ERROR_LINE.search(line):
            continue
        errors += 1
        if errors <= 6:
            picked.append(line.rstrip())
            for follow in lines[i + 1 : i + 3]:  # EDG prints the source line and a caret under errors
                if follow.startswith("  ") and not _ERROR_LINE.search(follow):
                    picked.append(follow.rstrip())
    text = "\n".join(picked)
    if errors > 6:
        text += f"\n({errors} error lines in total; the compile log has more)"
    return text[:MESSAGE_CHARS]
