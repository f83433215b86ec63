"""The native runner's CUPTI path (``runner/cupti_path.h``) on the CPU: compiled, and checked part by part.

It compiles against the toolkit's CUPTI headers, and its pure parts answer exactly as the Python worker's do.

A small driver (``tests/evaluation/native/cupti_logic_driver.cc``, built here with g++) exposes the logic of
``runner/cupti_logic.h``: SHA-256 (against hashlib), the cubin ELF reader (against
``cpu/cubin_symbols.elf_functions`` on real nvcc cubins and damaged copies), span cutting and the kernel and
module census (against ``sandboxed/cupti_spans``), the SASS record merge (against ``sandboxed/sass_counts``
and the worker's row limits) and UTF-8 JSON strings (against Python's ``errors="replace"`` decoding). Every
JSON text is read back with the protocol's own models.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from cupti_native import NATIVE, build_cubin, compile_program, find_cupti  # tests/evaluation on sys.path
from pydantic import TypeAdapter

from ptxgym.cpu.cubin_symbols import elf_functions
from ptxgym.evaluation.protocol import LoadedModule, SassRow, Spans
from ptxgym.evaluation.sandboxed import sass_counts as sc
from ptxgym.evaluation.sandboxed.cupti_spans import (
    RUN_IN_NS,
    complete,
    every_window_seen,
    kernel_name,
    kernels_by_window,
    launch_known,
    launched_in,
    ran_in,
    settle_flush,
    spans_by_window,
    strays,
)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cupti-driver") / "driver"
    return compile_program(NATIVE / "cupti_logic_driver.cc", out, [])


def run(driver: Path, *args: str, stdin: object = None) -> list[str]:
    text = json.dumps(stdin) if stdin is not None else None
    done = subprocess.run([str(driver), *args], input=text, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_cupti_path_and_the_gpu_driver_compile_against_the_cupti_headers(tmp_path: Path) -> None:
    cupti = find_cupti()
    if cupti is None:
        pytest.skip("no CUPTI headers and library in the CUDA toolkit here")
    src = tmp_path / "tu.cc"
    src.write_text(
        '#include "cupti_path.h"\n'
        "int main() {\n"
        "  namespace c = ptxrunner::cupti;\n"
        "  std::string json;\n  bool ran = false;\n"
        "  std::string err = c::start(true);\n"
        "  c::begin();\n  c::window(1, c::now(), c::now());\n  err += c::end_json(&json);\n"
        "  err += c::count_json([] {}, 0, 10, &json, &ran);\n"
        "  err += c::hw_count_json([] {}, nullptr, 0, &json, &ran);\n"
        "  return static_cast<int>(err.size() % 2);\n}\n"
    )
    tu = compile_program(src, tmp_path / "tu", cupti.flags())
    needed = subprocess.run(["ldd", str(tu)], capture_output=True, text=True, check=False).stdout
    assert "libcupti.so" in needed
    # the GPU test's driver (built on the GPU host) compiles here too
    compile_program(NATIVE / "cupti_gpu_driver.cc", tmp_path / "gpu_driver", [*cupti.flags(), "-ldl"])
    # without the macro the header adds nothing that needs CUPTI
    compile_program(src, tmp_path / "plain.o", ["-c"])


def test_the_launch_calls_are_told_from_other_api_calls_by_callback_id(tmp_path: Path) -> None:
    """``is_launch``: the API records whose start stamps the runner keeps (CUPTI's names, no GPU needed).

    Launches: cuLaunchKernel (the headers' list), cuLaunchCooperativeKernelMultiDevice and the runtime's
    __cudaLaunchKernel (CUDA 13's <<<>>>; found by name); not cuMemAlloc, cuStreamSynchronize or
    cudaMalloc.
    """
    cupti = find_cupti()
    if cupti is None:
        pytest.skip("no CUPTI headers and library in the CUDA toolkit here")
    src = tmp_path / "launch.cc"
    cases = [
        ("DRIVER", "CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel", 1),
        ("DRIVER", "CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice", 1),
        ("RUNTIME", "CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000", 1),
        ("RUNTIME", "CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000", 1),
        ("DRIVER", "CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2", 0),
        ("DRIVER", "CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize", 0),
        ("RUNTIME", "CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020", 0),
    ]
    body = "".join(
        f"  std::cout << ptxrunner::cupti::detail::is_launch(CUPTI_ACTIVITY_KIND_{kind}, {cbid});\n"
        for kind, cbid, _ in cases
    )
    src.write_text(f'#include "cupti_path.h"\n#include <iostream>\nint main() {{\n{body}  return 0;\n}}\n')
    program = compile_program(src, tmp_path / "launch", cupti.flags())
    done = subprocess.run([str(program)], capture_output=True, text=True, check=True)
    assert done.stdout == "".join(str(want) for _, _, want in cases)


def test_sha256_matches_hashlib(driver: Path, tmp_path: Path) -> None:
    rng = random.Random(7)
    sizes = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 1 << 20]
    sizes += [rng.randrange(0, 5000) for _ in range(20)]
    files, expected = [], []
    for i, n in enumerate(sizes):
        data = rng.randbytes(n)
        (tmp_path / f"{i}.bin").write_bytes(data)
        files.append(str(tmp_path / f"{i}.bin"))
        expected.append(hashlib.sha256(data).hexdigest())
    assert run(driver, "sha256", *files) == expected


@pytest.fixture(scope="module")
def cubins(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """Real sm_90a cubins: the test kernels (with -O3 and -G) and a single-kernel module."""
    out = tmp_path_factory.mktemp("cubins")
    (out / "one.cu").write_text('extern "C" __global__ void only(int* x) { x[threadIdx.x] += 1; }\n')
    images = [
        build_cubin(out / "kernels.cubin").read_bytes(),
        build_cubin(out / "debug.cubin", ["-G"]).read_bytes(),
    ]
    from ptxgym.cpu.toolchain import find_toolchain

    cmd = [
        str(find_toolchain().nvcc),
        "-cubin",
        "-arch=sm_90a",
        str(out / "one.cu"),
        "-o",
        str(out / "one.cubin"),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [*images, (out / "one.cubin").read_bytes()]


def _damaged(image: bytes, rng: random.Random) -> list[bytes]:
    """Truncations at every interesting length, random byte flips, and a non-UTF-8 symbol name."""
    cuts = [0, 3, 4, 63, 64, 0x40, len(image) // 2, len(image) - 1]
    cuts += [rng.randrange(len(image)) for _ in range(20)]
    out = [image[:n] for n in cuts]
    for _ in range(60):
        b = bytearray(image)
        for _ in range(rng.randrange(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    header = bytearray(image)
    header[0x3A:0x3C] = (1000).to_bytes(2, "little")  # section headers past the end
    out.append(bytes(header))
    header = bytearray(image)
    header[0x28:0x30] = (1 << 63).to_bytes(8, "little")  # an offset that wraps in 64-bit arithmetic
    out.append(bytes(header))
    typed = bytearray(image)
    for at in _function_symbols(image)[:1]:
        typed[at + 4] = (typed[at + 4] & 0xF0) | 10  # STT_LOOS: not a function, though 10 & 7 == 2
        out.append(bytes(typed))
    named = bytearray(image)
    at = named.find(b"simt_loop\0")
    if at >= 0:
        named[at] = 0xFF  # strict UTF-8 decoding fails: the whole answer is None
        out.append(bytes(named))
    return out


def _function_symbols(image: bytes) -> list[int]:
    """File offsets of the STT_FUNC entries of a well-formed ELF's symbol tables."""
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    offsets = []
    for i in range(shnum):
        sec = struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize)
        if sec[1] == 2:  # SHT_SYMTAB
            entsize = sec[9] or 24
            offsets += [
                sec[4] + k * entsize
                for k in range(sec[5] // entsize)
                if image[sec[4] + k * entsize + 4] & 0xF == 2
            ]
    return offsets


def test_elf_functions_match_python_on_real_and_damaged_cubins(driver: Path, cubins, tmp_path: Path) -> None:
    rng = random.Random(11)
    images = list(cubins)
    for image in cubins:
        images += _damaged(image, rng)
    paths = []
    for i, image in enumerate(images):
        (tmp_path / f"{i}.cubin").write_bytes(image)
        paths.append(str(tmp_path / f"{i}.cubin"))
    got = [json.loads(line) for line in run(driver, "elf", *paths)]
    expected = [elf_functions(image) for image in images]
    assert got == expected
    assert "simt_loop" in expected[0] and "hgmma_loop" in expected[0]
    assert None in expected and any(e and e != expected[0] for e in expected[len(cubins) :])  # both kinds


def _hex(text: str | bytes) -> str:
    return (text.encode() if isinstance(text, str) else text).hex()


def _plain_spans(records: list, windows: list) -> dict:
    """The driver's ``spans`` input for records and windows alone (no modules, no census error)."""
    return {
        "records": [[r[0], r[1], _hex(r[2]), *r[3:]] for r in records],
        "windows": [list(w) for w in windows],
        "modules": [],
        "census_error": "",
    }


NAMES = [
    "_Z6kernelPf",
    "simt_loop",
    'k"quoted\\',
    "tab\tand\nnewline",
    "caf\u00e9",
    "\u2211x",
    "emoji\U0001f600",
]


def test_spans_and_census_match_the_python_worker(driver: Path, cubins) -> None:
    rng = random.Random(3)
    for trial in range(30):
        base = rng.randrange(1 << 40, 1 << 60)
        windows = []
        t = base
        for seq in range(1, rng.randrange(1, 8)):
            lo = t + rng.randrange(0, 5000)
            hi = lo + rng.randrange(0, 100_000)
            windows.append((seq if rng.random() > 0.1 else 1, lo, hi))  # a repeated seq now and then
            t = hi if rng.random() > 0.2 else lo  # overlapping windows now and then
        records = []
        for _ in range(rng.randrange(0, 60)):
            start = base + rng.randrange(0, max(1, t - base + 10_000))
            name = rng.choice(NAMES) if rng.random() > 0.4 else ""
            end = start + rng.choice([rng.randrange(0, 50_000), rng.randrange(0, 300_000)])
            if name and rng.random() < 0.5:  # a launch stamp, near its start or anywhere
                near = start + rng.randrange(-20_000, 20_000)
                launch = max(1, near if rng.random() < 0.7 else base + rng.randrange(0, t - base + 10_000))
                records.append((start, end, name, launch))
            else:
                records.append((start, end, name))
        if windows and trial % 3 == 0:  # records on the window edges
            records += [(windows[0][1], windows[0][1] + 7, "edge"), (windows[0][2], windows[0][2] + 9, "")]
        if trial % 3 == 1:  # windows of one record each, of durations Python writes in each of its forms
            for k, ns in enumerate([2_000_000, 20_000_000, 1, 10, 0, 100, 123_456_789, 10**13, 5 * 10**18]):
                lo = t + 10**9 * (k + 1)
                windows.append((100 + k, lo, lo + 10))
                records.append((lo, lo + ns, ""))
        modules: list[tuple[int, bytes | None, int]] = [
            (5, cubins[0], len(cubins[0])),
            (6, None, 1234),  # no image pointer: size only
            (7, b"", 0),  # an empty image
            (5, cubins[2], len(cubins[2])),  # the same module id again: replaced in place
            (8, b"not an elf at all", 17),
        ][: rng.randrange(0, 6)]
        census_error = rng.choice(
            ["", "module records not requested", "unreadable CUPTI module record: \u00e9"]
        )
        payload = {
            "records": [[r[0], r[1], _hex(r[2]), *r[3:]] for r in records],
            "windows": [list(w) for w in windows],
            "modules": [[i, None if img is None else img.hex(), size] for i, img, size in modules],
            "census_error": _hex(census_error),
            "incomplete": trial % 4,
            "flushes": trial % 5,
        }
        first, second, seen = run(driver, "spans", stdin=payload)
        assert seen == ("seen" if every_window_seen(records, windows) else "unseen")
        spans, counts = spans_by_window(records, windows)
        by_id: dict[int, LoadedModule] = {}
        for module_id, image, size in modules:
            by_id[module_id] = (
                LoadedModule(
                    sha256=hashlib.sha256(image).hexdigest(), size=size, functions=elf_functions(image)
                )
                if image
                else LoadedModule(sha256="", size=size, functions=None)
            )
        expected = Spans(
            spans=spans,
            activities=counts,
            kernels=kernels_by_window(records, windows),
            modules=list(by_id.values()),
            census_error=census_error,
            incomplete=trial % 4,
            flushes=trial % 5,
            outside=strays(records, windows)[0],
            empty_nearest_us=strays(records, windows)[1],
            ran_in=ran_in(records, windows),
            launched_in=launched_in(records, windows),
            launch_known=launch_known(records),
        )
        assert Spans.model_validate_json(first) == expected
        text = ",".join(f'"{k}":{json.dumps(v)}' for k, v in spans.items())
        assert '"spans":{' + text + "}" in first  # floats written as Python writes them
        assert Spans.model_validate_json(second).modules == []  # reported once


def test_a_trial_waits_for_every_window_s_record_as_the_python_worker_does(driver: Path) -> None:
    # a record starting on a window's edge counts; one just past it, or before it, does not, unless it is
    # a kernel running RUN_IN_NS or more into the window (a stamp skewed early)
    windows = [(1, 100_000, 200_000), (2, 300_000, 400_000)]
    cases = {
        ((100_000, 150_000, "k"), (400_000, 450_000, "")): True,
        ((99_999, 150_000, "k"), (400_000, 450_000, "")): True,
        ((99_999, 149_999, "k"), (400_000, 450_000, "")): False,  # 49.999 us in
        ((99_999, 190_000, ""), (400_000, 450_000, "")): False,  # a memset: its start alone
        ((50_000, 99_999, "k"), (400_000, 450_000, "")): False,
        ((150_000, 160_000, "k"), (400_001, 450_000, "")): False,
        ((200_000, 260_000, "k"), (300_000, 300_001, "")): True,
    }
    for records, seen in cases.items():
        assert every_window_seen(list(records), windows) is seen
        assert run(driver, "spans", stdin=_plain_spans(records, windows))[2] == ("seen" if seen else "unseen")
    assert every_window_seen([], [])
    # timestamps CUPTI has not filled in (a forced flush's incomplete records)
    assert complete(5, 5) and complete(5, 9)
    assert not complete(0, 9) and not complete(5, 0) and not complete(9, 5)


def test_where_the_records_a_window_lacks_fell_matches_the_python_worker(driver: Path) -> None:
    windows = [(1, 1000, 2000), (2, 5000, 6000), (3, 9000, 9500)]
    cases = [
        ([(1500, 1600, "k"), (5500, 5600, "k"), (9100, 9200, "k")], (0, None)),  # all held
        # every kernel 700 ns before its window (skewed stamps): the empty windows' median is -700 ns
        ([(300, 400, "k"), (4300, 4400, "k"), (8300, 8400, "k"), (900, 950, "")], (4, -0.7)),
        # one window empty, its nearest kernel 250 ns after it; a memset is no kernel
        ([(1500, 1600, "k"), (6250, 6300, "k"), (4990, 4995, ""), (9100, 9200, "k")], (2, 0.25)),
        # equally far before and after: the earlier record
        ([(1500, 1600, "k"), (4900, 4950, "k"), (6100, 6200, "k"), (9100, 9200, "k")], (2, -0.1)),
        ([(3000, 3100, "")], (1, None)),  # no kernel at all
    ]
    for records, expected in cases:
        assert strays(records, windows) == expected
        got = Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(records, windows))[0])
        assert (got.outside, got.empty_nearest_us) == expected


def _belongs(record, lo, hi) -> bool:
    """A record belongs to [lo, hi] (``cupti_spans.Records``), the obvious way."""
    start, end, name = record[:3]
    launched = len(record) > 3 and bool(record[3]) and lo <= record[3] <= hi
    runs_in = start < lo and end >= min(lo + RUN_IN_NS, 2**64 - 1)
    return lo <= start <= hi or (bool(name) and (runs_in or launched))


def _strays_by_hand(records, windows):
    """``strays`` the slow, obvious way (every record against every window)."""
    inside = [any(_belongs(r, lo, hi) for _, lo, hi in windows) for r in records]
    kernels = [r[0] for r in records if r[2]]
    offsets = []
    for _, lo, hi in windows:
        if any(_belongs(r, lo, hi) for r in records) or not kernels:
            continue
        d, k = min((lo - k if k < lo else k - hi, k) for k in kernels)
        d = min(d, 2**63 - 1)
        offsets.append(-d if k < lo else d)
    offsets.sort()
    return sum(not x for x in inside), (offsets[(len(offsets) - 1) // 2] / 1e3 if offsets else None)


def test_where_the_records_fell_is_what_the_slow_way_finds(driver: Path) -> None:
    rng = random.Random(11)
    for _ in range(300):
        windows = []
        for seq in range(rng.randrange(0, 7)):
            lo = rng.randrange(0, 10_000)
            windows.append((seq, lo, lo + rng.randrange(0, 3000)))  # overlapping now and then
        records = [
            (
                start,
                start + rng.choice([5, rng.randrange(0, 3000), rng.randrange(0, 120_000)]),
                rng.choice(["k", ""]),
                *(
                    [rng.choice([0, rng.randrange(1, 14_000), start + rng.randrange(0, 2000)])]
                    * (rng.random() < 0.6)
                ),
            )
            for start in (rng.randrange(0, 14_000) for _ in range(rng.randrange(0, 12)))
        ]
        assert strays(records, windows) == _strays_by_hand(records, windows)
        spans, counts = spans_by_window(records, windows)
        for seq, (lo, hi) in {seq: (lo, hi) for seq, lo, hi in windows}.items():  # a repeated seq: the last
            held = [r for r in records if _belongs(r, lo, hi)]
            assert counts[seq] == len(held)
            assert spans[seq] == ((max(r[1] for r in held) - min(r[0] for r in held)) / 1e6 if held else None)
        kernels = Counter(r[2] for r in records if r[2] and any(_belongs(r, lo, hi) for _, lo, hi in windows))
        assert kernels_by_window(records, windows) == dict(kernels)
        starts_inside = [any(lo <= r[0] <= hi for _, lo, hi in windows) for r in records]
        stamped = [any(_belongs(r[:3], lo, hi) for _, lo, hi in windows) for r in records]
        belongs = [any(_belongs(r, lo, hi) for _, lo, hi in windows) for r in records]
        assert ran_in(records, windows) == sum(
            s and not i for s, i in zip(stamped, starts_inside, strict=True)
        )
        assert launched_in(records, windows) == sum(
            b and not s for b, s in zip(belongs, stamped, strict=True)
        )
        got = Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(records, windows))[0])
        assert (got.spans, got.activities, got.kernels) == (
            spans,
            counts,
            kernels_by_window(records, windows),
        )
        assert (got.ran_in, got.launched_in) == (ran_in(records, windows), launched_in(records, windows))
    # a window whose clock ran backwards (hi < lo) holds nothing that starts between, as in the runner
    backwards = [(1, 10, 2)]
    for records in ([(5, 6, ""), (20, 21, "")], [(5, 6, "")]):
        assert spans_by_window(records, backwards) == ({1: None}, {1: 0})
        got = Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(records, backwards))[0])
        assert got.spans == {1: None} and got.activities == {1: 0}
    # a distance past INT64_MAX ns counts as INT64_MAX, in the runner too
    far = [(1, 2, "k")]
    windows = [(1, 2**63 + 10, 2**63 + 20)]
    assert strays(far, windows) == _strays_by_hand(far, windows) == (1, -(2**63 - 1) / 1e3)
    assert run(driver, "far") == [f"1 {-(2**63 - 1)}"]


def test_a_kernel_stamped_before_its_window_still_times_its_call(driver: Path) -> None:
    """The H100's lost spans: an honest kernel's start stamped a few us before its call's window.

    It belongs to the window (span, census, the trial's wait) since it runs on well into it; a memset so
    stamped does not (the L2 flush's memset ends just before every window), nor a kernel that reaches
    less than RUN_IN_NS into it. A kernel launched before the window that runs into it is charged from
    its own start.
    """
    windows = [(1, 10_000, 800_000), (2, 2_000_000, 2_800_000)]
    skewed = [(6_600, 756_600, "gemm"), (1_996_000, 2_746_000, "gemm"), (0, 9_000, "")]
    for got in (
        None,
        Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(skewed, windows))[0]),
    ):
        spans, counts = spans_by_window(skewed, windows) if got is None else (got.spans, got.activities)
        assert spans == {1: 0.75, 2: 0.75} and counts == {1: 1, 2: 1}
        kernels = kernels_by_window(skewed, windows) if got is None else got.kernels
        outside = strays(skewed, windows)[0] if got is None else got.outside
        assert kernels == {"gemm": 2} and outside == 1  # the memset alone is in no window
        assert (ran_in(skewed, windows) if got is None else got.ran_in) == 2
    assert every_window_seen(skewed, windows)
    assert run(driver, "spans", stdin=_plain_spans(skewed, windows))[2] == "seen"
    # a kernel that ended just before the window, stamped late (the Python worker's flush, WaitNs)
    late = [(0, 10_000 + RUN_IN_NS - 1, "flush"), (20_000, 770_000, "gemm")]
    assert spans_by_window(late, windows)[0][1] == 0.75 and kernels_by_window(late, windows) == {"gemm": 1}
    memset_only = [(9_000, 20_000, ""), (2_000_100, 2_000_200, "")]
    assert spans_by_window(memset_only, windows)[0] == {1: None, 2: 0.0001}
    early = [(0, 500_000, "spin"), (20_000, 770_000, "gemm")]  # launched 10 us before the window
    assert spans_by_window(early, windows)[0][1] == 0.77 and kernels_by_window(early, windows) == {
        "spin": 1,
        "gemm": 1,
    }


def test_a_kernel_launched_in_its_window_belongs_to_it_however_early_its_stamps(driver: Path) -> None:
    """A kernel shorter than the clock skew, stamped wholly before its call's window, joins it by launch.

    Its launch API call's host stamp (joined by correlation id in the runner) lies in the window: it
    counts in the call's span (from its own stamps), its activities, the census and the trial's wait,
    as the python worker's functions say too. Without its launch it stays outside, as before. A launch
    only adds: a kernel belonging by its stamps is counted once, and a launch between windows, or in a
    window whose clock ran backwards, adds nothing.
    """
    windows = [(1, 10_000, 800_000), (2, 2_000_000, 2_800_000)]
    foreign = (1_000, 8_000, "evil", 10_500)  # 7 us, stamped 2 us before the window it was launched in
    honest = (20_000, 770_000, "gemm", 10_700)
    between = (1_000_000, 1_100_000, "helper", 900_000)
    twice = (2_100_000, 2_200_000, "gemm", 2_050_000)  # starts inside and was launched inside
    records = [foreign, honest, between, twice]
    got = Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(records, windows))[0])
    for spans, counts, kernels, outside, by_launch, known in (
        (
            *spans_by_window(records, windows),
            kernels_by_window(records, windows),
            strays(records, windows)[0],
            launched_in(records, windows),
            launch_known(records),
        ),
        (got.spans, got.activities, got.kernels, got.outside, got.launched_in, got.launch_known),
    ):
        assert spans == {1: 0.769, 2: 0.1} and counts == {1: 2, 2: 1}
        assert kernels == {"evil": 1, "gemm": 2} and outside == 1 and by_launch == 1 and known == 4
    # running in by exactly RUN_IN_NS and launched inside too: once, in the runner as in the worker
    both = [(9_000, 10_000 + RUN_IN_NS, "k", 9_500), (9_000, 10_000 + RUN_IN_NS, "k", 10_100)]
    got = Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(both, windows[:1]))[0])
    assert spans_by_window(both, windows[:1])[1] == got.activities == {1: 2}
    assert (
        (ran_in(both, windows[:1]), launched_in(both, windows[:1])) == (got.ran_in, got.launched_in) == (2, 0)
    )
    assert every_window_seen([foreign], windows[:1])
    assert run(driver, "spans", stdin=_plain_spans([foreign], windows[:1]))[2] == "seen"
    unknown = [foreign[:3], honest[:3]]  # no launch came back: the stamp rules alone
    got = Spans.model_validate_json(run(driver, "spans", stdin=_plain_spans(unknown, windows))[0])
    assert kernels_by_window(unknown, windows) == got.kernels == {"gemm": 1}
    assert strays(unknown, windows)[0] == got.outside == 1 and launched_in(unknown, windows) == 0
    assert not every_window_seen([foreign[:3]], windows[:1])
    backwards = [(1, 10_000, 2_000)]
    assert spans_by_window([(1_000, 8_000, "k", 5_000)], backwards) == ({1: None}, {1: 0})
    got = Spans.model_validate_json(
        run(driver, "spans", stdin=_plain_spans([(1_000, 8_000, "k", 5_000)], backwards))[0]
    )
    assert got.activities == {1: 0}


def test_kernels_take_their_launch_by_correlation_id(driver: Path) -> None:
    payload = {
        "records": [[5, 9, _hex("a"), 7], [6, 10, _hex("b"), 8], [7, 11, _hex("c"), 0], [8, 12, _hex(""), 9]],
        "launches": [[7, 100], [9, 200], [0, 300]],
    }
    # a's id came back; b's did not; c has no id (0 never matches, even a launch of id 0); the nameless
    # kernel is named "(unnamed kernel)" and joins as any kernel
    assert run(driver, "join", stdin=payload) == ["100", "0", "0", "200"]


def test_a_nameless_kernel_is_named_for_the_census_as_the_python_worker_names_it(driver: Path) -> None:
    unnamed = kernel_name(None)
    assert run(driver, "kname") == [unnamed, kernel_name(""), "k", unnamed, "k", "[]"]
    assert kernel_name(None) == kernel_name("") == "(unnamed kernel)" and kernel_name("k") == "k"
    # the buffer callback makes its records with these (the glue itself needs CUPTI: read, not run)
    glue = (NATIVE.parents[2] / "ptxgym/evaluation/runner/cupti_path.h").read_text()
    assert "kernel_record(k->start, k->end, k->name, k->correlationId)" in glue
    assert glue.count("copy_record(m->start") == 2
    assert "kernel_name(data[i].functionName)" in glue  # the SASS rows' functions alike


def test_the_trial_s_last_flushes_match_the_python_worker(driver: Path) -> None:
    for ready_after in (0, 1, 2, 5, 50):
        for wait in (0, 3, 10):
            ticks, order = iter(range(10**6)), []

            def flush(forced: bool, order: list = order) -> None:
                order.append("f" if forced else "d")

            got = settle_flush(
                flush,
                lambda order=order, n=ready_after: order.count("d") >= n,
                wait_s=wait,
                clock=lambda ticks=ticks: next(ticks),
                nap=lambda: None,
            )
            (line,) = run(driver, "settle", stdin={"ready_after": ready_after, "wait": wait})
            assert line == f"{''.join(order)} {got}"
            # one default flush at least, the forced one last; no waiting once the records are back
            assert order[-1] == "f" and order.count("f") == 1 and got == order.count("d") >= 1
            if wait >= 2 * ready_after:
                assert got == max(1, ready_after)


def test_sass_rows_match_the_python_worker(driver: Path) -> None:
    rng = random.Random(5)
    long_name = "_Z" + "x" * 5000 + "\u00e9"
    names = [n.encode() for n in [*NAMES, long_name, long_name + "y"]] + [b"bad\xff\xfe", b"cut\xe2\x82"]
    metric_sets = [
        {"smsp__sass_inst_executed": 11, "smsp__sass_thread_inst_executed_pred_on": 22, "other": 33},
        {"smsp__sass_inst_executed": 11, "smsp__sass_thread_inst_executed_op_pred_on": 44},
        {"smsp__sass_inst_executed": 11},
        {"smsp__sass_thread_inst_executed_pred_on": 22},  # no instruction count: no rows
    ]
    for trial in range(24):
        available = metric_sets[trial % len(metric_sets)]
        ids = list(available.values()) + [99]
        records = []
        for _ in range(rng.randrange(0, 80)):
            pairs = [(rng.choice(ids), rng.randrange(0, 1 << 40)) for _ in range(rng.randrange(1, 3))]
            records.append((rng.choice(names), rng.choice([0, 16, 32, 0x1230]), pairs))
        max_rows = rng.choice([0, 1, 5, 200_000])
        payload = {
            "available": [[k, v] for k, v in available.items()],
            "records": [[name.hex(), pc, [list(p) for p in pairs]] for name, pc, pairs in records],
            "max_rows": max_rows,
        }
        (line,) = run(driver, "sass", stdin=payload)
        picked = {
            col: next((available[n] for n in wanted if n in available), None)
            for col, wanted in sc.WANTED.items()
        }
        if picked["inst_executed"] is None:
            assert line == "no inst"
            continue
        columns = {mid: col for col, mid in picked.items() if mid is not None}
        merged = sc.merge_records([(n.decode(errors="replace"), pc, p) for n, pc, p in records], columns)
        expected = [  # as the worker builds its reply
            SassRow(
                function=c.function[:4096],
                pc=c.pc_offset,
                inst=c.values.get("inst_executed", 0),
                threads=c.values.get("thread_inst_executed_true", 0),
            )
            for c in merged[:max_rows]
        ]
        assert TypeAdapter(list[SassRow]).validate_json(line) == expected


def test_json_strings_decode_as_python_replaces(driver: Path) -> None:
    rng = random.Random(9)
    samples = [b"", b"plain", b'"\\', bytes(range(0, 0x20)), b"\x7f", "\u00e9\u2211\U0001f600".encode()]
    samples += [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xf0\x9f\x98", b"\xff"]
    samples += [rng.randbytes(rng.randrange(1, 40)) for _ in range(300)]
    samples += [
        bytes(rng.choice(b"\x41\x80\xbf\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5") for _ in range(12))
        for _ in range(300)
    ]
    items = [[s.hex(), rng.choice([-1, -1, 0, 1, 3])] for s in samples]
    lines = run(driver, "quote", stdin={"items": items})
    for (hexed, cut), line in zip(items, lines, strict=True):
        text = bytes.fromhex(hexed).decode("utf-8", errors="replace")
        assert json.loads(line) == (text if cut < 0 else text[:cut]), hexed
        assert line.isascii()


def _synthetic_elf(symbols: int) -> bytes:
    """A minimal 64-bit ELF: a null section, a symbol table of `symbols` zero entries and a string table."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, 64)  # e_shoff
    struct.pack_into("<HH", header, 0x3A, 64, 3)  # e_shentsize, e_shnum
    symtab_at, symtab_size = 64 + 3 * 64, 24 * symbols
    sections = bytes(64)
    sections += struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, symtab_at, symtab_size, 2, 0, 8, 24)
    sections += struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, symtab_at + symtab_size, 1, 0, 0, 1, 0)
    return bytes(header) + sections + bytes(symtab_size + 1)


def test_elf_symbol_table_limit_matches_python(driver: Path, tmp_path: Path) -> None:
    images = [_synthetic_elf(3), _synthetic_elf((1 << 20) + 1)]  # within the limit, and one past it
    for i, image in enumerate(images):
        (tmp_path / f"{i}.elf").write_bytes(image)
    got = run(driver, "elf", *(str(tmp_path / f"{i}.elf") for i in range(len(images))))
    assert [json.loads(line) for line in got] == [elf_functions(image) for image in images] == [[], None]


def test_floats_are_written_as_python_writes_them(driver: Path) -> None:
    rng = random.Random(13)
    values = [0.0, 1.0, 2.0, 20.0, 0.1, 1e-5, 1e-4, 1e16, 1e15, 123456789.0, 1.5e300, 2.5e-300, -0.5, -2e20]
    values += [rng.uniform(1, 10) * 10.0 ** rng.randrange(-30, 30) for _ in range(400)]
    values += [rng.randrange(1 << 53) / 1e6 for _ in range(200)]  # spans: whole ns over 1e6
    assert run(driver, "float", stdin={"values": values}) == [json.dumps(v) for v in values]
