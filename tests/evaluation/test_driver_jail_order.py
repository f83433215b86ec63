"""Where the profiled driver applies its sandbox (``driver.EARLY_JAIL_MODES``), in this process; no GPU.

``driver.main`` runs here with spies and nothing real behind them: ``import tvm_ffi`` (the import that
initialises CUDA) yields a stand-in module, ``sandbox.apply`` and ``sandbox.apply_rlimits`` only record
their calls (the test process stays unrestricted), ``torch.cuda.set_device`` records and then either
stops the driver or lets it set up on the CPU, and the target's loading records and stops it. Under
compute-sanitizer the sandbox, less its rlimits, must come before CUDA and the rlimits just before the
candidate loads; under Nsight Compute the whole sandbox comes after CUDA and the buffers are set up.

The deferral itself (``sandbox.apply(..., rlimits=False)``, then ``sandbox.apply_rlimits``) runs in a
child interpreter: rlimits belong to the process, and the test process must keep its own.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from ptxgym.evaluation.protocol import SandboxLayer, SandboxReport
from ptxgym.evaluation.sandboxed import driver, sandbox


class Stop(Exception):
    """Raised by a spy to end the driver where the test has seen enough."""


class Spies:
    """The driver's steps, in the order they happened, and the sandbox's arguments."""

    def __init__(self, monkeypatch, cuda: bool) -> None:
        self.events: list[str] = []
        self.jail: list[dict] = []
        self.monkeypatch, self.cuda = monkeypatch, cuda
        real_import = builtins.__import__

        def spy_import(name, globals=None, locals=None, fromlist=(), level=0):
            if name == "tvm_ffi" and level == 0:
                self.events.append("tvm_ffi")
                return types.SimpleNamespace(use_torch_stream=contextlib.nullcontext)  # never the real one
            return real_import(name, globals, locals, fromlist, level)

        monkeypatch.setattr(builtins, "__import__", spy_import)
        monkeypatch.setattr(sandbox, "apply", self.apply)
        monkeypatch.setattr(sandbox, "apply_rlimits", self.apply_rlimits)
        monkeypatch.setattr(torch.cuda, "set_device", self.set_device)
        monkeypatch.setattr(driver, "_target", self.target)

    def apply(self, mode, scratch, shm=False, rlimits=True) -> SandboxReport:
        self.events.append("jail")
        self.jail.append({"mode": mode, "scratch": Path(scratch), "shm": shm, "rlimits": rlimits})
        deferred = SandboxLayer(name="rlimits", state="off", detail=sandbox.DEFERRED)
        layers = [
            deferred if name == "rlimits" and not rlimits else SandboxLayer(name=name, state="active")
            for name in sandbox.LAYERS
        ]
        return SandboxReport(mode=mode, layers=layers)

    def apply_rlimits(self, mode) -> SandboxLayer:
        self.events.append("rlimits")
        return SandboxLayer(name="rlimits", state="active", detail="core=0 (spy)")

    def set_device(self, device) -> None:
        self.events.append("set_device")
        if not self.cuda:
            raise Stop("set_device")
        # from here on the driver's CUDA set-up runs on the CPU (patched only now: torch.load is done)
        real_device, real_empty = torch.device, torch.empty

        def empty(*args, **kwargs):
            self.events.append("allocate")
            return real_empty(*args, **kwargs)

        patch = self.monkeypatch.setattr
        patch(torch, "device", lambda kind, index=None: real_device("cpu"))
        patch(torch, "empty", empty)
        patch(torch.cuda, "Stream", lambda device=None: None)
        patch(torch.cuda, "set_stream", lambda stream: None)
        patch(torch.cuda, "synchronize", lambda device=None: None)

    def target(self, args, outputs):
        self.events.append("target")
        raise Stop("target")


def _argv(tmp_path: Path, mode: str) -> list[str]:
    """The driver's arguments for one input set (as ``test_proof_gate._inputs``) and a scratch directory."""
    saved = {"inputs": {"a": torch.ones(4)}, "order": ["a"], "outputs": {"c": ([4], "float32")}}
    torch.save(saved, tmp_path / "i.pt")
    (tmp_path / "scratch").mkdir()
    return ["--inputs", str(tmp_path / "i.pt"), "--so", str(tmp_path / "c.so"), "--mode", mode]


def _run(spies: Spies, argv: list[str], tmp_path: Path) -> None:
    """Run the driver, sandboxed beneath ``tmp_path/scratch``, until a spy stops it (an exit is recorded)."""
    try:
        code = driver.main([*argv, "--scratch", str(tmp_path / "scratch")])
    except Stop:
        return
    spies.events.append(f"exit {code}")


def test_memcheck_jails_before_cuda(tmp_path, monkeypatch):
    assert "memcheck" in driver.EARLY_JAIL_MODES
    spies = Spies(monkeypatch, cuda=False)
    _run(spies, _argv(tmp_path, "memcheck"), tmp_path)
    assert spies.events == ["jail", "tvm_ffi", "set_device"]
    assert spies.jail == [{"mode": "on", "scratch": tmp_path / "scratch", "shm": True, "rlimits": False}]


def test_profile_jails_only_after_cuda(tmp_path, monkeypatch):
    assert "profile" not in driver.EARLY_JAIL_MODES
    spies = Spies(monkeypatch, cuda=False)
    _run(spies, _argv(tmp_path, "profile"), tmp_path)
    assert spies.events == ["tvm_ffi", "set_device"]  # no jail before CUDA


def test_memcheck_takes_its_rlimits_just_before_the_candidate_loads(tmp_path, monkeypatch, capsys):
    spies = Spies(monkeypatch, cuda=True)
    _run(spies, _argv(tmp_path, "memcheck"), tmp_path)
    assert spies.events == ["jail", "tvm_ffi", "set_device", "allocate", "rlimits", "target"]
    assert [j["rlimits"] for j in spies.jail] == [False]
    err = capsys.readouterr().err
    assert f"'rlimits': 'off: {sandbox.DEFERRED}'" in err and "'rlimits': 'active: core=0 (spy)'" in err


def test_profile_jails_whole_after_the_buffers_before_the_candidate(tmp_path, monkeypatch):
    spies = Spies(monkeypatch, cuda=True)
    _run(spies, _argv(tmp_path, "profile"), tmp_path)
    assert spies.events == ["tvm_ffi", "set_device", "allocate", "jail", "target"]
    assert spies.jail == [{"mode": "on", "scratch": tmp_path / "scratch", "shm": True, "rlimits": True}]


def test_a_failed_sandbox_stops_the_driver_with_exit_3(tmp_path, monkeypatch, capsys):
    """Memcheck's early sandbox and its later rlimits each end the driver (exit 3) when they fail."""
    argv = [*_argv(tmp_path, "memcheck"), "--scratch", str(tmp_path / "scratch")]
    spies = Spies(monkeypatch, cuda=True)

    def refuse(*args, **kwargs):
        spies.events.append("refused")
        raise sandbox.SandboxError("simulated")

    monkeypatch.setattr(sandbox, "apply", refuse)
    assert driver.main(argv) == 3
    assert spies.events == ["refused"]  # before CUDA
    spies.events.clear()
    monkeypatch.setattr(sandbox, "apply", spies.apply)
    monkeypatch.setattr(sandbox, "apply_rlimits", refuse)
    assert driver.main(argv) == 3
    assert spies.events == ["jail", "tvm_ffi", "set_device", "allocate", "refused"]  # no candidate
    err = capsys.readouterr().err
    assert "driver: the sandbox could not be applied: simulated" in err
    assert "driver: the sandbox's rlimits could not be applied: simulated" in err


DEFERRED_CHILD = """
import errno, json, os, resource, sys
from pathlib import Path
from ptxgym.evaluation.sandboxed import sandbox

def fsize():
    return resource.getrlimit(resource.RLIMIT_FSIZE)

def truncate(size):
    fd = os.memfd_create("sanitizer-buffer")  # a shared buffer sized above the 64 MiB cap
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    finally:
        os.close(fd)
    return "ok"

big = 2 * sandbox.MAX_FILE_BYTES
out = {"before": fsize()}
out["layers"] = sandbox.apply("on", Path(sys.argv[1]), shm=True, rlimits=False).summary()
out["deferred"], out["deferred_truncate"] = fsize(), truncate(big)
out["off"] = sandbox.apply_rlimits("off").state
out["after_off"] = fsize()
layer = sandbox.apply_rlimits("on")
out["layer"], out["after"], out["truncate"] = f"{layer.state}: {layer.detail}", fsize(), truncate(big)
print(json.dumps(out))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is for Linux")
def test_deferred_rlimits_apply_only_when_asked(tmp_path):
    """``apply(..., rlimits=False)`` leaves RLIMIT_FSIZE as it was and says so; ``apply_rlimits`` sets it."""
    (tmp_path / "scratch").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", DEFERRED_CHILD, str(tmp_path / "scratch")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"] != [sandbox.MAX_FILE_BYTES] * 2, out  # else the test would show nothing
    assert out["layers"]["rlimits"] == f"off: {sandbox.DEFERRED}"
    assert out["deferred"] == out["before"] and out["deferred_truncate"] == "ok"
    assert out["off"] == "off" and out["after_off"] == out["before"]  # mode off applies nothing
    assert out["layer"].startswith(("active: core=0, fsize=64 MiB", "partial: core=0, fsize=64 MiB")), out
    assert out["after"] == [sandbox.MAX_FILE_BYTES] * 2 and out["truncate"] == "EFBIG"


def test_unavailable_rlimits_fail_soft_in_on_mode_and_are_an_error_in_strict(monkeypatch):
    def refuse(which, value):
        raise OSError(1, "simulated")

    monkeypatch.setattr(sandbox, "_cap", refuse)  # nothing reaches this process's limits
    layer = sandbox.apply_rlimits("on")
    assert layer.state == "unavailable" and "setrlimit failed" in layer.detail
    with pytest.raises(sandbox.SandboxError, match="strict sandbox mode, but the rlimits layer"):
        sandbox.apply_rlimits("strict")


@pytest.mark.parametrize("mode", ["profile", "memcheck"])
def test_exit_now_skips_the_teardown_under_nsight_compute_only(tmp_path, monkeypatch, mode):
    """``--exit-now``: a profile's driver ends with ``os._exit(0)`` once both calls returned.

    Under compute-sanitizer (not in ``EXIT_NOW_MODES``) it returns 0 as without the flag: the tool's
    leak check and summary need the process's orderly end.
    """
    spies = Spies(monkeypatch, cuda=True)
    calls: list[int] = []
    monkeypatch.setattr(driver, "_target", lambda args, outputs: lambda *a: calls.append(len(a)))
    monkeypatch.setattr(driver, "_range", lambda: (lambda name: None, lambda: None, "spy"))

    def exit_now(code: int) -> None:
        spies.events.append(f"_exit {code}")
        raise Stop("_exit")

    monkeypatch.setattr(driver.os, "_exit", exit_now)
    _run(spies, [*_argv(tmp_path, mode), "--exit-now"], tmp_path)
    assert calls == ([2, 2] if mode == "profile" else [2])  # input a, output c; profiled twice
    assert spies.events[-1] == ("_exit 0" if mode in driver.EXIT_NOW_MODES else "exit 0"), spies.events
    assert mode != "profile" or mode in driver.EXIT_NOW_MODES
