"""Training: SFT datasets from trajectories, SFT with TRL + PEFT LoRA, GRPO with rewards from the env.

| module | what |
| --- | --- |
| ``sft_examples`` | ``SftExample`` (last assistant message supervised), save/load as JSONL and HF datasets |
| ``episodes`` | reading ``TurnRecord`` files: grouping, task prompt, feedback text after a turn |
| ``selection`` | normalised kernel hash (dedup), per-task caps (balance) |
| ``teachers`` | ``RepairTeacher``, ``ReasoningTeacher``: any policy; repairs verified by the pipeline |
| ``kernelgen`` | KernelGen rows: task -> reasoning + correct kernel (from trajectories or kernel files) |
| ``fixit`` | Fixit rows: task, failed kernel, feedback -> rationale + repaired kernel |
| ``sft`` | ``train_sft`` with the PTXBench paper's recipe as the default preset |
| ``env_reward`` | GRPO prompts from the catalog; async batched reward function through the pipeline |
| ``rollout`` | multi-turn ``rollout_func``: plays the env, masks env tokens, per-turn discounted credit |
| ``grpo`` | ``train_grpo`` (TRL GRPOTrainer, vLLM when available, LoRA) |
| ``probe`` | first-turn compile/correct rates of a policy through the env |
| ``tiny`` | a tiny local model and tokenizer for CPU smoke runs (no download) |

CLI: ``ptxgym train data|tiny|sft|grpo``. Nothing here imports torch, transformers, trl or datasets at
import time; they load inside the functions that need them (install ``ptxgym[train]``).
"""

__all__: list[str] = []  # a folder of modules: import them by name
