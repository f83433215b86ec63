#!/usr/bin/env bash
# A newcomer's first hour, timed: the README's commands in a fresh virtual environment on this machine.
# Prints one line per command (wall seconds, exit status) and writes them to OUT (default
# bench/results/newcomer_<date>.txt). Run from the repository root: bash bench/newcomer.sh [OUT]
set -uo pipefail
ROOT=$(pwd)
OUT=$(realpath -m "${1:-bench/results/newcomer_$(date +%F).txt}")
WORK=$(mktemp -d)
VENV=$WORK/venv
python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
{
    echo "# newcomer timings, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), $(nproc) cores, $(python --version)"
    echo "# load average at start: $(cut -d" " -f1-3 /proc/loadavg)"
    echo "# seconds  exit  command"
} >"$OUT"
step() {  # step LABEL COMMAND...
    local label=$1; shift
    local t0; t0=$(date +%s.%N)
    "$@" >"$WORK/$label.log" 2>&1
    local rc=$?
    local dt; dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):8.1f}')" "$t0" "$(date +%s.%N)")
    echo "$dt  $rc  $label: $*" | tee -a "$OUT"
    grep -v 'WARNING: Location' "$WORK/$label.log" | tail -n 3 | sed 's/^/#     /' >>"$OUT"
}
cd "$WORK" || exit 1
step install_core python -m pip install -q -e "$ROOT"
step make_reset python -c "import time; t=time.perf_counter(); import gymnasium, ptxgym; env=gymnasium.make('ptxgym/Gemm-sm90a-v0'); env.reset(seed=0); print(f'make+reset {time.perf_counter()-t:.2f} s, evaluator {env.unwrapped.evaluator.name}')"
step main_job_cpu ptxgym eval --policy reference --turns 1 --out runs/reference --quiet
step report ptxgym report runs/reference
step install_torch_cpu python -m pip install -q torch==2.13.0
step install_dev python -m pip install -q -e "$ROOT[dev]"
step train_data ptxgym train data solutions --arch sm_90a --out data/experts
step train_tiny ptxgym train tiny --out models/tiny --tasks Gemm-sm90a
step train_sft_smoke ptxgym train sft --model models/tiny --data data/experts --out runs/sft --preset smoke
step train_grpo_smoke ptxgym train grpo --model models/tiny --out runs/grpo --preset smoke --tasks Gemm-sm90a
cd "$ROOT" || exit 1
step tests_fast python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not slow"
step tests_full python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile
deactivate
rm -rf "$WORK"
echo "wrote $OUT"
