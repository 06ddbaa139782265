"""Frequency tables of pre-tokenized corpora, memory-mapped and counted by the native core across threads: raw
uint16/uint32 streams (nanoGPT ``.bin``, dolma's headerless ``.npy``), ``.npy`` files with a header, and Megatron
``.bin``/``.idx`` pairs (documents from the index)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.frequency.build import (
    Counting,
    TokenIdOutOfRange,
    check_counting_options,
    count_documents,
    counted_tokens,
    parse_megatron_index,
    separator_offsets,
)
from mia_fast.frequency.progress import Progress
from mia_fast.frequency.sources import TableSource
from mia_fast.frequency.table import FrequencyTable

TOKEN_DTYPES = {"uint16": np.uint16, "uint32": np.uint32, "int32": np.int32, "int64": np.int64}
# Ids per native counting call on token files, so the progress bar moves on multi-GB files.
TOKEN_CHUNK = 1 << 27
_NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class TokenFile:
    """A pre-tokenized source: its ids (memory-mapped, from the file ``data``) and, where known, its document
    offsets."""

    name: str
    ids: np.ndarray
    offsets: np.ndarray | None
    nbytes: int
    data: Path


def _memmap(path: Path, dtype: np.dtype, offset: int = 0) -> np.ndarray:
    if path.stat().st_size == offset:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset)


def open_token_file(source: str | os.PathLike, dtype: str | None) -> TokenFile:
    """Opens a raw token stream, an .npy file or a Megatron .bin/.idx pair (given as either file or the prefix)."""
    text = os.fspath(source)
    prefix = text[: -len(".bin")] if text.endswith((".bin", ".idx")) else text
    if Path(prefix + ".idx").is_file() and Path(prefix + ".bin").is_file():
        return _open_megatron(Path(prefix + ".idx"), Path(prefix + ".bin"), dtype)
    path = Path(text)
    if not path.is_file():
        raise MiaFastError(f"{path}: no such token file (nor a Megatron prefix with .bin and .idx)")
    with open(path, "rb") as f:
        has_npy_header = f.read(len(_NPY_MAGIC)) == _NPY_MAGIC
    if has_npy_header:
        try:
            ids = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise MiaFastError(f"{path}: not a readable .npy file: {exc}") from None
        if ids.ndim != 1 or ids.dtype.name not in TOKEN_DTYPES:
            raise MiaFastError(
                f"{path}: expected a 1-D array of {', '.join(TOKEN_DTYPES)}, got {ids.dtype} of shape {ids.shape}"
            )
        if dtype is not None and ids.dtype.name != dtype:
            raise MiaFastError(f"{path}: holds {ids.dtype.name} ids, not {dtype}")
        return TokenFile(str(path), ids, None, path.stat().st_size, path)
    if dtype is None:
        raise MiaFastError(f"{path}: a raw token file needs --dtype (uint16 or uint32)")
    numpy_dtype = np.dtype(TOKEN_DTYPES[dtype])
    size = path.stat().st_size
    if size % numpy_dtype.itemsize:
        raise MiaFastError(
            f"{path}: {size} bytes is not a whole number of {dtype} ids ({numpy_dtype.itemsize} bytes each)"
        )
    return TokenFile(str(path), _memmap(path, numpy_dtype), None, size, path)


def _open_megatron(index_path: Path, bin_path: Path, dtype: str | None) -> TokenFile:
    try:
        index = parse_megatron_index(np.fromfile(index_path, dtype=np.uint8))
    except ValueError as exc:
        raise MiaFastError(f"{index_path}: {exc}") from None
    if dtype is not None and dtype != index["dtype"]:
        raise MiaFastError(f"{index_path}: the index says {index['dtype']} ids, not {dtype}")
    expected, actual = index["total_tokens"] * index["item_size"], bin_path.stat().st_size
    if expected != actual:
        raise MiaFastError(
            f"{index_path} does not match {bin_path}: the index describes {expected} bytes of tokens, "
            f"the .bin holds {actual}"
        )
    ids = _memmap(bin_path, np.dtype(index["dtype"]))
    return TokenFile(str(bin_path.with_suffix("")), ids, index["document_offsets"], actual, bin_path)


def _chunks(n_ids: int, offsets: np.ndarray | None) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """(first id, end id, document offsets relative to the first id) of about TOKEN_CHUNK ids each,
    cut at document boundaries when there are documents."""
    if offsets is None:
        for start in range(0, n_ids, TOKEN_CHUNK):
            yield start, min(start + TOKEN_CHUNK, n_ids), None
        return
    first_document = 0
    while first_document < len(offsets) - 1:
        target = offsets[first_document] + TOKEN_CHUNK
        last_document = max(first_document + 1, int(np.searchsorted(offsets, target, side="right")) - 1)
        part = offsets[first_document : last_document + 1]
        yield int(part[0]), int(part[-1]), part - part[0]
        first_document = last_document


def build_from_tokens(
    files: Sequence[str | os.PathLike],
    counting: Counting,
    *,
    dtype: str | None = None,
    doc_separator: int | None = None,
    tokenizer_fingerprint: str | None = None,
    threads: int = 0,
    progress: bool = False,
) -> FrequencyTable:
    """Counts pre-tokenized files (see :func:`open_token_file`) with the native core, as ``counting`` says
    (its ``vocab_size`` is required: the ids are counted into that many).

    Document mode and ``max_tokens_per_doc`` need documents: a Megatron index gives them, a raw
    stream needs ``doc_separator`` (the id that ends every document, e.g. GPT-2's <|endoftext|>).
    """
    mode, max_tokens_per_doc, vocab_size = counting.mode, counting.max_tokens_per_doc, counting.vocab_size
    check_counting_options(mode, max_tokens_per_doc)
    if vocab_size is None:
        raise MiaFastError("build_from_tokens needs the vocabulary size: Counting(vocab_size=...)")
    if dtype is not None and dtype not in TOKEN_DTYPES:
        raise MiaFastError(f"dtype must be one of {', '.join(TOKEN_DTYPES)}, got {dtype!r}")
    sources = [open_token_file(f, dtype) for f in files]
    if not sources:
        raise MiaFastError("no token files given")
    if not any(len(source.ids) for source in sources):
        raise MiaFastError(f"the token files ({len(sources)}) hold no tokens to count")
    needs_documents = mode == "document" or bool(max_tokens_per_doc)
    counts = np.zeros(vocab_size, dtype=np.uint64)
    tokens, documents = 0, 0
    bar = Progress(sum(s.nbytes for s in sources), enabled=progress)
    try:
        for source in sources:
            offsets = source.offsets
            if offsets is None and doc_separator is not None:
                offsets = separator_offsets(source.ids, doc_separator)
            if needs_documents and offsets is None:
                raise MiaFastError(
                    f"{source.name}: {mode} mode and max_tokens_per_doc need documents; "
                    "give --doc-separator for a raw token stream"
                )
            documents = None if documents is None or offsets is None else documents + len(offsets) - 1
            for start, end, part in _chunks(len(source.ids), offsets):
                ids = np.ascontiguousarray(source.ids[start:end])
                try:
                    counts += count_documents(ids, part, vocab_size, mode, max_tokens_per_doc, threads)
                except TokenIdOutOfRange as exc:
                    raise MiaFastError(
                        f"{source.name}: token id {exc.token_id} at position {start + exc.position} "
                        f"is outside the vocabulary [0, {vocab_size})"
                    ) from None
                chunk_tokens = counted_tokens(np.diff(part), max_tokens_per_doc) if part is not None else end - start
                tokens += chunk_tokens
                bar.advance((end - start) * source.ids.itemsize, chunk_tokens, 0 if part is None else len(part) - 1)
    finally:
        bar.close()
    return FrequencyTable(
        counts,
        tokens,
        documents,
        mode,
        max_tokens_per_doc,
        tokenizer_fingerprint,
        tuple(TableSource.of(s.data, s.name) for s in sources),
    )
