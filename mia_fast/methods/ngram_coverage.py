"""N-gram coverage attack (Hallinan et al., CoLM 2025, "The Surprising Effectiveness of Membership Inference with
Simple N-Gram Coverage").

Each text is cut into a prompt and a suffix x_s (its last max(1, min(int(l·f), l − 1)) of l words, f =
``suffix``); ``samples`` continuations s_j of the prompt are sampled from the target. A continuation's words
(NLTK's casual tokenizer, on the text transliterated to ASCII by unidecode) are swept left to right for runs of at
least ``n`` consecutive words whose Moses-detokenized text occurs verbatim in x_s (also in ASCII): a window of n
words grows while its text occurs, a longer window that stops occurring loses its first word, one of n words that
does not occur moves on a word, and a matching window that contains the last kept span replaces it. coverage(s_j)
is the fraction of s_j's words inside a kept span (0 for a continuation of fewer than n words). A model that has
seen x reproduces longer stretches of x_s, so

    ngram_coverage   = max_j coverage(s_j)
    ngram_creativity = max_j Σ_{m=2}^{12} coverage_m(s_j)

where coverage_m counts only the kept spans of at least m words (the public code's "modified creativity index",
oriented so that more copying is higher). Both come from one sampling pass.

Followed: the public code (github.com/shallinan1/NGramCoverageAttack, ``src/attacks/ngram_coverage_attack/``):
``generate.py`` with its word-based prompts (``--prompt_with_words_not_sent --num_proportion_from_end f``: the
suffix is cut with ``remove_last_n_words`` at the start of its first word, words counted by ``str.split``),
temperature 1 and top-p 0.95 with no top-k (``src/generation/vllm_generate.py``); ``compute_ngram_coverage.py``
(``find_exact_match``, ``Hypothesis``, ``--min_ngram`` 3; one source document, the text's own suffix);
``compute_creativity_index.py`` (``get_ngram_coverage``, ``compute_modified_creativity_index``, bounds 2 and 12);
``compute_roc_metrics.py`` (the strategies ``Max_Coverage_Gen_Length`` and ``Max_Creativity_Gen_Length``).
Deviations:
- 20 samples per text (``samples``, the README's pipeline example; ``generate.py``'s own default is 1);
- a continuation runs for as many tokens as its prompt has (bar the start token), about the suffix's length at the
  default even split, where ``generate.py`` gives each 512 tokens (``--max_tokens``) or the suffix's own token count
  (``--max_length_to_sequence_length``); ``new_tokens`` sets a fixed count;
- the prompt is the text up to the suffix's first word, trailing whitespace dropped, with the model's start token
  as the run configures it; the public code decodes the target tokenizer's tokens that end before that word and
  wraps them in its task prompt template, which is not used here;
- the suffix is the text from its first word as written, where the public code decodes its tokens (the same text,
  bar leading whitespace, which no detokenized span starts with); words are split on any whitespace;
- whether a span occurs is one substring test on the suffix, as the public code's ``datasets`` filter over its one
  source document finds it;
- a text with words but too few of them for a prompt and ``n`` suffix words is refused before any model loads,
  where the public code scores it (almost always 0); a text without words is NaN;
- draws are seeded per (text, sample) (``seed``), so scores do not depend on batch size
  (``mia_fast.pipeline.sampling``); a served model draws with its own generator.
The word tools are NLTK, sacremoses and unidecode (``pip install 'mia-fast[ngram]'``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import Pass, SamplesReadout
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import (
    FRACTION,
    PER_TEXT,
    TOKENS,
    CheckedSettings,
    ChecksTexts,
    GivesExample,
    MethodSettings,
    Range,
    method_seed,
    setting,
)

TOP_P = 0.95
CREATIVITY_SIZES = range(2, 13)
_WORD = re.compile(r"\S+")

Span = tuple[int, int]


@functools.cache
def word_tools() -> tuple[Callable[[str], list[str]], Callable[[list[str]], str], Callable[[str], str]]:
    """The public code's tokenizer, detokenizer and transliteration: (casual_tokenize, Moses detokenize, unidecode)."""
    try:
        from nltk.tokenize.casual import casual_tokenize  # noqa: PLC0415 (optional: mia-fast[ngram])
        from sacremoses import MosesDetokenizer  # noqa: PLC0415 (optional: mia-fast[ngram])
        from unidecode import unidecode  # noqa: PLC0415 (optional: mia-fast[ngram])
    except ImportError:
        raise MiaFastError(
            "the n-gram coverage attack needs nltk, sacremoses and unidecode: pip install 'mia-fast[ngram]'"
        ) from None
    return casual_tokenize, MosesDetokenizer(lang="en").detokenize, unidecode


def suffix_start(text: str, suffix: float) -> int | None:
    """Where the compared suffix begins in ``text``: its last max(1, min(int(l·suffix), l − 1)) of l words; None
    for a text of fewer than two words."""
    starts = [word.start() for word in _WORD.finditer(text)]
    if len(starts) < 2:
        return None
    return starts[-compared_words(len(starts), suffix)]


def compared_words(words: int, suffix: float) -> int:
    return max(1, min(int(words * suffix), words - 1))


@dataclass(frozen=True)
class Prompt:
    """The text before its compared suffix (``suffix_start``), trailing whitespace dropped; "" when it has none."""

    suffix: float

    def __call__(self, text: str) -> str:
        start = suffix_start(text, self.suffix)
        return text[:start].rstrip() if start is not None else ""


DEFAULT_SAMPLES = 20
DEFAULT_N = 3
# A run of more than a thousand words is a passage copied whole, no longer a measure of coverage.
MATCH_WORDS = Range(1, 1000, whole=True)


@dataclass(frozen=True)
class NgramCoverageSettings(CheckedSettings, ChecksTexts, GivesExample):
    samples: int = setting(DEFAULT_SAMPLES, "continuations sampled per text", "ngram-samples", bounds=PER_TEXT)
    n: int = setting(
        DEFAULT_N, "fewest consecutive words of a continuation that count as a match", "ngram-n", bounds=MATCH_WORDS
    )
    suffix: float = setting(
        0.5, "share of a text's words, from its end, compared with the continuations", "ngram-suffix", bounds=FRACTION
    )
    new_tokens: int = setting(
        0,
        "tokens sampled per continuation (0: as many as its prompt)",
        "ngram-new-tokens",
        bounds=Range(0, TOKENS.maximum, whole=True),
    )
    seed: int = method_seed()

    def check_texts(self, texts: Sequence[str]) -> None:
        word_tools()
        for i, text in enumerate(texts):
            words = len(text.split())
            compared = compared_words(words, self.suffix) if words > 1 else 0
            if words and compared < self.n:
                shown = text if len(text) <= 60 else text[:57] + "..."
                raise MiaFastError(
                    f"text {i + 1} ({shown!r}) is too short for the n-gram coverage attack: of its {words} word(s), "
                    f"{compared} would follow a prompt (--ngram-suffix {self.suffix:g}), fewer than --ngram-n {self.n}"
                )

    @classmethod
    def example(cls, model: Any) -> NgramCoverageSettings:
        """Two samples a text: a quick check's cost."""
        return cls(samples=2)


def ngram_pass(settings: MethodSettings) -> Pass:
    ngram = settings.of(NgramCoverageSettings)
    readout = SamplesReadout(ngram.samples, ngram.seed, top_k=0, top_p=TOP_P, new_tokens=ngram.new_tokens or None)
    return Pass(transform=Prompt(ngram.suffix), readout=readout)


def matched_spans(words: Sequence[str], reference: str, n: int, detokenize: Callable[[list[str]], str]) -> list[Span]:
    """The spans [start, end) of ``words`` kept by the public code's sweep (``find_exact_match``) against
    ``reference``: runs of at least ``n`` words whose detokenized text occurs in it."""
    spans: list[Span] = []
    first, last = 0, n
    while last <= len(words):
        if detokenize(list(words[first:last])) in reference:
            if spans and first <= spans[-1][0] and spans[-1][1] <= last:
                spans[-1] = (first, last)
            else:
                spans.append((first, last))
            last += 1
        else:
            if last - first == n:
                last += 1
            first += 1
    return spans


def coverage(spans: Sequence[Span], words: int, least: int = 1) -> float:
    """The fraction of ``words`` words inside the spans of at least ``least`` words (0 when none are)."""
    covered = np.zeros(words, dtype=bool)
    for start, end in spans:
        if end - start >= least:
            covered[start:end] = True
    return float(covered.mean()) if covered.any() else 0.0


def creativity(spans: Sequence[Span], words: int) -> float:
    """Σ over m in 2..12 of the coverage by spans of at least m words."""
    return sum(coverage(spans, words, least) for least in CREATIVITY_SIZES)


def best_over_samples(inputs: ScoringInputs, measure: Callable[[list[Span], int], float]) -> np.ndarray:
    ngram = inputs.settings.of(NgramCoverageSettings)
    samples = inputs.of(ngram_pass(inputs.settings))
    tokenize, detokenize, to_ascii = word_tools()
    scores = np.full(len(inputs.texts), np.nan)
    for i, text in enumerate(inputs.texts):
        start = suffix_start(text, ngram.suffix)
        if start is None:
            continue
        reference = to_ascii(text[start:])
        values = []
        for sample in samples[i]:
            words = tokenize(to_ascii(sample))
            values.append(measure(matched_spans(words, reference, ngram.n, detokenize), len(words)))
        scores[i] = max(values)
    return scores


@register("ngram_coverage", settings=[NgramCoverageSettings], passes=lambda settings: (ngram_pass(settings),))
def ngram_coverage_score(inputs: ScoringInputs) -> np.ndarray:
    """N-gram coverage attack: the largest share of a sampled continuation's words in n-grams of the true suffix."""
    return best_over_samples(inputs, coverage)


@register("ngram_creativity", settings=[NgramCoverageSettings], passes=lambda settings: (ngram_pass(settings),))
def ngram_creativity_score(inputs: ScoringInputs) -> np.ndarray:
    """N-gram coverage attack, creativity index: the largest sum over m = 2..12 of coverage by spans of m+ words."""
    return best_over_samples(inputs, creativity)
