"""What the model-free baselines read from the texts, read once for every fit: hashed word 1-2-gram counts, the
years and dates a text mentions, and the character 1-NGRAM_MAX-grams of its first NGRAM_CHARACTERS characters."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_HASHED_FEATURES = 2**20
NGRAM_MAX = 5
NGRAM_CHARACTERS = 2000
_YEAR = re.compile(r"(?<![\d.,])(1[0-9]{3}|20[0-9]{2})(?!\d|[.,]\d)")
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
# Matched on lower-cased text: IGNORECASE makes this alternation several times slower.
_DATE = re.compile(
    rf"\b(?:(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{_MONTHS})\b|\d{{4}}-\d{{2}}-\d{{2}}\b)"
)


def date_features(texts: Sequence[str]) -> np.ndarray:
    """[n, 5]: has a year; the latest and the earliest year (centred on 2000, in centuries; 0 without one);
    log(1 + years mentioned); log(1 + month-name or ISO dates)."""
    features = np.zeros((len(texts), 5))
    for row, text in enumerate(texts):
        years = [int(y) for y in _YEAR.findall(text)]
        if years:
            features[row, :3] = 1.0, (max(years) - 2000) / 100, (min(years) - 2000) / 100
        features[row, 3] = np.log1p(len(years))
        features[row, 4] = np.log1p(len(_DATE.findall(text.lower())))
    return features


def _bag_of_words(texts: Sequence[str]):
    """Hashed word 1-2-gram counts, keeping only the hashed columns some text holds: the others are zero in every
    fit (their IDF and weights touch no score), so dropping them changes no score and makes each fit cheaper."""
    from sklearn.feature_extraction.text import HashingVectorizer  # noqa: PLC0415 (sklearn: slow at start-up; only the blind baselines need it)

    counts = HashingVectorizer(
        n_features=_HASHED_FEATURES, alternate_sign=False, norm=None, ngram_range=(1, 2)
    ).transform(texts)
    return counts[:, np.unique(counts.indices)]


def _character_ngrams(texts: Sequence[str]):
    """Binary [texts, n-grams] CSR matrix of the character 1..NGRAM_MAX-grams each text holds, each n-gram, and each
    one's length (the greedy selection's tie-break); of n-grams held by exactly the same texts, only the one the
    selection would pick (the longest, then the alphabetically first), so that no choice changes."""
    from sklearn.feature_extraction.text import CountVectorizer  # noqa: PLC0415 (sklearn: slow at start-up; only the blind baselines need it)

    vectorizer = CountVectorizer(
        analyzer=lambda text: _ngrams_of(text[:NGRAM_CHARACTERS]), binary=True, dtype=np.float32
    )
    matrix = vectorizer.fit_transform(texts).tocsc()
    names = vectorizer.get_feature_names_out()
    lengths = np.array([len(n) for n in names])
    kept: dict[bytes, int] = {}
    for column in np.lexsort((np.arange(len(names)), -lengths)):  # longest first, then alphabetical
        kept.setdefault(matrix.indices[matrix.indptr[column] : matrix.indptr[column + 1]].tobytes(), int(column))
    columns = np.sort(np.fromiter(kept.values(), dtype=np.int64, count=len(kept)))
    return matrix[:, columns].tocsr(), names[columns], lengths[columns]


def _ngrams_of(text: str) -> list[str]:
    return [text[i : i + n] for n in range(1, NGRAM_MAX + 1) for i in range(len(text) - n + 1)]


@dataclass(frozen=True)
class BlindFeatures:
    """What the baselines read from the texts, read once: every fit, each shuffle's included, reuses it."""

    words: Any  # CSR [texts, hashed word 1-2-grams]: counts
    dates: np.ndarray  # [texts, 5]: date_features
    ngrams: Any  # CSR [texts, character n-grams]: binary
    ngram_names: np.ndarray
    ngram_lengths: np.ndarray

    @classmethod
    def of(cls, texts: Sequence[str]) -> BlindFeatures:
        return cls(_bag_of_words(texts), date_features(texts), *_character_ngrams(texts))
