"""A proof's tool run holds the GPU only for its GPU phase (``tools.Gate``; no GPU needed).

The real driver (``sandboxed/driver.py``) is run through ``run_tool`` with a gate: its start-up (the
interpreter, torch, TVM-FFI, the input file) happens with nothing held, it stops before CUDA, and only
the go lets it on (here to ``torch.cuda.set_device``, which fails on a machine without a GPU: proof that
it got there only after the go). Stand-in processes play a driver that dies before its gate, one that
never reaches it, and one whose GPU phase overruns.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from ptxgym.evaluation.sandboxed import driver
from ptxgym.evaluation.trusted.tools import (
    Gate,
    GateError,
    driver_argv,
    gate_key,
    run_tool,
    tool_environ,
)

ROOT = Path(__file__).resolve().parents[2]


def _process(marker: str) -> Path | None:
    """The /proc folder of a live process with ``marker`` on its command line (an exited one has none)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                return proc
        except OSError:
            continue
    return None


def _running(marker: str) -> bool:
    """Whether a live process has ``marker`` on its command line."""
    return _process(marker) is not None


class Holds:
    """A stand-in for the evaluator's queue: what the gate directory held at each entry.

    With ``marker``, also whether the driver was still running then.
    """

    def __init__(self, root: Path, wait_s: float = 0.0, marker: str = "") -> None:
        self.root, self.wait_s, self.marker = root, wait_s, marker
        self.entered: list[tuple[bool, bool]] = []
        self.alive: list[bool] = []
        self.inside = False

    @contextmanager
    def hold(self):
        time.sleep(self.wait_s)  # as if others held the GPU
        gates = list(self.root.glob("ptxgym-gate-*"))
        assert len(gates) == 1
        self.entered.append(((gates[0] / "ready").exists(), (gates[0] / "go").exists()))
        self.alive.append(bool(self.marker) and _running(self.marker))
        self.inside = True
        try:
            yield
        finally:
            self.inside = False


@pytest.fixture
def gate_root(monkeypatch, tmp_path):
    """Gate directories under ``tmp_path`` (``run_tool`` makes them in the temp directory)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return tmp_path


def _inputs(path: Path) -> Path:
    saved = {"inputs": {"a": torch.ones(4)}, "order": ["a"], "outputs": {"c": ([4], "float32")}}
    torch.save(saved, path)
    return path


@pytest.mark.skipif(torch.cuda.is_available(), reason="the driver must fail at CUDA to show it got there")
def test_the_real_driver_starts_without_the_gpu_and_goes_only_on_the_go(gate_root):
    inputs = _inputs(gate_root / "gated-driver-inputs.pt")
    holds = Holds(gate_root, wait_s=0.3, marker=str(inputs))
    gate = Gate(holds.hold)
    argv = driver_argv(inputs, gate_root / "c.so", "run", 0, "profile", gate=gate)
    assert argv[-4:] == ["--gate", str(gate.dir), "--gate-key", gate.key] and gate.secret not in argv
    run = run_tool(argv, 60, cwd=gate_root, gate=gate, read=lambda *_: holds.inside)
    assert run.read is True  # read while the GPU was still held
    assert holds.entered == [(True, False)]  # held once, the driver waiting at its gate, not yet let go
    assert holds.alive == [True]  # still waiting there 0.3 s later
    assert run.returncode not in (0, 4, None) and not run.timed_out
    assert "set_device" in run.output or "CUDA" in run.output, run.output[-2000:]  # after the go only
    assert "no go at the gate" not in run.output
    assert gate.boot_s > 0.2  # the interpreter and the imports, with nothing held
    assert gate.queue_s >= 0.3 and 0 < gate.gpu_s < gate.boot_s
    gate.close()
    assert not list(gate_root.glob("ptxgym-gate-*"))  # the gate directory is removed


def test_a_driver_that_dies_before_its_gate_is_the_evaluators_fault_and_holds_nothing(gate_root):
    holds = Holds(gate_root)
    gate = Gate(holds.hold)
    argv = [sys.executable, "-c", "print('no such module'); raise SystemExit(3)", *gate.argv()]
    with pytest.raises(GateError, match=r"ended \(exit 3\) before its GPU gate.*no such module"):
        run_tool(argv, 60, gate=gate)
    assert holds.entered == []


def test_a_driver_that_never_reaches_its_gate_is_killed_holding_nothing(gate_root):
    holds = Holds(gate_root)
    gate = Gate(holds.hold, boot_timeout_s=0.5)
    marker = str(gate_root / "never-ready")
    t = time.perf_counter()
    with pytest.raises(GateError, match="did not reach its GPU gate within 0.5 s"):
        run_tool([sys.executable, "-c", "import time; time.sleep(60)", marker, *gate.argv()], 60, gate=gate)
    assert holds.entered == [] and gate.gpu_s == 0.0 and not _running(marker)
    assert time.perf_counter() - t < 20


WAITER = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from ptxgym.evaluation.sandboxed import driver
assert driver.wait_at_gate(sys.argv[3], sys.argv[5])
print("went", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _waiter(seconds: float, gate: Gate) -> list[str]:
    """A stand-in driver: waits at ``gate``, then sleeps ``seconds`` (its GPU phase)."""
    return [sys.executable, "-c", WAITER, str(seconds), *gate.argv()]


def test_the_timeout_bounds_the_gpu_phase_only(gate_root):
    holds = Holds(gate_root, wait_s=1.5)  # the wait for the GPU is longer than the limit, and not charged
    gate = Gate(holds.hold)
    run = run_tool(_waiter(0, gate), 1.0, gate=gate)
    assert run.returncode == 0 and not run.timed_out and "went" in run.output, run.output
    gate.gpu_s = 0.0
    run = run_tool(_waiter(60, gate), 1.0, gate=gate)  # the same gate again: its files are reset
    assert run.timed_out and "went" in run.output and 0.9 < gate.gpu_s < 10
    assert len(holds.entered) == 2 and holds.entered[1] == (True, False)


def test_the_read_back_is_held_and_counted_apart(gate_root):
    """The report's reading runs under the hold, after the tool's exit: part of ``gpu_s``, also ``read_s``."""
    holds = Holds(gate_root)
    gate = Gate(holds.hold)

    def read(code, late):
        assert holds.inside  # under the hold
        time.sleep(0.3)  # as if Nsight Compute's import took that long
        return code

    run = run_tool(_waiter(0, gate), 10, gate=gate, read=read)
    assert run.read == 0 and "went" in run.output
    assert 0.3 <= gate.read_s < gate.gpu_s < 10
    assert gate.record()["proof_read"] == round(gate.read_s, 4)


def test_a_gated_run_must_pass_its_gate_on(gate_root):
    gate = Gate(Holds(gate_root).hold)
    with pytest.raises(ValueError, match="must pass its gate"):
        run_tool([sys.executable, "-c", "pass"], 10, gate=gate)
    with pytest.raises(ValueError, match="must pass its gate"):  # the directory without the key
        run_tool([sys.executable, "-c", "pass", "--gate", str(gate.dir)], 10, gate=gate)


def test_the_driver_goes_only_on_the_secret_and_gives_up_without_it(monkeypatch, tmp_path):
    monkeypatch.setattr(driver, "GATE_WAIT_S", 0.1)
    key = gate_key("the-secret")
    assert driver.wait_at_gate(str(tmp_path), key) is False and (tmp_path / "ready").exists()
    (tmp_path / "go").touch()  # a go another process made: empty
    assert driver.wait_at_gate(str(tmp_path), key) is False  # announced again (replay), still waiting
    (tmp_path / "go").write_text(key)  # the key is on the driver's command line: readable, and useless
    assert driver.wait_at_gate(str(tmp_path), key) is False
    (tmp_path / "go").write_text("the-secret")
    assert driver.wait_at_gate(str(tmp_path), key) is True
    assert driver.wait_at_gate(None, None) is True  # no gate: straight on


def test_gated_runs_overlap_their_start_up_with_another_holder(gate_root):
    """While one caller holds the GPU, a gated run starts up; it holds only after the other lets go."""
    from ptxgym.evaluation.trusted.gpu_queue import GpuQueue

    queue = GpuQueue()
    held = threading.Event()
    release = threading.Event()

    def other() -> None:
        with queue.turn():
            held.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    held.wait(10)
    gate = Gate(lambda: queue.turn(resume=True))

    def release_once_ready() -> None:
        deadline = time.monotonic() + 30
        while not (gate.dir / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.5)
        release.set()

    releaser = threading.Thread(target=release_once_ready)
    releaser.start()
    run = run_tool(_waiter(0, gate), 30, gate=gate)
    thread.join(10)
    releaser.join(10)
    assert run.returncode == 0 and queue.served == 2
    assert gate.boot_s > 0 and gate.queue_s >= 0.4  # it started up, then waited for the other's turn


def test_what_a_run_leaves_behind_in_its_group_is_killed(gate_root):
    """A forked child that outlives the tool (it could use the GPU beside the next turn) dies with the run."""
    marker = str(gate_root / "left-behind-child")
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\n"
    )
    run = run_tool([sys.executable, "-c", code, marker], 30)
    assert run.returncode == 0
    deadline = time.monotonic() + 5
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(marker)


def _nvidia_fds(marker: str) -> list[str]:
    """The /dev/nvidia* files the process with ``marker`` on its command line holds open."""
    proc = _process(marker)
    if proc is None:
        raise AssertionError(f"no live process with {marker} on its command line")
    links = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
    return [link for link in links if link.startswith("/dev/nvidia")]


@pytest.mark.gpu
def test_on_a_gpu_the_driver_has_not_touched_cuda_when_it_reaches_its_gate(gate_root):
    """At the gate the driver holds no /dev/nvidia* file (cuInit opens them); after the go it runs."""
    a = torch.randn(64, 32, dtype=torch.bfloat16)
    inputs = gate_root / "gpu-gate-inputs.pt"
    outputs = {"C": ([64, 64], "bfloat16")}
    saved = {"inputs": {"A": a, "B": a.clone()}, "order": ["A", "B"], "outputs": outputs}
    torch.save(saved, inputs)
    seen: list[list[str]] = []

    @contextmanager
    def hold():
        seen.append(_nvidia_fds(str(inputs)))
        yield

    gate = Gate(hold)
    argv = driver_argv(inputs, None, "run", 0, "memcheck", baseline="gemm_cublas", gate=gate)
    run = run_tool(argv, 120, cwd=gate_root, gate=gate)
    gate.close()
    print(f"GATE nvidia fds at the gate: {seen}; boot {gate.boot_s:.2f} s, GPU phase {gate.gpu_s:.2f} s")
    assert seen == [[]], seen
    assert run.returncode == 0 and "driver: memcheck done" in run.output, run.output[-2000:]


def test_a_module_left_in_the_drivers_working_directory_is_not_imported(tmp_path, monkeypatch):
    """A module in the driver's working directory (the candidate's scratch) is never imported.

    An earlier run of the same candidate (Nsight Compute's retry) could leave a ``torch`` package there
    for the next driver's imports, which run before the sandbox.
    """
    planted = tmp_path / "torch"
    planted.mkdir()
    (planted / "__init__.py").write_text("print('PLANTED torch imported'); raise SystemExit(7)\n")
    argv = driver_argv(_inputs(tmp_path / "i.pt"), tmp_path / "c.so", "run", 0, "profile")
    # an empty PYTHONPATH entry (export PYTHONPATH=$PYTHONPATH:/x) also names the working directory
    monkeypatch.setenv("PYTHONPATH", f":{ROOT}:relative/dir")
    env = tool_environ(tmp_path)
    assert env["PYTHONPATH"] == str(ROOT)
    run = run_tool(argv, 60, env=env, cwd=tmp_path)
    assert "PLANTED" not in run.output and run.returncode != 7, run.output[-1500:]


def test_a_scratch_with_locked_folders_is_renewed(tmp_path):
    """The candidate may chmod 000 what it leaves in its scratch; the second attempt still gets it empty."""
    from ptxgym.evaluation.trusted.tools import ProofDirs

    dirs = ProofDirs.create(tmp_path)
    locked = dirs.scratch / "a" / "b"
    locked.mkdir(parents=True)
    (locked / "torch.py").write_text("planted")
    os.chmod(locked, 0)
    os.chmod(locked.parent, 0)
    assert dirs.renew_scratch() and list(dirs.scratch.iterdir()) == []
    dirs.remove()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the driver must fail at CUDA to show where it got")
@pytest.mark.parametrize("mode", ["memcheck", "profile"])
def test_under_compute_sanitizer_the_driver_is_jailed_before_cuda(tmp_path, monkeypatch, mode):
    """Memcheck's driver applies the sandbox before CUDA starts, Nsight Compute's only after (``driver``).

    The sanitizer's injected library starts its helper threads at CUDA's start-up; jailed there they are
    born inside the sandbox instead of being reached by a signal they did not survive. On a machine
    without a GPU the driver fails at ``torch.cuda.set_device``: memcheck's sandbox report is printed
    before that failure, Nsight Compute's never. The order within the process, ``import tvm_ffi``
    included, is ``test_driver_jail_order.py``'s.
    """
    from ptxgym.evaluation.sandboxed import sandbox

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    argv = driver_argv(_inputs(tmp_path / "i.pt"), tmp_path / "c.so", "run", 0, mode, scratch=scratch)
    run = run_tool(argv, 120, env=tool_environ(scratch), cwd=scratch)
    out = run.output
    assert run.returncode not in (0, None) and not run.timed_out, out[-2000:]
    assert "set_device" in out, out[-2000:]  # it failed at CUDA
    jail = out.find("driver: sandbox")
    if mode in driver.EARLY_JAIL_MODES:
        assert mode == "memcheck" and 0 <= jail < out.index("set_device"), out[-2000:]
        assert "'network': 'active" in out and f"'rlimits': 'off: {sandbox.DEFERRED}'" in out, out[-2000:]
    else:
        assert mode == "profile" and jail == -1, out[-2000:]
