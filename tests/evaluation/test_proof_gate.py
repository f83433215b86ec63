"""A proof's tool run holds the GPU only for its GPU phase (``tools.Gate``; no GPU needed).

The real driver (``sandboxed/driver.py``) is run through ``run_tool`` with a gate: its start-up (the
interpreter, torch, TVM-FFI, the input file) happens with nothing held, it stops before CUDA, and only
the go lets it on (here to ``torch.cuda.set_device``, which fails on a machine without a GPU: proof that
it got there only after the go). Stand-in processes play a driver that dies before its gate, one that
never reaches it, and one whose GPU phase overruns.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from ptxgym.evaluation.sandboxed import driver
from ptxgym.evaluation.trusted.tools import Gate, driver_argv, run_tool

ROOT = Path(__file__).resolve().parents[2]


def _running(marker: str) -> bool:
    """Whether a live process has ``marker`` on its command line (an exited one has an empty one)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                return True
        except OSError:
            continue
    return False


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
    assert argv[-2:] == ["--gate", str(gate.dir)]
    run = run_tool(argv, 60, cwd=gate_root, gate=gate)
    assert holds.entered == [(True, False)]  # held once, the driver waiting at its gate, not yet let go
    assert holds.alive == [True]  # still waiting there 0.3 s later
    assert run.returncode not in (0, 4, None) and not run.timed_out
    assert "set_device" in run.output or "CUDA" in run.output, run.output[-2000:]  # after the go only
    assert "no go at the gate" not in run.output
    assert gate.boot_s > 0.2  # the interpreter and the imports, with nothing held
    assert gate.queue_s >= 0.3 and 0 < gate.gpu_s < gate.boot_s
    gate.close()
    assert not list(gate_root.glob("ptxgym-gate-*"))  # the gate directory is removed


def test_a_driver_that_dies_before_its_gate_holds_nothing(gate_root):
    holds, gate = Holds(gate_root), None
    gate = Gate(holds.hold)
    run = run_tool([sys.executable, "-c", "raise SystemExit(3)", str(gate.dir)], 60, gate=gate)
    assert run.returncode == 3 and not run.timed_out and holds.entered == []


def test_a_driver_that_never_reaches_its_gate_is_killed_holding_nothing(gate_root):
    holds = Holds(gate_root)
    gate = Gate(holds.hold, boot_timeout_s=0.5)
    t = time.perf_counter()
    run = run_tool([sys.executable, "-c", "import time; time.sleep(60)", str(gate.dir)], 60, gate=gate)
    assert run.timed_out and run.returncode is None and holds.entered == []
    assert "did not reach its GPU gate within 0.5 s" in run.output
    assert time.perf_counter() - t < 20 and gate.gpu_s == 0.0


WAITER = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from ptxgym.evaluation.sandboxed import driver
assert driver.wait_at_gate(sys.argv[2])
print("went", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _waiter(seconds: float, gate: Gate) -> list[str]:
    """A stand-in driver: waits at ``gate``, then sleeps ``seconds`` (its GPU phase)."""
    return [sys.executable, "-c", WAITER, str(seconds), str(gate.dir)]


def test_the_timeout_bounds_the_gpu_phase_only(gate_root):
    holds = Holds(gate_root, wait_s=1.5)  # the wait for the GPU is longer than the limit, and not charged
    gate = Gate(holds.hold)
    run = run_tool(_waiter(0, gate), 1.0, gate=gate)
    assert run.returncode == 0 and not run.timed_out and "went" in run.output, run.output
    gate.gpu_s = 0.0
    run = run_tool(_waiter(60, gate), 1.0, gate=gate)  # the same gate again: its files are reset
    assert run.timed_out and "went" in run.output and 0.9 < gate.gpu_s < 10
    assert len(holds.entered) == 2 and holds.entered[1] == (True, False)


def test_a_gated_run_must_pass_its_gate_on(gate_root):
    gate = Gate(Holds(gate_root).hold)
    with pytest.raises(ValueError, match="must pass its gate"):
        run_tool([sys.executable, "-c", "pass"], 10, gate=gate)


def test_the_driver_gives_up_when_no_go_comes(monkeypatch, tmp_path):
    monkeypatch.setattr(driver, "GATE_WAIT_S", 0.1)
    assert driver.wait_at_gate(str(tmp_path)) is False and (tmp_path / "ready").exists()
    assert (
        driver.wait_at_gate(str(tmp_path)) is False
    )  # a second pass (application replay) may announce again
    (tmp_path / "go").touch()
    assert driver.wait_at_gate(str(tmp_path)) is True
    assert driver.wait_at_gate(None) is True  # no gate: straight on


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
    timer = threading.Timer(1.0, release.set)
    timer.start()
    run = run_tool(_waiter(0, gate), 30, gate=gate)
    thread.join(10)
    assert run.returncode == 0 and queue.served == 2
    assert gate.boot_s < 1.0 <= gate.boot_s + gate.queue_s + 0.05  # started up while the other held it


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
