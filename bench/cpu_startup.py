"""Wall time of ``gymnasium.make`` + ``reset`` with the default evaluator, each in a fresh interpreter.

On a machine without a GPU the default evaluator (``auto``) must decide that there is none without
importing torch (it asks the NVIDIA driver library directly), so making an env takes well under a second.
Prints one line per run and the median, and whether torch was imported. Usage::

    python bench/cpu_startup.py [--runs 5] [--task Gemm-sm90a]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import gymnasium
import ptxgym
t1 = time.perf_counter()
env = gymnasium.make(ptxgym.get_task(sys.argv[1]).env_id)
t2 = time.perf_counter()
obs, info = env.reset(seed=0)
t3 = time.perf_counter()
ev = env.unwrapped.evaluator
print(json.dumps({"import": t1 - t0, "make": t2 - t1, "reset": t3 - t2, "make_reset": t3 - t1,
                  "evaluator": ev.name, "reason": getattr(ev, "reason", None),
                  "torch_imported": "torch" in sys.modules, "prompt_chars": len(obs["text"])}))
env.close()
"""


def main() -> None:
    """Run the child ``--runs`` times and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--task", default="Gemm-sm90a")
    args = ap.parse_args()
    rows = []
    for i in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, args.task], capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"run {i + 1}: import {row['import']:.3f} s, make {row['make']:.3f} s, "
            f"reset {row['reset']:.3f} s, "
            f"make+reset {row['make_reset']:.3f} s, evaluator {row['evaluator']}, "
            f"torch imported: {row['torch_imported']}"
        )
    med = {k: statistics.median(r[k] for r in rows) for k in ("import", "make", "reset", "make_reset")}
    print(
        f"median of {len(rows)}: import gymnasium+ptxgym {med['import']:.3f} s, gymnasium.make "
        f"{med['make']:.3f} s, reset {med['reset']:.3f} s, make+reset {med['make_reset']:.3f} s"
    )
    print(f"evaluator: {rows[0]['evaluator']} ({rows[0]['reason']})")
    print(f"torch imported in any run: {any(r['torch_imported'] for r in rows)}")
    print(f"prompt characters: {rows[0]['prompt_chars']}; python {platform.python_version()}")
    probe = "import time; t = time.perf_counter(); import torch; torch.cuda.is_available(); "
    probe += "print(time.perf_counter() - t)"
    torch_s = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if torch_s.returncode == 0:
        print(
            "for comparison, what asking torch costs: import torch + cuda.is_available() "
            f"{float(torch_s.stdout):.3f} s"
        )


if __name__ == "__main__":
    main()
