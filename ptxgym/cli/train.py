"""``ptxgym train``: SFT data, SFT and GRPO.

    ptxgym train data kernelgen --trajectories runs/*/trajectories.jsonl --out data/kg [--cap 33]
    ptxgym train data fixit --trajectories ... --out data/fix [--repair-teacher vllm:Qwen/Qwen3-32B]
    ptxgym train data solutions --arch sm_90a --out data/experts
    ptxgym train tiny --out models/tiny --tasks Gemm-sm90a          # a local toy model for smoke runs
    ptxgym train sft --model M --data data/kg --out runs/sft [--preset paper] [--set epochs=3]
    ptxgym train grpo --model M --out runs/grpo --tasks Gemm-sm90a [--turns 4 --credit turn]

Teachers (``--repair-teacher``, ``--reasoning-teacher``) are ptxgym policies given as ``KIND[:MODEL]``
(``reference``, ``transformers:/path/model``, ``vllm:Qwen/Qwen3-32B``) or as a ``PolicyConfig`` JSON
object (``'{"kind": "openai", "model": "m", "base_url": "http://host:8000/v1"}'``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: Preset values for --set: parsed as JSON when possible (numbers, true/false, null, lists), else text.


def _guarded(fn: Any) -> Any:
    """Run a subcommand; a usage or data error becomes one line on stderr and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (ValueError, KeyError, FileNotFoundError, FileExistsError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"ptxgym train: {msg}", file=sys.stderr)
            return 2

    return run


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` parser and its subcommands."""
    p = sub.add_parser("train", help="build SFT data, fine-tune (SFT, LoRA) and run GRPO against the env")
    tsub = p.add_subparsers(dest="train_command", metavar="STEP")
    _register_data(tsub)
    _register_tiny(tsub)
    _register_sft(tsub)
    _register_grpo(tsub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _register_data(tsub: argparse._SubParsersAction) -> None:
    d = tsub.add_parser("data", help="turn trajectories (or kernel files) into an SFT dataset")
    dsub = d.add_subparsers(dest="data_kind", metavar="KIND")
    for kind in ("kernelgen", "fixit"):
        k = dsub.add_parser(kind, help=f"{kind} rows from trajectory JSONL files")
        k.add_argument("--trajectories", nargs="+", required=True, metavar="FILE")
        k.add_argument("--out", required=True, help="dataset directory (examples.jsonl, hf/, manifest.json)")
        k.add_argument(
            "--quality",
            choices=["correct", "compiled"],
            default="correct",
            help="what counts as a good kernel (compiled: CPU-only data)",
        )
        k.add_argument(
            "--no-require-target",
            action="store_true",
            help="accept correct kernels whose target instruction was not proven",
        )
        k.add_argument(
            "--legacy-records",
            action="store_true",
            help="accept records of an older Feedback schema for the target credit (its rule predates "
            "the work share: a token instruction was enough)",
        )
        k.add_argument("--cap", type=int, default=None, help="at most this many rows per task")
        k.add_argument("--seed", type=int, default=0)
        k.add_argument("--reasoning-teacher", default=None, metavar="POLICY")
        k.set_defaults(func=_guarded(_run_data))
        if kind == "kernelgen":
            k.add_argument("--min-speedup", type=float, default=0.0)
            k.add_argument("--answer", choices=["response", "kernel"], default="response")
        else:
            k.add_argument("--repair-teacher", default=None, metavar="POLICY")
            k.add_argument(
                "--evaluator",
                default="auto",
                choices=["auto", "none", "local"],
                help="evaluator that judges the teacher's repairs",
            )
            k.add_argument("--max-attempts", type=int, default=3, help="repair turns per failed kernel")
            k.add_argument("--max-source-turn", type=int, default=5, help="only failed turns before this one")
            k.add_argument("--pairing", default="trajectory,teacher", help="repair sources, in order")
    s = dsub.add_parser("solutions", help="KernelGen rows from the expert solutions in the knowledge packs")
    s.add_argument("--arch", default="sm_90a")
    s.add_argument("--variants", nargs="+", default=["none"], help="prompt variants ('none': rules only)")
    s.add_argument("--out", required=True)
    s.set_defaults(func=_guarded(_run_data))
    d.set_defaults(func=lambda args: (d.print_help(), 2)[1])


def _register_tiny(tsub: argparse._SubParsersAction) -> None:
    t = tsub.add_parser("tiny", help="build a tiny local model + tokenizer (no download) for smoke runs")
    t.add_argument("--out", required=True, help="a fresh directory")
    t.add_argument(
        "--tasks", nargs="+", default=["Gemm-sm90a"], help="task prompts to train the tokenizer on"
    )
    t.add_argument("--kernels", nargs="*", default=[], metavar="FILE", help="kernel files for the tokenizer")
    t.add_argument("--vocab", type=int, default=2048)
    t.add_argument("--hidden", type=int, default=128)
    t.add_argument("--layers", type=int, default=2)
    t.set_defaults(func=_guarded(_run_tiny))


def _register_sft(tsub: argparse._SubParsersAction) -> None:
    from ptxgym.train.sft import PRESETS

    s = tsub.add_parser("sft", help="supervised fine-tuning with TRL SFTTrainer + LoRA")
    s.add_argument("--model", required=True, help="model directory or hub id")
    s.add_argument("--tokenizer", default=None)
    s.add_argument(
        "--data", required=True, help="dataset directory from `ptxgym train data` (or examples.jsonl)"
    )
    s.add_argument("--out", required=True)
    s.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    s.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="override recipe fields")
    s.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_guarded(_run_sft))


def _register_grpo(tsub: argparse._SubParsersAction) -> None:
    from ptxgym.train.grpo import PRESETS

    g = tsub.add_parser("grpo", help="GRPO with TRL, rewards from the environment")
    g.add_argument("--model", required=True)
    g.add_argument("--tokenizer", default=None)
    g.add_argument("--out", required=True)
    g.add_argument("--preset", default="default", choices=sorted(PRESETS))
    g.add_argument("--tasks", nargs="+", default=None)
    g.add_argument("--variants", nargs="+", default=None, help="prompt variants ('none': rules only)")
    g.add_argument("--reward", default=None, help="reward spec, e.g. staged or 'staged + 0.5*log_speedup'")
    g.add_argument("--turns", type=int, default=None, help="turns per episode (1: single-turn GRPO)")
    g.add_argument("--credit", choices=["turn", "episode"], default=None)
    g.add_argument("--evaluator", choices=["auto", "none", "local", "ray"], default=None)
    g.add_argument("--steps", type=int, default=None)
    g.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="override recipe fields")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=_guarded(_run_grpo))


# ------------------------------------------------------------------------------------------- helpers


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` items -> a dict; values parse as JSON when they can (``epochs=3`` -> 3), else text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def parse_policy(spec: str | None) -> Any:
    """A policy from ``KIND[:MODEL]`` or a PolicyConfig JSON object (None stays None)."""
    if spec is None:
        return None
    from ptxgym.policies.factory import PolicyConfig, build_policy

    if spec.lstrip().startswith("{"):
        cfg = PolicyConfig.model_validate_json(spec)
    else:
        kind, _, model = spec.partition(":")
        cfg = PolicyConfig(kind=kind, model=model or None)
    return build_policy(cfg)


def _variants(items: list[str] | None) -> list[str | None] | None:
    return None if items is None else [None if v in ("none", "None", "") else v for v in items]


def _threads(n: int | None) -> None:
    if n:
        import torch

        torch.set_num_threads(n)


def _report(result: Any, out: Path) -> int:
    manifest = json.loads((out / "manifest.json").read_text())
    print(
        f"wrote {manifest['rows']} rows to {out} "
        f"(by task: {manifest['by_task']}; dropped: {manifest['dropped']})"
    )
    return 0 if manifest["rows"] else 1


# ------------------------------------------------------------------------------------------- runners


def _run_data(args: argparse.Namespace) -> int:
    from ptxgym.train.sft_examples import save_examples

    out = Path(args.out)
    if args.data_kind == "solutions":
        from ptxgym.train.kernelgen import build_kernelgen_from_solutions

        res = build_kernelgen_from_solutions(args.arch, _variants(args.variants) or (None,))
    else:
        res = _build_from_trajectories(args)
    if not res.examples:
        print(f"ptxgym train data: no rows kept (dropped: {dict(res.dropped)})", file=sys.stderr)
        return 1
    save_examples(res.examples, out, dropped=res.dropped)
    return _report(res, out)


def _build_from_trajectories(args: argparse.Namespace) -> Any:
    from ptxgym.train.episodes import load_records
    from ptxgym.train.teachers import ReasoningTeacher, RepairTeacher

    records = load_records(args.trajectories)
    reasoning = parse_policy(args.reasoning_teacher)
    rt = ReasoningTeacher(reasoning) if reasoning is not None else None
    if args.data_kind == "kernelgen":
        from ptxgym.train.kernelgen import KernelGenConfig, build_kernelgen

        cfg = KernelGenConfig(
            quality=args.quality,
            require_target=not args.no_require_target,
            legacy_records=args.legacy_records,
            min_speedup=args.min_speedup,
            cap_per_task=args.cap,
            seed=args.seed,
            answer=args.answer,
        )
        return build_kernelgen(records, cfg, rt)
    from ptxgym.evaluation.choose import select_evaluator
    from ptxgym.train.fixit import FixitConfig, build_fixit

    repair = parse_policy(args.repair_teacher)
    teacher = None
    if repair is not None:
        teacher = RepairTeacher(
            repair,
            select_evaluator(args.evaluator, source="--evaluator"),
            max_attempts=args.max_attempts,
            quality=args.quality,
            require_target=not args.no_require_target,
        )
    fixit = FixitConfig(
        max_source_turn=args.max_source_turn,
        quality=args.quality,
        require_target=not args.no_require_target,
        legacy_records=args.legacy_records,
        cap_per_task=args.cap,
        seed=args.seed,
        pairing=tuple(p.strip() for p in args.pairing.split(",") if p.strip()),
    )
    return build_fixit(records, fixit, teacher, rt)


def _run_tiny(args: argparse.Namespace) -> int:
    from ptxgym.train.tiny import TinyConfig, build_tiny, corpus_for_tasks

    kernels = [Path(k).read_text(encoding="utf-8") for k in args.kernels]
    cfg = TinyConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden, layers=args.layers
    )
    model, tok = build_tiny(corpus_for_tasks(args.tasks, kernels), args.out, cfg)
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny model ({params} parameters, vocabulary {len(tok)}) saved to {args.out}")
    return 0


def _run_sft(args: argparse.Namespace) -> int:
    from ptxgym.train.sft import get_recipe, train_sft

    _threads(args.threads)
    recipe = get_recipe(args.preset, **parse_sets(args.set))
    run = train_sft(args.model, args.data, args.out, recipe, tokenizer=args.tokenizer)
    summary = {
        "adapter": str(run.adapter_dir),
        "rows": run.rows,
        "dropped_long": run.dropped_long,
        "first_loss": run.losses[0] if run.losses else None,
        "last_loss": run.losses[-1] if run.losses else None,
        **run.metrics,
    }
    print(
        json.dumps(summary, indent=2)
        if args.json
        else f"SFT done: {run.rows} rows ({run.dropped_long} too long), loss "
        f"{summary['first_loss']} -> {summary['last_loss']}; saved to {run.adapter_dir}"
    )
    return 0


def _run_grpo(args: argparse.Namespace) -> int:
    from ptxgym.train.grpo import get_recipe, train_grpo

    _threads(args.threads)
    overrides = parse_sets(args.set)
    for key, value in (
        ("env.tasks", args.tasks),
        ("env.variants", _variants(args.variants)),
        ("env.reward", args.reward),
        ("rollout.max_turns", args.turns),
        ("rollout.credit", args.credit),
        ("env.evaluator", args.evaluator),
        ("optim.max_steps", args.steps),
    ):
        if value is not None:
            overrides[key] = value
    recipe = get_recipe(args.preset, **overrides)
    run = train_grpo(args.model, recipe, args.out, tokenizer=args.tokenizer)
    rewards = [h["reward"] for h in run.log_history if "reward" in h]
    summary = {"adapter": str(run.adapter_dir), "steps": len(rewards), "rewards": rewards, **run.metrics}
    print(
        json.dumps(summary, indent=2)
        if args.json
        else f"GRPO done: {len(rewards)} steps, mean reward per step {rewards}; saved to {run.adapter_dir}"
    )
    return 0
