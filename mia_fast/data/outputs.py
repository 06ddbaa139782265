"""Score outputs that never lose what a user has.

Rows are appended, a block at a time and fsync'ed, to a stage beside the output (``OUT.partial/``: the rows,
and a manifest of the settings they were scored under and, for each block, its byte length, a digest of its bytes
and a digest of the input rows it was scored from). A stage is made whole with its manifest (a temporary folder
renamed into place), so every stage of this tool holds one. The output itself appears, or replaces an older one,
only when complete: renamed into place with its manifest (``OUT.manifest.json``) and, given one, the run file that
reproduces it (``OUT.run.toml``). A killed or failed run leaves the
older output as it was and its finished blocks in the stage, which ``resume`` continues once the manifest agrees:
same columns, same settings, same input rows, and every block's bytes as they were written; anything else is
refused, naming the difference.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.artefacts import (
    fsync_directory,
    read_checked_json,
    sha256_file,
    write_atomic,
    write_checked_json,
)
from mia_fast.data.formats import as_text_value, output_format
from mia_fast.data.readers import RowPosition
from mia_fast.data.side_files import (
    MANIFEST_KIND,
    check_side_files,
    manifest_path,
    path_exists,
    run_file_path,
    stage_file,
    stage_path,
)
from mia_fast.errors import MiaFastError

_MANIFEST_WRITER = "a mia-fast scoring run"

# Engine settings a scores file records since a later version than the first: the forward path (packed or not).
RECORDED_LATER = frozenset({"forward"})
_BARE_SHA256 = re.compile(r"[0-9a-f]{64}")


def differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``key: X before, now Y`` for every setting that differs (a setting missing on one side counts); for digests
    that name their parts (:func:`digest_parts`), ``key: its P, Q differ``."""

    def shown(value: Any) -> str:
        text = repr(value)
        return text[:14] + "...'" if isinstance(value, str) and len(value) > 24 else text

    def changed(key: str, old: Any, new: Any) -> str:
        parts, theirs = digest_parts(old), digest_parts(new)
        if parts is None or theirs is None:
            return f"{key}: {shown(old)} before, now {shown(new)}"
        named = [part for part in dict.fromkeys([*parts, *theirs]) if parts.get(part) != theirs.get(part)]
        return f"{key}: its {', '.join(named) or 'digest'} differ{'s' if len(named) < 2 else ''}"

    keys = list(dict.fromkeys([*recorded, *now]))
    return [changed(key, recorded.get(key), now.get(key)) for key in keys if recorded.get(key) != now.get(key)]


def digest_parts(value: Any) -> dict[str, str] | None:
    """The parts of a digest that names them, ``scheme:overall:part=digest,part=digest`` (a tokenizer's identity,
    :mod:`mia_fast.tokens.fingerprint`), by name; None for any other value."""
    if not isinstance(value, str):
        return None
    scheme, _, rest = value.partition(":")
    _, _, listed = rest.partition(":")
    pairs = [part.partition("=") for part in listed.split(",")] if scheme and listed else []
    if not pairs or not all(name and sep and digest for name, sep, digest in pairs):
        return None
    return {name: digest for name, _, digest in pairs}


@dataclass(frozen=True)
class WrittenBlock:
    """A block committed to the rows file: the rows and bytes of the file at its end, the digest of the input
    rows it was scored from (None where the writer was given none) and the digest of its own bytes (None in a
    manifest of a mia-fast older than the check)."""

    rows: int
    bytes: int
    inputs: str | None
    digest: str | None = None


def inputs_digest(fingerprints: Iterable[bytes]) -> str:
    return hashlib.sha256(b"".join(fingerprints)).hexdigest()


class ResultWriter:
    """Writes result rows, in the registered format of the output's suffix (``mia_fast.data.formats``), through a
    stage (see the module docstring).

    The columns of ``text_columns`` (those of values no one type holds: ``formats.ColumnKinds``) are written as text.

    Opening only reads: an existing output (or stage) is refused unless ``resume`` (continue it, if its manifest
    matches ``columns`` and ``settings``) or ``overwrite`` (replace it, once the new one is complete) is given.
    Nothing is written before the first :meth:`write` (or :meth:`close`); :meth:`abandon` after a failure removes a
    stage that holds no finished block, so a failed fresh run leaves no file.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        columns: Sequence[str],
        *,
        resume: bool = False,
        overwrite: bool = False,
        settings: Mapping[str, Any] | None = None,
        run_file: str | None = None,
        text_columns: Collection[str] = (),
    ) -> None:
        self.path = Path(path)
        self.run_file = run_file
        self.format = output_format(self.path)
        self.staged_format = self.format.stage
        self.columns = list(columns)
        self.text_columns = [column for column in self.columns if column in text_columns]
        self.settings = dict(settings or {})
        self.engines: dict[str, Any] | None = None
        self.stage = stage_path(self.path)
        self.rows_path = self.stage / f"rows{self.staged_format.suffix}"
        self.blocks: list[WrittenBlock] = []
        self._fd: int | None = None
        self._created_stage = False
        self._written = 0  # blocks this run has finished
        self._pending: list[bytes] = []
        self._next_block = 0
        if resume and overwrite:
            raise MiaFastError("--resume and --overwrite exclude each other")
        check_side_files(self.path)
        self._finish_interrupted_completion()
        staged, complete = self.stage.exists(), path_exists(self.path)
        if staged and not (resume or overwrite):
            raise MiaFastError(
                f"{self.stage} holds the finished rows of an interrupted run; pass --resume to continue it or "
                "--overwrite to start again"
            )
        if complete and not (resume or overwrite):
            raise MiaFastError(f"{self.path} exists; pass --resume to continue it or --overwrite to replace it")
        self.state = "new"
        if resume and staged:
            self._adopt(self.stage / "manifest.json", f"{self.stage} holds no manifest")
            self._check_rows(self.rows_path, staged=True, output_sha256=None)
            self.state = "staged"
        elif resume and complete:
            recorded = self._adopt(
                manifest_path(self.path), f"{self.path} has no manifest beside it ({manifest_path(self.path).name})"
            )
            self._check_rows(self.path, staged=False, output_sha256=recorded.get("output_sha256"))
            self.state = "complete"

    @property
    def done_rows(self) -> int:
        return self.blocks[-1].rows if self.blocks else 0

    @property
    def complete(self) -> bool:
        return self.state == "complete" and self._fd is None

    # ---- reading what is there ----

    def _finish_interrupted_completion(self) -> None:
        """A run killed between renaming its rows into place and its manifest beside them: finish that."""
        staged = self.stage / "manifest.json"
        final = self.stage / f"rows{self.format.suffix}"
        if not staged.is_file() or final.exists() or not self.path.exists():
            return
        try:
            complete = json.loads(staged.read_text()).get("complete")
        except (OSError, ValueError):
            return
        if complete:
            os.replace(staged, manifest_path(self.path))
            self._remove_stage()

    def _adopt(self, manifest: Path, missing: str) -> dict[str, Any]:
        if not manifest.is_file():
            raise MiaFastError(f"{missing}; cannot tell what it was scored with: pass --overwrite to score again")
        recorded = read_checked_json(manifest, MANIFEST_KIND, _MANIFEST_WRITER)
        if recorded.get("columns") != self.columns:
            raise MiaFastError(
                f"{self.path} has columns {recorded.get('columns')}, not {self.columns}; cannot resume with other "
                "methods or fields (pass --overwrite to score again)"
            )
        changed = differences(recorded.get("settings", {}), self.settings)
        if changed:
            raise MiaFastError(
                f"{self.path} was scored under other settings ({'; '.join(changed)}); resuming would mix them: "
                "run with the same settings, or pass --overwrite to score again"
            )
        self.engines = recorded.get("engines")
        self.blocks = [WrittenBlock(**block) for block in recorded.get("blocks", [])]
        return recorded

    def _check_rows(self, rows: Path, *, staged: bool, output_sha256: str | None) -> None:
        """The rows a resumed run keeps are those its manifest records, byte for byte: a staged rows file may run on
        past its last block (a block cut short by a kill, cut off again), a complete one may not; a complete output
        converted from its stage (parquet) is checked by its own digest (``output_sha256``)."""
        again = "pass --overwrite to score again"
        if self.format.staged_in is not None and not staged:
            if output_sha256 is not None and sha256_file(rows) != output_sha256:
                raise MiaFastError(f"{rows} was changed after it was written (its digest differs); {again}")
            return
        if not rows.is_file():
            raise MiaFastError(f"{rows} is missing from its stage; {again}")
        header = self._header()
        size, kept = rows.stat().st_size, self.blocks[-1].bytes if self.blocks else len(header)
        if size < kept or (not staged and size != kept):
            raise MiaFastError(
                f"{rows} is {'shorter than' if size < kept else 'longer than'} its manifest says ({size:,} bytes, not "
                f"{kept:,}): it was changed after it was written; {again}"
            )
        with open(rows, "rb") as f:
            if f.read(len(header)) != header:
                raise MiaFastError(f"{rows} has another header than its columns: it was changed after it was written")
            start, first_row = f.tell(), 1
            for block in self.blocks:
                data = f.read(block.bytes - start)
                if block.digest is not None and hashlib.sha256(data).hexdigest() != block.digest:
                    raise MiaFastError(
                        f"rows {first_row}-{block.rows} of {rows} were changed after they were written (their digest "
                        f"differs from the manifest's); {again}"
                    )
                start, first_row = block.bytes, block.rows + 1

    def check_engines(self, engines: Mapping[str, Any]) -> None:
        """The model side of the run (weights, tokenizer, dtype, device type, back end and forward path of each
        engine), known once the model is loaded: a resumed output must have been scored by the same; a new one
        records it. An output written before a setting was recorded (:data:`RECORDED_LATER`) is compared without it."""
        engines = json.loads(json.dumps(engines, default=str))
        if self.engines is not None:
            for role in dict.fromkeys([*self.engines, *engines]):
                recorded, now = self.engines.get(role, {}), engines.get(role, {})
                if recorded:
                    now = {key: value for key, value in now.items() if key in recorded or key not in RECORDED_LATER}
                self._check_provable(role, recorded, now)
                changed = differences(recorded, now)
                if changed:
                    raise MiaFastError(
                        f"{self.path} was scored with another {role} model setting ({'; '.join(changed)}); resuming "
                        "would mix them: run with the same model and options, or pass --overwrite to score again"
                    )
        self.engines = engines

    def _check_provable(self, role: str, recorded: Mapping[str, Any], now: Mapping[str, Any]) -> None:
        """Refuses an output whose engine setting an older mia-fast recorded as a bare sha256 where this one records a
        digest that names its parts (a tokenizer's identity): the bare one covered less, so a match cannot be
        proven."""
        for key, value in now.items():
            old = recorded.get(key)
            if isinstance(old, str) and _BARE_SHA256.fullmatch(old) and digest_parts(value) is not None:
                raise MiaFastError(
                    f"{self.path} was written by an older mia-fast whose {role} {key} identity cannot be proven (it "
                    f"recorded a fingerprint of less than mia-fast compares now); resuming could mix two of them: "
                    "pass --overwrite to score again"
                )

    def check_input_rows(self, fingerprints: Sequence[bytes], describe: str = "the input") -> None:
        """The fingerprints (``Dataset.fingerprints``) of the next input rows the output already holds, in input
        order, a call at a time: every block written must have been scored from the same rows."""
        self._pending.extend(fingerprints)
        while self._next_block < len(self.blocks):
            block = self.blocks[self._next_block]
            first = self.blocks[self._next_block - 1].rows if self._next_block else 0
            if len(self._pending) < block.rows - first:
                return
            taken, self._pending = self._pending[: block.rows - first], self._pending[block.rows - first :]
            if block.inputs is not None and inputs_digest(taken) != block.inputs:
                raise MiaFastError(
                    f"rows {first + 1}-{block.rows} of {describe} differ from those {self.path} was scored from (a "
                    "text, id, label or neighbour changed); resuming would mix them: pass --overwrite to score again"
                )
            self._next_block += 1

    def keep_rows(self, rows: int, beside: Path) -> None:
        """Keeps the blocks of the first ``rows`` rows alone: a file written before the output ``beside`` it may hold
        more after an interrupted run (never fewer), and those are cut."""
        kept = [block for block in self.blocks if block.rows <= rows]
        if (kept[-1].rows if kept else 0) != rows:
            raise MiaFastError(
                f"{self.path} holds {self.done_rows} rows but {beside} {rows}; pass --overwrite to start again"
            )
        self.blocks = kept

    # ---- writing ----

    def _header(self) -> bytes:
        return self.staged_format.header(self.columns)

    def _begin(self) -> None:
        """Opens the stage for appending: a new one (an interrupted stage is replaced only now, with --overwrite),
        the interrupted one cut back to its last finished block, or a copy of the complete output to extend."""
        if self.state == "new":
            if self.stage.exists():
                self._remove_stage()
            self._make_stage(None)
        elif self.state == "complete":
            if self.format.staged_in is not None:
                # Its rows were converted when it completed: there is no staged file left to append to.
                raise MiaFastError(
                    f"{self.path} is a complete {self.format.name} output of {self.done_rows} rows and the input has "
                    "more; score the new rows into another output"
                )
            self._make_stage(self.path)
        kept = self.blocks[-1].bytes if self.blocks else len(self._header())
        self._fd = os.open(self.rows_path, os.O_WRONLY)
        os.ftruncate(self._fd, kept)
        os.lseek(self._fd, kept, os.SEEK_SET)
        self._bytes = kept

    def _make_stage(self, rows_from: Path | None) -> None:
        """A new stage, made whole before it appears: its rows (the header, or a copy of ``rows_from``) and its
        manifest in a temporary folder renamed into place."""
        self.stage.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(dir=self.stage.parent, prefix=f".{self.stage.name}-"))
        try:
            rows = temporary / self.rows_path.name
            if rows_from is None:
                rows.write_bytes(self._header())
            else:
                shutil.copyfile(rows_from, rows)
            write_checked_json(temporary / "manifest.json", self._manifest(complete=False), MANIFEST_KIND)
            os.rename(temporary, self.stage)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        self._created_stage = True

    def _remove_stage(self) -> None:
        """Removes the stage file by file: only what a stage holds (a folder with anything else stays, refused)."""
        for path in list(self.stage.iterdir()):
            if stage_file(path.name):
                path.unlink()
        try:
            self.stage.rmdir()
        except OSError as exc:
            raise MiaFastError(f"{self.stage} holds files mia-fast did not write; it was left as it is") from exc

    def write(self, rows: Sequence[Mapping[str, Any]], fingerprints: Sequence[bytes] | None = None) -> None:
        """Appends ``rows`` as one block, durably, with the digests of its bytes and of the input rows they were
        scored from."""
        if self._fd is None:
            self._begin()
        if self.text_columns:
            rows = [{**row, **{c: as_text_value(row[c]) for c in self.text_columns}} for row in rows]
        data = self.staged_format.encode(rows, self.columns)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self._bytes += len(data)
        inputs = inputs_digest(fingerprints) if fingerprints is not None else None
        block = WrittenBlock(self.done_rows + len(rows), self._bytes, inputs, hashlib.sha256(data).hexdigest())
        self.blocks.append(block)
        self._written += 1
        self._save_manifest(complete=False)

    def _manifest(self, *, complete: bool, output_sha256: str | None = None) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "settings": self.settings,
            "engines": self.engines,
            "blocks": [asdict(block) for block in self.blocks],
            "complete": complete,
            **({"output_sha256": output_sha256} if output_sha256 is not None else {}),
        }

    def _save_manifest(self, *, complete: bool, output_sha256: str | None = None) -> None:
        manifest = self._manifest(complete=complete, output_sha256=output_sha256)
        write_checked_json(self.stage / "manifest.json", manifest, MANIFEST_KIND)

    def abandon(self) -> None:
        """After a failure: a stage this run made and finished no block in goes; finished blocks stay."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._created_stage and not self._written:
            with contextlib.suppress(MiaFastError):
                self._remove_stage()

    def close(self) -> None:
        """Finishes the output: the staged rows (converted, for a format staged in another) renamed into place, then
        its manifest."""
        if self._fd is None:
            if self.state == "complete":
                return
            self._begin()
        os.close(self._fd)
        self._fd = None
        final, digest = self.rows_path, None
        if self.format.staged_in is not None:
            final = self.stage / f"rows{self.format.suffix}"
            self.format.finish(self.rows_path, final, self.columns, self.text_columns)
            # Its blocks' digests are of the staged rows; the converted file has one of its own.
            digest = sha256_file(final)
        self._save_manifest(complete=True, output_sha256=digest)
        if self.run_file is not None:
            write_atomic(run_file_path(self.path), self.run_file)
        os.replace(final, self.path)
        os.replace(self.stage / "manifest.json", manifest_path(self.path))
        self._remove_stage()
        fsync_directory(self.path.parent)
        self.state = "complete"

    def written_column(self, name: str) -> Iterator[Any]:
        """A column of the rows written so far, read lazily."""
        source, fmt = (self.path, self.format) if self.complete else (self.rows_path, self.staged_format)
        yield from (record[name] for _, record, _ in fmt.read_back(source, RowPosition(0, 0)))
