"""TokenStats: the one hand-off between the model side and the method side.

For each text and each scored position t it holds the target id x_t, logp_t = log p(x_t | x_<t),
mu_t = sum_v p_v log p_v, var_t = sum_v p_v (log p_v)^2 - mu_t^2 and whether x_t occurs there
for the first time in that text. Texts are stored ragged: flat arrays plus ``offsets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.ops.first_occurrence import first_occurrence_mask
from mia_fast.ops.segments import segment_ids, segment_mean

_FORMAT_VERSION = 1
_FIELDS = ("target_ids", "logp", "mu", "var")


@dataclass(frozen=True)
class TokenStats:
    """Per-token statistics of a batch of texts, stored as flat arrays split by ``offsets``."""

    offsets: np.ndarray  # int64 [n_texts + 1]
    target_ids: np.ndarray  # int64 [N]
    logp: np.ndarray  # float32 [N]
    mu: np.ndarray  # float32 [N]
    var: np.ndarray  # float32 [N]
    first_occurrence: np.ndarray  # bool [N]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of scored positions of each text."""
        return np.diff(self.offsets)

    @cached_property
    def mean_logp(self) -> np.ndarray:
        """Mean log-probability of each text's scored tokens (NaN for a text with none); computed once, as
        loss, zlib, lowercase and the other likelihood methods all read it."""
        return segment_mean(self.logp, self.offsets)

    @property
    def entropy(self) -> np.ndarray:
        """Predictive entropy at each position, in nats (= -mu)."""
        return -self.mu

    @property
    def segment_ids(self) -> np.ndarray:
        """Index of the text each flat position belongs to."""
        return segment_ids(self.offsets)

    def text(self, i: int) -> dict[str, np.ndarray]:
        """The arrays of text ``i``."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return {name: getattr(self, name)[lo:hi] for name in (*_FIELDS, "first_occurrence")}

    def take(self, indices: Sequence[int]) -> TokenStats:
        """The stats of texts ``indices``, in that order (a text may appear more than once)."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        starts = self.offsets[:-1][indices]
        positions = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return TokenStats(
            offsets=offsets, **{name: getattr(self, name)[positions] for name in (*_FIELDS, "first_occurrence")}
        )

    @classmethod
    def from_texts(cls, per_text: Sequence[dict[str, np.ndarray]]) -> TokenStats:
        """Builds TokenStats from one dict of ``target_ids, logp, mu, var`` arrays per text."""
        lengths = np.array([len(t["target_ids"]) for t in per_text], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = {
            name: np.concatenate([np.asarray(t[name]) for t in per_text]) if per_text else np.zeros(0)
            for name in _FIELDS
        }
        target_ids = flat["target_ids"].astype(np.int64)
        return cls(
            offsets=offsets,
            target_ids=target_ids,
            logp=flat["logp"].astype(np.float32),
            mu=flat["mu"].astype(np.float32),
            var=flat["var"].astype(np.float32),
            first_occurrence=first_occurrence_mask(target_ids, offsets),
        )

    def save(self, path: str | Path) -> None:
        """Writes the stats to an ``.npz`` file that :meth:`load` reads back."""
        np.savez(
            path,
            format_version=np.int64(_FORMAT_VERSION),
            offsets=self.offsets,
            first_occurrence=self.first_occurrence,
            **{name: getattr(self, name) for name in _FIELDS},
        )

    @classmethod
    def load(cls, path: str | Path) -> TokenStats:
        """Reads stats written by :meth:`save`."""
        with np.load(path) as data:
            version = int(data["format_version"]) if "format_version" in data else None
            if version != _FORMAT_VERSION:
                raise MiaFastError(f"{path}: TokenStats format version {version}, expected {_FORMAT_VERSION}")
            return cls(
                offsets=data["offsets"],
                first_occurrence=data["first_occurrence"],
                **{name: data[name] for name in _FIELDS},
            )
