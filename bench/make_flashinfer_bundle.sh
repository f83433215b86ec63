#!/usr/bin/env bash
# Build .fibundle/ (ignored; carried to the GPU machine, which has no network) for bench/carried_flashinfer.sh:
# FlashInfer 0.7.4 trimmed to what ptxgym's GQA baselines use, with their kernel modules precompiled for
# sm_90a, as one tar.xz, plus the ninja wheel (for bench/flashinfer_aot.py install-missing on the device).
# The flashinfer-python wheel is 101 MB (over the device's 64 MiB carry limit) and compiles every kernel
# module with nvcc on first use (minutes each). The bundle keeps:
#   * the Python modules `import flashinfer.prefill, flashinfer.decode` loads: every top-level module and
#     the subpackages in KEEP (not experimental, moe, comm, cake_*, gemm, ... nor the 451 MB data/), with
#     a two-line __init__ (the full one imports every subpackage);
#   * data/aot/<module>/<module>.so: the two modules the wrappers ask for (bench/flashinfer_aot.py MODULES,
#     FlashInfer's own ahead-of-time location: loaded without sources, ninja or nvcc);
#   * the sources and headers compiling those two modules reads (bench/flashinfer_aot.py sources, and
#     the curand headers where they were fetched), so the device can JIT them itself if the names ever
#     disagree (install-missing).
# Needs nvcc 13 (a CUDA 13.0 toolkit; curand headers are fetched from the nvidia-curand wheel and the
# libcuda stub is ptxgym's own where the toolkit has none), ninja, ptxgym importable, torch (CPU is
# enough), apache-tvm-ffi, and network for pip download. Compiling the FA3 prefill module took ~40 min on
# 2 busy cores (the decode module ~3 min). Run from anywhere; the repository root is found.
# Reuse a download / an unpacked copy / a build directory: FI_WHEEL_DIR, FI_SRC, FI_WORKSPACE.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
grep -qx "/.fibundle/" .gitignore 2>/dev/null || echo "/.fibundle/" >> .gitignore
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=0.7.4
wheels=${FI_WHEEL_DIR:-$work/wheels}
src=${FI_SRC:-$work/src}
export FLASHINFER_WORKSPACE_BASE=${FI_WORKSPACE:-$work/ws}
export FLASHINFER_CUDA_ARCH_LIST=9.0a CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} MAX_JOBS=${MAX_JOBS:-2}
KEEP="autotuner cudnn cute_dsl cutile jit mla quantization trace"

ls "$wheels"/flashinfer_python-$version-*.whl >/dev/null 2>&1 \
  || python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "flashinfer-python==$version"
if [ ! -d "$src/flashinfer" ]; then
  mkdir -p "$src"
  unzip -q "$wheels"/flashinfer_python-$version-*.whl 'flashinfer/*' -d "$src"
fi
cat > "$src/flashinfer/__init__.py" <<'EOF'
"""FlashInfer, trimmed by ptxgym's bench/make_flashinfer_bundle.sh to what its GQA baselines use.

Only the attention wrappers' modules are here (import ``flashinfer.prefill`` and ``flashinfer.decode``);
the full package's top-level re-exports are not. Kernels: ``data/aot`` (precompiled for sm_90a).
"""

from .version import __version__ as __version__
EOF

if [ ! -f "$CUDA_HOME/include/curand_kernel.h" ]; then  # cutlass's headers include it; minimal toolkits lack it
  curand=${FI_CURAND_INCLUDE:-}
  if [ -z "$curand" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$work/curand" nvidia-curand
    unzip -q "$work"/curand/nvidia_curand-*.whl 'nvidia/*/include/*' -d "$work/curand"
    curand=$(dirname "$(find "$work/curand" -name curand_kernel.h | head -1)")
  fi
  export FLASHINFER_EXTRA_CUDAFLAGS="-I$curand"
fi

if [ ! -f "$CUDA_HOME/lib64/stubs/libcuda.so" ]; then  # the link names -lcuda; use ptxgym's generated stub
  stub=$(python3 -c "from ptxgym.cpu.toolchain import find_toolchain; print(find_toolchain().libcuda_dir)")
  export FLASHINFER_EXTRA_LDFLAGS="-L$stub"
fi

export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
stage=$work/stage
mkdir -p "$stage"
python3 bench/flashinfer_aot.py specs
python3 bench/flashinfer_aot.py build "$stage/flashinfer/data/aot"
(cd "$src" && { find flashinfer -maxdepth 1 -type f -name "*.py"
  for d in $KEEP; do find "flashinfer/$d" -type f \( -name "*.py" -o -name "*.json" -o -name "*.jinja" \); done
  (cd "$root" && python3 bench/flashinfer_aot.py sources); } | sort -u > "$work/files.txt")
tar -cf - -C "$src" -T "$work/files.txt" | tar -xf - -C "$stage"
if [ -n "${FLASHINFER_EXTRA_CUDAFLAGS:-}" ]; then  # the curand headers, for a device toolkit without them
  mkdir -p "$stage/flashinfer/data/curand/include"
  cp "${FLASHINFER_EXTRA_CUDAFLAGS#-I}"/curand*.h "$stage/flashinfer/data/curand/include/"
fi
mkdir -p .fibundle
rm -f .fibundle/flashinfer-*.tar.xz
tar -cJf ".fibundle/flashinfer-$version-sm90a.tar.xz" -C "$stage" flashinfer
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .fibundle ninja
du -sh .fibundle/*
