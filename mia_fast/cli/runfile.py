"""Run files: a whole run described by one TOML file, ``mia-fast run FILE`` (``tomllib``).

A run file is a command line written out: ``command`` names the command, and every option is a key, named as its
flag with underscores, in the section of its kind: ``[data]`` (the texts, a suite, the input fields), ``[model]``
(the model, GGUF file, reference model, device, dtype, start token, window), ``[server]`` (a served model; its key's
environment variable, never the key), ``[methods]`` (``names`` and ``k``) with each method's settings under
``[methods.NAME]`` by the settings' own field names, ``[output]``, ``[compute]``, ``[online]``, ``[ray]``, and a
section named after the command for its own options (``[eval]``: the report; ``[demo]``: the experiment).

``mia-fast run FILE`` turns the file back into that command line, flags given after FILE appended (so they win),
and runs it: the values meet the same parsers, checks and typed configuration (``RunConfig``) as flags do. Every
scoring output and report gets the run file that reproduces it (``OUT.run.toml``, ``REPORT/run.toml``), and
``--print-config`` prints it without running. Paths are as given, relative to the directory a run starts in.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.outputs import RUN_FILE_HEADER
from mia_fast.errors import MiaFastError

# The commands a run file can describe: every one whose options are plain values and switches (not freq's and
# probe's, which have commands of their own).
RUN_COMMANDS = ("score", "rescore", "eval", "calibrate", "classify", "audit-unlearning", "dataset-inference", "demo")
REPORT_RUN_FILE = "run.toml"
# What says how to treat an output that is there, how the run looks, or makes it no run: never in a run file.
_NOT_RECORDED = {"help", "print_config", "resume", "overwrite", "quiet", "verbose", "compare", "handler"}
_GROUP_SECTIONS = {
    "positional arguments": "data",
    "benchmarks": "data",
    "input fields": "data",
    "model": "model",
    "served model": "server",
    "scoring": "methods",
    "output": "output",
    "online detection": "online",
    "Ray cluster": "ray",
}
_OPTION_SECTIONS = {
    "text_field": "data",
    "methods": "methods",
    "k": "methods",
    "prepend_start": "model",
    "max_length": "model",
    "batch_tokens": "compute",
    "backend": "compute",
    "forward": "compute",
    "stats_cache": "compute",
    "out": "output",
}
_KEY_HIDDEN = (
    "# The server's API key was in a value below and is written as ***: put it back there to run this file (the "
    "key belongs in the environment variable of api_key_env)."
)
# A section whose options mean nothing without one of them: left out where that one has no value.
_ANCHORS = {"server": "server"}
# Keys named otherwise than their option, where the option's name would repeat its section's.
_KEYS = {"methods": "names"}
METHOD_SETTINGS = "method settings"


@dataclass(frozen=True)
class _Key:
    """Where an option lives in a run file: ``section`` (``methods.NAME`` for a method's setting) and ``key``."""

    section: str
    key: str

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser of ``command`` in the top parser of ``mia-fast``."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


def _group_section(title: str, command: str) -> str:
    return next((s for prefix, s in _GROUP_SECTIONS.items() if title.startswith(prefix)), command)


def _recorded_actions(parser: argparse.ArgumentParser, command: str) -> Iterator[tuple[argparse.Action, str]]:
    """Every option a run file records, with the section of its group (METHOD_SETTINGS for a method's)."""
    for group in parser._action_groups:
        for action in group._group_actions:
            if action.dest in _NOT_RECORDED or action.dest == argparse.SUPPRESS:
                continue
            section = METHOD_SETTINGS if group.title == METHOD_SETTINGS else _group_section(group.title, command)
            yield action, _OPTION_SECTIONS.get(action.dest, section)


def _setting_places(dests: set[str]) -> dict[str, list[_Key]]:
    """For each method setting's option among ``dests``, its places: ``methods.NAME`` and the field's own name, for
    every method that reads it."""
    from mia_fast.methods.registry import REGISTRY
    from mia_fast.methods.settings import setting_fields

    places: dict[str, list[_Key]] = {}
    for method in REGISTRY.values():
        for cls in method.settings:
            for f in setting_fields(cls):
                if f.spec.flag is not None and f.key in dests:
                    places.setdefault(f.key, []).append(_Key(f"methods.{method.name}", f.name))
    return places


class RunFileLayout:
    """The keys of one command's run file, and the option behind each."""

    def __init__(self, parser: argparse.ArgumentParser, command: str) -> None:
        self.command = command
        self.actions: dict[str, argparse.Action] = {}
        self.keys: dict[str, list[_Key]] = {}
        settings = []
        for action, section in _recorded_actions(parser, command):
            self.actions[action.dest] = action
            if section == METHOD_SETTINGS:
                settings.append(action.dest)
            else:
                self.keys[action.dest] = [_Key(section, _KEYS.get(action.dest, action.dest))]
        self.keys.update(_setting_places(set(settings)))
        self.options = {key.dotted: dest for dest, keys in self.keys.items() for key in keys}

    # ---- writing ----

    def write(self, args: argparse.Namespace) -> str:
        """The run file of ``args``: every recorded option that has a value."""
        sections: dict[str, dict[str, Any]] = {}
        chosen = _requested_methods(args)
        key = os.environ.get(getattr(args, "api_key_env", None) or "") or None
        hidden = False
        for dest, keys in self.keys.items():
            value = getattr(args, dest, None)
            anchor = _ANCHORS.get(keys[0].section)
            if value is None or (anchor is not None and getattr(args, anchor, None) is None):
                continue
            if key is not None and isinstance(value, str) and key in value:
                value, hidden = value.replace(key, "***"), True
            place = next((k for k in keys if k.section.removeprefix("methods.") in chosen), keys[0])
            sections.setdefault(place.section, {})[place.key] = _file_value(dest, value)
        lines = [RUN_FILE_HEADER, *([_KEY_HIDDEN] if hidden else []), f"command = {_toml(self.command)}"]
        for section in sorted(sections, key=_section_order):
            lines += ["", f"[{section}]", *(f"{key} = {_toml(v)}" for key, v in sections[section].items())]
        return "\n".join(lines) + "\n"

    # ---- reading ----

    def argv(self, document: Mapping[str, Any], source: str) -> list[str]:
        """The command line of a run file's ``document`` (its ``command`` key already read)."""
        values: dict[str, tuple[str, Any]] = {}
        for dotted, value in _leaves(document, source):
            dest = self.options.get(dotted)
            if dest is None:
                raise MiaFastError(f"{source}: {_unknown(dotted, list(self.options), self.command)}")
            if dest in values and values[dest][1] != value:
                raise MiaFastError(
                    f"{source}: {values[dest][0]} and {dotted} are one setting "
                    f"({self.actions[dest].option_strings[0]}) given two values; give it once"
                )
            values[dest] = (dotted, value)
        positional, flags = [], []
        # Positionals in the parser's order, whatever the file's.
        for dest in sorted(values, key=list(self.actions).index):
            action, (dotted, value) = self.actions[dest], values[dest]
            words = _option_words(action, value, source, dotted)
            (flags if action.option_strings else positional).extend(words)
        return [self.command, *positional, *flags]


def _section_order(section: str) -> tuple[int, str]:
    order = ["data", "model", "server", "methods", "online", "output", "compute", "ray"]
    base = section.split(".")[0]
    return (order.index(base) if base in order else len(order), section)


def _requested_methods(args: argparse.Namespace) -> set[str]:
    from mia_fast.methods.registry import column_method

    names = str(getattr(args, "methods", "") or "").split(",")
    return {method.name for name in names if (method := column_method(name.strip())) is not None}


def _leaves(document: Mapping[str, Any], source: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every value of a run file but its ``command``; a method's table is one level deeper."""
    for key, value in document.items():
        dotted = f"{prefix}{key}"
        if dotted == "command":
            continue
        if isinstance(value, dict):
            if dotted.count(".") > 1 or (prefix and not dotted.startswith("methods.")):
                raise MiaFastError(f"{source}: {dotted} is a table where a value belongs")
            yield from _leaves(value, source, f"{dotted}.")
        elif not prefix:
            raise MiaFastError(f"{source}: {dotted} is a value outside any section: put it under its section")
        else:
            yield dotted, value


def _unknown(dotted: str, known: Sequence[str], command: str) -> str:
    nearest = difflib.get_close_matches(dotted, known, n=1, cutoff=0.5)
    if not nearest:
        # A right key in a wrong section: the same key anywhere.
        nearest = [k for k in known if k.rsplit(".", 1)[-1] == dotted.rsplit(".", 1)[-1]][:1]
    hint = f"; did you mean {nearest[0]!r}?" if nearest else f"; see `mia-fast {command} --print-config`"
    return f"unknown key {dotted!r} for {command}{hint}"


def _file_value(dest: str, value: Any) -> Any:
    """An option's parsed value as a run file holds it: comma-separated names as a list, numbers as numbers."""
    if dest == "methods" and isinstance(value, str):
        return [name for name in value.split(",") if name]
    if isinstance(value, tuple):
        return list(value)
    return value


def _argument_text(value: Any, source: str, dotted: str) -> str:
    """A run file's value as its option's text: a list comma-separated, a number as Python spells it."""
    if isinstance(value, list):
        return ",".join(_argument_text(v, source, dotted) for v in value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return str(value)
    raise MiaFastError(
        f"{source}: {dotted}: a value here is a string, a number or a list of them, not {type(value).__name__}"
    )


def _option_words(action: argparse.Action, value: Any, source: str, dotted: str) -> list[str]:
    """The command-line words that give ``action`` a run file's ``value``, checked as the option's parser checks
    it."""
    flag = action.option_strings[0] if action.option_strings else None
    if isinstance(action, argparse.BooleanOptionalAction):
        _expect_bool(value, source, dotted)
        return [flag if value else "--no-" + flag.removeprefix("--")]
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        _expect_bool(value, source, dotted)
        return [flag] if value != action.default else []
    if isinstance(value, bool):
        raise MiaFastError(f"{source}: {dotted} takes a value, not {str(value).lower()}")
    text = _argument_text(value, source, dotted)
    try:
        parsed = action.type(text) if action.type is not None else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise MiaFastError(f"{source}: {dotted}: {exc}") from None
    if action.choices is not None and parsed not in action.choices:
        shown = ", ".join(map(str, action.choices))
        raise MiaFastError(f"{source}: {dotted}: {text!r} is not one of {shown}")
    if flag is None:
        return [text]
    if action.nargs == "?" and text == action.const:
        return [flag]
    return [f"{flag}={text}"]


def _expect_bool(value: Any, source: str, dotted: str) -> None:
    if not isinstance(value, bool):
        raise MiaFastError(f"{source}: {dotted} is a switch: true or false, not {value!r}")


def _toml(value: Any) -> str:
    """A value as TOML: strings, numbers, booleans and lists of them (what an option holds)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
            if not math.isfinite(value)
            else repr(value)
        )
    if isinstance(value, str):
        # JSON's string escapes are TOML's basic string escapes.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise MiaFastError(f"cannot write {value!r} into a run file (strings, numbers, booleans and lists only)")


def read_run_file(path: str) -> tuple[str, dict[str, Any]]:
    """A run file's command and its document; one line for a file that is missing or no TOML of a known command."""
    import tomllib

    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except FileNotFoundError:
        raise MiaFastError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise MiaFastError(f"{path} is a directory, not a run file") from None
    except tomllib.TOMLDecodeError as exc:
        raise MiaFastError(f"{path}: not a TOML run file: {exc}") from None
    except UnicodeDecodeError:
        raise MiaFastError(f"{path}: not a TOML run file (not UTF-8 text)") from None
    command = document.get("command")
    if command not in RUN_COMMANDS:
        given = "no command" if command is None else f"command {command!r}"
        raise MiaFastError(f"{path}: {given}; a run file's command is one of {', '.join(RUN_COMMANDS)}")
    return command, document


def write_report_run_file(report: str | os.PathLike, args: argparse.Namespace) -> Path:
    """The run file of ``args`` in the report directory ``report`` (``run.toml``), whole or not at all."""
    from mia_fast.data.artefacts import write_atomic

    return write_atomic(Path(report) / REPORT_RUN_FILE, args.run_file)


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Runs what a run file (TOML) describes: 'command' names the command; each option is a key named as its flag "
        "with underscores, in the section of its kind: [data], [model], [server], [methods] (names, k) with a "
        "method's settings under [methods.NAME] by their own names, [online], [output], [compute], [ray], and a "
        "section named after the command for its own options. Flags after FILE win over the file. Every output "
        "and report carries the run file that reproduces it (OUT.run.toml, REPORT/run.toml); COMMAND "
        "--print-config prints one. See docs/cli.md."
    )
    parser.add_argument("file", metavar="FILE", help="the run file (TOML), e.g. the run.toml beside a report")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="flags of the file's command, which win over it")


def run_file_argv(argv: Sequence[str], build_parser: Callable[[list[str]], argparse.ArgumentParser]) -> list[str]:
    """``run FILE [flags]`` as the command line it stands for: the file's, then the flags; ``argv`` itself where it
    names no file (``run --help``), for the parser to answer."""
    rest = list(argv[argv.index("run") + 1 :])
    path = next((word for word in rest if not word.startswith("-")), None)
    if path is None:
        return list(argv)
    overrides = [word for i, word in enumerate(rest) if i != rest.index(path)]
    command, document = read_run_file(path)
    layout = RunFileLayout(command_parser(build_parser([command]), command), command)
    return [*layout.argv(document, path), *overrides]
