"""Benchmark loaders on small local fixtures written in each suite's layout (nothing is downloaded)."""

import json

import pytest
from helpers import write_jsonl

from mia_fast.data import load_suite
from mia_fast.data.suite_loading import cut_into_snippets
from mia_fast.data.text import count_words
from mia_fast.errors import MiaFastError


def test_wikimia_from_a_split_file_in_a_directory(tmp_path):
    rows = [{"input": f"text {i}", "label": i % 2} for i in range(6)]
    write_jsonl(tmp_path / "WikiMIA_length64.jsonl", rows)
    write_jsonl(tmp_path / "WikiMIA_length32.jsonl", rows[:2])
    data = load_suite("wikimia", split="WikiMIA_length64", files=tmp_path)
    assert data.texts == [r["input"] for r in rows] and data.labels == [0, 1, 0, 1, 0, 1]
    assert len(load_suite("wikimia", files=tmp_path).texts) == 2  # the default split: WikiMIA_length32
    with pytest.raises(MiaFastError, match="expected one file named WikiMIA_length128"):
        load_suite("wikimia", split="WikiMIA_length128", files=tmp_path)
    with pytest.raises(MiaFastError, match="no split 'WikiMIA_length512'"):
        load_suite("wikimia", split="WikiMIA_length512", files=tmp_path)


def test_paraphrased_wikimia_and_label_encodings(tmp_path):
    rows = [
        {"input": "a", "label": "member"},
        {"input": "b", "label": "nonmember"},
        {"input": "c", "label": True},
        {"input": "d", "label": False},
    ]
    data = load_suite(
        "wikimia-paraphrased", split="WikiMIA_length64_paraphrased", files=write_jsonl(tmp_path / "p.jsonl", rows)
    )
    assert data.labels == [1, 0, 1, 0]
    write_jsonl(tmp_path / "bad.jsonl", [{"input": "a", "label": "perhaps"}])
    with pytest.raises(MiaFastError, match="row 1: label 'perhaps' is neither member"):
        load_suite("wikimia", files=tmp_path / "bad.jsonl")


def test_bookmia_keeps_the_book_as_group(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "book_id": [0, 0, 1],
            "book": ["Moby Dick", "Moby Dick", "A 2023 Novel"],
            "snippet_id": [0, 1, 0],
            "snippet": ["Call me Ishmael.", "It was the whale.", "Fresh words."],
            "label": [1, 1, 0],
        }
    )
    pq.write_table(table, tmp_path / "train.parquet")
    data = load_suite("bookmia", files=tmp_path)
    assert data.groups == ["Moby Dick", "Moby Dick", "A 2023 Novel"] and data.labels == [1, 1, 0]


def test_arxivmia_config_keeps_one_field(tmp_path):
    rows = [
        {"text": "a", "label": 1, "field": "cs"},
        {"text": "b", "label": 0, "field": "math"},
        {"text": "c", "label": 0, "field": "cs"},
    ]
    path = write_jsonl(tmp_path / "arxiv.jsonl", rows)
    assert load_suite("arxivmia", config="cs", files=path).texts == ["a", "c"]
    assert load_suite("arxivmia", files=path).texts == ["a", "b", "c"]
    with pytest.raises(MiaFastError, match="no config 'physics'"):
        load_suite("arxivmia", config="physics", files=path)


def test_mimir_pairs_become_two_labelled_rows(tmp_path):
    rows = [
        {"member": f"m{i}", "nonmember": f"n{i}", "member_neighbors": [], "nonmember_neighbors": []} for i in range(3)
    ]
    write_jsonl(tmp_path / "github" / "ngram_13_0.8.jsonl", rows)
    data = load_suite("mimir", config="github", files=tmp_path)
    assert data.texts == ["m0", "n0", "m1", "n1", "m2", "n2"] and data.labels == [1, 0] * 3
    assert data.ids[:2] == ["member-1", "nonmember-1"]


def _mimir_cache(folder, stem: str, members: list[str], nonmembers: list[str]):
    """MIMIR's cache folder as its hub repository holds it: one JSON string per line, members in train/."""
    for part, texts in (("train", members), ("test", nonmembers)):
        (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / part / f"{stem}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts))
    return folder


def test_mimir_from_its_hub_files_without_the_loading_script(tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    cache = _mimir_cache(tmp_path / "cache_100_200_1000_512", "pile_cc_ngram_13_0.8", ["m1", "m2\nline"], ["n1", "n2"])
    _mimir_cache(cache, "temporal_wiki", ["old"], ["new", "unpaired"])
    asked = []

    def download(repo_id, filename, repo_type=None):
        asked.append((repo_id, filename, repo_type))
        return str(tmp_path / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    data = load_suite("mimir")
    assert data.texts == ["m1", "n1", "m2\nline", "n2"] and data.labels == [1, 0, 1, 0]
    assert asked == [
        ("iamgroot42/mimir", f"cache_100_200_1000_512/{part}/pile_cc_ngram_13_0.8.jsonl", "dataset")
        for part in ("train", "test")
    ]
    # Split "none" names no suffix; pairs go as far as both files do, as MIMIR's loading script pairs them.
    assert load_suite("mimir-temporal-wiki").texts == ["old", "new"]
    assert asked[-1][1] == "cache_100_200_1000_512/test/temporal_wiki.jsonl"


@pytest.mark.parametrize("given", ["the folder", "its parent"])
def test_mimir_from_a_local_copy_of_its_cache_folder(given, tmp_path):
    cache = _mimir_cache(tmp_path / "cache_100_200_1000_512", "temporal_arxiv_2021_06", ["a", "b"], ["c", "d"])
    data = load_suite("mimir-temporal-arxiv", files=cache if given == "the folder" else tmp_path)
    assert data.texts == ["a", "c", "b", "d"] and data.ids[2:] == ["member-2", "nonmember-2"]


def test_mimir_cache_folder_faults_are_one_line_naming_the_file(tmp_path):
    cache = _mimir_cache(tmp_path, "github_ngram_7_0.2", ["fine", "also fine"], ["ok", "ok"])
    before = (cache / "train" / "github_ngram_7_0.2.jsonl").read_bytes()
    (cache / "test" / "github_ngram_7_0.2.jsonl").write_text('"ok"\n{"member": "a row, not a text"}\n')
    with pytest.raises(MiaFastError, match=r"test/github_ngram_7_0.2.jsonl: line 2 is not a JSON string") as bad:
        load_suite("mimir", config="github", split="ngram_7_0.2", files=cache)
    assert "\n" not in str(bad.value)
    (cache / "test" / "github_ngram_7_0.2.jsonl").write_bytes(b'"ok"\n"caf\xe9"\n')  # Latin-1, not UTF-8
    with pytest.raises(MiaFastError, match=r"test/github_ngram_7_0.2.jsonl: line 2 is not a JSON string"):
        load_suite("mimir", config="github", split="ngram_7_0.2", files=cache)
    with pytest.raises(MiaFastError, match=r"train/github_ngram_13_0.8.jsonl: no such file \(MIMIR's members"):
        load_suite("mimir", config="github", files=cache)
    assert (cache / "train" / "github_ngram_7_0.2.jsonl").read_bytes() == before


def test_mimir_hub_gated_or_offline_is_one_line(monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.errors import GatedRepoError

    class Gated(GatedRepoError):  # its constructor wants an HTTP response, whose type changes across versions
        def __init__(self):
            Exception.__init__(self, "401 Client Error.\nCannot access gated repo")

    def gated(*args, **kwargs):
        raise Gated()

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    with pytest.raises(MiaFastError, match=r"^iamgroot42/mimir is gated .* log in \(hf auth login, or HF_TOKEN\)"):
        load_suite("mimir")
    monkeypatch.undo()
    with pytest.raises(MiaFastError, match=r"could not load iamgroot42/mimir \(pile_cc, ngram_13_0.8\)") as offline:
        load_suite("mimir")  # HF_HUB_OFFLINE (conftest): nothing cached
    assert "\n" not in str(offline.value) and "pass it as DATA" in str(offline.value)


def test_patentmia_whole_patents_become_512_word_snippets(tmp_path):
    sentence = "本发明涉及一种用于检测预训练数据的方法，包括计算词元概率并与参考语料库的频率进行校准。"
    patents = [{"id": "CN001", "input": sentence * 60, "label": 1}, {"id": "CN002", "input": sentence * 5, "label": 0}]
    data = load_suite("patentmia", files=write_jsonl(tmp_path / "patents.jsonl", patents))
    per_patent = [count_words(p["input"]) for p in patents]
    first = [t for t, g in zip(data.texts, data.groups) if g == "CN001"]
    assert len(first) == -(-per_patent[0] // 512) > 1
    assert all(count_words(t) == 512 for t in first[:-1])
    assert "".join(first) == patents[0]["input"]
    assert data.labels == [1] * len(first) + [0]
    assert data.groups.count("CN002") == 1


def test_cut_into_snippets_uses_whitespace_words_for_english():
    from mia_fast.data import Dataset

    data = cut_into_snippets(Dataset(["w " * 1030], ["book"], [1]), 512)
    assert [count_words(t) for t in data.texts] == [512, 512, 6] and data.groups == ["book"] * 3


def test_hub_only_dataset_offline_names_it_and_the_local_way(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(
        MiaFastError,
        match=r"could not load swj0419/BookMIA \(train\) from the Hugging Face hub.*pass its files as DATA",
    ):
        load_suite("bookmia")
    with pytest.raises(MiaFastError, match="patentmia is not on the Hugging Face hub"):
        load_suite("patentmia")


def test_unknown_suite_and_missing_text_field(tmp_path):
    with pytest.raises(MiaFastError, match="unknown benchmark 'wikimia2'"):
        load_suite("wikimia2")
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "a", "label": 1}])
    with pytest.raises(MiaFastError, match="row 1 has no text field 'input' \\(fields: text, label\\)"):
        load_suite("wikimia", files=path)
