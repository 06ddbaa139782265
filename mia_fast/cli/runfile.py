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
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.outputs import RUN_FILE_HEADER
from mia_fast.errors import MiaFastError, MiaFastWarning, shown
from mia_fast.pipeline.server_url import environment_key, hide_key, mask_urls

# The commands a run file can describe: every one whose options are plain values and switches (not freq's and
# probe's, which have commands of their own).
RUN_COMMANDS = ("score", "rescore", "eval", "calibrate", "classify", "audit-unlearning", "dataset-inference", "demo")
REPORT_RUN_FILE = "run.toml"
# What says how to treat an output that is there, how the run looks, or makes it no run: never in a run file, and
# refused in one with the reason (the others are no option of a run).
_COMMAND_LINE_ONLY = {
    "resume": "it says what to do with an output that is there",
    "overwrite": "it says what to do with an output that is there",
    "quiet": "it changes how a run looks, not what it does",
    "verbose": "it changes how a run looks, not what it does",
    "print_config": "it makes no run",
    "compare": "it compares two reports instead of running",
}
_NOT_RECORDED = {"help", "handler", *_COMMAND_LINE_ONLY}
# A run file is a command line written out: a few hundred bytes, its values strings, numbers and lists of them.
RUN_FILE_BYTES = 1 << 20
RUN_FILE_NESTING = 16
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
    "# A secret (the server's API key, or a URL's user part or query value) was in a value below and is written as "
    "***: put it back there to run this file (a key belongs in the environment variable of api_key_env)."
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
        """The run file of ``args``: every recorded option that has a value, but a setting that no requested method
        reads (warned about); the user part and query values of a URL and the served model's key masked."""
        sections: dict[str, dict[str, Any]] = {}
        chosen = requested_methods(args)
        key = environment_key(getattr(args, "api_key_env", None))
        hidden = False
        for dest, keys in self.keys.items():
            value = getattr(args, dest, None)
            anchor = _ANCHORS.get(keys[0].section)
            if value is None or (anchor is not None and getattr(args, anchor, None) is None):
                continue
            if isinstance(value, str):
                masked = hide_key(mask_urls(value), key)
                value, hidden = masked, hidden or masked != value
            if chosen is not None and _read_by_none(keys, chosen):
                readers = ", ".join(k.section.removeprefix("methods.") for k in keys)
                warnings.warn(
                    MiaFastWarning(
                        f"{self.actions[dest].option_strings[0]} is a setting of {readers}, not among the methods "
                        f"({', '.join(sorted(chosen))}): it changes nothing, and is not written in the run file"
                    ),
                    stacklevel=2,
                )
                continue
            place = next((k for k in keys if chosen and k.section.removeprefix("methods.") in chosen), keys[0])
            sections.setdefault(place.section, {})[place.key] = _file_value(dest, value)
        lines = [RUN_FILE_HEADER, *([_KEY_HIDDEN] if hidden else []), f"command = {_toml(self.command)}"]
        for section in sorted(sections, key=_section_order):
            lines += ["", f"[{section}]", *(f"{key} = {_toml(v)}" for key, v in sections[section].items())]
        return "\n".join(lines) + "\n"

    # ---- reading ----

    def argv(self, document: Mapping[str, Any], source: str) -> list[str]:
        """The command line of a run file's ``document`` (its ``command`` key already read)."""
        values: dict[str, tuple[str, Any]] = {}
        for dotted, value in self._leaves(document, source):
            dest = self.options.get(dotted)
            if dest is None:
                raise MiaFastError(f"{source}: {self._unknown_key(dotted)}")
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

    def refuse_settings_not_run(self, document: Mapping[str, Any], args: argparse.Namespace, source: str) -> None:
        """One line for a run file's ``[methods.NAME]`` setting that no method of the run (``args``) reads: it
        would change nothing, and a file saying otherwise misleads whoever reads it."""
        chosen = requested_methods(args)
        tables = document.get("methods", {})
        if chosen is None:
            return
        for name, table in tables.items():
            if not isinstance(table, dict):
                continue
            for key in table:
                dotted = f"methods.{name}.{key}"
                if _read_by_none(self.keys[self.options[dotted]], chosen):
                    raise MiaFastError(
                        f"{source}: {dotted}: {name} is not among the methods of this run "
                        f"({', '.join(sorted(chosen))}); a setting of a method that does not run changes nothing: "
                        f"drop it, or request {name}"
                    )

    @property
    def sections(self) -> list[str]:
        return sorted({key.section for keys in self.keys.values() for key in keys}, key=_section_order)

    def _leaves(self, document: Mapping[str, Any], source: str) -> Iterator[tuple[str, Any]]:
        """(dotted key, value) of every value of a run file but its ``command``, each in a section of this
        command; a method's settings are one level deeper, under ``methods.NAME``."""
        for name, value in document.items():
            if name == "command":
                continue
            if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
                raise MiaFastError(f"{source}: [[{shown(name, quote=False)}]] is an array of tables; {self._has()}")
            if not isinstance(value, dict):
                raise MiaFastError(f"{source}: {self._outside(name)}")
            yield from self._section_leaves(name, value, source)

    def _section_leaves(self, section: str, table: Mapping[str, Any], source: str) -> Iterator[tuple[str, Any]]:
        self._check_section(section, source)
        for key, value in table.items():
            dotted = f"{section}.{key}"
            if not isinstance(value, dict):
                yield dotted, value
            elif section == "methods":
                yield from self._section_leaves(dotted, value, source)
            elif dotted in self.options:
                raise MiaFastError(f"{source}: {dotted} is a table where a value belongs")
            else:
                self._check_section(dotted, source)

    def _check_section(self, section: str, source: str) -> None:
        """One line for a section no key of this command is in: the nearest of its own sections, or the command
        whose section it is."""
        if section in self.sections or section == "methods":
            return
        unknown = f"{source}: unknown section [{shown(section, quote=False)}] for {self.command}"
        base, _, method = section.partition(".")
        if base in RUN_COMMANDS and base != self.command:
            raise MiaFastError(f"{unknown}: [{base}] holds the options of `mia-fast {base}` (command = {base!r})")
        if base == "methods":
            with_settings = [s.removeprefix("methods.") for s in self.sections if s.startswith("methods.")]
            nearest = difflib.get_close_matches(method, with_settings, n=1, cutoff=0.6)
            hint = f"did you mean [methods.{nearest[0]}]?" if nearest else "methods with settings: "
            hint += "" if nearest else ", ".join(with_settings)
            raise MiaFastError(f"{unknown}: no method of that name has settings; {hint}")
        nearest = difflib.get_close_matches(section, self.sections, n=1, cutoff=0.6)
        raise MiaFastError(f"{unknown}; " + (f"did you mean [{nearest[0]}]?" if nearest else self._has()))

    def _has(self) -> str:
        bases = dict.fromkeys(section.split(".")[0] for section in self.sections)
        return f"a {self.command} run file has the sections {', '.join(f'[{b}]' for b in bases)}"

    def _outside(self, key: str) -> str:
        homes = [dotted.rsplit(".", 1)[0] for dotted in self.options if dotted.rsplit(".", 1)[-1] == key]
        home = f"put it under [{homes[0]}]" if homes else f"and no key of {self.command}; {self._has()}"
        return f"{shown(key, quote=False)} is a value outside any section: {home}"

    def _unknown_key(self, dotted: str) -> str:
        """The line for a key this command has no option for: the reason where the option may not be written in a
        file, else the nearest key of the same section, else the same key in another section."""
        section, _, key = dotted.rpartition(".")
        if key in _COMMAND_LINE_ONLY:
            flag = "--" + key.replace("_", "-")
            return (
                f"{dotted}: {flag} is not written in a run file ({_COMMAND_LINE_ONLY[key]}); give it after the "
                f"file: mia-fast run FILE {flag}"
            )
        unknown = f"unknown key {shown(dotted)} for {self.command}"
        in_section = [k.rpartition(".")[2] for k in self.options if k.rpartition(".")[0] == section]
        nearest = [f"{section}.{k}" for k in difflib.get_close_matches(key, in_section, n=1, cutoff=0.6)]
        nearest = nearest or [k for k in self.options if k.rpartition(".")[2] == key][:1]
        if nearest:
            return f"{unknown}; did you mean {nearest[0]!r}?"
        if not in_section:
            return f"{unknown}; see `mia-fast {self.command} --print-config`"
        return f"{unknown}; [{section}] holds {', '.join(in_section)}"


def _section_order(section: str) -> tuple[int, str]:
    order = ["data", "model", "server", "methods", "online", "output", "compute", "ray"]
    base = section.split(".")[0]
    return (order.index(base) if base in order else len(order), section)


def requested_methods(args: argparse.Namespace) -> set[str] | None:
    """The methods a command line runs (``--methods``, ``--method``, and ``--online-method`` with ``--online``);
    None where the command reads its method from elsewhere (``classify`` from its threshold file)."""
    from mia_fast.methods.registry import column_method

    lists = [getattr(args, "methods", None), getattr(args, "method", None)]
    if getattr(args, "online", None):
        lists.append(getattr(args, "online_method", None))
    names = [name.strip() for given in lists if given for name in str(given).split(",")]
    if not names:
        return None
    return {method.name for name in names if (method := column_method(name)) is not None}


def _read_by_none(keys: Sequence[_Key], chosen: set[str]) -> bool:
    """Whether an option placed at ``keys`` is a method setting that none of the ``chosen`` methods reads."""
    methods = [key.section.removeprefix("methods.") for key in keys if key.section.startswith("methods.")]
    return len(methods) == len(keys) and not chosen.intersection(methods)


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
        choices = ", ".join(map(str, action.choices))
        raise MiaFastError(f"{source}: {dotted}: {shown(text)} is not one of {choices}")
    if flag is None:
        return [text]
    if action.nargs == "?" and text == action.const:
        return [flag]
    return [f"{flag}={text}"]


def _expect_bool(value: Any, source: str, dotted: str) -> None:
    if not isinstance(value, bool):
        raise MiaFastError(f"{source}: {dotted} is a switch: true or false, not {shown(value)}")


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
    """A run file's command and its document (``-``: standard input); one line for a path that is no readable file,
    a file too large or nested too deep to be a run file, and one that is no TOML of a known command."""
    import tomllib

    from mia_fast.data.readers import read_small_file

    source = "standard input" if path == "-" else shown(path, quote=False)
    try:
        text = read_small_file(path, RUN_FILE_BYTES, "a run file").decode("utf-8")
    except UnicodeDecodeError:
        raise MiaFastError(f"{source}: not a TOML run file (not UTF-8 text)") from None
    depth = nesting_depth(text)
    if depth > RUN_FILE_NESTING:
        raise MiaFastError(
            f"{source}: not a run file: its arrays or inline tables nest {depth} deep (a run file's values are "
            f"strings, numbers and lists of them; at most {RUN_FILE_NESTING} deep is read)"
        )
    try:
        document = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more digits than Python converts
        raise MiaFastError(f"{source}: not a TOML run file: {exc}") from None
    command = document.get("command")
    if not isinstance(command, str) or command not in RUN_COMMANDS:
        given = "no command" if command is None else f"command {shown(command)}"
        raise MiaFastError(f"{source}: {given}; a run file's command is one of {', '.join(RUN_COMMANDS)}")
    return command, document


def nesting_depth(text: str) -> int:
    """How deep the brackets and braces of a TOML text nest outside its strings and comments: read before parsing,
    as the parser recurses once per level."""
    depth = deepest = 0
    at, end = 0, len(text)
    while at < end:
        char = text[at]
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "#":
            at = _after(text, "\n", at)
            continue
        elif char in "\"'":
            at = _string_end(text, at)
            continue
        at += 1
    return deepest


def _after(text: str, mark: str, start: int) -> int:
    found = text.find(mark, start)
    return len(text) if found < 0 else found + len(mark)


def _string_end(text: str, start: int) -> int:
    """Where the TOML string that opens at ``start`` ends: basic strings take escapes, literal ones do not, and a
    tripled quote opens a multi-line string (closed by three quotes, and up to two more that belong to it)."""
    quote = text[start]
    closing = quote * 3 if text.startswith(quote * 3, start) else quote
    at = start + len(closing)
    while at < len(text):
        if quote == '"' and text[at] == "\\":
            at += 2
        elif text.startswith(closing, at):
            at += len(closing)
            extra = 0
            while len(closing) == 3 and extra < 2 and text.startswith(quote, at):
                at, extra = at + 1, extra + 1
            return at
        elif len(closing) == 1 and text[at] == "\n":
            return at  # an unclosed string: the parser names it
        else:
            at += 1
    return at


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
    names no file (``run --help``), for the parser to answer. FILE ``-`` is standard input."""
    rest = list(argv[argv.index("run") + 1 :])
    at = next((i for i, word in enumerate(rest) if word == "-" or not word.startswith("-")), None)
    if at is None:
        return list(argv)
    path, overrides = rest[at], rest[:at] + rest[at + 1 :]
    command, document = read_run_file(path)
    parser = command_parser(build_parser([command]), command)
    layout = RunFileLayout(parser, command)
    source = "standard input" if path == "-" else shown(path, quote=False)
    command_line = [*layout.argv(document, source), *overrides]
    layout.refuse_settings_not_run(document, parser.parse_args(command_line[1:]), source)
    return command_line
