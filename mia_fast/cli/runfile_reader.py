"""Reading a run file: the file itself (standard input as ``-``; its size and nesting checked before the TOML
parser sees it, its ``command`` one of the run commands), then its document turned back into the command line it
stands for, each key checked against the command's layout and each value as its option's parser checks it: one line
for an unknown key or section (with the nearest), a table or switch where a value belongs, a setting given twice, or a
method's setting that no method of the run reads."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from mia_fast.cli.runfile import COMMAND_LINE_ONLY, RUN_COMMANDS, RunFileLayout, requested_methods
from mia_fast.data.readers import read_small_file
from mia_fast.errors import MiaFastError, shown

# A run file is a command line written out: a few hundred bytes, its values strings, numbers and lists of them.
RUN_FILE_BYTES = 1 << 20
RUN_FILE_NESTING = 16


def source_name(path: str) -> str:
    """A run file as its lines name it: its path, or standard input for ``-``."""
    return "standard input" if path == "-" else shown(path, quote=False)


def read_run_file(path: str) -> tuple[str, dict[str, Any]]:
    """A run file's command and its document (``-``: standard input); one line for a path that is no readable file,
    a file too large or nested too deep to be a run file, and one that is no TOML of a known command."""
    import tomllib  # noqa: PLC0415 (Python 3.11+: on 3.10 only a run file fails, not every command)

    source = source_name(path)
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


def command_line(layout: RunFileLayout, document: Mapping[str, Any], source: str) -> list[str]:
    """The command line of a run file's ``document`` (its ``command`` key already read)."""
    values: dict[str, tuple[str, Any]] = {}
    for dotted, value in _leaves(layout, document, source):
        dest = layout.options.get(dotted)
        if dest is None:
            raise MiaFastError(f"{source}: {_unknown_key(layout, dotted)}")
        if dest in values and values[dest][1] != value:
            raise MiaFastError(
                f"{source}: {values[dest][0]} and {dotted} are one setting "
                f"({layout.actions[dest].option_strings[0]}) given two values; give it once"
            )
        values[dest] = (dotted, value)
    positional, flags = [], []
    # Positionals in the parser's order, whatever the file's.
    for dest in sorted(values, key=list(layout.actions).index):
        action, (dotted, value) = layout.actions[dest], values[dest]
        words = _option_words(action, value, source, dotted)
        (flags if action.option_strings else positional).extend(words)
    return [layout.command, *positional, *flags]


def refuse_settings_not_run(
    layout: RunFileLayout, document: Mapping[str, Any], args: argparse.Namespace, source: str
) -> None:
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
            if layout.read_by_none(layout.options[dotted], chosen):
                raise MiaFastError(
                    f"{source}: {dotted}: {name} is not among the methods of this run "
                    f"({', '.join(sorted(chosen))}); a setting of a method that does not run changes nothing: "
                    f"drop it, or request {name}"
                )


def _leaves(layout: RunFileLayout, document: Mapping[str, Any], source: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every value of a run file but its ``command``, each in a section of this
    command; a method's settings are one level deeper, under ``methods.NAME``."""
    for name, value in document.items():
        if name == "command":
            continue
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            raise MiaFastError(f"{source}: [[{shown(name, quote=False)}]] is an array of tables; {_has(layout)}")
        if not isinstance(value, dict):
            raise MiaFastError(f"{source}: {_outside(layout, name)}")
        yield from _section_leaves(layout, name, value, source)


def _section_leaves(
    layout: RunFileLayout, section: str, table: Mapping[str, Any], source: str
) -> Iterator[tuple[str, Any]]:
    _check_section(layout, section, source)
    for key, value in table.items():
        dotted = f"{section}.{key}"
        if not isinstance(value, dict):
            yield dotted, value
        elif section == "methods":
            yield from _section_leaves(layout, dotted, value, source)
        elif dotted in layout.options:
            raise MiaFastError(f"{source}: {dotted} is a table where a value belongs")
        else:
            _check_section(layout, dotted, source)


def _check_section(layout: RunFileLayout, section: str, source: str) -> None:
    """One line for a section no key of this command is in: the nearest of its own sections, or the command
    whose section it is."""
    if section in layout.sections or section == "methods":
        return
    unknown = f"{source}: unknown section [{shown(section, quote=False)}] for {layout.command}"
    base, _, method = section.partition(".")
    if base in RUN_COMMANDS and base != layout.command:
        raise MiaFastError(f"{unknown}: [{base}] holds the options of `mia-fast {base}` (command = {base!r})")
    if base == "methods":
        with_settings = [s.removeprefix("methods.") for s in layout.sections if s.startswith("methods.")]
        nearest = difflib.get_close_matches(method, with_settings, n=1, cutoff=0.6)
        hint = f"did you mean [methods.{nearest[0]}]?" if nearest else "methods with settings: "
        hint += "" if nearest else ", ".join(with_settings)
        raise MiaFastError(f"{unknown}: no method of that name has settings; {hint}")
    nearest = difflib.get_close_matches(section, layout.sections, n=1, cutoff=0.6)
    raise MiaFastError(f"{unknown}; " + (f"did you mean [{nearest[0]}]?" if nearest else _has(layout)))


def _has(layout: RunFileLayout) -> str:
    bases = dict.fromkeys(section.split(".")[0] for section in layout.sections)
    return f"a {layout.command} run file has the sections {', '.join(f'[{b}]' for b in bases)}"


def _outside(layout: RunFileLayout, key: str) -> str:
    homes = [dotted.rsplit(".", 1)[0] for dotted in layout.options if dotted.rsplit(".", 1)[-1] == key]
    home = f"put it under [{homes[0]}]" if homes else f"and no key of {layout.command}; {_has(layout)}"
    return f"{shown(key, quote=False)} is a value outside any section: {home}"


def _unknown_key(layout: RunFileLayout, dotted: str) -> str:
    """The line for a key this command has no option for: the reason where the option may not be written in a
    file, else the nearest key of the same section, else the same key in another section."""
    section, _, key = dotted.rpartition(".")
    if key in COMMAND_LINE_ONLY:
        flag = "--" + key.replace("_", "-")
        return (
            f"{dotted}: {flag} is not written in a run file ({COMMAND_LINE_ONLY[key]}); give it after the "
            f"file: mia-fast run FILE {flag}"
        )
    unknown = f"unknown key {shown(dotted)} for {layout.command}"
    in_section = [k.rpartition(".")[2] for k in layout.options if k.rpartition(".")[0] == section]
    nearest = [f"{section}.{k}" for k in difflib.get_close_matches(key, in_section, n=1, cutoff=0.6)]
    nearest = nearest or [k for k in layout.options if k.rpartition(".")[2] == key][:1]
    if nearest:
        return f"{unknown}; did you mean {nearest[0]!r}?"
    if not in_section:
        return f"{unknown}; see `mia-fast {layout.command} --print-config`"
    return f"{unknown}; [{section}] holds {', '.join(in_section)}"


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


def _is_switch(action: argparse.Action) -> bool:
    """A store_true or store_false option: no value, a boolean constant (argparse's classes for them are
    private)."""
    return action.nargs == 0 and isinstance(action.const, bool)


def _option_words(action: argparse.Action, value: Any, source: str, dotted: str) -> list[str]:
    """The command-line words that give ``action`` a run file's ``value``, checked as the option's parser checks
    it."""
    flag = action.option_strings[0] if action.option_strings else None
    if isinstance(action, argparse.BooleanOptionalAction):
        _expect_bool(value, source, dotted)
        return [flag if value else "--no-" + flag.removeprefix("--")]
    if _is_switch(action):
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
