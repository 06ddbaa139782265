"""An output's side files and whose they are: the stage of an unfinished output (``OUT.partial/``), the manifest
and run file beside a complete one, and the check that each one there is this tool's (a lock with its mark, a stage
with its manifest and nothing else, a manifest of its kind, a run file with its first line)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mia_fast.data.artefacts import foreign_lock, holds_lock_mark, is_temporary_of, lock_path
from mia_fast.data.formats import OUTPUT_FORMATS
from mia_fast.errors import MiaFastError

MANIFEST_KIND = "mia-fast scores manifest v1"
# The first line of every run file mia-fast writes, by which it knows one of its own beside an output.
RUN_FILE_HEADER = "# mia-fast run file: `mia-fast run THIS_FILE` repeats the run (flags given after it override)."


def stage_files() -> tuple[str, ...]:
    """What a stage holds: its manifest and its rows, ``rows`` with a registered format's suffix (the rows of a
    format staged in another, in that one's, until they are converted into it when complete)."""
    return ("manifest.json", *(f"rows{suffix}" for suffix in OUTPUT_FORMATS))


def stage_file(name: str) -> bool:
    """Whether a stage's file of this name is this tool's: one of :func:`stage_files`, or the temporary file a
    manifest is written to before its rename (``artefacts.replacing``), left by a run killed in between."""
    return name in stage_files() or is_temporary_of(name, "manifest.json")


def stage_path(out: str | os.PathLike) -> Path:
    """Where the rows of an unfinished output wait: ``OUT.partial/``."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def run_file_path(out: str | os.PathLike) -> Path:
    """The run file that reproduces a complete output: ``OUT.run.toml`` (``mia-fast run``)."""
    out = Path(out)
    return out.with_name(out.name + ".run.toml")


def manifest_path(out: str | os.PathLike) -> Path:
    """The manifest of a complete output: ``OUT.manifest.json``."""
    out = Path(out)
    return out.with_name(out.name + ".manifest.json")


def path_exists(path: Path) -> bool:
    """Whether something is at ``path``: a dangling link counts."""
    return path.is_symlink() or path.exists()


def check_side_files(out: Path, option: str = "--out") -> None:
    """Each side file of the output ``out`` there must be this tool's: a lock with its mark, a stage with its
    manifest and nothing else, a manifest of its kind, a run file with its first line. Anything else is the user's,
    refused in one line and left as it is."""
    leave = f"it was left as it is: move it away, or choose another {option}"
    lock = lock_path(out)
    if path_exists(lock) and not holds_lock_mark(lock):
        raise foreign_lock(lock, option)
    stage = stage_path(out)
    if path_exists(stage):
        if stage.is_symlink() or not stage.is_dir():
            raise MiaFastError(f"{stage} is not a stage of mia-fast (not a folder it made); {leave}")
        if not _is_manifest(stage / "manifest.json"):
            raise MiaFastError(
                f"{stage} is not a stage mia-fast can use (it holds no manifest of one, so what its rows were scored "
                f"with is unknown); {leave}"
            )
        foreign = sorted(p.name for p in stage.iterdir() if not stage_file(p.name))
        if foreign:
            raise MiaFastError(f"{stage} holds files mia-fast did not write ({', '.join(foreign[:3])}); {leave}")
    manifest = manifest_path(out)
    if path_exists(manifest) and not _is_manifest(manifest):
        raise MiaFastError(f"{manifest} is not a manifest of mia-fast; {leave}")
    run_file = run_file_path(out)
    if path_exists(run_file) and not _is_run_file(run_file):
        raise MiaFastError(f"{run_file} is not a run file of mia-fast; {leave}")


def _is_run_file(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.readline().rstrip(b"\n") == RUN_FILE_HEADER.encode()


def _is_manifest(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(content, dict) and content.get("format") == MANIFEST_KIND
