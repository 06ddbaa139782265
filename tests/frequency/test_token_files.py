"""Building frequency tables from pre-tokenized files: raw streams, .npy files and Megatron .bin/.idx pairs
counted exactly like numpy, documents from an index or a separator, and every bad token file refused."""

import struct

import numpy as np
import pytest

from mia_fast.errors import MiaFastError
from mia_fast.frequency import token_files
from mia_fast.frequency.build import Counting
from mia_fast.frequency.token_files import build_from_tokens

pytestmark = pytest.mark.lower_bounds


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
    monkeypatch.setattr(token_files, "TOKEN_CHUNK", 10_000)  # many chunks, cut at document boundaries
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


def test_first_bad_id_position_is_file_relative_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(token_files, "TOKEN_CHUNK", 1000)
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


def test_a_token_build_needs_the_vocabulary_size(tmp_path):
    np.zeros(4, np.uint16).tofile(tmp_path / "t.bin")
    with pytest.raises(MiaFastError, match=r"needs the vocabulary size: Counting\(vocab_size=...\)"):
        build_from_tokens([tmp_path / "t.bin"], Counting(), dtype="uint16")
