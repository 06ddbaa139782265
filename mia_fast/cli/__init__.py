"""The ``mia-fast`` command line: argument parsing only; every command calls the library.

- ``main.py``: the entry point; the parser of the chosen command alone, one-line errors, SIGTERM as Ctrl-C.
- ``options.py``: declaring options: the groups the commands share and the argparse types that check each value
  as it is parsed; reading the input they name (``load_input``).
- ``run_options.py``: parsed options turned into what the library takes: the typed ``RunConfig``, method settings, a
  threshold checked against the run.
- ``paths.py``: the output gate fed from the options: every path a command reads is an input no output may destroy.
- ``runfile.py``: a command's run-file layout (which TOML key holds which option) and writing a run file.
- ``runfile_reader.py``: reading a run file back into its command line, every key and value checked.
- One module per command: ``score.py`` (score, eval), ``rescore.py``, ``audit.py`` (calibrate, classify),
  ``unlearning.py`` (audit-unlearning), ``inference.py`` (dataset-inference), ``demo.py``, ``freq.py``,
  ``probe.py`` (probe train), ``run.py`` (run FILE).
"""

from mia_fast.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
