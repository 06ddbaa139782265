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

Neighbours come from the data (a field holding a list of texts per row, as MIMIR's neighbour splits
do). Each neighbour rank is one pass, so the engine batches every text's j-th neighbour together and a
neighbour that equals another scored text, or another neighbour, costs no second forward.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import NEEDS_NEIGHBORS, MethodOptions, ScoringInputs, mean_loss, register
from mia_fast.pipeline.passes import PLAIN, Pass


@dataclass(frozen=True, eq=False)
class Neighbors:
    """The neighbour texts of each scored text, looked up by the text. Compared by identity, so that
    the passes built on one set compare equal and are run once."""

    by_text: Mapping[str, tuple[str, ...]]

    @classmethod
    def of_texts(cls, texts: Sequence[str], neighbors: Sequence[Sequence[str]]) -> Neighbors:
        if len(texts) != len(neighbors):
            raise MiaFastError(f"{len(texts)} texts but {len(neighbors)} neighbour lists")
        by_text: dict[str, tuple[str, ...]] = {}
        for text, listed in zip(texts, neighbors):
            listed = tuple(listed)
            if by_text.setdefault(text, listed) != listed:
                raise MiaFastError(f"the text {_shorten(text)!r} appears twice with different neighbours")
        return cls(by_text)

    @property
    def rank_count(self) -> int:
        return max((len(v) for v in self.by_text.values()), default=0)

    def of(self, text: str) -> tuple[str, ...]:
        return self.by_text.get(text, ())

    def check_covers(self, texts: Sequence[str]) -> None:
        missing = [t for t in texts if t not in self.by_text]
        if missing:
            raise MiaFastError(f"{len(missing)} scored text(s) have no neighbour list (e.g. {_shorten(missing[0])!r})")


@dataclass(frozen=True)
class NthNeighbor:
    """A text's neighbour of rank ``rank`` (the empty text where it has fewer)."""

    rank: int
    neighbors: Neighbors

    def __call__(self, text: str) -> str:
        listed = self.neighbors.of(text)
        return listed[self.rank] if self.rank < len(listed) else ""


def neighbor_passes(options: MethodOptions) -> tuple[Pass, ...]:
    neighbors = options.neighbors
    ranks = neighbors.rank_count if neighbors is not None else 0
    return tuple(Pass(transform=NthNeighbor(rank, neighbors)) for rank in range(ranks))


@register("neighbor", needs=[NEEDS_NEIGHBORS], passes=lambda options: (PLAIN, *neighbor_passes(options)))
def neighbor_score(inputs: ScoringInputs) -> np.ndarray:
    """mean loss of the text's neighbours − loss(text)."""
    losses = np.stack([mean_loss(inputs.of(p)) for p in neighbor_passes(inputs.options)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a text without neighbours: NaN, by design
        return np.nanmean(losses, axis=0) - mean_loss(inputs.stats)


def _shorten(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
