"""The command lines that start a vLLM or SGLang OpenAI-compatible server for a policy to talk to.

``serve_command(ServeSpec(...))`` builds the argv; ``ptxgym serve`` prints it (``--dry-run``) or runs it.
Flags follow the engines' documented server arguments:

- vLLM, ``vllm serve MODEL``: ``--host --port`` (default port 8000), ``--tensor-parallel-size N``,
  ``--max-model-len L``, ``--gpu-memory-utilization F``, ``--reasoning-parser qwen3`` (response field
  ``reasoning``), LoRA ``--enable-lora --lora-modules name=path ... --max-lora-rank R --max-loras K``;
  a request selects an adapter with ``model: <adapter name>``.
- SGLang, ``python -m sglang.launch_server --model-path MODEL``: ``--host --port`` (default 30000),
  ``--tp-size N``, ``--context-length L``, ``--mem-fraction-static F``, ``--reasoning-parser qwen3``
  (response field ``reasoning_content``), LoRA ``--enable-lora --lora-paths name=path ...
  --max-lora-rank R --max-loras-per-batch K``; a request selects an adapter with
  ``model: <base model>:<adapter name>``.

The reasoning parser is chosen from the model name (Qwen3-family names get ``qwen3``; DeepSeek-R1
gets ``deepseek_r1`` / ``deepseek-r1``) unless given. The ``qwen-paper`` sampling preset asks for up to
81,920 new tokens, so serve such a model with a context of at least about 128k (``--max-model-len
131072``) when the model supports it. Neither engine can run on the CPU build machines: only the
command built here is tested there.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

ENGINES = ("vllm", "sglang")
DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}
#: vLLM accepts only these LoRA ranks for --max-lora-rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class ServeSpec(BaseModel):
    """What to serve and how."""

    model_config = ConfigDict(frozen=True)

    engine: str = Field(description="vllm or sglang.")
    model: str = Field(description="Hub name or local directory of the base model.")
    host: str = "127.0.0.1"
    port: int | None = Field(None, description="Default: 8000 (vLLM), 30000 (SGLang).")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree (GPUs per replica).")
    max_model_len: int | None = Field(None, ge=1, description="Context window; None lets the engine choose.")
    gpu_memory: float | None = Field(None, gt=0, le=1, description="GPU memory share (weights + KV).")
    reasoning_parser: str | None = Field("auto", description="'auto' (from the model name), a name, or None.")
    loras: dict[str, str] = Field(default_factory=dict, description="Adapter name -> adapter directory.")
    max_lora_rank: int | None = None
    max_loras: int | None = Field(None, ge=1, description="Adapters in one batch.")
    served_name: str | None = Field(None, description="Name clients use for the base model.")
    extra_args: list[str] = Field(default_factory=list, description="Passed through to the engine unchanged.")

    @property
    def resolved_port(self) -> int:
        """The port the server will listen on."""
        return self.port or DEFAULT_PORTS[self.engine]

    @property
    def base_url(self) -> str:
        """The URL a policy should use."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.resolved_port}/v1"


def reasoning_parser_for(model: str, engine: str) -> str | None:
    """The reasoning parser an engine needs for a model family, from its name (None when unknown)."""
    name = Path(model).name.lower()
    if re.search(r"qwq|deepseek-r1|r1-distill", name):
        return "deepseek_r1" if engine == "vllm" else "deepseek-r1"
    if "qwen3" in name:
        return "qwen3"
    return None


def serve_command(spec: ServeSpec, python: str = "python") -> list[str]:
    """argv that starts the server of ``spec.engine``."""
    if spec.engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {spec.engine!r}")
    if spec.engine == "vllm" and spec.max_lora_rank is not None and spec.max_lora_rank not in VLLM_LORA_RANKS:
        raise ValueError(f"vLLM accepts --max-lora-rank in {VLLM_LORA_RANKS}, got {spec.max_lora_rank}")
    for name, path in spec.loras.items():
        if not name or "=" in name or ":" in name:
            raise ValueError(f"LoRA adapter name {name!r} must be non-empty without '=' or ':'")
        if not path:
            raise ValueError(f"LoRA adapter {name!r} has no path")
    parser = (
        reasoning_parser_for(spec.model, spec.engine)
        if spec.reasoning_parser == "auto"
        else spec.reasoning_parser
    )
    build = _vllm if spec.engine == "vllm" else _sglang
    return build(spec, parser, python) + list(spec.extra_args)


def _vllm(spec: ServeSpec, parser: str | None, python: str) -> list[str]:
    cmd = ["vllm", "serve", spec.model, "--host", spec.host, "--port", str(spec.resolved_port)]
    if spec.served_name:
        cmd += ["--served-model-name", spec.served_name]
    if spec.tp > 1:
        cmd += ["--tensor-parallel-size", str(spec.tp)]
    if spec.max_model_len:
        cmd += ["--max-model-len", str(spec.max_model_len)]
    if spec.gpu_memory:
        cmd += ["--gpu-memory-utilization", str(spec.gpu_memory)]
    if parser:
        cmd += ["--reasoning-parser", parser]
    if spec.loras:
        cmd += ["--enable-lora", "--lora-modules", *(f"{k}={v}" for k, v in spec.loras.items())]
        if spec.max_lora_rank:
            cmd += ["--max-lora-rank", str(spec.max_lora_rank)]
        if spec.max_loras:
            cmd += ["--max-loras", str(spec.max_loras)]
    return cmd


def _sglang(spec: ServeSpec, parser: str | None, python: str) -> list[str]:
    cmd = [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        spec.model,
        "--host",
        spec.host,
        "--port",
        str(spec.resolved_port),
    ]
    if spec.served_name:
        cmd += ["--served-model-name", spec.served_name]
    if spec.tp > 1:
        cmd += ["--tp-size", str(spec.tp)]
    if spec.max_model_len:
        cmd += ["--context-length", str(spec.max_model_len)]
    if spec.gpu_memory:
        cmd += ["--mem-fraction-static", str(spec.gpu_memory)]
    if parser:
        cmd += ["--reasoning-parser", parser]
    if spec.loras:
        cmd += ["--enable-lora", "--lora-paths", *(f"{k}={v}" for k, v in spec.loras.items())]
        if spec.max_lora_rank:
            cmd += ["--max-lora-rank", str(spec.max_lora_rank)]
        if spec.max_loras:
            cmd += ["--max-loras-per-batch", str(spec.max_loras)]
    return cmd


def engine_missing(engine: str) -> str | None:
    """None when the engine can be started here, else what to install."""
    import importlib.util
    import shutil

    if engine == "vllm" and shutil.which("vllm") is None and importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed here (pip install 'ptxgym[vllm]', on a machine with an NVIDIA GPU)"
    if engine == "sglang" and importlib.util.find_spec("sglang") is None:
        return "SGLang is not installed here (pip install 'ptxgym[sglang]', on a machine with an NVIDIA GPU)"
    return None
