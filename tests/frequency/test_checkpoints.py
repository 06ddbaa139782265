"""Checkpoints of a text build: finished shards kept and found again by a rerun of the same build, refused to a
build of other settings or sources, a damaged shard counted again, and a folder that is not this tool's refused and
never deleted."""

import re

import numpy as np
import pytest

from mia_fast.errors import MiaFastError
from mia_fast.frequency.checkpoints import ShardCheckpoints, check_checkpoints, remove_checkpoints
from mia_fast.frequency.table import FrequencyTable

pytestmark = pytest.mark.lower_bounds

SETTINGS = {"vocab_size": 4, "mode": "occurrence", "max_tokens_per_doc": None, "text_field": "text"}


@pytest.fixture
def sources(tmp_path):
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path in files:
        path.write_text('{"text": "x"}\n')
    return files


def table(first: int) -> FrequencyTable:
    return FrequencyTable(np.array([first, 1, 0, 2], np.uint64), first + 3, 1, sources=(f"s{first}",))


def test_a_rerun_of_the_same_build_finds_the_finished_shards(tmp_path, sources):
    folder = tmp_path / "t.freq.partial"
    checkpoints = ShardCheckpoints(folder, SETTINGS, sources)
    assert checkpoints.load(0) is None
    checkpoints.save(1, table(5), bad_records=2)
    again = ShardCheckpoints(folder, SETTINGS, sources)
    assert again.load(0) is None
    loaded, bad = again.load(1)
    assert loaded.to_bytes() == table(5).to_bytes() and bad == 2


def test_other_settings_or_changed_sources_are_refused(tmp_path, sources):
    folder = tmp_path / "t.freq.partial"
    ShardCheckpoints(folder, SETTINGS, sources).save(0, table(1), 0)
    with pytest.raises(MiaFastError, match="holds an unfinished build with other settings or sources"):
        ShardCheckpoints(folder, {**SETTINGS, "mode": "document"}, sources)
    sources[1].write_text('{"text": "changed"}\n')
    with pytest.raises(MiaFastError, match="holds an unfinished build with other settings or sources"):
        ShardCheckpoints(folder, SETTINGS, sources)


TOKENIZER = "tok2:0123456789abcdef:model=aaaaaaaaaaaa,normalizer=bbbbbbbbbbbb"


@pytest.mark.parametrize(
    ("recorded", "said"),
    [
        (TOKENIZER.replace("bbbb", "cccc"), "counted with another tokenizer (their normalizers differ)"),
        ("ab" * 32, "written by an older mia-fast whose tokenizer identity cannot be proven"),
    ],
    ids=["another normalizer", "an older mia-fast"],
)
def test_a_build_of_another_tokenizer_or_an_unproven_one_is_refused_naming_it(tmp_path, sources, recorded, said):
    folder = tmp_path / "t.freq.partial"
    ShardCheckpoints(folder, {**SETTINGS, "tokenizer_fingerprint": recorded}, sources).save(0, table(1), 0)
    with pytest.raises(MiaFastError, match=re.escape(f"{said}; remove it (or pass --overwrite) to start over")):
        ShardCheckpoints(folder, {**SETTINGS, "tokenizer_fingerprint": TOKENIZER}, sources)
    assert ShardCheckpoints(folder, {**SETTINGS, "tokenizer_fingerprint": recorded}, sources).load(0) is not None


def test_a_damaged_shard_is_counted_again(tmp_path, sources):
    folder = tmp_path / "t.freq.partial"
    ShardCheckpoints(folder, SETTINGS, sources).save(0, table(1), 0)
    shard = folder / "shard-000000.freq"
    shard.write_bytes(shard.read_bytes()[:-1])
    assert ShardCheckpoints(folder, SETTINGS, sources).load(0) is None


def test_a_folder_that_is_not_a_checkpoint_folder_is_refused_and_kept(tmp_path, sources):
    assert check_checkpoints(tmp_path / "absent") is False
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text('{"format": "something else"}')
    for act in (check_checkpoints, remove_checkpoints, lambda folder: ShardCheckpoints(folder, SETTINGS, sources)):
        with pytest.raises(MiaFastError, match="mine is not a checkpoint folder of mia-fast; it was left as it is"):
            act(mine)
    assert (mine / "manifest.json").read_text() == '{"format": "something else"}'


def test_removing_takes_only_the_builds_own_files(tmp_path, sources):
    folder = tmp_path / "t.freq.partial"
    ShardCheckpoints(folder, SETTINGS, sources).save(0, table(1), 0)
    assert check_checkpoints(folder) is True
    remove_checkpoints(folder)
    assert not folder.exists()
    ShardCheckpoints(folder, SETTINGS, sources).save(1, table(2), 0)
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(MiaFastError, match="holds files mia-fast did not write; it was left as it is"):
        remove_checkpoints(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
