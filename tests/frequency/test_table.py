"""Frequency tables: the file format (every field checked, atomic writes), merging, Laplace
log-probabilities, and their use by DC-PDD."""

import hashlib
import json
import struct

import numpy as np
import pytest
from conftest import CORPUS

from mia_fast import DcpddSettings, Detector, load_model
from mia_fast.frequency.table import (
    MAGIC,
    FrequencyTable,
    FrequencyTableError,
    laplace_log_frequencies,
    model_log_frequencies,
)
from mia_fast.tokens.fingerprint import tokenizer_fingerprint

pytestmark = pytest.mark.lower_bounds


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
    newer = data[:8] + struct.pack("<I", 3) + data[12:]
    with pytest.raises(FrequencyTableError, match="format version 3; this mia-fast reads versions 1, 2"):
        FrequencyTable.from_bytes(newer)


def sealed_with_header(header: dict, counts: np.ndarray, version: int = 2) -> bytes:
    text = json.dumps(header).encode()
    pad = b"\x00" * (-(16 + len(text)) % 8)
    return reseal(MAGIC + struct.pack("<II", version, len(text)) + text + pad + counts.astype("<u8").tobytes())


def test_a_table_of_version_1_still_loads_and_says_nothing_of_its_tokenizer_library():
    """Tables written before the header named the library that tokenized: every one a user has still loads."""
    header = make_table(vocab=5).header() | {"vocab_size": 5, "tokens": 10}
    del header["tokenized_by"]
    table = FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=1))
    assert table.tokenized_by == () and table.tokens == 10
    with pytest.raises(FrequencyTableError, match="exactly the fields"):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=2))
    header["tokenized_by"] = ["fastokens 0.3.5"]
    with pytest.raises(FrequencyTableError, match="exactly the fields"):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=1))
    header["tokenized_by"] = [3]
    with pytest.raises(FrequencyTableError, match="sources and tokenized_by strings"):
        FrequencyTable.from_bytes(sealed_with_header(header, np.full(5, 2, np.uint64), version=2))


def test_merged_tables_name_every_library_that_tokenized_them_once():
    fast, exact = make_table(tokenized_by=("fastokens 0.3.5",)), make_table(tokenized_by=("tokenizers 0.23.3",))
    merged = FrequencyTable.merge([fast, exact, fast, make_table()])
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
    a, b = make_table(seed=1, sources=("s0",)), make_table(seed=2, sources=("s1",), documents=3)
    merged = FrequencyTable.merge([a, b])
    np.testing.assert_array_equal(merged.counts, a.counts + b.counts)
    assert (merged.tokens, merged.documents, merged.sources) == (a.tokens + b.tokens, 10, ("s0", "s1"))
    assert FrequencyTable.merge([a, make_table(documents=None)]).documents is None


@pytest.mark.parametrize(
    "other, attribute",
    [
        (make_table(vocab=51), "vocab_size"),
        (make_table(mode="document"), "mode"),
        (make_table(max_tokens_per_doc=1024), "max_tokens_per_doc"),
        (make_table(tokenizer_fingerprint="cd" * 32), "tokenizer_fingerprint"),
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
