"""GPU-exclusive seconds per verified correct candidate, split by stage, against the timed floor (issue 11).

    python bench/gpu_cost.py --out bench/results/gpu_cost.txt [--turns 3] [--subjects ...]

Three subjects, each played as a short episode of ``--turns`` turns (default 3) through one
``LocalGpuEvaluator`` with the product's default protocol (``EvalSettings()``: 3 checked calls, 3 trials
x (10 warm-up + 50 timed); guard pages, so memcheck only where they could not be built; the in-band
executed-instruction proof, one counted verified call (stage ``count``), on candidates whose SASS holds
the target family, with Nsight Compute (stage ``execute``) on a secret 5% of them):

* ``gemm_expert``: the shipped expert GEMM (``knowledge_packs/sm90a/solutions/Gemm.cu``) through the
  real ``Pipeline`` (screen, nvcc build, SASS census, evaluator);
* ``gemm_simt``: the audit corpus' slow SIMT GEMM (``ptxgym/audit/kernels/naive.cu``), built once by
  ``ptxgym.audit.corpus`` and evaluated directly (its shared header is outside the packs' include path);
* ``mha_fwd_expert``: the shipped expert MHA forward, through the ``Pipeline``.

GPU-exclusive seconds are ``stage_wall_s["gpu_total"]``: the wall time the evaluator held its GPU queue
for the candidate, its turn (``gpu_turn``) and its proofs' GPU phases (``proof_gpu``; their tools'
start-up runs outside, ``proof_boot``; the report taken under the hold, ``proof_read``, part of
``proof_gpu``; its conversion to CSV outside, ``proof_convert``, ``tools.Gate``); the CPU stages, screen,
build and SASS, are
printed apart and never hold the GPU. After each subject's episode one more turn has Nsight Compute's
secret cross-check drawn (``--no-crosscheck-turn`` skips it): the summary adds its GPU seconds times the
share of candidates that draw it, the expected excess over an episode. With ``--ncu-phases`` that turn's
profile also splits its GPU phase: the driver prints its phases (``driver --phases``, CLOCK_MONOTONIC, a
log line read only by this script) and the gate's go and the tool's end are stamped beside them
(``PhaseSpy``), so the part of ``proof_gpu`` outside the driver's phases is placed.
The timed floor is calls x median latency: the kernel executions the protocol needs (checked calls +
trials x (warm-up + timed)) at the candidate's own median latency, the GPU time no harness can avoid;
the excess is ``gpu_total`` - floor. The first turn of a task in an evaluator also builds the task's arena
and measures its baseline (``prepare_arena``, ``prepare_baseline``: per-arena work, resident for later
turns); the summary shows the excess with and without that one-time share, and ``--prepare-tasks``
(default MhaBwd) splits a task's first-turn prepare into input generation, fp32 references, the
verified pool (its draws and references, ``verified_pool.py``) and the baseline measurement, then
times a second prepare of the same task (resident: ~0 s). Every figure
printed is also written to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

from provenance import commit

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "knowledge_packs" / "sm90a" / "solutions"
SUBJECTS = ("gemm_expert", "gemm_simt", "mha_fwd_expert")
TASK = {"gemm_expert": "Gemm-sm90a", "gemm_simt": "Gemm-sm90a", "mha_fwd_expert": "MhaFwd-sm90a"}
CPU_STAGES = ("extract", "screen", "build", "sass")
ONE_TIME = ("prepare_arena", "prepare_baseline")
SHOWN = (
    "prepare",
    "worker",
    "worker_restore",
    "worker_take",
    "worker_attach",
    "worker_sandbox",
    "worker_settle",
    "worker_calibrate",
    "settle_late",
    "spare_attach_hw_prepare_retried",
    "spare_attach_hw_prepare",
    "spare_attach_hw_prepare_failed",
    "spare_attach_hw_warm",
    "spare_attach_hw_warm_failed",
    "check",
    "time",
    "time_inputs",
    "time_inputs_wait",
    "time_calls",
    "time_verify",
    "time_guards",
    "time_hold",
    "time_count",
    "time_hw_count",
    "time_trial_end",
    "runner_hw_setup",
    "runner_hw_enable",
    "runner_hw_config",
    "runner_hw_start",
    "runner_hw_run",
    "runner_hw_read",
    "finish",
    "finish_verify",
    "discard",
)
SHOWN += ("memcheck", "execute", "proof_boot", "proof_queue", "proof_gpu", "proof_read", "proof_convert")
SHOWN += ("gpu_turn",)


class Printer:
    """Prints a line now and keeps it for ``--out``."""

    def __init__(self, out: Path) -> None:
        self.out, self.lines = out, []

    def __call__(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text("\n".join(self.lines) + "\n")


def floor_s(settings, median_ms: float | None) -> float | None:
    """Calls x median latency: the GPU time of the kernel executions one evaluation needs (full timing)."""
    calls = settings.calls_per_step + settings.probe_calls
    return None if median_ms is None else calls * median_ms / 1e3


DRIVER_PHASES = ("go", "ffi", "cuda", "buffers", "jail", "load", "first_call", "profiled_call")
"""The phases ``driver --phases`` prints, in order (``sandboxed/driver.py``)."""


def phase_steps(output: str, start: float) -> tuple[dict[str, float], float]:
    """Seconds from ``start`` to the first phase the driver printed, then from each to the next.

    ``output``: a driver run's log (``driver: phase NAME T`` lines, CLOCK_MONOTONIC; a log read only by a
    benchmark). Keys ``to_<phase>``; also the time of the last phase found (``start`` if none).
    """
    marks = {}
    for line in output.splitlines():
        if line.startswith("driver: phase "):
            _, _, name, t = line.split()
            marks[name] = float(t)
    steps, last = {}, start
    for name in DRIVER_PHASES:
        if name in marks:
            steps[f"to_{name}"] = marks[name] - last
            last = marks[name]
    return steps, last


class PhaseSpy:
    """``--ncu-phases``: Nsight Compute's gated profile runs with the driver's ``--phases``, stamped.

    Wraps ``ncu.run_tool`` for the block: a gated profile (``--export`` on its command line) gets the
    driver's ``--phases`` and its gate's hold is wrapped to stamp when the GPU was taken (the go is written
    right after) and, from ``Gate.gpu_s``/``read_s``, when the tool's group had ended. ``runs`` keeps, per
    profile, the seconds from the go to each driver phase and from the last one to the end.
    """

    def __init__(self) -> None:
        self.runs: list[dict[str, float]] = []

    @contextlib.contextmanager
    def active(self):
        from ptxgym.evaluation.trusted import ncu

        real = ncu.run_tool

        def spied(argv, timeout_s, env=None, cwd=None, gate=None, read=None, pass_fds=()):
            if gate is None or "--export" not in argv:
                return real(argv, timeout_s, env, cwd, gate, read, pass_fds)
            held, stamps = gate.hold, {}

            @contextlib.contextmanager
            def stamped():
                with held():
                    stamps["taken"] = time.monotonic()
                    yield

            gpu0, read0 = gate.gpu_s, gate.read_s
            gate.hold = stamped
            try:
                run = real([*argv, "--phases"], timeout_s, env, cwd, gate, read, pass_fds)
            finally:
                gate.hold = held
            if "taken" in stamps:
                end = stamps["taken"] + (gate.gpu_s - gpu0) - (gate.read_s - read0)
                self.runs.append(self.parts(run.output, stamps["taken"], end))
            return run

        ncu.run_tool = spied
        try:
            yield self
        finally:
            ncu.run_tool = real

    @staticmethod
    def parts(output: str, taken: float, end: float) -> dict[str, float]:
        """Seconds from the GPU's taking to each phase the driver printed, then to the tool's end."""
        steps, last = phase_steps(output, taken)
        got = {k: round(v, 3) for k, v in steps.items()}
        got["to_end"] = round(end - last, 3)
        got["held"] = round(end - taken, 3)
        return got


def play(ev, subject: str, turns: int, say, crosscheck: bool = True, phases: bool = False) -> list[dict]:
    """One episode of ``turns`` turns; one row (status, latency, stage walls) per turn.

    With ``crosscheck``, one more turn with Nsight Compute's cross-check drawn (``ncu_crosscheck_fraction``
    1 for that turn, an empty Nsight Compute cache), marked ``crosscheck`` in its row: what the secret
    draw costs when it falls (``summary`` amortises it over the default fraction). ``phases``: that
    turn's profile split by the driver's phases (``PhaseSpy``).
    """
    from ptxgym.records.tasks import get_task

    task = get_task(TASK[subject])
    rows: list[dict] = []
    first_correct = True
    simt: list = []
    for turn in range(turns + (1 if crosscheck else 0)):
        drawn = crosscheck and turn == turns
        ev.settle()
        if drawn:
            spy = PhaseSpy()
            with _crosscheck_drawn(ev), spy.active() if phases else contextlib.nullcontext():
                row = _play_turn(ev, subject, task, turn, first_correct, simt, say)
            for run in spy.runs:
                split = " ".join(f"{k}={v:.3f}" for k, v in run.items())
                say(f"#   {subject} turn {turn} profile's GPU phase (s, from the GPU's taking): {split}")
        else:
            row = _play_turn(ev, subject, task, turn, first_correct, simt, say)
        # a plain turn where the secret draw itself fell counts as drawn too (as ``rows_from`` reads it)
        row["crosscheck"] = drawn or row["walls"].get("proof_gpu", 0.0) > 0
        rows.append(row)
        first_correct = first_correct and row["status"] != "PASSED"
    return rows


@contextlib.contextmanager
def _crosscheck_drawn(ev):
    """Nsight Compute's cross-check drawn for every candidate, with an empty cache, for the block."""
    import os
    import tempfile

    saved, cache = ev.settings, os.environ.get("PTXGYM_CACHE_DIR")
    ev.settings = saved.model_copy(update={"ncu_crosscheck_fraction": 1.0})
    with tempfile.TemporaryDirectory(prefix="gpu-cost-cache-") as fresh:
        os.environ["PTXGYM_CACHE_DIR"] = fresh
        try:
            yield
        finally:
            ev.settings = saved
            if cache is None:
                os.environ.pop("PTXGYM_CACHE_DIR", None)
            else:
                os.environ["PTXGYM_CACHE_DIR"] = cache


def _play_turn(ev, subject: str, task, turn: int, first_correct: bool, simt: list, say) -> dict:
    """One turn of ``play``: its row, printed."""
    from ptxgym.pipeline import Pipeline

    ev.last_details = {}  # a turn that never reaches the GPU prints no earlier turn's details

    if subject == "gemm_simt":
        from ptxgym.audit.corpus import candidate

        t0 = time.perf_counter()
        if not simt:
            simt.append(candidate("naive", task))
        build_s = time.perf_counter() - t0
        cand = simt[0].model_copy(
            update={"turn": turn, "first_correct_in_episode": first_correct, "episode_id": "gpu-cost"}
        )
        v = ev.evaluate(task, cand)
        status, timing, walls, message = v.status, v.timing, dict(v.stage_wall_s), v.message
        walls["build"] = round(build_s, 4)
    else:
        name = "Gemm" if subject == "gemm_expert" else "MhaFwd"
        source = (SOLUTIONS / f"{name}.cu").read_text()
        fb = Pipeline(task, ev).run(
            f"```cpp\n{source}\n```", turn=turn, episode_id="gpu-cost", first_correct=first_correct
        )
        status, timing, walls, message = fb.status, fb.timing, dict(fb.stage_wall_s), fb.message
        if "timed again" in fb.message:  # the first timing's failure (``Session.retime``), where spans went
            say(f"#   {subject} turn {turn}: {fb.message[:400]}")
    median = timing.candidate.median_ms if timing and timing.candidate else None
    floor = floor_s(ev.settings, median)
    gpu = walls.get("gpu_total", 0.0)
    row = {"subject": subject, "turn": turn, "status": status.value, "median_ms": median, "floor_s": floor}
    row.update(gpu_s=gpu, excess_s=None if floor is None else gpu - floor, walls=walls)
    stages = " ".join(f"{k}={walls[k]:.2f}" for k in (*SHOWN, *ONE_TIME) if k in walls)
    cpu = " ".join(f"{k}={walls[k]:.2f}" for k in CPU_STAGES if k in walls)
    say(
        f"{subject} | {turn} | {status.value} | {median if median is None else f'{median:.4f}'} | "
        f"{'-' if floor is None else f'{floor:.2f}'} | {gpu:.2f} | "
        f"{'-' if floor is None else f'{gpu - floor:.2f}'} | {stages} | cpu: {cpu}"
    )
    details = getattr(ev, "last_details", {}) or {}
    hw = details.get("hw_counters") or {}
    if hw.get("window") is not None:  # the counted call's GPU activities against the busiest timed call's
        say(
            f"#   {subject} turn {turn} counted window: {hw['window'][0]} activities, busiest timed call "
            f"{hw['window'][1]}"
        )
    if details.get("calibration_source"):
        say(f"#   {subject} turn {turn} calibration: {details['calibration_source']}")
    if status.value != "PASSED":
        say(f"#   {subject} turn {turn}: {message[:400]}")
        for key in ("missing_spans", "retimed", "crosscheck"):
            if details.get(key):
                say(f"#   {subject} turn {turn} {key}: {str(details[key])[:600]}")
    return row


def keep_details(ev) -> None:
    """``ev.last_details``: the details of the verdict ``ev`` gave last (a Feedback carries none)."""
    evaluate = ev.evaluate

    def kept(task, candidate):
        verdict = evaluate(task, candidate)
        ev.last_details = verdict.details
        return verdict

    ev.evaluate, ev.last_details = kept, {}


def prepare_cost(ev, task_ids: list[str], say) -> None:
    """Where a task's first-turn ``prepare`` goes, and that a second turn of the task pays ~0 for it."""
    from ptxgym.records.tasks import get_task

    say("prepare of task | first s (arena: inputs + references + verified pool; baseline) | second s | sets")
    for task_id in task_ids:
        task = get_task(task_id)
        ev.settle()
        arena, _, first = ev._prepare(task)
        _, _, second = ev._prepare(task)
        b = arena.build_s
        say(
            f"{task_id} | {first['prepare']:.2f} (arena {first['prepare_arena']:.2f}: inputs "
            f"{b['inputs']:.2f} + references {b['references']:.2f} + pool {b.get('pool', 0.0):.2f} "
            f"({arena.pool.describe()}); "
            f"baseline {first['prepare_baseline']:.2f}) | {second['prepare']:.3f} | {len(arena.sets)}"
        )


def summary(rows: list[dict], say, fraction: float) -> None:
    """Per subject: mean GPU seconds, floor and excess over its verified correct turns.

    The turns without the cross-check give the means; the turns with it drawn (``play``'s, or a plain
    turn the secret draw fell on) add their proofs' GPU seconds (``proof_gpu``, their mean: the tool's GPU
    phase; its start-up and read-back hold no GPU) times the share of candidates that draw it
    (``fraction``): the expected excess per candidate. Then the same for
    the later turns alone (every plain turn after the subject's first: what a long episode pays per
    candidate once the task is resident, first-use costs outside the one-time split included).
    """
    say(
        "subject | correct turns | mean gpu_total s | mean floor s | mean excess s | without one-time s | "
        f"cross-check drawn: proof_gpu s (execute, boot outside, report taken within, converted outside) | "
        f"expected excess with {fraction:g} of it"
    )
    for subject in dict.fromkeys(r["subject"] for r in rows):
        ok = [r for r in rows if r["subject"] == subject and r["status"] == "PASSED" and r["floor_s"]]
        plain = [r for r in ok if not r.get("crosscheck")]
        if not plain:
            say(f"{subject} | 0 | no verified correct turn")
            continue
        gpu = statistics.mean(r["gpu_s"] for r in plain)
        floor = statistics.mean(r["floor_s"] for r in plain)
        one_time = statistics.mean(sum(r["walls"].get(k, 0.0) for k in ONE_TIME) for r in plain)
        excess = gpu - floor
        drawn = [r for r in ok if r.get("crosscheck")]
        extra, tail = 0.0, "- | -"
        if drawn:
            w = drawn[0]["walls"]
            extra = statistics.mean(r["walls"].get("proof_gpu", 0.0) for r in drawn)
            several = f"mean of {len(drawn)} drawn; the first's " if len(drawn) > 1 else ""
            tail = (
                f"{extra:.2f} ({several}execute {w.get('execute', 0.0):.2f}, "
                f"boot {w.get('proof_boot', 0.0):.2f}, "
                f"taken {w.get('proof_read', 0.0):.2f}, converted {w.get('proof_convert', 0.0):.2f}) | "
                f"{excess - one_time + fraction * extra:.2f}"
            )
        head = f"{subject} | {len(plain)} | {gpu:.2f} | {floor:.2f} | {excess:.2f}"
        say(f"{head} | {excess - one_time:.2f} | {tail}")
        later = sorted(plain, key=lambda r: r["turn"])[1:]
        if later:
            spread = [r["gpu_s"] - r["floor_s"] for r in later]
            mean = statistics.mean(spread)
            say(
                f"{subject} later turns | {len(later)} | excess {min(spread):.2f}-{max(spread):.2f}, mean "
                f"{mean:.2f} | expected excess with {fraction:g} of the drawn cross-check: "
                f"{mean + fraction * extra:.2f}" + ("" if drawn else " (none drawn)")
            )


def rows_from(path: Path) -> list[dict]:
    """The turn rows a results file of this script printed (``--summarize``).

    A turn whose walls show a proof's GPU phase (``proof_gpu`` > 0) counts as one with the cross-check
    drawn, forced (``play``) or by the secret draw itself.
    """
    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 9 or not parts[1].isdigit():
            continue
        walls = {k: float(v) for k, _, v in (w.partition("=") for w in f"{parts[7]} {parts[8]}".split()) if v}
        rows.append(
            {
                "subject": parts[0],
                "turn": int(parts[1]),
                "status": parts[2],
                "median_ms": None if parts[3] == "None" else float(parts[3]),
                "floor_s": None if parts[4] == "-" else float(parts[4]),
                "gpu_s": float(parts[5]),
                "walls": walls,
                "crosscheck": walls.get("proof_gpu", 0.0) > 0,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="write the printed figures here")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--subjects", nargs="*", default=list(SUBJECTS), choices=list(SUBJECTS))
    parser.add_argument(
        "--prepare-tasks",
        nargs="*",
        default=["MhaBwd-sm90a"],
        help="tasks whose first-turn prepare is split and re-timed (arena and baseline only, no candidate)",
    )
    parser.add_argument(
        "--no-crosscheck-turn",
        action="store_true",
        help="skip the extra turn per subject with Nsight Compute's cross-check drawn",
    )
    parser.add_argument(
        "--ncu-phases",
        action="store_true",
        help="split the drawn cross-check's GPU phase by the driver's phases (PhaseSpy)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an EvalSettings field (e.g. verify_timed_fraction=0.05); printed with the protocol",
    )
    parser.add_argument(
        "--summarize",
        type=Path,
        help="print the summary of an earlier results file's turns (rows_from) and exit; no GPU",
    )
    args = parser.parse_args(argv)
    say = Printer(args.out)
    if args.summarize is not None:
        from ptxgym.evaluation.trusted.base import EvalSettings

        say(f"# summary of {args.summarize.name} (gpu_cost.py --summarize, commit {commit()})")
        summary(rows_from(args.summarize), say, EvalSettings().ncu_crosscheck_fraction)
        return 0

    from ptxgym.evaluation.trusted.base import EvalSettings
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    t_start = time.perf_counter()
    overrides = dict(item.split("=", 1) for item in args.set)
    settings = EvalSettings.model_validate({**EvalSettings().model_dump(), **overrides})
    ev = LocalGpuEvaluator(settings=settings, spares=2)
    keep_details(ev)
    f = ev.facts
    say(
        f"# gpu cost {time.strftime('%Y-%m-%dT%H:%M:%S')} commit {commit()} gpu {f.name} driver {f.driver} "
        f"torch {f.torch}; candidates in the {'native runner' if ev.native.wanted else 'Python worker'}, "
        f"hw_counters {settings.hw_counters}"
    )
    say(
        f"# protocol: {settings.calls_per_step} calls per evaluation ({settings.correctness_sets} checked + "
        f"{settings.trials} x ({settings.warmup} + {settings.iterations})) + {settings.probe_calls} "
        "of the slow cut-off's probe; memcheck "
        f"{settings.memcheck.value}; target {settings.target_mode.value}; {args.turns} turns per subject; "
        f"{settings.verified_per_trial} verified timed calls per trial; overrides {overrides or 'none'}"
    )
    say(
        "subject | turn | status | median ms | floor s | gpu_total s | excess s | GPU stages s | CPU stages s"
    )
    rows: list[dict] = []
    try:
        for subject in args.subjects:
            try:
                rows += play(ev, subject, args.turns, say, not args.no_crosscheck_turn, args.ncu_phases)
            except Exception as exc:  # noqa: BLE001 - one failed subject must not lose the others
                say(f"{subject} | FAILED: {type(exc).__name__}: {exc}")
        if args.prepare_tasks:
            try:
                prepare_cost(ev, args.prepare_tasks, say)
            except Exception as exc:  # noqa: BLE001 - reported, the episode figures stand
                say(f"prepare | FAILED: {type(exc).__name__}: {exc}")
    finally:
        ev.close()
    summary(rows, say, settings.ncu_crosscheck_fraction)
    say(f"# total {time.perf_counter() - t_start:.0f} s")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
