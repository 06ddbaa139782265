"""Token ids of texts as every method scores them: the start-token rule and sliding windows (DESIGN §2)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from mia_fast.data.text import replace_lone_surrogates
from mia_fast.errors import MiaFastError, MiaFastWarning


def start_token_id(tokenizer) -> int:
    """The model's BOS token, or its EOS token where it has no BOS."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise MiaFastError("the tokenizer has neither a BOS nor an EOS token to start texts with; use prepend_start=False")


def tokenize(tokenizer, texts: Sequence[str], prepend_start: bool) -> list[list[int]]:
    """Token ids of each text with the tokenizer's own special tokens, plus the start token if asked
    for and not already there."""
    if not texts:
        return []
    encoded = tokenizer(encodable(texts), add_special_tokens=True, verbose=False)["input_ids"]
    if not prepend_start:
        return [list(ids) for ids in encoded]
    start = start_token_id(tokenizer)
    return [list(ids) if ids and ids[0] == start else [start, *ids] for ids in encoded]


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
