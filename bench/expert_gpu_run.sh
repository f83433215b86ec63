#!/bin/bash
# GPU side of bench/expert_bench.py: check + time every prebuilt bench/build/gemm_*.so (built on the
# CPU host with `python bench/expert_bench.py build`), then an Nsight Compute executed-instruction
# check of the first one. Rebuilds on the device with its nvcc if a prebuilt object does not load.
# Usage (repo root, on the GPU machine): bash bench/expert_gpu_run.sh OUTDIR [SO ...]
set -o pipefail
out=${1:?outdir}; shift
sos=("$@"); [ ${#sos[@]} -eq 0 ] && sos=(bench/build/gemm_*.so)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$out/gpu.txt"
if ! python3 -c "import tvm_ffi, sys; tvm_ffi.load_module(sys.argv[1])" "${sos[0]}" 2>"$out/load_err.txt"; then
  echo "prebuilt object does not load here; rebuilding on the device"; cat "$out/load_err.txt"
  inc=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_include_path())")
  lib=$(python3 -c "import tvm_ffi.libinfo as l, os; print(os.path.dirname(l.find_libtvm_ffi()))")
  for so in "${sos[@]}"; do
    name=$(basename "$so" .so); flags=$(python3 bench/expert_bench.py flags "${name#gemm_}")
    nvcc -O3 -shared -Xcompiler -fPIC -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I"$inc" \
      -Iknowledge_packs/sm90a/headers $flags knowledge_packs/sm90a/solutions/Gemm.cu -o "$so" -L"$lib" -ltvm_ffi &
  done; wait
fi
python3 bench/expert_bench.py run "${sos[@]}" --json "$out/results.json" 2>&1 | tee "$out/run.log"
python3 bench/expert_bench.py ncu "${sos[0]}" --csv "$out/ncu.csv" 2>&1 | tail -5 | tee "$out/ncu.log"
