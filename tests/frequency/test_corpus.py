"""Building frequency tables from text corpora and token files: counts identical to numpy on every
input type, document mode and caps, interrupted builds that resume, and every bad input refused."""

import gzip
import json
import struct

import numpy as np
import pytest
from conftest import CORPUS, train_tokenizer

from mia_fast.errors import MiaFastError
from mia_fast.frequency import sources as corpus
from mia_fast.frequency.sources import CorpusFormat, Counting, build_from_text, build_from_tokens
from mia_fast.frequency.table import FrequencyTable, tokenizer_fingerprint

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
    monkeypatch.setattr(corpus, "BATCH_CHARS", 300)  # many batches in flight per shard
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
    count_shard = corpus._count_text_shard
    calls = []

    def dies_on_third_shard(path, *args):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return count_shard(path, *args)

    monkeypatch.setattr(corpus, "_count_text_shard", dies_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        build_from_text(sources, tokenizer, checkpoint_dir=checkpoints)
    monkeypatch.setattr(corpus, "_count_text_shard", count_shard)
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


def test_invalid_utf8_in_txt_and_bad_parquet_values(tokenizer, tmp_path):
    txt = tmp_path / "c.txt"
    txt.write_bytes(b"the fox\n\xff\xfe broken\nthe dog\n")
    with pytest.raises(MiaFastError, match="c.txt:2: not valid UTF-8"):
        build_from_text([txt], tokenizer)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a fox", None]}), tmp_path / "c.parquet")
    assert (
        build_from_text([tmp_path / "c.parquet"], tokenizer, corpus=CorpusFormat(skip_bad_records=True)).bad_records
        == 1
    )
    with pytest.raises(MiaFastError, match="no column 'body'"):
        build_from_text([tmp_path / "c.parquet"], tokenizer, corpus=CorpusFormat(text_field="body"))


def test_empty_and_missing_corpora(tokenizer, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(MiaFastError, match="holds no tokens"):
        build_from_text([empty], tokenizer)
    with pytest.raises(MiaFastError, match="no such file"):
        build_from_text([tmp_path / "missing.jsonl"], tokenizer)
    with pytest.raises(MiaFastError, match="matches no file"):
        build_from_text([str(tmp_path / "nothing-*.jsonl")], tokenizer)
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(MiaFastError, match="unsupported corpus format"):
        build_from_text([tmp_path / "notes.md"], tokenizer)
    (tmp_path / "broken.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(MiaFastError, match="broken.jsonl.gz: cannot read"):
        build_from_text([tmp_path / "broken.jsonl.gz"], tokenizer)


# ---- token files ----


def zipf_ids(n, vocab, seed=0):
    return ((np.random.default_rng(seed).zipf(1.3, n) - 1) % vocab).astype(np.int64)


def write_megatron(prefix, documents, dtype=np.uint16, code=8, sequences_per_doc=1):
    """A .bin/.idx pair laid out as Megatron-LM's IndexedDatasetBuilder writes it."""
    sequences = [part for doc in documents for part in np.array_split(doc, sequences_per_doc)]
    np.concatenate(sequences).astype(dtype).tofile(f"{prefix}.bin")
    lengths = np.array([len(s) for s in sequences], np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) * np.dtype(dtype).itemsize
    doc_index = np.arange(0, len(sequences) + 1, sequences_per_doc, dtype=np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(doc_index)))
        f.write(lengths.tobytes() + pointers.tobytes() + doc_index.tobytes())


@pytest.mark.parametrize("dtype, vocab", [("uint16", 50257), ("uint32", 151936)])
def test_raw_and_npy_token_files_count_like_bincount(tmp_path, dtype, vocab):
    ids = zipf_ids(3_000_003, vocab)
    raw = tmp_path / "train.bin"
    ids.astype(dtype).tofile(raw)
    headerless = tmp_path / "part-0.npy"  # dolma: a raw stream named .npy
    ids.astype(dtype).tofile(headerless)
    with_header = tmp_path / "ids.npy"
    np.save(with_header, ids.astype(dtype))
    expected = np.bincount(ids, minlength=vocab)
    for files, given in (([raw], dtype), ([headerless], dtype), ([with_header], None)):
        table = build_from_tokens(files, Counting(vocab_size=vocab), dtype=given, threads=2)
        np.testing.assert_array_equal(table.counts, expected)
        assert table.tokens == len(ids) and table.documents is None
    both = build_from_tokens([raw, with_header], Counting(vocab_size=vocab), dtype=dtype)
    np.testing.assert_array_equal(both.counts, 2 * expected)


def test_megatron_pairs_count_by_document(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "TOKEN_CHUNK", 10_000)  # many chunks, cut at document boundaries
    rng = np.random.default_rng(1)
    documents = [zipf_ids(int(rng.integers(0, 3000)), 50257, seed=i) for i in range(200)]
    write_megatron(tmp_path / "c4_text_document", documents, sequences_per_doc=2)
    ids = np.concatenate(documents)
    for source in ("c4_text_document", "c4_text_document.bin", "c4_text_document.idx"):
        table = build_from_tokens([tmp_path / source], Counting(vocab_size=50257))
        np.testing.assert_array_equal(table.counts, np.bincount(ids, minlength=50257))
        assert table.documents == 200
    distinct = build_from_tokens(
        [tmp_path / "c4_text_document"], Counting(mode="document", max_tokens_per_doc=1024, vocab_size=50257)
    )
    expected = sum(np.bincount(np.unique(d[:1024]), minlength=50257) for d in documents)
    np.testing.assert_array_equal(distinct.counts, expected)
    assert distinct.tokens == sum(min(len(d), 1024) for d in documents)


def test_separator_gives_documents_to_a_raw_stream(tmp_path):
    eot = 0
    documents = [np.array([5, 5, 6, eot]), np.array([6, 6, eot]), np.array([7, 5])]
    np.concatenate(documents).astype(np.uint16).tofile(tmp_path / "s.bin")
    table = build_from_tokens(
        [tmp_path / "s.bin"], Counting(mode="document", vocab_size=8), dtype="uint16", doc_separator=eot
    )
    np.testing.assert_array_equal(table.counts, [2, 0, 0, 0, 0, 2, 2, 1])
    assert table.documents == 3
    with pytest.raises(MiaFastError, match="need documents; give --doc-separator"):
        build_from_tokens([tmp_path / "s.bin"], Counting(max_tokens_per_doc=2, vocab_size=8), dtype="uint16")


def test_bad_token_files_are_refused(tmp_path):
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(MiaFastError, match="3 bytes is not a whole number of uint16 ids"):
        build_from_tokens([tmp_path / "odd.bin"], Counting(vocab_size=10), dtype="uint16")
    with pytest.raises(MiaFastError, match="needs --dtype"):
        build_from_tokens([tmp_path / "odd.bin"], Counting(vocab_size=10))
    ids = np.zeros(300_000, np.uint16)
    ids[123_456] = 60_000
    ids.tofile(tmp_path / "big.bin")
    with pytest.raises(
        MiaFastError, match=r"big.bin: token id 60000 at position 123456 is outside the vocabulary \[0, 50257\)"
    ):
        build_from_tokens([tmp_path / "big.bin"], Counting(vocab_size=50257), dtype="uint16")
    np.save(tmp_path / "floats.npy", np.zeros(4, np.float32))
    with pytest.raises(MiaFastError, match="expected a 1-D array"):
        build_from_tokens([tmp_path / "floats.npy"], Counting(vocab_size=10))


def test_counting_settings_are_checked_when_made(tmp_path):
    with pytest.raises(MiaFastError, match="mode must be one of occurrence, document, got 'sometimes'"):
        Counting(mode="sometimes")
    with pytest.raises(MiaFastError, match="max_tokens_per_doc must be positive, got 0"):
        Counting(max_tokens_per_doc=0)
    np.zeros(4, np.uint16).tofile(tmp_path / "t.bin")
    with pytest.raises(MiaFastError, match=r"needs the vocabulary size: Counting\(vocab_size=...\)"):
        build_from_tokens([tmp_path / "t.bin"], Counting(), dtype="uint16")


def test_first_bad_id_position_is_file_relative_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "TOKEN_CHUNK", 1000)
    ids = np.ones(5000, np.uint32)
    ids[3210] = 99
    ids[4000] = 77
    ids.tofile(tmp_path / "t.bin")
    with pytest.raises(MiaFastError, match="token id 99 at position 3210"):
        build_from_tokens([tmp_path / "t.bin"], Counting(vocab_size=10), dtype="uint32")


def test_megatron_index_that_does_not_match_its_bin(tmp_path):
    write_megatron(tmp_path / "d", [np.arange(10), np.arange(5)])
    with open(tmp_path / "d.bin", "ab") as f:
        f.write(b"\x00\x00")
    with pytest.raises(
        MiaFastError, match="d.idx does not match .*d.bin: the index describes 30 bytes of tokens, the .bin holds 32"
    ):
        build_from_tokens([tmp_path / "d"], Counting(vocab_size=20))
    idx = (tmp_path / "d.idx").read_bytes()
    (tmp_path / "d.idx").write_bytes(idx[:-5])
    with pytest.raises(MiaFastError, match="d.idx: the index is truncated"):
        build_from_tokens([tmp_path / "d"], Counting(vocab_size=20))
    (tmp_path / "d.idx").write_bytes(b"NOTANIDX" + idx[8:])
    with pytest.raises(MiaFastError, match="not a Megatron index"):
        build_from_tokens([tmp_path / "d"], Counting(vocab_size=20))
    write_megatron(tmp_path / "f", [np.arange(4)], dtype=np.float32, code=7)
    with pytest.raises(MiaFastError, match="dtype code 7 is not a token id type"):
        build_from_tokens([tmp_path / "f"], Counting(vocab_size=20))
    write_megatron(tmp_path / "g", [np.arange(4)])
    with pytest.raises(MiaFastError, match="the index says uint16 ids, not uint32"):
        build_from_tokens([tmp_path / "g"], Counting(vocab_size=20), dtype="uint32")


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
