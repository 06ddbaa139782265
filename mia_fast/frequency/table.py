"""Token-frequency tables for DC-PDD: per-id counts over a reference corpus, in a file that can be trusted.

File layout (little-endian), format version 2:

    b"MIAFREQ\\0"  uint32 version  uint32 header_length  header (UTF-8 JSON)  zero padding to 8 bytes
    uint64 counts[vocab_size]
    sha256 of everything above (32 bytes)

The JSON header holds ``vocab_size``, ``tokens`` (positions counted), ``documents`` (null when a
token stream had no document boundaries), ``mode`` (``occurrence`` or ``document``),
``max_tokens_per_doc`` (null for no cap), ``tokenizer_fingerprint`` (null when unknown), ``sources`` and
``tokenized_by`` (the library and version that tokenized the text, one per library of a merged table; empty for
pre-tokenized ids). Version 1, without ``tokenized_by``, is still read. Loading checks every field, the size and the
checksum; writing is atomic.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import write_atomic
from mia_fast.errors import MiaFastError
from mia_fast.tokens.fingerprint import tokenizer_fingerprint

MAGIC = b"MIAFREQ\x00"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
MODES = ("occurrence", "document")
_PREAMBLE = struct.Struct("<8sII")
_CHECKSUM_BYTES = 32
_HEADER_FIELDS = {
    "vocab_size": int,
    "tokens": int,
    "documents": (int, type(None)),
    "mode": str,
    "max_tokens_per_doc": (int, type(None)),
    "tokenizer_fingerprint": (str, type(None)),
    "sources": list,
}
# Fields a version adds to the one before.
_NEW_FIELDS = {2: {"tokenized_by": list}}


class FrequencyTableError(MiaFastError):
    """A table that cannot be read, trusted or combined."""


@dataclass(frozen=True)
class FrequencyTable:
    """Per-id token counts of a reference corpus and how they were made."""

    counts: np.ndarray  # uint64 [vocab_size]
    tokens: int
    documents: int | None
    mode: str = "occurrence"
    max_tokens_per_doc: int | None = None
    tokenizer_fingerprint: str | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)
    tokenized_by: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise FrequencyTableError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def vocab_size(self) -> int:
        return len(self.counts)

    @property
    def fingerprint(self) -> str | None:
        return self.tokenizer_fingerprint

    def log_probs(self, vocab_size: int | None = None) -> np.ndarray:
        """ln f(v) = ln((count(v) + 1) / (N + |V|)) over |V| = ``vocab_size`` ids (default: the table's).

        A model vocabulary larger than the table's (padding rows of the output head) gets zero counts
        for the extra ids; a smaller one is refused.
        """
        vocab_size = self.vocab_size if vocab_size is None else vocab_size
        if vocab_size < self.vocab_size:
            raise FrequencyTableError(
                f"the table covers {self.vocab_size} ids but the model's vocabulary has only {vocab_size}"
            )
        counts = np.zeros(vocab_size, dtype=np.float64)
        counts[: self.vocab_size] = self.counts
        return np.log(counts + 1.0) - np.log(counts.sum() + vocab_size)

    # ---- the file format ----

    def header(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "tokens": int(self.tokens),
            "documents": None if self.documents is None else int(self.documents),
            "mode": self.mode,
            "max_tokens_per_doc": self.max_tokens_per_doc,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "sources": list(self.sources),
            "tokenized_by": list(self.tokenized_by),
        }

    def to_bytes(self) -> bytes:
        header = json.dumps(self.header(), ensure_ascii=False).encode("utf-8")
        padding = b"\x00" * (-(_PREAMBLE.size + len(header)) % 8)
        body = b"".join(
            [_PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header)), header, padding, self.counts.astype("<u8").tobytes()]
        )
        return body + hashlib.sha256(body).digest()

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "table") -> FrequencyTable:
        """Parses and verifies a table image; every defect raises :class:`FrequencyTableError`."""

        def fail(reason: str) -> FrequencyTableError:
            return FrequencyTableError(f"{name}: {reason}")

        if len(data) < _PREAMBLE.size or data[: len(MAGIC)] != MAGIC:
            raise fail("not a mia-fast frequency table (no MIAFREQ magic)")
        _, version, header_length = _PREAMBLE.unpack_from(data)
        if version not in READ_VERSIONS:
            raise fail(f"format version {version}; this mia-fast reads versions {', '.join(map(str, READ_VERSIONS))}")
        if (
            len(data) < _PREAMBLE.size + _CHECKSUM_BYTES
            or hashlib.sha256(data[:-_CHECKSUM_BYTES]).digest() != data[-_CHECKSUM_BYTES:]
        ):
            raise fail("checksum mismatch: the file is truncated or corrupt")
        counts_at = _PREAMBLE.size + header_length + (-(_PREAMBLE.size + header_length) % 8)
        if counts_at > len(data) - _CHECKSUM_BYTES:
            raise fail("the header runs past the end of the file")
        try:
            header = json.loads(data[_PREAMBLE.size : _PREAMBLE.size + header_length].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise fail(f"unreadable header: {exc}") from None
        fields = dict(_HEADER_FIELDS)
        for since, added in _NEW_FIELDS.items():
            if version >= since:
                fields |= added
        if not isinstance(header, dict) or set(header) != set(fields):
            raise fail(f"the header must hold exactly the fields {', '.join(fields)}")
        for key, kind in fields.items():
            if not isinstance(header[key], kind) or isinstance(header[key], bool):
                raise fail(f"header field {key!r} has the wrong type ({type(header[key]).__name__})")
        vocab_size = header["vocab_size"]
        tokenized_by = header.get("tokenized_by", [])
        if vocab_size < 1 or not all(isinstance(s, str) for s in [*header["sources"], *tokenized_by]):
            raise fail("the header's vocab_size must be positive, its sources and tokenized_by strings")
        if len(data) - _CHECKSUM_BYTES - counts_at != 8 * vocab_size:
            raise fail(
                f"holds {len(data) - _CHECKSUM_BYTES - counts_at} bytes of counts, "
                f"expected {8 * vocab_size} for {vocab_size} ids"
            )
        counts = np.frombuffer(data, dtype="<u8", count=vocab_size, offset=counts_at).astype(np.uint64)
        total = int(counts.sum(dtype=np.uint64))
        tokens, mode = header["tokens"], header["mode"]
        if mode not in MODES or (mode == "occurrence" and total != tokens) or (mode == "document" and total > tokens):
            raise fail(f"counts add up to {total}, inconsistent with {tokens} tokens in {mode} mode")
        cap, documents = header["max_tokens_per_doc"], header["documents"]
        if (cap is not None and cap < 1) or (documents is not None and documents < 0) or tokens < 0:
            raise fail("max_tokens_per_doc must be positive, documents and tokens not negative")
        return cls(
            counts,
            tokens,
            documents,
            mode,
            cap,
            header["tokenizer_fingerprint"],
            tuple(header["sources"]),
            tuple(tokenized_by),
        )

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Writes the table atomically (temporary file, fsync, rename); an existing file needs ``overwrite``."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise FrequencyTableError(f"{path} exists; pass --overwrite (overwrite=True) to replace it")
        write_atomic(path, self.to_bytes())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FrequencyTable:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise FrequencyTableError(f"cannot read frequency table {path}: {exc.strerror or exc}") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def merge(cls, tables: Sequence[FrequencyTable]) -> FrequencyTable:
        """Adds tables built with the same tokenizer, vocabulary, mode and cap (e.g. from corpus shards)."""
        if not tables:
            raise FrequencyTableError("nothing to merge")
        first = tables[0]
        for i, table in enumerate(tables[1:], start=2):
            for attribute in ("vocab_size", "mode", "max_tokens_per_doc", "tokenizer_fingerprint"):
                if getattr(table, attribute) != getattr(first, attribute):
                    raise FrequencyTableError(
                        f"cannot merge: table {i} has {attribute} {getattr(table, attribute)!r}, "
                        f"table 1 has {getattr(first, attribute)!r}"
                    )
        documents = [t.documents for t in tables]
        return cls(
            counts=np.sum([t.counts for t in tables], axis=0, dtype=np.uint64),
            tokens=sum(t.tokens for t in tables),
            documents=None if None in documents else sum(documents),
            mode=first.mode,
            max_tokens_per_doc=first.max_tokens_per_doc,
            tokenizer_fingerprint=first.tokenizer_fingerprint,
            sources=tuple(s for t in tables for s in t.sources),
            tokenized_by=tuple(dict.fromkeys(library for t in tables for library in t.tokenized_by)),
        )


def is_table_file(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


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


def model_log_frequencies(
    source: str | os.PathLike | np.ndarray | FrequencyTable, tokenizer: Any, vocab_size: int
) -> np.ndarray:
    """ln f(v) over the model's vocabulary from a table (file or object) or a bare counts vector (.npy or array).

    A table must come from the model's own tokenizer (equal fingerprints); it may cover fewer ids than
    the model's output head. Bare counts carry no provenance, so their length must equal the model's
    vocabulary exactly.
    """
    if isinstance(source, (str, os.PathLike)) and is_table_file(source):
        source = FrequencyTable.load(source)
    if not isinstance(source, FrequencyTable):
        return laplace_log_frequencies(load_counts(source), vocab_size)
    expected = tokenizer_fingerprint(tokenizer)
    if source.tokenizer_fingerprint is None:
        warnings.warn(
            "the frequency table has no tokenizer fingerprint, so it cannot be checked against the model's tokenizer",
            stacklevel=2,
        )
        if source.vocab_size != vocab_size:
            raise FrequencyTableError(
                f"the table covers {source.vocab_size} ids but the model's vocabulary has {vocab_size}"
            )
    elif source.tokenizer_fingerprint != expected:
        raise FrequencyTableError(
            f"the table was built with another tokenizer (fingerprint {source.tokenizer_fingerprint[:12]}…, "
            f"the model's is {expected[:12]}…); build it with the model's own tokenizer"
        )
    return source.log_probs(vocab_size)
