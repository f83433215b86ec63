"""GPU facts for the record: name, architecture, L2 size, driver, CUDA runtime, libraries, SM clocks.

Driver-level numbers come from cuda.bindings (L2 size as a device attribute, driver API version) and
NVML through pynvml when present (driver release, SM clock), with torch and ``nvidia-smi`` as
fallbacks. Nothing here raises for a missing optional library; a fact that cannot be read is None.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuFacts:
    """What the verdicts record about the device."""

    index: int
    name: str
    capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    total_bytes: int
    driver: str | None
    cuda_runtime: str | None
    torch: str
    cublas: str | None = None
    """cuBLAS version (the installed nvidia-cublas distribution), None if unknown."""
    cudnn: str | None = None
    """cuDNN version as torch loaded it (``torch.backends.cudnn.version()``), None if unavailable."""
    sm_clock_max_mhz: int | None = None
    """Maximum SM clock (NVML); a different board or power profile changes it."""
    sm_clock_app_mhz: int | None = None
    """Applications SM clock (NVML): what ``nvidia-smi -ac``/locked clocks set for compute."""

    @property
    def key(self) -> str:
        """Identity of the timing environment (for the baseline cache): GPU, driver, clocks, libraries."""
        return (
            f"{self.name}|{self.driver}|{self.cuda_runtime}|torch {self.torch}|cublas {self.cublas}|"
            f"cudnn {self.cudnn}|sm max {self.sm_clock_max_mhz} app {self.sm_clock_app_mhz} MHz"
        )


def pci_bus_id(index: int) -> str:
    """The PCI address of CUDA device ``index`` ("0000:18:00.0"), "" where torch does not say."""
    try:
        import torch

        p = torch.cuda.get_device_properties(index)
        domain, bus, dev = (getattr(p, f"pci_{k}_id") for k in ("domain", "bus", "device"))
        return f"{domain:04x}:{bus:02x}:{dev:02x}.0"
    except (AttributeError, RuntimeError, AssertionError, ValueError, TypeError):
        return ""


def _l2_bytes(index: int) -> int | None:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return None
    err, value = runtime.cudaDeviceGetAttribute(runtime.cudaDeviceAttr.cudaDevAttrL2CacheSize, index)
    return int(value) if int(err) == 0 else None


def _nvml_handle(index: int):
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        return None, None


def _smi(query: str, index: int) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def driver_release(index: int) -> str | None:
    """The driver release, e.g. 580.159.04."""
    nvml, _ = _nvml_handle(index)
    if nvml is not None:
        value = nvml.nvmlSystemGetDriverVersion()
        return value.decode() if isinstance(value, bytes) else str(value)
    return _smi("driver_version", index)


def sm_clock_mhz(index: int) -> int | None:
    """Current SM clock in MHz (NVML, else nvidia-smi), None if neither answers."""
    nvml, handle = _nvml_handle(index)
    if nvml is not None:
        try:
            return int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        except nvml.NVMLError:
            pass
    value = _smi("clocks.sm", index)
    try:
        return int(float(value)) if value else None
    except ValueError:
        return None


def sm_clock_limits_mhz(index: int) -> tuple[int | None, int | None]:
    """(maximum, applications) SM clock in MHz (NVML, else nvidia-smi); None where neither answers."""
    nvml, handle = _nvml_handle(index)
    if nvml is not None:
        values: list[int | None] = []
        for read in (nvml.nvmlDeviceGetMaxClockInfo, nvml.nvmlDeviceGetApplicationsClock):
            try:
                values.append(int(read(handle, nvml.NVML_CLOCK_SM)))
            except nvml.NVMLError:
                values.append(None)
        return values[0], values[1]
    found: list[int | None] = []
    for query in ("clocks.max.sm", "clocks.applications.graphics"):
        value = _smi(query, index)
        try:
            found.append(int(float(value)) if value else None)
        except ValueError:
            found.append(None)
    return found[0], found[1]


def library_versions() -> tuple[str | None, str | None]:
    """(cuBLAS, cuDNN) versions: the installed nvidia-cublas distribution and the cuDNN torch loads."""
    import importlib.metadata

    import torch

    cublas = None
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-cublas"):
            cublas = f"{name} {dist.version}"
            break
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:
        cudnn = None
    return cublas, None if cudnn is None else str(cudnn)


def device_facts(index: int) -> GpuFacts:
    """Facts of one CUDA device (initialises CUDA in this process)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    l2 = _l2_bytes(index) or int(getattr(props, "L2_cache_size", 0)) or 50 << 20
    cublas, cudnn = library_versions()
    clock_max, clock_app = sm_clock_limits_mhz(index)
    return GpuFacts(
        index=index,
        name=props.name,
        capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        l2_bytes=l2,
        total_bytes=props.total_memory,
        driver=driver_release(index),
        cuda_runtime=torch.version.cuda,
        torch=torch.__version__,
        cublas=cublas,
        cudnn=cudnn,
        sm_clock_max_mhz=clock_max,
        sm_clock_app_mhz=clock_app,
    )
