"""How much hidden per-call work the trusted wall clock catches (issue 11, requirement 1: timing).

    python bench/wall_allowance.py --out bench/results/wall_allowance.txt [--process python native]

The candidate's GPU times come from its own process (CUPTI spans or CUDA events there), so a candidate
whose host code forges them, or does work its GPU timer does not see, is bounded only by the trusted
side's wall clock: per call, wall time - claimed GPU time must stay within the calibrated harness
overhead plus an allowance (``timing.cross_check``: max(``wall_slack_ms``, ``wall_slack_fraction`` x
median latency, 4 standard errors of the two medians' difference; 5 x the calibration's IQR before the
twentieth session)). Under-reporting a call's GPU time by x ms looks to the trusted side exactly like x
ms of host work after the kernel finished, so this bench plays the expert GEMM with a host-side busy wait
of ``h`` microseconds after a stream synchronisation inside every call (the GPU timer does not see it)
for several ``h``, and prints for each subject: status, median latency, the calibrated overhead and its
IQR (the matched calibration's, a no-op as long as the baseline's call, where there is one; the trivial
no-op's overhead beside it), the measured excess per call (median wall - GPU - overhead), the allowance,
whether it was caught, and what the tight statistical allowance (``timing.tight_allowance``, the slack's
statistical term beside the floors) alone would allow and decide, and whether the subject was timed twice
(``Session.retime``: a first timing failed by its allowance; the figures are then the second timing's, at
``session.RETIME_SLACK`` of the slack); and under each play, where the walls of the calibration and of
the timed calls went (``session.wall_parts``: the trusted round trip and the copy that ends the wall, and
the native runner's own steps, ``protocol.CALL_PHASES``). The smallest caught ``h`` as a share of the
median latency is the forgery a candidate can no longer hide. The evaluator replaces a spare process only
after a subject's timed calls and waits for every warming spare before the next set-up
(``local.QUIET_SPARES``); ``--noisy-spares`` plays the old way (taking a worker starts the next one at
once, and its CUDA set-up shares the GPU with the calibration and the timing: the suspect for the
calibration's spread), and ``--spares 0`` plays with no spare at all. ``--process`` plays it with each
candidate process kind (``LocalGpuEvaluator(candidate_process=...)``: the Python worker or the native
runner). ``--busy-threads N`` runs N Python threads in the evaluator's process during the plays, each
running Python for ``--busy-burst-ms`` and then sleeping 1 ms (an env's build thread, a trainer's step):
with ``--set native_wall=false`` beside the default, it shows what the interpreter's lock adds to the
trusted walls (``trusted/exchange.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from provenance import commit

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "knowledge_packs" / "sm90a" / "solutions" / "Gemm.cu"
ENTRY = "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, gemm::run);"
HIDDEN_US = (None, 0, 10, 20, 40, 80, 160)
"""None: the expert as shipped; 0: with the wrapper's stream synchronisation but no busy wait."""


def variant(hidden_us: int | None) -> str:
    """The expert GEMM, its entry wrapped to synchronise and then spin ``hidden_us`` on the host."""
    source = GEMM.read_text()
    if hidden_us is None:
        return source
    assert ENTRY in source, "the expert's entry line changed: update this bench"
    wrapper = f"""
#include <chrono>
namespace hidden {{
void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {{
  gemm::run(A, B, C);
  cudaStreamSynchronize(static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, A.device().device_id)));
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds({hidden_us});
  while (std::chrono::steady_clock::now() < until) {{
  }}
}}
}}  // namespace hidden
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, hidden::run);
"""
    return source.replace(ENTRY, wrapper)


class Recorder:
    """The evaluator, keeping the last verdict (its ``details`` hold the calibration and cross-check)."""

    def __init__(self, ev) -> None:
        self.ev, self.verdict = ev, None

    def evaluate(self, task, candidate):
        self.verdict = self.ev.evaluate(task, candidate)
        return self.verdict

    def __getattr__(self, name):
        return getattr(self.ev, name)


def play(ev, hidden_us: int | None, say, label: str) -> dict:
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    task = get_task("Gemm-sm90a")
    ev.settle()
    seen = Recorder(ev)
    action = f"```cpp\n{variant(hidden_us)}\n```"
    fb = Pipeline(task, seen).run(action, turn=1, episode_id="wall", first_correct=False)
    details = seen.verdict.details if seen.verdict is not None else {}
    used = "calibration_matched" if details.get("calibration_used") == "matched" else "calibration"
    cal = details.get(used) or {}  # the calibration the cross-check used (Session.reference_calibration)
    trivial = details.get("calibration") or {}
    cc = details.get("crosscheck") or {}
    median = fb.timing.candidate.median_ms if fb.timing and fb.timing.candidate else None
    row = {
        "process": label,
        "hidden_us": hidden_us,
        "status": fb.status.value,
        "median_ms": median,
        "overhead_ms": cal.get("overhead_ms"),
        "overhead_iqr_ms": cal.get("overhead_iqr_ms"),
        "excess_ms": (cc["median_overhead_ms"] - cal["overhead_ms"]) if cc and cal else None,
        "allowed_ms": (cc["allowed_ms"] - cal["overhead_ms"]) if cc and cal else None,
        "caught": fb.status.value == "TIMING_ANOMALY",
        "trivial_overhead_ms": trivial.get("overhead_ms"),
        "tight_allowed_ms": (cc["tight_allowed_ms"] - cal["overhead_ms"])
        if cc and cal and cc.get("tight_allowed_ms") is not None
        else None,
        "matched_latency_ms": cal.get("latency_ms") if cal is not trivial else None,
        "retimed": bool(details.get("retimed")),
    }
    f = lambda v: "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))  # noqa: E731
    share = None if (hidden_us is None or not median) else hidden_us / 1e3 / median
    say(
        f"{label} | {'shipped' if hidden_us is None else hidden_us} | {row['status']} | {f(median)} | "
        f"{f(row['overhead_ms'])} | {f(row['overhead_iqr_ms'])} | {f(row['excess_ms'])} | "
        f"{f(row['allowed_ms'])} | {'-' if share is None else f'{share:.1%}'} | "
        f"{'yes' if row['caught'] else 'no'} | {f(row['trivial_overhead_ms'])} | "
        f"{f(row['matched_latency_ms'])} | {f(row['tight_allowed_ms'])} | "
        f"{_tight(row)} | {'yes' if row['retimed'] else 'no'}"
    )
    if fb.status.value not in ("PASSED", "TIMING_ANOMALY"):
        say(f"#   {fb.message[:300]}")
    say(f"#   {_parts(cal.get('parts_ms'), details.get('wall_parts'))}")
    return row


def _parts(calibration: dict | None, timed: dict | None) -> str:
    """Where the calibration's and the timed calls' walls went (``session.wall_parts``, medians in ms)."""

    def show(parts: dict | None) -> str:
        return ", ".join(f"{k} {v:.4f}" for k, v in (parts or {}).items()) or "-"

    return f"walls (ms, medians): calibration {show(calibration)}; timed {show(timed)}"


def _tight(row: dict) -> str:
    """Whether the tight (statistical) allowance would have caught this play (``timing.tight_allowance``)."""
    if row["excess_ms"] is None or row["tight_allowed_ms"] is None:
        return "-"
    return "yes" if row["excess_ms"] > row["tight_allowed_ms"] else "no"


def busy_threads(n: int, burst_ms: float) -> threading.Event:
    """Start ``n`` daemon threads that run Python for ``burst_ms`` then sleep 1 ms, until the event is set."""
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            until = time.perf_counter() + burst_ms / 1e3
            x = 0
            while time.perf_counter() < until:
                x += 1
            time.sleep(0.001)

    for i in range(n):
        threading.Thread(target=work, name=f"busy-{i}", daemon=True).start()
    return stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wall_allowance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--process", nargs="*", default=["python"])
    parser.add_argument("--hidden-us", nargs="*", type=int, default=None, help="busy-wait microseconds")
    parser.add_argument("--repeats", type=int, default=2, help="plays of the shipped expert per process")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an EvalSettings field (e.g. runner_spin_us=20000); printed in the header",
    )
    parser.add_argument(
        "--spares",
        type=int,
        default=2,
        help="warm spare processes of the evaluator (0: none warming while a candidate is timed)",
    )
    parser.add_argument(
        "--noisy-spares",
        action="store_true",
        help="replace a spare as soon as it is taken (the behaviour before local.QUIET_SPARES)",
    )
    parser.add_argument("--busy-threads", type=int, default=0, help="Python threads kept busy (docstring)")
    parser.add_argument("--busy-burst-ms", type=float, default=2.0, help="each busy thread's Python burst")
    args = parser.parse_args(argv)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")

    from ptxgym.evaluation.trusted.base import EvalSettings
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    overrides = dict(item.split("=", 1) for item in args.set)
    settings = EvalSettings.model_validate({**EvalSettings().model_dump(), **overrides})
    hidden = [None, *args.hidden_us] if args.hidden_us is not None else list(HIDDEN_US)
    say(
        f"# wall allowance {time.strftime('%Y-%m-%dT%H:%M:%S')} commit {commit()}; spares {args.spares}; "
        f"overrides {overrides or 'none'}"
        + ("; noisy spares (replaced at once)" if args.noisy_spares else "; quiet spares")
        + f"; {args.busy_threads} busy Python threads ({args.busy_burst_ms:g} ms bursts, 1 ms sleeps)"
        + f"; native_wall {settings.native_wall}"
    )
    say(
        "process | hidden us | status | median ms | overhead ms | overhead iqr ms | excess ms | allowed ms | "
        "hidden share | caught | trivial overhead ms | matched no-op ms | tight allowed ms | tight caught | "
        "timed twice"
    )
    rows = []
    stop = busy_threads(args.busy_threads, args.busy_burst_ms)
    for process in args.process:
        ev = LocalGpuEvaluator(settings=settings, spares=args.spares, candidate_process=process)
        ev.quiet_spares = not args.noisy_spares
        try:
            for h in hidden:
                for _ in range(args.repeats if h is None else 1):
                    rows.append(play(ev, h, say, process))
        finally:
            ev.close()
    stop.set()
    for process in dict.fromkeys(r["process"] for r in rows):
        mine = [r for r in rows if r["process"] == process]
        honest = [r["excess_ms"] for r in mine if r["hidden_us"] in (None, 0) and r["excess_ms"] is not None]
        caught = [r["hidden_us"] for r in mine if r["hidden_us"] and r["caught"]]
        medians = [r["median_ms"] for r in mine if r["median_ms"]]
        say(
            f"# {process}: honest excess ms {[round(x, 4) for x in honest]}; smallest hidden us caught "
            f"{min(caught) if caught else 'none'}"
            + (
                f" ({min(caught) / 1e3 / statistics.median(medians):.1%} of the median latency)"
                if caught and medians
                else ""
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
