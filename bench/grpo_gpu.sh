#!/usr/bin/env bash
# GPU side of bench/grpo_gpu.py: install the carried wheels (.whl/: trl, datasets and their missing
# dependencies, plus ptxgym's own) on a machine without network, then run the short GRPO bench with the
# local GPU evaluator.
# Usage (repo root, on the GPU machine): bash bench/grpo_gpu.sh OUTDIR [extra bench/grpo_gpu.py args]
# Writes OUTDIR/grpo_gpu.txt (the report), OUTDIR/grpo_gpu.json (per-step record), OUTDIR/grpo_gpu.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?outdir}; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ! python3 -c "import ptxgym, gymnasium, trl, datasets" 2>/dev/null; then
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
  fi
  python3 -c "import ptxgym, gymnasium, trl, datasets" || { echo "trl/datasets/ptxgym not importable" >&2; exit 2; }
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$out/gpu.txt"
python3 bench/grpo_gpu.py --out "$out/grpo_gpu.txt" "$@" 2>&1 | tee "$out/grpo_gpu.log" | grep -v -i "warn"
