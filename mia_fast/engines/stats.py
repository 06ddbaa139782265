"""TokenStats: the one hand-off between the model side and the method side.

For each text and each scored position t it holds the target id x_t, logp_t = log p(x_t | x_<t),
mu_t = sum_v p_v log p_v, var_t = sum_v p_v (log p_v)^2 - mu_t^2, max_logp_t = max_v log p_v (the log-prob
of the model's own top choice) and whether x_t occurs there for the first time in that text. Texts are stored
ragged: flat arrays plus ``offsets``.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from mia_fast.data.artefacts import replacing
from mia_fast.errors import MiaFastError
from mia_fast.ops.first_occurrence import first_occurrence_mask
from mia_fast.ops.segments import segment_ids, segment_mean
from mia_fast.ops.top_logprobs import approximate_moments

_FORMAT_VERSION = 3
# The per-token statistics a forward computes, in the order the kernels return them.
TOKEN_STATS_COLUMNS = ("logp", "mu", "var", "max_logp")
_FIELDS = ("target_ids", *TOKEN_STATS_COLUMNS)
_WRITER = "Detector.token_stats(texts).save(FILE)"
# What np.load raises on a file that is not an intact .npz archive.
_UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def _not_token_stats(path: Path, reason: str) -> MiaFastError:
    return MiaFastError(f"{path} is not a TokenStats file written by mia-fast ({reason}); {_WRITER} writes one")


def _checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the arrays' names, dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.asarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}:".encode())
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


@dataclass(frozen=True)
class TokenStats:
    """Per-token statistics of a batch of texts, stored as flat arrays split by ``offsets``."""

    offsets: np.ndarray  # int64 [n_texts + 1]
    target_ids: np.ndarray  # int64 [N]
    logp: np.ndarray  # float32 [N]
    mu: np.ndarray  # float32 [N]
    var: np.ndarray  # float32 [N]
    max_logp: np.ndarray  # float32 [N]
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
        """Builds TokenStats from one dict of ``target_ids, logp, mu, var`` and ``max_logp`` arrays per text
        (``max_logp`` NaN where a dict has none: a source that cannot give it)."""
        lengths = np.array([len(t["target_ids"]) for t in per_text], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = {
            name: np.concatenate(
                [np.asarray(t[name]) if name in t else np.full(n, np.nan) for t, n in zip(per_text, lengths)]
            )
            if per_text
            else np.zeros(0)
            for name in _FIELDS
        }
        target_ids = flat["target_ids"].astype(np.int64)
        return cls(
            offsets=offsets,
            target_ids=target_ids,
            **{name: flat[name].astype(np.float32) for name in TOKEN_STATS_COLUMNS},
            first_occurrence=first_occurrence_mask(target_ids, offsets),
        )

    @classmethod
    def from_top_logprobs(cls, per_text: Sequence[dict[str, np.ndarray]], vocab_size: int) -> TokenStats:
        """TokenStats whose mu and var are estimated (``mia_fast.ops.top_logprobs``) from one dict per text of
        ``target_ids``, ``logp``, ``top`` (the K likeliest log-probs at each position) and
        ``target_in_top``; max_logp is the likeliest of them, exact."""
        texts = []
        for text in per_text:
            mu, var = approximate_moments(text["logp"], text["top"], text["target_in_top"], vocab_size)
            top = np.asarray(text["top"], dtype=np.float32)
            max_logp = np.fmax.reduce(top, axis=1, initial=-np.inf)
            max_logp = np.fmax(max_logp, np.asarray(text["logp"], dtype=np.float32))
            texts.append(
                {"target_ids": text["target_ids"], "logp": text["logp"], "mu": mu, "var": var, "max_logp": max_logp}
            )
        return cls.from_texts(texts)

    def save(self, path: str | Path) -> Path:
        """Writes the stats, with a checksum, to an ``.npz`` file (the suffix added if missing) that :meth:`load`
        reads back; the file is replaced only once the new one is complete. Returns its path."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        arrays = {
            "format_version": np.int64(_FORMAT_VERSION),
            "offsets": self.offsets,
            "first_occurrence": self.first_occurrence,
            **{name: getattr(self, name) for name in _FIELDS},
        }
        with replacing(path) as temporary, open(temporary, "wb") as f:
            np.savez(f, checksum=np.array(_checksum(arrays)), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> TokenStats:
        """Reads stats written by :meth:`save`; anything else, or a file changed since, is refused."""
        path = Path(path)
        if not path.is_file():
            what = "a directory, not a file" if path.is_dir() else "no such file"
            raise MiaFastError(f"{path}: {what}; {_WRITER} writes TokenStats")
        try:
            archive = np.load(path, allow_pickle=False)
        except _UNREADABLE:
            raise _not_token_stats(path, "not an .npz archive") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise _not_token_stats(path, "a single array, not an .npz archive")
        with archive:
            names = ("format_version", "checksum", "offsets", "first_occurrence", *_FIELDS)
            missing = [name for name in names[2:] if name not in archive.files]
            try:
                arrays = {name: archive[name] for name in names if name in archive.files}
            except ValueError as exc:
                object_arrays = "Object arrays" in str(exc)
                raise _not_token_stats(
                    path, "it holds arrays of Python objects" if object_arrays else "a damaged array"
                ) from None
            except _UNREADABLE:
                raise _not_token_stats(path, "a damaged archive") from None
        version = arrays.pop("format_version", None)
        if version is None or version.shape != () or version.dtype.kind not in "iu":
            raise _not_token_stats(path, "no format version")
        if int(version) != _FORMAT_VERSION:
            age = "an older" if int(version) < _FORMAT_VERSION else "a newer"
            raise MiaFastError(
                f"{path} holds TokenStats of format {int(version)}, written by {age} mia-fast; this one reads format "
                f"{_FORMAT_VERSION}: save the stats again ({_WRITER})"
            )
        if missing:
            raise _not_token_stats(path, f"no {', '.join(missing)}")
        checksum = arrays.pop("checksum", None)
        if checksum is None or str(checksum) != _checksum({"format_version": version, **arrays}):
            raise MiaFastError(
                f"{path}: checksum mismatch: the file was changed after it was written; save the stats again "
                f"({_WRITER})"
            )
        offsets, target_ids = arrays["offsets"], arrays["target_ids"]
        size = len(target_ids) if target_ids.ndim == 1 else -1
        consistent = (
            offsets.ndim == 1
            and offsets.dtype.kind in "iu"
            and len(offsets) > 0
            and offsets[0] == 0
            and offsets[-1] == size
            and bool((np.diff(offsets) >= 0).all())
            and all(arrays[name].shape == (size,) for name in ("first_occurrence", *_FIELDS))
        )
        if not consistent:
            raise _not_token_stats(path, "its offsets do not split its token arrays into texts")
        return cls(**arrays)
