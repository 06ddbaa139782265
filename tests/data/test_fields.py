"""The fields of a row: the default names, a text read (None is empty, lone surrogates replaced with a warning) or
refused naming the fields there are, labels in every spelling the field's datasets use, lists of neighbour texts,
and a column that a file must have in every row or in none."""

import pytest

from mia_fast.data.fields import Fields, column, neighbor_list, parse_label, row_label, row_text
from mia_fast.errors import MiaFastError, MiaFastWarning


def test_the_default_fields_are_text_id_and_label():
    assert Fields() == Fields("text", "id", "label", None, None)
    with pytest.raises(AttributeError):
        Fields().text = "body"  # one value, passed around unchanged


def test_a_text_is_read_or_refused_naming_the_fields_there_are():
    assert row_text("d.jsonl", 3, {"text": "a fox"}, "text") == "a fox"
    assert row_text("d.jsonl", 3, {"text": None}, "text") == ""
    with pytest.raises(MiaFastError, match=r"d.jsonl: row at line 3 has no 'body' field \(fields: text, id\)"):
        row_text("d.jsonl", 3, {"text": "a", "id": 1}, "body")
    with pytest.raises(MiaFastError, match="row at line 3: 'text' is a int, not a string"):
        row_text("d.jsonl", 3, {"text": 7}, "text")
    with pytest.warns(MiaFastWarning, match=r"row at line 3: 1 lone surrogate\(s\) replaced by U\+FFFD"):
        assert row_text("d.jsonl", 3, {"text": "a\ud800b"}, "text") == "a\ufffdb"


@pytest.mark.parametrize(
    "value, label",
    [(1, 1), (0.0, 0), (True, 1), ("member", 1), (" Non-Member ", 0), ("non_member", 0), ("seen", 1), ("0", 0)],
)
def test_labels_in_every_spelling(value, label):
    assert parse_label(value) == label


def test_a_bad_label_names_its_line():
    with pytest.raises(MiaFastError, match="d.jsonl: row at line 4: label 2 is neither member .* nor non-member"):
        row_label("d.jsonl", 4, 2)


def test_neighbours_are_a_list_of_texts():
    assert neighbor_list("d.jsonl", 1, {"n": ["a", "b"]}, "n") == ("a", "b")
    for record, found in (({}, "missing"), ({"n": "a"}, "a str"), ({"n": ["a", 1]}, "a list holding non-texts")):
        with pytest.raises(MiaFastError, match=f"'n' is {found}, not a list of texts"):
            neighbor_list("d.jsonl", 1, record, "n")


def test_a_column_is_in_every_row_or_in_none_across_blocks():
    present = {}
    assert column("d.jsonl", [(1, {"id": 1}), (2, {"id": 2})], "id", present) == [1, 2]
    assert column("d.jsonl", [(1, {})], None, present) is None
    with pytest.raises(MiaFastError, match="row at line 4 has no 'id' field while other rows do"):
        column("d.jsonl", [(3, {"id": 3}), (4, {})], "id", present)
    absent = {}
    assert column("d.jsonl", [(1, {})], "group", absent) is None
    with pytest.raises(MiaFastError, match="row at line 2 has the 'group' field while earlier rows do not"):
        column("d.jsonl", [(2, {"group": "g"})], "group", absent)
