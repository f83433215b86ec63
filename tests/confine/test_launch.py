"""The confinement launcher (``ptxgym.confine.launch``): a program started in a jail can do only what it says.

Each test starts real child processes through the launcher (nothing here restricts the test process). The
Landlock tests skip, with the kernel's reason, where Landlock is absent; each has a control run without
Landlock that does what the jailed run must not, so a jail that silently did nothing would fail them.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ptxgym.confine import landlock
from ptxgym.confine.launch import JAIL_FAILED, JAIL_PREFIX, Jail, LandlockRules, command

if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
    pytest.skip("the launcher is for Linux on x86_64 or aarch64", allow_module_level=True)

ABI, WHY = landlock.abi()
needs_landlock = pytest.mark.skipif(not ABI, reason=f"no Landlock on this kernel: {WHY}")
# sh and the C library may run (the test's own folders are granted per test)
SYSTEM = tuple(
    p for p in ("/bin", "/usr/bin", "/lib", "/lib64", "/usr/lib", "/usr/lib64") if Path(p).exists()
)


def _sh(jail: Jail, script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(jail, ["/bin/sh", "-c", script]), capture_output=True, text=True, timeout=60, cwd=cwd
    )


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    allowed, stage, outside = tmp_path / "allowed", tmp_path / "stage", tmp_path / "outside"
    for d in (allowed, stage, outside):
        d.mkdir()
    (allowed / "header.h").write_text("public\n")
    (outside / "secret.txt").write_text("s3cret-marker\n")
    return {"allowed": allowed, "stage": stage, "outside": outside}


SCRIPT = """
read line < {outside}/secret.txt && echo "secret=$line"
read line < {allowed}/header.h && echo "header=$line"
echo x > {outside}/escaped.txt && echo wrote-outside
echo x > {stage}/out.txt && echo wrote-stage
mv {stage}/out.txt {stage}/moved.txt && echo moved-in-stage
echo x > /dev/null && echo devnull
"""


@needs_landlock
def test_reads_and_writes_only_where_the_rules_say(places: dict[str, Path]) -> None:
    rules = LandlockRules(
        read=(str(places["allowed"]),), execute=SYSTEM, write=(str(places["stage"]),), devices=("/dev/null",)
    )
    done = _sh(Jail(landlock=rules), SCRIPT.format(**places), places["stage"])
    assert "secret=" not in done.stdout and "Permission denied" in done.stderr
    assert "wrote-outside" not in done.stdout and not (places["outside"] / "escaped.txt").exists()
    for allowed in ("header=public", "wrote-stage", "moved-in-stage", "devnull"):
        assert allowed in done.stdout, (allowed, done.stdout, done.stderr)
    control = _sh(Jail(), SCRIPT.format(**places), places["stage"])
    assert "secret=s3cret-marker" in control.stdout and "wrote-outside" in control.stdout


@needs_landlock
def test_nothing_outside_the_rules_can_be_executed(places: dict[str, Path]) -> None:
    tool = places["outside"] / "tool.sh"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    rules = LandlockRules(read=(str(places["outside"]),), execute=SYSTEM)
    done = _sh(Jail(landlock=rules), f"{tool}", places["stage"])
    assert "ran" not in done.stdout and "Permission denied" in done.stderr
    assert "ran" in _sh(Jail(), f"{tool}", places["stage"]).stdout


_SOCKETS = """
import errno, socket
for name in ("AF_INET", "AF_INET6", "AF_UNIX"):
    try:
        socket.socket(getattr(socket, name), socket.SOCK_STREAM).close()
        print(name, "ok")
    except OSError as exc:
        print(name, errno.errorcode[exc.errno])
"""


@pytest.mark.parametrize(
    ("families", "expected"),
    [
        ((), {"AF_INET": "EACCES", "AF_INET6": "EACCES", "AF_UNIX": "EACCES"}),
        ((socket.AF_UNIX,), {"AF_INET": "EACCES", "AF_INET6": "EACCES", "AF_UNIX": "ok"}),
        (None, {"AF_INET": "ok", "AF_INET6": "ok", "AF_UNIX": "ok"}),
    ],
)
def test_sockets_only_of_the_allowed_families(families: tuple[int, ...] | None, expected: dict) -> None:
    if families is None and not socket.has_ipv6:
        expected = {**expected, "AF_INET6": "EAFNOSUPPORT"}
    done = subprocess.run(
        command(Jail(families=families), [sys.executable, "-c", _SOCKETS]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert dict(line.split() for line in done.stdout.splitlines()) == expected


def test_limits_apply_before_exec() -> None:
    jail = Jail(rlimits={"RLIMIT_CORE": 0, "RLIMIT_FSIZE": 4096})
    done = subprocess.run(
        command(jail, ["/bin/sh", "-c", "ulimit -c; ulimit -f"]), capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["0", "8"]  # ulimit -f counts 512-byte blocks


def test_the_program_runs_at_the_niceness_asked() -> None:
    script = [sys.executable, "-c", "import os; print(os.nice(0))"]
    base = int(subprocess.run(script, capture_output=True, text=True, timeout=60).stdout)
    done = subprocess.run(command(Jail(nice=7), script), capture_output=True, text=True, timeout=60)
    assert int(done.stdout) == min(base + 7, 19), done.stderr
    plain = subprocess.run(command(Jail(), script), capture_output=True, text=True, timeout=60)
    assert int(plain.stdout) == base


def test_an_idle_jail_runs_its_program_and_children_under_sched_idle() -> None:
    script = [
        sys.executable,
        "-c",
        "import os, subprocess, sys; print(os.sched_getscheduler(0)); sys.stdout.flush(); "
        "subprocess.run([sys.executable, '-c', 'import os; print(os.sched_getscheduler(0))'])",
    ]
    done = subprocess.run(command(Jail(idle=True), script), capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == [str(os.SCHED_IDLE)] * 2, done.stderr
    plain = subprocess.run(command(Jail(), script), capture_output=True, text=True, timeout=60)
    assert plain.stdout.split() == [str(os.SCHED_OTHER)] * 2


def test_a_jail_that_cannot_be_applied_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = subprocess.run(
        command(Jail(rlimits={"RLIMIT_NOT_A_LIMIT": 1}), ["/bin/sh", "-c", f"touch {marker}"]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == JAIL_FAILED and done.stderr.startswith(JAIL_PREFIX)
    assert not marker.exists()


@needs_landlock
def test_a_rule_on_a_file_keeps_only_file_rights(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("x")
    with landlock.Ruleset(ABI, landlock.fs_rights(ABI)) as ruleset:
        assert ruleset.allow(target, landlock.READ | landlock.write_rights(ABI)) == ""  # no EINVAL
        assert "cannot open" in ruleset.allow(tmp_path / "missing", landlock.READ)


def test_landlock_abi_reports_why_not() -> None:
    abi, why = landlock.abi()
    assert (abi > 0 and why == "") or (abi == 0 and why)


def test_a_refused_idle_priority_is_no_error(monkeypatch) -> None:
    """``idle_priority`` is best effort: a kernel (or seccomp) that refuses SCHED_IDLE costs nothing."""
    from ptxgym.confine import launch

    def refuse(*_args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(launch.os, "sched_setscheduler", refuse)
    assert launch.idle_priority(0) is False
