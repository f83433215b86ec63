#!/usr/bin/env bash
# Make ptxgym importable on a GPU machine without network: install the wheels carried in .whl/ (gymnasium,
# pydantic, apache-tvm-ffi, cupti-python, ...) and ptxgym itself (editable, no build isolation).
# Usage (repo root): bash bench/carried_install.sh   (a no-op where ptxgym already imports)
cd "$(dirname "$0")/.." || exit 2
if ! (cd / && python3 -c "import ptxgym.envs, gymnasium, tvm_ffi, cupti") 2>/dev/null; then
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
  fi
  (cd / && python3 -c "import ptxgym.envs, gymnasium, tvm_ffi") || { echo "ptxgym is not importable here" >&2; exit 2; }
fi
