"""``ptxgym serve``: start a vLLM or SGLang OpenAI-compatible server with the recommended flags.

Examples::

    ptxgym serve --engine vllm --model Qwen/Qwen3-8B --max-model-len 131072 --dry-run
    ptxgym serve --engine sglang --model /models/qwen3-8b --lora fixit=/adapters/fixit --tp 2

Then evaluate against it: ``ptxgym eval --policy vllm --model Qwen/Qwen3-8B --preset qwen-paper ...``
(with a LoRA adapter: ``--lora fixit``). Arguments after ``--`` go to the engine unchanged.
Neither engine runs on a CPU-only machine; ``--dry-run`` prints the command without starting it.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

from ptxgym.cli.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` parser."""
    p = sub.add_parser(
        "serve",
        help="start a vLLM/SGLang server for a model (or print the command)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--engine", required=True, choices=["vllm", "sglang"])
    p.add_argument("--model", required=True, help="hub name or local directory of the base model")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8000 vLLM, 30000 SGLang)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs")
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context window (the qwen-paper preset needs about 131072)",
    )
    p.add_argument("--gpu-memory", type=float, default=None, help="GPU memory share (0-1)")
    p.add_argument(
        "--reasoning-parser",
        default="auto",
        help="reasoning parser; auto picks qwen3 / deepseek_r1 from the model name; 'none' for off",
    )
    p.add_argument(
        "--lora", action="append", default=[], metavar="NAME=PATH", help="LoRA adapter (repeatable)"
    )
    p.add_argument("--max-lora-rank", type=int, default=None, help="largest adapter rank")
    p.add_argument("--max-loras", type=int, default=None, help="adapters per batch")
    p.add_argument("--served-name", default=None, help="name clients use for the base model")
    p.add_argument("--dry-run", action="store_true", help="print the command and exit")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="-- then arguments passed to the engine")
    p.set_defaults(func=run)


def _loras(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise ValueError(f"--lora must be NAME=PATH, got {item!r}")
        out[name.strip()] = path.strip()
    return out


def run(args: argparse.Namespace) -> int:
    """Print (dry run) or exec the server command; return its exit status."""
    from ptxgym.policies.serve import ServeSpec, engine_missing, serve_command

    extra = [a for a in args.extra if a != "--"] if args.extra else []
    spec = ServeSpec(
        engine=args.engine,
        model=args.model,
        host=args.host,
        port=args.port,
        tp=args.tp,
        max_model_len=args.max_model_len,
        gpu_memory=args.gpu_memory,
        reasoning_parser=None if args.reasoning_parser == "none" else args.reasoning_parser,
        loras=_loras(args.lora),
        max_lora_rank=args.max_lora_rank,
        max_loras=args.max_loras,
        served_name=args.served_name,
        extra_args=extra,
    )
    cmd = serve_command(spec, python=sys.executable)
    line = shlex.join(cmd)
    if args.dry_run:
        print(line)
        print(
            f"# then: ptxgym eval --policy {spec.engine} --model {spec.served_name or spec.model} "
            f"--base-url {spec.base_url} ...",
            file=sys.stderr,
        )
        return 0
    missing = engine_missing(spec.engine)
    if missing:
        raise UsageError(f"{missing}; the command would be: {line}")
    print(f"ptxgym serve: starting {line}\n  clients: --base-url {spec.base_url}", file=sys.stderr)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130
