#!/usr/bin/env bash
# Fetch the wheels the GPU machine lacks into .whl/ (git-ignored; carried with run(carry=[".whl"]) and
# installed there by bench/carried_install.sh). The GPU image holds torch, numpy, cuda-bindings and the
# CUDA 13.0 libraries but not ptxgym's light dependencies, nor cupti-python. Versions are this machine's
# where it has them (the tests ran with those), else the newest of the CUDA 13.0 line.
# Usage (repo root, a machine with the package registry): bash bench/make_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ver() { python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null || echo "$2"; }
pins=(
  "pydantic==$(ver pydantic 2.13.4)" "pydantic-core==$(ver pydantic-core 2.46.4)"
  "annotated-types==$(ver annotated-types 0.7.0)" "typing-inspection==$(ver typing-inspection 0.4.2)"
  "gymnasium==$(ver gymnasium 1.4.0)" "farama-notifications==$(ver farama-notifications 0.0.6)"
  "apache-tvm-ffi==$(ver apache-tvm-ffi 0.1.15.post2)"
  "cupti-python==13.0.1" "nvtx==$(ver nvtx 0.2.17)"
)
mkdir -p .whl
for pin in "${pins[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$pin"
done
ls -1 .whl; du -sh .whl
