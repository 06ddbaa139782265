"""A ``score --ray`` run on disk: its shards (runs of whole blocks of the input, each scored into
``OUT.shards/shard-NNNNN.parquet``) and ``OUT.shards/_manifest.json``, which records the run's settings, where each
shard starts, which shards are finished and whether OUT has been written from them, so that a rerun with ``resume``
continues it and one with other settings is refused."""

from __future__ import annotations

import json
import shutil
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from mia_fast.data.artefacts import write_atomic
from mia_fast.data.files import DataStream, RowPosition, row_positions
from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import REGISTRY
from mia_fast.methods.settings import recorded_settings

if TYPE_CHECKING:
    from mia_fast.scoring.config import RunConfig

MANIFEST = "_manifest.json"  # leading "_": Parquet readers of the directory (pyarrow, Ray, Spark) skip it


@dataclass(frozen=True)
class Shard:
    """Rows [start.row, start.row + rows) of the input, scored into ``name``."""

    index: int
    start: RowPosition
    rows: int

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}.parquet"

    @property
    def partial_name(self) -> str:
        return f".shard-{self.index:05d}.partial.parquet"

    def describe(self) -> str:
        return f"{self.name} (rows {self.start.row}-{self.start.row + self.rows - 1})"

    def to_json(self) -> str:
        return json.dumps([self.index, self.start.row, self.start.number, self.start.offset, self.rows])

    @classmethod
    def from_json(cls, text: str) -> Shard:
        index, row, number, offset, rows = json.loads(text)
        return cls(index, RowPosition(row, number, offset), rows)


class RayManifest:
    """``OUT.shards/_manifest.json``: the run's settings, where each shard starts, which shards are finished,
    and whether OUT has been written from them; ``new`` where this run writes it first."""

    def __init__(self, directory: Path, settings: dict[str, Any], *, resume: bool, overwrite: bool, out: Path) -> None:
        self.directory, self.path = directory, directory / MANIFEST
        if resume and overwrite:
            raise MiaFastError("--resume and --overwrite exclude each other")
        if overwrite and directory.is_dir():
            self._remove_run(directory)
        recorded = json.loads(self.path.read_text()) if self.path.is_file() else None
        if recorded is None:
            if out.exists() and not overwrite:
                raise MiaFastError(
                    f"{out} exists; pass --overwrite to replace it"
                    + ("" if not resume else f" (it was not written by a --ray run: {self.path} is missing)")
                )
            if directory.is_dir() and any(directory.iterdir()):
                raise MiaFastError(
                    f"{directory} is not the shards folder of a --ray run (no {MANIFEST}); it was left as it is: move "
                    "it away, or choose another --out"
                )
            self.content = {"settings": settings, "positions": None, "rows": None, "finished": {}, "merged": False}
            self.new = True
            return
        if not resume:
            raise MiaFastError(
                f"{directory} holds a --ray run of {out}; pass --resume to continue it or --overwrite to start over"
            )
        changed = sorted(
            name
            for name in settings.keys() | recorded["settings"].keys()
            if settings.get(name) != recorded["settings"].get(name)
        )
        if changed:
            raise MiaFastError(
                f"{directory} holds a run with other settings ({', '.join(changed)} differ); pass --overwrite to "
                "start over"
            )
        self.content = recorded
        self.new = False

    def discard(self) -> None:
        """Removes what a new run (``new``) that scored nothing has written: its manifest, and its folder once empty."""
        self.path.unlink(missing_ok=True)
        with suppress(OSError):
            self.directory.rmdir()

    def _remove_run(self, directory: Path) -> None:
        """Removes an earlier --ray run's shards, only where the folder is one (it holds the run's manifest): a
        folder of the user's at that path is refused and left as it is."""
        if not self.path.is_file():
            if not any(directory.iterdir()):
                return
            raise MiaFastError(
                f"{directory} is not the shards folder of a --ray run (no {MANIFEST}); it was left as it is: move it "
                "away, or choose another --out"
            )
        shutil.rmtree(directory)

    def shards(self, data: DataStream, shard_rows: int) -> list[Shard]:
        """The shards of the input (its row positions read once, then kept here for reruns)."""
        if self.content["positions"] is None:
            positions, rows = row_positions(data.path, shard_rows)
            if not rows:
                raise MiaFastError(f"{data.path}: the file holds no rows")
            self.content.update(positions=[[p.row, p.number, p.offset] for p in positions], rows=rows)
            self.save()
        rows = self.content["rows"]
        return [
            Shard(i, RowPosition(*p), min(shard_rows, rows - p[0])) for i, p in enumerate(self.content["positions"])
        ]

    def finished(self, shard: Shard) -> bool:
        """Whether the shard's file is there with its rows: an actor renames it into place only when whole, and
        only for this run's settings, so it counts even if the driver was stopped before it heard."""
        path = self.directory / shard.name
        if not path.is_file():
            return False
        try:
            return pq.ParquetFile(path).metadata.num_rows == shard.rows
        except Exception:  # pyarrow raises its own error types on a damaged file: score the shard again
            return False

    def finish(self, shard: Shard) -> None:
        self.content["finished"][str(shard.index)] = shard.rows
        self.save()

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.content, indent=1).encode())


def run_settings(data: DataStream, config: RunConfig, shard_rows: int) -> dict[str, Any]:
    """Everything that decides the rows of OUT: the input file as it is now, the fields, the blocks and shards,
    and every setting that changes a score, of every method, requested or not (a rerun with any of them changed
    would mix two runs' scores)."""
    stat = data.path.stat()
    settings = {
        "input": [str(data.path.resolve()), stat.st_size, stat.st_mtime_ns],
        "fields": asdict(data.fields),
        "max_words": data.max_words,
        "output_fields": [config.output.id_field, config.output.label_field],
        "block_rows": config.output.block_rows,
        "shard_rows": shard_rows,
        **recorded_settings(REGISTRY.values(), config.scoring.settings),
        **config.recorded(),
    }
    return json.loads(json.dumps(settings))  # as a manifest holds them, so that the two compare
