"""Words as the benchmarks count them: whitespace words, jieba's segmentation for Chinese, texts cut to a number of
words or into snippets, word-length buckets, and lone surrogates replaced."""

import pytest

from mia_fast.data.text import (
    assign_buckets,
    bucket_labels,
    count_words,
    is_chinese,
    replace_lone_surrogates,
    snippets,
    truncate_words,
)
from mia_fast.errors import MiaFastError


def test_english_words_are_whitespace_separated():
    assert count_words("  the quick\n\tbrown  fox ") == 4
    assert truncate_words("the  quick\nbrown fox", 3) == "the quick brown"
    assert truncate_words("   ", 3) == "   "
    assert snippets("a b c d e", 2) == ["a b", "c d", "e"]
    with pytest.raises(MiaFastError, match="words per snippet must be positive, got 0"):
        snippets("a b", 0)
    with pytest.raises(MiaFastError, match="language must be one of auto, whitespace, chinese, got 'klingon'"):
        count_words("a", "klingon")


def test_chinese_is_segmented_into_words():
    text = "今天的天气很好，我们一起去公园散步。"
    assert is_chinese(text) and not is_chinese("the fox 的")
    words = count_words(text)
    assert 5 <= words < len(text)
    assert "".join(snippets(text, 3)) == text and len(snippets(text, 3)) == -(-words // 3)
    assert count_words(text, "whitespace") == 1


def test_word_counts_fall_into_named_buckets():
    assert bucket_labels([64, 32]) == ["≤32", "33–64", ">64"]
    assert assign_buckets([0, 32, 33, 64, 65], [32, 64]) == ["≤32", "≤32", "33–64", "33–64", ">64"]


def test_lone_surrogates_are_replaced_and_counted():
    assert replace_lone_surrogates("a\ud800b\udfffc") == ("a\ufffdb\ufffdc", 2)
    assert replace_lone_surrogates("café 😀") == ("café 😀", 0)
