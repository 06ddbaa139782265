"""SaMIA (Kaneko et al. 2024, "Sampling-based Pseudo-Likelihood for Membership Inference Attacks").

score = mean_j ROUGE-1 recall(s_j, x₂), where x₂ is the second half of the text's words and s_j the
j-th continuation sampled from the target after its first half x₁. A model that has seen x tends to
continue x₁ with x₂'s words, so a higher score means a member. ``samia_zlib`` weighs each sample's
recall by the zlib-compressed size of the sample (the paper's SaMIA*zlib), so that repetitive samples,
which overlap cheaply, count less.

Followed: the public code (github.com/nlp-titech/samia, ``src/sampling.py`` and ``src/eval_samia.py``):
x₁ is the first int(n/2) of the text's n words joined by a space, samples at temperature 1 among the
top 50 tokens (top-p 1), 10 samples per text (``samia_samples``); ROUGE-1 recall = clipped unigram
overlap of the words / the reference's word count, 0 for an empty sample; zlib size of the sample's
words joined by spaces. Deviations: a continuation is generated for as many tokens as x₁ has (bar its
start token), where the public code lets each run to 1024 tokens in all: its candidates are long
enough to overlap any reference, and ours cost what the text costs; the sample is compared as
generated, where the public code decodes prompt and sample together and drops a fixed number of words
(half the benchmark's nominal length) from the front (a sample that starts mid-word merges there with
the prompt's last word); words are split on any whitespace, not on spaces only. A text of
fewer than two words has no halves: NaN. Sampling is seeded per (text, sample) (``seed``), so scores
do not depend on batch size (see ``mia_fast.pipeline.sampling``).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import Pass, SamplesReadout
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import PER_TEXT, CheckedSettings, GivesExample, MethodSettings, method_seed, setting

PREFIX_RATIO = 0.5


def split_point(words: list[str]) -> int:
    return int(len(words) * PREFIX_RATIO)


@dataclass(frozen=True)
class FirstHalf:
    """The first int(n/2) of a text's n words, joined by single spaces."""

    def __call__(self, text: str) -> str:
        words = text.split()
        return " ".join(words[: split_point(words)])


DEFAULT_SAMPLES = 10


@dataclass(frozen=True)
class SamiaSettings(CheckedSettings, GivesExample):
    samples: int = setting(DEFAULT_SAMPLES, "continuations sampled per text", "samia-samples", bounds=PER_TEXT)
    seed: int = method_seed()

    @classmethod
    def example(cls, model: Any) -> SamiaSettings:
        """Two samples a text: a quick check's cost."""
        return cls(samples=2)


def samia_pass(settings: MethodSettings) -> Pass:
    samia = settings.of(SamiaSettings)
    return Pass(transform=FirstHalf(), readout=SamplesReadout(samia.samples, samia.seed))


def rouge1_recall(candidate: list[str], reference: list[str]) -> float:
    """Unigram overlap (each word counted at most as often as in either) over the reference's length."""
    if not candidate or not reference:
        return 0.0
    return sum((Counter(candidate) & Counter(reference)).values()) / len(reference)


def zlib_size(words: list[str]) -> int:
    return len(zlib.compress(" ".join(words).encode("utf-8")))


def mean_over_samples(inputs: ScoringInputs, weight: Callable[[list[str]], float]) -> np.ndarray:
    samples = inputs.of(samia_pass(inputs.settings))
    scores = np.full(len(inputs.texts), np.nan)
    for i, text in enumerate(inputs.texts):
        words = text.split()
        if len(words) < 2:
            continue
        reference = words[split_point(words) :]
        scores[i] = np.mean(
            [rouge1_recall(words, reference) * weight(words) for words in (s.split() for s in samples[i])]
        )
    return scores


@register("samia", settings=[SamiaSettings], passes=lambda settings: (samia_pass(settings),))
def samia_score(inputs: ScoringInputs) -> np.ndarray:
    """SaMIA: mean ROUGE-1 recall of the second half by continuations sampled after the first."""
    return mean_over_samples(inputs, lambda words: 1.0)


@register("samia_zlib", settings=[SamiaSettings], passes=lambda settings: (samia_pass(settings),))
def samia_zlib_score(inputs: ScoringInputs) -> np.ndarray:
    """SaMIA*zlib: each sample's recall times its zlib-compressed size in bytes."""
    return mean_over_samples(inputs, zlib_size)
