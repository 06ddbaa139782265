"""A scoring run planned once from its configuration, before a model loads or a file is written: the input
refused as an output, the methods checked (one route, whatever serves them), the first block read and checked,
the columns of every output and who produces them (an id column of values no one type holds as text, from every
id), and what the outputs record of the run (``RunPlan``)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.files import Dataset, DataStream
from mia_fast.data.formats import ColumnKinds
from mia_fast.data.gate import Output, refuse_inputs
from mia_fast.data.run_outputs import RunOutputs
from mia_fast.engines.passes import REFERENCE, TARGET
from mia_fast.engines.protocol import EngineLimits
from mia_fast.errors import MiaFastError
from mia_fast.methods.derived import DERIVED_MODELS
from mia_fast.methods.registry import MethodRequest, resolve_methods
from mia_fast.methods.settings import MethodSettings
from mia_fast.pipeline.models import check_device
from mia_fast.scoring.columns import ColumnProducer, OnlineWindows, producers
from mia_fast.scoring.config import ModelConfig, RunConfig, ScoringConfig
from mia_fast.scoring.detector import Detector, check_served
from mia_fast.scoring.engines import check_weights, engine_kind
from mia_fast.scoring.method_runs import check_available, check_texts, pooled_methods, prepare_settings


class Serving:
    """What serves a run's methods, as its checks see it: the settings made ready for it, its engines' limits, the
    models it holds, and the checks of the machine and the models themselves."""

    def ready(self, settings: MethodSettings) -> tuple[MethodSettings, dict[str, EngineLimits], list[str]]:
        raise NotImplementedError

    def check_device(self) -> None:
        """Refuses a device this machine lacks (nothing to check by default)."""

    def check_models(self) -> None:
        """Refuses a model that cannot load (nothing to check by default)."""


class BeforeLoading(Serving):
    """The model of a configuration before it loads: its kind's limits (``mia_fast.scoring.engines``)."""

    def __init__(self, model: ModelConfig) -> None:
        self.model = model

    def ready(self, settings: MethodSettings) -> tuple[MethodSettings, dict[str, EngineLimits], list[str]]:
        prepared = prepare_settings(settings, None)
        limits = engine_kind(self.model.model).limits(self.model)
        models = [REFERENCE] if self.model.ref_model is not None else []
        if limits.weights_here:  # the models made from them are available too
            models += list(DERIVED_MODELS)
        return prepared, {TARGET: limits}, models

    def check_device(self) -> None:
        check_device(self.model.device, self.model.dtype)

    def check_models(self) -> None:
        engine_kind(self.model.model).check(self.model)
        if self.model.ref_model is not None:
            check_weights(self.model.ref_model)


class Loaded(Serving):
    """A detector, its engines built, with the settings it scores the run under."""

    def __init__(self, detector: Detector, settings: MethodSettings) -> None:
        self.detector, self.settings = detector, settings

    def ready(self, settings: MethodSettings) -> tuple[MethodSettings, dict[str, EngineLimits], list[str]]:
        derived = list(DERIVED_MODELS) if self.detector.target.weights_here else []
        return self.settings, dict(self.detector.engines), [*self.detector.engines, *derived]


def checked_requests(scoring: ScoringConfig, serving: Serving) -> tuple[list[MethodRequest], MethodSettings]:
    """The one check of a run's methods: unknown methods, bad k, methods whose models or settings were not given,
    methods the engines cannot serve (their limits), a device this machine lacks, a model that cannot load (its
    kind's check: a missing directory or part of one, a corrupt GGUF file, a hub name neither cached nor
    reachable). Returns the requests and the settings made ready."""
    requests = resolve_methods(scoring.methods, scoring.k)
    settings, limits, models = serving.ready(scoring.settings)
    check_available(requests, settings, models=models)
    serving.check_device()
    check_served(requests, settings, limits)
    serving.check_models()
    return requests, settings


def check_before_loading(model: ModelConfig, scoring: ScoringConfig) -> tuple[list[MethodRequest], MethodSettings]:
    """What can be refused before a model loads, for a run here or on Ray (:func:`checked_requests`), with the
    settings made ready without a model (a probe read from its directory)."""
    return checked_requests(scoring, BeforeLoading(model))


def refuse_input_as_output(dataset: Dataset | DataStream, written: Sequence[Path]) -> None:
    """Scores are never written over the texts they come from, whatever the flags."""
    source = dataset.path if isinstance(dataset, DataStream) else dataset.source
    for path in written:
        refuse_inputs(Output(path, staged=True), [source])


def run_record(config: RunConfig) -> dict[str, Any]:
    """What a scores file records of its run and a resumed run must repeat. The models are recorded by what they
    are (weights, tokenizer: ``Detector.provenance``), not by the names or paths they were given."""
    recorded = config.recorded()
    for name in ("model", "gguf", "ref_model", "server"):
        recorded.pop(name, None)
    return recorded


@dataclass
class RunPlan:
    """A run planned from its configuration: the requests and settings it scores with (checked), the producers of
    its columns, the input's blocks (the first one read and checked), what its outputs record, and ``detector``,
    the detector given to score with (None: one is made from the configuration when rows remain)."""

    config: RunConfig
    requests: list[MethodRequest]
    settings: MethodSettings
    producers: tuple[ColumnProducer, ...]
    first: Dataset
    blocks: Iterator[tuple[Dataset, int]]
    detector: Detector | None
    text_columns: tuple[str, ...] = ()  # an id column no one type holds, written as text

    def outputs(self) -> RunOutputs:
        """The files the run writes, not yet open: its scores and the files beside them, with their columns."""
        output = self.config.output
        columns = [c for p in self.producers for c in p.columns(self.first)]
        beside = {path: cols for p in self.producers for path, cols in p.beside(self.first).items()}
        return RunOutputs(
            output.path,
            columns,
            beside=beside,
            resume=output.resume,
            overwrite=output.overwrite,
            settings=run_record(self.config),
            run_file=output.run_file,
            text_columns=self.text_columns,
        )


def plan_run(
    dataset: Dataset | DataStream, config: RunConfig, detector: Detector | None, log: Callable[[str], None]
) -> RunPlan:
    """The plan of scoring ``dataset`` under ``config`` (with ``detector``, where given), or the first thing wrong
    with it: everything checked that can be without a model, before any file is written."""
    output, scoring = config.output, config.scoring
    online = [OnlineWindows(scoring.online, output.id_field, output.path)] if scoring.online is not None else []
    refuse_input_as_output(dataset, [output.path, *(p.path for p in online)])
    if output.block_rows < 1:
        raise MiaFastError("--block-rows must be positive")
    given = Loaded(detector, detector.with_settings(scoring.settings)) if detector is not None else None
    requests, settings = checked_requests(scoring, given or BeforeLoading(config.model))
    made_by = producers(requests, output.id_field, output.label_field, online)
    pooled = pooled_methods(requests, settings)
    ids = ColumnKinds()
    if isinstance(dataset, DataStream):
        dataset.check(ids)
        source, where = dataset.path, "line"
    else:
        for row, value in enumerate(dataset.ids or (), start=1):
            ids.add(value, row)
        source, where = dataset.source or "the input", "row"
    text_columns = ids.text_columns(source, output.id_field, where)
    blocks = dataset.blocks(sys.maxsize if pooled else output.block_rows)
    first, first_end = next(blocks)
    check_texts(settings, requests, first.texts)
    if pooled and len(first.texts) > output.block_rows:
        log(
            f"{', '.join(pooled)} standardises over all the texts scored together: "
            f"scoring {len(first.texts)} rows in one block"
        )
    blocks = itertools.chain([(first, first_end)], blocks)
    return RunPlan(config, requests, settings, made_by, first, blocks, detector, text_columns)
