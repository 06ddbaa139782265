"""Reading a server's answers for a prompt's log-probs, each checked as it is read (``client``'s ``json_*``
and ``logprob``): vLLM's ``prompt_logprobs`` and OpenAI's ``echo`` with ``logprobs``, each made into a row's target
ids, log-probs and top log-probs; the choices of a completions answer by their own index; the server's fingerprint.
A malformed answer is :class:`~mia_fast.served.client.Malformed`, one line naming the server's fault.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mia_fast.served.client import Malformed, json_int, json_list, json_object, json_text, logprob
from mia_fast.tokens.tokenize import Row


def parse_prompt_logprobs(row: Row, choice: dict[str, Any], top: int) -> dict[str, np.ndarray]:
    entries = choice.get("prompt_logprobs")
    check_length(entries, row)
    scored = range(row.first_scored, len(row.ids))
    logp, values, in_top = [], np.full((len(scored), max(top, 1)), np.nan, np.float32), []
    for j, position in enumerate(scored):
        entry, target = json_object(entries[position], "a prompt_logprobs entry"), str(row.ids[position])
        if target not in entry:
            raise Malformed(f"no log-prob of the prompt's token {target} at position {position}")
        logp.append(logprob(json_object(entry[target], "a log-prob entry").get("logprob")))
        if top:
            ranked, target_in_top = top_of(entry, target, top)
            values[j, : len(ranked)] = ranked
            in_top.append(target_in_top)
    return row_result(row, logp, values, in_top, top)


def parse_echo(row: Row, choice: dict[str, Any], top: int) -> dict[str, np.ndarray]:
    logprobs = json_object(choice.get("logprobs") or {}, "logprobs")
    token_logprobs, tokens = logprobs.get("token_logprobs"), json_list(logprobs.get("tokens") or [], "tokens")
    check_length(token_logprobs, row, echoed=True)
    scored = range(row.first_scored, len(row.ids))
    logp = [logprob(token_logprobs[position]) for position in scored]
    values, in_top = np.full((len(scored), max(top, 1)), np.nan, np.float32), []
    if top:
        tops = json_list(logprobs.get("top_logprobs") or [], "top_logprobs")
        check_length(tops, row, echoed=True)
        for j, position in enumerate(scored):
            entry = dict(json_object(tops[position] or {}, "a top_logprobs entry"))
            if len(entry) > top:  # the target was added to the top K
                entry.pop(json_text(tokens[position], "a token") if position < len(tokens) else None, None)
                in_top.append(False)
            else:
                in_top.append(True)
            ranked = sorted((logprob(value) for value in entry.values()), reverse=True)[:top]
            values[j, : len(ranked)] = ranked
    return row_result(row, logp, values, in_top, top)


def check_length(entries: Any, row: Row, *, echoed: bool = False) -> None:
    entries = entries if isinstance(entries, list) else None
    # An echo also holds the generated token.
    expected = entries is not None and (len(entries) >= len(row.ids) if echoed else len(entries) == len(row.ids))
    if not expected:
        got = len(entries) if entries is not None else "no"
        raise Malformed(f"{got} log-probs for a prompt of {len(row.ids)} tokens")


def answer_choices(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The choices of a completions answer by their own index (one per prompt, or n samples of one prompt)."""
    choices = {}
    for choice in json_list(answer.get("choices"), "choices"):
        choice = json_object(choice, "a choice")
        choices[json_int(choice.get("index"), "a choice's index")] = choice
    return choices


def answer_choice(choices: dict[int, dict[str, Any]], index: int) -> dict[str, Any]:
    if index not in choices:
        raise Malformed(f"no choice {index}")
    return choices[index]


def server_fingerprint(answer: dict[str, Any]) -> str | None:
    """The server's build, where it gives one (it goes into every cache key and provenance)."""
    fingerprint = answer.get("system_fingerprint")
    return None if fingerprint is None else json_text(fingerprint, "a system_fingerprint")


def top_of(entry: dict[str, Any], target: str, top: int) -> tuple[list[float], bool]:
    """The top log-probs of one prompt_logprobs entry, likeliest first, and whether the target is among them: by
    rank where the server gives ranks, else the target is the one added when the entry holds more than ``top``."""
    options = {token: json_object(option, "a log-prob entry") for token, option in entry.items()}
    values = {token: logprob(option.get("logprob")) for token, option in options.items()}
    if "rank" in options[target]:
        ranks = {token: json_int(option.get("rank", top + 1), "a rank", minimum=1) for token, option in options.items()}
        ranked = [values[token] for token, rank in ranks.items() if rank <= top]
        return sorted(ranked, reverse=True)[:top], ranks[target] <= top
    extra = len(entry) > top
    ranked = [value for token, value in values.items() if not (extra and token == target)]
    return sorted(ranked, reverse=True)[:top], not extra


def row_result(row: Row, logp: list[float], top: np.ndarray, in_top: list[bool], k: int) -> dict[str, np.ndarray]:
    return {
        "target_ids": np.asarray(row.ids[row.first_scored :], dtype=np.int64),
        "logp": np.asarray(logp, dtype=np.float32),
        "top": top,
        "target_in_top": np.asarray(in_top if k else [False] * len(logp), dtype=bool),
    }
