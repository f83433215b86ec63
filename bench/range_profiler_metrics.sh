#!/usr/bin/env bash
# Build bench/range_profiler_metrics.cc against the toolkit's CUPTI and run it (no GPU needed: the
# profiler host API works from a chip name). Usage: bench/range_profiler_metrics.sh [CHIP] (default GH100).
set -euo pipefail
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=$cuda/lib64
[ -e "$lib/libcupti.so" ] || lib=$cuda/targets/x86_64-linux/lib
[ -e "$lib/libcupti.so" ] || lib=$cuda/extras/CUPTI/lib64
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -std=c++17 -O1 -Wall "$(dirname "$0")/range_profiler_metrics.cc" -I"$cuda/include" \
  -I"$cuda/extras/CUPTI/include" -L"$lib" -lcupti -Wl,-rpath,"$lib" -o "$out/probe"
"$out/probe" "${1:-GH100}"
