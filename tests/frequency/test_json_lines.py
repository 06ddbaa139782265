"""The compiled reader of JSON lines' texts: every record json writes is read as json reads it, and a block it is
not sure of (anything json refuses, a repeated or missing text field, a lone surrogate) is refused, never misread."""

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.frequency.build import json_line_texts

# Text with no lone surrogate: what a reader may count as it is.
text = st.text(st.characters(codec="utf-8"), max_size=40)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
record = st.builds(
    lambda text, others, last: {**({} if last else {"text": text}), **others, **({"text": text} if last else {})},
    text,
    st.dictionaries(text.filter(lambda key: key != "text"), json_value, max_size=3),
    st.booleans(),
)
space = st.text(st.sampled_from(" \t\r"), max_size=2)


@settings(max_examples=400, deadline=None)
@given(
    records=st.lists(st.tuples(record, st.booleans(), space, space, st.booleans()), max_size=8),
    final_newline=st.booleans(),
)
def test_every_record_json_writes_is_read_as_json_reads_it(records, final_newline):
    lines = []
    for fields, ascii, before, after, blank_after in records:
        lines.append(before + json.dumps(fields, ensure_ascii=ascii) + after)
        if blank_after:
            lines.append(" \t\x0b\x0c" if ascii else "")
    block = ("\n".join(lines) + ("\n" if final_newline else "")).encode()
    assert json_line_texts(block, "text") == [fields["text"] for fields, *_ in records]


def _json_reads(block: bytes) -> list[str] | None:
    """Each line's text as json reads it line by line, or None where a line is bad, its text no string, or its text
    holds a lone surrogate."""
    texts = []
    for line in block.split(b"\n"):
        if not line or line.isspace():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if type(record) is not dict or type(record.get("text")) is not str:
            return None
        try:
            record["text"].encode()
        except UnicodeEncodeError:
            return None
        texts.append(record["text"])
    return texts


seed_line = st.one_of(
    st.builds(lambda fields: json.dumps(fields, ensure_ascii=False), record),
    st.builds(json.dumps, record),
    st.sampled_from(
        [
            '{"text": "a", "text": "b"}',
            '{"te\\u0078t": "a", "text": "b"}',
            '{"text": "\\ud800"}',
            '{"text": "\\udc00\\ud800"}',
            '{"text": "a\\udc00b"}',
            '{"x": "\\ud83d", "text": "a"}',
            '{"text": "a", "x": NaN}',
            '{"text": "a", "x": -Infinity}',
            '{"text": "a", "x": 1.}',
            '{"text": "a", "x": .5}',
            '{"text": "a", "x": +1}',
            '{"text": "a", "x": "\\x41"}',
            '{"text": "\\u00E9\\uD83D\\uDE00"}',
            '{"text": {"text": "nested"}}',
            '{"x": {"text": "nested"}}',
            '{"text": "a"}}',
            '{"text": "a"',
            '\ufeff{"text": "bom"}',
        ]
    ),
)


@settings(max_examples=1000, deadline=None)
@given(
    lines=st.lists(seed_line, min_size=1, max_size=4),
    edits=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
    seed=st.integers(0, 2**32),
)
def test_a_damaged_block_is_read_as_json_reads_it_or_refused(lines, edits, seed):
    """Bytes replaced, inserted and cut (invalid UTF-8, overlong forms, encoded surrogates, control characters): what
    the compiled reader reads, json reads the same; and it refuses only what json refuses or a count might misread."""
    data = bytearray("\n".join(lines).encode("utf-8", "surrogatepass"))
    chooser = random.Random(seed)
    for position, byte in edits:
        if not data:
            break
        at = position % len(data)
        match chooser.randrange(4):
            case 0:
                data[at] = byte
            case 1:
                data.insert(at, byte)
            case 2:
                data[at : at + 1] = chooser.choice([b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe4\xb8"])
            case _:
                del data[at:]
    block = bytes(data)
    read = json_line_texts(block, "text")
    if read is not None:
        assert read == _json_reads(block)
    else:
        assert not all(_sure(line) for line in block.split(b"\n") if line and not line.isspace())


def _sure(line: bytes) -> bool:
    """Whether a line is one object of strict JSON in UTF-8 (no byte-order mark, no lone surrogate anywhere) holding
    one string text: what the compiled reader must read."""
    try:
        pairs = json.loads(line.decode(), object_pairs_hook=lambda pairs: pairs)
        json.dumps(pairs, ensure_ascii=False).encode()
    except (ValueError, UnicodeError):
        return False
    return type(pairs) is list and [type(value) for key, value in pairs if key == "text"] == [str]


def test_what_is_refused_and_what_is_no_record():
    assert json_line_texts(b"", "text") == []
    assert json_line_texts(b"\n \t\r\n\x0b\x0c\n", "text") == []
    assert json_line_texts(b'{"body": "a"}\n', "body") == ["a"]
    assert json_line_texts(b'{"text": "a", "x": [' + b"1" * 4300 + b", 1." + b"1" * 5000 + b"]}", "text") == ["a"]
    assert json_line_texts(memoryview(b'{"text": "a"}\n{"text": "b"}')[14:], "text") == ["b"]
    for refused in (
        b'{"text": "a", "text": "b"}',
        b'{"text": "a"}\n{"text": 1}',
        b'{"text": "a", "x": ' + b"[" * 300 + b"]" * 300 + b"}",
        b"{}",
        b'{"text": "a"}\n{"text": "\\ud800"}',
        b'{"text": "\\udc00"}',
        b'{"text": "a", "x": ' + b"1" * 4301 + b"}",  # json refuses an integer Python's int will not convert
    ):
        assert json_line_texts(refused, "text") is None, refused
    # Bytes json refuses, in the text and in a field passed over: overlong forms, an encoded surrogate, past U+10FFFF,
    # cut short, a lone continuation byte, a lead byte UTF-8 never uses, a raw control character.
    for bad in (b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"):
        for bytes_ in (bad, bad[:-1], b"\x80", b"\xf8\x88\x80\x80\x80", b"\x01"):
            for line in (b'{"text": "a' + bytes_ + b'"}', b'{"x": "' + bytes_ + b'", "text": "a"}'):
                assert json_line_texts(line, "text") is None, line
