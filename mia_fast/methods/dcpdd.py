"""DC-PDD (Zhang et al. 2024): token probabilities calibrated by their frequency in a reference corpus."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.frequency.table import FrequencyTable, model_log_frequencies
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import CheckedSettings, Flag, GivesExample, PreparesForModel, Range, setting

DEFAULT_A = 0.01
# p(x)·(−ln f(x)) stays below ln of a corpus's token count (under 50 for 10**21 tokens): a larger cap caps nothing.
CAP = Range(0, 100, exclusive_minimum=True)


@dataclass(frozen=True)
class LogFrequencies:
    """ln f(v) for every id v of the target model's vocabulary (a frequency table mapped onto it)."""

    values: np.ndarray

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogFrequencies) and np.array_equal(self.values, other.values)

    def __hash__(self) -> int:
        return hash(self.values.tobytes())


@dataclass(frozen=True)
class DcpddSettings(CheckedSettings, PreparesForModel, GivesExample):
    a: float = setting(DEFAULT_A, "DC-PDD's cap on each token's calibrated score", "a", bounds=CAP)
    frequencies: str | os.PathLike | np.ndarray | FrequencyTable | LogFrequencies | None = setting(
        None,
        "a token frequency table of a reference corpus ('mia-fast freq build'), or per-id counts (.npy)",
        Flag("freq-table", metavar="TABLE", aliases=("freq-counts",), path=True),
        required=True,
        supply="a token frequency table (--freq-table; build one with 'mia-fast freq build')",
    )

    def prepare(self, model: Any) -> DcpddSettings:
        """The table mapped onto the model's vocabulary (checked against its tokenizer); nothing without a model."""
        if model is None or self.frequencies is None or isinstance(self.frequencies, LogFrequencies):
            return self
        values = model_log_frequencies(self.frequencies, model.tokenizer, model.vocab_size)
        return replace(self, frequencies=LogFrequencies(values))

    @classmethod
    def example(cls, model: Any) -> DcpddSettings:
        """Every token of the model's vocabulary equally frequent (no reference corpus at hand): then the calibration
        divides every token's probability by the same frequency."""
        return cls(frequencies=LogFrequencies(np.full(model.vocab_size, -np.log(model.vocab_size))))


@register("dcpdd", settings=[DcpddSettings])
def dcpdd_score(inputs: ScoringInputs) -> np.ndarray:
    """DC-PDD: mean over first occurrences of min(p(x_t) * -ln f(x_t), a)."""
    stats, settings = inputs.stats, inputs.settings.of(DcpddSettings)
    if not isinstance(settings.frequencies, LogFrequencies):
        raise MiaFastError("dcpdd's frequency table must be mapped onto the model's vocabulary first (a Detector does)")
    return inputs.ops.capped_first_occurrence_mean(
        stats.target_ids,
        stats.logp,
        stats.first_occurrence,
        stats.offsets,
        settings.frequencies.values,
        settings.a,
    )
