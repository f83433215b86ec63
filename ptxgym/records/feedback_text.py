"""Feedback rendered as text for the model (the env's observation text and the policies' user message)."""

from __future__ import annotations

from ptxgym.records.feedback import MIN_MMA_SHARE, MIN_TMA_SHARE, Feedback, Status, Verdict, truncate

_NEXT_STEP = {
    Status.PASSED: "The kernel is correct. Keep the results correct and make it faster.",
    Status.NOT_EVALUATED: "The kernel built; it was not run because no GPU evaluator is attached.",
    Status.EXTRACT_ERROR: "Answer with the whole kernel file in one ```cpp fenced block.",
    Status.STATIC_REJECT: "Remove what the policy rejected and answer with the whole kernel again.",
    Status.COMPILE_ERROR: "Fix the compile errors and answer with the whole kernel again.",
    Status.COMPILE_TIMEOUT: "The build ran out of time; reduce template or unroll blow-up.",
    Status.FOREIGN_KERNEL: (
        "A kernel that is not from your own source ran during your calls (a library, or a module loaded "
        "at run time); such a turn earns nothing. Compute everything with the kernels your file defines."
    ),
    Status.PROOF_FAILED: (
        "A proof tool could not finish on your kernel, so the turn earns nothing. Make the kernel behave "
        "the same whether or not a tool watches it, and keep each call well inside the time limit."
    ),
    Status.INFRA_ERROR: "The evaluator failed, not your kernel; the same kernel may be resubmitted.",
}


def _fmt(x: float | None, spec: str = ".4g") -> str:
    return "n/a" if x is None else format(x, spec)


def _compile_lines(fb: Feedback) -> list[str]:
    c = fb.compile
    if c is None:
        return []
    lines = []
    for r in c.resources:
        lines.append(
            f"  {r.kernel}: {r.registers} registers, {r.shared_bytes} B static smem, "
            f"{r.spill_stores or 0} B spill stores, {r.spill_loads or 0} B spill loads"
        )
    if lines:
        lines.insert(0, "ptxas resources:")
    quoted = " ".join(c.log.split()) in " ".join(fb.message.split())  # the message often quotes the log
    if not c.ok and c.log and not quoted:
        lines.append("Compiler output:\n" + truncate(c.log, 3000))
    return lines


def _sass_lines(fb: Feedback) -> list[str]:
    s = fb.sass
    if s is None:
        return []
    found = {op: n for k in s.kernels for op, n in k.target_opcodes.items()}
    if found:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(found.items()))
        return [f"SASS ({s.arch}): target-family instructions present: {ops}."]
    return [f"SASS ({s.arch}): NO target-family instruction in any kernel."]


def _check_lines(fb: Feedback) -> list[str]:
    c = fb.correctness
    if c is None or c.max_abs_error is None:
        return []
    line = (
        f"Correctness over {c.input_sets} input sets ({c.calls_checked} calls checked): max abs error "
        f"{_fmt(c.max_abs_error)}, max rel error {_fmt(c.max_rel_error)}, relative-norm error "
        f"{_fmt(c.rel_norm_error)}, mismatched fraction {_fmt(c.mismatch_ratio)}"
    )
    if c.first_bad_output:
        line += f"; first bad element {c.first_bad_output}{c.first_bad_index}"
    return [line + "."]


def _timing_lines(fb: Feedback) -> list[str]:
    t = fb.timing
    if t is None or t.candidate is None:
        return []
    line = f"Latency: {t.candidate.median_ms:.4f} ms (median of {t.candidate.n})"
    if t.baseline is not None:
        line += f", baseline {t.baseline_name or ''} {t.baseline.median_ms:.4f} ms"
    if t.speedup is not None:
        line += f", speedup {t.speedup:.3f}x"
    if t.sol_fraction is not None:
        line += f", {100 * t.sol_fraction:.1f}% of speed of light"
    return [line + "."]


def _target_lines(fb: Feedback) -> list[str]:
    t = fb.target
    if t is None or t.executed is Verdict.NOT_CHECKED:
        return []
    verdict = {
        Verdict.YES: "executed",
        Verdict.NO: "NOT executed during the call",
        Verdict.UNKNOWN: "unknown (profiling failed)",
    }[t.executed]
    counts = ", ".join(f"{k}={v}" for k, v in sorted(t.counts.items()))
    lines = [f"Target instructions ({t.family}): {verdict}" + (f" [{counts}]" if counts else "") + "."]
    if t.work is not Verdict.NOT_CHECKED:
        lines.append(_work_line(t.work, t.mma_share, t.tma_share))
    return lines


def _work_line(work: Verdict, mma_share: float | None, tma_share: float | None) -> str:
    mma = "unknown" if mma_share is None else f"{100 * mma_share:.1f}%"
    tma = "unknown" if tma_share is None else f"{100 * tma_share:.1f}%"
    head = f"Target work share: MMA FLOPs {mma} of the task's FLOPs, TMA bytes {tma} of its minimal traffic"
    if work is Verdict.YES:
        return head + f" (at least {100 * MIN_MMA_SHARE:.0f}% needed: met)."
    low_tma = tma_share is not None and tma_share < MIN_TMA_SHARE
    if work is Verdict.NO and low_tma and mma_share is not None and mma_share >= MIN_MMA_SHARE:
        return head + (
            f" (at least {100 * MIN_TMA_SHARE:.0f}% of the minimal traffic through TMA loads needed: NOT "
            "met, so no target credit; load the task's operands with TMA copies)."
        )
    if work is Verdict.NO:
        return head + (
            f" (at least {100 * MIN_MMA_SHARE:.0f}% of the FLOPs on the target MMA needed: NOT met, so no "
            "target credit; do the task's matrix products with the target instructions)."
        )
    return head + " (could not be measured: no target credit)."


def _evidence_lines(fb: Feedback) -> list[str]:
    e = fb.evidence
    if fb.status is not Status.PASSED:
        return []
    parts = {
        "target executed": e.target_executed,
        "target work": e.target_work,
        "kernel census": e.kernel_census,
        "memory safety": e.memory_safety,
    }
    text = "; ".join(f"{k}: {', '.join(p.value for p in v) or 'none'}" for k, v in parts.items())
    return [f"Evidence: {text}."]


def render_feedback(fb: Feedback) -> str:
    """The text a model sees after a turn: verdict first, then evidence, then what to do next."""
    head = f"Turn {fb.turn + 1} result: {fb.status.value}"
    lines = [head + (f" - {fb.message}" if fb.message else "")]
    lines += _compile_lines(fb) + _sass_lines(fb) + _check_lines(fb) + _timing_lines(fb) + _target_lines(fb)
    lines += _evidence_lines(fb)
    if fb.memcheck and fb.memcheck.ran and not fb.memcheck.clean and fb.memcheck.first_error:
        lines.append("compute-sanitizer memcheck: " + truncate(fb.memcheck.first_error, 1500))
    if fb.log and not fb.status.ran and fb.status is not Status.INFRA_ERROR:  # ours: a traceback, host paths
        lines.append("Run log (tail):\n" + truncate(fb.log, 2000))
    lines.append(_NEXT_STEP.get(fb.status, "Fix the problem above and answer with the whole kernel again."))
    return "\n".join(lines)
