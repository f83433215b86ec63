"""Blackwell pack: headers compile for sm_100a and each validation kernel shows its SASS family.

No B200 exists here: these are static checks (nvcc + cuobjdump on the CPU). Six nvcc calls in all,
about one second each, run two at a time.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ptxgym.knowledge_packs import PACK_ROOT, variant_parts
from ptxgym.records.arch import BLACKWELL

SM100 = PACK_ROOT / "sm100a"
HEADERS = sorted((SM100 / "headers").glob("*.cuh"))
VALIDATION = sorted((SM100 / "validation").glob("*.cu"))
GENCODE = "-gencode=arch=compute_100a,code=sm_100a"

# Per validation file: SASS mnemonics (opcode with modifiers, prefix match) that must appear.
EXPECTED = {
    "tcgen05_alloc.cu": ["UTCATOMSWS.FIND_AND_SET", "UTCATOMSWS.2CTA.FIND_AND_SET", "UTCATOMSWS.AND"],
    "tcgen05_mma.cu": ["UTCHMMA", "UTCHMMA.2CTA"],
    "tcgen05_commit.cu": ["UTCBAR", "UTCBAR.MULTICAST"],
    "tcgen05_ldst.cu": ["LDTM", "STTM"],
    "tma_mbarrier.cu": [
        "UTMALDG.2D",
        "UTMALDG.5D",
        "UTMALDG.2D.MULTICAST",
        "UTMALDG.2D.2CTA",
        "UTMASTG",
        "UTMAREDG",
        "SYNCS.ARRIVE.TRANS64",
        "SYNCS.PHASECHK.TRANS64.TRYWAIT",
    ],
}
_OPCODE = re.compile(
    r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)", re.M
)
_WRAPPER = re.compile(r"(?:__forceinline__|__noinline__|\binline)\s+[\w:<>]+\s+(\w+)\s*\(")


def _compile(toolchain, source: Path, out_dir: Path) -> Path:  # noqa: ANN001 - ptxgym.cpu.toolchain.Toolchain
    obj = out_dir / f"{source.stem}.o"
    cmd = [
        str(toolchain.nvcc),
        "-c",
        GENCODE,
        "-std=c++17",
        "-Werror",
        "all-warnings",
        "-o",
        str(obj),
        str(source),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=toolchain.subprocess_env(out_dir)
    )
    assert proc.returncode == 0, f"{source.name} does not compile for sm_100a:\n{proc.stderr[-3000:]}"
    return obj


@pytest.fixture(scope="module")
def sass(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """cuobjdump --dump-sass text of every validation kernel and of the pasted-headers unit."""
    from ptxgym.cpu.sass import dump_sass
    from ptxgym.cpu.toolchain import find_toolchain

    toolchain = find_toolchain()
    out = tmp_path_factory.mktemp("sm100a")
    pasted = out / "pasted_headers.cu"
    pasted.write_text(_pasted_headers())
    sources = [*VALIDATION, pasted]
    with ThreadPoolExecutor(max_workers=2) as pool:
        objects = list(pool.map(lambda src: _compile(toolchain, src, out), sources))
    return {src.name: dump_sass(obj, toolchain) for src, obj in zip(sources, objects, strict=True)}


def _pasted_headers() -> str:
    """The headers concatenated in prompt order, as a model pastes them into one file (no include path)."""
    parts, _ = variant_parts("sm100a", "templates")
    texts = [(PACK_ROOT / p).read_text() for p in parts if p.endswith(".cuh")]
    return (
        "\n".join(texts)
        + "\n__global__ void pasted_headers_probe(unsigned* out) { out[0] = sm100::lane_id(); }\n"
    )


def test_validation_kernels_cover_every_group() -> None:
    assert sorted(p.name for p in VALIDATION) == sorted(EXPECTED)


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_validation_kernel_shows_its_family(sass: dict[str, str], name: str) -> None:
    opcodes = set(_OPCODE.findall(sass[name]))
    assert "arch = sm_100a" in sass[name]
    for want in EXPECTED[name]:
        assert any(op == want or op.startswith(want + ".") for op in opcodes), (
            f"{name}: no {want} in its SASS; found {sorted(opcodes)}"
        )
    if name.startswith("tcgen05_"):
        assert any(BLACKWELL.is_target_opcode(op) for op in opcodes)


@pytest.mark.nvcc
def test_headers_compile_when_pasted_in_prompt_order(sass: dict[str, str]) -> None:
    assert "pasted_headers_probe" in sass["pasted_headers.cu"]


def test_every_wrapper_is_exercised_by_a_validation_kernel() -> None:
    """A wrapper nobody calls is never instantiated, so its inline PTX would never reach ptxas."""
    header_text = {h.name: h.read_text() for h in HEADERS}
    validation_text = "\n".join(v.read_text() for v in VALIDATION)
    unexercised = []
    for name, text in header_text.items():
        for fn in _WRAPPER.findall(text):
            call = re.compile(rf"\b{fn}\s*(?:<[^>()]*>)?\s*\(")
            elsewhere = validation_text + "".join(t for n, t in header_text.items() if n != name)
            if not call.search(elsewhere) and len(call.findall(text)) < 2:  # only its own definition
                unexercised.append(f"{name}: {fn}")
    assert not unexercised


def test_pack_says_it_never_ran_on_a_b200() -> None:
    for doc in (SM100 / "params.md", SM100 / "contract.md", *VALIDATION):
        assert re.search(r"no B200 was available|none was available", doc.read_text()), doc.name
