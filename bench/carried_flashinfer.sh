#!/usr/bin/env bash
# FlashInfer on a GPU machine without network (source it after bench/carried_install.sh, which installs
# nvidia-ml-py from .whl/: `bash bench/carried_install.sh && source bench/carried_flashinfer.sh`).
# .fibundle/ carries FlashInfer 0.7.4 trimmed to what the GQA baselines use, with their two kernel modules
# precompiled for sm_90a in its data/aot (bench/make_flashinfer_bundle.sh builds it, here with network);
# it is unpacked to /tmp/fisite, put first on PYTHONPATH (the evaluator's workers inherit it), and the ninja
# wheel is installed there only where ninja is missing (bench/flashinfer_aot.py install-missing needs it).
# Then: `python bench/flashinfer_aot.py check` runs the three baselines with FlashInfer's JIT disabled and
# names any module that is not precompiled.
cd "$(dirname "${BASH_SOURCE[0]}")/.." || return 2
site=${FI_SITE:-/tmp/fisite}
bundle=$(ls .fibundle/flashinfer-*.tar.xz 2>/dev/null | tail -1)
if [ -z "$bundle" ]; then
  echo "# no .fibundle/flashinfer-*.tar.xz (carry .fibundle; bench/make_flashinfer_bundle.sh builds it)" >&2
else
  mkdir -p "$site"
  [ -d "$site/flashinfer" ] || tar -xJf "$bundle" -C "$site"
  if ! command -v ninja >/dev/null 2>&1 && ! [ -x "$site/bin/ninja" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .fibundle/ninja-*.whl \
      && echo "# flashinfer: installed ninja into $site"
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
  python3 -c "import flashinfer.prefill, flashinfer.decode, flashinfer as f; print('# flashinfer', f.__version__, \
'from', f.__file__)"
fi
cd - >/dev/null || true
