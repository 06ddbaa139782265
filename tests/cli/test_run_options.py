"""Parsed options turned into a run: the served model's options checked together, online detection, the model,
output and whole run configuration, one score column, the input's name, and a threshold checked against the run."""

from __future__ import annotations

import pytest
from helpers import parsed

from mia_fast.cli.run_options import (
    checked_threshold,
    input_name,
    method_settings,
    model_config,
    online_setting,
    output_config,
    run_config,
    score_settings,
    server_config,
    single_column,
)
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.thresholds import calibrate
from mia_fast.methods.neighbor import NeighborSettings
from mia_fast.methods.recall import RecallSettings
from mia_fast.scoring.config import GgufFile

SCORE = ["score", "d.jsonl", "--out", "o.jsonl"]


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--server-model", "m", "--tokenizer", "t"], "--server-model, --tokenizer need(s) --server URL"),
        (["--server", "http://127.0.0.1:8000"], "--server needs --server-model NAME"),
        (
            ["--server", "http://127.0.0.1:8000", "--server-model", "m", "--model", "x"],
            "give the target model once: --server (with --server-model) or --model/--gguf",
        ),
    ],
)
def test_the_served_models_options_are_refused_unless_they_go_together(options, line):
    with pytest.raises(MiaFastError, match=line.replace("(", r"\(").replace(")", r"\)")):
        server_config(parsed([*SCORE, *options]))


def test_a_served_model_is_a_server_config_with_its_request_settings():
    args = parsed([*SCORE, "--server", "http://127.0.0.1:8000", "--server-model", "m", "--in-flight", "2"])
    served = server_config(args)
    assert (served.model, served.requests.in_flight) == ("m", 2)
    assert server_config(parsed(SCORE)) is None
    assert model_config(args).model == served


def test_the_online_options_need_online():
    with pytest.raises(MiaFastError, match="--online-stride need --online W"):
        online_setting(parsed([*SCORE, "--online-stride", "4"]))
    assert online_setting(parsed(SCORE)) is None
    online = online_setting(parsed([*SCORE, "--online", "8", "--online-method", "mink_0.2"]))
    assert (online.window, online.method) == (8, "mink_0.2")


def test_a_gguf_file_wins_over_model_and_a_given_model_over_both():
    args = parsed([*SCORE, "--model", "m", "--gguf", "f.gguf", "--dtype", "fp16"])
    assert model_config(args).model == GgufFile("f.gguf") and model_config(args).dtype == "fp16"
    assert model_config(args, "after").model == "after"


def test_the_run_configuration_holds_every_option_and_a_given_method_drops_k():
    argv = [*SCORE, "--model", "m", "--methods", "loss,mink", "--k", "0.2", "--id-field", "key", "--quiet"]
    argv += ["--batch-tokens", "512", "--block-rows", "7"]
    config = run_config(parsed(argv), None, "o.jsonl")
    assert config.scoring.methods == ("loss", "mink") and config.scoring.k == (0.2,)
    assert (str(config.output.path), config.output.id_field, config.output.block_rows) == ("o.jsonl", "key", 7)
    assert config.compute.batch_tokens == 512 and config.compute.progress is False
    only = run_config(parsed(argv), None, "o.jsonl", methods="mink_0.2", model="other")
    assert only.scoring.methods == ("mink_0.2",) and only.scoring.k == () and only.model.model == "other"


def test_the_output_configuration_of_rescore_names_its_fields():
    args = parsed(["rescore", "d.jsonl", "--stats", "s.npz", "--out", "o.jsonl", "--label-field", "member"])
    output = output_config(args, args.out)
    assert (str(output.path), output.label_field, output.resume, output.overwrite) == (
        "o.jsonl",
        "member",
        False,
        False,
    )


def test_settings_read_known_texts_from_a_file_and_turn_progress_off_with_quiet(tmp_path):
    known = tmp_path / "known.txt"
    known.write_text("first known text\nsecond known text\n")
    args = parsed([*SCORE, "--prefix-nonmembers", str(known), "--neighbor-model", "word-drop", "--quiet"])
    settings = method_settings(args)
    assert settings.of(RecallSettings).prefix_nonmembers == ("first known text", "second known text")
    assert settings.of(NeighborSettings).progress is False
    assert method_settings(parsed(SCORE)).of(NeighborSettings).progress is True


def test_one_score_column_or_a_line():
    assert single_column("mink_0.2") == "mink_0.2" and single_column("loss") == "loss"
    with pytest.raises(MiaFastError, match="--method takes one score column"):
        single_column("mink")


def test_the_input_is_named_by_its_file_or_its_suite_split_and_config():
    assert input_name(parsed(SCORE)) == "d.jsonl"
    suite = parsed(["score", "--suite", "mimir", "--split", "ngram_13_0.8", "--config", "arxiv", "--out", "o"])
    assert input_name(suite) == "mimir:ngram_13_0.8:arxiv"


def test_a_threshold_is_taken_only_for_its_column_under_its_settings(tmp_path):
    path = str(tmp_path / "t.json")
    classify = ["classify", "d.jsonl", "--threshold", path, "--out", "f.jsonl", "--model", "m"]
    settings = score_settings(run_config(parsed(classify), None, "f.jsonl", "loss"), parsed(classify))
    calibrate([0, 1, 0, 1], [-3.0, -1.0, -2.5, -0.5], "loss", settings=settings).save(path)
    assert checked_threshold(parsed(classify), "f.jsonl").method == "loss"
    with pytest.raises(MiaFastError, match="is a threshold for loss, not mink_0.2"):
        checked_threshold(parsed([*classify, "--method", "mink_0.2"]), "f.jsonl")
    with pytest.raises(MiaFastError, match="calibrated under other scoring settings"):
        checked_threshold(parsed(classify), "f.jsonl", model="another")
