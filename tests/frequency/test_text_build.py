"""Building frequency tables from text corpora: counts identical to numpy on every text format, shards and
document mode and caps, interrupted builds that resume from their checkpoints, bad records stopping the build or
skipped and counted, and a table from text that merges with one from token files."""

import gzip
import json

import numpy as np
import pytest
from conftest import CORPUS, train_tokenizer

try:
    from compression import zstd
except ImportError:  # before Python 3.14
    from backports import zstd

from mia_fast.errors import MiaFastError
from mia_fast.frequency import text_build
from mia_fast.frequency.build import Counting
from mia_fast.frequency.corpus import CorpusFormat
from mia_fast.frequency.counting_tokenizers import choose_counter
from mia_fast.frequency.table import FrequencyTable
from mia_fast.frequency.text_build import build_from_text, count_text_file, text_build_settings
from mia_fast.frequency.token_files import build_from_tokens
from mia_fast.tokens.fingerprint import tokenizer_fingerprint

pytestmark = pytest.mark.lower_bounds

ENGLISH_DOCS = [f"{CORPUS[i % 6]} ({i}) " + CORPUS[(i * 5) % 7] for i in range(60)] + ["", "x"]
CHINESE_DOCS = [
    "今天的天气很好，我们一起去公园散步。",
    "这个程序统计参考语料库中每个词元出现的次数。",
    "预训练数据检测需要一个可靠的词频表。",
    "他说：“明天再来。”然后就走了。",
    "数学、物理和化学都是自然科学。",
] * 8


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)


def reference_counts(tokenizer, docs, vocab, cap=None, mode="occurrence"):
    """Per-document tokenizer.encode, then numpy: independent of the batched native path."""
    counts = np.zeros(vocab, np.int64)
    for doc in docs:
        ids = np.array(tokenizer.encode(doc, add_special_tokens=False)[:cap], dtype=np.int64)
        counts += np.bincount(np.unique(ids) if mode == "document" else ids, minlength=vocab)
    return counts


def write_corpus(path, docs, field="text"):
    name = path.name
    if name.endswith(".txt"):
        path.write_text("".join(d + "\n" for d in docs), encoding="utf-8")
    elif name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({field: docs, "id": list(range(len(docs)))}), path, row_group_size=7)
    else:
        lines = "".join(json.dumps({field: d, "url": "u"}) + "\n" for d in docs).encode()
        path.write_bytes(gzip.compress(lines) if name.endswith(".gz") else lines)
    return path


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".jsonl.gz", ".json.gz", ".parquet"])
def test_text_formats_count_exactly_like_numpy(tokenizer, tmp_path, suffix):
    docs = [d for d in ENGLISH_DOCS if d] if suffix == ".txt" else [d.replace(") ", ")\n") for d in ENGLISH_DOCS]
    path = write_corpus(tmp_path / f"c{suffix}", docs, field="content")
    report = build_from_text([path], tokenizer, corpus=CorpusFormat(text_field="content"), workers=2)
    expected = reference_counts(tokenizer, docs, len(tokenizer))
    np.testing.assert_array_equal(report.table.counts, expected)
    assert report.table.tokens == expected.sum()
    assert report.table.documents == len(docs)
    assert report.table.tokenizer_fingerprint == tokenizer_fingerprint(tokenizer)


def test_directory_and_glob_of_shards(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(text_build, "BATCH_CHARS", 300)  # many batches in flight per shard
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(5):
        write_corpus(shards / f"part-{i}.jsonl.gz", ENGLISH_DOCS[i::5])
    expected = reference_counts(tokenizer, ENGLISH_DOCS, len(tokenizer))
    for source in (shards, str(shards / "part-*.jsonl.gz")):
        table = build_from_text([source], tokenizer, workers=3).table
        np.testing.assert_array_equal(table.counts, expected)
        assert len(table.sources) == 5


@pytest.mark.parametrize("mode, cap", [("document", None), ("occurrence", 5), ("document", 3)])
def test_document_mode_and_cap_on_text(tokenizer, tmp_path, mode, cap):
    path = write_corpus(tmp_path / "c.jsonl", ENGLISH_DOCS)
    table = build_from_text([path], tokenizer, Counting(mode=mode, max_tokens_per_doc=cap)).table
    np.testing.assert_array_equal(table.counts, reference_counts(tokenizer, ENGLISH_DOCS, len(tokenizer), cap, mode))
    lengths = [len(tokenizer.encode(d, add_special_tokens=False)[:cap]) for d in ENGLISH_DOCS]
    assert table.tokens == sum(lengths)


def test_chinese_text_with_a_byte_level_bpe(tmp_path):
    chinese = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=400)
    path = write_corpus(tmp_path / "zh.jsonl.gz", CHINESE_DOCS)
    table = build_from_text([path], chinese, workers=2).table
    np.testing.assert_array_equal(table.counts, reference_counts(chinese, CHINESE_DOCS, len(chinese)))
    assert chinese.decode(chinese.encode(CHINESE_DOCS[0], add_special_tokens=False)) == CHINESE_DOCS[0]


def test_model_vocabulary_larger_than_the_tokenizer(tokenizer, tmp_path):
    path = write_corpus(tmp_path / "c.txt", ["the fox"])
    table = build_from_text([path], tokenizer, Counting(vocab_size=len(tokenizer) + 64)).table
    assert table.vocab_size == len(tokenizer) + 64 and table.counts[len(tokenizer) :].sum() == 0
    with pytest.raises(MiaFastError, match="smaller than the tokenizer"):
        build_from_text([path], tokenizer, Counting(vocab_size=10))


def test_interrupted_build_resumes_to_the_same_table(tokenizer, tmp_path, monkeypatch):
    for i in range(4):
        write_corpus(tmp_path / f"s{i}.jsonl", ENGLISH_DOCS[i::4])
    sources = sorted(tmp_path.glob("s*.jsonl"))
    uninterrupted = build_from_text(sources, tokenizer).table

    checkpoints = tmp_path / "out.freq.partial"
    count_piece = text_build.count_piece

    def dies_on_third_shard(piece, job):
        if piece.file == 2:
            raise KeyboardInterrupt
        return count_piece(piece, job)

    monkeypatch.setattr(text_build, "count_piece", dies_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        build_from_text(sources, tokenizer, checkpoint_dir=checkpoints, workers=2)
    monkeypatch.setattr(text_build, "count_piece", count_piece)
    report = build_from_text(sources, tokenizer, checkpoint_dir=checkpoints)
    assert report.resumed_shards == 2
    assert report.table.to_bytes() == uninterrupted.to_bytes()


def test_resume_refuses_other_settings(tokenizer, tmp_path):
    path = write_corpus(tmp_path / "c.jsonl", ENGLISH_DOCS)
    build_from_text([path], tokenizer, checkpoint_dir=tmp_path / "partial")
    with pytest.raises(MiaFastError, match="unfinished build with other settings"):
        build_from_text([path], tokenizer, Counting(mode="document"), checkpoint_dir=tmp_path / "partial")


def test_corrupt_checkpoint_is_counted_again(tokenizer, tmp_path):
    path = write_corpus(tmp_path / "c.jsonl", ENGLISH_DOCS)
    first = build_from_text([path], tokenizer, checkpoint_dir=tmp_path / "partial").table
    shard = tmp_path / "partial" / "shard-000000.freq"
    shard.write_bytes(shard.read_bytes()[:-3])
    report = build_from_text([path], tokenizer, checkpoint_dir=tmp_path / "partial")
    assert report.resumed_shards == 0 and report.table.to_bytes() == first.to_bytes()


# ---- bad text input ----


def bad_corpus(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"text": "the fox"}\n'
        b'{"text": "caf\xe9"}\n'  # Latin-1, not UTF-8
        b'{"text": "unterminated\n'
        b'{"title": "no text"}\n'
        b'["not", "an", "object"]\n'
        b'{"text": "the dog"}\n'
    )
    return path


def test_bad_records_stop_the_build_by_default(tokenizer, tmp_path):
    with pytest.raises(MiaFastError, match=r"bad.jsonl:2: not valid UTF-8.*--skip-bad-records"):
        build_from_text([bad_corpus(tmp_path)], tokenizer)


def test_bad_records_are_skipped_and_counted_on_request(tokenizer, tmp_path):
    report = build_from_text([bad_corpus(tmp_path)], tokenizer, corpus=CorpusFormat(skip_bad_records=True))
    assert report.bad_records == 4 and report.table.documents == 2
    assert [e.split(": ", 1)[0].rsplit(":", 1)[1] for e in report.bad_examples] == ["2", "3", "4", "5"]
    assert "no string field 'text' (found: title)" in report.bad_examples[2]
    np.testing.assert_array_equal(
        report.table.counts, reference_counts(tokenizer, ["the fox", "the dog"], len(tokenizer))
    )


def test_table_from_tokens_merges_with_table_from_text(tokenizer, tmp_path):
    docs = ENGLISH_DOCS[:20]
    ids = np.concatenate([tokenizer.encode(d, add_special_tokens=False) for d in docs]).astype(np.uint16)
    ids.tofile(tmp_path / "t.bin")
    from_tokens = build_from_tokens(
        [tmp_path / "t.bin"],
        Counting(vocab_size=len(tokenizer)),
        dtype="uint16",
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
    )
    from_text = build_from_text([write_corpus(tmp_path / "t.jsonl", docs)], tokenizer).table
    np.testing.assert_array_equal(from_tokens.counts, from_text.counts)
    merged = FrequencyTable.merge([from_tokens, from_text])
    np.testing.assert_array_equal(merged.counts, 2 * from_text.counts)


def test_files_counted_alone_merge_to_the_build_of_all_of_them(tokenizer, tmp_path):
    """count_text_file is one shard of a build (what a Ray task counts): the files' tables added in order are the
    build's table, and each file keeps its own bad records."""
    paths = [write_corpus(tmp_path / f"s{i}.jsonl", ENGLISH_DOCS[i::3]) for i in range(3)]
    with open(paths[1], "ab") as f:
        f.write(b"not json\n")
    counting, corpus = Counting(mode="document"), CorpusFormat(skip_bad_records=True)
    settings = text_build_settings(tokenizer, counting, corpus)
    assert settings["vocab_size"] == len(tokenizer) and settings["text_field"] == "text"
    recipe = choose_counter(tokenizer).recipe
    shards = [count_text_file(path, recipe, settings, workers=2, skip_bad_records=True) for path in paths]
    assert [bad.count for _, bad in shards] == [0, 1, 0]
    whole = build_from_text(paths, tokenizer, counting, corpus)
    assert FrequencyTable.merge([table for table, _ in shards]).to_bytes() == whole.table.to_bytes()
    assert whole.bad_records == 1


# ---- pieces, workers, libraries, formats ----


def test_the_table_is_the_same_on_any_workers_pieces_and_library(tokenizer, tmp_path, monkeypatch):
    """Pieces of a few lines each, batches of a few documents, 1 to 3 worker threads, two worker processes, and
    fastokens or the model's own tokenizer: the counts are byte for byte those of one document at a time."""
    from mia_fast.frequency import pieces

    monkeypatch.setattr(pieces, "PIECE_BYTES", 700)
    monkeypatch.setattr(pieces, "BLOCK_BYTES", 300)
    monkeypatch.setattr(text_build, "BATCH_CHARS", 500)
    paths = [write_corpus(tmp_path / f"s{i}.jsonl", ENGLISH_DOCS[i::2] + CHINESE_DOCS[i::2]) for i in range(2)]
    expected = reference_counts(tokenizer, ENGLISH_DOCS + CHINESE_DOCS, len(tokenizer))
    tables = {}
    for workers in (1, 2, 3):
        for backend in ("fast", "exact"):
            counting = Counting(tokenizer_backend=backend)
            tables[workers, backend] = build_from_text(paths, tokenizer, counting, workers=workers).table
    monkeypatch.setattr(text_build, "MOST_THREAD_WORKERS", 1)  # two workers are processes now
    tables["processes"] = build_from_text(paths, tokenizer, workers=2).table
    for key, table in tables.items():
        np.testing.assert_array_equal(table.counts, expected, err_msg=str(key))
        assert table.documents == len(ENGLISH_DOCS + CHINESE_DOCS)
    assert tables[1, "fast"].tokenized_by[0].startswith("fastokens ")
    assert tables[1, "exact"].tokenized_by[0].startswith("tokenizers ")
    assert tables["processes"].tokenized_by == tables[1, "fast"].tokenized_by
    # The same files counted twice (allowed): the fingerprint stays the model's whichever library tokenized.
    merged = FrequencyTable.merge([tables[1, "fast"], tables[1, "exact"]], allow_overlap=True)
    np.testing.assert_array_equal(merged.counts, 2 * expected)


def test_compressed_corpora_build_the_table_of_their_plain_lines(tokenizer, tmp_path):
    """.jsonl.zst (RedPajama, Dolma), C4's .json.gz, several zstd frames and gzip members, and parquet row groups:
    the table of the same documents in plain .jsonl."""
    plain = write_corpus(tmp_path / "c.jsonl", ENGLISH_DOCS)
    data = plain.read_bytes()
    half = data.index(b"\n", len(data) // 2) + 1
    (tmp_path / "c.jsonl.zst").write_bytes(zstd.compress(data[:half]) + zstd.compress(data[half:]))
    (tmp_path / "c4.json.gz").write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    write_corpus(tmp_path / "c.parquet", ENGLISH_DOCS)
    expected = build_from_text([plain], tokenizer).table
    for name in ("c.jsonl.zst", "c4.json.gz", "c.parquet"):
        table = build_from_text([tmp_path / name], tokenizer, workers=2).table
        np.testing.assert_array_equal(table.counts, expected.counts, err_msg=name)
        assert (table.tokens, table.documents) == (expected.tokens, expected.documents)


@pytest.mark.parametrize("name", ["t.jsonl.zst", "t.jsonl.gz"])
def test_a_truncated_compressed_file_is_one_line(tokenizer, tmp_path, name):
    data = "".join(json.dumps({"text": f"document {i} " * 50}) + "\n" for i in range(400)).encode()
    whole = zstd.compress(data) if name.endswith(".zst") else gzip.compress(data)
    (tmp_path / name).write_bytes(whole[: len(whole) // 2])
    with pytest.raises(MiaFastError, match=rf"{name}: cannot read: .*(ended before|truncated|end-of-stream)"):
        build_from_text([tmp_path / name], tokenizer)


def test_chinese_web_text_counts_the_same_through_both_libraries(tmp_path):
    """ChineseWebText's records (title, score, text, url, source_domain) and those of its version 2 (nested domain
    and toxicity), its text or its title counted: fastokens and the model's tokenizer give identical tables."""
    chinese = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=400)
    v1 = tmp_path / "cwt.jsonl"
    v1.write_text(
        "".join(
            json.dumps(
                {"title": doc[:6], "score": 0.95, "text": doc, "url": "http://x.cn", "source_domain": "x.cn"},
                ensure_ascii=False,
            )
            + "\n"
            for doc in CHINESE_DOCS
        ),
        encoding="utf-8",
    )
    v2 = tmp_path / "cwt2.jsonl.zst"
    lines = "".join(
        json.dumps(
            {
                "text": doc,
                "domain": {"single_label": "news", "multi_label": ["news"]},
                "toxicity": {"label": 0, "score": 1e-5},
                "quality_score": 0.96,
            }
        )
        + "\n"
        for doc in CHINESE_DOCS
    )
    v2.write_bytes(zstd.compress(lines.encode()))
    for field, docs in (("text", CHINESE_DOCS), ("title", [doc[:6] for doc in CHINESE_DOCS])):
        sources = [v1] if field == "title" else [v1, v2]
        expected = reference_counts(chinese, docs * len(sources), len(chinese))
        corpus = CorpusFormat(text_field=field)
        fast = build_from_text(sources, chinese, Counting(tokenizer_backend="fast"), corpus).table
        exact = build_from_text(sources, chinese, Counting(tokenizer_backend="exact"), corpus).table
        np.testing.assert_array_equal(fast.counts, expected)
        np.testing.assert_array_equal(exact.counts, expected)


def test_bad_records_in_later_pieces_name_their_lines(tokenizer, tmp_path, monkeypatch):
    """A bad line deep in a file, read by a piece that starts mid-file, is named by its line number."""
    from mia_fast.frequency import pieces

    monkeypatch.setattr(pieces, "PIECE_BYTES", 256)
    lines = [json.dumps({"text": f"doc {i} " + "x" * (i % 7)}) for i in range(120)]
    lines[97] = '{"text": "unterminated'
    lines[40] = '{"title": "no text"}'
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n\n   \n")
    with pytest.raises(MiaFastError, match=r"c.jsonl:41: no string field 'text'"):
        build_from_text([path], tokenizer, workers=2)
    report = build_from_text([path], tokenizer, corpus=CorpusFormat(skip_bad_records=True), workers=2)
    assert report.bad_records == 2 and report.table.documents == 118
    assert [e.split(": ", 1)[0].rsplit(":", 1)[1] for e in report.bad_examples] == ["41", "98"]


def test_lone_surrogates_count_as_the_replacement_character(tokenizer, tmp_path):
    """json reads a lone surrogate escaped in a record; no tokenizer takes one, so it counts as U+FFFD (as scoring
    tokenizes it), and the report says how many documents held one."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"text": "caf\\ud800e"}\n{"text": "plain"}\n{"text": "\\udfff\\ud800 x"}\n')
    report = build_from_text([path], tokenizer)
    expected = reference_counts(tokenizer, ["caf\ufffde", "plain", "\ufffd\ufffd x"], len(tokenizer))
    np.testing.assert_array_equal(report.table.counts, expected)
    assert report.surrogate_documents == 2


def test_a_byte_order_mark_is_no_part_of_the_first_document(tokenizer, tmp_path):
    for name in ("b.jsonl", "b.txt"):
        path = write_corpus(tmp_path / name, ["the fox", "the dog"])
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        table = build_from_text([path], tokenizer).table
        np.testing.assert_array_equal(table.counts, reference_counts(tokenizer, ["the fox", "the dog"], len(tokenizer)))
