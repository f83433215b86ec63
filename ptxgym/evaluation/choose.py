"""Choosing the evaluator an env attaches: ``select_evaluator()``.

``auto`` (the default, ``PTXGYM_EVALUATOR``) attaches the local GPU evaluator when torch is importable
and sees a CUDA device of a supported architecture, otherwise a ``NullEvaluator`` that states exactly
why; ``none`` always attaches the NullEvaluator; ``local`` insists on the GPU evaluator and raises
``EvaluatorUnavailableError`` with the reason if it cannot run; ``ray`` attaches a ``RayEvaluator`` (one
local GPU evaluator actor per GPU of the Ray cluster, ``trusted.ray_backend``) and raises the same error
when Ray is missing or the cluster has no GPU. This module imports no torch at import
time, and on a machine without an NVIDIA driver or device it decides without importing torch at all
(it asks the driver library directly), so making an env there takes well under a second.
"""

from __future__ import annotations

import ctypes
import importlib.util

from ptxgym.evaluation.trusted.base import EvalSettings, Evaluator, NullEvaluator
from ptxgym.records import settings as user_settings
from ptxgym.records.arch import ARCHS, arch_for_capability
from ptxgym.records.errors import EvaluatorUnavailableError


def gpu_unavailable_reason(device: int | None = None) -> str | None:
    """Why the local GPU evaluator cannot run here, or None if it can."""
    for module, extra in (("torch", "pip install 'ptxgym[gpu]'"), ("tvm_ffi", "pip install apache-tvm-ffi")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({extra})"
    no_device = driver_unavailable_reason()
    if no_device is not None:
        return no_device
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return f"torch {torch.__version__} ({build}) sees no CUDA device"
    index = user_settings.device_index() if device is None else device
    count = torch.cuda.device_count()
    if index >= count:
        return f"PTXGYM_DEVICE={index} but only {count} CUDA device(s) are visible"
    major, minor = torch.cuda.get_device_capability(index)
    if arch_for_capability(major, minor) is None:
        supported = ", ".join(sorted(ARCHS))
        return (
            f"GPU {torch.cuda.get_device_name(index)} has compute capability {major}.{minor}; ptxgym's "
            f"tasks target {supported}"
        )
    return None


def driver_unavailable_reason() -> str | None:
    """Why the NVIDIA driver offers no CUDA device here, or None if it offers one (torch is not imported).

    Loads ``libcuda.so.1`` with ctypes and asks ``cuInit`` and ``cuDeviceGetCount``: milliseconds, where
    importing torch to ask costs seconds.
    """
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver here (libcuda.so.1 cannot be loaded), so no CUDA device"
    status = cuda.cuInit(0)
    if status != 0:
        return f"the NVIDIA driver reports no usable CUDA device (cuInit error {status})"
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return "the NVIDIA driver sees no CUDA device"
    return None


def select_evaluator(
    choice: str | None = None, settings: EvalSettings | None = None, *, source: str | None = None
) -> Evaluator:
    """The evaluator for ``choice`` (``auto``, ``none``, ``local``, ``ray``; default from PTXGYM_EVALUATOR).

    ``source`` names where the choice came from in messages (e.g. ``--evaluator``); by default the
    environment variable when ``choice`` is None, else ``evaluator=``.
    """
    if source is None:
        source = "PTXGYM_EVALUATOR" if choice is None else "evaluator"
    choice = (choice or user_settings.evaluator_choice()).strip().lower()
    said = f"{source} {choice}" if source.startswith("-") else f"{source}={choice}"
    if choice not in {"auto", "none", "local", "ray"}:
        raise ValueError(f"{source} must be auto, none or local, or ray (the Ray backend), got {choice!r}")
    if choice == "none":
        return NullEvaluator(f"the evaluator is switched off ({said})")
    if choice == "ray":
        from ptxgym.evaluation.trusted.ray_backend import RayEvaluator

        try:
            return RayEvaluator(settings=settings)
        except EvaluatorUnavailableError as exc:
            raise EvaluatorUnavailableError(f"{said}: {exc}") from exc
    reason = gpu_unavailable_reason()
    if reason is None:
        from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

        try:
            return LocalGpuEvaluator(settings=settings)
        except Exception as exc:  # noqa: BLE001 - auto degrades to a stated reason; local re-raises below
            reason = f"the local GPU evaluator failed to start: {type(exc).__name__}: {exc}"
    if choice == "local":
        raise EvaluatorUnavailableError(
            f"{said}, but the GPU evaluator cannot run here: {reason}. Run on a machine with an NVIDIA "
            "GPU of a supported architecture, or choose auto or none."
        )
    return NullEvaluator(reason)
