#!/usr/bin/env bash
# Every subpackage imports from the repository root with no install, after a regular install and after an
# editable install, and from elsewhere after either install (issue: a regular install used to be shadowed
# by the source folder). Runs in a throw-away venv holding only the core dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$(mktemp -d)/venv
python -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "pydantic>=2.6" "gymnasium>=1.0" "numpy>=1.24" "apache-tvm-ffi>=0.1.9,<0.2"
check() {  # $1: label, $2: working directory
    echo "== $1 (cwd $2)"
    # -c puts the working directory first on sys.path, as for a user typing python there.
    (cd "$2" && "$PY" -c "import runpy; runpy.run_path('$ROOT/.ci/import_all.py', run_name='__main__')")
}
check "no install" "$ROOT"
"$PY" -m pip install -q --no-deps --no-build-isolation "$ROOT" 2>/dev/null || "$PY" -m pip install -q --no-deps "$ROOT"
check "regular install" "$ROOT"
check "regular install" /
"$PY" -m pip uninstall -q -y ptxgym
"$PY" -m pip install -q --no-deps -e "$ROOT"
check "editable install" "$ROOT"
check "editable install" /
rm -rf "$(dirname "$VENV")" "$ROOT/build"
