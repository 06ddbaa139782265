"""The typed configuration of a run (scoring.config): its defaults, which fields change scores, the target as a run
names and records it, and what a whole run records."""

from __future__ import annotations

from pathlib import Path

from mia_fast.methods.online import OnlineSetting
from mia_fast.scoring.config import (
    DEFAULT_BLOCK_ROWS,
    DEFAULT_MODEL_NAME,
    ComputeConfig,
    GgufFile,
    ModelConfig,
    OutputConfig,
    RunConfig,
    ScoringConfig,
    score_fields,
)
from mia_fast.served.client import ServerConfig


def test_the_defaults_are_the_built_in_model_on_the_best_device_with_the_start_token():
    config = ModelConfig()
    assert config.model is None and config.ref_model is None and config.device is None and config.dtype is None
    assert config.prepend_start and config.max_length is None
    assert config.backend == "auto" and config.forward == "auto"
    compute = ComputeConfig()
    assert compute.batch_tokens is None and compute.stats_cache is None and compute.progress and compute.overlap
    output = OutputConfig("scores.jsonl")
    assert output.block_rows == DEFAULT_BLOCK_ROWS == 512 and output.path == Path("scores.jsonl")
    assert (output.id_field, output.label_field, output.resume, output.overwrite) == ("id", "label", False, False)


def test_only_the_fields_that_change_scores_are_recorded():
    assert score_fields(ModelConfig(device="cpu", backend="torch", forward="model")) == {
        "model": None,
        "ref_model": None,
        "dtype": None,
        "prepend_start": True,
        "max_length": None,
    }
    assert score_fields(ComputeConfig(batch_tokens=10, stats_cache="c")) == {}
    assert score_fields(OutputConfig("o.jsonl", block_rows=3)) == {}


def test_the_target_is_named_as_the_user_gave_it():
    assert ModelConfig().name == DEFAULT_MODEL_NAME == "default (SmolLM2-135M)"
    assert ModelConfig(model="org/model").name == "org/model"
    assert ModelConfig(model=Path("models/tiny")).name == "models/tiny"
    assert ModelConfig(model=GgufFile("m.gguf")).name == "m.gguf"
    assert ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m")).name == "m at http://127.0.0.1:1"


def test_the_target_is_recorded_by_its_name_a_gguf_file_named_as_one_under_gguf():
    assert ModelConfig().recorded_source() == {"model": DEFAULT_MODEL_NAME, "gguf": None}
    assert ModelConfig(model="m.gguf").recorded_source() == {"model": "m.gguf", "gguf": None}
    assert ModelConfig(model=GgufFile("m.gguf")).recorded_source() == {"model": "m.gguf", "gguf": "m.gguf"}
    served = ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m"))
    assert served.recorded_source() == {"model": {"model": "m", "tokenizer": None}, "gguf": None}


def test_scoring_lists_become_tuples_and_are_recorded_with_the_online_setting():
    scoring = ScoringConfig(methods=["loss", "mink"], k=[0.2], online=OnlineSetting(32))
    assert scoring.methods == ("loss", "mink") and scoring.k == (0.2,)
    recorded = scoring.recorded()
    assert recorded["methods"] == ["loss", "mink"] and recorded["k"] == [0.2]
    assert recorded["online"]["type"] == "OnlineSetting" and recorded["online"]["window"] == 32


def test_a_run_records_its_model_and_scoring_but_not_how_or_where_it_ran():
    run = RunConfig(
        OutputConfig("o.jsonl"),
        ModelConfig(model="org/model", device="cpu", max_length=32),
        ScoringConfig(methods=["loss"], k=[0.5]),
        ComputeConfig(batch_tokens=7),
    )
    recorded = run.recorded()
    assert {"model": "org/model", "gguf": None, "max_length": 32, "methods": ["loss"], "k": [0.5]}.items() <= (
        recorded.items()
    )
    assert "device" not in recorded and "batch_tokens" not in recorded and "out" not in recorded
    other_place = RunConfig(OutputConfig("p.csv", block_rows=9), run.model, run.scoring, ComputeConfig(progress=False))
    assert other_place.recorded() == recorded
    assert RunConfig(OutputConfig("o.jsonl"), ModelConfig(model="org/model", max_length=16)).recorded() != recorded
