"""A command's parsed options turned into what the library takes: the typed run configuration (``RunConfig``: model,
scoring, output, compute), the methods' settings, the input's name, a threshold checked against the run, and
``score_into``, the one call of the scoring commands."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields, replace
from typing import Any

from mia_fast.cli.setting_flags import settings_from_values
from mia_fast.data import SUITES, read_texts
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.thresholds import Threshold
from mia_fast.generation.neighbors import Neighbors
from mia_fast.methods.neighbor import NeighborSettings
from mia_fast.methods.online import DEFAULT_ONLINE_METHOD, OnlineSetting
from mia_fast.methods.registry import DEFAULT_METHODS, resolve_methods
from mia_fast.methods.setting_options import setting_options
from mia_fast.pipeline.device_map import DeviceMap
from mia_fast.scoring.config import ComputeConfig, GgufFile, ModelConfig, OutputConfig, RunConfig, ScoringConfig
from mia_fast.scoring.engines import SERVED_SPREAD, engine_kind
from mia_fast.served.client import RequestSettings, ServerConfig


def stderr(message: str) -> None:
    print(message, file=sys.stderr)


def server_config(args: argparse.Namespace):
    """The ServerConfig of the served-model options, or None without --server."""
    if getattr(args, "server", None) is None:
        names = ("server_model", "api_key_env", "tokenizer")
        given = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name, None)]
        if given:
            raise MiaFastError(f"{', '.join(given)} need(s) --server URL")
        return None
    if not args.server_model:
        raise MiaFastError("--server needs --server-model NAME: the model name the server serves")
    if args.model or args.gguf:
        raise MiaFastError("give the target model once: --server (with --server-model) or --model/--gguf")
    requests = RequestSettings(args.in_flight, args.request_tokens, args.server_timeout, args.server_retry)
    return ServerConfig(args.server, args.server_model, args.api_key_env, args.tokenizer, args.insecure_http, requests)


def method_settings(args: argparse.Namespace, dataset=None):
    """The methods' settings from their flags (a file of texts read with --text-field), with the neighbours of
    --neighbor-field; a setting object's progress bar off with --quiet."""
    values = {}
    for option in setting_options():
        value = getattr(args, option.key, None)
        read = value is not None and option.flag.texts_file
        values[option.key] = read_texts(value, args.text_field) if read else value
    settings = settings_from_values(values).map(lambda value: _quiet(value, args))
    if getattr(args, "neighbor_field", None) and dataset is not None:
        given = Neighbors.of_texts(dataset.texts, dataset.neighbors)
        settings = settings.replace(replace(settings.of(NeighborSettings), neighbors=given))
    return settings


def _quiet(value: Any, args: argparse.Namespace) -> Any:
    """A settings object with its progress bar off under --quiet (one that has one)."""
    shows_progress = any(f.name == "progress" for f in fields(value))
    return replace(value, progress=False) if shows_progress and getattr(args, "quiet", False) else value


def online_setting(args: argparse.Namespace):
    """--online W with its --online-stride and --online-method as an OnlineSetting (checked here); None without
    --online."""
    if getattr(args, "online", None) is None:
        stray = [
            f"--online-{name}" for name in ("stride", "method") if getattr(args, f"online_{name}", None) is not None
        ]
        if stray:
            raise MiaFastError(f"{' and '.join(stray)} need --online W")
        return None
    return OnlineSetting(args.online, args.online_stride, args.online_method or DEFAULT_ONLINE_METHOD)


def model_config(args: argparse.Namespace, model: str | None = None):
    """The ModelConfig of the model options: the target of --server, --gguf (over --model, as ever) or --model;
    ``model`` in place of them where given; where it runs, --device or --device-map (refused together)."""
    if model is None:
        model = server_config(args) or (GgufFile(args.gguf) if args.gguf is not None else args.model)
    device_map = getattr(args, "device_map", None)
    if device_map is not None and args.device is not None:
        raise MiaFastError(
            "give --device (the whole model on one device) or --device-map (its layers spread over devices), not both"
        )
    if device_map is not None and isinstance(model, ServerConfig):
        raise MiaFastError(SERVED_SPREAD)  # here, before the served defaults are said
    return ModelConfig(
        model=model,
        ref_model=getattr(args, "ref_model", None),
        device=args.device if device_map is None else DeviceMap(device_map),
        dtype=args.dtype,
        prepend_start=getattr(args, "prepend_start", True),
        max_length=getattr(args, "max_length", None),
        backend=getattr(args, "backend", "auto"),
        forward=getattr(args, "forward", "auto"),
    )


def output_config(args: argparse.Namespace, out):
    """The OutputConfig of the output options, scoring into ``out``, with the input's id and label fields and the
    run file."""
    id_field, label_field = getattr(args, "id_field", "id"), getattr(args, "label_field", "label")
    run_file = getattr(args, "run_file", None)
    return OutputConfig(
        out,
        resume=args.resume,
        overwrite=args.overwrite,
        block_rows=args.block_rows,
        id_field=id_field,
        label_field=label_field,
        run_file=run_file,
    )


def run_config(args: argparse.Namespace, dataset, out, methods: str | None = None, model: str | None = None):
    """The RunConfig of the command's options, scoring into ``out``; ``methods`` (comma-separated, with no k
    list) in place of --methods and --k where given, ``model`` in place of --model."""
    model_settings = model_config(args, model)
    chosen = methods or args.methods
    defaults = engine_kind(model_settings.model).defaults
    if methods is None and chosen == ",".join(DEFAULT_METHODS) and defaults is not None:
        chosen = ",".join(defaults(model_settings, stderr))
    scoring = ScoringConfig(
        methods=tuple(chosen.split(",")),
        k=() if methods else tuple(args.k),
        settings=method_settings(args, dataset),
        online=online_setting(args),
    )
    compute = ComputeConfig(
        batch_tokens=getattr(args, "batch_tokens", None),
        stats_cache=getattr(args, "stats_cache", None),
        progress=not args.quiet,
        verbose=getattr(args, "verbose", False),
    )
    return RunConfig(output_config(args, out), model_settings, scoring, compute)


def score_settings(config, args: argparse.Namespace) -> dict:
    """What changes a score of ``config``'s run, as a threshold records it: the run's settings, the input's
    word cut and neighbour field."""
    return {**config.recorded(), "max_words": args.max_words, "neighbor_field": args.neighbor_field}


def checked_threshold(args: argparse.Namespace, out, model: str | None = None):
    """The threshold of --threshold, refused in one line unless it is for the column of --method (where given) and
    was calibrated under the settings this run scores its method with (on ``model`` in place of --model, where
    given)."""
    threshold = Threshold.load(args.threshold)
    column = single_column(args.method) if args.method else None
    run = run_config(args, None, out, threshold.method, model)
    threshold.check_use(args.threshold, score_settings(run, args), column)
    return threshold


def single_column(method: str) -> str:
    """The one score column ``method`` names (``mink_0.2``, ``loss``); refuses a method of several columns."""
    columns = [c for r in resolve_methods([method], []) for c in r.columns]
    if len(columns) != 1:
        raise MiaFastError(f"--method takes one score column, e.g. mink_0.2 or loss; {method!r} is not one")
    return columns[0]


def input_name(args: argparse.Namespace) -> str:
    if args.suite:
        return (
            f"{args.suite}:{args.split or SUITES[args.suite].default_split}"
            + (f":{args.config}" if args.config else "")
            + (f" ({args.data})" if args.data else "")
        )
    return str(args.data)


def score_into(args: argparse.Namespace, dataset, out) -> None:
    """Scores ``dataset`` into ``out`` with the command's options (resumable, block by block)."""
    # Loading the runner loads torch: only a command that scores pays for it (`mia-fast --help` must not).
    from mia_fast.scoring.runner import score_file  # noqa: PLC0415 (start-up: torch)

    name = input_name(args)
    config = run_config(args, dataset, out)
    score_file(dataset, config, log=stderr, data_name=name)
