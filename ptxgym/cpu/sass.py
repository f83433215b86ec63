"""SASS stage: cuobjdump census of a built shared object.

``cuobjdump --dump-sass`` lists, per embedded cubin, ``arch = sm_90a`` and then per function a
``Function : <mangled name>`` header followed by instruction rows::

    /*01c0*/                   UTMALDG.2D [UR4], [UR8] ;         /* 0x00000004080075b4 */
    /*0070*/               @P0 EXIT ;                            /* 0x000000000000094d */

The census counts opcodes per function. The histogram key is the mnemonic without predicate and
without modifiers (``HGMMA.64x8x16.F32.BF16`` -> ``HGMMA``); the target family is decided by
``ArchSpec.is_target_opcode``. Static presence is necessary, not sufficient: a target opcode in a
kernel that is never launched still counts here (FACTS.md); execution is checked on the GPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from ptxgym.cpu.toolchain import Toolchain, find_toolchain
from ptxgym.records import settings
from ptxgym.records.arch import ArchSpec
from ptxgym.records.errors import InfraError, ToolchainNotFoundError
from ptxgym.records.feedback import KernelSass, SassInfo

PARSER_VERSION = "sass-census-v1"
_CUOBJDUMP_TIMEOUT_S = 120.0
_ARCH = re.compile(r"^\s*arch\s*=\s*(?P<arch>sm_\w+)")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(?P<name>\S+)")
_INSTRUCTION = re.compile(
    r"^\s*/\*(?P<pc>[0-9a-fA-F]+)\*/\s+(?:\{\s*)?(?:(?P<guard>@!?U?P(?:T|\d+))\s+)?"
    r"(?P<opcode>[A-Z][A-Z0-9_]*(?:\.[\w]+)*)"
)


def opcode_base(opcode: str) -> str:
    """Mnemonic without modifiers: ``UTMALDG.2D`` -> ``UTMALDG``."""
    return opcode.split(".", 1)[0]


def parse_sass(text: str, arch: ArchSpec) -> SassInfo:
    """Census of ``cuobjdump --dump-sass`` output. Pure function of the text."""
    found_arch: str | None = None
    section_arch: str | None = None
    kernels: list[tuple[str, Counter[str]]] = []
    current: Counter[str] | None = None
    for line in text.splitlines():
        if m := _ARCH.match(line):
            section_arch, current = m.group("arch"), None
        elif m := _FUNCTION.match(line):
            current = Counter()
            kernels.append((m.group("name"), current))
            found_arch = found_arch or section_arch
        elif current is not None and (m := _INSTRUCTION.match(line)):
            current[opcode_base(m.group("opcode"))] += 1
    infos = [_kernel_info(name, counts, arch) for name, counts in kernels]
    histogram: Counter[str] = Counter()
    for _, counts in kernels:
        histogram.update(counts)
    return SassInfo(
        arch=found_arch or section_arch or arch.name,
        kernels=infos,
        histogram=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        static_target=any(k.target_opcodes for k in infos),
    )


def pc_opcodes(text: str, guarded: bool = False) -> dict[str, dict[int, str]]:
    """Per function of a ``cuobjdump --dump-sass`` listing: instruction offset -> opcode with modifiers.

    The offsets are the listing's ``/*0a80*/`` (bytes from the function's start), the key an executed
    count per instruction is joined on (``evaluation/trusted/sass_join.py``). ``guarded``: only the
    instructions under a predicate guard other than ``@PT`` (which may be issued, and counted by a
    warp-level counter, with no thread doing their work).
    """
    out: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in text.splitlines():
        if _ARCH.match(line):
            current = None
        elif m := _FUNCTION.match(line):
            current = out.setdefault(m.group("name"), {})
        elif current is not None and (m := _INSTRUCTION.match(line)):
            if not guarded or m.group("guard") not in (None, "@PT"):
                current[int(m.group("pc"), 16)] = m.group("opcode")
    return out


def _kernel_info(name: str, counts: Counter[str], arch: ArchSpec) -> KernelSass:
    families = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    targets = {op: n for op, n in families.items() if arch.is_target_opcode(op)}
    return KernelSass(
        kernel=name, instructions=sum(counts.values()), families=families, target_opcodes=targets
    )


def dump_sass(so_path: Path, toolchain: Toolchain) -> str:
    """Raw ``cuobjdump --dump-sass`` text ('' when the object holds no device code)."""
    if toolchain.cuobjdump is None:
        raise ToolchainNotFoundError(
            "cuobjdump not found (CUDA_HOME/bin, PATH or the PyPI wheels): "
            "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"
        )
    try:
        proc = subprocess.run(
            [str(toolchain.cuobjdump), "--dump-sass", str(so_path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_CUOBJDUMP_TIMEOUT_S,
            env=toolchain.subprocess_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"cuobjdump --dump-sass {so_path} took over {_CUOBJDUMP_TIMEOUT_S:.0f} s") from exc
    if proc.returncode != 0:
        if "does not contain device code" in proc.stdout + proc.stderr:
            return ""
        raise InfraError(
            f"cuobjdump --dump-sass {so_path} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()[-600:]}"
        )
    return proc.stdout


def sass_census(
    so_path: Path, arch: ArchSpec, toolchain: Toolchain | None = None, *, use_cache: bool = True
) -> SassInfo:
    """SASS census of a built object, cached by the object's hash, the arch and the cuobjdump version.

    Raises ToolchainNotFoundError without cuobjdump and InfraError when cuobjdump fails; a shared
    object without device code gives an empty census (``static_target`` False).
    """
    toolchain = toolchain or find_toolchain()
    so_path = Path(so_path)
    key = _cache_key(so_path, arch.name, toolchain)
    cache_file = settings.cache_dir() / "sass" / key[:2] / f"{key}.json"
    if use_cache and cache_file.is_file():
        try:
            return SassInfo.model_validate_json(cache_file.read_text())
        except ValueError:
            cache_file.unlink(missing_ok=True)  # a corrupt entry is rebuilt below
    text = dump_sass(so_path, toolchain)
    info = parse_sass(text, arch)
    if use_cache:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(cache_file, info.model_dump_json())
        if info.static_target:  # the in-band target proof will join counts with it (module_pcs)
            _write_pcs(_pcs_file(_cache_key(so_path, _PCS, toolchain)), pc_opcodes(text))
            _write_pcs(_pcs_file(_cache_key(so_path, _GUARDED, toolchain)), pc_opcodes(text, guarded=True))
    return info


def module_pcs(so_path: Path, toolchain: Toolchain | None = None) -> dict[str, dict[int, str]]:
    """``pc_opcodes`` of a built object's listing, from the cache ``sass_census`` fills (else dumped now).

    The CPU stage lists the object once; the evaluator joins the in-band counts with the same listing
    without running cuobjdump again while it holds the GPU.
    """
    return _listing(so_path, toolchain, guarded=False)


def module_guarded(so_path: Path, toolchain: Toolchain | None = None) -> dict[str, dict[int, str]]:
    """``pc_opcodes(guarded=True)`` of a built object's listing, cached as ``module_pcs`` is."""
    return _listing(so_path, toolchain, guarded=True)


def _listing(so_path: Path, toolchain: Toolchain | None, guarded: bool) -> dict[str, dict[int, str]]:
    toolchain = toolchain or find_toolchain()
    so_path = Path(so_path)
    cache_file = _pcs_file(_cache_key(so_path, _GUARDED if guarded else _PCS, toolchain))
    if cache_file.is_file():
        try:
            raw = json.loads(cache_file.read_text())
            return {fn: {int(pc): op for pc, op in rows.items()} for fn, rows in raw.items()}
        except (ValueError, AttributeError):
            cache_file.unlink(missing_ok=True)
    pcs = pc_opcodes(dump_sass(so_path, toolchain), guarded=guarded)
    _write_pcs(cache_file, pcs)
    return pcs


_PCS = "pc-opcodes"
"""Cache-key part of ``module_pcs`` entries (the listing does not depend on the task's arch)."""
_GUARDED = "pc-opcodes-guarded"
"""Cache-key part of ``module_guarded`` entries."""


def _pcs_file(key: str) -> Path:
    return settings.cache_dir() / "sass-pcs" / key[:2] / f"{key}.json"


def _write_pcs(path: Path, pcs: dict[str, dict[int, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = {fn: {str(pc): op for pc, op in rows.items()} for fn, rows in pcs.items()}
    _atomic_write(path, json.dumps(raw))


def _cache_key(so_path: Path, arch: str, toolchain: Toolchain) -> str:
    h = hashlib.sha256()
    with so_path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    for part in (PARSER_VERSION, arch, str(toolchain.cuobjdump_version), str(toolchain.cuobjdump)):
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    """Write via a unique temporary file and rename, so readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
