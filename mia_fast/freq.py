"""Token-frequency counts for DC-PDD: per-id counts over a reference corpus, Laplace-smoothed.

For now a table is a ``.npy`` vector of per-id counts; the versioned C++ table format plugs into
the same ``counts`` parameter when it arrives.
"""

from __future__ import annotations

import os

import numpy as np

from mia_fast import _native
from mia_fast.errors import MiaFastError


def count_token_ids(ids: np.ndarray, vocab_size: int, threads: int = 0) -> np.ndarray:
    """Occurrence count of every id in a 1-D uint16/uint32/int32/int64 array (native, GIL released)."""
    try:
        return _native.count_tokens(np.ascontiguousarray(ids), int(vocab_size), int(threads))
    except (ValueError, TypeError) as exc:
        raise MiaFastError(str(exc)) from None


def load_counts(source: str | os.PathLike | np.ndarray) -> np.ndarray:
    """Per-id counts from a ``.npy`` file or an array, checked to be a 1-D vector of non-negative integers."""
    if isinstance(source, np.ndarray):
        counts, name = source, "counts"
    else:
        name = os.fspath(source)
        try:
            counts = np.load(name, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise MiaFastError(f"could not read frequency counts {name}: {exc}") from None
    if counts.ndim != 1 or counts.size == 0:
        raise MiaFastError(f"{name}: frequency counts must be a non-empty 1-D vector, got shape {counts.shape}")
    if counts.dtype.kind not in "iu" or (counts.dtype.kind == "i" and counts.min() < 0):
        raise MiaFastError(f"{name}: frequency counts must be non-negative integers, got dtype {counts.dtype}")
    return counts.astype(np.uint64)


def laplace_log_frequencies(counts: np.ndarray, vocab_size: int) -> np.ndarray:
    """ln f(v) with f(v) = (count(v) + 1) / (N + |V|), |V| the model's vocabulary size."""
    if len(counts) != vocab_size:
        raise MiaFastError(
            f"frequency counts cover {len(counts)} ids but the model's vocabulary has {vocab_size}; "
            "build them with the model's own tokenizer"
        )
    total = float(counts.sum(dtype=np.float64))
    return np.log(counts.astype(np.float64) + 1.0) - np.log(total + vocab_size)
