"""``mia-fast run FILE``: the command line a run file stands for, flags given after FILE appended (so they win)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from mia_fast.cli.runfile import RunFileLayout, command_parser
from mia_fast.cli.runfile_reader import command_line, read_run_file, refuse_settings_not_run, source_name

# What the command's --help says of it (argparse wraps it anew).
DESCRIPTION = """Runs what a run file (TOML) describes: 'command' names the command; each option is a key named as
its flag with underscores, in the section of its kind: [data], [model], [server], [methods] (names, k) with a
method's settings under [methods.NAME] by their own names, [online], [output], [compute], [ray], and a section named
after the command for its own options. Flags after FILE win over the file. Every output and report carries the run
file that reproduces it (OUT.run.toml, REPORT/run.toml); COMMAND --print-config prints one. See docs/cli.md."""


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the run file (TOML), e.g. the run.toml beside a report")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="flags of the file's command, which win over it")


def run_file_argv(
    argv: Sequence[str], build_parser: Callable[[list[str]], argparse.ArgumentParser]
) -> tuple[list[str], str | None]:
    """``run FILE [flags]`` as the command line it stands for: the file's, then the flags, and FILE (an input of the
    command, which no output may replace); ``argv`` itself where it names no file (``run --help``), for the parser to
    answer. FILE ``-`` is standard input."""
    rest = list(argv[argv.index("run") + 1 :])
    at = next((i for i, word in enumerate(rest) if word == "-" or not word.startswith("-")), None)
    if at is None:
        return list(argv), None
    path, overrides = rest[at], rest[:at] + rest[at + 1 :]
    command, document = read_run_file(path)
    parser = command_parser(build_parser([command]), command)
    layout = RunFileLayout(parser, command)
    source = source_name(path)
    words = [*command_line(layout, document, source), *overrides]
    refuse_settings_not_run(layout, document, parser.parse_args(words[1:]), source)
    return words, None if path == "-" else path
