#!/usr/bin/env bash
# Ray on a GPU machine without network (source it: `source bench/carried_ray.sh`). The ray wheel (79 MB)
# is over the device's 64 MiB carry limit, so .raybundle/ carries a trimmed copy of it (ray 2.60.0, cp312:
# without the Java jars, rllib, data, serve, tune, train, llm and the dashboard's web client, binaries
# stripped; a tar.xz of ~25 MB) and the wheels of ray's base requirements; a requirement is installed
# only where it does not import already. Everything goes to /tmp/raysite, put first on PYTHONPATH.
# bench/make_ray_bundle.sh builds .raybundle/ (here, with network).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || return 2
site=/tmp/raysite
mkdir -p "$site"
declare -A module=(
  [click]=click [msgpack]=msgpack [protobuf]=google.protobuf [jsonschema]=jsonschema
  [jsonschema_specifications]=jsonschema_specifications [referencing]=referencing [rpds_py]=rpds
  [attrs]=attr [filelock]=filelock [pyyaml]=yaml [requests]=requests [charset_normalizer]=charset_normalizer
  [idna]=idna [urllib3]=urllib3 [certifi]=certifi [packaging]=packaging [typing_extensions]=typing_extensions
)
for wheel in .raybundle/*.whl; do
  name=$(basename "$wheel" | cut -d- -f1)
  mod=${module[$name]:-$name}
  if ! python3 -c "import $mod" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" && echo "# ray deps: installed $name"
  fi
done
[ -d "$site/ray" ] || tar -xJf .raybundle/ray_min.tar.xz -C "$site"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import ray; print('# ray', ray.__version__, 'from', ray.__file__)"
cd - >/dev/null || true
