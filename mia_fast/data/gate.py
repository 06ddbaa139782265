"""The output gate every writing command passes before any work: what it would write is checked against what it
reads and what is already there, so that no flag (``--overwrite`` included) ever destroys an input or a file the
tool did not write.

- An output is never one of the command's inputs, through links and ``./`` spellings; a file output never
  replaces a file inside an input folder, and a folder output never holds an input file.
- A file output is not a folder and a folder output is not a file; a dangling link counts as a path that exists.
- An existing file output, or a folder output that holds files, is written only with ``--overwrite`` (or
  continued with ``--resume`` where the command resumes).
- A staged output's side files (``OUT.lock``, ``OUT.partial/``, ``OUT.manifest.json``) carry this tool's mark; a
  side file without it is the user's, and is refused, never truncated or deleted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mia_fast.data.artefacts import lock_path
from mia_fast.data.side_files import check_side_files, manifest_path, path_exists, stage_path
from mia_fast.errors import MiaFastError


@dataclass(frozen=True)
class Output:
    """A path a command writes: a file (``folder=False``) or a folder, named by ``option`` in messages; ``staged``
    outputs (scores) are written through ``OUT.partial/`` under ``OUT.lock`` with ``OUT.manifest.json`` beside
    them; ``resumable`` ones may be continued with ``--resume``."""

    path: Path
    option: str = "--out"
    folder: bool = False
    staged: bool = False
    resumable: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))


def check_outputs(
    outputs: Iterable[Output],
    inputs: Iterable[str | os.PathLike | None],
    *,
    overwrite: bool = False,
    resume: bool = False,
) -> None:
    """Refuses, in one line naming the path and what to do, any output that breaks a rule of the module docstring.
    ``inputs`` are every path the command reads (None and paths that do not exist are skipped)."""
    if resume and overwrite:
        raise MiaFastError("--resume and --overwrite exclude each other")
    inputs = list(inputs)
    for output in outputs:
        _check_kind(output)
        refuse_inputs(output, inputs)
        if output.staged:
            check_side_files(output.path, output.option)
        _check_existing(output, overwrite=overwrite, resume=resume and output.resumable)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _same(a: Path, b: Path) -> bool:
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return _real(a) == _real(b)


def _inside(path: Path, folder: Path) -> bool:
    return folder.is_dir() and _real(folder) in _real(path).parents


def _dangling(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


def _check_kind(output: Output) -> None:
    path, option = output.path, output.option
    if _dangling(path) and output.folder:
        raise MiaFastError(
            f"{option} {path} is a link to nothing ({os.readlink(path)}); remove it or choose another {option}"
        )
    if output.folder and path.exists() and not path.is_dir():
        raise MiaFastError(f"{option} {path} is a file; {option} names a folder to write into")
    if not output.folder and path.is_dir():
        raise MiaFastError(f"{option} {path} is a folder; {option} names a file")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise MiaFastError(f"cannot write {path}: {parent} is a file, not a folder")
            break


def _written_files(output: Output) -> list[tuple[str, Path]]:
    """(what it is, path) of every file path the output writes beside a staged output's stage."""
    written = [("", output.path)]
    if output.staged:
        out = output.path
        written += [("lock", lock_path(out)), ("stage", stage_path(out)), ("manifest", manifest_path(out))]
    return written


def refuse_inputs(output: Output, inputs: Iterable[str | os.PathLike | None]) -> None:
    """Refuses ``output`` where it would write over one of ``inputs`` (through links), replace a file inside an
    input folder, or, as a folder, hold an input file."""
    option = output.option
    existing = [Path(p) for p in inputs if p is not None and str(p) != "" and path_exists(Path(p))]
    for source in existing:
        for what, path in _written_files(output):
            if _same(path, source):
                its = f" (its {what} {path})" if what else ""
                raise MiaFastError(
                    f"{option} {output.path}{its} is the input {source}: writing it would destroy the input; "
                    f"choose another {option}"
                )
            if not output.folder and path_exists(path) and _inside(path, source):
                raise MiaFastError(
                    f"{option} {output.path} would replace {path}, inside the input folder {source}; choose another "
                    f"{option}"
                )
        if output.folder and source.is_file() and _inside(source, output.path):
            raise MiaFastError(
                f"{option} {output.path} holds the input {source}, which the report's files could replace; choose "
                f"another {option}"
            )


def _check_existing(output: Output, *, overwrite: bool, resume: bool) -> None:
    path, option = output.path, output.option
    if overwrite or resume:
        return
    if output.folder:
        if path.is_dir() and any(path.iterdir()):
            more = " or --resume to continue it" if output.resumable else ""
            raise MiaFastError(f"{option} {path} is not empty; pass --overwrite{more}, or choose another {option}")
        return
    continuing = "pass --resume to continue it or --overwrite to replace it" if output.resumable else None
    if _dangling(path):
        raise MiaFastError(
            f"{path} is a link to nothing ({os.readlink(path)}); remove it or pass --overwrite to replace the link"
        )
    stage = stage_path(path)
    if output.staged and path_exists(stage):
        raise MiaFastError(
            f"{stage} holds the finished rows of an interrupted run; {continuing or 'pass --overwrite to start again'}"
        )
    if path.exists():
        raise MiaFastError(f"{path} exists; {continuing or 'pass --overwrite to replace it'}")
