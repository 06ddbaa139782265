"""What a table records of each source: size and content sample read in milliseconds, equal for a copy, and the merge
of two tables' sources, which lists each once and refuses one they share."""

import pytest

from mia_fast.errors import MiaFastError
from mia_fast.frequency.sources import SAMPLE_BYTES, TableSource, merged_sources


def test_a_record_holds_the_size_and_a_sample_equal_for_a_copy_only(tmp_path):
    big = bytes(range(256)) * (3 * SAMPLE_BYTES // 256)
    (tmp_path / "a.bin").write_bytes(big)
    (tmp_path / "copy.bin").write_bytes(big)
    (tmp_path / "tail.bin").write_bytes(big[:-1] + b"x")
    (tmp_path / "longer.bin").write_bytes(big + b"\n")
    a, copy = TableSource.of(tmp_path / "a.bin"), TableSource.of(tmp_path / "copy.bin", name="shard")
    assert (a.path, a.size, a.counted) == (str(tmp_path / "a.bin"), len(big), 1)
    assert copy.path == "shard" and copy.content == a.content
    assert TableSource.of(tmp_path / "tail.bin").content != a.content
    assert TableSource.of(tmp_path / "longer.bin").content != a.content
    (tmp_path / "small.txt").write_text("one\n")
    (tmp_path / "small2.txt").write_text("two\n")
    assert TableSource.of(tmp_path / "small.txt").content != TableSource.of(tmp_path / "small2.txt").content


def test_records_round_trip_and_older_paths_are_read():
    source = TableSource("a.txt", 12, "ab" * 32, 2)
    assert TableSource.from_record(source.record()) == source
    assert TableSource.from_record("a.txt") == TableSource("a.txt")
    assert source.describe() == "a.txt (counted twice)" and TableSource("b").describe() == "b"
    for bad, message in [
        ({"path": "a"}, "an object of the fields path, bytes, sample_sha256, counted"),
        (source.record() | {"counted": True}, "'counted' has the wrong type"),
        (source.record() | {"bytes": -1}, "'bytes' not negative"),
        (3, "an object of the fields"),
    ]:
        with pytest.raises(MiaFastError, match=message):
            TableSource.from_record(bad)


def test_merged_sources_list_each_once_and_name_a_shared_one():
    a, b, c = TableSource("a", 5, "11"), TableSource("b", 5, "22"), TableSource("c", 5, "11")
    assert merged_sources([[a], [b]], ["x", "y"]) == (a, b)
    with pytest.raises(MiaFastError, match="cannot merge x and y: x counts a and y c, the same file"):
        merged_sources([[a], [b, c]], ["x", "y"])
    assert merged_sources([[a], [b, c]], ["x", "y"], allow_overlap=True) == (TableSource("a", 5, "11", 2), b)
    # A source listed twice inside one table, by an older merge: listed once, its count kept.
    assert merged_sources([[TableSource("a"), TableSource("a")], [b]], ["x", "y"]) == (TableSource("a", counted=2), b)
