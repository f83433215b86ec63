"""Why compute-sanitizer hangs on a faulting candidate in the sandboxed profiled process (a diagnostic).

On the H200 (2026-12-05, commit fa7f51a) memcheck of ``oob_read`` timed out after 71 s where it had
reported the error in 9 s before the eleventh session's thread broadcast; the clean control still
passed. This plays ``oob_read`` (and the clean ``naive``) through the local evaluator with memcheck on,
the profiled driver started through ``bench/profiled_variant.py`` with one sandbox layer changed per
row, and while a run is still going after ``--dump-after`` seconds it records every thread of the
profiled process: name, state, wait channel, current system call, blocked and caught signals.

    python bench/profiled_probe.py --out FILE [--variants shipped no_broadcast no_scope neither off]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ptxgym.confine import landlock  # noqa: E402

WRAPPER = ROOT / "bench" / "profiled_variant.py"


def _threads(pid: int) -> list[str]:
    rows = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):

        def read(name: str, task: Path = task) -> str:
            try:
                return (task / name).read_text().strip()
            except OSError as exc:
                return f"<{exc.strerror}>"

        status = dict(line.split(":\t", 1) for line in read("status").splitlines() if ":\t" in line)
        rows.append(
            f"  tid {task.name} {read('comm')!r} state={status.get('State', '?')} wchan={read('wchan')} "
            f"syscall={read('syscall').split(' ')[0]} blocked={status.get('SigBlk', '?')} "
            f"caught={status.get('SigCgt', '?')} "
            f"pending={status.get('ShdPnd', '?')}/{status.get('SigPnd', '?')}"
        )
    return rows


def _watch(stop: threading.Event, after_s: float, log: list[str]) -> None:
    """After ``after_s``, dump every thread of each process running the variant driver (once)."""
    if stop.wait(after_s):
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(WRAPPER.name.encode() in part for part in cmd) or b"compute-sanitizer" in cmd[0]:
            log.append(
                f"still running after {after_s:.0f} s: pid {entry.name} {b' '.join(cmd[:3]).decode()[:160]}"
            )
            try:
                log.extend(_threads(int(entry.name)))
            except OSError as exc:
                log.append(f"  <{exc}>")


def _landlock_log() -> list[str]:
    """Landlock's denial records in the kernel log since the last call, or why there are none.

    From kernel 6.15 Landlock's audit records reach the kernel log where no audit daemon reads them.
    """
    import subprocess

    try:
        out = subprocess.run(["dmesg", "-c"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"  kernel log: {exc}"]
    if out.returncode != 0:
        return [f"  kernel log unreadable: {out.stderr.strip()[:200]}"]
    hits = [line for line in out.stdout.splitlines() if "landlock" in line.lower()]
    return [f"  kernel log: {len(hits)} Landlock line(s)", *(f"    {h[:300]}" for h in hits[-15:])]


def _errata() -> str:
    """Landlock's errata bits (``LANDLOCK_CREATE_RULESET_ERRATA``), raw.

    One of them says that signals between threads of one process in different domains are allowed
    (Landlock's erratum 2; without it a thread-by-thread jail with the signal scope blocks them).
    """
    import ctypes

    from ptxgym.confine.libc import syscall

    ret = syscall(landlock.NR_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_ulong(1 << 1))
    return f"{ret:#x}" if ret >= 0 else f"unavailable ({os.strerror(-ret)})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--variants", nargs="+", default=["shipped", "no_broadcast", "no_scope", "neither", "off"]
    )
    parser.add_argument("--cases", nargs="+", default=["oob_read"])
    parser.add_argument("--timeout", type=float, default=45.0)
    parser.add_argument("--dump-after", type=float, default=25.0)
    args = parser.parse_args()

    from ptxgym.audit.corpus import candidate
    from ptxgym.evaluation.trusted import memcheck, proofs
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode, TargetMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
    from ptxgym.records.tasks import get_task

    original_argv, original_run = memcheck.driver_argv, proofs.run_memcheck
    current = {"variant": "shipped", "tail": "", "report": "<not read>"}

    def variant_argv(*a, **kw):
        argv = original_argv(*a, **kw)
        at = argv.index("-m")
        argv = [
            *argv[:at],
            str(WRAPPER),
            current["variant"] if current["variant"] != "off" else "shipped",
            *argv[at + 2 :],
        ]
        if current["variant"] == "off":
            argv[argv.index("--sandbox") + 1] = "off"
        return argv

    def keep_tail(*a, **kw):
        info, wall, tail = original_run(*a, **kw)
        current["tail"] = f"wall {wall:.1f} s\n{tail[-2500:]}"
        return info, wall, tail

    original_read = memcheck.read_report

    def keep_report(path):
        text = original_read(path)
        current["report"] = "<none>" if text is None else text[:1500]
        return text

    memcheck.driver_argv, proofs.run_memcheck, memcheck.read_report = variant_argv, keep_tail, keep_report
    settings = EvalSettings(
        warmup=2,
        iterations=5,
        trials=1,
        call_timeout_s=10.0,
        memcheck=MemcheckMode.ALWAYS,
        memcheck_timeout_s=args.timeout,
        target_mode=TargetMode.STATIC,
        guard_pages=False,
        ncu_crosscheck_fraction=0.0,
        seed=1234,
        verdict_cache_entries=0,  # every row runs (the artifact is the same)
    )
    task = get_task("Gemm-sm90a")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [
        f"# profiled probe {when} commit {os.environ.get('COMMIT', 'unknown')}; kernel "
        f"{os.uname().release}; Landlock ABI {landlock.abi()[0]}, errata {_errata()}"
    ]
    evaluator = LocalGpuEvaluator(settings=settings, spares=1)
    try:
        for case in args.cases:
            for variant in args.variants:
                current.update(variant=variant, tail="", report="<not read>")
                log: list[str] = []
                stop = threading.Event()
                watcher = threading.Thread(target=_watch, args=(stop, args.dump_after, log), daemon=True)
                watcher.start()
                start = time.monotonic()
                verdict = evaluator.evaluate(task, candidate(case, task))
                stop.set()
                watcher.join()
                denials = _landlock_log()
                row = (
                    f"{case} | {variant} | {verdict.status.value} | {time.monotonic() - start:.1f} s | "
                    f"{verdict.message[:240]!r}"
                )
                print(row, flush=True)
                lines += [
                    row,
                    *log,
                    *denials,
                    "  the tool's report file as read after the run:",
                    *("    " + t for t in current.get("report", "<not read>").splitlines()[:20]),
                    "  tool output tail:",
                    *("    " + t for t in current["tail"].splitlines()[-25:]),
                ]
    finally:
        evaluator.close()
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
