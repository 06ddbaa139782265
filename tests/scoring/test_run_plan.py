"""The plan of a run (scoring.run_plan): what cannot run refused before any model loads, by the one check of the
methods, and the record a scores file keeps of its run."""

from __future__ import annotations

import pytest

from mia_fast import ModelConfig, OutputConfig, RunConfig, ScoringConfig
from mia_fast.errors import MiaFastError
from mia_fast.scoring.run_plan import check_before_loading, run_record
from mia_fast.served.client import ServerConfig


def test_what_cannot_run_is_refused_before_any_model_loads(tmp_path):
    missing = ModelConfig(model=str(tmp_path / "nowhere"))
    with pytest.raises(MiaFastError, match="nowhere: no such model directory"):
        check_before_loading(missing, ScoringConfig(methods=["loss"]))
    with pytest.raises(MiaFastError, match="unknown method"):
        check_before_loading(missing, ScoringConfig(methods=["no_such_method"]))
    served = ModelConfig(model=ServerConfig("http://127.0.0.1:1", "m"))
    with pytest.raises(MiaFastError, match="^method 'minkpp' needs the exact mean and variance"):
        check_before_loading(served, ScoringConfig(methods=["loss", "minkpp"]))
    requests, _ = check_before_loading(served, ScoringConfig(methods=["loss"], k=[0.5]))
    assert [r.columns for r in requests] == [["loss"]]


def test_a_run_records_its_settings_but_not_its_models_names():
    recorded = run_record(RunConfig(OutputConfig("o.jsonl"), ModelConfig(model="org/model", ref_model="org/ref")))
    assert not {"model", "gguf", "ref_model", "server"} & set(recorded)
    assert recorded["methods"] == list(ScoringConfig().methods)
