"""Fuzzes the parsers of untrusted files: the frequency-table loader and the Megatron .idx parser.

    python benchmarks/fuzz.py table -runs=1000000          (or -max_total_time=600)
    python benchmarks/fuzz.py megatron -max_total_time=600

libFuzzer flags pass through. Seeds are valid files, which atheris mutates. Every input must parse
into a consistent object or raise the parser's own error (FrequencyTableError, ValueError); any other
exception or a crash is a finding, saved by libFuzzer as crash-<hash>. Half of the table inputs get
their checksum recomputed after mutation, so the checks behind the checksum are reached too.
"""

from __future__ import annotations

import hashlib
import inspect
import struct
import sys
import tempfile
from pathlib import Path

import atheris
import numpy as np

from mia_fast import _native
from mia_fast.frequency import table as freq
from mia_fast.frequency.table import FrequencyTable, FrequencyTableError


def seed_table() -> bytes:
    counts = np.array([5, 0, 3, 9, 1, 0, 2], dtype=np.uint64)
    return FrequencyTable(counts, int(counts.sum()), 3, "occurrence", 1024, "ab" * 32, ("c4.json.gz",)).to_bytes()


def seed_megatron_index() -> bytes:
    lengths = np.array([3, 0, 4, 2], np.int32)
    pointers = np.array([0, 6, 6, 14], np.int64)
    documents = np.array([0, 2, 3, 4], np.int64)
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(documents))
    return header + lengths.tobytes() + pointers.tobytes() + documents.tobytes()


def fuzz_table(data: bytes) -> None:
    if data[:1] == b"\x01":
        data = data[1:] + hashlib.sha256(data[1:]).digest()
    try:
        table = FrequencyTable.from_bytes(data)
    except FrequencyTableError:
        return
    assert len(table.counts) == table.vocab_size > 0
    assert FrequencyTable.from_bytes(table.to_bytes()).header() == table.header()


def mutated_index(data: bytes) -> bytes:
    """The seed index with the edits that ``data`` spells out: bytes and 64-bit words overwritten,
    truncation, insertion. The parser is native code that atheris cannot instrument, so the search
    starts from a valid index every time instead of from coverage-kept inputs."""
    provider = atheris.FuzzedDataProvider(data)
    image = bytearray(seed_megatron_index())
    for _ in range(provider.ConsumeIntInRange(0, 8)):
        kind, at = provider.ConsumeIntInRange(0, 3), provider.ConsumeIntInRange(0, len(image))
        if kind == 0 and at < len(image):
            image[at] = provider.ConsumeInt(1) & 0xFF
        elif kind == 1:
            image[at : at + 8] = struct.pack("<Q", provider.ConsumeInt(8) & (2**64 - 1))
        elif kind == 2:
            del image[at:]
        else:
            image[at:at] = provider.ConsumeBytes(provider.ConsumeIntInRange(1, 16))
    return bytes(image)


def refusal_kind(message: str) -> int:
    """Distinct branches per refusal reason give libFuzzer a signal for reaching new checks."""
    for kind, words in enumerate(
        (
            "not a Megatron",
            "version",
            "dtype code",
            "truncated",
            "after its arrays",
            "negative length",
            "overflow",
            "starts at byte",
            "document index",
            "last document",
        )
    ):
        if words in message:
            return kind
    raise AssertionError(f"refusal with an unexpected message: {message}")


def fuzz_megatron(data: bytes) -> None:
    try:
        index = _native.parse_megatron_index(np.frombuffer(mutated_index(data), dtype=np.uint8))
    except ValueError as exc:
        refusal_kind(str(exc))
        return
    offsets = index["document_offsets"]
    assert offsets[0] == 0 and offsets[-1] == index["total_tokens"] and (np.diff(offsets) >= 0).all()


TARGETS = {"table": (fuzz_table, seed_table), "megatron": (fuzz_megatron, seed_megatron_index)}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target, seed = TARGETS[sys.argv[1]]
    seeds = Path(tempfile.mkdtemp(prefix=f"mia-fast-fuzz-{sys.argv[1]}-"))
    (seeds / "valid").write_bytes(seed())
    (seeds / "valid-resealed").write_bytes(b"\x01" + seed()[:-32])
    atheris.Setup([sys.argv[0], *sys.argv[2:], str(seeds)], target)
    instrument_module(freq)
    instrument_module(sys.modules[__name__])
    atheris.Fuzz()


def instrument_module(module) -> None:
    """Instruments the module's own functions and methods for coverage. (Not by import hook:
    editable installs load mia_fast through a redirecting finder that atheris's hook does not see,
    and instrument_all() spends minutes on numpy.)"""
    for value in vars(module).values():
        members = vars(value).values() if inspect.isclass(value) and value.__module__ == module.__name__ else [value]
        for member in members:
            function = getattr(member, "__func__", member)
            if inspect.isfunction(function) and function.__module__ == module.__name__:
                atheris.instrument_func(function)


if __name__ == "__main__":
    main()
