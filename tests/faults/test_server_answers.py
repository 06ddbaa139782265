"""Every way ``scripts/faulty_server.py`` spoils a server's answers, through the CLI: each refused in one line that
names the server, the request and what was wrong, nothing written; an answer that trickles in is cut off at
--server-timeout in all; and the well-behaved server scores with finite losses by either protocol."""

import json
import math
import re
import time

import pytest
from helpers import read_jsonl, refused, run_cli, script, write_jsonl

from mia_fast.served.client import LOGPROB_TOLERANCE, Malformed, json_int, logprob

faulty_server = script("faulty_server")


@pytest.fixture
def data(tmp_path):
    rows = [{"text": "the rain in spain", "label": 1}, {"text": "stays mainly in the plain", "label": 0}]
    return write_jsonl(tmp_path / "in.jsonl", rows)


def server_args(url: str, *extra) -> list:
    return ["--server", url, "--server-model", "tiny", "--server-retry", "0", "--quiet", *extra]


SERVED = r"the server at http://127\.0\.0\.1:\d+ answered "
FAULT = r": the server's fault, not the texts'$"


@pytest.mark.parametrize(
    ("behaviour", "options", "extra", "expected"),
    [
        ("models_list", {}, [], r"/v1/models with JSON that is not an object \(\[\{'id': 'tiny'"),
        ("models_data_not_list", {}, [], r"/v1/models with data that is not a list \(\{'id': 'tiny'"),
        ("max_model_len_string", {}, [], r"/v1/models with a max_model_len that is not an integer \('2048'\)"),
        ("completions_list", {}, [], r"/v1/completions with JSON that is not an object \(\[\{'index': 0"),
        ("choices_missing", {}, [], r"/v1/completions with choices that is not a list \(None\)"),
        ("choices_not_list", {}, [], r"/v1/completions with choices that is not a list \(\{'0': "),
        ("logprob_string", {}, [], r"/v1/completions with a log-prob that is not a number \('abc'\)"),
        ("bare_float", {}, [], r"/v1/completions with a prompt_logprobs entry that is not an object \(1\.5\)"),
        ("bare_logprob", {}, [], r"/v1/completions with a log-prob entry that is not an object \(-\d"),
        ("nan", {}, [], r"/v1/completions with a log-prob that is not finite \(nan\)"),
        ("inf", {}, [], r"/v1/completions with a log-prob that is not finite \(inf\)"),
        ("positive", {}, [], r"/v1/completions with a positive log-prob \(0\.5\), the log of a probability above 1"),
        ("far_below", {}, [], r"/v1/completions with a log-prob below -1e\+06 \(-1e\+300\)"),
        ("tokens_missing", {}, [], r"/tokenize with tokens that is not a list \(None\)"),
        ("tokens_strings", {}, [], r"/tokenize with a token id that is not an integer \('1'\)"),
        ("tokens_floats", {}, [], r"/tokenize with a token id that is not an integer \(1\.0\)"),
        ("tokens_bools", {}, [], r"/tokenize with a token id that is not an integer \(False\)"),
        ("tokens_negative", {}, [], r"/tokenize with a token id out of range \(-1\)"),
        ("sample_no_index", {}, ["--methods", "samia"], r"/v1/completions with a choice's index that is not an"),
        ("sample_text_not_string", {}, ["--methods", "samia"], r"/v1/completions with a sample's text that is not a"),
        ("rank_string", {}, ["TOKENIZER", "--methods", "minkpp_top5"], r"a rank that is not an integer \('\d'\)"),
        ("nan", {"echo_only": True}, ["TOKENIZER"], r"/v1/completions with a log-prob that is not finite \(nan\)"),
        ("logprob_string", {"echo_only": True}, ["TOKENIZER"], r"a log-prob that is not a number \('abc'\)"),
        ("positive", {"echo_only": True}, ["TOKENIZER", "--methods", "minkpp_top5"], r"a positive log-prob \(0\.5\)"),
        (
            "top_logprobs_not_dict",
            {"echo_only": True},
            ["TOKENIZER", "--methods", "minkpp_top5"],
            r"/v1/completions with a top_logprobs entry that is not an object \(\[\['t",
        ),
    ],
)
def test_a_malformed_answer_is_one_line_naming_the_server_the_request_and_the_fault(
    behaviour, options, extra, expected, tmp_path, capsys, data, tiny_model_dir
):
    extra = [f"--tokenizer={tiny_model_dir}" if arg == "TOKENIZER" else arg for arg in extra]
    methods = [] if "--methods" in extra else ["--methods", "loss,zlib"]
    with faulty_server.serving(behaviour, **options) as url:
        line = refused(
            capsys, "score", data, *server_args(url, *extra, *methods), "--out", tmp_path / "o.jsonl", keep=[tmp_path]
        )
    assert re.search(SERVED + ".*" + expected, line) and re.search(FAULT, line), line


def test_an_answer_that_trickles_in_is_cut_off_at_the_timeout_in_all(tmp_path, capsys, data):
    with faulty_server.serving("slow_drip", drip_s=0.5) as url:
        start = time.monotonic()
        line = refused(
            capsys,
            "score",
            data,
            *server_args(url, "--server-timeout", "2", "--methods", "loss"),
            "--out",
            tmp_path / "o.jsonl",
            keep=[tmp_path],
        )
        elapsed = time.monotonic() - start
    assert "did not answer within 2 s (--server-timeout)" in line, line
    assert elapsed < 6, elapsed


@pytest.mark.parametrize(
    ("options", "extra"),
    [
        ({}, []),
        ({}, ["TOKENIZER", "--methods", "loss,zlib,minkpp_top5"]),
        ({"echo_only": True}, ["TOKENIZER", "--methods", "loss,zlib,minkpp_top5"]),
    ],
    ids=["server-tokenizer", "prompt-logprobs", "echo"],
)
def test_a_well_behaved_server_scores_with_finite_losses(options, extra, tmp_path, data, tiny_model_dir):
    extra = [f"--tokenizer={tiny_model_dir}" if arg == "TOKENIZER" else arg for arg in extra]
    methods = [] if "--methods" in extra else ["--methods", "loss,zlib,samia", "--samia-samples", "2"]
    out = tmp_path / "o.jsonl"
    with faulty_server.serving("good", **options) as url:
        assert run_cli("score", data, *server_args(url, *extra, *methods), "--out", out, "--quiet") == 0
    rows = read_jsonl(out)
    # The loss column is the negated mean loss (higher means a member): below 0 from log-probs below 0.
    assert len(rows) == 2 and all(math.isfinite(row["loss"]) and row["loss"] < 0 for row in rows)
    assert "NaN" not in out.read_text() and "Infinity" not in out.read_text()
    json.loads(out.read_text().splitlines()[0])


def test_a_log_prob_must_be_a_finite_number_at_most_zero_bar_rounding():
    assert logprob(-1) == -1.0 and logprob(-0.25) == -0.25 and logprob(-9999.0) == -9999.0
    assert logprob(LOGPROB_TOLERANCE / 2) == 0.0
    for value, expected in [
        (True, "not a number"),
        ("-1", "not a number"),
        (None, "not a number"),
        (10**400, "positive"),
        (-math.inf, "not finite"),
        (math.nan, "not finite"),
        (-1e300, "below -1e"),
        (-(10**400), "below -1e"),
        (2 * LOGPROB_TOLERANCE, "positive"),
    ]:
        with pytest.raises(Malformed, match=expected):
            logprob(value)
    with pytest.raises(Malformed, match="out of range"):
        json_int(2**40, "a token id")
