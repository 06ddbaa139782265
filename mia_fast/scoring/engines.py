"""The engine registry: which engine serves a model source, what is checked before it loads, what it cannot give.

``ModelConfig.model`` is the one source of the target model, whatever its kind. Each kind is an :class:`EngineKind`
in ``ENGINES``: a predicate that claims a source, the factory that builds its engine
(``mia_fast.engines.protocol.Engine``) from the run's ModelConfig and ComputeConfig, the check run before anything
loads, and its limits: what its engine will refuse, known before it is built, so that a run refuses such a method
in one line before any model loads (here or on Ray). Kinds are asked newest first: a kind added later may claim
sources a built-in one would take (a llama.cpp engine, ``.gguf`` files), and the weights run here take whatever
no other kind claims. Adding an engine is a module with its engine and one entry here (docs/adding-an-engine.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mia_fast.engines.base import SPREAD_WEIGHTS, WEIGHTS_HERE
from mia_fast.engines.protocol import Engine, EngineLimits
from mia_fast.errors import MiaFastError
from mia_fast.methods.minkpp_top import served_defaults
from mia_fast.pipeline.device_map import DeviceMap
from mia_fast.scoring.config import ComputeConfig, GgufFile, ModelConfig
from mia_fast.served.client import ServerConfig
from mia_fast.served.model import ServedLimits
from mia_fast.served.server import ServerEngine

if TYPE_CHECKING:  # the model's module imports torch, which a run refused before loading does not need
    from mia_fast.pipeline.models import LoadedModel

Log = Callable[[str], None]


def _nothing_to_check(config: ModelConfig) -> None:
    """A source of this kind is checked when its engine is built."""


@dataclass(frozen=True)
class EngineKind:
    """One kind of model source. ``claims`` says whether a source (``ModelConfig.model``) is of this kind; ``build``
    makes the engine of a run's target (applying the ComputeConfig's batch budget and stats cache; ``log`` takes
    one-line notes); ``limits`` says what that engine will refuse, before it is built; ``check`` refuses, in one
    line (a MiaFastError), a source that would fail to load, before anything loads; ``defaults`` gives the methods
    scored where none are named, where they are not the package's (noting why through ``log``)."""

    claims: Callable[[Any], bool]
    build: Callable[[ModelConfig, ComputeConfig, Log], Engine]
    limits: Callable[[ModelConfig], EngineLimits]
    check: Callable[[ModelConfig], None] = _nothing_to_check
    defaults: Callable[[ModelConfig, Log], tuple[str, ...]] | None = None


# -- weights run here: a directory, a hub name, a GGUF file, a LoadedModel, or None (the built-in model) ----------


def _load_arguments(source: Any) -> tuple[Any, Any]:
    """(model, gguf) as ``load_model`` and ``check_model_source`` take them."""
    return (None, source.path) if isinstance(source, GgufFile) else (source, None)


def weights_engine(
    source: str | os.PathLike | LoadedModel | None,
    config: ModelConfig,
    compute: ComputeConfig,
    log: Log,
    max_length: int | None,
    device: str | DeviceMap | None,
) -> Engine:
    """An engine running ``source`` here (a LoadedModel as it is, any other loaded onto ``device``, a device or a
    device map, in ``config``'s dtype) with ``config``'s start token, back end and forward, the window ``max_length``
    and ``compute``'s batch budget and stats cache; with ``compute.verbose`` its forward path is said through
    ``log``."""
    from mia_fast.pipeline.engine import StatsEngine  # noqa: PLC0415 (torch: 1.5 s at start-up; --help and served runs load none)
    from mia_fast.pipeline.models import LoadedModel, load_model  # noqa: PLC0415 (torch: 1.5 s at start-up; --help and served runs load none)

    if isinstance(source, LoadedModel):
        loaded = source
    else:
        loaded = load_model(*_load_arguments(source), device, config.dtype)
    engine = StatsEngine(
        loaded,
        prepend_start=config.prepend_start,
        batch_tokens=compute.batch_tokens,
        max_length=max_length,
        backend=config.backend,
        forward=config.forward,
    )
    if compute.verbose:
        log(f"{loaded.name}: {engine.path.describe()}")
    if compute.stats_cache is not None:
        engine.use_cache(compute.stats_cache, log=log)
    return engine


def check_weights(source: str | os.PathLike | LoadedModel | None) -> None:
    """Refuses, in one line and without loading it, a model that cannot load here (a missing directory or part of
    one, a corrupt GGUF file, a hub name neither cached nor reachable); one in memory is there already."""
    from mia_fast.pipeline.models import LoadedModel, check_model_source  # noqa: PLC0415 (torch: 1.5 s at start-up; --help and served runs load none)

    if not isinstance(source, LoadedModel):
        check_model_source(*_load_arguments(source))


def check_spread(config: ModelConfig) -> None:
    """Refuses, in one line and before anything loads, a device map (``config.device``) that cannot place the target:
    beside ``--forward packed`` (which runs a model whole on one device), for a model already in memory, or naming a
    module the model lacks or leaving one of its weights without a device (a directory's or hub model's, read from
    its config; a GGUF file's is checked when it loads)."""
    from mia_fast.pipeline.models import LoadedModel, local_or_hub  # noqa: PLC0415 (torch: 1.5 s at start-up; --help and served runs load none)
    from mia_fast.pipeline.spread import check_modules  # noqa: PLC0415 (torch: 1.5 s at start-up; --help and served runs load none)

    if config.forward == "packed":
        raise MiaFastError(
            "--forward packed runs a model whole on one device, and --device-map spreads its layers over devices: "
            "use --forward auto (the model's own forward then runs it) or --device"
        )
    source = config.model
    if isinstance(source, LoadedModel):
        raise MiaFastError("a model in memory runs where it is: a device map (--device-map) places a model loaded here")
    if source is not None and not isinstance(source, GgufFile) and not os.fspath(source).endswith(".gguf"):
        check_modules(config.device, local_or_hub(os.fspath(source)), str(source))


def _check_local(config: ModelConfig) -> None:
    check_weights(config.model)
    if isinstance(config.device, DeviceMap):
        check_spread(config)


def _local_engine(config: ModelConfig, compute: ComputeConfig, log: Log) -> Engine:
    return weights_engine(config.model, config, compute, log, config.max_length, config.device)


# -- a model behind a server (vLLM, OpenAI-compatible) ------------------------------------------------------------


def _served_engine(config: ModelConfig, compute: ComputeConfig, log: Log) -> Engine:
    engine = ServerEngine(config.model, prepend_start=config.prepend_start, max_length=config.max_length, log=log)
    if compute.stats_cache is not None:
        engine.use_cache(compute.stats_cache, log=log)
    return engine


def _served_limits(config: ModelConfig) -> EngineLimits:
    return ServedLimits(config.model.tokenizer is not None)


SERVED_SPREAD = (
    "--device-map places the layers of a model loaded here, and a served model's are the server's: for a model larger "
    "than one GPU, serve it with tensor parallelism (vLLM's --tensor-parallel-size)"
)


def _check_served(config: ModelConfig) -> None:
    """The tokenizer to load here, where one is named (the server is reached when the run starts); no device map,
    which places weights loaded here."""
    if isinstance(config.device, DeviceMap):
        raise MiaFastError(SERVED_SPREAD)
    if config.model.tokenizer is not None:
        check_weights(config.model.tokenizer)


def served_default_methods(server: ServerConfig) -> tuple[str, ...]:
    """The default methods for a served model: the defaults, with Min-K%++ estimated from the top 20 log-probs
    where a tokenizer here gives the vocabulary's size, and left out otherwise."""
    return served_defaults(vocabulary_size_known=server.tokenizer is not None)


def _served_defaults(config: ModelConfig, log: Log) -> tuple[str, ...]:
    methods = served_default_methods(config.model)
    log(f"a served model: methods {','.join(methods)} by default (minkpp needs what no server returns)")
    return methods


ENGINES: dict[str, EngineKind] = {
    "local": EngineKind(
        claims=lambda source: True,
        build=_local_engine,
        limits=lambda config: SPREAD_WEIGHTS if isinstance(config.device, DeviceMap) else WEIGHTS_HERE,
        check=_check_local,
    ),
    "server": EngineKind(
        claims=lambda source: isinstance(source, ServerConfig),
        build=_served_engine,
        limits=_served_limits,
        check=_check_served,
        defaults=_served_defaults,
    ),
}


def engine_kind(source: Any) -> EngineKind:
    """The kind of a model source (``ModelConfig.model``): the newest entry of ``ENGINES`` that claims it."""
    return next(kind for kind in reversed(ENGINES.values()) if kind.claims(source))
