"""The native runner's messages: frozen models for both directions (framing in ``client.py``).

Commands are written by the trusted side and read by ``runner.cc``; replies are read back through these
models only (``extra='forbid'``): the runner's process runs the candidate, so a reply may be forged.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_REPLY_BYTES = 64 << 10
"""A reply longer than this is a protocol violation (the runner caps its error texts at 4000 chars)."""
MAX_COMMAND_BYTES = 1 << 20
"""The runner refuses (and exits on) a longer command."""


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ------------------------------------------------------------------------ commands (trusted -> runner)


class MemfdBlob(_Msg):
    """A CPU blob: a memfd sent with the attach (one fd), mapped shared by the runner."""

    kind: Literal["memfd"] = "memfd"
    size: int = Field(gt=0, description="Bytes to map (the memfd must be at least this long).")


class Run(_Msg):
    """One mapped run of a guard-page blob (``evaluation/vmm.py``)."""

    offset: int = Field(ge=0, description="Byte offset of the run in the reserved range.")
    size: int = Field(gt=0, description="Bytes of the run (its whole allocation).")


class GpuBlob(_Msg):
    """A guard-page blob: one POSIX fd per run sent with the attach (GPU path, untested on a GPU)."""

    kind: Literal["vmm"] = "vmm"
    device: int = Field(ge=0, description="CUDA device ordinal.")
    total: int = Field(gt=0, description="Bytes of address range to reserve.")
    page: int = Field(gt=0, description="Alignment of the reservation (the mapping granularity).")
    runs: list[Run] = Field(description="The mapped runs, in the order of the fds.")


class TensorArg(_Msg):
    """A contiguous view of the attached blob."""

    role: Literal["in", "out"] = Field(description="Input or output (the runner treats both alike).")
    offset: int = Field(ge=0, description="Byte offset in the blob.")
    shape: tuple[int, ...] = Field(description="Shape of the view.")
    dtype: str = Field(description="torch-style dtype name, e.g. 'float32', 'bfloat16'.")
    device: Literal["cpu", "cuda"] = Field(description="Must match the attached blob ('memfd': cpu).")


class ScalarArg(_Msg):
    """A scalar passed as is (bool, int64 or float64 by its JSON form)."""

    role: Literal["scalar"] = "scalar"
    value: bool | int | float = Field(description="The value.")


Arg = Annotated[TensorArg | ScalarArg, Field(discriminator="role")]
"""One argument of a call, in the entry point's order."""


class Attach(_Msg):
    """Map the blob (fds travel on the fd socket just before the command)."""

    op: Literal["attach"] = "attach"
    blob: MemfdBlob | GpuBlob = Field(discriminator="kind", description="What to map.")


class Load(_Msg):
    """dlopen the shared object and resolve ``__tvm_ffi_<entry>``; closes the fd socket first."""

    op: Literal["load"] = "load"
    path: str = Field(description="Absolute path of the shared object.")
    entry: str = Field(description="Name given to TVM_FFI_DLL_EXPORT_TYPED_FUNC (a C identifier).")


class Call(_Msg):
    """Call the entry point once with these arguments."""

    op: Literal["call"] = "call"
    args: list[Arg] = Field(description="The arguments, in order.")


class Exit(_Msg):
    """Reply, then leave."""

    op: Literal["exit"] = "exit"


Command = Attach | Load | Call | Exit


# ------------------------------------------------------------------------ replies (runner -> trusted)


class Hello(_Msg):
    """Sent unasked (seq 0) when the runner starts."""

    pid: int = Field(description="The runner's process id (as it sees itself).")
    version: str = Field(description="The runner's wire version.")


class AttachInfo(_Msg):
    """What an attach mapped."""

    device: Literal["cpu", "cuda"] = Field(description="Where the blob lives.")


class CallTiming(_Msg):
    """Timings of one call (as measured inside the runner: trusted only as far as the runner is)."""

    host_ms: float = Field(description="Host wall time around the call.")
    ev_ms: float | None = Field(None, description="CUDA events around the call (GPU blob only).")


class Reply(_Msg):
    """One reply; ``seq`` echoes the command's."""

    seq: int = Field(ge=0, description="Sequence number of the command answered (0: hello).")
    ok: bool = Field(description="Whether the command succeeded.")
    error: str | None = Field(None, max_length=4000, description="What went wrong (ok is false).")
    hello: Hello | None = Field(None, description="Only in the reply with seq 0.")
    attach: AttachInfo | None = Field(None, description="Reply to a successful attach.")
    call: CallTiming | None = Field(None, description="Reply to a successful call.")
