"""Guard pages: the arena's blob built with the CUDA virtual-memory API, shared through a POSIX fd.

Used by both sides of the trust boundary (``EvalSettings.guard_pages``). The trusted side creates one
physical allocation per buffer run (``cuMemCreate``, exportable as a POSIX file descriptor), reserves an
address range (``cuMemAddressReserve``) and maps each run into it (``cuMemMap``, ``cuMemSetAccess``) with
an unmapped page after every run (``trusted/guards.py``, ``vmm_layout``). One allocation per run because
the driver maps whole allocations only: on the H200 (driver 580) mapping a run at a non-zero offset of a
shared allocation failed with CUDA_ERROR_NOT_SUPPORTED. The worker receives the file descriptors over a
Unix socket (``SCM_RIGHTS``), imports them (``cuMemImportFromShareableHandle``) and maps the same runs at
the same offsets of its own reservation, so a kernel that reads or writes past a buffer leaves the mapping
and faults in the worker itself, whether or not a sanitizer watches. Legacy ``cudaIpc`` handles cannot
share such allocations, hence the fds.

Both sides see the whole span as one ``uint8`` CUDA tensor (through ``__cuda_array_interface__``) whose
views at the layout's offsets are the buffers, so everything above this module is unchanged. Nothing may
touch the holes: only views of mapped bytes are ever made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class VmmError(RuntimeError):
    """A driver call of the virtual-memory path failed (the caller falls back to a plain blob)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise VmmError(f"cuda-bindings is not importable ({exc}); guard pages need it") from exc
    return driver


def _ok(result: Any, call: str) -> Any:
    """The value(s) of a cuda.bindings call, or VmmError naming the call and the CUDA error."""
    d = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != int(d.CUresult.CUDA_SUCCESS):
        _, name = d.cuGetErrorName(err)
        raise VmmError(f"{call} failed: {name.decode() if isinstance(name, bytes) else name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _prop(device: int):
    d = _driver()
    prop = d.CUmemAllocationProp()
    prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    prop.requestedHandleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


def granularity(device: int) -> int:
    """The minimum mapping granularity of device memory (2 MiB on Hopper)."""
    d = _driver()
    _ok(d.cuInit(0), "cuInit")
    flag = d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    return int(_ok(d.cuMemGetAllocationGranularity(_prop(device), flag), "cuMemGetAllocationGranularity"))


def create(nbytes: int, device: int) -> tuple[Any, int]:
    """A physical allocation of ``nbytes`` on ``device`` and a POSIX fd that shares it."""
    d = _driver()
    handle = _ok(d.cuMemCreate(nbytes, _prop(device), 0), "cuMemCreate")
    try:
        kind = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        fd = int(_ok(d.cuMemExportToShareableHandle(handle, kind, 0), "cuMemExportToShareableHandle"))
    except VmmError:
        d.cuMemRelease(handle)
        raise
    return handle, fd


def import_fd(fd: int) -> Any:
    """The allocation handle behind a POSIX fd received from the trusted side."""
    d = _driver()
    _ok(d.cuInit(0), "cuInit")
    kind = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return _ok(d.cuMemImportFromShareableHandle(fd, kind), "cuMemImportFromShareableHandle")


class _Span:
    """A device byte range in ``__cuda_array_interface__`` form (for ``torch.as_tensor``)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "strides": None,
            "version": 3,
        }


def create_runs(sizes: Sequence[int], device: int) -> tuple[list[Any], list[int]]:
    """One shareable allocation per run size: their handles and fds (all released if one fails)."""
    import os

    handles: list[Any] = []
    fds: list[int] = []
    try:
        for size in sizes:
            handle, fd = create(size, device)
            handles.append(handle)
            fds.append(fd)
    except Exception:
        release_handles(handles)
        for fd in fds:
            os.close(fd)
        raise
    return handles, fds


def release_handles(handles: Sequence[Any]) -> None:
    """Release allocation handles (the memory goes once no mapping of them is left)."""
    d = _driver()
    for handle in handles:
        if handle is not None:
            d.cuMemRelease(handle)


class MappedBlob:
    """One process's mapping of the runs' allocations: each run at its offset, unmapped holes between."""

    def __init__(
        self, handles: Sequence[Any], total: int, page: int, runs: Sequence[tuple[int, int]], device: int
    ) -> None:
        """``runs``: (offset in the span, size) of each mapped run, backed by ``handles[i]`` in whole.

        This object owns the handles from the start: on any failure they are released with the mappings.
        """
        d = _driver()
        if len(handles) != len(runs):
            release_handles(handles)
            raise VmmError(f"{len(runs)} run(s) need as many allocations, got {len(handles)}")
        self.handles: list[Any] = list(handles)
        self.total, self.device = total, device
        self.base = 0
        self._mapped: list[tuple[int, int]] = []
        access = d.CUmemAccessDesc()
        access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = device
        access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        try:
            self.base = int(_ok(d.cuMemAddressReserve(total, page, 0, 0), "cuMemAddressReserve"))
            for (offset, size), handle in zip(runs, self.handles, strict=True):
                ptr = self.base + offset
                _ok(d.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
                self._mapped.append((ptr, size))
                _ok(d.cuMemSetAccess(ptr, size, [access], 1), "cuMemSetAccess")
        except Exception:
            self.release()  # the handles too: this object owns them from the start
            raise

    def tensor(self):
        """The whole span as one ``uint8`` CUDA tensor (views of mapped bytes only)."""
        import torch

        return torch.as_tensor(_Span(self.base, self.total), device=f"cuda:{self.device}")

    def release(self, free_handle: bool = True) -> None:
        """Unmap every run, free the address range and (``free_handle``) release the allocations."""
        d = _driver()
        for ptr, size in self._mapped:
            d.cuMemUnmap(ptr, size)
        self._mapped = []
        if self.base:
            d.cuMemAddressFree(self.base, self.total)
            self.base = 0
        if free_handle:
            release_handles(self.handles)
            self.handles = []
