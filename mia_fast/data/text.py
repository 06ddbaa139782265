"""Words of a text as the benchmarks count them: whitespace-separated words, or jieba's word
segmentation for Chinese (PatentMIA counts its 512-word snippets that way)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from mia_fast.errors import MiaFastError

LANGUAGES = ("auto", "whitespace", "chinese")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# A text is segmented as Chinese when this share of its non-space characters are CJK ideographs.
_CHINESE_SHARE = 0.2


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def replace_lone_surrogates(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate (half of a UTF-16 pair, which no encoder accepts: JSON may escape one as
    ``"\\ud800"``) replaced by U+FFFD, and how many there were."""
    return _LONE_SURROGATE.subn("\ufffd", text)


def is_chinese(text: str) -> bool:
    visible = len(text) - sum(c.isspace() for c in text)
    return visible > 0 and len(_CJK.findall(text)) >= _CHINESE_SHARE * visible


def _jieba():
    try:
        import jieba  # noqa: PLC0415 (optional: jieba, mia-fast[zh])
    except ImportError:
        raise MiaFastError("counting Chinese words needs jieba: pip install jieba (or mia-fast[zh])") from None
    jieba.setLogLevel(60)  # its dictionary-loading chatter
    return jieba


def _pieces(text: str, language: str) -> tuple[list[str], list[bool], str]:
    """(pieces that concatenate back to the text, which pieces are words, the joiner for rebuilding)."""
    if language not in LANGUAGES:
        raise MiaFastError(f"language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    if language == "chinese" or (language == "auto" and is_chinese(text)):
        pieces = _jieba().lcut(text)
        return pieces, [not p.isspace() for p in pieces], ""
    words = text.split()
    return words, [True] * len(words), " "


def count_words(text: str, language: str = "auto") -> int:
    return sum(_pieces(text, language)[1])


def truncate_words(text: str, max_words: int, language: str = "auto") -> str:
    """The text cut to its first ``max_words`` words (whitespace between English words becomes one space,
    as in the WikiMIA and Min-K% code)."""
    return snippets(text, max_words, language)[0] if text.strip() else text


def snippets(text: str, words_per_snippet: int, language: str = "auto") -> list[str]:
    """Consecutive pieces of ``words_per_snippet`` words (the last one shorter)."""
    if words_per_snippet < 1:
        raise MiaFastError(f"words per snippet must be positive, got {words_per_snippet}")
    pieces, is_word, joiner = _pieces(text, language)
    out: list[list[str]] = [[]]
    words = 0
    for piece, word in zip(pieces, is_word):
        if word and words == words_per_snippet:
            out.append([])
            words = 0
        out[-1].append(piece)
        words += word
    return [joiner.join(p).strip() for p in out if any(not s.isspace() for s in p)] or [""]


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """Names of the word-length buckets cut at ``edges``: ``≤32``, ``33–64``, …, ``>256``."""
    edges = sorted(set(edges))
    labels = [f"≤{edges[0]}"] + [f"{a + 1}–{b}" for a, b in zip(edges, edges[1:])]
    return labels + [f">{edges[-1]}"]


def assign_buckets(word_counts: Sequence[int], edges: Sequence[int]) -> list[str]:
    edges = sorted(set(edges))
    labels = bucket_labels(edges)
    return [labels[sum(count > edge for edge in edges)] for count in word_counts]
