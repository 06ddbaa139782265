"""The field's membership-inference benchmarks, by Hugging Face name or from local files in the same layout.

Each benchmark is one :class:`Suite` of :data:`SUITES`: its layout (hub name, splits, fields, configs, groups, paired
rows), what it is (``about``) and how far its labels can be trusted (its :class:`Leakage`: how its members and
non-members were drawn, and what model-free baselines are known to reach on it, as a temporal split can be told apart
without the model). Every loader returns a :class:`Dataset` with labels normalised to 1 = member, 0 = non-member. The
table of the suites in docs/cli.md is :func:`suites_table`, generated from them. Loading a suite, from the hub or from
local files, is :mod:`mia_fast.data.suite_loading`'s.

Local files are any of the formats ``read_rows`` reads (.jsonl[.gz], .json[.gz], .csv, .parquet): a file, or a
directory holding one file per split named after it (``WikiMIA_length64.jsonl``, ``pile_cc/ngram_13_0.8.jsonl``), or
for MIMIR's suites its cache folder, whose files are read as its hub repository's loading script (which ``datasets``
4 no longer runs) reads them: ``train/<config>_<split>.jsonl`` (members) and ``test/`` (non-members), one JSON string
a line, paired line by line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

PATENT_SNIPPET_WORDS = 512


@dataclass(frozen=True)
class SuiteConfigs:
    """A suite's configs (MIMIR's domains, ArxivMIA's fields), the one taken by default, and the field whose value
    picks a config's rows where the configs share one table (None: a config is a table of its own)."""

    names: tuple[str, ...] = ()
    default: str | None = None
    filter_field: str | None = None


SplitKind = Literal["temporal", "i.i.d."]


@dataclass(frozen=True)
class Leakage:
    """How far a benchmark's labels can be trusted: ``split_kind`` says how members and non-members were drawn
    ("temporal": before and after a training cutoff, so a text's dates and topics can give its label away; "i.i.d.":
    from one distribution, split at random), ``blind_note`` what model-free (blind) baselines are known to reach on it,
    with the source, or "not measured"; where measured, ``known_auroc`` is that AUROC and ``known_column`` the report's
    blind baseline it was measured with (``blind_bow``, ``blind_ngrams``): can a report's sample see it?"""

    split_kind: SplitKind
    blind_note: str
    known_column: str | None = None
    known_auroc: float | None = None


@dataclass(frozen=True)
class SuiteRows:
    """What a suite's rows hold: text and label fields, the field grouping rows into documents, or the (member,
    non-member) text fields of rows that pair both; ``whole_documents``: texts that load cut into snippets."""

    text_field: str | None
    label_field: str | None = "label"
    group_field: str | None = None
    paired_fields: tuple[str, str] | None = None
    whole_documents: bool = False


@dataclass(frozen=True)
class Suite:
    """A benchmark: its hub name, splits, rows and configs, its ``leakage`` and its notes in the docs (``about``)."""

    name: str
    hub_id: str | None
    splits: tuple[str, ...]
    rows: SuiteRows
    configs: SuiteConfigs = SuiteConfigs()
    leakage: Leakage = dataclasses.field(kw_only=True)
    about: str = dataclasses.field(default="", kw_only=True)

    @property
    def default_split(self) -> str:
        return self.splits[0]


_WIKIMIA_LENGTHS = (32, 64, 128, 256)
_WIKIMIA_SPLITS = tuple(f"WikiMIA_length{n}" for n in _WIKIMIA_LENGTHS)
_NOT_MEASURED = "not measured"
_DAS = "Das et al. 2024, ethz-spylab/Blind-MIA"
# MIMIR's temporal_arxiv splits, by the month their non-members were posted; the default is Das et al.'s, 2021_06.
_TEMPORAL_ARXIV_MONTHS = ("2021_06", "2020_08", "2021_01", "2022_01", "2022_06", "2023_01", "2023_06")
# Traps of 25-100 tokens injected 10-1000 times; the default, longest and most repeated, Meeus et al. detect (AUC 0.75).
_TRAP_SPLITS = tuple(f"seq_len_{n}_n_rep_{r}" for n in (100, 50, 25) for r in (1000, 100, 10))

MIMIR_HUB = "iamgroot42/mimir"
MIMIR_CACHE = "cache_100_200_1000_512"


def _mimir(name: str, splits: tuple[str, ...], configs: SuiteConfigs, leakage: Leakage, about: str) -> Suite:
    """MIMIR's layout: each row pairs a member and a non-member text (and their neighbours, left aside here)."""
    return Suite(
        name,
        MIMIR_HUB,
        splits,
        SuiteRows(None, label_field=None, paired_fields=("member", "nonmember")),
        configs,
        leakage=leakage,
        about=about,
    )


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            "wikimia",
            "swj0419/WikiMIA",
            _WIKIMIA_SPLITS,
            SuiteRows("input"),
            leakage=Leakage(
                "temporal",
                f"bag of words AUROC 0.99, TPR 94.7% at 5% FPR, on WikiMIA_length128 ({_DAS})",
                "blind_bow",
                0.99,
            ),
            about="text in `input`",
        ),
        Suite(
            "wikimia-paraphrased",
            "zjysteven/WikiMIA_paraphrased_perturbed",
            tuple(
                f"WikiMIA_length{n}_{kind}"
                for kind in ("paraphrased", "perturbed", "paraphrased_perturbed")
                for n in _WIKIMIA_LENGTHS[:3]
            ),
            SuiteRows("input"),
            leakage=Leakage("temporal", _NOT_MEASURED),
            about="WikiMIA's texts paraphrased, perturbed, or both; text in `input`",
        ),
        Suite(
            "wikimia-24",
            "wjfu99/WikiMIA-24",
            _WIKIMIA_SPLITS,
            SuiteRows("input"),
            leakage=Leakage(
                "temporal",
                "bag of words AUROC 0.999, TPR 98.3% at 1% FPR (ai-forever/data_leakage_detect)",
                "blind_bow",
                0.999,
            ),
            about="MIA-Tuner's WikiMIA rebuilt, events of 2015-16 as members and of March to December 2024 as "
            "non-members; text in `input`",
        ),
        Suite(
            "wikimia-25",
            "SimMIA/WikiMIA-25",
            (*(f"WikiMIA_length{n}" for n in _WIKIMIA_LENGTHS[:3]), "paper_subset"),
            SuiteRows("input"),
            leakage=Leakage("temporal", _NOT_MEASURED),
            about="SimMIA's; text in `input`",
        ),
        Suite(
            "bookmia",
            "swj0419/BookMIA",
            ("train",),
            SuiteRows("snippet", group_field="book"),
            leakage=Leakage("temporal", f"bag of words AUROC 0.914, TPR 64.5% at 5% FPR ({_DAS})", "blind_bow", 0.914),
            about="512-word `snippet`s; the `book` title is the group, for per-book contamination rates",
        ),
        Suite(
            "arxivmia",
            "zhliu/ArxivMIA",
            ("train",),
            SuiteRows("text"),
            SuiteConfigs(("cs", "math"), filter_field="field"),
            leakage=Leakage(
                "temporal",
                "bag of words AUROC 0.60-0.65 on all 2,000 rows, 5-fold (mia-fast's blind_bow; not published)",
                "blind_bow",
                0.60,
            ),
            about="`--config cs` or `math` keeps the rows of that `field`",
        ),
        _mimir(
            "mimir",
            ("ngram_13_0.8", "ngram_13_0.2", "ngram_7_0.2"),
            SuiteConfigs(
                ("arxiv", "dm_mathematics", "github", "hackernews", "pile_cc", "pubmed_central", "wikipedia_(en)"),
                default="pile_cc",
            ),
            Leakage(
                "i.i.d.",
                f"{_NOT_MEASURED}; the Pile's train and test splits, non-members kept below an n-gram overlap",
            ),
            "`--config` = Pile domain (default `pile_cc`); each `member`/`nonmember` pair becomes two rows. Read from "
            "the repository's files (`huggingface_hub`), as its loading script no longer runs under `datasets` ≥ 4; "
            "or `DATA` = a local copy of its `cache_100_200_1000_512` folder",
        ),
        _mimir(
            "mimir-temporal-wiki",
            ("none",),
            SuiteConfigs(("temporal_wiki",), default="temporal_wiki"),
            Leakage(
                "temporal", f"greedy n-gram selection AUROC 0.799, TPR 36.5% at 1% FPR ({_DAS})", "blind_ngrams", 0.799
            ),
            "config `temporal_wiki`: members from the Pile, non-members written later; pairs as `mimir`",
        ),
        _mimir(
            "mimir-temporal-arxiv",
            _TEMPORAL_ARXIV_MONTHS,
            SuiteConfigs(("temporal_arxiv",), default="temporal_arxiv"),
            Leakage(
                "temporal", f"bag of words AUROC 0.753, TPR 9.1% at 1% FPR, on 2021_06 ({_DAS})", "blind_bow", 0.753
            ),
            "config `temporal_arxiv`, a split per month its non-members were posted: members from the Pile, "
            "non-members written later; pairs as `mimir`",
        ),
        Suite(
            "copyright-traps",
            "imperial-cpg/copyright-traps",
            _TRAP_SPLITS,
            SuiteRows("text", group_field="perplexity_bucket"),
            leakage=Leakage(
                "i.i.d.", f"{_NOT_MEASURED}; traps of one generator, injected into the training data or not at random"
            ),
            about="synthetic trap sequences, the members injected into CroissantLLM's training data; `text`, the "
            "`perplexity_bucket` is the group",
        ),
        Suite(
            "patentmia",
            None,
            ("train",),
            SuiteRows("input", group_field="id", whole_documents=True),
            leakage=Leakage("temporal", _NOT_MEASURED),
            about="Chinese patents (`input`, `label`); whole patents are cut into 512-word snippets, words counted by "
            "jieba (`mia-fast[zh]`), each patent a group",
        ),
    )
}


def suites_table(suites: Iterable[Suite]) -> str:
    """The table of ``suites`` in docs/cli.md: name, hub name, splits (the default first), notes."""
    rows = ["| suite | hub name | splits (default first) | notes |", "|---|---|---|---|"]
    for suite in suites:
        hub, notes = f"`{suite.hub_id}`" if suite.hub_id else "local files only", suite.about.replace("|", "\\|")
        rows.append(f"| `{suite.name}` | {hub} | {', '.join(f'`{split}`' for split in suite.splits)} | {notes} |")
    return "\n".join(rows) + "\n"
