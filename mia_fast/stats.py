"""TokenStats: the one hand-off between the model side and the method side.

For each text and each scored position t it holds the target id x_t, logp_t = log p(x_t | x_<t),
mu_t = sum_v p_v log p_v, var_t = sum_v p_v (log p_v)^2 - mu_t^2 and whether x_t occurs there
for the first time in that text. Texts are stored ragged: flat arrays plus ``offsets``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from mia_fast.errors import MiaFastError

_FORMAT_VERSION = 1
_FIELDS = ("target_ids", "logp", "mu", "var")
# z - max below this is clamped: its weight is 0 anyway, and the square in var must stay finite in fp32.
_LOGP_FLOOR = -1e18


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

    @property
    def entropy(self) -> np.ndarray:
        """Predictive entropy at each position, in nats (= -mu)."""
        return -self.mu

    @property
    def segment_ids(self) -> np.ndarray:
        """Index of the text each flat position belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    def text(self, i: int) -> dict[str, np.ndarray]:
        """The arrays of text ``i``."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return {name: getattr(self, name)[lo:hi] for name in (*_FIELDS, "first_occurrence")}

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


def first_occurrence_mask(target_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """True where a position holds the first occurrence of its id within its text."""
    mask = np.zeros(len(target_ids), dtype=bool)
    if len(target_ids) == 0:
        return mask
    segments = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    key = segments * (int(target_ids.max()) + 1) + target_ids
    _, first = np.unique(key, return_index=True)
    mask[first] = True
    return mask


def token_stats_torch(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Exact per-row (logp, mu, var) in fp32 from logits [N, V] and targets [N].

    Centred on the row max m, with weights w = e^(z - m) and W = sum w:
    logp = (z_x - m) - log W, mu = E_w[z - m] - log W, var = E_w[(z - m - E_w[z - m])^2].
    Nothing of the size of z itself is ever subtracted, and var is a centred two-pass sum, so this
    stays as close to fp64 as the Triton kernel (the textbook log_softmax route loses ~1e-5 in mu).
    """
    logits = logits.float()
    shifted = (logits - logits.amax(-1, keepdim=True)).clamp_(min=_LOGP_FLOOR)
    target_shifted = shifted.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    weights = shifted.exp()
    total = weights.sum(-1)
    centred_mean = torch.linalg.vecdot(weights, shifted) / total
    deviation = shifted.sub_(centred_mean.unsqueeze(-1))
    var = torch.linalg.vecdot(weights.mul_(deviation), deviation) / total
    log_total = total.log()
    return target_shifted - log_total, centred_mean - log_total, var
