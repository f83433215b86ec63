"""Worker commands: typed on the trusted side, validated again by the worker after unpickling."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from ptxgym.evaluation.protocol import (
    Attach,
    Call,
    Load,
    ScalarArg,
    TensorArg,
    TrialBegin,
    parse_command,
)


def _through_pipe(cmd):
    """What the worker receives: the pickled command, unpickled (no validation runs on the way)."""
    return pickle.loads(pickle.dumps(cmd, protocol=pickle.HIGHEST_PROTOCOL))


def test_every_command_survives_the_pipe_unchanged():
    sets = [[TensorArg(role="in", offset=256, shape=(4, 8), dtype="bfloat16"), ScalarArg(value=0.5)]]
    blob = bytearray(16)  # stands in for the CUDA tensor (any object; it travels as is)
    for cmd in (
        Attach(arena="a", blob=blob, sets=sets, flush_bytes=64, seq=3),
        Load(kind="so", path="/x.so", entry="run"),
        Call(set=2, timed=True, flush=False),
        TrialBegin(cupti=False),
    ):
        got = parse_command(_through_pipe(cmd))
        assert type(got) is type(cmd)
        assert got.model_dump(exclude={"blob"}) == cmd.model_dump(exclude={"blob"})
    attach = parse_command(Attach(arena="a", blob=blob, sets=sets, flush_bytes=64))
    assert isinstance(attach, Attach) and attach.blob is blob  # the IPC tensor is not copied


def test_a_field_changed_after_construction_is_refused():
    """Unpickling skips validation: a command whose fields were altered must not reach a handler."""
    cmd = _through_pipe(Call(set=1))
    object.__setattr__(cmd, "set", "all")
    with pytest.raises(ValidationError, match="call.set"):
        parse_command(cmd)
    attach = _through_pipe(
        Attach(
            arena="a",
            blob=None,
            sets=[[TensorArg(role="out", offset=0, shape=(2,), dtype="float32")]],
            flush_bytes=1,
        )
    )
    object.__setattr__(attach.sets[0][0], "offset", -8)
    with pytest.raises(ValidationError, match="offset"):
        parse_command(attach)


@pytest.mark.parametrize("obj", [{"op": "call", "seq": 1}, ("call", 1), None])
def test_anything_but_a_command_is_refused(obj):
    with pytest.raises(TypeError, match="not a command"):
        parse_command(obj)
