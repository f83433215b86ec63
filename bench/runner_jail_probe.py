"""Which rule of a jail applied before exec stops the CUDA driver? (an H200 diagnostic; no strace there)

    python bench/runner_jail_probe.py --out bench/results/runner_jail_probe.txt

Starts a ``NativeHandle`` runner under variants of ``runner/jail.runner_jail`` (the jail as shipped, the
launcher alone, and each layer alone: rlimits, the seccomp socket filter, Landlock) and attaches a
one-page guard-page blob, which initialises the driver (``cuInit``) and the candidate's runtime; then the
split form (``NativeHandle(at_exec="landlock")``: Landlock at exec, the rest at the sandbox command,
``native_worker.LANDLOCK_AT_EXEC``) through attach and sandbox. Prints each variant's attach outcome
and, where the kernel logs Landlock denials (Linux >= 6.15 with audit), the denied accesses from
``dmesg``.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import commit

from ptxgym.confine.launch import Jail


def variants(base):
    """(name, jail) pairs derived from the shipped jail."""
    rules = base.landlock
    unix = (socket.AF_UNIX, socket.AF_NETLINK)
    rep = dataclasses.replace
    out = [("shipped", base), ("launcher only (no rlimits, seccomp or Landlock)", Jail())]
    out.append(("rlimits only", Jail(rlimits=dict(base.rlimits))))
    out.append(("seccomp, no sockets, only", Jail(families=())))
    out.append(("seccomp, AF_UNIX+AF_NETLINK, only", Jail(families=unix)))
    if rules is not None:
        out.append(("Landlock only", Jail(landlock=rules)))
        out.append(("Landlock + rlimits", Jail(rlimits=dict(base.rlimits), landlock=rules)))
        out.append(("shipped with AF_UNIX+AF_NETLINK", rep(base, families=unix)))
    return out


def attach_once(spec, jail, log_dir: Path) -> str:
    """A runner under ``jail``, all of it applied before exec: does it attach (``cuInit``)?"""
    from ptxgym.evaluation.trusted import native_worker

    original = native_worker.runner_jail
    native_worker.runner_jail = lambda *a, **k: jail
    try:
        handle = native_worker.NativeHandle(spec, log_dir, sandboxed=True, at_exec=True)
    finally:
        native_worker.runner_jail = original
    return _attach_and_sandbox(handle, sandbox=False)


def split_once(spec, log_dir: Path) -> str:
    """The split jail (``NativeHandle(at_exec="landlock")``) through attach and sandbox.

    Landlock from exec, the rest at the sandbox command; the filesystem layer as the runner reports it.
    """
    from ptxgym.evaluation.trusted.native_worker import NativeHandle

    return _attach_and_sandbox(NativeHandle(spec, log_dir, sandboxed=True, at_exec="landlock"), sandbox=True)


def shipped_once(spec, log_dir: Path) -> str:
    """The jail as candidates get it, with every thread's blocked signals.

    ``NativeHandle``'s default: the runner jails itself at the sandbox command, after cuInit.
    """
    from ptxgym.evaluation.trusted.native_worker import NativeHandle

    return _attach_and_sandbox(NativeHandle(spec, log_dir, sandboxed=True), sandbox=True)


def _attach_and_sandbox(handle, sandbox: bool) -> str:
    """Attach a one-page guard-page blob (the driver starts there); then, if asked, the sandbox command."""
    import os

    import torch

    from ptxgym.evaluation import vmm
    from ptxgym.evaluation.protocol import ApplySandbox, Attach, TensorArg, VmmBlob, VmmRun

    page = vmm.granularity(0)
    handles, fds = vmm.create_runs([page], 0)
    try:
        hello = handle.receive(60.0)
        if hello.hello is None:
            return f"no hello: {hello}"
        sets = [[TensorArg(role="in", offset=0, shape=(16,), dtype="float32")]]
        blob = VmmBlob(total=2 * page, page=page, runs=[VmmRun(offset=0, size=page)])
        cmd = Attach(arena="p", blob=None, vmm=blob, sets=sets, flush_bytes=1 << 20, cupti=False)
        reply = handle.request(cmd, 60.0, fds=fds)
        torch.cuda.synchronize()
        if not reply.ok:
            return f"attach FAILED: {reply.error[:300]} | log: {handle.log_tail(400)!r}"
        if not sandbox:
            return "attach OK"
        done = handle.request(ApplySandbox(mode="on", scratch=str(handle.scratch)), 60.0)
        if not done.ok or done.sandbox is None:
            return f"attach OK, sandbox FAILED: {done.error[:300]}"
        layers = {x.name: f"{x.state} ({x.detail[:400]})" for x in done.sandbox.layers}
        return (
            f"attach OK, sandbox OK: filesystem {layers.get('filesystem')}; network {layers.get('network')}; "
            f"threads' blocked signals: {thread_signal_masks(handle.pid)}"
        )
    except Exception as exc:  # noqa: BLE001 - a diagnostic reports everything
        return f"{type(exc).__name__}: {exc}"[:500]
    finally:
        handle.kill()
        for fd in fds:
            os.close(fd)
        vmm.release_handles(handles)


def thread_signal_masks(pid: int) -> str:
    """Each thread's name and blocked-signal mask (``SigBlk``), from /proc.

    Below Landlock ABI 8 the threads the driver started before the jail stay outside it; a candidate could
    run its code on one through a signal handler (a reviewer's suspicion) unless that thread blocks every
    signal it could be sent. All ones (``fffffffe7fffffff`` or more) on those threads settles it.
    """
    out = []
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        out.append(f"{fields.get('Name', '?').strip()}={fields.get('SigBlk', '?').strip()}")
    return ", ".join(out) or "no threads read"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    from ptxgym.evaluation.runner.jail import runner_jail
    from ptxgym.evaluation.trusted.native_worker import native_spec

    torch.zeros(1, device="cuda:0")
    lines = [f"# runner jail probe {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} commit {commit()}"]
    spec = native_spec(0, cupti_needed=False)
    scratch = Path(tempfile.mkdtemp(prefix="jailprobe-"))
    base = runner_jail(spec.binary, scratch, spec.gpu, spec.libs)
    lines.append(f"# read rules: {base.landlock.read if base.landlock else None}")
    lines.append(f"# devices: {base.landlock.devices if base.landlock else None}")
    subprocess.run(["dmesg", "-C"], capture_output=True, check=False)
    for name, jail in variants(base):
        log_dir = Path(tempfile.mkdtemp(prefix="jailprobe-log-"))
        result = attach_once(spec, jail, log_dir)
        lines.append(f"{name}: {result}")
        print(lines[-1], flush=True)
        dm = subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout
        denied = [ln for ln in dm.splitlines() if "landlock" in ln.lower() or "denied" in ln.lower()]
        for ln in denied[-15:]:
            lines.append(f"    dmesg: {ln[:300]}")
        subprocess.run(["dmesg", "-C"], capture_output=True, check=False)
    lines.append(f"split (Landlock at exec, the rest at the sandbox command): {split_once(spec, scratch)}")
    print(lines[-1], flush=True)
    shipped = shipped_once(spec, scratch)
    lines.append(f"as shipped (the runner jails itself at the sandbox command): {shipped}")
    print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
