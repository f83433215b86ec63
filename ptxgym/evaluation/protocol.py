"""Typed messages between the trusted evaluator and a disposable candidate worker.

Direction matters for trust. Commands (trusted -> worker) are the frozen models below, one per
operation, pickled: the worker trusts its parent, and CUDA tensors travel as IPC handles through torch's
pickling reducers; the worker accepts nothing but an instance of ``Command``. Replies (worker -> trusted)
are JSON validated by these frozen models and nothing else: the worker runs the candidate's host code,
so a reply may be forged or garbage, and unpickling it would hand the candidate the evaluator.

Every command carries a sequence number that its reply must echo; a reply that does not parse, is too
long, or answers another command is a protocol violation (the candidate wrote to the channel).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

MAX_REPLY_BYTES = 1 << 20
"""A reply longer than this is a protocol violation."""


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Measure = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
"""A time or count a worker reports: finite and non-negative, else the reply is a protocol violation (a NaN
latency once sorted the median of the samples and the median of the wall overheads from different calls)."""
Count = Annotated[int, Field(ge=0, le=2**64 - 1)]


# ------------------------------------------------------------------------ commands (trusted -> worker)


class _Cmd(_Msg):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    seq: int = Field(0, description="Sequence number; set by the pool when the command is sent.")


class TensorArg(_Msg):
    """One tensor argument of a call: a view of the arena's blob."""

    role: Literal["in", "out"] = Field(description="'in': an input; 'out': an output the call writes.")
    offset: int = Field(ge=0, description="Byte offset of the view in the blob.")
    shape: tuple[int, ...] = Field(description="Shape of the view (contiguous).")
    dtype: str = Field(description="torch dtype name without the 'torch.' prefix, e.g. 'bfloat16'.")


class ScalarArg(_Msg):
    """One scalar argument of a call, passed as is."""

    role: Literal["scalar"] = "scalar"
    value: bool | int | float = Field(description="The value.")


Arg = Annotated[TensorArg | ScalarArg, Field(discriminator="role")]
"""One argument of a call, in the entry point's order."""


class VmmRun(_Msg):
    """One run of mapped pages of a guard-page blob."""

    offset: int = Field(ge=0, description="Byte offset of the run in the blob's address range.")
    size: int = Field(gt=0, description="Bytes mapped (whole pages): all of the run's own allocation.")


class VmmBlob(_Msg):
    """A blob built with the CUDA virtual-memory API (``evaluation/vmm.py``): the worker maps it itself.

    Each run is an allocation of its own; they travel as POSIX file descriptors, one per run in order,
    passed with the attach command over the worker's fd socket (``SCM_RIGHTS``); legacy CUDA IPC handles
    cannot share them.
    """

    total: int = Field(gt=0, description="Bytes of address range to reserve (runs and the holes between).")
    page: int = Field(gt=0, description="Mapping granularity (alignment of the reservation).")
    runs: list[VmmRun] = Field(description="The mapped runs; every other byte of the range stays unmapped.")


HW_PREPARE_ATTEMPTS = 4
"""How many times a spare runner tries its counter query by default (``Attach.hw_prepare_attempts``)."""


class Attach(_Cmd):
    """Map the arena's buffers (a blob shared through CUDA IPC, or a guard-page blob) into the worker."""

    op: Literal["attach"] = "attach"
    arena: str = Field(description="Arena id; the worker echoes it.")
    blob: Any = Field(
        description="The arena's device buffer (a CUDA tensor, sent as an IPC handle); None with ``vmm``."
    )
    vmm: VmmBlob | None = Field(
        None, description="A guard-page blob to import from the fd sent with this command (``blob`` is None)."
    )
    sets: list[list[Arg]] = Field(description="Per input set, the call's arguments in order.")
    flush_bytes: int = Field(description="Size of the L2-flush buffer the worker allocates.")
    cupti: bool = Field(True, description="Whether to start CUPTI activity tracing.")
    module_census: bool = Field(
        False,
        description="Also record every module the driver loads (CUPTI's module-loaded callback: cubin "
        "hash and functions) for the in-band census of module images.",
    )
    hw_prepare: bool = Field(
        False,
        description="A native runner also queries its context's hardware-counter availability right after "
        "the set-up (``ApplySandbox.hw_prepare``, made here on a spare's warm-up, off any GPU turn; the "
        "sandbox command then finds it done). The Python worker ignores it.",
    )
    hw_prepare_attempts: int = Field(
        HW_PREPARE_ATTEMPTS,
        ge=1,
        le=8,
        description="With ``hw_prepare``: how many times the runner tries the query, 100 ms apart, before "
        "it names the step ``hw_prepare_failed`` (``EvalSettings.spare_hw_prepare_attempts``).",
    )
    hw_warm: bool = Field(
        False,
        description="With ``hw_prepare``: the runner also makes one hardware-counted cycle with no call in "
        "it (``EvalSettings.hw_warm_start``), on the spare's warm-up. The Python worker ignores it.",
    )


class ApplySandbox(_Cmd):
    """Apply the host sandbox (before any candidate is loaded)."""

    op: Literal["sandbox"] = "sandbox"
    mode: Literal["on", "strict", "off"]
    scratch: str = Field(description="The worker's scratch directory (the only writable place).")
    hw_prepare: bool = Field(
        False,
        description="A native runner queries its context's hardware-counter availability before its jail "
        "applies (inside it the query fails on the H200), for a subject that will get the hardware-counted "
        "call; ~0.2 s, so only then. The Python worker ignores it.",
    )


class Load(_Cmd):
    """Load the subject of the calls: the candidate's shared object, a library baseline or a no-op."""

    op: Literal["load"] = "load"
    kind: Literal["so", "baseline", "noop"]
    path: str = Field("", description="kind 'so': the shared object.")
    entry: str = Field("", description="kind 'so': the exported TVM-FFI function.")
    function: str = Field("", description="kind 'baseline': a function of library_baselines.")
    options: dict[str, Any] = Field(default_factory=dict, description="kind 'baseline': keyword options.")
    busy_memsets: int = Field(
        0,
        ge=0,
        le=4096,
        description="kind 'noop': memsets of the L2-flush buffer per call (0: a 4-byte memset), so that "
        "the no-op keeps the GPU busy about as long as a subject (the matched calibration).",
    )


MAX_SPIN_US = 50_000
"""The longest a native runner spins for its next command in a trial (``TrialBegin.spin_us``)."""


class TrialBegin(_Cmd):
    """Start a timing trial (CUPTI activity collection when asked)."""

    op: Literal["trial_begin"] = "trial_begin"
    cupti: bool = True
    spin_us: int = Field(
        0,
        ge=0,
        le=MAX_SPIN_US,
        description="A native runner waits for each next command of the trial by polling its command pipe "
        "for up to this long before it blocks (``EvalSettings.runner_spin_us``; 0: it blocks at once). "
        "The Python worker ignores it.",
    )


class TrialEnd(_Cmd):
    """End a trial; the reply carries the CUPTI spans of its timed calls."""

    op: Literal["trial_end"] = "trial_end"


class Call(_Cmd):
    """Call the subject once on input set ``set``."""

    op: Literal["call"] = "call"
    set: int = Field(0, description="Index of the input set.")
    timed: bool = Field(False, description="Record a CUPTI window for this call.")
    flush: bool = Field(True, description="Flush the L2 before the call.")
    count: bool = Field(
        False,
        description="Count executions per SASS instruction during this call (CUPTI SASS metrics). The "
        "patched call is slow, so no latency is taken from a counted call; with ``timed`` its CUPTI window "
        "is still recorded, for the trial's kernel census.",
    )
    hw_count: bool = Field(
        False,
        description="Read hardware counters over this call (CUPTI's range profiler, one pass: the call is "
        "not patched or replayed; ``HwCounts``). Only the native runner reads them; the Python worker runs "
        "the call and answers ``hw_count_error``. Not combined with ``count`` (which is served first).",
    )


class Exit(_Cmd):
    """Reply, then leave."""

    op: Literal["exit"] = "exit"


Command = Annotated[
    Attach | ApplySandbox | Load | TrialBegin | TrialEnd | Call | Exit, Field(discriminator="op")
]
"""Every command the worker accepts."""
COMMANDS = (Attach, ApplySandbox, Load, TrialBegin, TrialEnd, Call, Exit)


@functools.cache
def _command_adapter() -> TypeAdapter[Command]:
    return TypeAdapter(Command)


def parse_command(obj: object) -> Command:
    """An unpickled object as a validated command (the worker's only way in).

    Unpickling restores a model's fields without running its validation, so every field is validated
    again here (types, ranges, the ``op`` discriminator); anything but a ``Command`` instance is refused.
    Raises ``TypeError`` (not a command) or ``pydantic.ValidationError`` (a field is invalid).
    """
    if not isinstance(obj, COMMANDS):
        raise TypeError(
            f"not a command: {type(obj).__name__} (expected one of {[c.__name__ for c in COMMANDS]})"
        )
    return _command_adapter().validate_python(obj.model_dump(warnings=False))


# ------------------------------------------------------------------------- replies (worker -> trusted)


class Hello(_Msg):
    """Sent once, unasked, when the worker has torch, CUDA and TVM-FFI up."""

    pid: int
    device: int
    warm_s: float = Field(description="Seconds from interpreter start to ready.")
    torch: str
    context_id: int | None = Field(None, description="CUDA context id (cuCtxGetId) of the worker.")
    runner: str = Field(
        "", description="The native runner's version ('' for the Python worker, whose torch is set)."
    )


class AttachResult(_Msg):
    """The worker mapped the arena's buffers."""

    arena: str
    cupti: bool = Field(description="Whether CUPTI activity tracing works in this worker.")
    cupti_error: str = ""
    flush_bytes: int
    phases_ms: dict[str, Measure] = Field(
        default_factory=dict,
        description="Wall ms of each step of the attach, as the native runner saw it (``ATTACH_PHASES``; a "
        "spare's warm-up, before any candidate code: diagnostic only, never a proof).",
    )


CALL_PHASES = ("sync", "flush", "flushed", "launch", "kernel", "after")
"""The steps of a plain call a native runner reports (``CallResult.phases_ms``): the device synchronised
before it, the L2 flush enqueued, the flush waited for, the candidate's entry (its launches and host code
between the call's start and end events), the wait for its GPU work, and the events and context check
after it. With the trusted side's own split of the wall (``Session._call``: the round trip, then the copy
of the outputs) they say where the calibrated overhead goes (``bench/wall_allowance.py``)."""

ATTACH_PHASES = (
    "cuda",
    "map",
    "flush",
    "cupti",
    "hw_prepare_retried",
    "hw_prepare",
    "hw_prepare_failed",
    "hw_warm",
    "hw_warm_failed",
    "sets",
)
"""The steps a native runner's attach reports (``AttachResult.phases_ms``): CUDA's start-up (driver,
context, runtime), mapping the arena, the L2-flush buffer, CUPTI's start, the counter query's failed
tries and their pauses (``Attach.hw_prepare_attempts``), its last try (named ``hw_prepare_failed`` where
none worked, so the subject's sandbox step queries again),
the warm cycle (``Attach.hw_warm``: named ``hw_warm_failed`` where the range profiler was not started),
the sets."""


class CallResult(_Msg):
    """GPU times of one call, measured inside the worker (so: untrusted, cross-checked)."""

    ev_stream_ms: Measure = Field(description="Event time on the caller stream, start to return.")
    ev_device_ms: Measure = Field(description="Event time from start to after a device-wide synchronisation.")
    host_ms: Measure = Field(description="Worker host time of the call up to the device synchronisation.")
    phases_ms: dict[str, Measure] = Field(
        default_factory=dict,
        description="Wall ms of each step of the call, as the native runner saw it (``CALL_PHASES``, no "
        "other key: a reply may not grow the trusted side's memory with it): where a call's wall goes "
        "beside its GPU time. The candidate's process's word: diagnostic only, never a proof.",
    )

    @field_validator("phases_ms")
    @classmethod
    def _known_steps(cls, phases: dict[str, float]) -> dict[str, float]:
        unknown = set(phases) - set(CALL_PHASES)
        if unknown:
            raise ValueError(f"phases_ms names {len(unknown)} step(s) outside CALL_PHASES")
        return phases


class LoadedModule(_Msg):
    """A module the CUDA driver loaded in the worker, as CUPTI reported it (so: untrusted, cross-checked)."""

    sha256: str = Field(description="SHA-256 of the module's cubin image.")
    size: Count = Field(description="Bytes of the cubin image.")
    functions: list[str] | None = Field(
        description="STT_FUNC symbols of the image (``cpu/cubin_symbols``); None: the image was unreadable."
    )


class Spans(_Msg):
    """CUPTI activity spans of the timed calls of one trial, by command sequence number."""

    spans: dict[int, Measure | None] = Field(
        default_factory=dict, description="seq -> max(end) - min(start) over GPU activities in the call, ms."
    )
    activities: dict[int, Count] = Field(default_factory=dict, description="seq -> GPU activities counted.")
    kernels: dict[str, Count] = Field(
        default_factory=dict,
        description="Kernel name (as CUPTI records it, mangled) -> launches belonging to the trial's timed "
        "windows (``cupti_spans.Records``): the in-band kernel census.",
    )
    modules: list[LoadedModule] = Field(
        default_factory=list, description="Modules loaded in the worker since the previous report (CUPTI)."
    )
    census_error: str = Field("", description="Why the worker could not take the census ('' if it did).")
    incomplete: Count = Field(
        0,
        description="Activity records CUPTI handed back without their timestamps at the trial's end (left "
        "out of every span; diagnostic).",
    )
    flushes: Count = Field(
        0, description="Default flushes made at the trial's end before the forced one (diagnostic)."
    )
    outside: Count = Field(0, description="Records belonging to no timed window (diagnostic).")
    empty_nearest_us: float | None = Field(
        None,
        allow_inf_nan=False,
        description="Over the windows holding no record, the median signed distance to the nearest kernel "
        "record's start, us (negative: before the window; diagnostic).",
    )
    ran_in: Count = Field(
        0,
        description="Kernel records that belong to a window only by running into it: stamped before it, "
        "or launched before it (``cupti_spans.Records``; diagnostic).",
    )
    launched_in: Count = Field(
        0,
        description="Kernel records that belong to a window only by their launch API call's host stamp: "
        "stamped wholly before it (``cupti_spans.Records``; diagnostic).",
    )
    launch_known: Count = Field(
        0,
        description="Kernel records whose launch API record came back (joined by CUPTI's correlation id; "
        "the native runner only; diagnostic).",
    )


class SandboxLayer(_Msg):
    """One layer of the worker's host sandbox (``sandbox.py``) as the worker applied it."""

    name: str = Field(description="no_new_privs, network, filesystem, rlimits or environment.")
    state: Literal["active", "partial", "unavailable", "off"] = Field(
        description="active: enforced on every thread; partial: enforced with the gap named in detail; "
        "unavailable: not enforced here (detail says why); off: disabled by the evaluator's setting."
    )
    detail: str = Field("", description="What the layer enforces, or why it does not.")


class SandboxReport(_Msg):
    """A worker's host sandbox, reported before the candidate is loaded (so not the candidate's word)."""

    mode: Literal["on", "strict", "off"]
    layers: list[SandboxLayer] = Field(default_factory=list)

    def summary(self) -> dict[str, str]:
        """Layer name -> ``state`` or ``state: detail``, the form recorded in ``EnvironmentInfo.sandbox``."""
        return {x.name: f"{x.state}: {x.detail}" if x.detail else x.state for x in self.layers}


class SassRow(_Msg):
    """Executions of one SASS instruction in a counted call, as the worker read them (untrusted)."""

    function: str = Field(description="The kernel's name as CUPTI gives it.")
    pc: Count = Field(description="Byte offset of the instruction in its function (cuobjdump's /*pc*/).")
    inst: Count = Field(description="Warp-level executions (inst_executed).")
    threads: Count = Field(description="Thread executions with a true predicate (0: not measured).")


class HwCounts(_Msg):
    """Hardware counters over one call, read by CUPTI's range profiler in the worker (untrusted)."""

    metrics: dict[str, Measure] = Field(
        description="Metric name (with its rollup, e.g. ``smsp__inst_executed_pipe_tensor_op_gmma.sum``) -> "
        "its value over every kernel the call ran (``runner/hw_logic.h`` names them)."
    )
    passes: Count = Field(description="Passes the metrics needed (1: the call ran once, unreplayed).")
    ranges: Count = Field(description="Profiled ranges in the counter data (1: the call).")
    host_ms: dict[str, Measure] = Field(
        default_factory=dict,
        description="The worker's host wall milliseconds of the call's phases (setup, enable, run, read): "
        "where the call's time goes; diagnostic, never used by a verdict.",
    )


MAX_SASS_ROWS = 200_000
"""Instruction rows a counted call may report (a large kernel has a few thousand)."""


class Reply(_Msg):
    """Answer to one command."""

    seq: int
    ok: bool
    error: str = Field("", description="What failed (exception text, load error).")
    cuda_error: str = Field("", description="Sticky CUDA error of the worker's context, if any.")
    hello: Hello | None = None
    attach: AttachResult | None = None
    call: CallResult | None = None
    spans: Spans | None = None
    sandbox: SandboxReport | None = None
    counts: list[SassRow] | None = Field(None, description="A counted call's rows (``Call.count``).")
    count_error: str = Field("", description="Why a counted call has no rows ('' when it has them).")
    hw_counts: HwCounts | None = Field(
        None, description="A hardware-counted call's counters (``Call.hw_count``)."
    )
    hw_count_error: str = Field(
        "", description="Why a hardware-counted call has no counters ('' when it has them)."
    )


# Spawning a worker: the trusted side chooses the sandbox mode and the environment the worker starts with.

MODES = ("on", "strict", "off")
"""Host sandbox modes (``PTXGYM_SANDBOX``)."""

_SECRET = re.compile(
    r"PROXY|TOKEN|SECRET|PASSW|CREDENTIAL|KEY|AUTH|COOKIE|SESSION|NETRC|KRB5|KUBECONFIG", re.IGNORECASE
)


def check_mode(mode: str) -> str:
    """The mode, validated: ``on``, ``strict`` or ``off``."""
    value = str(mode).lower()
    if value not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, got {mode!r}")
    return value


def is_secret_name(name: str) -> bool:
    """Whether an environment variable looks like a proxy setting or a credential (token, key, password)."""
    return bool(_SECRET.search(name))


def worker_environ(base: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """The environment of a sandboxed worker's spawn: no secrets; CUDA's JIT cache and TMPDIR in scratch.

    ``PYTHONPATH`` keeps only absolute entries: an empty or relative one (``export PYTHONPATH=$PYTHONPATH:/x``
    leaves an empty first entry) names the working directory, which is the candidate's scratch, and
    would put it on ``sys.path`` in spite of ``python -P``.
    """
    env = {k: v for k, v in base.items() if not is_secret_name(k)}
    if "PYTHONPATH" in env:
        kept = [entry for entry in env["PYTHONPATH"].split(os.pathsep) if os.path.isabs(entry)]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    env["CUDA_CACHE_PATH"] = str(Path(scratch) / "cuda-cache")
    env["TMPDIR"] = str(scratch)
    return env
