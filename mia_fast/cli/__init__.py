"""The ``mia-fast`` command line: argument parsing only; every command calls the library."""

from mia_fast.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
