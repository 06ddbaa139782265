"""The output gate (``mia_fast.data.gate``) fed from a command's parsed options: every option that names a path the
command reads is an input no output may destroy."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

from mia_fast.data.gate import Output, check_outputs
from mia_fast.methods.setting_options import setting_options

# The options (argparse dests) of every command that name a file or folder it reads; method settings that name
# one (``Flag.reads_path``) are added from the registry.
INPUT_OPTIONS = (
    "data",
    "threshold",
    "stats",
    "stats_cache",
    "sources",
    "tables",
    "table",
    "files",
    "train",
    "dev",
    "suspect",
    "validation",
    "corpus",
    "model",
    "gguf",
    "ref_model",
    "before",
    "after",
    "tokenizer",
    "run_from",  # the run file of `mia-fast run FILE`
)


def command_inputs(args: argparse.Namespace) -> list[str]:
    """Every path among the command's options that it reads."""
    dests = [*INPUT_OPTIONS, *(option.key for option in setting_options() if option.flag.reads_path)]
    found: list[str] = []
    for dest in dests:
        value = getattr(args, dest, None)
        found.extend(value if isinstance(value, list) else [value])
    return [value for value in found if isinstance(value, str) and value]


def check_command_outputs(args: argparse.Namespace, *outputs: Output, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Passes the command's ``outputs`` through the gate before any work, with its inputs (and ``inputs``, e.g.
    the files a glob of sources expands to)."""
    check_outputs(
        outputs,
        [*command_inputs(args), *inputs],
        overwrite=getattr(args, "overwrite", False),
        resume=getattr(args, "resume", False),
    )
