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
