"""The package's exception and warning types, and how a line echoes a user's value (``shown``) and is printed
(``readable``): one line, cut in the middle where it is long, saying how long it was."""

import pytest

from mia_fast.errors import LINE_CHARACTERS, SHOWN_CHARACTERS, MiaFastError, MiaFastWarning, readable, shown


def test_the_error_is_a_value_error_and_the_warning_a_user_warning():
    assert issubclass(MiaFastError, ValueError) and issubclass(MiaFastWarning, UserWarning)
    with pytest.raises(ValueError, match="say what to do"):
        raise MiaFastError("say what to do")


@pytest.mark.parametrize(
    ("value", "quote", "expected"),
    [
        ("model", True, "'model'"),
        ("a/dir", False, "a/dir"),
        ("a\nb", False, "'a\\nb'"),  # unprintable: quoted even as a path, so the line stays one line
        (12, True, "12"),
        ([1, "x"], True, "[1, 'x']"),
        (None, False, "None"),
    ],
)
def test_a_short_value_is_echoed_as_it_is_written(value, quote, expected):
    assert shown(value, quote=quote) == expected


def test_a_long_string_is_cut_in_the_middle_with_its_length():
    value = "a" * 100 + "b" * 100 + "c" * 1050
    head, tail = "a" * 100 + "b" * 6, "c" * 40  # two thirds and a quarter of SHOWN_CHARACTERS
    assert SHOWN_CHARACTERS == 160
    assert shown(value) == f"'{head}…{tail}' (1,250 characters)"
    assert shown(value, quote=False) == shown(value)
    assert shown("x" * SHOWN_CHARACTERS) == repr("x" * SHOWN_CHARACTERS)


def test_a_long_value_of_another_type_is_cut_as_its_text():
    value = list(range(100))
    assert shown(value) == shown(repr(value), quote=False)
    assert shown(value).endswith(f"({len(repr(value)):,} characters)")


def test_control_characters_are_escaped_into_one_line():
    assert readable("a\nb\tc\x7f\x85 d\u2028e") == "a\\nb\\tc\\x7f\\x85 d\\u2028e"
    assert readable("plain line") == "plain line"


def test_a_line_beyond_the_limit_is_cut_in_the_middle_saying_how_much():
    assert LINE_CHARACTERS == 1000
    line = "h" * 750 + "m" * 550 + "t" * 200
    assert readable(line) == "h" * 750 + " […550 characters…] " + "t" * 200
    assert readable("x" * LINE_CHARACTERS) == "x" * LINE_CHARACTERS
