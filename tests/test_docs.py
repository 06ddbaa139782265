"""The docs stay true: the methods page is the registry's own (regenerate it with
``python -m mia_fast.methods.catalogue > docs/methods.md``), and the README stays a short front page."""

from __future__ import annotations

from pathlib import Path

from mia_fast.methods.catalogue import methods_page

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 12_000


def test_the_methods_page_is_generated_from_the_registry():
    written = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    assert written == methods_page(), (
        "docs/methods.md differs from the registry; run: python -m mia_fast.methods.catalogue > docs/methods.md"
    )


def test_the_readme_is_short_and_opens_with_the_two_commands():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= README_MAX_BYTES, f"README.md is {len(readme)} bytes (at most {README_MAX_BYTES})"
    text = readme.decode("utf-8")
    first_block = text[text.index("```bash") : text.index("```", text.index("```bash") + 3)]
    assert "bash scripts/setup.sh && .venv/bin/mia-fast demo --report report" in first_block
    assert "bash scripts/setup.sh && .venv/bin/pytest -q" in first_block


def test_every_local_link_of_the_docs_resolves():
    import re

    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)


# Where dotted names are written: every page, and the docstrings of every Python file of the checkout.
_SOURCE_FOLDERS = ("mia_fast", "kernels", "tests", "benchmarks", "scripts", "examples")
_FILE_SUFFIXES = {"py", "pth", "so", "json", "jsonl", "md", "txt", "toml", "parquet", "csv"}


def _pages_and_docstrings() -> list[tuple[str, str]]:
    import ast

    found = []
    for page in sorted(ROOT.rglob("*.md")):
        relative = page.relative_to(ROOT)
        if not relative.parts[0].startswith(".") and relative.parts[0] != "build":
            found.append((str(relative), page.read_text(encoding="utf-8")))
    for folder in _SOURCE_FOLDERS:
        for source in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    docstring = ast.get_docstring(node, clean=False)
                    if docstring:
                        found.append((f"{source.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", docstring))
    return found


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of mia-fast, or an attribute (a dataclass field included) of one."""
    import importlib

    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[end:]:
            if attribute in (getattr(found, "__dataclass_fields__", None) or {}):
                return True
            if not hasattr(found, attribute):
                try:
                    found = importlib.import_module(f"{found.__name__}.{attribute}")
                except (ModuleNotFoundError, AttributeError):
                    return False
                continue
            found = getattr(found, attribute)
        return True
    return False


def test_every_dotted_name_of_mia_fast_in_the_docs_and_docstrings_exists():
    """A page or docstring naming a dotted path of ``mia_fast`` (or, in a docstring, of one of its subpackages,
    without the prefix) names something that exists: modules move, and the words that point at them move too."""
    import re

    subpackages = sorted(p.name for p in (ROOT / "mia_fast").iterdir() if (p / "__init__.py").is_file())
    full = re.compile(r"(?<![\w./-])mia_fast(?:\.[A-Za-z_]\w*)+")
    packages = "|".join(subpackages)
    short = re.compile(rf"(?<![\w./`-])(?:``)?((?:{packages})\.[a-z_]\w*)")
    stale = set()
    for where, text in _pages_and_docstrings():
        names = set(full.findall(text))
        if ".py:" in where:
            names |= {f"mia_fast.{name}" for name in short.findall(text)}
        stale |= {(where, n) for n in names if n.rsplit(".", 1)[-1] not in _FILE_SUFFIXES and not _resolves(n)}
    assert not stale, "\n".join(f"{where}: {name}" for where, name in sorted(stale))
