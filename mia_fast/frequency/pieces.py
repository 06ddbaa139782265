"""A corpus file cut into pieces that workers read on their own, and the documents of one piece.

A plain ``.txt`` or JSON-lines file is cut into byte ranges: a piece owns every line that starts inside its range and
reads them in one call (one read per piece, not one per line, lets the other workers' threads run). A compressed
file is one piece, read in large blocks (gzip and zstd streams cannot be entered in the middle); a parquet file is
cut between row groups.

A block of JSON lines is read by the compiled core (:func:`~mia_fast.frequency.build.json_line_texts`: 2x msgspec and
6x ``json`` line by line, measured in benchmarks/freq.py, and without the GIL, which the other workers' threads then
do not wait for). It reads what ``json`` reads, or refuses: a block with a line it is not sure of (a bad record, a
text field repeated or missing, an escaped lone surrogate) is read again by ``json``
(:func:`~mia_fast.frequency.corpus.line_text`), which names each bad line and reads what ``json`` alone accepts (a
lone surrogate, NaN). Line numbers, which only a bad record needs, are counted when one is met.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mia_fast.data.readers import DECOMPRESSION_ERRORS, decompressed, is_compressed
from mia_fast.frequency.build import json_line_texts
from mia_fast.frequency.corpus import BadRecords, cannot_read, corpus_format, line_text, parquet_texts

# Bytes of a plain file per piece: pieces enough to keep every worker busy to the end, few enough to cost nothing.
PIECE_BYTES = 8 << 20
# Bytes of lines parsed in one call: small enough that a parsing thread (which holds the GIL) keeps the others waiting
# for no longer than about a millisecond.
BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class Piece:
    """Part of corpus file number ``file`` of a build: bytes [start, end) of a plain file, row groups [start, end) of
    a parquet file, or the whole of a compressed file (start 0, end -1); ``size`` is its share of the file's bytes."""

    file: int
    path: str
    start: int
    end: int
    size: int


def plan_pieces(file: int, path: Path, piece_bytes: int = PIECE_BYTES) -> list[Piece]:
    """The pieces of one corpus file, in order."""
    size = path.stat().st_size
    if corpus_format(path) == "parquet":
        return _parquet_pieces(file, path, size, piece_bytes)
    if is_compressed(path) or size == 0:
        return [Piece(file, str(path), 0, -1, size)]
    return [
        Piece(file, str(path), start, min(start + piece_bytes, size), min(piece_bytes, size - start))
        for start in range(0, size, piece_bytes)
    ]


def _parquet_pieces(file: int, path: Path, size: int, piece_bytes: int) -> list[Piece]:
    import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)

    try:
        metadata = pq.ParquetFile(path).metadata
    except (pa.ArrowException, OSError) as exc:
        raise cannot_read(path, exc) from None
    groups = [metadata.row_group(g).total_byte_size for g in range(metadata.num_row_groups)]
    pieces, first, held = [], 0, 0
    for group, group_bytes in enumerate(groups):
        held += group_bytes
        if held >= piece_bytes or group == len(groups) - 1:
            pieces.append((first, group + 1, held))
            first, held = group + 1, 0
    total = max(sum(groups), 1)
    shares = [size * held // total for _, _, held in pieces]
    if shares:
        shares[-1] += size - sum(shares)
    return [Piece(file, str(path), a, b, share) for (a, b, _), share in zip(pieces, shares)] or [
        Piece(file, str(path), 0, 0, size)
    ]


def piece_documents(piece: Piece, text_field: str, bad: BadRecords) -> Iterator[list[str]]:
    """The documents of a piece, in file order, a block of them at a time; bad records are ``bad``'s to refuse or
    count."""
    path = Path(piece.path)
    kind = corpus_format(path)
    try:
        if kind == "parquet":
            yield from (texts for texts, _ in parquet_texts(path, text_field, bad, range(piece.start, piece.end)))
            return
        for block, first_line in _blocks(piece, path):
            texts = json_line_texts(block, text_field) if kind == "json" else None
            yield _line_texts(bytes(block), kind, text_field, bad, path, first_line) if texts is None else texts
    except DECOMPRESSION_ERRORS as exc:
        raise cannot_read(path, exc) from None


def _line_texts(
    block: bytes, kind: str, text_field: str, bad: BadRecords, path: Path, first_line: Callable[[], int]
) -> list[str]:
    """Each line of a block read as the line-by-line reader reads it, with its newline."""
    texts = []
    lines = block.split(b"\n")
    for index, line in enumerate(lines):
        if index < len(lines) - 1:
            line += b"\n"
        text = line_text(line, kind, text_field, bad, lambda i=index: f"{path}:{first_line() + i}")
        if text is not None:
            texts.append(text)
    return texts


def _blocks(piece: Piece, path: Path) -> Iterator[tuple[bytes | memoryview, Callable[[], int]]]:
    """Blocks of whole lines of a piece, each with (a function giving) the number of its first line; a byte-order
    mark that starts the file is no part of its first line."""
    with open(path, "rb") as raw:
        if piece.end < 0:
            lines_before = 0
            for index, block in enumerate(_stream_blocks(decompressed(raw, path))):
                if index == 0:
                    block = block.removeprefix(codecs.BOM_UTF8)
                yield block, lambda n=lines_before + 1: n
                lines_before += block.count(b"\n")
            return
        start = max(piece.start - 1, 0)
        raw.seek(start)
        data = raw.read(piece.end - start)
        begin = 0
        if piece.start > 0:  # the line running into the piece belongs to the one before
            begin = data.find(b"\n") + 1 or len(data)
        # The last line, which runs past the end, is this piece's.
        tail = raw.readline() if begin < len(data) and not data.endswith(b"\n") else b""
        if piece.start == 0 and len(data) < len(codecs.BOM_UTF8):
            data, tail = data + tail, b""
        if piece.start == 0 and data.startswith(codecs.BOM_UTF8):
            begin = len(codecs.BOM_UTF8)
    owned = start + begin if piece.start > 0 else 0  # where the piece's first line starts in the file
    first_line = functools.cache(lambda: _line_number(path, owned))
    view, first = memoryview(data), begin
    while True:
        end = data.find(b"\n", begin + BLOCK_BYTES) + 1 or len(data)
        last = end >= len(data)
        block = bytes(view[begin:]) + tail if last else view[begin:end]
        if block:
            yield block, lambda at=begin: first_line() + data.count(b"\n", first, at)
        if last:
            return
        begin = end


def _line_number(path: Path, offset: int) -> int:
    """The number of the line that starts at byte ``offset`` of a plain file (1 + the newlines before it)."""
    newlines = 0
    with open(path, "rb") as f:
        while offset > 0:
            block = f.read(min(offset, BLOCK_BYTES))
            if not block:
                break
            newlines += block.count(b"\n")
            offset -= len(block)
    return newlines + 1


def _stream_blocks(stream: BinaryIO) -> Iterator[bytes]:
    """Blocks of about BLOCK_BYTES of a stream, each ending at the end of a line."""
    rest = b""
    while block := stream.read(BLOCK_BYTES):
        block = rest + block
        cut = block.rfind(b"\n") + 1
        rest = block[cut:]
        if cut:
            yield block[:cut]
    if rest:
        yield rest
