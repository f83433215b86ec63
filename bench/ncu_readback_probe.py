"""Where Nsight Compute's cross-check spends its GPU phase, and whether its report reads back without it.

    python bench/ncu_readback_probe.py --out bench/results/ncu_readback.txt [--subjects mha_fwd_expert ...]

For each expert (built through the real ``Pipeline``'s CPU half; inputs from the evaluator's own arena),
Nsight Compute profiles the candidate's call the way the cross-check does (``ncu.profile_argv`` over the
sandboxed driver), ungated and with nothing else on the GPU, the driver printing its phases
(``--phases``: CLOCK_MONOTONIC, the same clock as this script's), and the report is read back three ways:

* ``file``: ``ncu --import <report dir>/profile.ncu-rep ... --log-file <report dir>/source.csv``, today's;
* ``memfd``: the report's bytes in a sealed memfd, imported as ``/proc/self/fd/N``, the CSV written to a
  second memfd (``--log-file /proc/self/fd/M``): no file a candidate could reach, so the read-back need
  not hold the GPU;
* ``memfd_stdout``: the same report, the CSV taken from the import's stdout;

then once more as one profile that prints the CSV itself (``--page source --csv --log-file``, no export).
Each read-back's kernels are compared with the file's (names and per-instruction counts). Repeated
``--repeats`` times; the medians are printed. Every figure printed is also written to ``--out``.

``--file-only``: the file read-back alone. ``--exit-now-too``: each repeat also profiles with the driver's
``--exit-now`` (``os._exit`` after its calls, ``driver.EXIT_NOW_MODES``), its parts prefixed ``exit_now_``,
its kernels compared with the ordinary run's (whether the report is whole without the teardown).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from gpu_cost import Printer, phase_steps
from provenance import commit

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "knowledge_packs" / "sm90a" / "solutions"
SUBJECTS = {"mha_fwd_expert": ("MhaFwd-sm90a", "MhaFwd"), "gemm_expert": ("Gemm-sm90a", "Gemm")}


def signature(kernels) -> list:
    return [(k.name, tuple(k.rows)) for k in kernels or []]


def one(
    ncu_path: str, driver: list[str], dirs, say, label: str, reads: bool = True
) -> tuple[dict[str, float], list | None]:
    """One profile and its read-backs (``reads``: all three, else the file's); seconds by part, kernels."""
    import subprocess

    from ptxgym.evaluation.trusted import ncu
    from ptxgym.evaluation.trusted.tools import read_fd, read_report, run_tool, sealed_file, tool_environ

    env = tool_environ(dirs.scratch)
    report = dirs.report / f"{ncu.REPORT}.ncu-rep"
    for stale in (report, dirs.report / ncu.SOURCE_CSV):
        stale.unlink(missing_ok=True)
    dirs.renew_scratch()
    t0 = time.monotonic()
    run = run_tool(ncu.profile_argv(ncu_path, dirs.report / ncu.REPORT, driver), 300, env, dirs.scratch)
    t_exit = time.monotonic()
    got: dict[str, float] = {"profile": t_exit - t0}
    steps, last = phase_steps(run.output, t0)
    got.update(steps)
    got["after_driver"] = t_exit - last
    if run.returncode != 0 or not report.is_file():
        say(f"{label}: the profile failed (exit {run.returncode}): {run.output[-1500:]}")
        return got, None
    data = report.read_bytes()
    got["report_mb"] = len(data) / 1e6
    t1 = time.monotonic()
    data = report.read_bytes()
    got["read_bytes"] = time.monotonic() - t1

    t1 = time.monotonic()
    back = run_tool(ncu.import_argv(ncu_path, report, dirs.report / ncu.SOURCE_CSV), 300, env, dirs.report)
    got["import_file"] = time.monotonic() - t1
    reference = ncu.parse_ncu_csv(read_report(dirs.report / ncu.SOURCE_CSV) or "")
    say(f"{label}: file import exit {back.returncode}, {len(reference)} kernel(s), report {len(data)} bytes")
    if not reads:
        return got, signature(reference)

    rep = sealed_file(data)
    out_fd = os.memfd_create("probe-csv")
    try:
        t1 = time.monotonic()
        argv = ncu.import_argv(ncu_path, Path(f"/proc/self/fd/{rep}"), Path(f"/proc/self/fd/{out_fd}"))
        proc = subprocess.run(
            argv, pass_fds=(rep, out_fd), env=env, cwd=dirs.report, capture_output=True, timeout=300
        )
        got["import_memfd"] = time.monotonic() - t1
        kernels = ncu.parse_ncu_csv(read_fd(out_fd) or "")
        same = signature(kernels) == signature(reference)
        say(
            f"{label}: memfd import exit {proc.returncode}, {len(kernels)} kernel(s), same as file: {same}; "
            f"its output: {proc.stdout.decode(errors='replace')[-600:]!r} "
            f"{proc.stderr.decode(errors='replace')[-600:]!r}"
        )
        try:  # a write into the sealed report must fail
            os.write(rep, b"x")
            say(f"{label}: the sealed report took a write (unexpected)")
        except OSError as exc:
            say(f"{label}: a write into the sealed report fails: {exc.strerror}")
        t1 = time.monotonic()
        argv = [a for a in ncu.import_argv(ncu_path, Path(f"/proc/self/fd/{rep}"), Path("x")) if a]
        argv = argv[: argv.index("--log-file")]
        proc = subprocess.run(
            argv, pass_fds=(rep,), env=env, cwd=dirs.report, capture_output=True, timeout=300
        )
        got["import_memfd_stdout"] = time.monotonic() - t1
        kernels = ncu.parse_ncu_csv(proc.stdout.decode(errors="replace"))
        same = signature(kernels) == signature(reference)
        say(
            f"{label}: memfd import to stdout exit {proc.returncode}, {len(kernels)} kernel(s), "
            f"same: {same}, "
            f"{len(proc.stdout)} bytes; stderr {proc.stderr.decode(errors='replace')[-300:]!r}"
        )
    finally:
        os.close(rep)
        os.close(out_fd)

    direct = dirs.report / "direct.csv"
    direct.unlink(missing_ok=True)
    dirs.renew_scratch()
    argv = ncu.profile_argv(ncu_path, dirs.report / ncu.REPORT, driver)
    at = argv.index("--export")
    argv = [*argv[:at], *argv[at + 3 :]]  # drops --export STEM --force-overwrite
    split = argv.index(driver[0])
    argv = [*argv[:split], *ncu.SOURCE_PAGE, "--log-file", str(direct), *argv[split:]]
    t1 = time.monotonic()
    run = run_tool(argv, 300, env, dirs.scratch)
    got["profile_direct_csv"] = time.monotonic() - t1
    kernels = ncu.parse_ncu_csv(read_report(direct) or "")
    same = signature(kernels) == signature(reference)
    say(f"{label}: direct CSV profile exit {run.returncode}, {len(kernels)} kernel(s), same: {same}")
    return got, signature(reference)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ncu_readback_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--subjects", nargs="*", default=list(SUBJECTS), choices=list(SUBJECTS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--file-only", action="store_true", help="read the report back from its file only")
    parser.add_argument(
        "--exit-now-too", action="store_true", help="also profile with the driver's --exit-now"
    )
    args = parser.parse_args(argv)
    say = Printer(args.out)

    import subprocess

    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
    from ptxgym.evaluation.trusted.tools import ProofDirs, driver_argv, find_tool
    from ptxgym.pipeline import Pipeline, Submission
    from ptxgym.records.tasks import get_task

    ev = LocalGpuEvaluator(spares=0)
    f = ev.facts
    tool = find_tool("ncu")
    if tool is None:
        say("# no ncu here")
        return 2
    t1 = time.monotonic()
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    front = time.monotonic() - t1
    say(
        f"# ncu read-back probe {time.strftime('%Y-%m-%dT%H:%M:%S')} commit {commit()} gpu {f.name} "
        f"driver {f.driver}; {version[-1] if version else '?'}; ncu --version took {front:.2f} s"
    )
    for subject in args.subjects:
        task_id, name = SUBJECTS[subject]
        task = get_task(task_id)
        prepared = Pipeline(task).prepare(
            Submission(action=f"```cpp\n{(SOLUTIONS / f'{name}.cu').read_text()}\n```")
        )
        if prepared.candidate is None:
            say(f"{subject}: not built: {prepared.feedback.message[:400] if prepared.feedback else '?'}")
            continue
        arena, _, _ = ev._prepare(task)
        inputs = arena.inputs_file()
        rows = []
        for r in range(args.repeats):
            dirs = ProofDirs.create()
            try:
                cand = prepared.candidate
                ordinary, quick_exit = (
                    [
                        *driver_argv(
                            inputs,
                            cand.so_path,
                            cand.entry_symbol,
                            0,
                            "profile",
                            scratch=dirs.scratch,
                            exit_now=exit_now,
                        ),
                        "--phases",
                    ]
                    for exit_now in (False, True)
                )
                got, sig = one(tool, ordinary, dirs, say, f"{subject} #{r}", reads=not args.file_only)
                if args.exit_now_too:
                    quick, quick_sig = one(
                        tool, quick_exit, dirs, say, f"{subject} #{r} exit-now", reads=False
                    )
                    got.update({f"exit_now_{k}": v for k, v in quick.items()})
                    say(
                        f"{subject} #{r} exit-now: {len(quick_sig or [])} kernel(s), same kernels and "
                        f"counts as the ordinary exit's: {quick_sig is not None and quick_sig == sig}"
                    )
                rows.append(got)
            finally:
                dirs.remove()
        keys = dict.fromkeys(k for row in rows for k in row)
        say(
            f"{subject} medians over {len(rows)}: "
            + " ".join(f"{k}={statistics.median(row[k] for row in rows if k in row):.3f}" for k in keys)
        )
    ev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
