"""Run files: a whole run described by one TOML file, ``mia-fast run FILE``. This module holds a command's run-file
layout (which key holds which option) and writes the run file of a command line; ``runfile_reader.py`` reads one back
into a command line, and ``run.py`` is the ``run`` command.

A run file is a command line written out: ``command`` names the command, and every option is a key, named as its
flag with underscores, in the section of its kind: ``[data]`` (the texts, a suite, the input fields), ``[model]``
(the model, GGUF file, reference model, device or device map, dtype, start token, window), ``[server]`` (a served
model; its key's environment variable, never the key), ``[methods]`` (``names`` and ``k``) with each method's
settings under ``[methods.NAME]`` by the settings' own field names, ``[output]``, ``[compute]``, ``[online]``,
``[ray]``, and a section named after the command for its own options (``[eval]``: the report; ``[demo]``: the
experiment).

``mia-fast run FILE`` turns the file back into that command line, flags given after FILE appended (so they win),
and runs it: the values meet the same parsers, checks and typed configuration (``RunConfig``) as flags do. Every
scoring output and report gets the run file that reproduces it (``OUT.run.toml``, ``REPORT/run.toml``), and
``--print-config`` prints it without running. Paths are as given, relative to the directory a run starts in.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.artefacts import write_atomic
from mia_fast.data.side_files import RUN_FILE_HEADER
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.served.url import environment_key, hide_key, mask_urls

# The commands a run file can describe: every one whose options are plain values and switches (not freq's and
# probe's, which have commands of their own).
RUN_COMMANDS = ("score", "rescore", "eval", "calibrate", "classify", "audit-unlearning", "dataset-inference", "demo")
REPORT_RUN_FILE = "run.toml"
# What says how to treat an output that is there, how the run looks, or makes it no run: never in a run file, and
# refused in one with the reason (the others are no option of a run).
COMMAND_LINE_ONLY = {
    "resume": "it says what to do with an output that is there",
    "overwrite": "it says what to do with an output that is there",
    "quiet": "it changes how a run looks, not what it does",
    "verbose": "it changes how a run looks, not what it does",
    "print_config": "it makes no run",
    "compare": "it compares two reports instead of running",
}
_NOT_RECORDED = {"help", "handler", *COMMAND_LINE_ONLY}
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


class _OptionsSeen(argparse.HelpFormatter):
    """A help formatter that writes nothing and keeps what a parser hands it as it formats its help: its actions
    (``actions``), and each group's title with the group's actions (``groups``). argparse keeps these lists private;
    formatting the help is its public walk over them."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        super().__init__(prog, **kwargs)
        self.actions: list[argparse.Action] = []
        self.groups: list[tuple[str | None, list[argparse.Action]]] = []

    def add_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None = None) -> None:
        self.actions = list(actions)

    def start_section(self, heading: str | None) -> None:
        self.groups.append((heading, []))

    def end_section(self) -> None:
        pass

    def add_arguments(self, actions: Any) -> None:
        self.groups[-1][1].extend(actions)

    def format_help(self) -> str:
        return ""


def _options_seen(parser: argparse.ArgumentParser) -> _OptionsSeen:
    """The actions and groups of ``parser``, seen by formatting its help (on a copy: the parser is left as it is)."""
    seen = _OptionsSeen(parser.prog)
    walked = copy.copy(parser)
    walked.formatter_class = lambda prog, **kwargs: seen
    walked.format_help()
    return seen


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser of ``command`` in the top parser of ``mia-fast``."""
    return next(
        a.choices[command]
        for a in _options_seen(parser).actions
        if isinstance(a.choices, dict) and isinstance(a.choices.get(command), argparse.ArgumentParser)
    )


def _group_section(title: str, command: str) -> str:
    return next((s for prefix, s in _GROUP_SECTIONS.items() if title.startswith(prefix)), command)


def _recorded_actions(parser: argparse.ArgumentParser, command: str) -> Iterator[tuple[argparse.Action, str]]:
    """Every option a run file records, with the section of its group (METHOD_SETTINGS for a method's)."""
    for title, actions in _options_seen(parser).groups:
        for action in actions:
            if action.dest in _NOT_RECORDED or action.dest == argparse.SUPPRESS:
                continue
            section = METHOD_SETTINGS if title == METHOD_SETTINGS else _group_section(title, command)
            yield action, _OPTION_SECTIONS.get(action.dest, section)


def _setting_places(dests: set[str]) -> dict[str, list[_Key]]:
    """For each method setting's option among ``dests``, its places: ``methods.NAME`` and the field's own name, for
    every method that reads it."""
    from mia_fast.methods.registry import REGISTRY  # noqa: PLC0415 (0.2 s: mia-fast --help loads no method)
    from mia_fast.methods.settings import setting_fields  # noqa: PLC0415 (0.2 s: mia-fast --help loads no method)

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
        self.options = {f"{key.section}.{key.key}": dest for dest, keys in self.keys.items() for key in keys}

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
            if chosen is not None and self.read_by_none(dest, chosen):
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

    def read_by_none(self, dest: str, chosen: set[str]) -> bool:
        """Whether the option ``dest`` is a method setting that none of the ``chosen`` methods reads."""
        keys = self.keys[dest]
        methods = [key.section.removeprefix("methods.") for key in keys if key.section.startswith("methods.")]
        return len(methods) == len(keys) and not chosen.intersection(methods)

    @property
    def sections(self) -> list[str]:
        return sorted({key.section for keys in self.keys.values() for key in keys}, key=_section_order)


def _section_order(section: str) -> tuple[int, str]:
    order = ["data", "model", "server", "methods", "online", "output", "compute", "ray"]
    base = section.split(".")[0]
    return (order.index(base) if base in order else len(order), section)


def requested_methods(args: argparse.Namespace) -> set[str] | None:
    """The methods a command line runs (``--methods``, ``--method``, and ``--online-method`` with ``--online``);
    None where the command reads its method from elsewhere (``classify`` from its threshold file)."""
    from mia_fast.methods.registry import column_method  # noqa: PLC0415 (0.2 s: mia-fast --help loads no method)

    lists = [getattr(args, "methods", None), getattr(args, "method", None)]
    if getattr(args, "online", None):
        lists.append(getattr(args, "online_method", None))
    names = [name.strip() for given in lists if given for name in str(given).split(",")]
    if not names:
        return None
    return {method.name for name in names if (method := column_method(name)) is not None}


def _file_value(dest: str, value: Any) -> Any:
    """An option's parsed value as a run file holds it: comma-separated names as a list, numbers as numbers."""
    if dest == "methods" and isinstance(value, str):
        return [name for name in value.split(",") if name]
    if isinstance(value, tuple):
        return list(value)
    return value


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


def write_report_run_file(report: str | os.PathLike, args: argparse.Namespace) -> Path:
    """The run file of ``args`` in the report directory ``report`` (``run.toml``), whole or not at all."""
    return write_atomic(Path(report) / REPORT_RUN_FILE, args.run_file)
