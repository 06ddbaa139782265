"""Score outputs that never lose what a user has.

Rows are appended, a block at a time and fsync'ed, to a stage beside the output (``OUT.partial/``: the rows,
and a manifest of the settings they were scored under, their byte length and a digest of the input rows of
each block). The output itself appears, or replaces an older one, only when complete: renamed into place with
its manifest (``OUT.manifest.json``). A killed or failed run leaves the older output as it was and its finished
blocks in the stage, which ``resume`` continues once the manifest agrees: same columns, same settings, same
input rows; anything else is refused, naming the difference.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.artefacts import fsync_directory, read_checked_json, write_checked_json
from mia_fast.errors import MiaFastError

OUTPUT_SUFFIXES = (".jsonl", ".csv", ".parquet")
# Rows of a staged .parquet output converted at a time, so that memory stays flat whatever the output's size.
PARQUET_CONVERSION_ROWS = 8192
MANIFEST_KIND = "mia-fast scores manifest v1"
_MANIFEST_WRITER = "a mia-fast scoring run"


def output_format(path: Path) -> str:
    name = path.name.lower()
    for suffix in OUTPUT_SUFFIXES:
        if name.endswith(suffix):
            return suffix.lstrip(".")
    raise MiaFastError(f"{path}: unsupported output format; use one of {', '.join(OUTPUT_SUFFIXES)}")


def stage_path(out: str | os.PathLike) -> Path:
    """Where the rows of an unfinished output wait: ``OUT.partial/``."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def manifest_path(out: str | os.PathLike) -> Path:
    """The manifest of a complete output: ``OUT.manifest.json``."""
    out = Path(out)
    return out.with_name(out.name + ".manifest.json")


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``key: X before, now Y`` for every setting that differs (a setting missing on one side counts)."""

    def shown(value: Any) -> str:
        text = repr(value)
        return text[:14] + "...'" if isinstance(value, str) and len(value) > 24 else text

    keys = list(dict.fromkeys([*recorded, *now]))
    return [
        f"{key}: {shown(recorded.get(key))} before, now {shown(now.get(key))}"
        for key in keys
        if recorded.get(key) != now.get(key)
    ]


@dataclass(frozen=True)
class WrittenBlock:
    """A block committed to the rows file: the rows and bytes of the file at its end, and the digest of the input
    rows it was scored from (None where the writer was given none)."""

    rows: int
    bytes: int
    inputs: str | None


def inputs_digest(fingerprints: Iterable[bytes]) -> str:
    return hashlib.sha256(b"".join(fingerprints)).hexdigest()


class ResultWriter:
    """Writes result rows to .jsonl / .csv / .parquet through a stage (see the module docstring).

    Opening only reads: an existing output (or stage) is refused unless ``resume`` (continue it, if its manifest
    matches ``columns`` and ``settings``) or ``overwrite`` (replace it, once the new one is complete) is given.
    Nothing is written before the first :meth:`write` (or :meth:`close`); :meth:`abandon` after a failure removes a
    stage that holds no finished block, so a failed fresh run leaves no file.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        columns: Sequence[str],
        resume: bool = False,
        overwrite: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.format = output_format(self.path)
        self.columns = list(columns)
        self.settings = dict(settings or {})
        self.engines: dict[str, Any] | None = None
        self.stage = stage_path(self.path)
        self.rows_path = self.stage / ("rows.csv" if self.format == "csv" else "rows.jsonl")
        self.blocks: list[WrittenBlock] = []
        self._fd: int | None = None
        self._created_stage = False
        self._written = 0  # blocks this run has finished
        self._pending: list[bytes] = []
        self._next_block = 0
        if resume and overwrite:
            raise MiaFastError("--resume and --overwrite exclude each other")
        self._finish_interrupted_completion()
        staged, complete = self.stage.exists(), self.path.exists()
        if staged and not (resume or overwrite):
            raise MiaFastError(
                f"{self.stage} holds the finished rows of an interrupted run; pass --resume to continue it or "
                "--overwrite to start again"
            )
        if complete and not (resume or overwrite):
            raise MiaFastError(f"{self.path} exists; pass --resume to continue it or --overwrite to replace it")
        self.state = "new"
        if resume and staged and not self._killed_before_its_first_block():
            self._adopt(self.stage / "manifest.json", f"{self.stage} is not a run's stage (no manifest)")
            self.state = "staged"
        elif resume and complete:
            self._adopt(
                manifest_path(self.path), f"{self.path} has no manifest beside it ({manifest_path(self.path).name})"
            )
            self._check_complete_size()
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
        final = self.stage / ("rows.parquet" if self.format == "parquet" else self.rows_path.name)
        if not staged.is_file() or final.exists() or not self.path.exists():
            return
        try:
            complete = json.loads(staged.read_text()).get("complete")
        except (OSError, ValueError):
            return
        if complete:
            os.replace(staged, manifest_path(self.path))
            shutil.rmtree(self.stage)

    def _killed_before_its_first_block(self) -> bool:
        """Whether the stage is one a run made and was killed in before its first block was finished: no manifest
        (one is written with each block) and nothing but its rows file. It holds no finished row, so a resumed run
        starts it again."""
        if (self.stage / "manifest.json").exists():
            return False
        return {p.name for p in self.stage.iterdir()} <= {self.rows_path.name}

    def _adopt(self, manifest: Path, missing: str) -> None:
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

    def _check_complete_size(self) -> None:
        if self.format != "parquet" and self.blocks and self.path.stat().st_size != self.blocks[-1].bytes:
            raise MiaFastError(
                f"{self.path} was changed after it was written (its size differs from its manifest); pass "
                "--overwrite to score again"
            )

    def check_engines(self, engines: Mapping[str, Any]) -> None:
        """The model side of the run (weights, tokenizer, dtype, device type, back end of each engine), known once
        the model is loaded: a resumed output must have been scored by the same; a new one records it."""
        engines = json.loads(json.dumps(engines, default=str))
        if self.engines is not None:
            for role in dict.fromkeys([*self.engines, *engines]):
                changed = differences(self.engines.get(role, {}), engines.get(role, {}))
                if changed:
                    raise MiaFastError(
                        f"{self.path} was scored with another {role} model setting ({'; '.join(changed)}); resuming "
                        "would mix them: run with the same model and options, or pass --overwrite to score again"
                    )
        self.engines = engines

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

    # ---- writing ----

    def _header(self) -> bytes:
        if self.format != "csv":
            return b""
        buffer = io.StringIO(newline="")
        csv.writer(buffer).writerow(self.columns)
        return buffer.getvalue().encode("utf-8")

    def _encode(self, rows: Sequence[Mapping[str, Any]]) -> bytes:
        if self.format == "csv":
            buffer = io.StringIO(newline="")
            writer = csv.writer(buffer)
            for row in rows:
                writer.writerow(["" if _json_value(row[c]) is None else row[c] for c in self.columns])
            return buffer.getvalue().encode("utf-8")
        return "".join(
            json.dumps({c: _json_value(row[c]) for c in self.columns}, ensure_ascii=False) + "\n" for row in rows
        ).encode("utf-8")

    def _begin(self) -> None:
        """Opens the stage for appending: a new one (an interrupted stage is replaced only now, with --overwrite),
        the interrupted one cut back to its last finished block, or a copy of the complete output to extend."""
        if self.state == "new":
            if self.stage.exists():
                shutil.rmtree(self.stage)
            self.stage.mkdir(parents=True)
            self._created_stage = True
            self.rows_path.write_bytes(self._header())
        elif self.state == "complete":
            if self.format == "parquet":
                raise MiaFastError(
                    f"{self.path} is a complete parquet output of {self.done_rows} rows and the input has more; "
                    "score the new rows into another output"
                )
            self.stage.mkdir(parents=True)
            self._created_stage = True
            shutil.copyfile(self.path, self.rows_path)
        kept = self.blocks[-1].bytes if self.blocks else len(self._header())
        if self.rows_path.stat().st_size < kept:
            raise MiaFastError(
                f"{self.rows_path} is shorter than its manifest says: it was changed after it was written; pass "
                "--overwrite to score again"
            )
        self._fd = os.open(self.rows_path, os.O_WRONLY)
        os.ftruncate(self._fd, kept)
        os.lseek(self._fd, kept, os.SEEK_SET)
        self._bytes = kept

    def write(self, rows: Sequence[Mapping[str, Any]], fingerprints: Sequence[bytes] | None = None) -> None:
        """Appends ``rows`` as one block, durably, with the digest of the input rows they were scored from."""
        if self._fd is None:
            self._begin()
        data = self._encode(rows)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self._bytes += len(data)
        digest = inputs_digest(fingerprints) if fingerprints is not None else None
        self.blocks.append(WrittenBlock(self.done_rows + len(rows), self._bytes, digest))
        self._written += 1
        self._save_manifest(complete=False)

    def _save_manifest(self, complete: bool) -> None:
        payload = {
            "columns": self.columns,
            "settings": self.settings,
            "engines": self.engines,
            "blocks": [asdict(block) for block in self.blocks],
            "complete": complete,
        }
        write_checked_json(self.stage / "manifest.json", payload, MANIFEST_KIND)

    def abandon(self) -> None:
        """After a failure: a stage this run made and finished no block in goes; finished blocks stay."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._created_stage and not self._written:
            shutil.rmtree(self.stage, ignore_errors=True)

    def close(self) -> None:
        """Finishes the output: the staged rows (converted, for parquet) renamed into place, then its manifest."""
        if self._fd is None:
            if self.state == "complete":
                return
            self._begin()
        os.close(self._fd)
        self._fd = None
        final = self.rows_path
        if self.format == "parquet":
            final = self.stage / "rows.parquet"
            self._convert_to_parquet(final)
        self._save_manifest(complete=True)
        os.replace(final, self.path)
        os.replace(self.stage / "manifest.json", manifest_path(self.path))
        shutil.rmtree(self.stage)
        fsync_directory(self.path.parent)
        self.state = "complete"

    def _staged_tables(self, rows: int = PARQUET_CONVERSION_ROWS) -> Iterator[Any]:
        import pyarrow as pa

        with open(self.rows_path, encoding="utf-8") as f:
            records: list[dict] = []
            for line in f:
                if line.strip():
                    records.append(json.loads(line))
                if len(records) == rows:
                    yield pa.Table.from_pylist(records)
                    records = []
            if records:
                yield pa.Table.from_pylist(records)

    def _convert_to_parquet(self, target: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        # Two passes over the staged rows, a few thousand at a time: one for the column types (a column that is
        # empty in the first rows and text later is text), one to write.
        schemas = [table.schema for table in self._staged_tables()]
        schema = (
            pa.unify_schemas(schemas, promote_options="permissive")
            if schemas
            else pa.table({c: [] for c in self.columns}).schema
        )
        with pq.ParquetWriter(target, schema) as parquet:
            for table in self._staged_tables():
                parquet.write_table(table.select(schema.names).cast(schema))

    def written_column(self, name: str) -> Iterator[Any]:
        """A column of the rows written so far, read lazily."""
        if self.complete and self.format == "parquet":
            import pyarrow.parquet as pq

            yield from pq.read_table(self.path, columns=[name]).column(name).to_pylist()
            return
        source = self.path if self.complete else self.rows_path
        with open(source, encoding="utf-8", newline="") as f:
            if self.format == "csv":
                yield from (row[name] for row in csv.DictReader(f))
            else:
                yield from (json.loads(line)[name] for line in f if line.strip())
