"""The suites' table: every suite has its fixture, the docs' table is generated from them, a suite is its layout,
its leakage and its notes."""

from pathlib import Path

import pytest

from mia_fast.data import SUITES
from mia_fast.data.suites import Leakage, Suite, SuiteRows, suites_table


def test_every_suite_has_a_local_fixture_here():
    here = {"wikimia", "wikimia-paraphrased", "bookmia", "arxivmia", "mimir", "patentmia"}
    # The leak-controlled suites' fixtures are in test_leak_controlled_suites.py.
    leak_controlled = {"wikimia-24", "wikimia-25", "mimir-temporal-wiki", "mimir-temporal-arxiv", "copyright-traps"}
    assert set(SUITES) == here | leak_controlled


def test_the_suites_table_of_the_docs_is_generated_from_the_suites():
    cli = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert suites_table(SUITES.values()) in cli, (
        "docs/cli.md's suites table differs from SUITES; paste the output of: python -c \"from mia_fast.data.suites "
        "import SUITES, suites_table; print(suites_table(SUITES.values()), end='')\""
    )


def test_a_suite_is_its_layout_its_leakage_and_its_notes():
    with pytest.raises(TypeError, match="leakage"):
        Suite("no-leakage", None, ("train",), SuiteRows("text"))
    suite = Suite("toy", None, ("b", "a"), SuiteRows("text"), leakage=Leakage("i.i.d.", "not measured"), about="a | b")
    assert suite.default_split == "b" and not suite.rows.whole_documents and suite.rows.label_field == "label"
    assert suites_table([suite]).splitlines()[2] == "| `toy` | local files only | `b`, `a` | a \\| b |"
