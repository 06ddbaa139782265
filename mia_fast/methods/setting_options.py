"""The methods' settings as options: one per flag, over every settings field that shares it, with the methods that
read it and the help that names them. The command line adds them to its parsers; the docs' methods page lists them
(``mia_fast.methods.catalogue``), and an experiment leaves out those it supplies itself
(``mia_fast.evaluation.experiments``): not the CLI's alone, so they live beside the settings they are made of."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import REGISTRY, Method
from mia_fast.methods.settings import Flag, SettingField, SettingSpec, is_empty, setting_fields


@dataclass(frozen=True)
class SettingOption:
    """One CLI option for the settings fields that share its flag, and the methods that read them."""

    fields: tuple[SettingField, ...]
    methods: tuple[str, ...]

    @property
    def spec(self) -> SettingSpec:
        return self.fields[0].spec

    @property
    def flag(self) -> Flag:
        return self.fields[0].spec.flag

    @property
    def key(self) -> str:
        return self.fields[0].key

    @property
    def default(self) -> Any:
        return self.fields[0].default

    @property
    def help(self) -> str:
        default = self.default
        shown = "" if is_empty(default) or isinstance(default, bool) else f" (default {default})"
        return f"for {', '.join(self.methods)}: {self.spec.help}{shown}"


def setting_options(methods: Iterable[Method] | None = None) -> list[SettingOption]:
    """The CLI options of the settings of ``methods`` (default: every registered method), one per flag, in
    registration order; refuses two fields that share a flag but disagree."""
    methods = list(REGISTRY.values() if methods is None else methods)
    by_flag: dict[str, list[SettingField]] = {}
    readers: dict[str, list[str]] = {}
    for method in methods:
        for cls in method.settings:
            for f in setting_fields(cls):
                if f.spec.flag is None:
                    continue
                name = f.spec.flag.name
                same = by_flag.setdefault(name, [])
                if same and (same[0].spec != f.spec or same[0].default != f.default):
                    raise MiaFastError(
                        f"--{name} is declared differently by {same[0].owner.__name__}.{same[0].name} and "
                        f"{cls.__name__}.{f.name}; fields sharing a flag must agree"
                    )
                if f not in same:
                    same.append(f)
                readers.setdefault(name, [])
                if method.name not in readers[name]:
                    readers[name].append(method.name)
    return [SettingOption(tuple(by_flag[flag]), tuple(readers[flag])) for flag in by_flag]
