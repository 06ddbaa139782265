"""One name, one source: every settings class a registered method reads is exported by the package and by its API
module, and the CLI offers every registered suite, output format, backend, forward and precision, and says the
batch budgets the engine defaults to, all read from the tables that decide them. Each check is shown to catch an
entry registered after the exports or the parser were made (as a list typed by hand would miss it)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

import mia_fast
from mia_fast import api
from mia_fast.cli import build_parser
from mia_fast.data import formats, suites
from mia_fast.methods import REGISTRY
from mia_fast.methods.settings import CheckedSettings, setting
from mia_fast.ops import backend
from mia_fast.pipeline import choices
from mia_fast.scoring import engines


def registered_settings() -> dict[str, type]:
    return {cls.__name__: cls for method in REGISTRY.values() for cls in method.settings}


def missing_exports() -> list[str]:
    """Each registered settings class that ``mia_fast`` or ``mia_fast.api`` does not export as itself, and each
    registry the package exports that is not the live one."""
    problems = []
    for name, cls in registered_settings().items():
        for module in (mia_fast, api):
            if name not in module.__all__ or getattr(module, name, None) is not cls:
                problems.append(f"{module.__name__} lacks {name}")
    live = {"ENGINES": engines.ENGINES, "OUTPUT_FORMATS": formats.OUTPUT_FORMATS, "SUITES": suites.SUITES}
    problems += [
        f"mia_fast.{name} is not the registry" for name, table in live.items() if getattr(mia_fast, name) is not table
    ]
    return problems


def actions(parser: argparse.ArgumentParser, flag: str, command: str = "score") -> list[argparse.Action]:
    """``flag``'s action in ``command`` (``score`` takes every shared option group)."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return [a for a in commands[command]._actions if flag in a.option_strings]


def missing_from_cli(parser: argparse.ArgumentParser) -> list[str]:
    """Each registered suite, output format, backend, forward or precision ``mia-fast score`` does not offer, and
    each per-device batch budget the engine defaults to that its help does not say."""
    offered = {
        "--suite": suites.SUITES,
        "--backend": backend.BACKENDS,
        "--forward": choices.FORWARDS,
        "--dtype": choices.DTYPE_NAMES,
    }
    device = {"cpu": "CPU", "cuda": "GPU"}
    said = {
        "--out": formats.OUTPUT_FORMATS,
        "--batch-tokens": [f"{budget} on {device[kind]}" for kind, budget in choices.DEFAULT_BATCH_TOKENS.items()],
    }
    problems = []
    for flag, names in offered.items():
        (action,) = actions(parser, flag)
        problems += [f"{flag} lacks {name}" for name in names if name not in action.choices]
    for flag, names in said.items():
        (action,) = actions(parser, flag)
        problems += [f"{flag}'s help lacks {name}" for name in names if name not in action.help]
    return problems


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser(["score"])


def test_every_registered_settings_class_is_exported():
    assert missing_exports() == []


def test_the_cli_offers_every_registered_choice(parser):
    assert missing_from_cli(parser) == []


class ThrowawaySettings(CheckedSettings):
    knob: int = setting(1, "a throwaway setting")


@pytest.fixture
def throwaway_method(monkeypatch):
    """A method registered after the exports were made, reading a settings class of its own."""
    method = dataclasses.replace(REGISTRY["loss"], name="throwaway", settings=(ThrowawaySettings,))
    monkeypatch.setitem(REGISTRY, "throwaway", method)


def test_the_export_check_catches_a_settings_class_exported_by_no_one(throwaway_method):
    missing = missing_exports()
    assert "mia_fast lacks ThrowawaySettings" in missing and "mia_fast.api lacks ThrowawaySettings" in missing


def test_the_package_exports_read_the_registry_when_first_asked(throwaway_method, monkeypatch):
    monkeypatch.delitem(mia_fast.__dict__, "__all__", raising=False)
    monkeypatch.delitem(mia_fast.__dict__, "ThrowawaySettings", raising=False)
    assert "ThrowawaySettings" in mia_fast.__all__ and mia_fast.ThrowawaySettings is ThrowawaySettings
    monkeypatch.delitem(mia_fast.__dict__, "ThrowawaySettings")


def test_the_cli_check_catches_a_suite_or_format_registered_after_the_parser(parser, monkeypatch):
    monkeypatch.setitem(suites.SUITES, "throwaway", suites.SUITES[next(iter(suites.SUITES))])
    monkeypatch.setitem(formats.OUTPUT_FORMATS, ".throwaway", formats.JSONL)
    monkeypatch.setattr(backend, "BACKENDS", (*backend.BACKENDS, "throwaway"))
    monkeypatch.setitem(choices.DEFAULT_BATCH_TOKENS, "cpu", 7)
    missing = missing_from_cli(parser)
    assert "--suite lacks throwaway" in missing and "--out's help lacks .throwaway" in missing
    assert "--backend lacks throwaway" in missing and "--batch-tokens's help lacks 7 on CPU" in missing


def test_a_parser_built_after_a_registration_offers_it(monkeypatch):
    monkeypatch.setitem(suites.SUITES, "throwaway", suites.SUITES[next(iter(suites.SUITES))])
    monkeypatch.setitem(formats.OUTPUT_FORMATS, ".throwaway", formats.JSONL)
    monkeypatch.setitem(choices.DEFAULT_BATCH_TOKENS, "cpu", 7)
    assert missing_from_cli(build_parser(["score"])) == []
