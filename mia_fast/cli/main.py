"""``mia-fast``: ``score``, ``rescore``, ``eval``, ``calibrate``, ``classify``, ``audit-unlearning``,
``dataset-inference``, ``demo``, ``freq``, ``probe`` and ``run`` (a run file).

Only the chosen command's module is imported, and each imports the heavy libraries (torch,
transformers, matplotlib) only when it runs, so ``mia-fast --help`` and ``mia-fast freq ...`` start
at once.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NoReturn

from mia_fast.cli.run import run_file_argv
from mia_fast.cli.runfile import RUN_COMMANDS, RunFileLayout, command_parser
from mia_fast.errors import MiaFastError, MiaFastWarning, readable
from mia_fast.served.url import environment_key, hide_key, mask_urls

# command: (help, module that adds its options and handler)
COMMANDS = {
    "score": ("score texts with every requested method", "mia_fast.cli.score"),
    "rescore": (
        "score again from a stats cache alone: other methods, k or cap without a model or a forward pass",
        "mia_fast.cli.rescore",
    ),
    "eval": ("score labelled texts and report AUROC / TPR@FPR per method", "mia_fast.cli.score"),
    "calibrate": ("pick a decision threshold for one method on a labelled validation set", "mia_fast.cli.audit"),
    "classify": ("flag texts with a calibrated threshold; contamination rate per document", "mia_fast.cli.audit"),
    "audit-unlearning": (
        "score texts under a model before and after unlearning; flag those that still look like members",
        "mia_fast.cli.unlearning",
    ),
    "demo": (
        "plant known members into a model by fine-tuning, then evaluate every method on them",
        "mia_fast.cli.demo",
    ),
    "freq": ("token-frequency tables of a reference corpus (for dcpdd)", "mia_fast.cli.freq"),
    "dataset-inference": (
        "is a set of texts in the training data? (Maini et al.: many features, a linear model, a t-test)",
        "mia_fast.cli.inference",
    ),
    "probe": ("train the white-box probe on a model's hidden states (for the probe method)", "mia_fast.cli.probe"),
    "run": ("run what a run file (TOML) describes; flags after it override it", "mia_fast.cli.run"),
}


class _VersionAction(argparse.Action):
    """--version, reading the installed package's metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from importlib.metadata import version  # noqa: PLC0415  (read only when --version is asked for)

        print(f"mia-fast {version('mia-fast')}")
        parser.exit()


class _BadOption(MiaFastError):
    """A bad option: one line on stderr, as every other error is (argparse's usage block would come first)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _BadOption(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the options of ``commands`` (all of them by default)."""
    wanted = set(COMMANDS if commands is None else commands)
    parser = _Parser(prog="mia-fast", description="Fast pretraining-data detection.")
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (help_text, module) in COMMANDS.items():
        command = subparsers.add_parser(name, help=help_text)
        if name in wanted:
            command_module = importlib.import_module(module)
            command.description = getattr(command_module, "DESCRIPTION", None)
            command_module.add_command(name, command)
            if name in RUN_COMMANDS:
                command.add_argument(
                    "--print-config",
                    action="store_true",
                    help="print this run as a run file (TOML, for 'mia-fast run') and stop",
                )
    return parser


def _quiet_transformers() -> None:
    """transformers' progress bars and warnings would drown the command's own output."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging  # noqa: PLC0415  (only once transformers is loaded)

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def _printer(argv: Sequence[str]) -> Callable[[str, object], None]:
    """Prints ``mia-fast: KIND: MESSAGE`` lines as every line is printed: one readable line, the user part and query
    values of any URL masked, and the key of --api-key-env hidden wherever it sits (a URL's path, a name)."""
    named = [word.partition("=")[2] for word in argv if word.startswith("--api-key-env=")]
    named += [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--api-key-env"]
    keys = [key for name in named if (key := environment_key(name))]

    def show(kind: str, message: object) -> None:
        line = mask_urls(str(message))
        for key in keys:
            line = hide_key(line, key)
        print(f"mia-fast: {kind}: {readable(line)}", file=sys.stderr)

    return show


def _warnings_shown_by(show: Callable[[str, object], None]) -> Callable[..., None]:
    """``warnings.showwarning`` with the package's own warnings as one line each (Python's format adds the source
    line)."""

    def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, MiaFastWarning):
            show("warning", message)
        else:
            _python_show_warning(message, category, filename, lineno, file, line)

    return show_warning


_python_show_warning = warnings.showwarning


def os_error_line(exc: OSError) -> str:
    """An OSError a user can cause (disk full, permission, a path that is a directory) as one line."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so that it unwinds as Ctrl-C does."""


def _raise_terminated(signum, frame) -> None:
    # A second SIGTERM must not cut short the unwinding of the first (locks released, staged blocks kept).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """For the run, SIGTERM (kill, a scheduler stopping a job) ends it as Ctrl-C does: the output's lock is
    released and finished blocks are kept. Only the main thread may install a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        # None: a handler installed outside Python, which cannot be put back; the default is the nearest.
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    show = _printer(argv)
    run_from = None
    try:
        if chosen == "run":
            argv, run_from = run_file_argv(argv, build_parser)
            chosen, show = argv[0], _printer(argv)
        parser = build_parser([chosen] if chosen in COMMANDS else [])
        args = parser.parse_args(argv)
        args.run_from = run_from
        if chosen in RUN_COMMANDS:
            layout = RunFileLayout(command_parser(parser, chosen), chosen)
            with warnings.catch_warnings():
                warnings.showwarning = _warnings_shown_by(show)
                args.run_file = layout.write(args)
    except SystemExit as exc:  # --help or --version
        return int(exc.code or 0)
    except MiaFastError as exc:
        show("error", exc)
        return 2
    if chosen in RUN_COMMANDS and args.print_config:
        print(args.run_file, end="")
        return 0
    started = time.perf_counter()
    try:
        _quiet_transformers()
        with warnings.catch_warnings(), _sigterm_as_interrupt():
            warnings.showwarning = _warnings_shown_by(show)
            args.handler(args)
    except MiaFastError as exc:
        show("error", exc)
        return 2
    except OSError as exc:
        show("error", f"{os_error_line(exc)}; nothing already written was lost")
        return 2
    except KeyboardInterrupt as exc:
        how, code = ("terminated (SIGTERM)", 143) if isinstance(exc, _Terminated) else ("interrupted", 130)
        print(f"mia-fast: {how}; finished work is kept (scores: continue with --resume)", file=sys.stderr)
        return code
    print(f"done in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
