"""Frequency tables: the file format (every field checked, atomic writes), merging, Laplace
log-probabilities, and their use by DC-PDD."""

import hashlib
import json
import struct
from dataclasses import replace

import numpy as np
import pytest
from conftest import CORPUS

from mia_fast import DcpddSettings, Detector, load_model
from mia_fast.errors import MiaFastWarning
from mia_fast.frequency.sources import TableSource
from mia_fast.frequency.table import (
    FORMAT_VERSION,
    MAGIC,
    FrequencyTable,
    FrequencyTableError,
    laplace_log_frequencies,
    model_log_frequencies,
)
from mia_fast.tokens.fingerprint import tokenizer_fingerprint

pytestmark = pytest.mark.lower_bounds
# A fingerprint of this mia-fast (an older one wrote 64 hex).
MODERN = "tok2:0123456789abcdef:model=aaaaaaaaaaaa,normalizer=bbbbbbbbbbbb,pre_tokenizer=cccccccccccc"


def make_table(vocab=50, seed=0, **fields) -> FrequencyTable:
    counts = np.random.default_rng(seed).integers(0, 1000, vocab).astype(np.uint64)
    options = dict(
        tokens=int(counts.sum()), documents=7, tokenizer_fingerprint="ab" * 32, sources=("shard-0.jsonl.gz",)
    )
    options.update(fields)
    return FrequencyTable(counts, **options)


def test_round_trip_keeps_every_field(tmp_path):
    table = make_table(mode="document", max_tokens_per_doc=1024, tokens=10**9, documents=None, sources=("a", "b/ü.txt"))
    path = table.save(tmp_path / "t.freq")
    loaded = FrequencyTable.load(path)
    np.testing.assert_array_equal(loaded.counts, table.counts)
    assert loaded.counts.dtype == np.uint64
    assert loaded.header() == table.header()
    assert path.read_bytes()[:8] == MAGIC


def test_save_refuses_to_replace_without_overwrite_and_leaves_no_temporary(tmp_path):
    path = make_table(seed=1).save(tmp_path / "t.freq")
    before = path.read_bytes()
    with pytest.raises(FrequencyTableError, match="exists"):
        make_table(seed=2).save(path)
    assert path.read_bytes() == before
    make_table(seed=2).save(path, overwrite=True)
    assert path.read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.freq"]


def test_every_truncation_is_refused():
    data = make_table(vocab=9).to_bytes()
    for cut in range(len(data)):
        with pytest.raises(FrequencyTableError):
            FrequencyTable.from_bytes(data[:cut])


def test_every_flipped_byte_is_refused():
    data = make_table(vocab=9).to_bytes()
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        with pytest.raises(FrequencyTableError):
            FrequencyTable.from_bytes(bytes(damaged))


def reseal(body: bytes) -> bytes:
    """A damaged image with a valid checksum, so the checks behind the checksum are reached."""
    return body + hashlib.sha256(body).digest()


def test_wrong_magic_and_version_are_named():
    data = make_table().to_bytes()
    with pytest.raises(FrequencyTableError, match="not a mia-fast frequency table"):
        FrequencyTable.from_bytes(b"PK\x03\x04" + data[4:])
    newer = data[:8] + struct.pack("<I", 4) + data[12:]
    with pytest.raises(FrequencyTableError, match="format version 4; this mia-fast reads versions 1, 2, 3"):
        FrequencyTable.from_bytes(newer)


def sealed_with_header(header: dict, counts: np.ndarray, version: int = FORMAT_VERSION) -> bytes:
    text = json.dumps(header).encode()
    pad = b"\x00" * (-(16 + len(text)) % 8)
    return reseal(MAGIC + struct.pack("<II", version, len(text)) + text + pad + counts.astype("<u8").tobytes())


def test_a_table_of_version_1_still_loads_and_says_nothing_of_its_tokenizer_library():
    """Tables written before the header named the library that tokenized: every one a user has still loads."""
    header = make_table(vocab=5).header() | {"vocab_size": 5, "tokens": 10, "sources": ["shard-0.jsonl.gz"]}
    del header["tokenized_by"]
    table = FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=1))
    assert table.tokenized_by == () and table.tokens == 10 and table.sources == (TableSource("shard-0.jsonl.gz"),)
    with pytest.raises(FrequencyTableError, match="exactly the fields"):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=2))
    header["tokenized_by"] = ["fastokens 0.3.5"]
    with pytest.raises(FrequencyTableError, match="exactly the fields"):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=1))
    header["tokenized_by"] = [3]
    with pytest.raises(FrequencyTableError, match="its tokenized_by strings"):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=2))


def test_merged_tables_name_every_library_that_tokenized_them_once():
    fast = make_table(tokenized_by=("fastokens 0.3.5",), tokenizer_fingerprint=MODERN)
    exact = make_table(tokenized_by=("tokenizers 0.23.3",), tokenizer_fingerprint=MODERN, sources=("shard-1.jsonl.gz",))
    fast_again = replace(fast, sources=("shard-2.jsonl.gz",))
    merged = FrequencyTable.merge([fast, exact, fast_again, replace(fast, sources=(), tokenized_by=())])
    assert merged.tokenized_by == ("fastokens 0.3.5", "tokenizers 0.23.3")
    assert FrequencyTable.from_bytes(merged.to_bytes()).tokenized_by == merged.tokenized_by


@pytest.mark.parametrize(
    "change, message",
    [
        ({"vocab_size": 4}, "holds 40 bytes of counts, expected 32"),
        ({"tokens": 1}, "counts add up to 10, inconsistent with 1 tokens"),
        ({"mode": "sometimes"}, "inconsistent"),
        ({"documents": "7"}, "'documents' has the wrong type"),
        ({"vocab_size": True}, "'vocab_size' has the wrong type"),
        ({"max_tokens_per_doc": 0}, "max_tokens_per_doc must be positive"),
        ({"extra": 1}, "exactly the fields"),
    ],
)
def test_header_fields_are_checked(change, message):
    header = make_table(vocab=5).header() | {"vocab_size": 5, "tokens": 10}
    header.update(change)
    with pytest.raises(FrequencyTableError, match=message):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64)))


def test_merge_adds_counts_documents_and_sources():
    a = make_table(seed=1, sources=("s0",), tokenizer_fingerprint=MODERN)
    b = make_table(seed=2, sources=("s1",), documents=3, tokenizer_fingerprint=MODERN)
    merged = FrequencyTable.merge([a, b])
    np.testing.assert_array_equal(merged.counts, a.counts + b.counts)
    assert (merged.tokens, merged.documents) == (a.tokens + b.tokens, 10)
    assert merged.sources == (TableSource("s0"), TableSource("s1"))
    assert FrequencyTable.merge([a, replace(b, documents=None)]).documents is None


@pytest.mark.parametrize(
    "other, attribute",
    [
        (make_table(vocab=51), "vocab_size"),
        (make_table(mode="document"), "mode"),
        (make_table(max_tokens_per_doc=1024), "max_tokens_per_doc"),
    ],
)
def test_merge_refuses_tables_of_other_settings(other, attribute):
    with pytest.raises(FrequencyTableError, match=f"table 2 has {attribute}"):
        FrequencyTable.merge([make_table(), other])


def test_log_probs_are_laplace_and_pad_a_larger_model_vocabulary():
    table = make_table(vocab=8)
    np.testing.assert_allclose(table.log_probs(), laplace_log_frequencies(table.counts, 8), rtol=1e-15)
    padded = table.log_probs(10)
    expected = np.log(np.append(table.counts.astype(float), [0, 0]) + 1) - np.log(table.counts.sum() + 10)
    np.testing.assert_allclose(padded, expected, rtol=1e-15)
    with pytest.raises(FrequencyTableError, match="only 7"):
        table.log_probs(7)


def test_dcpdd_from_a_table_equals_dcpdd_from_the_same_counts_npy(tiny_model_dir, tmp_path):
    loaded = load_model(str(tiny_model_dir))
    ids = np.concatenate([loaded.tokenizer.encode(t, add_special_tokens=False) for t in CORPUS * 3])
    counts = np.bincount(ids, minlength=loaded.vocab_size).astype(np.uint64)
    np.save(tmp_path / "counts.npy", counts)
    table = FrequencyTable(counts, int(counts.sum()), 21, tokenizer_fingerprint=tokenizer_fingerprint(loaded.tokenizer))
    table.save(tmp_path / "t.freq")
    texts = ["the quick brown fox", "a journey of a thousand miles", "to be or not to be"]
    from_npy = Detector(loaded, [DcpddSettings(frequencies=tmp_path / "counts.npy")]).score(texts, ["dcpdd"])["dcpdd"]
    from_file = Detector(loaded, [DcpddSettings(frequencies=tmp_path / "t.freq")]).score(texts, ["dcpdd"])["dcpdd"]
    from_object = Detector(loaded, [DcpddSettings(frequencies=table)]).score(texts, ["dcpdd"])["dcpdd"]
    np.testing.assert_array_equal(from_file, from_npy)
    np.testing.assert_array_equal(from_object, from_npy)


def test_a_table_of_another_tokenizer_is_refused(tiny_model_dir, tiny_reference_dir):
    target, other = load_model(str(tiny_model_dir)), load_model(str(tiny_reference_dir))
    table = FrequencyTable(
        np.ones(target.vocab_size, np.uint64),
        target.vocab_size,
        1,
        tokenizer_fingerprint=tokenizer_fingerprint(other.tokenizer),
    )
    with pytest.raises(FrequencyTableError, match="built with another tokenizer"):
        model_log_frequencies(table, target.tokenizer, target.vocab_size)


def test_a_table_without_fingerprint_warns_and_needs_the_exact_vocabulary(tiny_model_dir):
    target = load_model(str(tiny_model_dir))
    table = FrequencyTable(np.ones(target.vocab_size, np.uint64), target.vocab_size, None)
    with pytest.warns(UserWarning, match="no tokenizer fingerprint"):
        model_log_frequencies(table, target.tokenizer, target.vocab_size)
    smaller = FrequencyTable(np.ones(target.vocab_size - 1, np.uint64), target.vocab_size - 1, None)
    with pytest.warns(UserWarning), pytest.raises(FrequencyTableError, match="covers"):
        model_log_frequencies(smaller, target.tokenizer, target.vocab_size)


# ---- merge: one tokenizer, no document counted twice (issue 67) ----


def word_tokenizer(normalizer=None):
    """A transformers tokenizer of six words, with ``normalizer`` or none."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "the", "quick", "brown", "fox", "The"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    if normalizer is not None:
        core.normalizer = normalizer
    return PreTrainedTokenizerFast(tokenizer_object=core)


def test_merge_names_the_part_of_the_tokenizers_that_differs():
    """The issue's first case: the same tokenizer.json with and without a Lowercase normalizer gives other ids."""
    from tokenizers import normalizers

    lower, plain = word_tokenizer(normalizers.Lowercase()), word_tokenizer()
    assert lower.encode("The fox") != plain.encode("The fox")
    a = make_table(vocab=6, sources=("a.txt",), tokenizer_fingerprint=tokenizer_fingerprint(lower))
    b = make_table(vocab=6, sources=("b.txt",), tokenizer_fingerprint=tokenizer_fingerprint(plain))
    with pytest.raises(
        FrequencyTableError,
        match=r"^cannot merge lo.freq and pl.freq: they were counted with different tokenizers \(their normalizers "
        r"differ\)$",
    ):
        FrequencyTable.merge([a, b], ["lo.freq", "pl.freq"])
    same = make_table(vocab=6, sources=("c.txt",), tokenizer_fingerprint=tokenizer_fingerprint(word_tokenizer()))
    assert FrequencyTable.merge([b, same]).tokenizer_fingerprint == b.tokenizer_fingerprint


def test_merge_of_older_tables_is_refused_unless_their_older_fingerprints_are_equal():
    older, other_older = "ab" * 32, "cd" * 32
    a, b = (
        make_table(sources=("a",), tokenizer_fingerprint=older),
        make_table(sources=("b",), tokenizer_fingerprint=older),
    )
    with pytest.warns(MiaFastWarning, match="older mia-fast.*cannot be checked to match; rebuild them") as shown:
        merged = FrequencyTable.merge([a, b])
    assert len(shown) == 1 and merged.tokenizer_fingerprint == older
    with pytest.raises(FrequencyTableError, match=r"different tokenizers \(even their vocabularies, merges or added"):
        FrequencyTable.merge([a, make_table(sources=("c",), tokenizer_fingerprint=other_older)])
    modern = make_table(sources=("m",), tokenizer_fingerprint=MODERN)
    with pytest.raises(
        FrequencyTableError, match="old.freq records the tokenizer fingerprint of an older mia-fast.*rebuild old.freq"
    ):
        FrequencyTable.merge([modern, a], ["new.freq", "old.freq"])
    unknown = make_table(sources=("u",), tokenizer_fingerprint=None)
    with pytest.raises(FrequencyTableError, match="u.freq records no tokenizer.*rebuild u.freq with its tokenizer"):
        FrequencyTable.merge([unknown, modern], ["u.freq", "new.freq"])
    with pytest.warns(MiaFastWarning, match="record no tokenizer"):
        FrequencyTable.merge([unknown, make_table(sources=("v",), tokenizer_fingerprint=None)])


def test_merge_refuses_a_source_of_two_tables_naming_it():
    a = make_table(seed=1, sources=("a.txt", "b.txt"), tokenizer_fingerprint=MODERN)
    b = make_table(seed=2, sources=("c.txt", "a.txt"), tokenizer_fingerprint=MODERN)
    with pytest.raises(
        FrequencyTableError,
        match=r"^cannot merge one.freq and two.freq: both count a.txt \(the same path\), whose documents would be "
        r"counted twice; pass --allow-overlap",
    ):
        FrequencyTable.merge([a, b], ["one.freq", "two.freq"])
    merged = FrequencyTable.merge([a, b], allow_overlap=True)
    assert [(s.path, s.counted) for s in merged.sources] == [("a.txt", 2), ("b.txt", 1), ("c.txt", 1)]
    np.testing.assert_array_equal(merged.counts, a.counts + b.counts)
    assert FrequencyTable.from_bytes(merged.to_bytes()).sources == merged.sources
    assert [s["counted"] for s in merged.header()["sources"]] == [2, 1, 1]


def test_merge_knows_a_source_by_its_content_under_another_path(tmp_path):
    (tmp_path / "copy").mkdir()
    for name in ("a.txt", "copy/a.txt"):
        (tmp_path / name).write_text("the quick brown fox\n")
    (tmp_path / "empty1.txt").write_bytes(b"")
    (tmp_path / "empty2.txt").write_bytes(b"")
    a = make_table(seed=1, sources=(TableSource.of(tmp_path / "a.txt"),), tokenizer_fingerprint=MODERN)
    b = make_table(seed=2, sources=(TableSource.of(tmp_path / "copy/a.txt"),), tokenizer_fingerprint=MODERN)
    with pytest.raises(FrequencyTableError, match=r"the same file \(the same size and the same first and last MiB\)"):
        FrequencyTable.merge([a, b])
    merged = FrequencyTable.merge([a, b], allow_overlap=True)
    assert [(s.path, s.counted) for s in merged.sources] == [(str(tmp_path / "a.txt"), 2)]
    empties = [
        make_table(seed=i, sources=(TableSource.of(tmp_path / f"empty{i}.txt"),), tokenizer_fingerprint=MODERN)
        for i in (1, 2)
    ]
    assert len(FrequencyTable.merge(empties).sources) == 2  # an empty file holds no document to count twice
    older = make_table(seed=3, sources=(str(tmp_path / "a.txt"),), tokenizer_fingerprint=MODERN)
    with pytest.raises(FrequencyTableError, match="the same path"):
        FrequencyTable.merge([older, a])
    assert FrequencyTable.merge([older, a], allow_overlap=True).sources == (replace(a.sources[0], counted=2),)


def test_merge_refuses_a_table_and_its_copy():
    table = make_table(sources=(), tokenizer_fingerprint=MODERN)
    for copy in (table, FrequencyTable.from_bytes(table.to_bytes())):
        with pytest.raises(FrequencyTableError, match="cannot merge t.freq and c.freq: they are copies of one table"):
            FrequencyTable.merge([table, copy], ["t.freq", "c.freq"])
    assert FrequencyTable.merge([table, table], allow_overlap=True).tokens == 2 * table.tokens
    other = make_table(seed=1, sources=(), tokenizer_fingerprint=MODERN)
    assert FrequencyTable.merge([table, other]).tokens == table.tokens + other.tokens


def test_sources_of_each_format_version_are_checked():
    header = make_table(vocab=5).header() | {"vocab_size": 5, "tokens": 10}
    counts = np.full(5, 2, np.uint64)
    with pytest.raises(FrequencyTableError, match="the sources of a table of version 2 must be paths"):
        FrequencyTable.from_bytes(sealed_with_header(header, counts, version=2))
    with pytest.raises(FrequencyTableError, match="the sources of a table of version 3 must be objects"):
        FrequencyTable.from_bytes(sealed_with_header(header | {"sources": ["a.txt"]}, counts))
    bad = header | {"sources": [{"path": "a.txt", "bytes": 3, "sample_sha256": None, "counted": 0}]}
    with pytest.raises(FrequencyTableError, match="'counted' must be positive"):
        FrequencyTable.from_bytes(sealed_with_header(bad, counts))
