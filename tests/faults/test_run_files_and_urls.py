"""Run files, server URLs and the lines that echo them, held to the standard of every other input: each bad one is
refused with exit 2 and one line that says what is wrong, every file as it was, and no key in any line printed or
file written, wherever the key was put (a URL's user part, query or path, or the place of a variable's name)."""

from __future__ import annotations

import io
import os
import re
import socket
import sys
from pathlib import Path

import pytest
from helpers import digests, run_cli, write_jsonl

KEY = "sk-runfile-8d2e4f6a0b1c3e5f"
VARIABLE = "MIA_FAST_TEST_RUN_FILE_KEY"


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(VARIABLE, KEY)


@pytest.fixture
def data(tmp_path):
    rows = [{"text": f"text number {i} of the set", "label": i % 2} for i in range(6)]
    return write_jsonl(tmp_path / "in.jsonl", rows)


def refused_line(capsys, tmp_path, *args) -> str:
    """Runs the CLI expecting a refusal: exit 2, one line on stderr and nothing on stdout, every file under
    ``tmp_path`` byte-identical and none added, and the key in no line and no file. Returns the line."""
    before = digests(tmp_path)
    capsys.readouterr()
    code = run_cli(*args)
    printed = capsys.readouterr()
    lines = printed.err.strip().splitlines()
    assert code == 2, (code, lines)
    assert len(lines) == 1 and lines[0].startswith("mia-fast: error: "), lines
    assert not printed.out, printed.out
    assert digests(tmp_path) == before
    assert KEY not in printed.err
    assert not [path for path in digests(tmp_path) if KEY.encode() in Path(path).read_bytes()]
    return lines[0]


def run_file(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- run files read like every other input ----


def test_a_run_file_that_is_a_loop_of_links_is_one_line(tmp_path, capsys):
    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    assert "a.toml: a loop of links" in refused_line(capsys, tmp_path, "run", tmp_path / "a.toml")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda path: path.mkdir(), "is a directory, not a run file"),
        (lambda path: path.symlink_to(path.with_name("gone.toml")), "a link to nothing"),
        (lambda path: path.write_bytes(b'command = "score"\n' + b"# padding\n" * 200_000), "is over 1,048,576 bytes"),
        (lambda path: path.write_bytes(b'command = "sc\xffore"\n'), "not UTF-8"),
    ],
    ids=["directory", "dangling-link", "too-large", "not-utf8"],
)
def test_a_run_file_path_that_is_no_run_file_is_one_line(make, words, tmp_path, capsys):
    make(tmp_path / "run.toml")
    assert words in refused_line(capsys, tmp_path, "run", tmp_path / "run.toml")


def test_a_fifo_as_run_file_is_refused_without_waiting_for_a_writer(tmp_path, capsys):
    os.mkfifo(tmp_path / "run.toml")
    line = refused_line(capsys, tmp_path, "run", tmp_path / "run.toml")
    assert "is a named pipe (FIFO), not a run file" in line, line


@pytest.mark.parametrize("opening", ["[", "{a = "], ids=["arrays", "inline-tables"])
def test_a_deeply_nested_run_file_is_refused_before_it_is_parsed(opening, tmp_path, capsys):
    closing = "]" if opening == "[" else "}"
    path = run_file(tmp_path, 'command = "score"\n[data]\ndata = ' + opening * 5000 + "1" + closing * 5000 + "\n")
    line = refused_line(capsys, tmp_path, "run", path)
    assert "nest 5000 deep" in line or "nest 5001 deep" in line, line


def test_brackets_inside_strings_are_no_nesting(tmp_path, capsys):
    """The nesting check reads strings as strings: a path full of brackets is a path."""
    text = 'command = "score"\n[data]\ndata = "' + "[" * 40 + '.jsonl"\n' + "# " + "{" * 40 + "\n"
    line = refused_line(capsys, tmp_path, "run", run_file(tmp_path, text), "--out", tmp_path / "o.jsonl")
    assert "no such file" in line and "[[[[" in line, line


def test_run_file_from_standard_input(tmp_path, capsys, monkeypatch, data):
    text = f'command = "score"\n[data]\ndata = "{data}"\n[output]\nout = "{tmp_path / "o.jsonl"}"\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert run_cli("run", "-", "--print-config") == 0
    assert f'data = "{data}"' in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'command = "score"\n[output]\nquiet = true\n')))
    assert "standard input: output.quiet: --quiet is not written" in refused_line(capsys, tmp_path, "run", "-")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            'command = "score"\n[output]\nresume = true\n',
            "output.resume: --resume is not written in a run file (it says what to do with an output that is there); "
            "give it after the file: mia-fast run FILE --resume",
        ),
        ('command = "score"\n[output]\noverwrite = true\n', "--overwrite is not written in a run file"),
        ('command = "eval"\n[compute]\nquiet = true\n', "--quiet is not written in a run file (it changes how"),
        ('command = "score"\n[foo.bar]\nx = 1\n', "unknown section [foo] for score; a score run file has the sections"),
        ('command = "score"\n[dta]\ndata = "x"\n', "unknown section [dta] for score; did you mean [data]?"),
        (
            'command = "score"\n[eval]\nbootstrap = 10\n',
            "unknown section [eval] for score: [eval] holds the options of `mia-fast eval` (command = 'eval')",
        ),
        ('command = "score"\n[methods.dcpd]\na = 1\n', "unknown section [methods.dcpd] for score: no method of that"),
        ('command = "score"\n[[data]]\ndata = "x"\n', "[[data]] is an array of tables"),
        ('command = "score"\n[data]\ndata = "x"\nbogus = 1\n', "unknown key 'data.bogus' for score; [data] holds"),
        ("command = [1, 2]\n", "command [1, 2]; a run file's command is one of"),
        ('command = "eval"\n[eval]\nseed = ' + "9" * 5000 + "\n", "not a TOML run file: Exceeds the limit"),
    ],
    ids=[
        "resume",
        "overwrite",
        "quiet",
        "unknown-section",
        "near-section",
        "another-commands-section",
        "unknown-method",
        "array-of-tables",
        "unknown-key",
        "command-not-a-string",
        "integer-of-5000-digits",
    ],
)
def test_each_bad_key_or_section_is_named_with_the_reason_or_the_nearest(text, words, tmp_path, capsys):
    line = refused_line(capsys, tmp_path, "run", run_file(tmp_path, text))
    assert words in line, line


def test_a_setting_of_a_method_not_run_is_refused_from_a_file(tmp_path, capsys, data):
    text = f'command = "score"\n[data]\ndata = "{data}"\n[methods]\nnames = ["loss"]\n[methods.dcpdd]\na = 0.01\n'
    line = refused_line(capsys, tmp_path, "run", run_file(tmp_path, text), "--out", tmp_path / "o.jsonl")
    assert "methods.dcpdd.a: dcpdd is not among the methods of this run (loss)" in line, line


def test_a_method_requested_after_the_file_takes_its_settings(tmp_path, capsys, data):
    text = f'command = "score"\n[data]\ndata = "{data}"\n[methods]\nnames = ["loss"]\n[methods.dcpdd]\na = 0.01\n'
    path = run_file(tmp_path, text)
    assert run_cli("run", path, "--methods", "loss,dcpdd", "--out", tmp_path / "o.jsonl", "--print-config") == 0
    assert "[methods.dcpdd]\na = 0.01" in capsys.readouterr().out


def test_a_setting_flag_of_a_method_not_run_is_warned_about_and_not_written_back(tmp_path, capsys, data):
    out = tmp_path / "o.jsonl"
    assert run_cli("score", data, "--methods", "loss", "--a", "0.5", "--out", out, "--print-config") == 0
    printed = capsys.readouterr()
    assert "dcpdd" not in printed.out and "a = 0.5" not in printed.out
    assert printed.err.strip() == (
        "mia-fast: warning: --a is a setting of dcpdd, not among the methods (loss): it changes nothing, and is not "
        "written in the run file"
    )


def test_a_huge_value_is_echoed_cut_to_a_readable_line(tmp_path, capsys, data):
    field = "f" * 500_000
    text = f'command = "score"\n[data]\ndata = "{data}"\ntext_field = "{field}"\n'
    line = refused_line(capsys, tmp_path, "run", run_file(tmp_path, text), "--out", tmp_path / "o.jsonl")
    assert len(line) < 1200 and "characters" in line, len(line)


def test_a_huge_key_is_echoed_cut(tmp_path, capsys):
    path = run_file(tmp_path, 'command = "score"\n[data]\n' + "k" * 500_000 + " = 1\n")
    line = refused_line(capsys, tmp_path, "run", path)
    assert len(line) < 600 and "(500,005 characters)" in line, line


def test_run_without_a_file_but_a_dash_reads_standard_input_not_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert "standard input: no command" in refused_line(capsys, tmp_path, "run", "-")


# ---- URLs: one parser, one line, printed as valid URLs ----


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://[::1", "its [IPv6 address] has no closing bracket"),
        ("http://[::1]x:8000", "a host that is not a name, an IPv4 address or an [IPv6 address]"),
        ("http://[zz]:8000", "'zz' in brackets is not an IPv6 address"),
        ("http://127.0.0.1:99999", "the port is '99999'; a port is a number from 1 to 65535"),
        ("http://127.0.0.1:0", "the port is '0'"),
        ("http://127.0.0.1:" + "9" * 5000, "(5,000 characters); a port is a number from 1 to 65535"),
        ("http://127.0.0.1:8o00", "a host that is not a name"),
        ("http:///v1", "names no host"),
        ("127.0.0.1:8000", "no scheme: give it as http:// or https://"),
        ("ws://127.0.0.1", "the scheme is 'ws'"),
        ("http://exa mple.com", "printable ASCII without spaces"),
        ("http://bücher.de", "printable ASCII without spaces"),
    ],
)
def test_a_malformed_server_url_is_one_line(url, words, tmp_path, capsys, data):
    args = ["score", data, "--server", url, "--server-model", "m", "--out", tmp_path / "o.jsonl"]
    line = refused_line(capsys, tmp_path, *args)
    assert words in line, line


@pytest.mark.parametrize(
    "url",
    [f"http://127.0.0.1:9/?api_key={KEY}", f"http://user:{KEY}@127.0.0.1:9/", f"http://{KEY}@127.0.0.1:9/v1"],
    ids=["query", "user-and-password", "user"],
)
def test_print_config_never_prints_a_key_held_in_a_url(url, tmp_path, capsys, data):
    args = ["score", data, "--server", url, "--server-model", "m", "--out", tmp_path / "o.jsonl", "--print-config"]
    line = refused_line(capsys, tmp_path, *args)
    assert "***" in line, line


@pytest.mark.parametrize("pasted", [KEY, "ghp_4f9Kx2LmQ8rT1vZ7bN3cY6wA0sD5eH", "my key"])
def test_a_key_pasted_where_a_variable_name_belongs_is_refused_without_echo(pasted, tmp_path, capsys, data):
    args = ["score", data, "--server", "http://127.0.0.1:9", "--server-model", "m", "--api-key-env", pasted]
    line = refused_line(capsys, tmp_path, *args, "--out", tmp_path / "o.jsonl")
    assert pasted not in line and "takes the name of the environment variable" in line, line


def test_a_key_pasted_into_a_run_files_api_key_env_is_refused_without_echo(tmp_path, tmp_path_factory, capsys, data):
    text = f'command = "score"\n[data]\ndata = "{data}"\n[server]\nserver = "http://127.0.0.1:9"\n'
    text += f'server_model = "m"\napi_key_env = "{KEY}"\n[output]\nout = "{tmp_path / "o.jsonl"}"\n'
    # The user's run file holds the key (that is the fault): it sits apart from the folder checked for it.
    line = refused_line(capsys, tmp_path, "run", run_file(tmp_path_factory.mktemp("users"), text))
    assert "takes the name of the environment variable" in line, line


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def refused_by_a_closed_port(capsys, tmp_path, data, path: str) -> str:
    url = f"http://127.0.0.1:{closed_port()}/{path}/v1"
    args = ["--server", url, "--server-model", "m", "--api-key-env", VARIABLE, "--server-retry", "0"]
    return refused_line(capsys, tmp_path, "score", data, *args, "--methods", "loss", "--out", tmp_path / "o.jsonl")


@pytest.mark.parametrize("spelled", [KEY, KEY.replace("-", "%2D")], ids=["as-is", "percent-encoded"])
def test_the_key_in_a_url_path_is_hidden_in_the_line_that_says_the_server_refuses(spelled, tmp_path, capsys, data):
    line = refused_by_a_closed_port(capsys, tmp_path, data, spelled)
    assert re.search(r"the server at http://127\.0\.0\.1:\d+/\*\*\* refuses connections", line), line


def test_a_key_with_a_line_end_is_sent_and_hidden_as_the_key(tmp_path, capsys, data, monkeypatch):
    monkeypatch.setenv(VARIABLE, KEY + "\n")
    line = refused_by_a_closed_port(capsys, tmp_path, data, KEY)
    assert re.search(r"the server at http://127\.0\.0\.1:\d+/\*\*\* refuses connections", line), line


def test_an_ipv6_server_is_printed_with_its_brackets(tmp_path, capsys, data):
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        port = probe.getsockname()[1]
    args = ["--server", f"http://[::1]:{port}", "--server-model", "m", "--server-retry", "0", "--methods", "loss"]
    line = refused_line(capsys, tmp_path, "score", data, *args, "--out", tmp_path / "o.jsonl")
    assert f"the server at http://[::1]:{port} refuses connections" in line, line


# ---- duplicate columns ----


@pytest.mark.parametrize("column", ["text", "label"])
@pytest.mark.parametrize("command", ["score", "eval"])
def test_a_csv_header_naming_a_column_twice_is_refused(column, command, tmp_path, capsys, tiny_model_dir):
    header = ["text", "label", column]
    path = tmp_path / "in.csv"
    path.write_text(",".join(header) + "\n" + "".join(f"t{i} a,{i % 2},t{i} b\n" for i in range(4)))
    target = ["--out", tmp_path / "o.jsonl"] if command == "score" else ["--report", tmp_path / "r"]
    line = refused_line(capsys, tmp_path, command, path, "--model", tiny_model_dir, *target, "--quiet")
    assert f"the column '{column}' is named twice in the header" in line, line


def test_a_parquet_file_naming_a_column_twice_is_refused(tmp_path, capsys, tiny_model_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays([pa.array(["a b", "c d"]), pa.array(["e f", "g h"])], names=["text", "text"])
    pq.write_table(table, tmp_path / "in.parquet")
    args = ["score", tmp_path / "in.parquet", "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl", "--quiet"]
    assert "the column 'text' is named twice" in refused_line(capsys, tmp_path, *args)


def test_a_url_in_any_value_is_written_with_its_user_part_and_query_values_masked(tmp_path, capsys, data):
    model = f"https://user:{KEY}@models.example/tiny?token={KEY}"
    assert run_cli("score", data, "--model", model, "--out", tmp_path / "o.jsonl", "--print-config") == 0
    printed = capsys.readouterr().out
    assert KEY not in printed
    assert 'model = "https://***@models.example/tiny?token=***"' in printed
    assert "# A secret (the server's API key, or a URL's user part or query value)" in printed


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_a_run_file_is_an_input_no_output_replaces_even_with_overwrite(spelling, tmp_path, capsys, data):
    """`out` naming the run file itself (x.jsonl, as the issue found it) is refused like an output naming the data."""
    path = tmp_path / "x.jsonl"
    out = {"same": path, "dotted": tmp_path / "sub" / ".." / "x.jsonl", "link": tmp_path / "to-x.jsonl"}[spelling]
    (tmp_path / "sub").mkdir()
    (tmp_path / "to-x.jsonl").symlink_to(path)
    path.write_text(
        f'command = "score"\n[data]\ndata = "{data}"\n[methods]\nnames = ["loss"]\n[output]\nout = "{out}"\n'
    )
    line = refused_line(capsys, tmp_path, "run", path, "--overwrite", "--quiet")
    assert "is the input" in line and "x.jsonl" in line, line
