"""The wheel ships the native module and kernels/ as mia_fast.kernels; the installed package imports both."""

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_installed_package_has_native_core_and_kernels():
    native = importlib.import_module("mia_fast._native")
    kernels = importlib.import_module("mia_fast.kernels")
    assert hasattr(native, "count_tokens")
    assert Path(kernels.__file__).name == "__init__.py"


@pytest.mark.slow
def test_wheel_layout(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "-q"],
        capture_output=True, text=True,
    )
    assert build.returncode == 0, build.stderr
    wheel = next(tmp_path.glob("mia_fast-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "mia_fast/kernels/__init__.py" in names
    assert "mia_fast/cli.py" in names
    assert any(n.startswith("mia_fast/_native") and n.endswith(".so") for n in names)
    assert not any(n.startswith("kernels/") for n in names)
