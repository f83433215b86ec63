"""GRPO with GPU-evaluated rewards, short: does the training loop learn from the evaluator's verdicts?

Issue 6, run on one H200 in about three minutes (the tiny model leaves the time to the evaluator):

1. A tiny Llama model and its tokenizer are built from a config (no download).
2. SFT warm start (TRL SFTTrainer + LoRA, ``ptxgym.train.sft``) on two answers to the same Gemm-sm90a
   task prompt: the expert solution shipped in the sm_90a knowledge pack (wgmma + TMA) and a naive GEMM
   (correct, no tensor cores). Sampled at temperature 1, the model then writes one or the other, about
   half each.
3. GRPO (TRL + LoRA, ``ptxgym.train.grpo``) on that prompt with rewards from the local GPU evaluator
   (correctness on fresh inputs, timing against cuBLAS, Nsight Compute proof that wgmma/TMA executed)
   through the staged reward. The naive kernel is correct but executes no target instruction, so it is
   paid as "ran" (0.25); the expert, if it passes, earns the correct, target and speed credits as well.
   If the loop learns, the share of correct samples that execute the target instructions and the mean
   reward rise over the steps (six steps of eight samples are a smoke run, not enough to show it).
4. Per step it prints the reward mean and spread, ``target_share`` (PASSED with wgmma/TMA executed),
   ``exact_expert`` (byte-identical copies of the expert kernel; sampled near-copies that still pass
   count in ``target_share`` only), the statuses and the wall time, and writes a text report and a JSON
   record (``--out``).

Usage (on the GPU machine; trl and datasets travel as wheels, see the device notes):
    python bench/grpo_gpu.py --out bench/results/grpo_gpu.txt
    python bench/grpo_gpu.py --turns 2 ...   # multi-turn episodes (rollout_func, per-turn discounted credit):
                                             # each step also prints the statuses by turn and the returns
Without a GPU, ``--evaluator none --static-credit 0.5`` dry-runs the same loop with a CPU-only reward
(the target opcode's static presence in the SASS stands in for the GPU verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TASK = "Gemm-sm90a"
NAIVE = ROOT / "tests" / "train" / "data" / "kernels" / "naive_gemm.cu"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6, help="GRPO steps (stops earlier at --budget-s)")
    p.add_argument("--budget-s", type=float, default=200.0, help="wall budget of the whole run, seconds")
    p.add_argument("--generations", type=int, default=8, help="completions per step (one GRPO group)")
    p.add_argument("--evaluator", default="local", choices=["local", "auto", "none"])
    p.add_argument(
        "--static-credit",
        type=float,
        default=0.0,
        help="staged-reward weight of static target presence (CPU dry runs)",
    )
    p.add_argument(
        "--turns",
        type=int,
        default=1,
        help="turns per episode; > 1 plays multi-turn episodes through the rollout_func (per-turn credit)",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "grpo_gpu.txt"))
    return p.parse_args()


def main() -> int:
    args = parse_args()
    t0 = time.perf_counter()
    import torch

    from ptxgym.evaluation.trusted.base import NullEvaluator
    from ptxgym.pipeline import Pipeline
    from ptxgym.policies.reference import available_solutions
    from ptxgym.records.tasks import get_task
    from ptxgym.train.common import LoraRecipe
    from ptxgym.train.grpo import build_trainer, get_recipe
    from ptxgym.train.kernelgen import build_kernelgen_from_sources
    from ptxgym.train.sft import SftRecipe, train_sft
    from ptxgym.train.sft_examples import fenced, to_hf_dataset
    from ptxgym.train.tiny import TinyConfig, corpus_for_tasks, tiny_model, train_tokenizer

    log: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        log.append(line)

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    say(
        f"# bench/grpo_gpu.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  {gpu}  "
        f"python {platform.python_version()}"
        f"  torch {torch.__version__}  {_versions()}"
    )

    # 1. the two kernels, checked by the env's CPU stages
    solutions = available_solutions()
    if TASK not in solutions:
        say(f"no shipped expert solution for {TASK}: nothing to contrast the naive kernel with")
        return 1
    expert, naive = solutions[TASK].read_text(), NAIVE.read_text()
    cpu = Pipeline(get_task(TASK), NullEvaluator("bench pre-check"))
    built = {name: cpu.run(fenced(code)) for name, code in (("expert", expert), ("naive", naive))}
    for name, fb in built.items():
        say(
            f"{name} kernel: {fb.status.value} ({len(expert if name == 'expert' else naive)} chars,"
            f" static target {fb.sass.static_target if fb.sass else None})"
        )
    if any(fb.status.value != "NOT_EVALUATED" for fb in built.values()):
        say("a kernel does not build here; fix that first")
        return 1
    expert_sha = built["expert"].source_sha256

    # 2. tiny model + SFT warm start on both answers to the same prompt
    tok = train_tokenizer(
        corpus_for_tasks([TASK], [fenced(expert), fenced(naive)]),
        TinyConfig(vocab_size=16_384, max_token_chars=64),
    )
    model = tiny_model(tok, TinyConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, layers=2))
    longest = len(tok(fenced(expert))["input_ids"])
    rows = (
        build_kernelgen_from_sources({TASK: expert}).examples
        + build_kernelgen_from_sources({TASK: naive}).examples
    )
    sft = SftRecipe(
        lora=LoraRecipe(rank=16, alpha=32.0, dropout=0.0, modules_to_save=["embed_tokens", "lm_head"]),
        learning_rate=3e-3,
        lr_scheduler="constant",
        max_steps=120,
        batch_size=2,
        max_length=8192,
        logging_steps=20,
        save_steps=None,
        gradient_checkpointing=False,
    )
    scratch = Path(tempfile.mkdtemp(prefix="grpo-gpu-"))
    run = train_sft(model, to_hf_dataset(rows), scratch / "sft", sft, tokenizer=tok)
    warm = run.trainer.model.merge_and_unload()
    say(
        f"SFT warm start: {len(rows)} rows, expert {longest} tokens, loss {run.losses[0]:.3f} -> "
        f"{run.losses[-1]:.4f}, {time.perf_counter() - t0:.0f} s so far"
    )

    # 3. GRPO with rewards from the evaluator
    recipe = get_recipe(
        "default",
        **{
            "env.tasks": [TASK],
            "env.evaluator": args.evaluator,
            "env.reward": "staged",
            "env.reward_options": {"static_target": args.static_credit} if args.static_credit else {},
            "env.eval_settings": {
                "correctness_sets": 2,
                "warmup": 3,
                "iterations": 10,
                "trials": 1,
                "rotate_sets": 2,
                "memcheck": "never",
            },
            "optim.max_steps": args.steps,
            "rollout.max_turns": args.turns,
            "rollout.credit": "turn",
            "optim.batch_size": args.generations,
            "generation.num_generations": args.generations,
            "generation.max_completion_length": longest + 64,
            "generation.temperature": 1.0,
            "optim.learning_rate": 2e-3,
            "lora.rank": 16,
            "lora.alpha": 32.0,
            "lora.dropout": 0.0,
            "optim.gradient_checkpointing": False,
            "generation.use_vllm": False,
            "optim.logging_steps": 1,
        },
    )
    steps: list[dict] = []
    episodes = EpisodeLog(steps, expert_sha, t0)
    setup = build_trainer(
        warm,
        recipe,
        scratch / "grpo",
        tokenizer=tok,
        callbacks=[budget_callback(t0, args.budget_s), episodes.callback()],
    )
    trainer, pool = setup.trainer, setup.pool
    if args.turns == 1:
        trainer.reward_funcs[0].on_feedback = lambda fbs: steps.append(_step_record(fbs, expert_sha, t0))
    else:
        episodes.rollout = setup.rollout
    say(
        f"GRPO: {args.generations} completions per step, {args.turns} turn(s) per episode"
        f"{' (per-turn discounted credit)' if args.turns > 1 else ''}, evaluator {pool.evaluator.name}, "
        f"reward staged{' + static ' + str(args.static_credit) if args.static_credit else ''}"
    )
    say("step  reward_mean  reward_std  target_share  exact_expert  compiled  statuses  wall_s")
    try:
        trainer.train()
    finally:
        pool.close()
    rewards = [h for h in trainer.state.log_history if "reward" in h]
    for i, (h, s) in enumerate(zip(rewards, steps, strict=False), 1):
        say(
            f"{i:>4}  {h['reward']:>11.3f}  {h['reward_std']:>10.3f}  {s['target_share']:>12.2f}  "
            f"{s['exact_expert']:>12.2f}  {h.get('ptxgym/compiled', 0):>8.2f}  {s['statuses']}  "
            f"{s['wall_s']:>6.0f}"
        )
        if "by_turn" in s:
            say(f"      by turn: {s['by_turn']}  credited returns: {s['returns']}")
    shares = [round(s["target_share"], 3) for s in steps]
    say(f"target_share per step {shares}; whole run {time.perf_counter() - t0:.0f} s")
    _write(args.out, log, {"gpu": gpu, "steps": steps, "log_history": rewards, "evaluator": args.evaluator})
    return 0


def budget_callback(t0: float, budget_s: float):
    """A TrainerCallback that stops training once the wall budget is spent."""
    from transformers import TrainerCallback

    class Budget(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if time.perf_counter() - t0 > budget_s:
                control.should_training_stop = True
            return control

    return Budget()


def _step_record(feedbacks, expert_sha: str, t0: float) -> dict:
    from collections import Counter

    n = max(len(feedbacks), 1)
    statuses = Counter(f"{fb.status.value}/{fb.target_executed.value}" for fb in feedbacks)
    speedups = [fb.speedup for fb in feedbacks if fb.speedup is not None]
    return {
        "target_share": sum(
            fb.status.value == "PASSED" and fb.target_executed.value == "yes" for fb in feedbacks
        )
        / n,
        "exact_expert": sum(fb.source_sha256 == expert_sha for fb in feedbacks) / n,
        "statuses": dict(statuses),
        "speedups": speedups,
        "wall_s": time.perf_counter() - t0,
    }


class EpisodeLog:
    """Per-step record of a multi-turn run: the rollout's last episodes, read when a step ends."""

    def __init__(self, steps: list[dict], expert_sha: str, t0: float) -> None:
        self.steps, self.expert_sha, self.t0 = steps, expert_sha, t0
        self.rollout = None

    def record(self) -> None:
        if self.rollout is None or not self.rollout.last_episodes:
            return
        from collections import Counter

        eps = self.rollout.last_episodes
        feedbacks = [t.feedback for e in eps for t in e.turns]
        rec = _step_record(feedbacks, self.expert_sha, self.t0)
        by_turn: dict[int, Counter] = {}
        for e in eps:
            for k, t in enumerate(e.turns, 1):
                fb = t.feedback
                by_turn.setdefault(k, Counter())[f"{fb.status.value}/{fb.target_executed.value}"] += 1
        rec["by_turn"] = {k: dict(v) for k, v in sorted(by_turn.items())}
        gamma = self.rollout.config.gamma
        rec["returns"] = [[round(r, 3) for r in e.returns(gamma)] for e in eps]
        self.steps.append(rec)

    def callback(self):
        from transformers import TrainerCallback

        log = self

        class _OnStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 - HF signature
                log.record()

        return _OnStep()


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("trl", "transformers", "peft", "datasets", "accelerate"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} missing")
    return ", ".join(out)


def _write(path: str, log: list[str], record: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(log) + "\n")
    out.with_suffix(".json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"wrote {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    sys.exit(main())
