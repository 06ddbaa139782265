"""Counting token ids into frequency counts: the Python face of the native core (``mia_fast._native``, C++ over
buffers, the GIL released; it also reads the texts of JSON lines), and the batch counter that tokenizes text with a
counting tokenizer and counts it. The only module that touches the native extension; it knows no files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.frequency.counting_tokenizers import TOKENIZER_BACKENDS
from mia_fast.frequency.table import MODES

if TYPE_CHECKING:
    from mia_fast.frequency.counting_tokenizers import CountingTokenizer


def _native():
    """The compiled core, imported on first use: scoring never needs it."""
    try:
        from mia_fast import _native as core  # noqa: PLC0415 (the compiled core: scoring runs without it)
    except ImportError as exc:
        raise MiaFastError(
            f"frequency counting needs mia-fast's compiled core, which is not built here ({exc}); "
            "reinstall with a C++ compiler: pip install -e ."
        ) from None
    return core


class TokenIdOutOfRange(MiaFastError):
    """An id outside the vocabulary, at ``position`` of the buffer that was counted."""

    def __init__(self, token_id: int, position: int, vocab_size: int):
        super().__init__(f"token id {token_id} at position {position} is outside the vocabulary [0, {vocab_size})")
        self.token_id = token_id
        self.position = position


def check_counting_options(mode: str, max_tokens_per_doc: int | None) -> None:
    if mode not in MODES:
        raise MiaFastError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if max_tokens_per_doc is not None and max_tokens_per_doc < 1:
        raise MiaFastError(f"max_tokens_per_doc must be positive, got {max_tokens_per_doc}")


@dataclass(frozen=True)
class Counting:
    """What a frequency table counts and into how many ids: ``mode`` ``occurrence`` counts every token,
    ``document`` the documents each token occurs in; ``max_tokens_per_doc`` counts only the first tokens of
    every document (None: all of them); ``vocab_size`` is the number of ids (a text build defaults to the
    tokenizer's: give the model's when its output head is larger; a token build needs it). ``tokenizer_backend``
    says which library tokenizes a text build (``auto``, ``fast``, ``exact``:
    :func:`~mia_fast.frequency.counting_tokenizers.choose_counter`); it never changes a count."""

    mode: str = "occurrence"
    max_tokens_per_doc: int | None = None
    vocab_size: int | None = None
    tokenizer_backend: str = "auto"

    def __post_init__(self) -> None:
        check_counting_options(self.mode, self.max_tokens_per_doc)
        if self.tokenizer_backend not in TOKENIZER_BACKENDS:
            backends = ", ".join(TOKENIZER_BACKENDS)
            raise MiaFastError(f"tokenizer_backend must be one of {backends}, got {self.tokenizer_backend!r}")


def count_documents(
    ids: np.ndarray,
    offsets: np.ndarray | None,
    vocab_size: int,
    mode: str = "occurrence",
    max_tokens_per_doc: int | None = None,
    threads: int = 0,
) -> np.ndarray:
    """Counts of every id in a 1-D uint16/uint32/int32/int64 array, uint64 [vocab_size]; ``offsets``
    (documents) are passed on only where the mode needs them."""
    core = _native()
    needs_documents = mode == "document" or bool(max_tokens_per_doc)
    try:
        return core.count_tokens(
            np.ascontiguousarray(ids),
            int(vocab_size),
            int(threads),
            offsets=offsets if needs_documents else None,
            mode=mode,
            max_tokens_per_doc=int(max_tokens_per_doc or 0),
        )
    except core.IdOutOfRange as exc:
        raise TokenIdOutOfRange(int(exc.id), int(exc.position), int(vocab_size)) from None
    except (ValueError, TypeError) as exc:
        raise MiaFastError(str(exc)) from None


def count_token_ids(ids: np.ndarray, vocab_size: int, threads: int = 0) -> np.ndarray:
    """Occurrence count of every id in a 1-D uint16/uint32/int32/int64 array (native, GIL released)."""
    return count_documents(ids, None, vocab_size, threads=threads)


def counted_tokens(lengths: np.ndarray, max_tokens_per_doc: int | None) -> int:
    return int(np.minimum(lengths, max_tokens_per_doc).sum() if max_tokens_per_doc else lengths.sum())


def json_line_texts(block: bytes | memoryview, text_field: str) -> list[str] | None:
    """The text field of every record of a block of JSON lines (a blank line is no record), read with the GIL
    released; None where a line is not one strict-JSON object holding the field once, as a string without an escaped
    lone surrogate (a reader of single lines then judges each)."""
    return _native().json_line_texts(block, text_field)


def separator_offsets(ids: np.ndarray, separator: int) -> np.ndarray:
    """Document offsets of a stream whose documents each end with the id ``separator``."""
    return _native().separator_offsets(ids, separator)


def parse_megatron_index(image: np.ndarray) -> dict[str, Any]:
    """A Megatron .idx image parsed and checked field by field; ValueError says what is wrong."""
    return _native().parse_megatron_index(image)


def tokenizer_vocab_size(tokenizer: Any) -> int:
    """The ids of a transformers tokenizer (fast or slow) or of a ``tokenizers.Tokenizer``, added tokens included."""
    if hasattr(tokenizer, "get_vocab_size") and not hasattr(tokenizer, "backend_tokenizer"):
        return tokenizer.get_vocab_size(with_added_tokens=True)
    return len(tokenizer)


@dataclass(frozen=True)
class BatchCounter:
    """Tokenizes one batch of texts with a counting tokenizer (no special tokens) and counts its ids."""

    tokenizer: CountingTokenizer
    vocab_size: int
    mode: str
    max_tokens_per_doc: int | None

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, int]:
        ids, offsets = self.tokenizer.encode(texts)
        counts = count_documents(ids, offsets, self.vocab_size, self.mode, self.max_tokens_per_doc, threads=1)
        return counts, counted_tokens(np.diff(offsets), self.max_tokens_per_doc)
