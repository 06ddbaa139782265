"""A ``score --ray`` run on disk, without Ray: shards named and sent as JSON, the manifest that keeps the input's
row positions for reruns (and is discarded by a new run that scored nothing), refuses a rerun with other settings
(naming them) and a folder of the user's, and counts a shard finished only when its file holds all its rows; the
settings it records."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mia_fast.cluster.shards import MANIFEST, RayManifest, Shard, run_settings
from mia_fast.data import DataStream, Fields
from mia_fast.data.readers import RowPosition
from mia_fast.errors import MiaFastError
from mia_fast.scoring.config import OutputConfig, RunConfig


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": f"text {i}"}) + "\n" for i in range(10)))
    return DataStream(path, Fields("body", label=None), max_words=5)


def test_a_shard_is_named_described_and_sent_as_json():
    shard = Shard(3, RowPosition(16, 18, 420), 8)
    assert (shard.name, shard.partial_name) == ("shard-00003.parquet", ".shard-00003.partial.parquet")
    assert shard.describe() == "shard-00003.parquet (rows 16-23)"
    assert Shard.from_json(shard.to_json()) == shard
    assert Shard.from_json(Shard(0, RowPosition(0, 1), 4).to_json()).start.offset is None


def test_the_shards_cover_the_input_and_their_positions_are_kept_for_a_rerun(tmp_path, data):
    directory, out = tmp_path / "o.jsonl.shards", tmp_path / "o.jsonl"
    directory.mkdir()
    manifest = RayManifest(directory, {"a": 1}, resume=False, overwrite=False, out=out)
    shards = manifest.shards(data, 4)
    assert [(s.start.row, s.rows) for s in shards] == [(0, 4), (4, 4), (8, 2)]
    assert all(s.start.offset is not None for s in shards)  # .jsonl rows are sought by byte offset
    rerun = RayManifest(directory, {"a": 1}, resume=True, overwrite=False, out=out)
    assert rerun.content["rows"] == 10 and rerun.shards(data, 4) == shards


def test_a_rerun_needs_resume_and_the_same_settings(tmp_path):
    directory, out = tmp_path / "o.jsonl.shards", tmp_path / "o.jsonl"
    directory.mkdir()
    RayManifest(directory, {"a": 1, "b": 2}, resume=False, overwrite=False, out=out).save()
    with pytest.raises(MiaFastError, match="holds a --ray run of .*o.jsonl; pass --resume to continue it"):
        RayManifest(directory, {"a": 1, "b": 2}, resume=False, overwrite=False, out=out)
    with pytest.raises(MiaFastError, match=r"holds a run with other settings \(b, c differ\); pass --overwrite"):
        RayManifest(directory, {"a": 1, "b": 3, "c": 0}, resume=True, overwrite=False, out=out)
    with pytest.raises(MiaFastError, match="--resume and --overwrite exclude each other"):
        RayManifest(directory, {"a": 1}, resume=True, overwrite=True, out=out)
    fresh = RayManifest(directory, {"a": 5}, resume=False, overwrite=True, out=out)
    assert fresh.content["settings"] == {"a": 5} and not directory.exists()


def test_a_new_run_that_scored_nothing_discards_its_manifest_and_folder(tmp_path, data):
    directory, out = tmp_path / "o.jsonl.shards", tmp_path / "o.jsonl"
    manifest = RayManifest(directory, {"a": 1}, resume=False, overwrite=False, out=out)
    manifest.shards(data, 4)
    assert manifest.new and (directory / MANIFEST).is_file()
    assert not RayManifest(directory, {"a": 1}, resume=True, overwrite=False, out=out).new
    manifest.discard()
    assert not directory.exists()


def test_an_output_not_written_by_a_ray_run_is_not_replaced_without_overwrite(tmp_path):
    directory, out = tmp_path / "o.jsonl.shards", tmp_path / "o.jsonl"
    out.write_text("mine\n")
    with pytest.raises(MiaFastError, match=r"o.jsonl exists; pass --overwrite to replace it$"):
        RayManifest(directory, {}, resume=False, overwrite=False, out=out)
    with pytest.raises(MiaFastError, match=f"it was not written by a --ray run: .*{MANIFEST} is missing"):
        RayManifest(directory, {}, resume=True, overwrite=False, out=out)


def test_a_shard_counts_as_finished_only_with_all_its_rows(tmp_path):
    directory = tmp_path / "o.jsonl.shards"
    directory.mkdir()
    manifest = RayManifest(directory, {}, resume=False, overwrite=False, out=tmp_path / "o.jsonl")
    shard = Shard(0, RowPosition(0, 1, 0), 3)
    assert not manifest.finished(shard)
    pq.write_table(pa.table({"loss": [1.0, 2.0]}), directory / shard.name)
    assert not manifest.finished(shard)
    pq.write_table(pa.table({"loss": [1.0, 2.0, 3.0]}), directory / shard.name)
    assert manifest.finished(shard)
    (directory / shard.name).write_bytes(b"PAR1 damaged")
    assert not manifest.finished(shard)
    manifest.finish(shard)
    assert json.loads((directory / MANIFEST).read_text())["finished"] == {"0": 3}


def test_the_recorded_settings_name_the_input_its_fields_and_the_sharding(tmp_path, data):
    settings = run_settings(data, RunConfig(OutputConfig(tmp_path / "o.jsonl", block_rows=2)), 4)
    assert settings["input"][0] == str(data.path.resolve())
    assert settings["fields"] == {"text": "body", "id": "id", "label": None, "group": None, "neighbors": None}
    assert (settings["max_words"], settings["output_fields"], settings["block_rows"], settings["shard_rows"]) == (
        5,
        ["id", "label"],
        2,
        4,
    )
