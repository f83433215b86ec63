r"""``ptxgym eval``: run a policy on tasks step by step, write every turn, print a Table-1-style summary.

Examples::

    ptxgym eval --policy reference --out runs/reference                # the shipped kernels, 5 sm_90a tasks
    ptxgym eval --policy vllm --model Qwen/Qwen3-8B --preset qwen-paper \
        --variants full --trajectories 4 --turns 8 --concurrency 8 --out runs/qwen3-8b
    ptxgym eval --out runs/qwen3-8b --resume ...same arguments...       # continue a killed run

Exit status: 0 every trajectory finished; 3 some stopped early (policy/server errors, Ctrl-C): rerun
with ``--resume``; 2 a usage problem (bad task or variant, no server, run directory in use).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys

from ptxgym.cli.errors import UsageError
from ptxgym.knowledge_packs.prompting import DEFAULT_VARIANT
from ptxgym.policies.factory import POLICY_KINDS, PolicyConfig, check_policy_config
from ptxgym.policies.history import HistoryMode
from ptxgym.policies.sampling import PRESETS, parse_overrides
from ptxgym.records.tasks import catalog

EXIT_INCOMPLETE = 3


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``eval`` parser."""
    p = sub.add_parser(
        "eval",
        help="evaluate a policy on tasks, turn by turn (resumable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run_g = p.add_argument_group("run")
    run_g.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help="task ids (Gemm-sm90a ...), comma lists, or groups sm90a / sm100a / all "
        "(default: the five sm90a tasks)",
    )
    run_g.add_argument(
        "--variants",
        nargs="+",
        default=[DEFAULT_VARIANT],
        help="knowledge-pack prompt variants (params, templates, contract, patterns-*, full; "
        f"'none' = rules and ABI only; default {DEFAULT_VARIANT}, as for gymnasium.make)",
    )
    run_g.add_argument("--trajectories", type=int, default=1, help="trajectories per task and variant")
    run_g.add_argument("--turns", type=int, default=8, help="turns per trajectory (default 8)")
    run_g.add_argument("--concurrency", type=int, default=4, help="trajectories in flight (default 4)")
    run_g.add_argument("--target-speedup", type=float, default=1.2, help="end a trajectory at this speedup")
    run_g.add_argument(
        "--evaluator",
        default="auto",
        choices=["auto", "none", "local", "ray"],
        help="GPU evaluator: auto (local when a GPU is usable), none (CPU stages only), local, ray (one "
        "actor per GPU of the Ray cluster: RAY_ADDRESS, or a local instance)",
    )
    run_g.add_argument("--reward", default=None, help="registered reward name (default: the env's)")
    run_g.add_argument("--seed", type=int, default=0, help="base seed of env resets")
    run_g.add_argument("--out", default=None, help="run directory (default runs/eval-<time>)")
    run_g.add_argument("--resume", action="store_true", help="continue the run in --out")
    run_g.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    run_g.add_argument("--quiet", action="store_true", help="no progress display")
    pol = p.add_argument_group("policy")
    pol.add_argument(
        "--policy",
        default="reference",
        choices=POLICY_KINDS,
        help="reference (shipped solutions), replay, openai/vllm/sglang (a server), transformers",
    )
    pol.add_argument("--model", help="served model name, or a model path for --policy transformers")
    pol.add_argument("--base-url", help="server URL (default http://127.0.0.1:8000/v1, SGLang :30000)")
    pol.add_argument("--api-key", default=None, help="server API key (default $OPENAI_API_KEY or EMPTY)")
    pol.add_argument("--preset", default="default", choices=sorted(PRESETS), help="sampling preset")
    pol.add_argument(
        "--sampling",
        nargs="*",
        metavar="NAME=VALUE",
        help="sampling overrides, e.g. temperature=0.6 top_k=40 (unknown names go to extra_body)",
    )
    pol.add_argument(
        "--history",
        default="full",
        choices=[m.value for m in HistoryMode],
        help="full: every earlier turn; latest: only the latest response and feedback",
    )
    pol.add_argument(
        "--max-context-tokens",
        type=int,
        default=None,
        help="context window for prompt trimming (default: from the server or model)",
    )
    pol.add_argument("--lora", help="LoRA adapter: its served name (servers) or directory (transformers)")
    think = pol.add_mutually_exclusive_group()
    think.add_argument(
        "--thinking",
        dest="enable_thinking",
        action="store_true",
        default=None,
        help="chat_template_kwargs enable_thinking=true (Qwen3)",
    )
    think.add_argument(
        "--no-thinking",
        dest="enable_thinking",
        action="store_false",
        help="chat_template_kwargs enable_thinking=false (Qwen3)",
    )
    pol.add_argument("--tokenizer", help="tokenizer (path or name) for exact token counts / the local model")
    pol.add_argument("--replay", nargs="+", default=[], metavar="FILE", help="trajectory files to replay")
    pol.add_argument("--replay-trajectory", help="replay this recorded trajectory id for every trajectory")
    pol.add_argument("--device", help="device of the transformers model (cpu, cuda:0, auto)")
    pol.add_argument("--retries", type=int, default=6, help="tries per server request (default 6)")
    pol.add_argument(
        "--retry-delay",
        type=float,
        default=1.0,
        help="seconds before the first retry; doubles each time (default 1)",
    )
    pol.add_argument(
        "--request-timeout",
        type=float,
        default=3600.0,
        help="seconds to wait for one server response (default 3600)",
    )
    p.set_defaults(func=run)


def parse_tasks(items: list[str] | None) -> list[str]:
    """Task ids from ids, comma lists and the groups sm90a / sm100a / all (of the primary tasks)."""
    from ptxgym.runner.config import default_tasks

    if not items:
        return default_tasks()
    out: list[str] = []
    for item in items:
        for tok in filter(None, (s.strip() for s in item.split(","))):
            group = [
                tid
                for tid, t in catalog().items()
                if t.primary and (tok == "all" or t.arch_spec.short == tok)
            ]
            out += group or [tok]
    return list(dict.fromkeys(out))


def _reference_defaults(args: argparse.Namespace) -> list[str]:
    """Default tasks of the reference policy: the primary tasks that have a shipped solution.

    The ones without a solution are named on stderr, so the main job runs what exists and says what not.
    """
    from ptxgym.policies.reference import available_solutions

    wanted = parse_tasks(None)
    have = set(available_solutions())
    missing = [t for t in wanted if t not in have]
    if missing:
        print(
            f"ptxgym eval: no shipped reference solution yet for {', '.join(missing)}; "
            "running the primary tasks that have one",
            file=sys.stderr,
        )
    return [t for t in wanted if t in have]


def _split(items: list[str]) -> list[str]:
    return list(dict.fromkeys(s.strip() for item in items for s in item.split(",") if s.strip()))


def build_config(args: argparse.Namespace):
    """The EvalConfig for parsed arguments."""
    from ptxgym.runner.config import EvalConfig

    policy = PolicyConfig(
        kind=args.policy,
        model=args.model,
        base_url=args.base_url,
        preset=args.preset,
        sampling=parse_overrides(args.sampling),
        history=args.history,
        max_context_tokens=args.max_context_tokens,
        lora=args.lora,
        enable_thinking=args.enable_thinking,
        tokenizer=args.tokenizer,
        replay_files=args.replay,
        replay_trajectory=args.replay_trajectory,
        device=args.device,
        seed=args.seed,
        retries=args.retries,
        retry_delay_s=args.retry_delay,
        timeout_s=args.request_timeout,
    )
    return EvalConfig(
        tasks=_reference_defaults(args)
        if args.tasks is None and args.policy == "reference"
        else parse_tasks(args.tasks),
        variants=_split(args.variants),
        trajectories=args.trajectories,
        turns=args.turns,
        concurrency=args.concurrency,
        evaluator=args.evaluator,
        reward=args.reward,
        target_speedup=args.target_speedup,
        seed=args.seed,
        policy=policy,
    )


def _no_gpu_warning(reason: str | None) -> str:
    return (
        f"WARNING: no GPU evaluator ({reason or 'none attached'}). Only the CPU stages run (extract, "
        "source screen, nvcc build, SASS census); turns that build end NOT_EVALUATED. Correctness, "
        "target-instruction execution and speed need a GPU evaluator: run on a machine with an NVIDIA "
        "GPU of the task's architecture with `pip install ptxgym[gpu]` and --evaluator local."
    )


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; print the summary table (or JSON)."""
    from ptxgym.evaluation.choose import select_evaluator
    from ptxgym.runner import RunStore, check_variants, run_eval
    from ptxgym.runner.report import format_table

    if args.resume and not args.out:
        raise UsageError("--resume needs --out RUN_DIR (the directory of the run to continue)")
    out = args.out or f"runs/eval-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    # Everything that can be checked is checked before any work starts or any directory is made.
    config = build_config(args)
    check_policy_config(config.policy)
    check_variants(config)
    RunStore(out).check_open(config, resume=args.resume)
    evaluator = select_evaluator(config.evaluator, source="--evaluator")
    if evaluator.name == "none":
        print(_no_gpu_warning(getattr(evaluator, "reason", None)), file=sys.stderr)
    if not args.quiet:
        print(
            f"ptxgym eval: {len(config.keys())} trajectories x {config.turns} turns, policy "
            f"{config.policy.kind}, evaluator {evaluator.name}, run directory {out}",
            file=sys.stderr,
        )
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    result = run_eval(
        config, out, resume=args.resume, evaluator=evaluator, progress=not args.quiet, api_key=api_key
    )
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        print(format_table(result.summary))
        print(
            f"\nrun directory: {result.run_dir} ({result.turns_on_disk} turns; this invocation ran "
            f"{result.turns_run}); `ptxgym report {result.run_dir}` draws the Fast_p plots."
        )
    if result.evaluator == "none":
        print(_no_gpu_warning(result.gpu_reason), file=sys.stderr)
    overflowed = [t.trajectory_id for t in result.trajectories if t.ended == "context_overflow"]
    if overflowed:
        print(
            f"ptxgym eval: {len(overflowed)} trajectories ended because the prompt and history did not fit "
            "the model's context (context_overflow). Use a smaller prompt variant (--variants none or "
            "params), --history latest, or a model with a longer context.",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    if result.incomplete:
        why = result.stop_reason or "policy errors (see events.jsonl)"
        print(
            f"ptxgym eval: {len(result.incomplete)} trajectories stopped early: {why}. Rerun the same "
            f"command with --resume --out {result.run_dir} to continue them.",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    return 0
