"""Checkpoints of a text build: each finished shard's table kept in a folder, with a manifest of the build's
settings and sources, so that a rerun resumes where the last one stopped; a folder that is not one of this tool's is
refused, never deleted."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mia_fast.data.artefacts import write_atomic
from mia_fast.errors import MiaFastError
from mia_fast.frequency.table import FrequencyTable, FrequencyTableError
from mia_fast.tokens.fingerprint import is_legacy_fingerprint, tokenizer_mismatch

CHECKPOINTS_KIND = "mia-fast frequency build checkpoints v1"


def _is_checkpoints(directory: Path) -> bool:
    """Whether ``directory`` is a checkpoint folder of this tool (its manifest carries the tool's mark)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == CHECKPOINTS_KIND


def check_checkpoints(directory: Path) -> bool:
    """Whether a checkpoint folder of this tool is at ``directory``; anything else there (no manifest with the
    tool's mark) is the user's, refused in one line."""
    directory = Path(directory)
    if not (directory.is_symlink() or directory.exists()):
        return False
    if directory.is_symlink() or not directory.is_dir() or not _is_checkpoints(directory):
        raise MiaFastError(
            f"{directory} is not a checkpoint folder of mia-fast; it was left as it is: move it away, or choose "
            "another --out"
        )
    return True


def remove_checkpoints(directory: Path) -> None:
    """Removes a build's checkpoint folder (:func:`check_checkpoints`), file by file: a file of another name in it
    stays, and so does the folder, refused."""
    if not check_checkpoints(directory):
        return
    directory = Path(directory)
    for path in directory.iterdir():
        if path.name == "manifest.json" or (path.name.startswith(("shard-", ".shard-")) and path.is_file()):
            path.unlink()
    try:
        directory.rmdir()
    except OSError:
        raise MiaFastError(f"{directory} holds files mia-fast did not write; it was left as it is") from None


def _check_tokenizer(directory: Path, recorded: Any, settings: dict[str, Any]) -> None:
    """Refuses to resume a build counted by another tokenizer, or by one whose identity cannot be proven (a
    fingerprint of an older mia-fast), naming what differs."""
    old = recorded.get("tokenizer_fingerprint") if isinstance(recorded, dict) else None
    current = settings.get("tokenizer_fingerprint")
    differs = None if current is None else tokenizer_mismatch(old, current)
    if differs is None:
        return  # the same tokenizer; any other setting is compared with the rest
    if is_legacy_fingerprint(old):
        raise MiaFastError(
            f"{directory} holds an unfinished build written by an older mia-fast whose tokenizer identity cannot be "
            "proven; remove it (or pass --overwrite) to start over"
        )
    raise MiaFastError(
        f"{directory} holds an unfinished build counted with another tokenizer ({differs}); "
        "remove it (or pass --overwrite) to start over"
    )


class ShardCheckpoints:
    """Finished shards of a text build, kept as tables in a directory so that a rerun resumes.

    The directory's manifest holds the tool's mark, the build settings and the sources (paths, sizes, modification
    times); a rerun with anything else refuses to mix the two builds, and a folder without the mark is refused.
    """

    def __init__(self, directory: Path, settings: dict[str, Any], files: Sequence[Path]):
        self.directory = directory
        self.manifest_path = directory / "manifest.json"
        identity = {"settings": settings, "sources": [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]}
        if check_checkpoints(directory):
            manifest = json.loads(self.manifest_path.read_text())
            _check_tokenizer(directory, manifest.get("settings"), settings)
            if {k: manifest.get(k) for k in identity} != identity:
                raise MiaFastError(
                    f"{directory} holds an unfinished build with other settings or sources; "
                    "remove it (or pass --overwrite) to start over"
                )
            self.manifest = manifest
        else:
            directory.mkdir(parents=True, exist_ok=True)
            self.manifest = {"format": CHECKPOINTS_KIND, **identity, "bad_records": {}}
            self._write_manifest()

    def _shard_path(self, index: int) -> Path:
        return self.directory / f"shard-{index:06d}.freq"

    def load(self, index: int) -> tuple[FrequencyTable, int] | None:
        """The finished shard ``index`` and its skipped-record count, or None to count it (again)."""
        path, bad = self._shard_path(index), self.manifest["bad_records"].get(str(index))
        if bad is None or not path.is_file():
            return None
        try:
            return FrequencyTable.load(path), bad
        except FrequencyTableError:
            return None

    def save(self, index: int, table: FrequencyTable, bad_records: int) -> None:
        table.save(self._shard_path(index), overwrite=True)
        self.manifest["bad_records"][str(index)] = bad_records
        self._write_manifest()

    def _write_manifest(self) -> None:
        write_atomic(self.manifest_path, json.dumps(self.manifest, indent=1).encode())

    def remove(self) -> None:
        remove_checkpoints(self.directory)
