import numpy as np
import pytest

from mia_fast import _native
from mia_fast.errors import MiaFastError
from mia_fast.frequency.build import count_token_ids


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.int32, np.int64])
@pytest.mark.parametrize("threads", [1, 2, 0])
def test_counts_equal_bincount(dtype, threads):
    rng = np.random.default_rng(0)
    vocab = 50257
    ids = rng.zipf(1.3, size=3_000_001) % vocab
    ids = ids.astype(dtype)
    counts = count_token_ids(ids, vocab, threads=threads)
    assert counts.dtype == np.uint64
    np.testing.assert_array_equal(counts, np.bincount(ids.astype(np.int64), minlength=vocab))


def test_empty_buffer_gives_zero_counts():
    np.testing.assert_array_equal(count_token_ids(np.zeros(0, np.uint32), 7), np.zeros(7, np.uint64))


def test_out_of_range_id_names_its_position():
    ids = np.array([0, 1, 2, 9, 1], dtype=np.uint32)
    with pytest.raises(MiaFastError, match="token id 9 at position 3 is outside the vocabulary"):
        count_token_ids(ids, 5)


def test_negative_id_is_refused():
    with pytest.raises(MiaFastError, match="token id -1 at position 1"):
        count_token_ids(np.array([3, -1], dtype=np.int64), 5)


def test_bad_buffers_are_refused():
    with pytest.raises(MiaFastError, match="uint16, uint32, int32 or int64"):
        count_token_ids(np.array([1.0, 2.0]), 5)
    with pytest.raises(ValueError, match="1-D"):
        _native.count_tokens(np.zeros((2, 2), np.uint16), 5)
    with pytest.raises(ValueError, match="vocab_size must be positive"):
        _native.count_tokens(np.zeros(2, np.uint16), 0)


def test_non_contiguous_input_is_counted_correctly():
    ids = np.arange(20, dtype=np.int64)[::3]
    np.testing.assert_array_equal(count_token_ids(ids, 20), np.bincount(ids, minlength=20))
