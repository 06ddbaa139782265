"""The engine registry (scoring.engines): which kind claims a model source, its limits known before anything loads,
the checks it makes before loading, the methods a served model scores by default, and the engine each kind builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mia_fast.engines.passes import GradientNormReadout, TopLogprobsReadout
from mia_fast.errors import MiaFastError
from mia_fast.scoring.config import ComputeConfig, GgufFile, ModelConfig
from mia_fast.scoring.engines import ENGINES, engine_kind, served_default_methods
from mia_fast.served.client import ServerConfig
from mia_fast.served.model import ServedLimits


def test_a_served_model_is_the_model_of_a_model_config_and_the_server_engine_serves_it():
    server = ServerConfig("http://127.0.0.1:1", "m", tokenizer="t")
    assert engine_kind(server) is ENGINES["server"] and engine_kind("m") is ENGINES["local"]
    assert ModelConfig(model=server).name == "m at http://127.0.0.1:1"
    assert ModelConfig(model=server).recorded_source() == {"model": {"model": "m", "tokenizer": "t"}, "gguf": None}


def test_a_served_model_defaults_to_the_methods_a_server_can_give():
    assert served_default_methods(ServerConfig("http://h", "m", tokenizer="t")) == (
        "loss",
        "zlib",
        "mink",
        "minkpp_top20",
    )
    assert served_default_methods(ServerConfig("http://h", "m")) == ("loss", "zlib", "mink")


@pytest.mark.parametrize("source", [None, "some/model", Path("a/dir"), GgufFile("m.gguf"), "m.gguf"])
def test_every_source_but_a_server_is_run_here(source):
    kind = engine_kind(source)
    assert kind is ENGINES["local"]
    limits = kind.limits(ModelConfig(model=source))
    assert limits.vocabulary_stats and limits.weights_here
    assert limits.refusal(GradientNormReadout()) is None and kind.defaults is None


def test_a_served_models_limits_say_what_it_cannot_give_before_connecting():
    kind = engine_kind(ServerConfig("http://127.0.0.1:1", "m"))
    limits = kind.limits(ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m")))
    assert isinstance(limits, ServedLimits) and not limits.has_tokenizer
    assert not limits.vocabulary_stats and not limits.weights_here
    assert "give --tokenizer NAME" in limits.refusal(TopLogprobsReadout(5))
    with_tokenizer = kind.limits(ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m", tokenizer="t")))
    assert with_tokenizer.has_tokenizer and with_tokenizer.refusal(TopLogprobsReadout(5)) is None


def test_a_served_models_default_methods_are_logged_with_the_reason():
    notes = []
    config = ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m"))
    assert engine_kind(config.model).defaults(config, notes.append) == ("loss", "zlib", "mink")
    assert notes == ["a served model: methods loss,zlib,mink by default (minkpp needs what no server returns)"]


def test_a_missing_model_directory_is_refused_by_its_kinds_check(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(MiaFastError, match="nowhere: no such model directory"):
        engine_kind(missing).check(ModelConfig(model=missing))
    served = ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m", tokenizer=missing))
    with pytest.raises(MiaFastError, match="nowhere: no such model directory"):
        engine_kind(served.model).check(served)
    ENGINES["server"].check(ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m")))  # no tokenizer: nothing


def test_the_local_kind_builds_an_engine_with_the_runs_budget_and_cache(tiny_model_dir, tmp_path):
    notes = []
    compute = ComputeConfig(batch_tokens=77, stats_cache=tmp_path / "cache", verbose=True)
    config = ModelConfig(model=str(tiny_model_dir), prepend_start=False, max_length=32, forward="model")
    engine = engine_kind(config.model).build(config, compute, notes.append)
    assert engine.batch_tokens == 77 and engine.max_length == 32 and not engine.prepend_start
    assert engine.cache is not None and engine.cache.base == tmp_path / "cache"
    assert len(notes) == 1 and notes[0].startswith(f"{tiny_model_dir}: ")
