"""Token ids of texts as every method scores them: the start-token rule and sliding windows (DESIGN §2)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.data.text import replace_lone_surrogates
from mia_fast.errors import MiaFastError, MiaFastWarning


def check_deterministic(tokenizer: Any, name: str = "the tokenizer") -> Any:
    """``tokenizer``, refused in one line where its ids are random: BPE dropout, a training-time option, drops merges at
    random on every call, so counts and scores would differ from run to run. (Unigram's sampling is an argument of
    each call, never stored, and mia-fast gives none.)"""
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    dropout = getattr(getattr(backend, "model", None), "dropout", None)
    if dropout:
        raise MiaFastError(
            f"{name}: model.dropout = {dropout:g} in its tokenizer.json makes tokenization random (BPE dropout, a "
            "training-time option); set it to null to count or score with this tokenizer"
        )
    return tokenizer


def start_token_id(tokenizer) -> int:
    """The model's BOS token, or its EOS token where it has no BOS."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise MiaFastError("the tokenizer has neither a BOS nor an EOS token to start texts with; use prepend_start=False")


def tokenize(tokenizer, texts: Sequence[str], *, prepend_start: bool) -> list[list[int]]:
    """Token ids of each text with the tokenizer's own special tokens, plus the start token if asked
    for and not already there."""
    if not texts:
        return []
    start = start_token_id(tokenizer) if prepend_start else None
    encoded = tokenizer(encodable(texts), add_special_tokens=True, verbose=False)["input_ids"]
    if start is None:
        return [list(ids) for ids in encoded]
    return [list(ids) if ids and ids[0] == start else [start, *ids] for ids in encoded]


def token_spans(tokenizer, texts: Sequence[str], *, prepend_start: bool) -> np.ndarray:
    """The character span [start, end) in its text of each id after the first of :func:`tokenize`'s ids (the tokens
    every pass scores, in order), from a fast tokenizer's offset mapping: int64 [scored, 2] per text, in an object
    array with a row per text. A special token's span is empty."""
    if not getattr(tokenizer, "is_fast", False):
        raise MiaFastError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: it gives no character offsets, which align its "
            "tokens with another tokenizer's"
        )
    spans = np.empty(len(texts), dtype=object)
    if not texts:
        return spans
    encoded = tokenizer(encodable(texts), add_special_tokens=True, return_offsets_mapping=True, verbose=False)
    start = start_token_id(tokenizer) if prepend_start else None
    for i, (ids, offsets) in enumerate(zip(encoded["input_ids"], encoded["offset_mapping"])):
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        # tokenize() puts the start token before ids that lack it: its span is empty, and it is never scored.
        spans[i] = offsets if prepend_start and not (ids and ids[0] == start) else offsets[1:]
    return spans


def encodable(texts: Sequence[str]) -> list[str]:
    """The texts with each lone surrogate (which tokenizers refuse) replaced by U+FFFD, warning of each text changed.
    Texts read from files are cleaned as they are read; these came through the Python API. The warning quotes the
    text's start: its index among the texts tokenized together need not be its index among those given."""
    cleaned = []
    for text in texts:
        text, replaced = replace_lone_surrogates(text)
        if replaced:
            start = text if len(text) <= 40 else text[:37] + "..."
            warnings.warn(
                MiaFastWarning(f"the text {start!r} had {replaced} lone surrogate(s), tokenized as U+FFFD"),
                stacklevel=3,
            )
        cleaned.append(text)
    return cleaned


@dataclass(frozen=True)
class Window:
    """ids[begin:end] of one text, scoring the targets at absolute positions [first_target, end)."""

    text_index: int
    begin: int
    end: int
    first_target: int

    @property
    def length(self) -> int:
        return self.end - self.begin


def split_windows(text_index: int, n_ids: int, max_length: int) -> list[Window]:
    """Sliding windows of at most ``max_length`` ids, stride max_length // 2, each target scored once
    with as much left context as its window allows. A text of fewer than 2 ids has no target."""
    if n_ids < 2:
        return []
    if max_length < 2:
        raise MiaFastError(f"max_length must be at least 2, got {max_length}")
    stride = max_length // 2
    windows, begin, scored_until = [], 0, 1
    while True:
        end = min(begin + max_length, n_ids)
        windows.append(Window(text_index, begin, end, scored_until))
        if end == n_ids:
            return windows
        scored_until = end
        begin += stride


@dataclass(frozen=True)
class Row:
    """One row an engine runs: ``ids`` (context + a window of text ``text_index``), scoring ids[first_scored:]; the
    first ``context`` ids are the pass's prefix, the same for every text (an engine may run them once)."""

    text_index: int
    ids: list[int]
    first_scored: int
    context: int = 0


class TextRows:
    """Texts into the rows an engine runs: each text's ids (tokenized ahead, on another thread, where the runner
    asks), after its prefix's ids, in sliding windows of ``max_length``. A subclass encodes texts
    (``_encode``), with a second tokenizer of its own when ``ahead``: a fast tokenizer is not safe to call from
    two threads at once."""

    max_length: int

    def _encode(self, texts: Sequence[str], *, ahead: bool) -> list[list[int]]:
        raise NotImplementedError

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text: those tokenized ahead by :meth:`tokenize_ahead`, the others now."""
        older, newer = getattr(self, "_ahead", ({}, {}))
        ids = [newer.get(text) or older.get(text) for text in texts]
        missing = [i for i, found in enumerate(ids) if found is None]
        for i, found in zip(missing, self._encode([texts[i] for i in missing], ahead=False)):
            ids[i] = found
        return ids

    def tokenize_ahead(self, texts: Sequence[str]) -> None:
        """Tokenizes texts before they are scored, on another thread than the one scoring (so one block runs while
        the next is tokenized). The texts of the latest two calls are kept: the block being scored and the next."""
        self._ahead = (getattr(self, "_ahead", ({}, {}))[1], dict(zip(texts, self._encode(texts, ahead=True))))

    def context_ids(self, prefix: str) -> list[int]:
        """The ids of a prefix, tokenized like a text; it may fill at most half the window."""
        known = self.__dict__.setdefault("_context_ids", {"": []})
        if prefix not in known:
            ids = self.tokenize([prefix])[0]
            if len(ids) > self.max_length // 2:
                raise MiaFastError(
                    f"the prefix is {len(ids)} tokens, more than half of the {self.max_length}-token window; "
                    "use fewer or shorter prefix texts"
                )
            known[prefix] = ids
        return known[prefix]

    def scored_positions(self, texts: Sequence[str]) -> np.ndarray:
        """Positions the plain pass would score in each text (every id after the first), without running it."""
        return np.array([max(len(ids) - 1, 0) for ids in self.tokenize(texts)], dtype=np.int64)

    def rows(self, texts: Sequence[str], prefixes: Sequence[str] | None) -> list[Row]:
        """The rows of ``texts`` (each after its prefix), in order: one per window."""
        prefixes = prefixes if prefixes is not None else [""] * len(texts)
        rows = []
        for i, (ids, prefix) in enumerate(zip(self.tokenize(texts), prefixes)):
            context = self.context_ids(prefix)
            for w in split_windows(i, len(ids), self.max_length - len(context)):
                rows.append(
                    Row(i, context + ids[w.begin : w.end], len(context) + w.first_target - w.begin, len(context))
                )
        return rows


def per_text(rows: Sequence[Row], results: Sequence[dict[str, np.ndarray]], texts: int, top: int = 0) -> list[dict]:
    """Each text's arrays: its rows' (windows') results end to end, in order; empty arrays for a text with none
    (with ``top`` columns of top log-probs in place of mu and var where the results carry those)."""
    grouped: list[list[dict[str, np.ndarray]]] = [[] for _ in range(texts)]
    for row, result in zip(rows, results):
        grouped[row.text_index].append(result)
    empty = {"target_ids": np.zeros(0, np.int64), "logp": np.zeros(0, np.float32)}
    if top:
        empty.update(top=np.zeros((0, top), np.float32), target_in_top=np.zeros(0, bool))
    else:
        empty.update(mu=np.zeros(0, np.float32), var=np.zeros(0, np.float32))
    return [{key: np.concatenate([p[key] for p in parts]) for key in parts[0]} if parts else empty for parts in grouped]
