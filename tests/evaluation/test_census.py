"""The in-band kernel census (trusted/census.py, session folding, the worker's CUPTI record reading).

The module-image rule is checked with real cubins built by nvcc: the candidate's own image, the same image
reloaded, a harness image, and a second image (compiled from other source) that defines the built kernel's
name, as a module loaded from memory would.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
from types import SimpleNamespace

import pytest

from ptxgym.cpu.cubin_symbols import elf_functions
from ptxgym.cpu.toolchain import find_toolchain
from ptxgym.evaluation.protocol import LoadedModule, Spans
from ptxgym.evaluation.sandboxed.cupti_spans import CuptiSpans, kernels_by_window
from ptxgym.evaluation.trusted.census import census_failure
from ptxgym.evaluation.trusted.session import CENSUS_OVERFLOW, MAX_CENSUS_NAMES, SessionResult, _add_census

OWN = "_Z4gemmPfi"
OWN_SOURCE = "__global__ void gemm(float* c, int n) { if (threadIdx.x < n) c[threadIdx.x] = 1.0f; }\n"
FORGED_SOURCE = "__global__ void gemm(float* c, int n) { c[0] = 2.0f * n; }\n"
HARNESS_SOURCE = 'extern "C" __global__ void fill(float* x) { x[threadIdx.x] = 0.0f; }\n'


def _cubin(tmp, name: str, source: str) -> bytes:
    (tmp / f"{name}.cu").write_text(source)
    nvcc = str(find_toolchain().nvcc)
    subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-o", f"{name}.cubin", f"{name}.cu"], cwd=tmp, check=True)
    return (tmp / f"{name}.cubin").read_bytes()


def _module(image: bytes) -> LoadedModule:
    return LoadedModule(
        sha256=hashlib.sha256(image).hexdigest(), size=len(image), functions=elf_functions(image)
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("census")
    return {
        "own": _cubin(tmp, "own", OWN_SOURCE),
        "forged": _cubin(tmp, "forged", FORGED_SOURCE),
        "harness": _cubin(tmp, "harness", HARNESS_SOURCE),
    }


@pytest.mark.nvcc
def test_only_the_built_image_passes(images: dict[str, bytes]) -> None:
    own, harness = _module(images["own"]), _module(images["harness"])
    assert census_failure({OWN: 60}, [harness, own], [OWN]) == ""
    assert census_failure({OWN: 60}, [own, own], [OWN]) == ""  # the same image reloaded


@pytest.mark.nvcc
def test_a_second_image_defining_a_built_name_is_foreign(images: dict[str, bytes]) -> None:
    own, forged = _module(images["own"]), _module(images["forged"])
    assert OWN in (forged.functions or []) and forged.sha256 != own.sha256
    message = census_failure({OWN: 60}, [own, forged], [OWN])
    assert "defined by 2 different module images" in message and OWN in message


def test_a_kernel_not_in_the_module_is_foreign() -> None:
    message = census_failure({OWN: 60, "_Z12cublas_gemmv": 60}, [], [OWN])
    assert "1 kernel(s) that are not in the candidate's built module" in message
    assert "_Z12cublas_gemmv" in message


def test_a_module_without_device_code_owns_no_kernel() -> None:
    """A kernel that ran for a module with none is foreign (a library's, reached from host code)."""
    message = census_failure({"_Z12cublas_gemmv": 60}, [], [])
    assert "1 kernel(s) that are not in the candidate's built module" in message
    assert census_failure({}, [], []) == ""  # host code alone (a copy, no kernel): nothing foreign


def test_no_kernel_list_means_no_census_and_an_opaque_module_proves_nothing() -> None:
    from ptxgym.evaluation.protocol import LoadedModule
    from ptxgym.evaluation.trusted.base import BuiltCandidate
    from ptxgym.evaluation.trusted.census import in_band_census

    result = SessionResult()
    _add_census(result, Spans(kernels={"_Z12cublas_gemmv": 3}, modules=[]))
    bridge = BuiltCandidate(
        task_id="t", so_path="x.so", source_sha256="", artifact_sha256="", static_target=False
    )
    assert bridge.kernels is None and in_band_census(result, bridge, True, {}) == ("", False)
    own = bridge.model_copy(update={"kernels": [OWN]})
    result = SessionResult()
    opaque = LoadedModule(sha256="ab" * 32, size=64, functions=None)
    _add_census(result, Spans(kernels={OWN: 3}, modules=[opaque]))
    details: dict = {}
    assert in_band_census(result, own, True, details) == ("", False)  # not failed, but not proved
    assert details["census"]["opaque_modules"] == 1


def test_kernels_are_counted_inside_windows_only() -> None:
    records = [(100, 150, OWN), (120, 400, ""), (500, 600, "_Z5otherv"), (1000, 1100, OWN)]
    windows = [(7, 90, 402), (9, 950, 1200)]
    assert kernels_by_window(records, windows) == {OWN: 2}  # memcpy (no name) and the kernel outside: not


def test_session_folds_trials_and_an_overflow_fails() -> None:
    result = SessionResult()
    _add_census(result, Spans(kernels={OWN: 10}, modules=[]))
    _add_census(result, Spans(kernels={OWN: 10}, modules=[]))
    assert result.kernels == {OWN: 20} and result.census_trials == 2 and not result.census_error
    flood = {f"k{i}": 1 for i in range(MAX_CENSUS_NAMES + 1)}
    _add_census(result, Spans(kernels=flood))
    assert result.census_error == CENSUS_OVERFLOW and result.kernels == {OWN: 20}


@pytest.mark.nvcc
def test_worker_reads_a_module_from_cuptis_module_loaded_callback(images: dict[str, bytes]) -> None:
    """The worker's module-loaded callback: resource data -> module data -> the image, hashed and parsed.

    The callback data here is laid out by the test as cupti_callbacks.h declares it (no CUPTI without a
    GPU); the image is a real cubin.
    """
    from ptxgym.evaluation.sandboxed.cupti_spans import _ModuleData, _ResourceData

    image = images["own"]
    buf = ctypes.create_string_buffer(image, len(image))
    module = _ModuleData(moduleId=3, cubinSize=len(image), pCubin=ctypes.addressof(buf))
    resource = _ResourceData(context=None, handle=None, descriptor=ctypes.addressof(module))
    spans = CuptiSpans.__new__(CuptiSpans)  # no CUPTI here: only the callback's reading is exercised
    spans._modules, spans.census_error = {}, ""
    spans._on_resource(None, 0, 0, ctypes.addressof(resource))  # the C struct's address
    empty = _ModuleData(moduleId=4, cubinSize=0, pCubin=None)
    spans._on_resource(None, 0, 0, SimpleNamespace(resource_descriptor=ctypes.addressof(empty)))
    assert not spans.census_error
    spans._on_resource(None, 0, 0, ctypes.addressof(_ResourceData()))  # no module data: noted, not raised
    assert "no module data" in spans.census_error
    first, blank = spans._modules[3], spans._modules[4]
    assert first == _module(image) and OWN in (first.functions or [])
    assert blank.functions is None and blank.sha256 == ""
    assert ctypes.sizeof(_ModuleData) == 24 and _ModuleData.pCubin.offset == 16  # cupti_callbacks.h


def test_records_without_their_timestamps_are_counted_and_cut_into_no_span() -> None:
    """A forced flush's incomplete records (timestamps 0) are counted, never a span or a census launch."""
    spans = CuptiSpans.__new__(CuptiSpans)  # no CUPTI here: only the buffer callback's reading
    spans._records, spans.incomplete = [], 0
    spans._kind_ids, spans._kernel_kind = {1, 2}, 1
    acts = [
        SimpleNamespace(kind=1, start=100, end=150, name="k"),
        SimpleNamespace(kind=1, start=0, end=0, name="k"),  # not completed: both stamps missing
        SimpleNamespace(kind=2, start=120, end=0, name=""),  # its end missing
        SimpleNamespace(kind=7, start=0, end=0, name=""),  # a kind not traced: neither kept nor counted
    ]
    spans._completed(acts)
    assert spans._records == [(100, 150, "k")] and spans.incomplete == 2


def test_a_trial_s_end_flushes_by_default_until_its_windows_are_seen_then_forced() -> None:
    """``CuptiSpans.end``: default flushes (0) until every window holds a record, then a forced one (1)."""
    spans = CuptiSpans.__new__(CuptiSpans)  # no CUPTI here: a stand-in records the flags it is given
    spans._records, spans._windows, spans._kinds, spans._enabled = [], [(1, 100, 200)], (), True
    spans.incomplete = spans.flushes = 0
    flags: list[int] = []

    def flush_all(flag: int) -> None:
        flags.append(flag)
        if len(flags) == 3:  # the window's record comes back at the third default flush
            spans._records.append((150, 160, "k"))

    spans._cupti = SimpleNamespace(activity_flush_all=flush_all, activity_disable=lambda kind: None)
    got, counts = spans.end()
    assert flags == [0, 0, 0, 1] and spans.flushes == 3
    assert got == {1: 10 / 1e6} and counts == {1: 1}  # ns to ms


def test_a_count_past_64_bits_is_no_count() -> None:
    """A worker's counts stay within 64 bits: sums of forged huge ones broke printing (a review's find)."""
    import pydantic

    from ptxgym.evaluation.protocol import Spans

    assert Spans(incomplete=2**64 - 1).incomplete == 2**64 - 1
    for field in ("incomplete", "flushes", "outside", "ran_in"):
        with pytest.raises(pydantic.ValidationError):
            Spans(**{field: 2**64})
    with pytest.raises(pydantic.ValidationError):
        Spans(activities={1: 10**4000})


def test_a_kernel_without_a_name_is_foreign_not_a_memset() -> None:
    """A kernel CUPTI names not at all is ``UNNAMED_KERNEL`` to the census, so it is foreign.

    Before, the runner read a missing name as "", a memset's to the census (passed over): a nameless
    foreign kernel, if a crafted module can launch one, would have run unseen.
    """
    from ptxgym.evaluation.sandboxed.cupti_spans import UNNAMED_KERNEL

    spans = CuptiSpans.__new__(CuptiSpans)
    spans._records, spans.incomplete = [], 0
    spans._kind_ids, spans._kernel_kind = {1, 2}, 1
    spans._completed(
        [
            SimpleNamespace(kind=1, start=100, end=150, name=None),
            SimpleNamespace(kind=1, start=160, end=170, name=""),
            SimpleNamespace(kind=2, start=180, end=190, name=None),  # a memset: no kernel name at all
        ]
    )
    assert [r[2] for r in spans._records] == [UNNAMED_KERNEL, UNNAMED_KERNEL, ""]
    kernels = kernels_by_window(spans._records, [(1, 0, 1000)])
    assert kernels == {UNNAMED_KERNEL: 2}
    assert "not in the candidate's built module" in census_failure(kernels, [], ["_Z3ownPf"])
