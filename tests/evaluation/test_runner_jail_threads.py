"""The runner's jail reaches the threads started before it (``runner/confine.h``, ``restrict_others``).

Below Landlock ABI 8 ``landlock_restrict_self`` binds only the calling thread, and the CUDA driver starts
its helper threads before the runner jails itself. A candidate could run code on one of them (a signal
handler sent there, a host callback) and read or write anywhere. A small driver
(``tests/evaluation/native/jail_threads_driver.cc``) starts threads before the jail as the driver would,
applies the runner's own jail code, and has every thread open a file outside the rules.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cupti_native import NATIVE, compile_program  # tests/evaluation on sys.path

from ptxgym.confine.landlock import abi

#: A jail of Landlock alone that reads nothing (runner/jail.py's shape).
JAIL = {"rlimits": {}, "landlock": {"read": [], "execute": [], "write": [], "devices": []}, "filter": None}


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    version, why = abi()
    if version < 1:
        pytest.skip(f"no Landlock here: {why}")
    out = tmp_path_factory.mktemp("jail-threads") / "driver"
    return compile_program(NATIVE / "jail_threads_driver.cc", out, ["-pthread"])


def run(driver: Path, threads: str, tmp_path: Path) -> dict[str, str]:
    target = tmp_path / "outside.txt"
    target.write_text("not for the candidate")
    argv = [str(driver), threads, str(target)]
    done = subprocess.run(argv, input=json.dumps(JAIL), capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) if " " in line else (line, "") for line in done.stdout.splitlines())


@pytest.mark.parametrize("threads", ["plain", "blocking", "plain,blocking"])
def test_every_thread_started_before_the_jail_is_inside_it(driver, threads, tmp_path):
    """A thread that blocks every signal glibc lets it block is reached too (signal 32)."""
    if abi()[0] >= 8:
        pytest.skip("Landlock ABI 8 restricts every thread itself (TSYNC)")
    out = run(driver, threads, tmp_path)
    assert out["error"] == ""
    for name in ["main", *threads.split(",")]:
        assert out[name] == "Permission denied", (name, out)
    assert out["all_threads"] == "1"
    assert out["note"] == f"{len(threads.split(','))} earlier thread(s) restricted themselves"


def test_a_thread_the_broadcast_cannot_reach_is_named_and_the_jail_is_partial(driver, tmp_path):
    """A thread blocking signal 32 too (a raw rt_sigprocmask) stays outside: the report must say so."""
    if abi()[0] >= 8:
        pytest.skip("Landlock ABI 8 restricts every thread itself (TSYNC)")
    out = run(driver, "plain,rawblock", tmp_path)
    assert out["plain"] == "Permission denied" and out["main"] == "Permission denied"
    assert out["rawblock"] == "ok"  # outside Landlock, as reported:
    assert out["all_threads"] == "0"
    assert out["note"].startswith("outside Landlock: ") and "(blocked ffffffff" in out["note"]


def test_the_broadcast_puts_back_the_signal_handlers_it_borrowed(driver, tmp_path):
    """Signal 32 and the real-time signal lending its restorer keep the handlers the process had.

    A reviewer's find: glibc's cancellation handler (signal 32) was replaced for good, so pthread_cancel
    stopped working after the jail.
    """
    if abi()[0] >= 8:
        pytest.skip("Landlock ABI 8 restricts every thread itself (TSYNC)")
    out = run(driver, "handlers,plain", tmp_path)
    assert out["plain"] == "Permission denied" and out["all_threads"] == "1"
    assert out["handlers"] == "kept"


def test_a_lone_thread_needs_no_broadcast(driver, tmp_path):
    out = run(driver, "none", tmp_path)
    assert out == {"main": "Permission denied", "all_threads": "1", "note": "", "error": ""}
