"""Generated run files and server URLs: any input gives a result or one line, never a traceback, and no key placed in
a URL's user part, query or fragment shows in a line. The properties are those of ``benchmarks/fuzz.py`` (its
``runfile`` and ``url`` targets); MIA_FAST_FUZZ_EXAMPLES sets how many inputs each test draws (a long local run:
10000)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from mia_fast.cli.main import build_parser
from mia_fast.cli.runfile import RUN_COMMANDS, RunFileLayout, command_parser

EXAMPLES = int(os.environ.get("MIA_FAST_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEARCH = settings(max_examples=500, database=None, deadline=None)
SECRET = "SECRETk3y9"


def fuzz_module():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("mia_fast_fuzz_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = fuzz_module()
PARSER = build_parser(RUN_COMMANDS)
LAYOUTS = [RunFileLayout(command_parser(PARSER, command), command) for command in RUN_COMMANDS]
# Every key and section of every command's run files, and some that are none.
DOTTED = sorted({dotted for layout in LAYOUTS for dotted in layout.options})
SECTIONS = sorted({dotted.rpartition(".")[0] for dotted in DOTTED} | {"foo", "methods.nope", "eval.x", "run"})
KEYS = sorted({dotted.rpartition(".")[2] for dotted in DOTTED} | {"resume", "quiet", "handler", "help", "names"})
WORDS = ["loss", "mink_0.2", "dcpdd", "-", "--help", "x.jsonl", "bf16", "cpu", "auto", "http://127.0.0.1:8000", "0.5"]


def bare_or_quoted(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{" + ", ".join(f"{bare_or_quoted(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


keys = st.sampled_from(KEYS) | st.text(max_size=12)
scalars = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=20),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.booleans(),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=2), max_leaves=6
)


@st.composite
def run_file_documents(draw) -> bytes:
    """A run file built from the real commands' sections and keys, and strays among them."""
    command = draw(st.sampled_from([*RUN_COMMANDS, "freq", ""]) | st.text(max_size=8))
    lines = [] if draw(st.integers(0, 9)) == 0 else [f"command = {toml_value(command)}"]
    for _ in range(draw(st.integers(0, 4))):
        section = draw(st.sampled_from(SECTIONS) | st.text(min_size=1, max_size=10))
        header = ".".join(bare_or_quoted(part) for part in section.split("."))
        lines.append(f"[[{header}]]" if draw(st.integers(0, 19)) == 0 else f"[{header}]")
        for key, value in draw(st.dictionaries(keys, values, max_size=4)).items():
            lines.append(f"{bare_or_quoted(key)} = {toml_value(value)}")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


@st.composite
def edited_seeds(draw) -> bytes:
    """The seed run file with a few bytes written over, cut out or put in."""
    text = bytearray(fuzz.SEED_RUN_FILE)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["write", "cut", "insert"]))
        pieces = [b"[", b"]", b"{", b'"', b"'''", b"\n", b"=", b"9" * 4400]
        piece = draw(st.binary(min_size=1, max_size=6) | st.sampled_from(pieces))
        if edit == "write":
            text[at : at + len(piece)] = piece
        elif edit == "cut":
            del text[at : at + len(piece)]
        else:
            text[at:at] = piece
    return bytes(text)


run_file_texts = run_file_documents() | edited_seeds() | st.binary(max_size=200)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzzed-run-files")


@FUZZ
@given(text=run_file_texts)
def test_any_run_file_gives_a_run_file_or_one_line(text, folder):
    fuzz.run_file_outcome(text, folder)


def test_the_generated_run_files_reach_past_the_toml_parser(folder):
    """Without this, the test above could pass on files that all fail to parse: among the generated files are
    some printed back and some refused past the parser (an unknown key, a value's check)."""

    def refused_past_the_parser(text: bytes) -> bool:
        code, lines, _ = fuzz.run_file_outcome(text, folder)
        return code == 2 and "not a TOML run file" not in lines[0] and "command" not in lines[0]

    find(run_file_documents(), lambda text: fuzz.run_file_outcome(text, folder)[0] == 0, settings=SEARCH)
    find(run_file_documents(), refused_past_the_parser, settings=SEARCH)


# An IPv6 zone's pieces: its separator, bare or escaped, escapes of a letter, of a % and of no character at all.
ZONE_PIECES = ["%", "%25", "eth0", "%41", "%2541", "%A0", "%%", "-", " ", "ü"]


def with_secret(part: str) -> st.SearchStrategy[str]:
    return st.sampled_from([part.replace("S", SECRET), ""])


@st.composite
def good_urls(draw) -> tuple[str, str]:
    scheme = draw(st.sampled_from(["http", "https", "HTTP"]))
    host = draw(st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[fe80::1%25eth0]", "host-1.example"]))
    port = draw(st.just("") | st.integers(1, 65_535).map(lambda p: f":{p}"))
    path = draw(st.sampled_from(["", "/", "/v1", "//v1", "/base/v1/", "/a%20b", "/v1/v1"]))
    return f"{scheme}://{host}{port}{path}", ""


@st.composite
def messy_urls(draw) -> tuple[str, str]:
    """A URL from pieces, well or badly formed, with the secret in its user part, query or fragment where drawn."""
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "ftp", "", "ws"]) | st.text(max_size=5))
    separator = draw(st.sampled_from(["://", "://", ":/", "//", ""]))
    user = draw(with_secret("u:S@") | with_secret("S@") | st.just(""))
    host = draw(
        st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "::1]", "[zz]", "[fe80::1%25eth0]", "a b", "bü.de"])
        | st.text(max_size=10)
    )
    port = draw(st.just("") | st.integers(-5, 100_000).map(lambda p: f":{p}") | st.text(max_size=4).map(":".__add__))
    path = draw(st.sampled_from(["", "/", "/v1", "//v1", "/base/v1/"]) | st.text(max_size=10).map("/".__add__))
    query = draw(with_secret("?key=S") | with_secret("?a=1&api_key=S") | with_secret("?S") | st.just(""))
    fragment = draw(with_secret("#S") | st.just(""))
    url = f"{scheme}{separator}{user}{host}{port}{path}{query}{fragment}"
    secret = SECRET if SECRET in user + query + fragment else ""
    return url, secret


def zoned_urls() -> st.SearchStrategy[tuple[str, str]]:
    """A link-local address with a zone drawn from pieces, well or badly escaped."""
    zones = st.lists(st.sampled_from(ZONE_PIECES), min_size=1, max_size=4).map("".join)
    return zones.map(lambda zone: (f"http://[fe80::1{zone}]:8000/v1", ""))


@FUZZ
@given(drawn=good_urls() | messy_urls() | zoned_urls() | st.tuples(st.text(max_size=40), st.just("")))
def test_any_url_gives_an_endpoint_or_one_line_and_never_shows_a_key(drawn):
    fuzz.url_outcome(*drawn)


def test_the_generated_urls_are_both_taken_and_refused():
    find(good_urls() | messy_urls(), lambda drawn: fuzz.url_outcome(*drawn) is not None, settings=SEARCH)
    find(messy_urls(), lambda drawn: drawn[1] and fuzz.url_outcome(*drawn) is None, settings=SEARCH)
