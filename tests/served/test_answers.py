"""A server's answers read into a row's results (served.answers): vLLM's ``prompt_logprobs`` (with or
without ranks) and OpenAI's ``echo``, checked as they are read; the choices of an answer; its fingerprint."""

import numpy as np
import pytest

from mia_fast.served.answers import (
    answer_choice,
    answer_choices,
    check_length,
    parse_echo,
    parse_prompt_logprobs,
    server_fingerprint,
    top_of,
)
from mia_fast.served.client import Malformed
from mia_fast.tokens.tokenize import Row

# Ids 5, 6, 7; the first is context: 6 and 7 are scored.
ROW = Row(text_index=0, ids=[5, 6, 7], first_scored=1)
PROMPT_LOGPROBS = {
    "prompt_logprobs": [
        None,
        {"6": {"logprob": -0.5, "rank": 1}, "9": {"logprob": -1.5, "rank": 2}},
        {"7": {"logprob": -2.0, "rank": 3}, "8": {"logprob": -0.1, "rank": 1}, "9": {"logprob": -0.7, "rank": 2}},
    ]
}
ECHO = {
    "logprobs": {
        "tokens": ["a", "b", "c", "d"],  # the prompt's three, and the one generated
        "token_logprobs": [None, -0.5, -2.0, -0.3],
        "top_logprobs": [None, {"b": -0.5, "x": -1.5}, {"c": -2.0, "y": -0.1, "z": -0.7}, {"d": -0.3}],
    }
}


def assert_result(got, logp, top, in_top):
    assert got["target_ids"].tolist() == [6, 7] and got["target_ids"].dtype == np.int64
    np.testing.assert_array_equal(got["logp"], np.array(logp, np.float32))
    np.testing.assert_array_equal(got["top"], np.array(top, np.float32))
    assert got["target_in_top"].tolist() == in_top


def test_prompt_logprobs_with_ranks_give_each_targets_logprob_and_the_top_by_rank():
    # 7 ranks third: outside the top 2, which are 8 and 9.
    got = parse_prompt_logprobs(ROW, PROMPT_LOGPROBS, top=2)
    assert_result(got, [-0.5, -2.0], [[-0.5, -1.5], [-0.1, -0.7]], [True, False])


def test_prompt_logprobs_without_top_give_the_logprobs_alone():
    got = parse_prompt_logprobs(ROW, PROMPT_LOGPROBS, top=0)
    assert got["logp"].tolist() == [-0.5, -2.0] and got["top"].shape == (2, 1) and np.isnan(got["top"]).all()
    assert got["target_in_top"].tolist() == [False, False]


def test_without_ranks_the_target_is_the_entry_added_beyond_the_top():
    entry = {"7": {"logprob": -2.0}, "8": {"logprob": -0.1}, "9": {"logprob": -0.7}}
    assert top_of(entry, "7", 2) == ([-0.1, -0.7], False)
    assert top_of(entry, "7", 3) == ([-0.1, -0.7, -2.0], True)


def test_a_prompt_logprobs_answer_of_the_wrong_length_or_without_the_target_is_malformed():
    with pytest.raises(Malformed, match="^2 log-probs for a prompt of 3 tokens$"):
        parse_prompt_logprobs(ROW, {"prompt_logprobs": PROMPT_LOGPROBS["prompt_logprobs"][:2]}, top=2)
    with pytest.raises(Malformed, match="^no log-probs for a prompt of 3 tokens$"):
        parse_prompt_logprobs(ROW, {}, top=2)
    entries = [None, {"9": {"logprob": -1.5}}, PROMPT_LOGPROBS["prompt_logprobs"][2]]
    with pytest.raises(Malformed, match="^no log-prob of the prompt's token 6 at position 1$"):
        parse_prompt_logprobs(ROW, {"prompt_logprobs": entries}, top=2)
    with pytest.raises(Malformed, match="a positive log-prob"):
        parse_prompt_logprobs(ROW, {"prompt_logprobs": [None, {"6": {"logprob": 0.5}}, {"7": {"logprob": -1}}]}, 0)


def test_an_echo_gives_each_targets_logprob_and_its_top_without_an_added_target():
    # Position 2's entry holds 3 for a top of 2: its token "c" was added, so it is not among the top.
    got = parse_echo(ROW, ECHO, top=2)
    assert_result(got, [-0.5, -2.0], [[-0.5, -1.5], [-0.1, -0.7]], [True, False])


def test_an_echo_shorter_than_the_prompt_is_malformed():
    short = {"logprobs": {**ECHO["logprobs"], "token_logprobs": [None, -0.5]}}
    with pytest.raises(Malformed, match="^2 log-probs for a prompt of 3 tokens$"):
        parse_echo(ROW, short, top=0)
    with pytest.raises(Malformed, match="^no log-probs for a prompt of 3 tokens$"):
        parse_echo(ROW, {}, top=0)


def test_an_echo_may_hold_more_than_the_prompt_but_prompt_logprobs_not():
    check_length([None] * 4, ROW, echoed=True)
    with pytest.raises(Malformed, match="^4 log-probs"):
        check_length([None] * 4, ROW)


def test_choices_are_found_by_their_own_index():
    choices = answer_choices({"choices": [{"index": 1, "text": "b"}, {"index": 0, "text": "a"}]})
    assert sorted(choices) == [0, 1] and answer_choice(choices, 1)["text"] == "b"
    with pytest.raises(Malformed, match="^no choice 2$"):
        answer_choice(choices, 2)
    with pytest.raises(Malformed, match=r"^choices that is not a list \(None\)$"):
        answer_choices({})
    with pytest.raises(Malformed, match="a choice's index that is not an integer"):
        answer_choices({"choices": [{"index": "0"}]})


def test_the_fingerprint_is_the_servers_where_it_gives_one():
    assert server_fingerprint({"system_fingerprint": "vllm-0.9"}) == "vllm-0.9"
    assert server_fingerprint({}) is None
    with pytest.raises(Malformed, match="a system_fingerprint that is not a string"):
        server_fingerprint({"system_fingerprint": 3})
