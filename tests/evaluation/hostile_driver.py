"""A hostile candidate in place of the proof driver (CPU tests; run by the fake tools in fake_tools/).

Takes the real driver's arguments, applies the host sandbox like the real driver (``--scratch``), then
does what issue 11 items 2 and 3 describe: prints Nsight Compute-shaped CSV rows claiming the expert's
HGMMA counts (profile mode) or a sanitizer-shaped error carrying every secret-looking variable it can
see and exits with memcheck's error code (memcheck mode), and tries to write forged reports into the
report directory next to its scratch. It records in ``<scratch>/attempts.txt`` which writes succeeded
and in ``<scratch>/env.txt`` the names of the variables it started with (``/proc/self/environ``: the
sandbox's own scrub of ``os.environ`` comes too late for those). ``$FAKE_DRIVER_MODE`` honest: just
exits 0 after the sandbox; hang: sleeps. Like the real driver it stops at its GPU gate (``tools.Gate``)
before the sandbox, after ``$FAKE_DRIVER_BOOT_S`` seconds of start-up (default 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ptxgym.evaluation.protocol import is_secret_name
from ptxgym.evaluation.sandboxed import driver, sandbox

FORGED_CSV = Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "expert_gemm_derived.csv"


def _forge(report_dir: Path, names: list[str], text: str) -> list[str]:
    results = []
    for name in names:
        try:
            (report_dir / name).write_text(text)
            results.append(f"{name}: written")
        except OSError as exc:
            results.append(f"{name}: denied ({exc.errno})")
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--inputs", "--so", "--baseline", "--options", "--entry", "--device", "--mode", "--scratch"):
        parser.add_argument(flag)
    parser.add_argument("--sandbox", default="on")
    parser.add_argument("--gate")
    parser.add_argument("--gate-key")
    parser.add_argument("--exit-now", action="store_true")
    args = parser.parse_args()
    time.sleep(float(os.environ.get("FAKE_DRIVER_BOOT_S", "0")))
    if not driver.wait_at_gate(args.gate, args.gate_key):
        return 4
    scratch = Path(args.scratch)
    sandbox.apply(args.sandbox, scratch, shm=True)  # as the real driver (its profiler's channel)
    initial = dict(
        item.split("=", 1) for item in Path("/proc/self/environ").read_text().split("\0") if "=" in item
    )
    (scratch / "env.txt").write_text("\n".join(sorted(initial)))
    behaviour = os.environ.get("FAKE_DRIVER_MODE", "hostile")
    if behaviour == "hang":
        time.sleep(600)
    if behaviour == "honest":
        print(f"driver: {args.mode} done (fake)", file=sys.stderr)
        return 0
    report_dir = scratch.parent / "report"
    if args.mode == "profile":
        forged = FORGED_CSV.read_text()
        print(forged)
        attempts = _forge(report_dir, ["profile.ncu-rep", "source.csv"], forged)
        (scratch / "attempts.txt").write_text("\n".join(attempts))
        print("driver: profile done (fake)", file=sys.stderr)
        return 0
    secrets = " ".join(f"{k}={v}" for k, v in initial.items() if is_secret_name(k))
    forged = f"========= Invalid __global__ read of size 2 bytes {secrets}\n"
    forged += "========= ERROR SUMMARY: 1 error\n"
    print(forged)
    attempts = _forge(report_dir, ["memcheck.txt"], forged)
    (scratch / "attempts.txt").write_text("\n".join(attempts))
    return 86


if __name__ == "__main__":
    sys.exit(main())
