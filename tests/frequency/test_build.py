"""The Python face of the counting core: what a table counts (checked when made), counts by occurrence or by
document with a cap, documents cut at a separator id, and the batch counter that counts what each counting tokenizer
makes of a batch."""

import numpy as np
import pytest
from conftest import train_tokenizer

from mia_fast.errors import MiaFastError
from mia_fast.frequency.build import (
    BatchCounter,
    Counting,
    TokenIdOutOfRange,
    count_documents,
    counted_tokens,
    separator_offsets,
    tokenizer_vocab_size,
)
from mia_fast.frequency.counting_tokenizers import FastokensCounter, PythonCounter, RustCounter, tokenizer_json

pytestmark = pytest.mark.lower_bounds


def test_counting_settings_are_checked_when_made():
    with pytest.raises(MiaFastError, match="mode must be one of occurrence, document, got 'sometimes'"):
        Counting(mode="sometimes")
    with pytest.raises(MiaFastError, match="max_tokens_per_doc must be positive, got 0"):
        Counting(max_tokens_per_doc=0)


def test_counts_by_occurrence_by_document_and_capped():
    ids = np.array([3, 3, 1, 3, 2, 2, 0], np.uint32)
    offsets = np.array([0, 4, 7])  # documents [3, 3, 1, 3] and [2, 2, 0]
    assert count_documents(ids, offsets, 5).tolist() == [1, 1, 2, 3, 0]
    assert count_documents(ids, offsets, 5, mode="document").tolist() == [1, 1, 1, 1, 0]
    assert count_documents(ids, offsets, 5, max_tokens_per_doc=2).tolist() == [0, 0, 2, 2, 0]
    assert count_documents(ids, offsets, 5, mode="document", max_tokens_per_doc=3).tolist() == [1, 1, 1, 1, 0]
    assert counted_tokens(np.diff(offsets), 2) == 4 and counted_tokens(np.diff(offsets), None) == 7


def test_an_id_outside_the_vocabulary_names_its_position():
    with pytest.raises(TokenIdOutOfRange, match=r"token id 9 at position 2 is outside the vocabulary \[0, 5\)"):
        count_documents(np.array([1, 2, 9, 9], np.uint16), None, 5)


def test_a_separator_ends_each_document():
    ids = np.array([5, 6, 0, 7, 0, 8], np.uint16)
    assert separator_offsets(ids, 0).tolist() == [0, 3, 5, 6]


@pytest.mark.parametrize("library", [FastokensCounter, RustCounter, PythonCounter])
def test_the_batch_counter_counts_what_the_tokenizer_makes_of_each_text(library):
    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    texts = ["the fox jumps", "", "the dog and the fox"]
    vocab = tokenizer_vocab_size(tokenizer)
    assert vocab == len(tokenizer) == tokenizer_vocab_size(tokenizer.backend_tokenizer)
    source = tokenizer if library is PythonCounter else tokenizer_json(tokenizer)
    counter = BatchCounter(library(source), vocab, "document", None)
    counts, tokens = counter(texts)
    encoded = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    assert tokens == sum(map(len, encoded))
    expected = sum(np.bincount(np.unique(ids), minlength=vocab) for ids in encoded if ids)
    np.testing.assert_array_equal(counts, expected)
