"""The typed configuration of a scoring run, built by the CLI (or by hand) and handed to the library.

A run is a :class:`RunConfig`: the model (:class:`ModelConfig`), what to score (:class:`ScoringConfig`: the
methods, k, each method's settings, online detection), where the scores go (:class:`OutputConfig`) and how
fast (:class:`ComputeConfig`). Every field says whether it changes scores (``scores`` in its metadata; a whole
ComputeConfig changes none): :meth:`RunConfig.recorded` is what a threshold, a Ray manifest or a resumed
output records and compares.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mia_fast.methods.online import OnlineSetting
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS, resolve_methods
from mia_fast.methods.settings import MethodSettings, recorded, recorded_settings
from mia_fast.pipeline.device_map import DeviceMap

if TYPE_CHECKING:  # annotations only: the model's module imports torch, which a configuration does not need
    from mia_fast.pipeline.models import LoadedModel
    from mia_fast.served.client import ServerConfig

DEFAULT_BLOCK_ROWS = 512
DEFAULT_MODEL_NAME = "default (SmolLM2-135M)"


def _scores(default: Any, *, changes_scores: bool = True) -> Any:
    return field(default=default, metadata={"scores": changes_scores})


def score_fields(config: Any) -> dict[str, Any]:
    """The fields of a config that change scores, as JSON."""
    return {f.name: recorded(getattr(config, f.name)) for f in fields(config) if f.metadata.get("scores")}


@dataclass(frozen=True)
class GgufFile:
    """A GGUF model file named as one (``--gguf``): loaded as GGUF whatever its name ends with, and recorded under
    ``gguf`` as runs always have recorded it. A path ending in ``.gguf`` given as the model (``--model``) is a GGUF
    file too, recorded by its name alone."""

    path: str | os.PathLike

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return os.fspath(self.path)


@dataclass(frozen=True)
class ModelConfig:
    """The target model, the reference model of ``ref``, where and in what precision they run (``device``,
    ``dtype`` apply to models loaded here), whether the start token is prepended, the window length for long texts
    (default: the model's context), the back end of the token statistics and reductions (``auto``, ``torch``,
    ``triton``) and the forward (``auto``: the pad-free packed decoder where the model's family is supported, else
    the model's own; ``packed``; ``model``). Every field but the device, the back end and the forward changes
    scores.

    ``device`` is one device (``cpu``, ``cuda:1``; None: a GPU where one is here) that takes the whole model, or a
    :class:`DeviceMap` (``--device-map``) that spreads the target's layers over this machine's GPUs, CPU and disk for
    a model larger than one GPU: the model's own forward then runs it, and the reference model loads whole on the
    default device.

    ``model`` is the one source of the target: a hub name, a local directory, a GGUF file (a path ending in
    ``.gguf``, or a :class:`GgufFile`), a LoadedModel in memory, a model reached over HTTP (a ``ServerConfig``:
    URL, served name, key variable, tokenizer), or None for the built-in SmolLM2-135M. Which engine serves it is
    the engine registry's choice (``mia_fast.scoring.engines``)."""

    model: str | os.PathLike | LoadedModel | ServerConfig | None = _scores(None)
    ref_model: str | LoadedModel | None = _scores(None)
    # Where the model runs and which kernels reduce its logits move a score only within floating-point error: a
    # threshold calibrated on one device applies on another.
    device: str | DeviceMap | None = _scores(None, changes_scores=False)
    dtype: str | None = _scores(None)
    prepend_start: bool = _scores(default=True)
    max_length: int | None = _scores(None)
    backend: str = _scores("auto", changes_scores=False)
    forward: str = _scores("auto", changes_scores=False)

    @property
    def reference_device(self) -> str | None:
        """Where the reference model loads: ``device``, or the default device where a device map places the
        target."""
        return None if isinstance(self.device, DeviceMap) else self.device

    @property
    def name(self) -> str:
        """The target model as a user named it."""
        if self.model is None or isinstance(self.model, (str, os.PathLike)):
            return str(self.model or DEFAULT_MODEL_NAME)
        return self.model.name

    def recorded_source(self) -> dict[str, Any]:
        """The target model as a run records it: a source whose fields say they change scores (a ServerConfig: the
        model served and its tokenizer) by those, any other by its name; and a GGUF file named as one under
        ``gguf`` (None otherwise), so that a threshold or a Ray run recorded before still matches."""
        marked = score_fields(self.model) if is_dataclass(self.model) else {}
        gguf = recorded(self.model) if isinstance(self.model, GgufFile) else None
        return {"model": marked or self.name, "gguf": gguf}


@dataclass(frozen=True)
class ComputeConfig:
    """How the work is done, never what it computes: the token budget per forward batch (default: 1024 on
    CPU, 16384 on GPU), a stats cache directory that keeps every pass's token statistics, a progress bar,
    whether a file's next block is read and its last written on threads of their own, and whether each model's
    forward path is said (``verbose``)."""

    batch_tokens: int | None = _scores(None, changes_scores=False)
    stats_cache: str | os.PathLike | None = _scores(None, changes_scores=False)
    progress: bool = _scores(default=True, changes_scores=False)
    overlap: bool = _scores(default=True, changes_scores=False)
    verbose: bool = _scores(default=False, changes_scores=False)


@dataclass(frozen=True)
class ScoringConfig:
    """What to score: method names (``mink`` takes every k, ``mink_0.2`` one), the k fractions, every method's
    settings (one object per settings class, e.g. ``SamiaSettings(samples=5)``) and online detection."""

    methods: tuple[str, ...] = _scores(DEFAULT_METHODS)
    k: tuple[float, ...] = _scores(DEFAULT_KS)
    settings: MethodSettings = _scores(MethodSettings())
    online: OnlineSetting | None = _scores(None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", tuple(self.methods))
        object.__setattr__(self, "k", tuple(self.k))
        object.__setattr__(self, "settings", MethodSettings.coerce(self.settings))

    def recorded(self) -> dict[str, Any]:
        """The methods, k, online detection and the settings that change the requested methods' scores."""
        requests = resolve_methods(self.methods, self.k)
        return {
            "methods": list(self.methods),
            "k": list(self.k),
            "online": recorded(self.online),
            **recorded_settings([r.method for r in requests], self.settings),
        }


@dataclass(frozen=True)
class OutputConfig:
    """Where scores go (.jsonl, .csv or .parquet), whether an existing output is continued or replaced, the rows
    scored and written per block, the input fields copied to the output (id and label), and the run file written
    beside it."""

    out: str | os.PathLike = _scores(None, changes_scores=False)
    resume: bool = _scores(default=False, changes_scores=False)
    overwrite: bool = _scores(default=False, changes_scores=False)
    block_rows: int = _scores(DEFAULT_BLOCK_ROWS, changes_scores=False)
    id_field: str = _scores("id", changes_scores=False)
    label_field: str = _scores("label", changes_scores=False)
    # The run file (TOML) that reproduces the output, written beside it (OUT.run.toml); None: none.
    run_file: str | None = _scores(None, changes_scores=False)

    @property
    def path(self) -> Path:
        return Path(self.out)


@dataclass(frozen=True)
class RunConfig:
    """A whole scoring run: model, scoring, output, compute."""

    output: OutputConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)

    def recorded(self) -> dict[str, Any]:
        """Every setting that changes a score of this run, as JSON."""
        model = score_fields(self.model)
        del model["model"]
        return {**self.model.recorded_source(), **model, **self.scoring.recorded()}
