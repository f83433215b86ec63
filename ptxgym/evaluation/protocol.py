"""Typed messages between the trusted evaluator and a disposable candidate worker.

Direction matters for trust. Commands (trusted -> worker) are pickled: the worker trusts its parent,
and CUDA tensors travel as IPC handles through torch's pickling reducers. Replies (worker -> trusted)
are JSON validated by these frozen models and nothing else: the worker runs the candidate's host code,
so a reply may be forged or garbage, and unpickling it would hand the candidate the evaluator.

Every command carries a sequence number that its reply must echo; a reply that does not parse, is too
long, or answers another command is a protocol violation (the candidate wrote to the channel).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_REPLY_BYTES = 1 << 20
"""A reply longer than this is a protocol violation."""


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Hello(_Msg):
    """Sent once, unasked, when the worker has torch, CUDA and TVM-FFI up."""

    pid: int
    device: int
    warm_s: float = Field(description="Seconds from interpreter start to ready.")
    torch: str
    context_id: int | None = Field(None, description="CUDA context id (cuCtxGetId) of the worker.")


class AttachResult(_Msg):
    """The worker mapped the arena's buffers."""

    arena: str
    cupti: bool = Field(description="Whether CUPTI activity tracing works in this worker.")
    cupti_error: str = ""
    flush_bytes: int


class CallResult(_Msg):
    """GPU times of one call, measured inside the worker (so: untrusted, cross-checked)."""

    ev_stream_ms: float = Field(description="Event time on the caller stream, start to return.")
    ev_device_ms: float = Field(description="Event time from start to after a device-wide synchronisation.")
    host_ms: float = Field(description="Worker host time of the call up to the device synchronisation.")


class Spans(_Msg):
    """CUPTI activity spans of the timed calls of one trial, by command sequence number."""

    spans: dict[int, float | None] = Field(
        default_factory=dict, description="seq -> max(end) - min(start) over GPU activities in the call, ms."
    )
    activities: dict[int, int] = Field(default_factory=dict, description="seq -> GPU activities counted.")


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
    """The environment of a sandboxed worker's spawn: no secrets; CUDA's JIT cache and TMPDIR in scratch."""
    env = {k: v for k, v in base.items() if not is_secret_name(k)}
    env["CUDA_CACHE_PATH"] = str(Path(scratch) / "cuda-cache")
    env["TMPDIR"] = str(scratch)
    return env
