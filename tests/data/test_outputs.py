"""Score outputs: rows appended block by block to a stage and renamed into place whole with their manifest, an
interrupted output resumed only with the same columns and settings, and the differences named."""

import json

import pytest

from mia_fast.data.outputs import ResultWriter, differences, digest_parts, manifest_path, stage_path
from mia_fast.errors import MiaFastError

ROWS = [{"id": i, "loss": -float(i)} for i in range(6)]


def test_rows_appear_only_when_the_output_is_complete(tmp_path):
    out = tmp_path / "o.jsonl"
    writer = ResultWriter(out, ["id", "loss"], settings={"k": 1})
    writer.write(ROWS[:3])
    assert not out.exists() and stage_path(out).is_dir()
    writer.write(ROWS[3:])
    writer.close()
    assert [json.loads(line) for line in out.read_text().splitlines()] == ROWS
    assert not stage_path(out).exists() and manifest_path(out).is_file() and writer.done_rows == 6


def test_an_interrupted_output_resumes_only_with_the_same_settings(tmp_path):
    out = tmp_path / "o.jsonl"
    first = ResultWriter(out, ["id", "loss"], settings={"k": 1})
    first.write(ROWS[:3])  # the run stops here: its block stays in the stage
    with pytest.raises(MiaFastError, match="holds the finished rows of an interrupted run; pass --resume"):
        ResultWriter(out, ["id", "loss"], settings={"k": 1})
    with pytest.raises(MiaFastError, match="k: 1 before, now 2"):
        ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 2})
    resumed = ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 1})
    assert resumed.done_rows == 3
    resumed.write(ROWS[3:])
    resumed.close()
    assert [json.loads(line) for line in out.read_text().splitlines()] == ROWS


def test_differences_name_each_setting_that_changed():
    assert differences({"a": 1, "b": "x" * 30}, {"a": 1, "b": "y", "c": 0}) == [
        "b: 'xxxxxxxxxxxxx...' before, now 'y'",
        "c: None before, now 0",
    ]


# A digest that names its parts (a tokenizer's identity) and the bare sha256 an older mia-fast recorded instead.
PARTS = "tok2:0123456789abcdef:model=aaaaaaaaaaaa,normalizer=bbbbbbbbbbbb,added_tokens=cccccccccccc"
BARE = "ab" * 32


def test_differences_name_the_parts_of_a_digest_that_names_them():
    other = PARTS.replace("bbbbbbbbbbbb", "dddddddddddd")
    assert differences({"tokenizer": PARTS}, {"tokenizer": other}) == ["tokenizer: its normalizer differs"]
    both = other.replace("cccccccccccc", "eeeeeeeeeeee")
    assert differences({"tokenizer": PARTS}, {"tokenizer": both}) == ["tokenizer: its normalizer, added_tokens differ"]
    assert digest_parts(PARTS) == {
        "model": "aaaaaaaaaaaa",
        "normalizer": "bbbbbbbbbbbb",
        "added_tokens": "cccccccccccc",
    }
    assert digest_parts(BARE) is None and digest_parts("the server's") is None and digest_parts(3) is None


def test_a_resumed_output_is_refused_where_a_digest_that_names_its_parts_differs(tmp_path):
    out = tmp_path / "o.jsonl"
    first = ResultWriter(out, ["id", "loss"], settings={"k": 1})
    first.check_engines({"target": {"weights": "w", "tokenizer": PARTS}})
    first.write(ROWS[:3])
    resumed = ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 1})
    with pytest.raises(MiaFastError, match=r"another target model setting \(tokenizer: its normalizer differs\)"):
        resumed.check_engines({"target": {"weights": "w", "tokenizer": PARTS.replace("bbbb", "dddd")}})
    ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 1}).check_engines(
        {"target": {"weights": "w", "tokenizer": PARTS}}
    )


def test_an_output_an_older_mia_fast_recorded_by_a_bare_sha256_is_never_resumed_in_silence(tmp_path):
    out = tmp_path / "o.jsonl"
    first = ResultWriter(out, ["id", "loss"], settings={"k": 1})
    first.check_engines({"target": {"weights": BARE, "tokenizer": BARE}})
    first.write(ROWS[:3])
    resumed = ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 1})
    with pytest.raises(
        MiaFastError, match="written by an older mia-fast whose target tokenizer identity cannot be proven.*--overwrite"
    ):
        resumed.check_engines({"target": {"weights": BARE, "tokenizer": PARTS}})
