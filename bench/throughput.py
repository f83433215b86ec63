"""Throughput of the env at 1, 4, 16 envs: a fixed mix of distinct candidates through ``step_many``.

    python bench/throughput.py --evaluator none                 # CPU: builds only (NOT_EVALUATED)
    python bench/throughput.py --evaluator local --memcheck never --candidates 8 --sizes 1,4,8   # GPU
    python bench/throughput.py --evaluator local --sizes 1,4,16,64 --candidates 16 --candidates-per-env 1

The mix (issue 12): compile errors, wrong answers (NaN, unwritten, half-written outputs), correct slow
kernels (the naive SIMT GEMM of the audit corpus) and correct fast kernels (the shipped expert GEMM), in
equal shares, on ``Gemm-sm90a`` (8192 x 7168 x 5120). Every candidate is a generated variant: a device
global with a value unique to this run and pass is appended to ``kernel.cu``, so the source, the build
and the artifact all differ and no cache (build, verdict) hits. Each pass makes N envs sharing one
evaluator and steps them N at a time with ``ptxgym.envs.vector.step_many`` (each candidate a fresh
episode): builds overlap on the build pool, and each candidate reaches the evaluator as soon as it is
built (``run_batch``), so the GPU works while the rest of the batch still builds. With ``--schedule
stream`` each env instead steps its next candidate as soon as its last one returned (one thread per env,
as ``ptxgym eval --concurrency N`` runs trajectories), so one env's build overlaps another's GPU turn
in steady state rather than only within a batch (several candidates per env: ``--candidates-per-env``).

Printed per pass (besides the lines below): the timed candidates' wall cross-checks (median and worst
excess of a call's wall over its GPU time beyond the calibrated overhead, beside the allowance, and how
many were anomalies: the mix hides no work, so whether the load moves an honest candidate's excess) and
how late a thread of this process wakes from a 1 ms sleep (``WakeProbe``: the wait for the interpreter's
lock that the timing thread also meets, with builds on threads beside it: ``ptxgym/cpu/scan_helpers.py``).
Printed per pass: candidates/min, verified-correct/min, the statuses, and where the time goes, summed
over candidates: build (extract + screen + nvcc + SASS), check, time, proofs (memcheck + ncu; in brackets
the part that held the GPU: their tools start up and read back outside the GPU turn), GPU total
(the evaluator's wall per candidate), queue (the evaluator's own ``queue`` stage: time a candidate waited
for the GPU behind others) and the GPU busy fraction (GPU total / wall). ``--pool-compare``
also times cold builds sequentially, on a thread pool and on a process pool of the host's cores.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from provenance import commit as provenance_commit

ROOT = Path(__file__).resolve().parents[1]
TASK = "Gemm-sm90a"
KINDS = ("compile_error", "wrong", "slow", "fast")
WRONG = ("nan_output", "noop", "half_written")
BUILD_STAGES = ("extract", "screen", "build", "sass")
PROOF_STAGES = ("memcheck", "execute")
WORKER_PARTS = ("take", "attach", "sandbox", "settle", "calibrate")
"""The worker stage's parts (``LocalGpuEvaluator._session``: ``worker_<part>``), summed in each pass."""


def _read(path: Path) -> str:
    return path.read_text()


def fenced_files(files: dict[str, str]) -> str:
    """A model-style response with one named fenced block per file (``cpu/extract.py``)."""
    return "\n".join(f"```cuda {name}\n{text}\n```" for name, text in files.items())


def candidate(kind: str, index: int, tag: str) -> str:
    """The response text of candidate ``index`` of a kind; ``tag`` makes its artifact unique."""
    corpus = ROOT / "ptxgym" / "audit" / "kernels"
    mark = f"\n__device__ int ptxgym_bench_variant_{tag}_{index} = {index};\n"
    common = {"gemm_common.cuh": _read(corpus / "gemm_common.cuh")}
    if kind == "fast":
        return fenced_files({"kernel.cu": _read(ROOT / "knowledge_packs/sm90a/solutions/Gemm.cu") + mark})
    if kind == "slow":
        return fenced_files({"kernel.cu": _read(corpus / "naive.cu") + mark, **common})
    if kind == "wrong":
        name = WRONG[index % len(WRONG)]
        return fenced_files({"kernel.cu": _read(corpus / f"{name}.cu") + mark, **common})
    broken = _read(corpus / "naive.cu") + mark + f'static_assert({index} < 0, "bench compile error");\n'
    return fenced_files({"kernel.cu": broken, **common})


def mix(n: int, tag: str) -> list[tuple[str, str]]:
    """``n`` candidates, the kinds in equal shares and interleaved: ``(kind, response text)``."""
    return [(KINDS[i % len(KINDS)], candidate(KINDS[i % len(KINDS)], i, tag)) for i in range(n)]


def walls(fb, names: tuple[str, ...]) -> float:
    return sum(fb.stage_wall_s.get(n, 0.0) for n in names)


def _waves(envs: list, items: list[tuple[str, str]]) -> list:
    """Batches of ``len(envs)`` candidates through ``step_many``, each batch waiting for the last."""
    from ptxgym.envs.vector import step_many

    feedbacks = []
    for lo in range(0, len(items), len(envs)):
        chunk = items[lo : lo + len(envs)]
        batch_envs = envs[: len(chunk)]
        for e in batch_envs:
            e.reset()
        results = step_many(batch_envs, [text for _, text in chunk])
        feedbacks += [info["feedback"] for *_, info in results]
    return feedbacks


def _stream(envs: list, items: list[tuple[str, str]]) -> list:
    """Each env steps the next candidate as soon as its last one returned.

    A thread per env, as ``ptxgym eval --concurrency N`` runs its trajectories: builds and GPU turns
    overlap across envs.
    """
    feedbacks: list = [None] * len(items)
    order = iter(range(len(items)))
    lock = threading.Lock()

    def drive(env) -> None:
        while True:
            with lock:
                i = next(order, None)
            if i is None:
                return
            env.reset()
            *_, info = env.step(items[i][1])
            feedbacks[i] = info["feedback"]

    with ThreadPoolExecutor(len(envs), thread_name_prefix="env") as pool:
        list(pool.map(drive, envs))
    return feedbacks


def recorder(ev):
    """``ev`` behind a ``Verdicts`` (an ``Evaluator``: the env takes only those), named as ``ev``.

    Not for an evaluator whose steps run elsewhere (``remote_builds``: the Ray backend's steps are Ray
    tasks, which would have to pickle the wrapper and its lock): that one is returned as it is, and its
    pass shows no cross-check figures.
    """
    from ptxgym.evaluation.trusted.base import Evaluator

    if getattr(ev, "remote_builds", False):
        return ev

    class Verdicts(Evaluator):
        """The evaluator, keeping every verdict it gives (their ``details`` hold the wall cross-checks)."""

        name = ev.name

        def __init__(self) -> None:
            self.ev, self.verdicts, self._lock = ev, [], threading.Lock()

        def evaluate(self, task, candidate):
            verdict = self.ev.evaluate(task, candidate)
            with self._lock:
                self.verdicts.append(verdict)
            return verdict

        def evaluate_many(self, task_candidates):
            verdicts = self.ev.evaluate_many(task_candidates)
            with self._lock:
                self.verdicts.extend(verdicts)
            return verdicts

        def close(self) -> None:
            pass  # the pass's caller closes the evaluator

        def __getattr__(self, name):
            return getattr(self.ev, name)

    return Verdicts()


def excess(verdicts: list) -> dict:
    """The timed candidates' wall cross-checks: excess over the calibrated overhead, the allowance, parts.

    Per verdict with a cross-check (every status: the mix hides no work, so an anomaly here is an honest
    candidate the load pushed out), answered now (not from the verdict cache): median (wall - GPU time)
    minus the overhead of the calibration the cross-check used (``calibration_used``), ms, and the
    allowance beyond that overhead (a second timing's is ``session.RETIME_SLACK`` of a first's); their
    median and worst over the pass, and how many were anomalies; and where the walls went (``parts``:
    each step of ``session.wall_parts``, for the paid timed calls and the calibration the cross-check
    used, the median over candidates): under load, which step grows. ``each``: per candidate, its median
    latency, its excess, the statistical allowance beyond the overhead (``timing.tight_allowance``) and
    the one applied (``timing.cross_check``), sorted by latency: whether the excess follows the call's
    length, and how far each rule is. ``wall_paths``: which path read the walls (``details["wall_path"]``).
    ``why``: each anomaly's message and, where it was timed twice, why (``details["retimed"]``): which
    rule flagged an honest candidate.
    """
    got, each, why = [], [], []
    parts: dict[str, list[float]] = {}
    paths: collections.Counter[str] = collections.Counter()
    for v in verdicts:
        details = v.details or {}
        cc = details.get("crosscheck") or {}
        used = "calibration_matched" if details.get("calibration_used") == "matched" else "calibration"
        cal = details.get(used) or {}
        if cc and cal and not v.cache_hit:
            over = cc["median_overhead_ms"] - cal["overhead_ms"]
            bad = v.status.value == "TIMING_ANOMALY"
            got.append((over, cc["allowed_ms"] - cal["overhead_ms"], bad))
            if bad:
                retimed = details.get("retimed")
                why.append(v.message + (f" [timed twice: {retimed}]" if retimed else ""))
            median = v.timing.candidate.median_ms if v.timing and v.timing.candidate else float("nan")
            tight = cc.get("tight_allowed_ms")
            tight_over = tight - cal["overhead_ms"] if tight is not None else float("nan")
            each.append((median, over, tight_over, cc["allowed_ms"] - cal["overhead_ms"]))
            paths[str(details.get("wall_path") or "-").split(":")[0]] += 1
            for where, values in (("timed", details.get("wall_parts")), ("calibration", cal.get("parts_ms"))):
                for key, ms in (values or {}).items():
                    parts.setdefault(f"{where} {key}", []).append(ms)
    if not got:
        return {}
    return {
        "n": len(got),
        "median": statistics.median(e for e, _, _ in got),
        "max": max(e for e, _, _ in got),
        "allowed": statistics.median(a for _, a, _ in got),
        "anomalies": sum(bad for *_, bad in got),
        "parts": {k: statistics.median(v) for k, v in sorted(parts.items())},
        "each": sorted(each),
        "wall_paths": dict(paths),
        "why": why,
    }


class WakeProbe:
    """A thread that sleeps 1 ms at a time and records how late it wakes (ms): the interpreter's lock.

    A thread of this process back from a blocking call (the timing thread after a worker's reply) waits
    for the interpreter's lock while another thread runs Python; the probe's lateness samples that wait
    all through a pass, on top of the host's scheduling and timer slack (tens of microseconds: compare
    a pass with few envs). At most ``LIMIT`` samples are kept.
    """

    LIMIT = 2_000_000

    def __init__(self) -> None:
        self.late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="wake-probe")

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.001)
            if len(self.late) < self.LIMIT:
                self.late.append((time.perf_counter() - t) * 1e3 - 1.0)

    def __enter__(self) -> WakeProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def quantiles(self) -> dict:
        q = sorted(self.late)
        if not q:
            return {}
        return {
            k: q[min(len(q) - 1, int(f * len(q)))] for k, f in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
        }


def run_pass(evaluator, size: int, n: int, tag: str, schedule: str = "waves") -> dict:
    """``n`` candidates through ``size`` envs (``schedule``: ``_waves`` or ``_stream``); its figures."""
    import gymnasium

    from ptxgym.evaluation.protocol import ATTACH_PHASES as steps

    seen = recorder(evaluator)
    envs = [
        gymnasium.make(f"ptxgym/{TASK}-v0", evaluator=seen, max_turns=1, variant=None) for _ in range(size)
    ]
    items = mix(n, tag)
    start = time.perf_counter()
    with WakeProbe() as probe:
        feedbacks = (_stream if schedule == "stream" else _waves)(envs, items)
    wall = time.perf_counter() - start
    queue = sum(walls(fb, ("queue",)) for fb in feedbacks)
    for e in envs:
        e.close()
    correct = sum(fb.correct for fb in feedbacks)
    gpu = sum(fb.stage_wall_s.get("gpu_total", 0.0) for fb in feedbacks)
    by_kind = Counter(f"{kind}:{fb.status.value}" for (kind, _), fb in zip(items, feedbacks, strict=True))
    return {
        "schedule": schedule,
        "envs": size,
        "candidates": n,
        "wall_s": wall,
        "per_min": 60 * n / wall,
        "correct_per_min": 60 * correct / wall,
        "correct": correct,
        "build_s": sum(walls(fb, BUILD_STAGES) for fb in feedbacks),
        "check_s": sum(walls(fb, ("check",)) for fb in feedbacks),
        "worker_s": sum(walls(fb, ("worker",)) for fb in feedbacks),
        "discard_s": sum(walls(fb, ("discard",)) for fb in feedbacks),  # the runner killed and reaped
        "worker_parts": {p: sum(walls(fb, (f"worker_{p}",)) for fb in feedbacks) for p in WORKER_PARTS},
        # the spares' wait before the first timed call instead (``late_spare_settle``)
        "settle_late_s": sum(walls(fb, ("settle_late",)) for fb in feedbacks),
        # a runner's attach steps (``spare_attach_<step>``: a spare's warm-up, mostly before the turn)
        "attach_steps": {p: sum(walls(fb, (f"spare_attach_{p}",)) for fb in feedbacks) for p in steps},
        "prepare_s": sum(walls(fb, ("prepare",)) for fb in feedbacks),
        "time_s": sum(walls(fb, ("time",)) for fb in feedbacks),
        "proofs_s": sum(walls(fb, PROOF_STAGES) for fb in feedbacks),
        "proofs_gpu_s": sum(walls(fb, ("proof_gpu",)) for fb in feedbacks),
        "gpu_s": gpu,
        "queue_s": queue,
        "gpu_busy": gpu / wall,
        "shortened": sum(bool(fb.timing and fb.timing.shortened) for fb in feedbacks),
        "retimed": sum("timed again after a wall cross-check" in fb.message for fb in feedbacks),
        "statuses": dict(sorted(by_kind.items())),
        "excess": excess(getattr(seen, "verdicts", [])),  # none kept for a remote backend (recorder)
        "trial_ends": trial_ends(getattr(seen, "verdicts", [])),
        "wake": probe.quantiles(),
    }


def trial_ends(verdicts: list) -> dict[str, int]:
    """The activity trials' ends over the pass, summed (``details["trial_ends"]``; not from the cache).

    How many there were, how many waited past one default flush for CUPTI's records, and the records
    handed back without timestamps.
    """
    out: collections.Counter[str] = collections.Counter()
    for v in verdicts:
        ends = (v.details or {}).get("trial_ends") or {}
        if not v.cache_hit:
            out.update({k: int(n) for k, n in ends.items()})
    return dict(out)


def _prepare_in_process(text: str) -> str:
    """Build one candidate in this (worker) process: the process-pool side of ``--pool-compare``."""
    from ptxgym.pipeline import Pipeline, Submission
    from ptxgym.records.tasks import get_task

    prepared = Pipeline(get_task(TASK)).prepare(Submission(text))
    return "built" if prepared.candidate is not None else prepared.feedback.status.value


def pool_compare(k: int, tag: str) -> list[str]:
    """Cold builds of ``k`` distinct slow kernels: one by one, on threads, on processes (host's cores)."""
    from ptxgym.pipeline import Pipeline, Submission, build_workers
    from ptxgym.records.tasks import get_task

    pipeline, cores = Pipeline(get_task(TASK)), build_workers()
    lines = [
        f"pool compare: {k} cold builds of distinct naive-GEMM variants, pools of {cores} (the host's cores)"
    ]
    for how in ("sequential", "threads", "processes"):
        texts = [candidate("slow", i, f"{tag}_{how}") for i in range(k)]
        start = time.perf_counter()
        if how == "sequential":
            got = ["built" if pipeline.prepare(Submission(t)).candidate else "failed" for t in texts]
        elif how == "threads":
            with ThreadPoolExecutor(cores) as pool:
                got = list(
                    pool.map(lambda t: "built" if pipeline.prepare(Submission(t)).candidate else "x", texts)
                )
        else:
            with ProcessPoolExecutor(cores) as pool:
                got = list(pool.map(_prepare_in_process, texts))
        wall = time.perf_counter() - start
        lines.append(f"  {how:10s} {wall:7.2f} s  ({wall / k:.2f} s per build)  {Counter(got)}")
    return lines


def header(args: argparse.Namespace) -> str:
    commit = provenance_commit()
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"# python bench/throughput.py {' '.join(sys.argv[1:])}, {when}, commit {commit}, "
        f"{os.cpu_count()} cores, load average {load}"
    )


def format_pass(r: dict) -> list[str]:
    return [
        f"{r['envs']:>3} envs ({r.get('schedule', 'waves')}): {r['candidates']} candidates in "
        f"{r['wall_s']:.1f} s -> {r['per_min']:.2f} "
        f"candidates/min, {r['correct_per_min']:.2f} verified correct/min ({r['correct']} correct)",
        f"         time (s, summed over candidates): build {r['build_s']:.1f}, queue {r['queue_s']:.1f}, "
        f"prepare {r.get('prepare_s', 0):.1f}, worker {r.get('worker_s', 0):.1f}, "
        f"check {r['check_s']:.1f}, time {r['time_s']:.1f}, proofs {r['proofs_s']:.1f} "
        f"(GPU {r['proofs_gpu_s']:.1f}), GPU total "
        f"{r['gpu_s']:.1f}; GPU busy {100 * r['gpu_busy']:.0f}%; timing shortened {r['shortened']}, "
        f"passed on a second timing {r.get('retimed', 0)}",
        "         worker stage: "
        + ", ".join(f"{p} {s:.1f}" for p, s in r.get("worker_parts", {}).items())
        + f"; before the first timed call, the late settle {r.get('settle_late_s', 0):.1f}"
        + f"; after the calls, the runner's discard {r.get('discard_s', 0):.1f}",
        "         activity trials' ends (cupti_spans.settle_flush): "
        + (
            f"{r['trial_ends'].get('trials', 0)} trials, {r['trial_ends'].get('waited', 0)} waited past one "
            f"default flush, {r['trial_ends'].get('incomplete', 0)} incomplete records, "
            f"{r['trial_ends'].get('ran_in', 0)} kernel records in their window by running into it, "
            f"{r['trial_ends'].get('launched_in', 0)} only by their launch "
            f"({r['trial_ends'].get('launch_known', 0)} with their launch known)"
            if r.get("trial_ends")
            else "-"
        ),
        "         the spares' attach (their warm-up, mostly before the turn): "
        + ", ".join(f"{p} {s:.2f}" for p, s in r.get("attach_steps", {}).items()),
        f"         {r['statuses']}",
        "         timed candidates' wall excess over the calibrated overhead (ms): "
        + (
            f"median {r['excess']['median']:.4f}, worst {r['excess']['max']:.4f} of {r['excess']['n']} "
            f"({r['excess']['anomalies']} anomalies); allowance median {r['excess']['allowed']:.4f}"
            if r.get("excess")
            else "-"
        )
        + "; a 1 ms sleep's lateness in this process (ms): "
        + (", ".join(f"{k} {v:.3f}" for k, v in r["wake"].items()) if r.get("wake") else "-"),
        "         where those calls' walls went (ms, each the median over candidates of their medians; "
        "session.wall_parts): "
        + (", ".join(f"{k} {v:.4f}" for k, v in r["excess"]["parts"].items()) if r.get("excess") else "-"),
        "         per timed candidate (median ms: excess / tight allowance / applied allowance beyond the "
        "overhead, ms): "
        + (
            ", ".join(f"{m:.3f}: {e:.3f}/{t:.3f}/{a:.3f}" for m, e, t, a in r["excess"].get("each", []))
            if r.get("excess")
            else "-"
        )
        + (f"; walls read by {r['excess']['wall_paths']}" if r.get("excess", {}).get("wall_paths") else ""),
        *(f"         anomaly: {w}" for w in r.get("excess", {}).get("why", [])),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluator", default="none", help="none (builds only) or local (the GPU)")
    parser.add_argument("--sizes", default="1,4,16", help="envs per pass, comma-separated")
    parser.add_argument(
        "--candidates", type=int, default=16, help="candidates per pass (kinds in equal shares)"
    )
    parser.add_argument(
        "--candidates-per-env",
        type=int,
        default=0,
        help="at least this many candidates per env in a pass (e.g. 1: a 64-env pass gets 64 candidates)",
    )
    parser.add_argument(
        "--schedule",
        choices=("waves", "stream"),
        default="waves",
        help="waves: batches of N through step_many, each waiting for the last (a sync vector env); "
        "stream: each env steps its next candidate once its last returned (trajectories in flight)",
    )
    parser.add_argument("--memcheck", default=None, help="EvalSettings.memcheck for local (default: its own)")
    parser.add_argument("--pool-compare", type=int, default=0, help="also compare build pools on K builds")
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an EvalSettings field (e.g. ncu_crosscheck_fraction=0: no secret Nsight Compute "
        "draw, whose ~10 s would dominate a short pass); printed in the header",
    )
    parser.add_argument(
        "--switch-interval-us",
        type=float,
        default=None,
        help="sys.setswitchinterval for this process (an experiment: how long a thread back from the "
        "worker's reply may wait for the interpreter's lock; Python's default is 5000)",
    )
    parser.add_argument(
        "--noisy-spares",
        action="store_true",
        help="spares replaced at once and never awaited, warming beside calibrations and timings "
        "(local.QUIET_SPARES off: what the settle wait costs and what it guards)",
    )
    args = parser.parse_args(argv)
    if args.switch_interval_us is not None:
        sys.setswitchinterval(args.switch_interval_us / 1e6)

    from ptxgym.cpu.jail import builds_idle
    from ptxgym.evaluation.choose import select_evaluator
    from ptxgym.evaluation.trusted.base import EvalSettings
    from ptxgym.records.settings import build_processes, candidate_process

    overrides = dict(item.split("=", 1) for item in args.set)
    if args.memcheck:
        overrides["memcheck"] = args.memcheck
    settings = EvalSettings.model_validate({**EvalSettings().model_dump(), **overrides})
    lines = [header(args)]
    print(lines[0], flush=True)
    started = time.perf_counter()
    evaluator = select_evaluator(args.evaluator, settings=settings)
    if args.noisy_spares:
        if not hasattr(evaluator, "quiet_spares"):
            evaluator.close()
            raise SystemExit(f"--noisy-spares: the {evaluator.name} evaluator keeps no spares")
        evaluator.quiet_spares = False
    ready = time.perf_counter() - started
    lines.append(
        f"evaluator {evaluator.name} ready in {ready:.1f} s; {settings.memcheck.value} memcheck, "
        f"{settings.target_mode.value} target, slow cut-off {settings.slow_cutoff_speedup}x; "
        f"candidates in {candidate_process()}, hw_counters {settings.hw_counters}, spares "
        f"{getattr(evaluator, 'spares_range', '-')} refilled {getattr(evaluator, 'spare_refill', '-')} "
        f"({'quiet' if getattr(evaluator, 'quiet_spares', True) else 'noisy'}), "
        f"cores {getattr(getattr(evaluator, 'cores', None), 'timing', '-')} kept for timing; builds at "
        f"{'idle' if builds_idle() else 'nice'} priority, in "
        f"{build_processes() or 'no'} build processes (PTXGYM_BUILD_PROCESSES); "
        f"switch interval {sys.getswitchinterval() * 1e6:.0f} us; "
        f"overrides {overrides or 'none'}"
    )
    print(lines[-1], flush=True)
    tag = f"{int(time.time())}"
    results = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            n = max(args.candidates, args.candidates_per_env * size)
            r = run_pass(evaluator, size, n, f"{tag}_{size}", args.schedule)
            results.append(r)
            for line in format_pass(r):
                print(line, flush=True)
                lines.append(line)
        if args.pool_compare:
            for line in pool_compare(args.pool_compare, tag):
                print(line, flush=True)
                lines.append(line)
    finally:
        evaluator.close()
    base = results[0]["per_min"] if results else 0.0
    ratio = ", ".join(f"{r['envs']} envs {r['per_min'] / base:.2f}x" for r in results) if base else ""
    total = time.perf_counter() - started
    lines.append(f"throughput relative to {results[0]['envs']} env(s): {ratio}; total {total:.0f} s")
    print(lines[-1])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
