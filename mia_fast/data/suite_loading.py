"""Loading a suite of :data:`~mia_fast.data.suites.SUITES` (``load_suite``): from the hub, or from local files in its
layout (a file, a directory of one file per split, MIMIR's cache folder), into a :class:`Dataset` labelled 1 = member,
0 = non-member; PatentMIA's whole patents cut into snippets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mia_fast.data.fields import parse_label
from mia_fast.data.files import Dataset, input_suffixes, read_rows
from mia_fast.data.readers import iter_lines
from mia_fast.data.suites import MIMIR_CACHE, MIMIR_HUB, PATENT_SNIPPET_WORDS, SUITES, Suite
from mia_fast.data.text import snippets
from mia_fast.errors import MiaFastError, shown


def load_suite(
    name: str,
    split: str | None = None,
    config: str | None = None,
    files: str | os.PathLike | None = None,
    patent_snippet_words: int | None = PATENT_SNIPPET_WORDS,
) -> Dataset:
    """Loads a benchmark from ``files`` (local, same layout) or, without them, from the Hugging Face hub; a suite of
    whole documents is cut into snippets of ``patent_snippet_words`` words (None: kept whole)."""
    suite = SUITES.get(name)
    if suite is None:
        raise MiaFastError(f"unknown benchmark {name!r}; known: {', '.join(SUITES)}")
    split = split or suite.default_split
    if split not in suite.splits:
        raise MiaFastError(f"{name} has no split {split!r}; its splits: {', '.join(suite.splits)}")
    config = config or suite.configs.default
    if suite.configs.names and config is not None and config not in suite.configs.names:
        raise MiaFastError(f"{name} has no config {config!r}; its configs: {', '.join(suite.configs.names)}")
    cache = _mimir_cache_dir(Path(files)) if files is not None and suite.hub_id == MIMIR_HUB else None
    if cache is not None:
        rows = _mimir_rows(*(cache / name for name in _mimir_files(config, split)))
    elif files is not None:
        rows = read_rows(_split_file(Path(files), split, config if suite.rows.paired_fields else None))
    elif suite.hub_id is None:
        raise MiaFastError(
            f"{name} is not on the Hugging Face hub: pass its files as DATA "
            f"(a .jsonl with fields {suite.rows.text_field!r} and 'label')"
        )
    elif suite.hub_id == MIMIR_HUB:
        rows = _mimir_rows(*_mimir_hub_files(config, split))
    else:
        rows = _hub_rows(suite, split, config)
    if suite.configs.filter_field and config is not None:
        rows = [(n, r) for n, r in rows if r.get(suite.configs.filter_field) == config]
    dataset = _paired(suite, rows) if suite.rows.paired_fields else _labelled(suite, rows)
    if suite.rows.whole_documents and patent_snippet_words:
        dataset = cut_into_snippets(dataset, patent_snippet_words)
    if not dataset.texts:
        raise MiaFastError(f"{name} ({split}{', ' + config if config else ''}) has no rows")
    return dataset


def _split_file(path: Path, split: str, config: str | None) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        raise MiaFastError(f"{path}: no such file or directory")
    base = path / config if config and (path / config).is_dir() else path
    names = {f"{split}{suffix}" for suffix in input_suffixes()}
    found = sorted(p for p in base.iterdir() if p.is_file() and p.name in names)
    if len(found) != 1:
        raise MiaFastError(f"{base}: expected one file named {split}.<jsonl|json|csv|parquet>, found {len(found)}")
    return found[0]


def _mimir_files(config: str, split: str) -> tuple[str, str]:
    """The members' and the non-members' file of a MIMIR config and split, within its cache folder."""
    stem = config if split == "none" else f"{config}_{split}"
    return f"train/{stem}.jsonl", f"test/{stem}.jsonl"


def _mimir_cache_dir(path: Path) -> Path | None:
    """``path`` itself or its ``cache_100_200_1000_512`` where it holds MIMIR's train/ and test/ folders."""
    for folder in (path, path / MIMIR_CACHE):
        if (folder / "train").is_dir() and (folder / "test").is_dir():
            return folder
    return None


def _mimir_hub_files(config: str, split: str) -> list[Path]:
    from huggingface_hub import hf_hub_download  # noqa: PLC0415 (0.2 s at start-up; only MIMIR from the hub needs it)
    from huggingface_hub.errors import GatedRepoError  # noqa: PLC0415 (as hf_hub_download)

    local = f"download its {MIMIR_CACHE} folder and pass it as DATA"
    try:
        return [
            Path(hf_hub_download(MIMIR_HUB, f"{MIMIR_CACHE}/{name}", repo_type="dataset"))
            for name in _mimir_files(config, split)
        ]
    except GatedRepoError:
        raise MiaFastError(
            f"{MIMIR_HUB} is gated on the Hugging Face hub: accept its terms on its page and log in "
            f"(hf auth login, or HF_TOKEN); or {local}"
        ) from None
    except Exception as exc:  # network, offline mode, a split the hub lacks: huggingface_hub raises many types
        raise MiaFastError(
            f"could not load {MIMIR_HUB} ({config}, {split}) from the Hugging Face hub: {_first_line(exc)}. "
            f"Without a hub, {local}"
        ) from None


def _mimir_rows(members: Path, nonmembers: Path) -> list[tuple[int, dict]]:
    """MIMIR's two files paired line by line, as far as both go (as its loading script pairs them)."""
    texts = {}
    for field, path in (("member", members), ("nonmember", nonmembers)):
        if not path.is_file():
            raise MiaFastError(f"{path}: no such file (MIMIR's {field}s of this config and split)")
        texts[field] = _json_strings(path)
    pairs = zip(texts["member"], texts["nonmember"])
    return [(number, {"member": m, "nonmember": n}) for number, (m, n) in enumerate(pairs, start=1)]


def _json_strings(path: Path) -> list[str]:
    """A MIMIR file's texts: one JSON string per line, blank lines skipped."""
    texts = []
    for number, line, _ in iter_lines(path):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            value = None
        if not isinstance(value, str):
            raise MiaFastError(
                f"{path}: line {number} is not a JSON string (MIMIR's files hold one quoted text per line)"
            )
        texts.append(value)
    return texts


def _hub_rows(suite: Suite, split: str, config: str | None) -> list[tuple[int, dict]]:
    local = f"download it and pass its files as DATA (a file, or a directory holding {split}.jsonl)"
    try:
        import datasets  # noqa: PLC0415 (optional: datasets, mia-fast[hub])
    except ImportError:
        raise MiaFastError(
            f"{suite.name} loads from the Hugging Face hub ({suite.hub_id}) with the 'datasets' package "
            f"(pip install 'mia-fast[hub]'); or {local}"
        ) from None
    # A filtering config (ArxivMIA's cs/math) selects rows, not a hub config.
    hub_config = config if suite.configs.names and not suite.configs.filter_field else None
    try:
        loaded = datasets.load_dataset(suite.hub_id, hub_config, split=split)
    except Exception as exc:  # network, offline mode, missing split: datasets raises many types
        raise MiaFastError(
            f"could not load {suite.hub_id} ({split}) from the Hugging Face hub: {_first_line(exc)}. "
            f"Without a hub, {local}"
        ) from None
    return list(enumerate(loaded, start=1))


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__


def _text(suite: Suite, number: int, record: dict, field: str) -> str:
    value = record.get(field)
    if not isinstance(value, str):
        present = ", ".join(map(str, record)) or "none"
        raise MiaFastError(f"{suite.name}: row {number} has no text field {shown(field)} (fields: {present})")
    return value


def _labelled(suite: Suite, rows: list[tuple[int, dict]]) -> Dataset:
    texts, labels, ids, groups = [], [], [], []
    for number, record in rows:
        texts.append(_text(suite, number, record, suite.rows.text_field))
        if suite.rows.label_field not in record:
            raise MiaFastError(f"{suite.name}: row {number} has no {suite.rows.label_field!r} field")
        try:
            labels.append(parse_label(record[suite.rows.label_field]))
        except MiaFastError as exc:
            raise MiaFastError(f"{suite.name}: row {number}: {exc}") from None
        ids.append(record.get("id", number))
        if suite.rows.group_field:
            groups.append(str(record.get(suite.rows.group_field, number)))
    return Dataset(texts, ids, labels, groups if suite.rows.group_field else None)


def _paired(suite: Suite, rows: list[tuple[int, dict]]) -> Dataset:
    member_field, nonmember_field = suite.rows.paired_fields
    texts, labels, ids = [], [], []
    for number, record in rows:
        for field, label, prefix in ((member_field, 1, "member"), (nonmember_field, 0, "nonmember")):
            texts.append(_text(suite, number, record, field))
            labels.append(label)
            ids.append(f"{prefix}-{number}")
    return Dataset(texts, ids, labels)


def cut_into_snippets(dataset: Dataset, words: int) -> Dataset:
    """Each text cut into consecutive ``words``-word snippets (jieba words for Chinese); a snippet keeps
    its text's label, and the text's id becomes the group, for per-document rates."""
    texts: list[str] = []
    ids: list[Any] = []
    labels: list[int] = []
    groups: list[str] = []
    for i, text in enumerate(dataset.texts):
        document = str(dataset.ids[i] if dataset.ids is not None else i)
        for j, snippet in enumerate(snippets(text, words)):
            texts.append(snippet)
            ids.append(f"{document}#{j}")
            labels.append(dataset.labels[i])
            groups.append(dataset.groups[i] if dataset.groups is not None else document)
    return Dataset(texts, ids, labels, groups)
