"""Executed counts per SASS instruction, taken inside the worker with CUPTI's SASS metrics API.

The API patches the kernels that run while it is enabled so that each instruction counts its own
executions; after the call the counts are read back per (function, pc offset). Joined with the built
module's SASS listing (offset -> opcode), they give the executed counts of the target family in the very
process that was checked and timed, without an out-of-band profiler run (issue 11, requirement 2b).

The binding is plain ctypes over ``libcupti`` (the library cupti-python loads), with the parameter
structs laid out as the CUPTI headers declare them: each starts with ``structSize`` (offset of the last
field plus its size) and ``pPriv``. Every call's result is checked; any failure raises ``SassCountError``
with CUPTI's own message, and the worker reports it (the evaluator then keeps its offline proof).

Patching makes the counted call slow, so it is never timed: it takes a secret slot among the timed calls
and no latency is taken from it (``trusted/session.py``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from dataclasses import dataclass

WANTED = {
    "inst_executed": ("smsp__sass_inst_executed",),
    "thread_inst_executed_true": (
        "smsp__sass_thread_inst_executed_pred_on",
        "smsp__sass_thread_inst_executed_op_pred_on",
    ),
}
"""Our column name -> CUPTI SASS metric names to try, in order (Nsight Compute's source-page columns)."""

_GRANULARITY_GPU = 0
_MAX_RECORDS = 1 << 22


class SassCountError(RuntimeError):
    """CUPTI's SASS metrics could not be set up or read."""


def _size(struct: type[ctypes.Structure]) -> int:
    """The header's ``*_STRUCT_SIZE``: offset plus size of its size-defining field.

    That field is the last one unless the struct names another in ``_size_field``.
    """
    own = struct.__dict__.get("_fields_") or ()
    name = struct.__dict__.get("_size_field") or (own[-1][0] if own else "pPriv")
    field = getattr(struct, name)
    return field.offset + field.size


class _Params(ctypes.Structure):
    """The two fields every CUPTI parameter struct starts with; subclasses append their own."""

    _size_field = "pPriv"
    _fields_ = [("structSize", ctypes.c_size_t), ("pPriv", ctypes.c_void_p)]


class _GetChipName(_Params):
    _fields_ = [
        ("deviceIndex", ctypes.c_size_t),
        ("pChipName", ctypes.c_char_p),
    ]


class _Initialize(_Params):
    """Nothing beyond the header fields."""


class _MetricDetails(ctypes.Structure):
    _fields_ = [
        ("metricId", ctypes.c_uint64),
        ("pMetricName", ctypes.c_char_p),
        ("pMetricDescription", ctypes.c_char_p),
    ]


class _GetNumOfMetrics(_Params):
    _fields_ = [
        ("pChipName", ctypes.c_char_p),
        ("numOfMetrics", ctypes.c_size_t),
    ]


class _GetMetrics(_Params):
    _fields_ = [
        ("pChipName", ctypes.c_char_p),
        ("numOfMetrics", ctypes.c_size_t),
        ("pMetricsList", ctypes.POINTER(_MetricDetails)),
    ]


class _Config(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint64), ("outputGranularity", ctypes.c_uint8)]


class _SetConfig(_Params):
    _fields_ = [
        ("numOfMetricConfig", ctypes.c_size_t),
        ("pConfigs", ctypes.POINTER(_Config)),
        ("deviceIndex", ctypes.c_uint32),
    ]


class _UnsetConfig(_Params):
    _fields_ = [("deviceIndex", ctypes.c_uint32)]


class _Enable(_Params):
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("enableLazyPatching", ctypes.c_uint8),
    ]


class _Disable(_Params):
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("numOfDroppedRecords", ctypes.c_size_t),
    ]


class _DataProperties(_Params):
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("numOfPatchedInstructionRecords", ctypes.c_size_t),
        ("numOfInstances", ctypes.c_size_t),
    ]


class _InstanceValue(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint64), ("value", ctypes.c_uint64)]


class _Data(_Params):
    _fields_ = [
        ("cubinCrc", ctypes.c_uint32),
        ("functionIndex", ctypes.c_uint32),
        ("functionName", ctypes.c_char_p),
        ("pcOffset", ctypes.c_uint32),
        ("pInstanceValues", ctypes.POINTER(_InstanceValue)),
    ]


class _FlushData(_Params):
    _size_field = "numOfInstances"  # as the header's CUpti_SassMetricsFlushData_Params_STRUCT_SIZE
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("numOfPatchedInstructionRecords", ctypes.c_size_t),
        ("numOfInstances", ctypes.c_size_t),
        ("pMetricsData", ctypes.POINTER(_Data)),
    ]


def _params(struct: type[ctypes.Structure], **values: object) -> ctypes.Structure:
    p = struct(**values)
    p.structSize = _size(struct)
    return p


@dataclass(frozen=True)
class InstructionCount:
    """Executions of one SASS instruction during the counted call."""

    function: str
    pc_offset: int
    values: dict[str, int]
    """Our column name (``WANTED``) -> count summed over the GPU."""


def merge_records(
    rows: Iterable[tuple[str, int, list[tuple[int, int]]]], columns: dict[int, str]
) -> list[InstructionCount]:
    """Sum CUPTI's records (one per instruction and metric, values per instance) per (function, pc)."""
    merged: dict[tuple[str, int], dict[str, int]] = {}
    for function, pc, pairs in rows:
        totals = merged.setdefault((function, pc), dict.fromkeys(columns.values(), 0))
        for metric_id, value in pairs:
            column = columns.get(metric_id)
            if column is not None:
                totals[column] += value
    return [InstructionCount(f, pc, v) for (f, pc), v in merged.items()]


def load_cupti() -> ctypes.CDLL:
    """libcupti as the process already has it (cupti-python loads it), else by its usual names."""
    errors = []
    for name in ("libcupti.so.13", "libcupti.so.12", "libcupti.so"):
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            errors.append(str(exc))
    raise SassCountError("libcupti could not be loaded: " + "; ".join(errors))


class SassCounter:
    """Counts executions per SASS instruction of everything launched inside ``count``."""

    def __init__(self, device_index: int, lib: ctypes.CDLL | None = None) -> None:
        self.lib = lib or load_cupti()
        self.device_index = device_index
        self._call("cuptiProfilerInitialize", _params(_Initialize))
        chip = _params(_GetChipName, deviceIndex=device_index)
        self._call("cuptiDeviceGetChipName", chip)
        self.chip = chip.pChipName
        self.available = self._metric_ids()
        picked = {col: self._pick(names) for col, names in WANTED.items()}
        self.metrics: dict[str, int] = {col: mid for col, mid in picked.items() if mid is not None}
        if "inst_executed" not in self.metrics:
            raise SassCountError(f"no SASS instruction-count metric on {self.chip!r}")
        configs = (_Config * len(self.metrics))(
            *[_Config(metricId=mid, outputGranularity=_GRANULARITY_GPU) for mid in self.metrics.values()]
        )
        self._configs = configs
        self._call(
            "cuptiSassMetricsSetConfig",
            _params(
                _SetConfig, numOfMetricConfig=len(self.metrics), pConfigs=configs, deviceIndex=device_index
            ),
        )

    def _call(self, name: str, params: ctypes.Structure) -> None:
        fn = getattr(self.lib, name)
        fn.restype = ctypes.c_int
        code = fn(ctypes.byref(params))
        if code != 0:
            text = ctypes.c_char_p()
            self.lib.cuptiGetResultString(code, ctypes.byref(text))
            raise SassCountError(f"{name} failed: {(text.value or b'').decode(errors='replace')} ({code})")

    def _metric_ids(self) -> dict[str, int]:
        n = _params(_GetNumOfMetrics, pChipName=self.chip)
        self._call("cuptiSassMetricsGetNumOfMetrics", n)
        count = int(n.numOfMetrics)
        details = (_MetricDetails * count)()
        self._call(
            "cuptiSassMetricsGetMetrics",
            _params(_GetMetrics, pChipName=self.chip, numOfMetrics=count, pMetricsList=details),
        )
        return {(d.pMetricName or b"").decode(): int(d.metricId) for d in details}

    def _pick(self, names: tuple[str, ...]) -> int | None:
        for name in names:
            if name in self.available:
                return self.available[name]
        return None

    def count(self, run: Callable[[], None]) -> list[InstructionCount]:
        """Run ``run`` (which must synchronise) with patching enabled; the counts of what it launched."""
        self._call("cuptiSassMetricsEnable", _params(_Enable, ctx=None, enableLazyPatching=1))
        try:
            run()
            return self._read()
        finally:
            self._call("cuptiSassMetricsDisable", _params(_Disable, ctx=None))

    def _read(self) -> list[InstructionCount]:
        props = _params(_DataProperties, ctx=None)
        self._call("cuptiSassMetricsGetDataProperties", props)
        records = int(props.numOfPatchedInstructionRecords)
        instances = int(props.numOfInstances)
        if records == 0:
            return []
        if records > _MAX_RECORDS or instances < 1:
            raise SassCountError(f"implausible SASS metric data: {records} records x {instances} instances")
        # One record per patched instruction and metric; its values are one per instance (GPU granularity:
        # one), each naming its metric.
        values = (_InstanceValue * (records * instances))()
        data = (_Data * records)()
        for i in range(records):
            data[i].structSize = ctypes.sizeof(_Data)
            data[i].pInstanceValues = ctypes.cast(
                ctypes.byref(values, i * instances * ctypes.sizeof(_InstanceValue)),
                ctypes.POINTER(_InstanceValue),
            )
        self._call(
            "cuptiSassMetricsFlushData",
            _params(
                _FlushData,
                ctx=None,
                numOfPatchedInstructionRecords=records,
                numOfInstances=instances,
                pMetricsData=data,
            ),
        )
        rows = []
        for i in range(records):
            d = data[i]
            pairs = [
                (int(d.pInstanceValues[j].metricId), int(d.pInstanceValues[j].value))
                for j in range(instances)
            ]
            rows.append(((d.functionName or b"").decode(errors="replace"), int(d.pcOffset), pairs))
        return merge_records(rows, {mid: col for col, mid in self.metrics.items()})

    def close(self) -> None:
        """Release the device's SASS metric configuration."""
        self._call("cuptiSassMetricsUnsetConfig", _params(_UnsetConfig, deviceIndex=self.device_index))
