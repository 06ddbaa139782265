"""Writing what a user keeps: a file replaced whole or not at all, JSON artefacts whose changes are caught by their
checksum, and one writer at a time for an output (its lock carries the tool's mark)."""

import json

import pytest

from mia_fast.data.artefacts import (
    OutputLock,
    holds_lock_mark,
    is_temporary_of,
    lock_path,
    read_checked_json,
    replacing,
    sha256_file,
    write_atomic,
    write_checked_json,
)
from mia_fast.errors import MiaFastError


def test_a_file_is_replaced_whole_or_left_as_it_was(tmp_path):
    path = write_atomic(tmp_path / "new" / "a.txt", "first")
    assert path.read_text() == "first"
    with pytest.raises(RuntimeError), replacing(path) as temporary:
        temporary.write_text("half")
        raise RuntimeError("killed")
    assert path.read_text() == "first" and sorted(p.name for p in path.parent.iterdir()) == ["a.txt"]
    write_atomic(path, b"second")
    assert path.read_bytes() == b"second"
    assert sha256_file(path) == "16367aacb67a4a017c8da8ab95682ccb390863780f7114dda0a0e0c55644c7c4"
    assert not is_temporary_of("a.txt", "a.txt")


def test_a_checked_json_file_reads_back_and_refuses_any_change(tmp_path):
    path = write_checked_json(tmp_path / "m.json", {"rows": 3, "names": ["a"]}, "manifest")
    assert read_checked_json(path, "manifest", "score") == {"rows": 3, "names": ["a"]}
    changed = json.loads(path.read_text())
    changed["rows"] = 4
    path.write_text(json.dumps(changed))
    with pytest.raises(MiaFastError, match="checksum mismatch: the file was changed after it was written; score again"):
        read_checked_json(path, "manifest", "score")
    with pytest.raises(MiaFastError, match="is not a report file; eval writes one"):
        read_checked_json(write_checked_json(tmp_path / "r.json", {}, "manifest"), "report", "eval")
    (tmp_path / "plain.json").write_text("not json")
    with pytest.raises(MiaFastError, match=r"is not a manifest file \(not JSON\)"):
        read_checked_json(tmp_path / "plain.json", "manifest", "score")
    with pytest.raises(MiaFastError, match="cannot write a manifest file"):
        write_checked_json(tmp_path / "nan.json", {"score": float("nan")}, "manifest")


def test_an_output_has_one_writer_at_a_time(tmp_path):
    out = tmp_path / "scores.jsonl"
    with OutputLock(out):
        lock = lock_path(out)
        assert lock.name == "scores.jsonl.lock" and holds_lock_mark(lock)
        with pytest.raises(MiaFastError), OutputLock(out):
            pass
    with OutputLock(out):  # released, so it can be taken again
        pass
