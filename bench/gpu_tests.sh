#!/usr/bin/env bash
# GPU tests on a machine without network: install ptxgym and its missing dependencies from the carried
# wheels (.whl/), print the machine (date, GPU, driver, torch, commit), then run pytest on the `gpu`
# marker with the given arguments. Every line also goes to OUTDIR/gpu_tests.log; OUTDIR/junit.xml lists
# each test's outcome (passed, failed, skipped: a skipped GPU test is reported as skipped, never passed).
# Usage (repo root, on the GPU machine): COMMIT=<sha> bash bench/gpu_tests.sh OUTDIR [pytest args ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?outdir}; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1
bash bench/carried_install.sh || exit 2
{
  echo "# GPU tests: $(date -u +%Y-%m-%dT%H:%MZ), commit ${COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/# GPU: /'
  python3 -c "import torch, platform; print('# torch', torch.__version__, 'python', platform.python_version())"
  echo "# pytest -m gpu $*"
} | tee "$out/gpu_tests.log"
python3 -m pytest -m gpu -rA --durations=15 -p no:cacheprovider --junitxml="$out/junit.xml" "$@" 2>&1 \
  | tee -a "$out/gpu_tests.log"
