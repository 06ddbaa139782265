"""The neighbourhood attack (Mattern et al. 2023, "Membership Inference Attacks against Language Models
via Neighbourhood Comparison").

score = mean_j loss(n_j(x)) − loss(x), over the neighbours n_j(x) of x: slight rewrites of the text
that a model which has not seen x finds about as likely as x. A member is likelier than its
neighbours, so a higher score means a member.

Followed: the paper's statistic, loss(x) − mean_j loss(n_j(x)) with "member below a threshold",
negated so that higher means member. Deviation: MIMIR's code (``mimir/attacks/neighborhood.py`` with
``run.py``) subtracts the list of neighbour losses from the loss and keeps the minimum, i.e.
loss(x) − max_j loss(n_j(x)); we take the mean, as the paper defines it. A text with fewer
neighbours than the others averages over those it has (NaN with none).

Neighbours come from ``mia_fast.generation.neighbors``: the data's own (a list of texts per row, as in
MIMIR's neighbour splits), a masked LM's (MIMIR's recipe) or a model-free generator. Each neighbour
rank is one pass, so the engine batches every text's j-th neighbour together and a
neighbour that equals another scored text, or another neighbour, costs no second forward.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.generation.neighbors import (
    DEFAULT_NEIGHBORS,
    WORD_DROP,
    NeighborSource,
    WordDropNeighbors,
    neighbor_source,
)
from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.registry import register
from mia_fast.methods.settings import (
    PER_TEXT,
    CheckedSettings,
    ChecksTexts,
    Flag,
    GivesExample,
    MethodSettings,
    PreparesForModel,
    PreparesForTexts,
    method_seed,
    setting,
)


@dataclass(frozen=True)
class NthNeighbor:
    """A text's neighbour of rank ``rank`` (the empty text where it has fewer)."""

    rank: int
    neighbors: NeighborSource

    def __call__(self, text: str) -> str:
        listed = self.neighbors.of(text)
        return listed[self.rank] if self.rank < len(listed) else ""


@dataclass(frozen=True)
class NeighborSettings(CheckedSettings, PreparesForModel, ChecksTexts, PreparesForTexts, GivesExample):
    """The neighbours: given (``neighbors``: the data's own lists, or any source), or made by :meth:`prepare` from
    ``model``, ``count`` a text, seeded by ``seed``."""

    neighbors: NeighborSource | None = setting(
        None,
        "the neighbour texts of every scored text, given or generated (mia_fast.generation.neighbors)",
        required=True,
        supply="the neighbour texts of every scored text (--neighbor-field FIELD, a list of texts per row, or "
        "--neighbor-model M)",
    )
    model: str | None = setting(
        None,
        "a masked LM (BERT/RoBERTa family, hub name or directory) that makes each text's neighbours where "
        f"--neighbor-field gives none, or {WORD_DROP!r} (no model: one word left out)",
        Flag("neighbor-model", metavar="MODEL", path=True),
    )
    count: int = setting(
        DEFAULT_NEIGHBORS, "neighbours made per text", Flag("neighbor-count", metavar="N"), bounds=PER_TEXT
    )
    seed: int = method_seed()
    # How a run shows its work, never what it computes: not a setting.
    progress: bool = field(default=True, compare=False)

    def prepare(self, model: Any) -> NeighborSettings:
        """The generator of ``model`` (its masked LM on the target's device), where no neighbours are given."""
        if self.neighbors is not None or self.model is None:
            return self
        device = str(model.device) if model is not None else None
        source = neighbor_source(self.model, self.count, self.seed, device=device, progress=self.progress)
        return replace(self, neighbors=source)

    def check_texts(self, texts: Sequence[str]) -> None:
        self.neighbors.check_covers(texts)

    def before_scoring(self, texts: Sequence[str]) -> None:
        self.neighbors.prepare(texts)

    @classmethod
    def example(cls, model: Any) -> NeighborSettings:
        """Neighbours made without a second model: each text with a word left out."""
        return cls(WordDropNeighbors(seed=0))


def neighbor_passes(settings: MethodSettings) -> tuple[Pass, ...]:
    neighbors = settings.of(NeighborSettings).neighbors
    ranks = neighbors.rank_count if neighbors is not None else 0
    return tuple(Pass(transform=NthNeighbor(rank, neighbors)) for rank in range(ranks))


@register("neighbor", settings=[NeighborSettings], passes=lambda settings: (PLAIN, *neighbor_passes(settings)))
def neighbor_score(inputs: ScoringInputs) -> np.ndarray:
    """Neighbourhood attack: mean loss of the text's neighbours − loss(text)."""
    losses = np.stack([mean_loss(inputs.of(p)) for p in neighbor_passes(inputs.settings)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a text without neighbours: NaN, by design
        return np.nanmean(losses, axis=0) - mean_loss(inputs.stats)
