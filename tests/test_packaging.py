"""The install exposes only mia_fast (with kernels/ as mia_fast.kernels and the native core); the
package starts without its heavy dependencies and scores without the native core."""

import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "triton", "matplotlib")
# Makes an import of the named modules fail, as on a machine where they are not installed.
BLOCK_IMPORTS = """
import sys
class Blocker:
    def __init__(self, names): self.names = names
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names or name in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker(set(sys.argv[1].split(","))))
"""


def run_python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A fresh interpreter (no inherited TRITON_INTERPRET), from an unrelated directory by default."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd or Path("/"), env=env, capture_output=True, text=True, timeout=600
    )


def test_installed_package_has_native_core_and_kernels():
    native = importlib.import_module("mia_fast._native")
    kernels = importlib.import_module("mia_fast.kernels")
    assert hasattr(native, "count_tokens")
    assert Path(kernels.__file__).name == "__init__.py"


def test_only_mia_fast_is_importable_from_the_root_and_transformers_works_without_triton():
    """The bug: the repository root on sys.path (an editable install then; ``python -c`` or ``-m`` in the root now)
    let transformers' import of Hugging Face's ``kernels`` package find this repository's kernels/. Whatever
    ``kernels`` is installed, no module of this repository but mia_fast is found from the root."""
    code = (
        BLOCK_IMPORTS
        + """
import importlib.util, os
root = os.path.realpath(os.getcwd())
for name in ("kernels", "tests", "benchmarks", "scripts", "examples", "docs", "csrc", "mia_fast"):
    spec = importlib.util.find_spec(name)
    places = [] if spec is None else [spec.origin or "", *(spec.submodule_search_locations or [])]
    ours = [p for p in places if os.path.realpath(p).startswith(root + os.sep) and "site-packages" not in p]
    assert not ours or name == "mia_fast", (name, ours)
from transformers import LlamaConfig
LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
print("ok")
"""
    )
    result = run_python(code, "triton", cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_start_imports_no_heavy_library():
    code = """
import sys
import mia_fast
from mia_fast.cli.main import main
main(["--help"])
print("heavy:" + ",".join(m for m in HEAVY if m in sys.modules))
""".replace("HEAVY", repr(HEAVY))
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "heavy:"


def test_freq_commands_import_no_heavy_library(tmp_path):
    ids = tmp_path / "ids.bin"
    np.arange(1000, dtype=np.uint16).tofile(ids)
    code = """
import sys
from mia_fast.cli.main import main
assert main(sys.argv[1:]) == 0
assert main(["freq", "info", sys.argv[-2]]) == 0
print("heavy:" + ",".join(m for m in HEAVY if m in sys.modules))
""".replace("HEAVY", repr(HEAVY))
    out = tmp_path / "ids.freq"
    result = run_python(
        code,
        "freq",
        "build-tokens",
        str(ids),
        "--dtype",
        "uint16",
        "--vocab-size",
        "1000",
        "--out",
        str(out),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "heavy:"
    assert out.stat().st_size > 8000


def test_scoring_needs_no_native_core(tiny_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["the quick brown fox", "all that glitters"]))
    out = tmp_path / "s.jsonl"
    code = (
        BLOCK_IMPORTS
        + """
from mia_fast.cli.main import main
assert main(sys.argv[2:]) == 0
assert "mia_fast._native" not in sys.modules
"""
    )
    result = run_python(
        code, "mia_fast._native", "score", str(data), "--model", str(tiny_model_dir), "--out", str(out), "--quiet"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(out.read_text().splitlines()) == 2
    counting = run_python(
        BLOCK_IMPORTS
        + "from mia_fast.frequency.build import count_token_ids\nimport numpy\n"
        + "count_token_ids(numpy.zeros(3, numpy.uint16), 5)",
        "mia_fast._native",
    )
    assert "needs mia-fast's compiled core" in counting.stderr


@pytest.mark.slow
def test_wheel_layout(tmp_path):
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    wheel = next(tmp_path.glob("mia_fast-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "mia_fast/kernels/__init__.py" in names
    assert "mia_fast/cli/main.py" in names and "mia_fast/pipeline/engine.py" in names
    assert any(n.startswith("mia_fast/_native") and n.endswith(".so") for n in names)
    assert not any(n.startswith(("kernels/", "tests/", "benchmarks/")) for n in names)
    assert "mia_fast_checkout_imports.pth" in names


def test_ci_prints_the_core_dependencies_versions_on_one_line_before_the_tests():
    import importlib.metadata

    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "versions.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    words = line.removeprefix("versions: ").split()
    shown = dict(zip(words[::2], words[1::2], strict=True))
    assert list(shown) == ["python", "torch", "transformers", "tokenizers", "triton", "numpy", "fastokens", "kernels"]
    assert shown["torch"] == importlib.metadata.version("torch")
    assert shown["transformers"] == importlib.metadata.version("transformers")
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("scripts/versions.py") < ci.index(".venv/bin/pytest -q")


def test_the_lower_bound_run_pins_every_declared_dependency_to_its_lower_bound():
    """scripts/lowest.sh installs what this prints: every core dependency and those of the extras it names, each at
    the lowest version pyproject.toml declares; a requirement without a single lower bound is refused."""
    script = ROOT / "scripts" / "lowest_requirements.py"
    result = subprocess.run([sys.executable, str(script), "gguf", "kernels"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    pins = result.stdout.splitlines()
    assert "torch==2.13" in pins and "transformers==5.13" in pins and "triton==3.4" in pins
    assert "backports.zstd==1.0; python_version < '3.14'" in pins
    project = (ROOT / "pyproject.toml").read_text()
    for pin in pins:
        name, version = pin.split(";")[0].split("==")
        assert f'"{name}>={version}' in project, pin
    refused = subprocess.run([sys.executable, str(script), "no_such_extra"], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stderr.strip() == "lowest_requirements.py: no extra named no_such_extra"
    spec = importlib.util.spec_from_file_location("lowest_requirements", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.lowest("numpy>=1.24") == "numpy==1.24"
    with pytest.raises(SystemExit, match="no single lower bound"):
        module.lowest("numpy>=1.24,<3")
