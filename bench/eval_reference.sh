#!/usr/bin/env bash
# The main job on a GPU machine: `ptxgym eval` with the reference policy (the shipped expert kernels) on the
# primary tasks (the five sm_90a tasks) through the local GPU evaluator, then `ptxgym report`.
#
# Usage (repo root, on a machine with an H100/H200):
#   bash bench/eval_reference.sh [OUTDIR] [TURNS] [TRAJECTORIES]
# Defaults: OUTDIR bench/results/eval_reference, 1 turn, 1 trajectory. The reference policy answers every
# turn with the same kernel, so TURNS > 1 only re-measures it (a repeatability check).
# Writes: OUTDIR/gpu.txt, OUTDIR/run/ (trajectories.jsonl, events.jsonl, run.json, summary.json),
# OUTDIR/result.json (the `--json` result), OUTDIR/summary.txt (the table), OUTDIR/report/ (summary.md,
# summary.json, fast_p.png when matplotlib is installed), OUTDIR/eval.log (progress and warnings).
# Resumable: run it again with the same OUTDIR after an interruption and it continues (--resume).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-bench/results/eval_reference}")
turns=${2:-1}
trajs=${3:-1}
tasks=${TASKS:-sm90a}          # e.g. TASKS=Gemm-sm90a,MhaFwd-sm90a
evaluator=${EVALUATOR:-local}  # EVALUATOR=none: a CPU smoke run of this script (no correctness or speed)
mkdir -p "$out"
export PYTHONUNBUFFERED=1

# Machines without network: install ptxgym and its light dependencies from the carried wheels (.whl/).
if ! (cd / && python3 -c "import ptxgym.envs, gymnasium") 2>/dev/null; then
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
  fi
  (cd / && python3 -c "import ptxgym.envs, gymnasium") || { echo "ptxgym is not importable here" >&2; exit 2; }
fi
# Python runs from / so the source folders here (ptxgym/, envs/ ...) cannot shadow the installed package.
ptxgym() { (cd / && python3 -c "import sys; from ptxgym.cli.main import main; sys.exit(main(sys.argv[1:]))" "$@"); }

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv 2>&1 \
  || echo "no nvidia-smi here"; } | tee "$out/gpu.txt"
resume=()
[ -s "$out/run/trajectories.jsonl" ] && resume=(--resume)
ptxgym eval --policy reference --tasks "$tasks" --variants none --turns "$turns" --trajectories "$trajs" \
  --concurrency 2 --evaluator "$evaluator" --out "$out/run" --json "${resume[@]}" >"$out/result.json" 2>"$out/eval.log"
rc=$?
tail -n 20 "$out/eval.log"
plots=()
python3 -c "import matplotlib" 2>/dev/null || plots=(--no-plots)
ptxgym report "$out/run" --out "$out/report" "${plots[@]}" | tee "$out/summary.txt"
echo "ptxgym eval exit status: $rc (0 complete, 3 stopped early: rerun to resume, 2 usage error)"
exit $rc
