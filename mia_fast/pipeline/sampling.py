"""Sampled continuations whose draws do not depend on the batch, each prompt run forward once for all its samples.

Top-k (and top-p) sampling at temperature 1 is the argmax of the kept logits plus Gumbel noise. The noise of a
row is a counter-based hash of (the row's key, the step, the token id), so a text's samples are the
same whichever texts share its batch, whatever the batch size, and on CPU or GPU alike, up to the
rounding of the logits themselves; and it costs a few integer passes over the kept tokens only (the top k, or
the nucleus), drawn on the device.

Decoding is a loop of our own. Where the engine packs (a Llama-family model on CPU), it runs through the
packed decoder (:class:`~mia_fast.pipeline.decoding.PackedDecoding`): its oneDNN weights, each prompt's keys and
values kept once for all its samples. Elsewhere it runs through the model's own forward: the batch's distinct
prompts run once, left-padded to the longest, computing the logits of their last position only; their keys and
values are copied into the slots of their samples in a cache allocated once for the batch (prompt slots, then one
slot per step), and each step feeds every live row its last token at its own position, the model building its
masks (padding, sliding windows) from an attention mask over the filled slots. Either way the first token of each
sample is drawn from its prompt's logits, a row stops at an end token (dropped) or at its own budget, and once a
quarter of the batch has stopped, those rows leave it (the cache is compacted in place).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mia_fast.engines.passes import QUIET, Progress, SamplesReadout
from mia_fast.pipeline.decoding import ModelDecoding, PackedDecoding
from mia_fast.pipeline.packed import PackedDecoder

_UINT32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def row_key(seed: int, sample: int, prompt: str) -> tuple[int, int]:
    """Two 32-bit words keying the draws of sample ``sample`` of ``prompt`` under ``seed``."""
    digest = hashlib.blake2b(f"{seed}\0{sample}\0{prompt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:], "little")


def _times(x: torch.Tensor, factor: int) -> torch.Tensor:
    # x * factor mod 2^32 on int64 without overflow: two 16-bit halves of the factor, each product < 2^48.
    return ((((x * (factor >> 16)) & 0xFFFF) << 16) + x * (factor & 0xFFFF)) & _UINT32


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) of int64 tensors holding values below 2^32."""
    x = x ^ (x >> 16)
    x = _times(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _times(x, 0x846CA68B)
    return x ^ (x >> 16)


def _noise_at(keys: torch.Tensor, step: int, tokens: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise float32 of the rows' keys (int64 [rows, 2]) at ``step`` for ``tokens`` (int64 [rows or 1,
    n]): the entries of :func:`gumbel_noise` at those token ids."""
    x = _mix(tokens ^ keys[:, :1])
    x = _mix(x ^ ((keys[:, 1:] + step * _GOLDEN) & _UINT32))
    uniform = ((x >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))  # in (0, 1), never 0 or 1
    return -torch.log(-torch.log(uniform))


def gumbel_noise(keys: torch.Tensor, step: int, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise float32 [rows, vocab] from the rows' keys (int64 [rows, 2]) at ``step``."""
    return _noise_at(keys, step, torch.arange(vocab, device=keys.device, dtype=torch.int64)[None, :])


def _kept(logits: torch.Tensor, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 logits and the ids [rows, width] of the tokens each row keeps (-inf past a row's own) of
    ``logits`` (any float dtype): transformers' TopKLogitsWarper (the ``top_k`` highest logits and any tied with the
    k-th; 0: all), then its TopPLogitsWarper (the fewest of those, in its ascending sort, holding ``top_p`` of the
    probability), on float32 logits as its ``generate`` passes them."""
    rows, vocab = logits.shape
    if top_k:
        k = min(top_k, vocab)
        # 2k candidates hold every token tied with the k-th unless the 2k-th ties too: then all of them are taken.
        values, ids = logits.topk(min(2 * k, vocab))
        threshold = values[:, k - 1 : k]
        if values.shape[1] < vocab and bool((values[:, -1:] == threshold).any()):
            values, ids = logits.topk(int((logits >= threshold).sum(-1).max()))
        values = values.float().masked_fill(values < threshold, -torch.inf)
        if top_p >= 1:
            return values, ids
        scores = torch.full((rows, vocab), -torch.inf, device=logits.device).scatter_(1, ids, values)
    else:
        scores = logits.float()
        if top_p >= 1:
            return scores, torch.arange(vocab, device=logits.device).expand(rows, vocab)
    values, ids = scores.sort()
    removed = values.softmax(-1).cumsum(-1) <= 1 - top_p
    removed[:, -1] = False
    kept = int((~removed).sum(-1).max())
    return values[:, -kept:].masked_fill(removed[:, -kept:], -torch.inf), ids[:, -kept:]


def _draw(logits: torch.Tensor, keys: torch.Tensor, step: int, top_k: int, top_p: float) -> torch.Tensor:
    """The token of each row at ``step``: the argmax over its kept tokens of their logits, in float32, plus their
    noise; the lowest id among equal maxima."""
    values, ids = _kept(logits, top_k, top_p)
    # The noise is +inf where its uniform rounds to 1 (once in 2^24 draws): -inf + inf would be NaN, the maximum of
    # an argmax, drawing a token the warpers removed.
    totals = (values + _noise_at(keys, step, ids)).masked_fill(values == -torch.inf, -torch.inf)
    best = totals.max(-1, keepdim=True).values
    return ids.masked_fill(totals < best, logits.shape[-1]).min(-1).values


def plan_prompt_batches(row_lengths: Sequence[int], rows: Sequence[int], budget: int) -> list[list[int]]:
    """Groups prompts, each with ``rows[i]`` samples of ``row_lengths[i]`` tokens (prompt and continuation), longest
    first, so that a batch's rows x its longest row stays within ``budget``; a prompt beyond it gets a batch of its
    own."""
    batches: list[list[int]] = []
    used = 0
    for i in sorted(range(len(row_lengths)), key=lambda i: -row_lengths[i]):
        if batches and (used + rows[i]) * row_lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
            used += rows[i]
        else:
            batches.append([i])
            used = rows[i]
    return batches


@dataclass(frozen=True)
class SampleRequest:
    """What :func:`sample_texts` draws: ``readout``'s samples after each of ``prompts`` ((text index, prompt ids, new
    tokens), :meth:`~mia_fast.engines.base.ModelEngine.sample_prompts`), each sample keyed by its text's
    ``names[i]`` (prefix and text), in batches whose cache holds at most ``budget`` slots."""

    readout: SamplesReadout
    names: Sequence[str]
    prompts: Sequence[tuple[int, list[int], int]]
    budget: int


def sample_texts(
    model: torch.nn.Module | PackedDecoder, tokenizer, request: SampleRequest, progress: Progress = QUIET
) -> np.ndarray:
    """The samples ``request`` asks for, decoded: object [texts, count] of str ("" for a text with no prompt).
    A text's samples share one prefill, split only where they would not fit one batch; packed (``model`` a
    :class:`PackedDecoder`), a prompt's keys and values are kept once for all its samples, not once per sample.
    ``progress`` is planned the ids to run counted as if each sample ran its prompt, and advanced a batch's when
    it is done."""
    readout, packed = request.readout, isinstance(model, PackedDecoder)
    result = np.full((len(request.names), readout.count), "", dtype=object)
    # (text index, first sample, samples, prompt ids, new tokens)
    jobs = []
    for i, prompt, new_tokens in request.prompts:
        per_sample = new_tokens if packed else len(prompt) + new_tokens
        per_batch = max((request.budget - (len(prompt) if packed else 0)) // per_sample, 1)
        jobs.extend(
            (i, first, min(per_batch, readout.count - first), prompt, new_tokens)
            for first in range(0, readout.count, per_batch)
        )
    counts = [count for _, _, count, _, _ in jobs]
    costs = [count * (len(prompt) + new) for _, _, count, prompt, new in jobs]
    progress.planned(sum(costs))
    end_ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    # A row's share of its batch's cache: its prompt's slots, shared by the prompt's samples when packed.
    shares = [new + (-(-len(prompt) // count) if packed else len(prompt)) for _, _, count, prompt, new in jobs]
    for batch in plan_prompt_batches(shares, counts, request.budget):
        chosen = [jobs[b] for b in batch]
        continuations = generate(
            model,
            [prompt for *_, prompt, _ in chosen],
            [
                [row_key(readout.seed, j, request.names[i]) for j in range(first, first + count)]
                for i, first, count, *_ in chosen
            ],
            [new for *_, new in chosen],
            readout.top_k,
            end_ids,
            readout.top_p,
        )
        for (i, first, count, _, _), samples in zip(chosen, continuations):
            result[i, first : first + count] = [tokenizer.decode(ids, skip_special_tokens=True) for ids in samples]
        progress.advanced(sum(costs[b] for b in batch))
    return result


@torch.inference_mode()
def generate(
    model: torch.nn.Module | PackedDecoder,
    prompts: Sequence[list[int]],
    keys: Sequence[Sequence[tuple[int, int]]],
    new_tokens: Sequence[int],
    top_k: int,
    end_ids: Sequence[int],
    top_p: float = 1.0,
) -> list[list[list[int]]]:
    """``len(keys[p])`` samples of each prompt ``prompts[p]`` (ids, not empty), sample s drawn with ``keys[p][s]``:
    ``new_tokens[p]`` ids (fewer where an end token comes first; the end token is dropped) among the ``top_k``
    likeliest tokens (0: all), then the fewest of those holding ``top_p`` of the probability. Each prompt runs
    forward once, through the packed decoder if ``model`` is one, else through the model's own forward."""
    samples = [len(sample_keys) for sample_keys in keys]
    if isinstance(model, PackedDecoder):
        decoding: PackedDecoding | ModelDecoding = PackedDecoding(model, prompts, samples, max(new_tokens))
    else:
        decoding = ModelDecoding(model, prompts, samples, max(map(len, prompts)) + max(new_tokens))
    logits = decoding.logits
    device = logits.device
    row_budgets = [new for new, count in zip(new_tokens, samples) for _ in range(count)]
    row_keys = torch.tensor([key for sample_keys in keys for key in sample_keys], dtype=torch.int64, device=device)
    ends = torch.tensor(list(end_ids), dtype=torch.int64, device=device)
    generated = torch.zeros((len(row_budgets), max(new_tokens)), dtype=torch.int64, device=device)
    rows = torch.arange(len(row_budgets), device=device)  # the original index of each row of the batch
    budgets, stopped = row_budgets, [False] * len(row_budgets)
    for step in range(max(new_tokens)):
        tokens = _draw(logits, row_keys, step, top_k, top_p)
        generated[rows, step] = tokens
        ended = torch.isin(tokens, ends).tolist() if end_ids else [False] * len(stopped)
        stopped = [s or e or step + 1 >= b for s, e, b in zip(stopped, ended, budgets)]
        if all(stopped):
            break
        if 4 * sum(stopped) >= len(stopped):
            live = [i for i, s in enumerate(stopped) if not s]
            keep = torch.tensor(live, device=device)
            decoding.keep_rows(keep)
            rows, row_keys, tokens = rows[keep], row_keys[keep], tokens[keep]
            budgets, stopped = [budgets[i] for i in live], [False] * len(live)
        logits = decoding.step(tokens)
    continuations: list[list[list[int]]] = [[] for _ in prompts]
    row_prompt = [p for p, count in enumerate(samples) for _ in range(count)]
    for p, budget, row in zip(row_prompt, row_budgets, generated.tolist()):
        row = row[:budget]
        end = next((i for i, token in enumerate(row) if token in end_ids), len(row))
        continuations[p].append(row[:end])
    return continuations
