"""Fuzzes the parsers of untrusted input: the frequency-table loader, the Megatron .idx parser, run files and
server URLs.

    python benchmarks/fuzz.py table -runs=1000000          (or -max_total_time=600)
    python benchmarks/fuzz.py megatron -max_total_time=600
    python benchmarks/fuzz.py runfile -runs=10000
    python benchmarks/fuzz.py url -runs=10000

libFuzzer flags pass through. Seeds are valid inputs, which atheris mutates. Every input must parse
into a consistent object or raise the parser's own error (FrequencyTableError, ValueError); any other
exception or a crash is a finding, saved by libFuzzer as crash-<hash>. Half of the table inputs get
their checksum recomputed after mutation, so the checks behind the checksum are reached too. A run file
goes through ``mia-fast run FILE --print-config`` whole: it must print a run file or exactly one line.
``run_file_outcome`` and ``url_outcome`` are the properties the test suite also checks on generated inputs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import io
import re
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

from mia_fast import _native
from mia_fast.cli import runfile, runfile_reader
from mia_fast.cli.main import main as mia_fast_main
from mia_fast.errors import MiaFastError
from mia_fast.frequency import table as freq
from mia_fast.frequency.table import FrequencyTable, FrequencyTableError
from mia_fast.served import url as server_url
from mia_fast.served.url import endpoint, hide_key, mask_urls, masked_url

SEED_RUN_FILE = b"""command = "eval"

[data]
data = "texts.jsonl"
text_field = "text"

[server]
server = "http://127.0.0.1:8000/v1"
server_model = "served"
api_key_env = "MY_KEY"

[methods]
names = ["loss", "zlib", "samia"]
k = [0.1, 0.5]

[methods.samia]
samples = 3

[eval]
report = "report"
bootstrap = 50
"""
SEED_URLS = (b"http://127.0.0.1:8000/v1", b"https://[::1]:8443/base/v1", b"http://u:p@host:99/?key=v#f")


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


def run_file_outcome(text: bytes, folder: Path) -> tuple[int, list[str], str]:
    """``mia-fast run FILE --print-config`` on a run file of ``text`` (written in ``folder``): its exit code, its
    stderr lines and stdout, checked: 0 with a run file printed, or 2 with exactly one error line; never a
    traceback."""
    path = folder / "run.toml"
    path.write_bytes(text)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = mia_fast_main(["run", str(path), "--print-config"])
    lines = err.getvalue().splitlines()
    errors = [line for line in lines if line.startswith("mia-fast: error: ")]
    assert all(line.startswith(("mia-fast: error: ", "mia-fast: warning: ")) for line in lines), lines
    if code == 2:
        assert len(errors) == 1 and len(lines) == 1, lines
    else:
        assert code == 0 and not errors, (code, lines)
        assert out.getvalue().startswith(runfile.RUN_FILE_HEADER) or "usage:" in out.getvalue(), out.getvalue()
    return code, lines, out.getvalue()


def url_outcome(url: str, secret: str = "") -> server_url.Endpoint | None:
    """The endpoint of ``url``, or None where it is refused in one line; either way ``secret`` (placed in the URL's
    user part or query) is in no line shown, and an accepted URL reads back as the same endpoint."""
    shown = [masked_url(url), hide_key(url, secret or None)]
    # Within a line, a URL is found by its scheme and ends at a space or a quote.
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", url) and not any(c.isspace() or c in "'\"<>`" for c in url):
        shown.append(mask_urls(f"at {url} here"))
    try:
        found = endpoint(url)
    except MiaFastError as refused:
        assert "\n" not in str(refused), str(refused)
        shown.append(str(refused))
        found = None
    else:
        assert endpoint(str(found)) == found, (url, str(found))
    if secret:
        assert not any(secret in line for line in shown), (url, shown)
    return found


def fuzz_runfile(data: bytes) -> None:
    run_file_outcome(data, fuzz_folder())


def fuzz_url(data: bytes) -> None:
    url_outcome(data.decode("utf-8", "replace"))


def mutated_index(data: bytes) -> bytes:
    """The seed index with the edits that ``data`` spells out: bytes and 64-bit words overwritten,
    truncation, insertion. The parser is native code that atheris cannot instrument, so the search
    starts from a valid index every time instead of from coverage-kept inputs."""
    import atheris

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


# target: (function, its seeds, the modules instrumented for coverage)
TARGETS = {
    "table": (fuzz_table, lambda: [seed_table(), b"\x01" + seed_table()[:-32]], [freq]),
    "megatron": (fuzz_megatron, lambda: [seed_megatron_index()], []),
    "runfile": (fuzz_runfile, lambda: [SEED_RUN_FILE], [runfile, runfile_reader]),
    "url": (fuzz_url, lambda: list(SEED_URLS), [server_url]),
}


@functools.cache
def fuzz_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="mia-fast-fuzz-files-"))


def main() -> None:
    import atheris

    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target, seeds_of, modules = TARGETS[sys.argv[1]]
    seeds = Path(tempfile.mkdtemp(prefix=f"mia-fast-fuzz-{sys.argv[1]}-"))
    for number, seed in enumerate(seeds_of()):
        (seeds / f"valid-{number}").write_bytes(seed)
    atheris.Setup([sys.argv[0], *sys.argv[2:], str(seeds)], target)
    for module in [*modules, sys.modules[__name__]]:
        instrument_module(module)
    atheris.Fuzz()


def instrument_module(module) -> None:
    """Instruments the module's own functions and methods for coverage. (Not by import hook:
    editable installs load mia_fast through a redirecting finder that atheris's hook does not see,
    and instrument_all() spends minutes on numpy.)"""
    import atheris

    for value in vars(module).values():
        members = vars(value).values() if inspect.isclass(value) and value.__module__ == module.__name__ else [value]
        for member in members:
            function = getattr(member, "__func__", member)
            if inspect.isfunction(function) and function.__module__ == module.__name__:
                atheris.instrument_func(function)


if __name__ == "__main__":
    main()
