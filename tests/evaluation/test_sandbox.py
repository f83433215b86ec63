"""The host sandbox of candidate workers (``ptxgym.evaluation.sandboxed.sandbox``), on the CPU.

Every test that applies the sandbox does it in a child interpreter (the sandbox cannot be lifted, and the
test process must stay unrestricted); the child then tries what a hostile candidate's host code would try
and prints what happened as JSON. Landlock tests skip, with the kernel's reason, where Landlock is absent.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ptxgym.evaluation.protocol import Load, Reply, SandboxLayer, SandboxReport
from ptxgym.evaluation.sandboxed import sandbox
from ptxgym.records import settings
from ptxgym.records.feedback import EnvironmentInfo, Feedback, Stage, Status

if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
    pytest.skip("the sandbox is for Linux on x86_64 or aarch64", allow_module_level=True)

LANDLOCK_ABI, LANDLOCK_WHY = sandbox.landlock_abi()
needs_landlock = pytest.mark.skipif(
    not LANDLOCK_ABI, reason=f"no Landlock on this kernel ({platform.release()}): {LANDLOCK_WHY}"
)
needs_broadcast = pytest.mark.skipif(
    LANDLOCK_ABI < 8 and not (shutil.which("g++") or shutil.which("c++")),
    reason="below Landlock ABI 8 every thread needs the broadcast library, which needs a C++ compiler",
)

_PRELUDE = """
import ctypes, errno, json, os, socket, sys, threading
from pathlib import Path
from ptxgym.evaluation.sandboxed import sandbox

def attempt(fn, *args):
    try:
        fn(*args)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"

def write(path):
    with open(path, "w") as fh:
        fh.write("x")

def raw(name, *args):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(sandbox.syscall_number(name)), *(ctypes.c_long(a) for a in args)) == -1:
        return errno.errorcode[ctypes.get_errno()]
    return "ok"

out = {}
"""


def _child(tmp_path: Path, body: str, mode: str = "on", before: str = "", env=None) -> dict:
    """Run ``before``, apply the sandbox in ``mode`` to ``tmp_path/scratch``, run ``body``.

    Returns the child's ``out`` dict, with its stderr under ``"stderr"``.
    """
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    (tmp_path / "outside").mkdir(exist_ok=True)
    code = "\n".join(
        [
            _PRELUDE,
            f"scratch, outside = Path({str(scratch)!r}), Path({str(tmp_path / 'outside')!r})",
            textwrap.dedent(before),
            "out['threads'] = len(os.listdir('/proc/self/task'))",
            f"report = sandbox.apply({mode!r}, scratch)",
            "out['layers'] = report.summary()",
            textwrap.dedent(body),
            "print(json.dumps(out))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


def _state(out: dict, layer: str) -> str:
    return out["layers"][layer].split(":")[0]


# ---------------------------------------------------------------------------------------- network


def test_network_refuses_ip_sockets_and_keeps_unix(tmp_path):
    out = _child(
        tmp_path,
        """
        out["tcp"] = attempt(socket.socket, socket.AF_INET, socket.SOCK_STREAM)
        out["udp6"] = attempt(socket.socket, socket.AF_INET6, socket.SOCK_DGRAM)
        out["packet"] = attempt(socket.socket, socket.AF_PACKET, socket.SOCK_RAW)
        a, b = socket.socketpair(socket.AF_UNIX)
        a.sendall(b"ping")
        out["unix"] = b.recv(4).decode()
        out["netlink"] = attempt(socket.socket, socket.AF_NETLINK, socket.SOCK_RAW, 0)
        out["ptrace"] = raw("ptrace", 12, os.getpid(), 0, 0)  # PTRACE_GETREGS, not traced: ESRCH if allowed
        out["vm_read"] = raw("process_vm_readv", os.getpid(), 0, 0, 0, 0, 0)  # 0 if allowed
        out["io_uring"] = raw("io_uring_setup", 0, 0)  # EINVAL or EFAULT if allowed
        out["setsid"] = raw("setsid")  # a new session if allowed (the child leads no group yet)
        out["setpgid"] = raw("setpgid", 0, 0)  # its own group if allowed
        pid = os.fork()  # a child cannot leave the group either
        if pid == 0:
            os._exit(0 if raw("setsid") == "EPERM" else 1)
        out["child_setsid"] = "EPERM" if os.waitpid(pid, 0)[1] == 0 else "allowed"
        """,
    )
    assert _state(out, "network") == "active" and _state(out, "no_new_privs") == "active"
    assert out["tcp"] == out["udp6"] == out["packet"] == "EACCES"
    assert out["unix"] == "ping" and out["netlink"] == "ok"
    assert out["ptrace"] == out["vm_read"] == out["io_uring"] == "EPERM"
    assert out["setsid"] == out["setpgid"] == out["child_setsid"] == "EPERM"


def test_network_filter_covers_threads_that_existed_before(tmp_path):
    out = _child(
        tmp_path,
        before="""
        go, done = threading.Event(), threading.Event()
        def helper():
            go.wait()
            out["helper_tcp"] = attempt(socket.socket, socket.AF_INET, socket.SOCK_STREAM)
            done.set()
        threading.Thread(target=helper, daemon=True).start()
        """,
        body="""
        go.set()
        done.wait(30)
        modes = []
        for p in Path("/proc/self/task").iterdir():
            try:  # the helper thread may exit between the listing and the read
                modes.append((p / "status").read_text().split("Seccomp:")[1].split()[0])
            except FileNotFoundError:
                pass
        out["seccomp_modes"] = sorted(modes)
        """,
    )
    assert out["helper_tcp"] == "EACCES"
    assert set(out["seccomp_modes"]) == {"2"}
    n = out["threads"]
    assert n >= 2 and f"on {n} of {n} threads" in out["layers"]["network"]


def _run_filter(rows, arch: int, nr: int, arg0: int = 0) -> int:
    """Evaluate a classic-BPF seccomp program (only the opcodes the sandbox uses) on one syscall."""
    data = {sandbox.OFF_NR: nr, sandbox.OFF_ARCH: arch, sandbox.OFF_ARG0: arg0 & 0xFFFFFFFF}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = rows[pc]
        if code == sandbox.RET:
            return k
        if code == sandbox.LD_ABS:
            acc = data[k]
            pc += 1
            continue
        hit = acc == k if code == sandbox.JEQ else acc >= k
        pc += 1 + (jt if hit else jf)


@pytest.mark.parametrize(("machine", "audit"), [("x86_64", 0xC000003E), ("aarch64", 0xC00000B7)])
def test_network_filter_decisions_on_both_architectures(machine, audit):
    rows = sandbox.network_filter(machine)
    names = ("socket", "ptrace", "pidfd_getfd", "setsid", "setpgid")
    nr = {name: sandbox.syscall_number(name, machine) for name in names}
    allow, deny = sandbox.RET_ALLOW, sandbox.RET_ERRNO
    assert _run_filter(rows, audit, nr["socket"], 2) == deny | errno.EACCES  # AF_INET
    assert _run_filter(rows, audit, nr["socket"], 10) == deny | errno.EACCES  # AF_INET6
    assert _run_filter(rows, audit, nr["socket"], 17) == deny | errno.EACCES  # AF_PACKET
    assert _run_filter(rows, audit, nr["socket"], (1 << 32) | 2) == deny | errno.EACCES  # int truncation
    assert _run_filter(rows, audit, nr["socket"], 1) == allow  # AF_UNIX
    assert _run_filter(rows, audit, nr["ptrace"]) == deny | errno.EPERM
    assert _run_filter(rows, audit, nr["pidfd_getfd"]) == deny | errno.EPERM
    assert (
        _run_filter(rows, audit, nr["setsid"])
        == _run_filter(rows, audit, nr["setpgid"])
        == deny | errno.EPERM
    )
    assert _run_filter(rows, audit, 63) == allow  # read / uname: everything else passes
    assert _run_filter(rows, 0x40000003, 359, 2) == deny | errno.ENOSYS  # i386 socket via int 0x80
    if machine == "x86_64":
        assert _run_filter(rows, audit, 0x40000000 | 41, 2) == deny | errno.ENOSYS  # x32 socket


# ------------------------------------------------------------------------------------- filesystem


@needs_landlock
@needs_broadcast
def test_writes_only_inside_scratch(tmp_path):
    out = _child(
        tmp_path,
        """
        out["cwd_is_scratch"] = Path.cwd() == scratch
        out["outside"] = attempt(write, outside / "escaped.txt")
        out["outside_mkdir"] = attempt(os.mkdir, outside / "dir")
        out["via_proc_root"] = attempt(write, f"/proc/self/root{outside}/escaped2.txt")
        out["inside"] = attempt(write, scratch / "ok.txt")
        out["inside_rename"] = attempt(os.rename, scratch / "ok.txt", scratch / "renamed.txt")
        out["inside_remove"] = attempt(os.remove, scratch / "renamed.txt")
        out["dev_null"] = attempt(write, "/dev/null")
        out["dev_shm"] = attempt(write, f"/dev/shm/ptxgym-test-{os.getpid()}")  # outlives the worker
        out["thread_name"] = attempt(write, "/proc/self/comm")
        out["read_outside"] = attempt(lambda: open(sys.executable, "rb").read(16))
        def later():
            out["new_thread_outside"] = attempt(write, outside / "from-thread.txt")
        t = threading.Thread(target=later)
        t.start()
        t.join()
        out["child_process_outside"] = os.system(f"echo x > {outside}/from-child.txt 2>/dev/null") != 0
        """,
    )
    outside = tmp_path / "outside"
    assert _state(out, "filesystem") == "active"  # (numpy's BLAS threads, if any, restricted themselves)
    assert out["cwd_is_scratch"]
    assert out["outside"] == out["outside_mkdir"] == out["via_proc_root"] == "EACCES"
    for left in Path("/dev/shm").glob("ptxgym-test-*") if Path("/dev/shm").is_dir() else ():
        left.unlink()  # only if the sandbox failed to stop it
    assert out["dev_shm"] == "EACCES" or not Path("/dev/shm").is_dir()
    assert out["new_thread_outside"] == "EACCES" and out["child_process_outside"]
    assert list(outside.iterdir()) == []
    assert out["inside"] == out["inside_rename"] == out["inside_remove"] == "ok"
    assert out["dev_null"] == out["thread_name"] == out["read_outside"] == "ok"


HELPER_THREAD = """
go, done = threading.Event(), threading.Event()
def helper():
    go.wait()
    out["helper_outside"] = attempt(write, outside / "helper.txt")
    done.set()
threading.Thread(target=helper, daemon=True).start()
"""
"""A thread started before the sandbox that writes outside scratch once ``HELPER_GO`` runs."""
HELPER_GO = "go.set()\ndone.wait(30)\n"


@needs_landlock
@needs_broadcast
def test_filesystem_report_is_truthful_about_earlier_threads(tmp_path):
    out = _child(
        tmp_path,
        before=HELPER_THREAD,
        body=HELPER_GO + 'out["main_outside"] = attempt(write, outside / "main.txt")',
    )
    # ABI 8 (LANDLOCK_RESTRICT_SELF_TSYNC) restricts the helper thread with the caller; below it the
    # helper restricts itself from a signal handler (sandbox._restrict_others)
    assert out["main_outside"] == "EACCES"
    assert _state(out, "filesystem") == "active" and out["helper_outside"] == "EACCES", out
    if LANDLOCK_ABI < 8:
        assert "earlier thread(s) restricted themselves" in out["layers"]["filesystem"]
    assert not (tmp_path / "outside" / "helper.txt").exists()


@pytest.mark.skipif(LANDLOCK_ABI >= 8, reason="Landlock ABI 8 restricts every thread without the broadcast")
def test_without_the_broadcast_the_report_admits_the_earlier_threads_gap(tmp_path):
    """No C++ compiler to build the broadcast (an empty PATH, a fresh cache).

    The helper thread writes outside scratch, and the report must say ``partial`` with the reason.
    """
    env = {**os.environ, "PATH": str(tmp_path / "nothing"), "PTXGYM_CACHE_DIR": str(tmp_path / "cache")}
    out = _child(
        tmp_path,
        before=HELPER_THREAD,
        body=HELPER_GO,
        env=env,
    )
    assert _state(out, "filesystem") == "partial"
    assert "the thread broadcast library is unavailable: no C++ compiler" in out["layers"]["filesystem"]
    assert out["helper_outside"] == "ok" and (tmp_path / "outside" / "helper.txt").exists()


@pytest.mark.skipif(LANDLOCK_ABI < 6, reason=f"signal scoping needs Landlock ABI 6, here {LANDLOCK_ABI}")
def test_cannot_signal_the_trusted_parent(tmp_path):
    out = _child(tmp_path, "out['kill_parent'] = attempt(os.kill, os.getppid(), 0)")
    assert out["kill_parent"] == "EPERM"


@needs_landlock
def test_reads_no_other_process_in_proc(tmp_path):
    """The trusted parent's environment, command line and maps stay unread.

    The worker's own entry, the system facts the driver reads, its libraries and scratch are read.
    """
    read = "lambda p: open(p, 'rb').read(64)"
    out = _child(
        tmp_path,
        f"""
        read = {read}
        parent = os.getppid()
        for name in ("environ", "cmdline", "maps"):
            out["parent_" + name] = attempt(read, f"/proc/{{parent}}/{{name}}")
        out["parent_via_self"] = attempt(read, f"/proc/self/../{{parent}}/environ")
        out["own_status"] = attempt(read, "/proc/self/status")
        out["own_thread"] = attempt(read, "/proc/thread-self/status")
        out["cpuinfo"] = attempt(read, "/proc/cpuinfo")
        out["python"] = attempt(read, sys.executable)
        out["listdir_usr"] = attempt(os.listdir, "/usr")
        (scratch / "mine.txt").write_text("x")
        out["scratch"] = attempt(read, scratch / "mine.txt")
        """,
    )
    assert out["parent_environ"] == out["parent_cmdline"] == out["parent_maps"] == "EACCES", out
    assert out["parent_via_self"] == "EACCES"
    assert out["own_status"] == out["own_thread"] == out["cpuinfo"] == out["python"] == "ok", out
    assert out["listdir_usr"] == out["scratch"] == "ok"
    assert "reads nothing of /proc but its own entry" in out["layers"]["filesystem"]


@needs_landlock
@pytest.mark.skipif(not os.access("/proc/sys/vm/drop_caches", os.W_OK), reason="cannot drop the caches here")
def test_own_proc_entry_stays_readable_after_the_caches_are_dropped(tmp_path):
    """A rule holds an inode, and procfs replaces an evicted entry's inode: the sandbox keeps them open.

    A reviewer's find: /proc/self went unreadable in 4 of 6 runs after the caches were dropped.
    """
    out = _child(
        tmp_path,
        """
        import time
        out["after_drop"] = []
        for dropper in droppers:
            dropper.stdin.write(b"go\\n")
            dropper.stdin.flush()
            dropper.wait()
            time.sleep(0.05)
            out["after_drop"].append(attempt(lambda: open("/proc/self/status", "rb").read(64)))
        """,
        before="""
        import subprocess
        drop = "import sys; sys.stdin.readline(); open('/proc/sys/vm/drop_caches', 'w').write('2')"
        droppers = [subprocess.Popen([sys.executable, "-c", drop], stdin=subprocess.PIPE) for _ in range(4)]
        """,
    )
    assert out["after_drop"] == ["ok"] * 4, out


@needs_landlock
def test_procfs_mounted_elsewhere_makes_the_filesystem_layer_partial(tmp_path):
    """Every process's /proc entry is readable through a second procfs mount (a reviewer mounted one)."""
    where = tmp_path / "proc2"
    where.mkdir()
    if subprocess.run(["mount", "-t", "proc", "proc", str(where)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount procfs here")
    try:
        out = _child(tmp_path, "")
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
    assert _state(out, "filesystem") == "partial"
    assert f"procfs is also mounted at {where}" in out["layers"]["filesystem"]


# ------------------------------------------------------------------------------ limits, environment


def test_rlimits(tmp_path):
    out = _child(
        tmp_path,
        """
        import resource
        out["core"] = resource.getrlimit(resource.RLIMIT_CORE)
        out["fsize"] = resource.getrlimit(resource.RLIMIT_FSIZE)
        out["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)
        out["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)
        def too_big():
            with open("big.bin", "wb") as fh:
                fh.seek(sandbox.MAX_FILE_BYTES)
                fh.write(b"x")
        out["too_big"] = attempt(too_big)
        out["root"] = os.getuid() == 0
        """,
    )
    assert out["core"] == [0, 0]
    assert out["fsize"] == [sandbox.MAX_FILE_BYTES] * 2 and out["too_big"] == "EFBIG"
    assert out["nofile"][0] == out["nofile"][1] <= sandbox.MAX_OPEN_FILES
    if out["root"]:
        assert _state(out, "rlimits") == "partial" and "nproc not enforced" in out["layers"]["rlimits"]
    else:
        assert _state(out, "rlimits") == "active" and out["nproc"][0] == out["nproc"][1] > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="plays an unprivileged worker by dropping root to nobody")
def test_nproc_counts_the_users_tasks_before_the_sandbox_hides_them():
    """An unprivileged worker's task cap is its user's tasks plus headroom, counted before the sandbox.

    Counted after, with other processes' /proc entries hidden by Landlock, it read 0, and a busy user's
    worker could start no thread (a reviewer's find).
    """
    base = Path(tempfile.mkdtemp(prefix="ptxgym-nproc-"))
    try:
        base.chmod(0o777)
        (base / "scratch").mkdir(mode=0o777)
        (base / "scratch").chmod(0o777)
        out = _child(
            base,
            "",
            before="""
            import subprocess
            import ptxgym.confine.tasks, ptxgym.evaluation.runner.build, ptxgym.evaluation.runner.jail
            os.setgid(65534)
            os.setuid(65534)
            quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            sleepers = [subprocess.Popen(["sleep", "5"], **quiet) for _ in range(20)]
            """,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    detail = out["layers"]["rlimits"]
    assert int(detail.split("(")[1].split(" tasks")[0]) >= 20, detail


def test_environment_scrubbed_at_sandbox_time_is_reported_partial(tmp_path):
    env = {**os.environ, "HF_TOKEN": "hf_secret", "https_proxy": "http://proxy:3128", "KEEP_ME": "1"}
    env.pop("CUDA_CACHE_PATH", None)
    out = _child(tmp_path, "out['env'] = dict(os.environ); out['cwd'] = os.getcwd()", env=env)
    assert "HF_TOKEN" not in out["env"] and "https_proxy" not in out["env"] and out["env"]["KEEP_ME"] == "1"
    assert out["env"]["TMPDIR"] == out["cwd"] == str(tmp_path / "scratch")
    detail = out["layers"]["environment"]
    assert _state(out, "environment") == "partial"
    assert "HF_TOKEN" in detail and "/proc/self/environ" in detail and "CUDA_CACHE_PATH" in detail


def test_environment_from_worker_environ_is_clean(tmp_path):
    base = {**os.environ, "WANDB_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "s", "PATH": os.environ["PATH"]}
    env = sandbox.worker_environ(base, tmp_path / "scratch")
    assert "WANDB_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env and env["PATH"]
    out = _child(tmp_path, "out['initial'] = open('/proc/self/environ', 'rb').read().decode()", env=env)
    assert _state(out, "environment") == "active"
    assert "WANDB_API_KEY" not in out["initial"] and f"CUDA_CACHE_PATH={tmp_path}/scratch" in out["initial"]


# ------------------------------------------------------------------- a native candidate, no GPU needed


@pytest.fixture
def listener():
    """A TCP listener on the port the hostile candidate dials (None if the port is taken)."""
    import socket

    from ptxgym.audit.corpus import SANDBOX_ESCAPE_PORT

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", SANDBOX_ESCAPE_PORT))
        sock.listen(4)
        sock.setblocking(False)
    except OSError:
        sock.close()
        yield None
        return
    yield sock
    sock.close()


@pytest.mark.slow
@pytest.mark.nvcc
@needs_landlock
def test_native_candidate_host_code_is_contained(tmp_path, listener):
    """The hostile GPU test candidate's host code, loaded by TVM-FFI after the sandbox (the worker's order).

    Without a GPU its GEMM launch fails, but everything it tries first (a TCP connection, files in /tmp and
    $HOME, from its own thread too) must fail under the sandbox, and then it goes on to the launch.
    """
    pytest.importorskip("tvm_ffi")
    numpy = pytest.importorskip("numpy")  # noqa: F841 - the child builds its tensors with it
    from ptxgym.audit.corpus import build_kernel, sandbox_escape_markers
    from ptxgym.records.errors import ToolchainNotFoundError

    try:
        so = build_kernel("sandbox_escape")
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no CUDA toolchain to build the candidate: {exc}")
    home = tmp_path / "home"
    home.mkdir()
    markers = sandbox_escape_markers(home)
    for marker in markers:
        marker.unlink(missing_ok=True)
    out = _child(
        tmp_path,
        f"""
        import numpy as np, tvm_ffi
        run = tvm_ffi.load_module({str(so)!r})["run"]
        tensors = [tvm_ffi.from_dlpack(np.zeros((64, 64), np.uint16)) for _ in range(3)]
        try:
            run(*tensors)
            out["call"] = "returned"
        except Exception as exc:
            out["call"] = f"raised {{type(exc).__name__}}"
        """,
        env={**os.environ, "HOME": str(home)},
    )
    try:
        # it got past its attempts to the launch: that fails without a GPU and returns on a GPU machine
        assert out["call"] == "returned" or out["call"].startswith("raised"), out
        assert "sandbox_escape:" not in out["stderr"]  # what the candidate prints when an attempt worked
        assert [m for m in markers if m.exists()] == []
        if listener is not None:
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        for marker in markers:
            marker.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------- modes, report


def test_off_applies_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXGYM_SANDBOX", "off")
    assert settings.sandbox_mode() == "off"
    out = _child(
        tmp_path,
        """
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.close()
        out["outside"] = attempt(write, outside / "free.txt")
        """,
        mode=settings.sandbox_mode(),
    )
    assert set(out["layers"].values()) == {"off"} and list(out["layers"]) == list(sandbox.LAYERS)
    assert out["outside"] == "ok"


def test_mode_setting(monkeypatch):
    monkeypatch.delenv("PTXGYM_SANDBOX", raising=False)
    assert settings.sandbox_mode() == "on"
    monkeypatch.setenv("PTXGYM_SANDBOX", "Strict")
    assert settings.sandbox_mode() == "strict"
    monkeypatch.setenv("PTXGYM_SANDBOX", "maybe")
    with pytest.raises(ValueError, match="on, strict or off"):
        settings.sandbox_mode()


_NO_LANDLOCK = "sandbox.landlock_abi = lambda: (0, 'simulated: no Landlock')"


def test_unavailable_layer_fails_soft_in_on_mode(tmp_path):
    out = _child(tmp_path, "out['tcp'] = attempt(socket.socket)", before=_NO_LANDLOCK)
    assert out["layers"]["filesystem"] == "unavailable: simulated: no Landlock"
    assert _state(out, "network") == "active" and out["tcp"] == "EACCES"


def test_unavailable_layer_is_an_error_in_strict_mode(tmp_path):
    out = _child(
        tmp_path,
        "",
        mode="off",
        before=f"""
        {_NO_LANDLOCK}
        try:
            sandbox.apply("strict", scratch)
            out["error"] = ""
        except sandbox.SandboxError as exc:
            out["error"] = str(exc)
        """,
    )
    assert "strict sandbox mode" in out["error"] and "filesystem (simulated: no Landlock)" in out["error"]


def test_missing_scratch_is_refused(tmp_path):
    with pytest.raises(sandbox.SandboxError, match="does not exist"):
        sandbox.apply("on", tmp_path / "nope")  # refused before anything is applied to this process
    with pytest.raises(ValueError, match="sandbox mode"):
        sandbox.check_mode("loose")


def test_report_crosses_the_protocol_and_lands_in_feedback():
    report = SandboxReport(
        mode="on",
        layers=[
            SandboxLayer(name="network", state="active", detail="socket() refused"),
            SandboxLayer(name="filesystem", state="unavailable", detail="no Landlock"),
            SandboxLayer(name="rlimits", state="off"),
        ],
    )
    reply = Reply.model_validate_json(Reply(seq=3, ok=True, sandbox=report).model_dump_json())
    summary = reply.sandbox.summary()
    assert summary == {
        "network": "active: socket() refused",
        "filesystem": "unavailable: no Landlock",
        "rlimits": "off",
    }
    fb = Feedback(
        task_id="t", status=Status.PASSED, stage=Stage.DONE, environment=EnvironmentInfo(sandbox=summary)
    )
    assert Feedback.from_json(fb.to_json()).environment.sandbox == summary
    old = Feedback.from_json({"task_id": "t", "status": "PASSED", "stage": "done"})  # before the field
    assert old.environment.sandbox is None


# ------------------------------------------------------------------------------ worker and pool


def test_worker_refuses_a_candidate_before_the_sandbox():
    from ptxgym.evaluation.sandboxed.worker import Worker

    worker = Worker.__new__(Worker)  # no torch, no GPU: only the command's guard runs
    worker.sandbox = None
    reply = worker._op_load(4, Load(kind="so", path="candidate.so", entry="run"))
    assert not reply.ok and "before the 'sandbox' command" in reply.error


def test_worker_sandbox_command_replies_with_the_report_once(tmp_path):
    out = _child(
        tmp_path,
        """
        from ptxgym.evaluation.protocol import ApplySandbox
        from ptxgym.evaluation.sandboxed.worker import Worker
        worker = Worker.__new__(Worker)  # the command handlers only; no torch, no GPU
        worker.sandbox = None
        first = worker._op_sandbox(7, ApplySandbox(mode="on", scratch=str(scratch)))
        out["first"] = json.loads(first.model_dump_json())
        out["second"] = worker._op_sandbox(8, ApplySandbox(mode="on", scratch=str(scratch))).error
        out["tcp"] = attempt(socket.socket)
        """,
        mode="off",
    )
    first = Reply.model_validate(out["first"])
    assert first.ok and first.seq == 7 and first.sandbox.mode == "on"
    assert [x.name for x in first.sandbox.layers] == list(sandbox.LAYERS)
    assert first.sandbox.summary()["network"].startswith("active") and out["tcp"] == "EACCES"
    assert "already applied" in out["second"]


def test_pool_spawns_sandboxed_workers_clean_and_in_their_scratch(fake_worker_argv, tmp_path, monkeypatch):
    from ptxgym.evaluation.trusted.pool import WorkerHandle

    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    handle = WorkerHandle(fake_worker_argv("echo"), None, tmp_path, sandboxed=True)
    try:
        assert handle.receive(30.0).hello is not None
        environ = Path(f"/proc/{handle.pid}/environ").read_bytes().decode().split("\0")
        assert not any(v.startswith("GITHUB_TOKEN=") for v in environ)
        assert f"CUDA_CACHE_PATH={handle.scratch}/cuda-cache" in environ
        assert Path(f"/proc/{handle.pid}/cwd").resolve() == handle.scratch.resolve()
        assert handle.scratch.parent == tmp_path
    finally:
        handle.kill()
    assert not handle.scratch.exists()


def test_session_requires_a_report(fake_worker_argv, tmp_path):
    pytest.importorskip("torch")
    from ptxgym.evaluation.trusted.pool import WorkerHandle
    from ptxgym.evaluation.trusted.session import CandidateFault, Session

    handle = WorkerHandle(fake_worker_argv("echo"), None, tmp_path)
    try:
        handle.drain(30.0)
        session = Session(handle, SimpleNamespace(device="cpu"), None, "events", seed=1, timeout_s=10.0)
        with pytest.raises(CandidateFault, match="without a report"):
            session.sandbox("on")  # the fake worker acknowledges without applying anything
    finally:
        handle.kill()
