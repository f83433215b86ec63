"""Each package's public names (``__all__``): they resolve, and changing them is a deliberate act.

The snapshot below is the public API. Adding or removing a name means editing it here in the same
commit, so that an API change shows up in review.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC: dict[str, list[str]] = {
    "ptxgym": [
        "Feedback", "Stage", "Status", "Task", "Verdict", "__version__", "catalog", "get_task", "make_vec",
    ],
    "ptxgym.records": [
        "ArchSpec", "Definition", "Feedback", "PtxgymError", "Solution", "Stage", "Status", "Task", "Trace",
        "TurnRecord", "UnknownTaskError", "Verdict", "Workload", "__version__", "catalog", "get_arch",
        "get_task", "read_turns", "render_feedback",
    ],
    "ptxgym.confine": [],
    "ptxgym.cpu": [
        "BuildOutcome", "Toolchain", "build_solution", "check_source", "extract_code", "find_toolchain",
        "parse_ptxas_report", "sass_census",
    ],
    "ptxgym.evaluation": [
        "BuiltCandidate", "EvalSettings", "Evaluator", "GpuVerdict", "NullEvaluator", "select_evaluator",
    ],
    "ptxgym.evaluation.trusted": [],
    "ptxgym.evaluation.sandboxed": [],
    "ptxgym.evaluation.runner": [],
    "ptxgym.envs": ["make_vec", "register_envs", "step_many"],
    "ptxgym.knowledge_packs": [
        "PACK_ROOT", "PromptPack", "UnknownVariantError", "ablation_ladder", "count_tokens",
        "default_tokenizer_name", "render_part", "render_variant", "variant_names", "variant_parts",
    ],
    "ptxgym.rewards": [
        "CudaAgentReward", "DrKernelReward", "FastPReward", "KernrlReward", "KevinReward", "LogSpeedupReward",
        "RewardFn", "RewardResult", "SpeedupReward", "StageIndicator", "StagedReward", "TargetBonus",
        "WeightedReward", "discounted_returns", "episode_returns", "parse_spec", "qualifies",
        "register_reward", "resolve_reward", "reward_names", "speedup_of", "staged_reward",
    ],
    "ptxgym.policies": [
        "Action", "ContextOverflowError", "Conversation", "Exchange", "HistoryMode", "MissingSolutionError",
        "OpenAIChatConfig", "OpenAIChatPolicy", "POLICY_BUILDERS", "POLICY_KINDS", "PRESETS", "Policy",
        "PolicyConfig", "PolicyError", "PolicyExhausted", "ReferencePolicy", "ReplayPolicy", "RetryPolicy",
        "SamplingParams", "ServeSpec", "ServerError", "ServerUnavailableError", "TransformersConfig",
        "TransformersPolicy", "build_messages",
        "build_policy", "estimate_tokens", "get_preset", "serve_command",
    ],
    "ptxgym.runner": [
        "EvalConfig", "EvalResult", "Event", "NO_VARIANT", "Progress", "ResumeState", "RunDirError",
        "RunStore", "Runner", "SharedEvaluator", "TrajectoryKey", "TrajectoryResult", "check_variants",
        "default_tasks", "run_eval",
    ],
    "ptxgym.train": [],
    "ptxgym.cli": [],
    "ptxgym.audit": [],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_the_snapshot_and_resolve(package: str) -> None:
    module = importlib.import_module(package)
    names = list(getattr(module, "__all__", None) or [])
    assert hasattr(module, "__all__"), f"{package} defines no __all__"
    assert sorted(names) == sorted(PUBLIC[package]), f"{package}.__all__ changed: update PUBLIC deliberately"
    assert len(set(names)) == len(names), f"{package}.__all__ lists a name twice"
    for name in names:
        assert getattr(module, name, None) is not None, f"{package}.{name} is listed but does not resolve"


def test_every_package_is_in_the_snapshot() -> None:
    import pkgutil

    import ptxgym

    packages = {"ptxgym"} | {m.name for m in pkgutil.walk_packages(ptxgym.__path__, "ptxgym.") if m.ispkg}
    assert packages == set(PUBLIC), f"packages without a snapshot: {sorted(packages - set(PUBLIC))}"
