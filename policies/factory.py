"""Building a policy from a plain, serialisable config (what ``ptxgym eval --policy ...`` records)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ptxgym.policies.base import Policy
from ptxgym.policies.history import HistoryMode
from ptxgym.policies.sampling import SamplingParams, get_preset
from ptxgym.policies.serve import DEFAULT_PORTS
from ptxgym.records.tasks import Task


class PolicyConfig(BaseModel):
    """Everything needed to rebuild a policy (no secrets: the API key is passed separately)."""

    model_config = ConfigDict(frozen=True)

    kind: str = Field("reference", description="A name of POLICY_KINDS (the registry below).")
    model: str | None = Field(None, description="Served model name, or model path (transformers).")
    base_url: str | None = Field(None, description="Server URL; default http://127.0.0.1:<engine port>/v1.")
    preset: str = Field("default", description="Sampling preset name (qwen-paper, greedy, default).")
    sampling: dict[str, Any] = Field(default_factory=dict, description="Overrides on top of the preset.")
    history: HistoryMode = HistoryMode.FULL
    max_context_tokens: int | None = None
    lora: str | None = Field(None, description="Adapter name (servers) or adapter directory (transformers).")
    enable_thinking: bool | None = None
    tokenizer: str | None = Field(None, description="Tokenizer for token counting / the local model.")
    replay_files: list[str] = Field(default_factory=list)
    replay_trajectory: str | None = None
    device: str | None = None
    seed: int | None = None
    transport: str = "auto"
    timeout_s: float = 3600.0
    retries: int = Field(6, ge=1, description="Tries per server request (the first included).")
    retry_delay_s: float = Field(1.0, ge=0, description="Backoff before the second try; doubles after.")

    def sampling_params(self) -> SamplingParams:
        """The preset with the overrides applied."""
        return get_preset(self.preset).merged(**self.sampling)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in POLICY_KINDS:
            raise ValueError(f"unknown policy kind {kind!r}; kinds: {', '.join(POLICY_KINDS)}")
        return kind


Builder = Callable[[PolicyConfig, Sequence[Task], str], Policy]


def _reference(cfg: PolicyConfig, tasks: Sequence[Task], api_key: str) -> Policy:
    from ptxgym.policies.reference import ReferencePolicy

    return ReferencePolicy(tasks=tasks)


def _replay(cfg: PolicyConfig, tasks: Sequence[Task], api_key: str) -> Policy:
    from ptxgym.policies.replay import ReplayPolicy

    if not cfg.replay_files:
        raise ValueError("the replay policy needs at least one trajectory file (--replay FILE)")
    return ReplayPolicy(cfg.replay_files, trajectory_id=cfg.replay_trajectory)


def _model_name(cfg: PolicyConfig) -> str:
    if not cfg.model:
        raise ValueError(f"the {cfg.kind} policy needs --model")
    return cfg.model


def local_model_dir(name: str, flag: str = "--model") -> str:
    """The local directory of a model (or tokenizer): ``name`` itself, or its Hugging Face cache snapshot.

    Nothing is downloaded and the Hub is never asked, so a mistyped name fails at once (``ValueError``
    naming ``flag``) instead of after minutes of Hub retries, and a cached model loads from its directory
    with no network. A name that looks like a path (``/``, ``./``, ``~``) must be a directory.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise ValueError(f"{flag} {name!r} is a file; pass the model's directory (the one with config.json)")
    if name.startswith(("/", "./", "../", "~")) or name.count("/") > 1:
        raise ValueError(f"{flag} {name!r}: no such directory")
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(name, local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable offline
        raise ValueError(
            f"{flag} {name!r} is neither a local directory nor a model in the Hugging Face cache "
            f"({type(exc).__name__}; nothing is downloaded at run time); pass a model directory, or "
            f"download it first (`huggingface-cli download {name}`)"
        ) from None


def check_policy_config(cfg: PolicyConfig) -> None:
    """Fail now, with a clear ``ValueError``, on a config that cannot build its policy (before any work)."""
    if cfg.kind == "replay":
        missing = [f for f in cfg.replay_files if not Path(f).is_file()]
        if not cfg.replay_files or missing:
            raise ValueError(
                f"--replay: trajectory file(s) not found: {', '.join(missing) or '(none given)'}"
            )
    elif cfg.kind not in ("reference",):
        _model_name(cfg)
    if cfg.tokenizer:  # a token counter for servers, the tokenizer for transformers
        local_model_dir(cfg.tokenizer, "--tokenizer")
    if cfg.kind == "transformers":
        local_model_dir(_model_name(cfg))
        if cfg.lora and not Path(cfg.lora).expanduser().is_dir():
            raise ValueError(f"--lora {cfg.lora!r}: no such adapter directory (for --policy transformers)")


def _transformers(cfg: PolicyConfig, tasks: Sequence[Task], api_key: str) -> Policy:
    from ptxgym.policies.transformers_policy import TransformersConfig, TransformersPolicy

    config = TransformersConfig(
        model=local_model_dir(_model_name(cfg)),
        tokenizer=local_model_dir(cfg.tokenizer, "--tokenizer") if cfg.tokenizer else None,
        name=cfg.model,
        lora=cfg.lora,
        sampling=cfg.sampling_params(),
        history=cfg.history,
        max_context_tokens=cfg.max_context_tokens,
        device=cfg.device,
        enable_thinking=cfg.enable_thinking,
        seed=cfg.seed,
    )
    return TransformersPolicy(config)


def _served(cfg: PolicyConfig, tasks: Sequence[Task], api_key: str) -> Policy:
    from ptxgym.policies.openai_chat import OpenAIChatConfig, OpenAIChatPolicy, RetryPolicy

    engine = None if cfg.kind == "openai" else cfg.kind
    config = OpenAIChatConfig(
        model=_model_name(cfg),
        base_url=cfg.base_url or f"http://127.0.0.1:{DEFAULT_PORTS.get(engine or 'vllm')}/v1",
        sampling=cfg.sampling_params(),
        history=cfg.history,
        max_context_tokens=cfg.max_context_tokens,
        lora=cfg.lora,
        engine=engine,
        enable_thinking=cfg.enable_thinking,
        tokenizer=local_model_dir(cfg.tokenizer, "--tokenizer") if cfg.tokenizer else None,
        transport=cfg.transport,
        timeout_s=cfg.timeout_s,
        retry=RetryPolicy(attempts=cfg.retries, base_delay_s=cfg.retry_delay_s),
    )
    return OpenAIChatPolicy(config, api_key=api_key)


#: The one place a policy kind is added: name -> builder (a PolicyConfig to a ready policy). The CLI's
#: ``--policy`` choices, ``PolicyConfig.kind`` validation and ``build_policy`` all read it.
POLICY_BUILDERS: dict[str, Builder] = {
    "reference": _reference,
    "replay": _replay,
    "openai": _served,
    "vllm": _served,
    "sglang": _served,
    "transformers": _transformers,
}
POLICY_KINDS: tuple[str, ...] = tuple(POLICY_BUILDERS)


def build_policy(cfg: PolicyConfig, tasks: Sequence[Task] = (), api_key: str = "EMPTY") -> Policy:
    """A ready policy for ``cfg`` (the reference policy checks it has a solution for every task)."""
    return POLICY_BUILDERS[cfg.kind](cfg, tasks, api_key)
