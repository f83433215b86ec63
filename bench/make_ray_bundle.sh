#!/usr/bin/env bash
# Build .raybundle/ (ignored; carried to the GPU machine, which has no network) for bench/carried_ray.sh:
# ray 2.60.0 for CPython 3.12 without the Java jars, rllib, data, serve, tune, train, llm and the dashboard's
# web client, binaries stripped, as a tar.xz (~25 MB; the wheel is 79 MB, over the device's 64 MiB carry
# limit), plus the wheels of ray's base requirements. Run here, in the repository root, with network.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.raybundle/" .git/info/exclude 2>/dev/null || echo "/.raybundle/" >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux1_x86_64)
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$1" "$2"; }
get "$work" ray==2.60.0
unzip -q "$work"/ray-*.whl -d "$work/x"
(cd "$work/x/ray" && rm -rf jars rllib data serve tune train llm dashboard/client)
strip --strip-unneeded "$work/x/ray/_raylet.so" "$work/x/ray/core/src/ray/raylet/raylet" \
  "$work/x/ray/core/src/ray/gcs/gcs_server" || true
mkdir -p .raybundle
tar -cJf .raybundle/ray_min.tar.xz -C "$work/x" .
for p in click msgpack protobuf jsonschema jsonschema-specifications referencing rpds-py attrs filelock pyyaml \
  requests charset-normalizer idna urllib3 certifi packaging typing-extensions; do
  get .raybundle "$p"
done
du -sh .raybundle
