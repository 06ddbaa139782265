"""The leak-controlled benchmarks (WikiMIA-24, WikiMIA-25, MIMIR's temporal splits, copyright traps) on small local
fixtures written in each one's public layout, their bad layouts, and what every suite records of how it was split."""

import json
import typing

import pytest
from helpers import refused, run_cli, write_jsonl

from mia_fast.data import SUITES, load_suite
from mia_fast.data.suites import Leakage, SplitKind
from mia_fast.errors import MiaFastError


def _mimir_row(i: int) -> dict:
    # iamgroot42/mimir's features: the loader reads the two texts and leaves the neighbours aside.
    return {
        "member": f"member text {i}",
        "nonmember": f"later text {i}",
        "member_neighbors": [],
        "nonmember_neighbors": [],
    }


# Per suite: the split asked for (None: the default), the file under the fixture directory, its rows, and what
# load_suite must return: texts, labels, ids, groups.
FIXTURES = {
    "wikimia-24": (
        "WikiMIA_length64",
        "WikiMIA_length64.jsonl",
        [
            {"input": "The 2015 summit", "label": 1},
            {"input": "The 2024 floods", "label": 0},
            {"input": "The 2016 vote", "label": 1},
            {"input": "The 2024 launch", "label": 0},
        ],
        (["The 2015 summit", "The 2024 floods", "The 2016 vote", "The 2024 launch"], [1, 0, 1, 0], [1, 2, 3, 4], None),
    ),
    "wikimia-25": (
        "paper_subset",
        "paper_subset.jsonl",
        [
            {"input": "An old event", "label": 1},
            {"input": "A 2025 event", "label": 0},
            {"input": "Another old one", "label": 1},
            {"input": "x", "label": 0},
        ],
        (["An old event", "A 2025 event", "Another old one", "x"], [1, 0, 1, 0], [1, 2, 3, 4], None),
    ),
    "mimir-temporal-wiki": (
        None,
        "temporal_wiki/none.jsonl",
        [_mimir_row(1), _mimir_row(2)],
        (
            ["member text 1", "later text 1", "member text 2", "later text 2"],
            [1, 0, 1, 0],
            ["member-1", "nonmember-1", "member-2", "nonmember-2"],
            None,
        ),
    ),
    "mimir-temporal-arxiv": (
        "2023_06",
        "temporal_arxiv/2023_06.jsonl",
        [_mimir_row(7), _mimir_row(8)],
        (
            ["member text 7", "later text 7", "member text 8", "later text 8"],
            [1, 0, 1, 0],
            ["member-1", "nonmember-1", "member-2", "nonmember-2"],
            None,
        ),
    ),
    "copyright-traps": (
        None,
        "seq_len_100_n_rep_1000.parquet",
        [
            {"perplexity_bucket": 3, "text": "an injected trap", "label": 1},
            {"perplexity_bucket": 9, "text": "a trap left out", "label": 0},
            {"perplexity_bucket": 9, "text": "another injected trap", "label": 1},
            {"perplexity_bucket": 3, "text": "another trap left out", "label": 0},
        ],
        (
            ["an injected trap", "a trap left out", "another injected trap", "another trap left out"],
            [1, 0, 1, 0],
            [1, 2, 3, 4],
            ["3", "9", "9", "3"],
        ),
    ),
}


def write_rows(path, rows):
    """Rows as .jsonl, or as .parquet (copyright-traps' hub format) with the hub's column types."""
    if path.suffix != ".parquet":
        return write_jsonl(path, rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def fixture_dir(tmp_path, name):
    split, relative, rows, _ = FIXTURES[name]
    write_rows(tmp_path / relative, rows)
    return tmp_path


def test_every_leak_controlled_suite_has_a_fixture_here():
    assert set(FIXTURES) == {
        "wikimia-24",
        "wikimia-25",
        "mimir-temporal-wiki",
        "mimir-temporal-arxiv",
        "copyright-traps",
    }
    assert all(SUITES[name].hub_id for name in FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_each_suite_loads_its_public_layout_from_local_files(name, tmp_path):
    split, relative, rows, (texts, labels, ids, groups) = FIXTURES[name]
    data = load_suite(name, split=split, files=fixture_dir(tmp_path, name))
    assert (data.texts, data.labels, data.ids, data.groups) == (texts, labels, ids, groups)
    # The one file itself, outside its split directory, reads the same.
    assert load_suite(name, split=split, files=tmp_path / relative).texts == texts


def test_the_defaults_are_the_measured_settings(tmp_path):
    assert SUITES["mimir-temporal-arxiv"].default_split == "2021_06"  # Das et al.'s blind baselines
    assert SUITES["copyright-traps"].default_split == "seq_len_100_n_rep_1000"  # Meeus et al.'s detectable traps
    write_jsonl(tmp_path / "temporal_arxiv" / "2023_06.jsonl", [_mimir_row(1)])
    with pytest.raises(MiaFastError, match=r"temporal_arxiv: expected one file named 2021_06\.<jsonl"):
        load_suite("mimir-temporal-arxiv", files=tmp_path)


# A row that lacks the field a suite reads, and the field the one-line error must name.
BAD_ROWS = [
    ("wikimia-24", {"text": "a", "label": 1}, "row 1 has no text field 'input' \\(fields: text, label\\)"),
    ("wikimia-24", {"input": "a"}, "row 1 has no 'label' field"),
    ("wikimia-25", {"input": "a", "labels": 0}, "row 1 has no 'label' field"),
    ("wikimia-25", {"input": "a", "label": "maybe"}, "row 1: label 'maybe' is neither member"),
    ("mimir-temporal-wiki", {"member": "a", "non_member": "b"}, "row 1 has no text field 'nonmember'"),
    ("mimir-temporal-arxiv", {"nonmember": "b"}, "row 1 has no text field 'member' \\(fields: nonmember\\)"),
    ("copyright-traps", {"perplexity_bucket": 1, "input": "a", "label": 1}, "row 1 has no text field 'text'"),
    ("copyright-traps", {"perplexity_bucket": 1, "text": "a", "member": 1}, "row 1 has no 'label' field"),
]


@pytest.mark.parametrize(("name", "row", "message"), BAD_ROWS)
def test_a_row_missing_a_field_is_one_line_naming_it(name, row, message, tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(MiaFastError, match=f"^{name}: {message}") as caught:
        load_suite(name, files=path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("name", "split", "config", "message"),
    [
        ("wikimia-24", "WikiMIA_length512", None, "wikimia-24 has no split 'WikiMIA_length512'"),
        ("wikimia-25", "WikiMIA_length256", None, "wikimia-25 has no split 'WikiMIA_length256'; its splits: .*paper"),
        ("mimir-temporal-arxiv", "ngram_13_0.8", None, "has no split 'ngram_13_0.8'; its splits: 2021_06, 2020_08"),
        ("mimir-temporal-wiki", None, "temporal_arxiv", "has no config 'temporal_arxiv'; its configs: temporal_wiki"),
        ("mimir-temporal-arxiv", None, "pile_cc", "has no config 'pile_cc'; its configs: temporal_arxiv"),
        ("copyright-traps", "seq_len_200_n_rep_10", None, "copyright-traps has no split 'seq_len_200_n_rep_10'"),
    ],
)
def test_unknown_split_or_config(name, split, config, message, tmp_path):
    with pytest.raises(MiaFastError, match=message):
        load_suite(name, split=split, config=config, files=fixture_dir(tmp_path, name))


def test_without_files_they_name_their_hub_dataset(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hub = r"could not load iamgroot42/mimir \(temporal_arxiv, 2021_06\) from the Hugging Face hub"
    with pytest.raises(MiaFastError, match=hub):
        load_suite("mimir-temporal-arxiv")


def test_every_suite_records_how_it_was_split_and_what_blind_baselines_reach():
    leakages = {name: suite.leakage for name, suite in SUITES.items()}
    assert all(isinstance(leakage, Leakage) for leakage in leakages.values())
    assert {leakage.split_kind for leakage in leakages.values()} <= set(typing.get_args(SplitKind))
    assert all(leakage.blind_note.strip() for leakage in leakages.values())
    # Random draws of one distribution: the Pile's train and test splits, and traps injected or not.
    assert {name for name, leakage in leakages.items() if leakage.split_kind == "i.i.d."} == {
        "mimir",
        "copyright-traps",
    }


@pytest.mark.parametrize("name", FIXTURES)
def test_eval_on_each_suite_from_its_local_files(name, tiny_model_dir, tmp_path, capsys):
    split, _, _, (_, labels, ids, _) = FIXTURES[name]
    data = fixture_dir(tmp_path / "data", name)
    report = tmp_path / "report"
    chosen = ["--split", split] if split else []
    args = ["eval", data, "--suite", name, *chosen, "--model", tiny_model_dir, "--report", report]
    assert run_cli(*args, "--methods", "loss", "--no-blind", "--bootstrap", "10", "--quiet") == 0
    meta = json.loads((report / "metrics.json").read_text())["meta"]
    assert meta["data"] == f"{name}:{split or SUITES[name].default_split} ({data})"
    leakage = SUITES[name].leakage
    assert (meta["split_kind"], meta["blind_baselines_known"]) == (leakage.split_kind, leakage.blind_note)
    scored = [json.loads(line) for line in (report / "scores.jsonl").read_text().splitlines()]
    assert [(row["id"], row["label"]) for row in scored] == list(zip(ids, labels))


def test_eval_refuses_a_bad_layout_before_any_model_loads(tmp_path, capsys):
    write_jsonl(tmp_path / "temporal_wiki" / "none.jsonl", [{"member": "a"}])
    report = tmp_path / "report"
    line = refused(
        capsys,
        "eval",
        tmp_path,
        "--suite",
        "mimir-temporal-wiki",
        "--model",
        tmp_path / "no-model",
        "--report",
        report,
        keep=[tmp_path],
    )
    assert "mimir-temporal-wiki: row 1 has no text field 'nonmember' (fields: member)" in line
