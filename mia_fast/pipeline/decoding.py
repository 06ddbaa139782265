"""The decoders sampling steps through, a token per row per step, after prompts each run forward once for all the
rows sampled after them: :class:`PackedDecoding` through the packed decoder's layers (its oneDNN weights, each
prompt's keys and values kept once for all its rows), :class:`ModelDecoding` through the model's own forward (any
decoder transformers runs: the prompts left-padded to the longest, their keys and values copied into the slots of
their rows in a cache allocated once for the batch). Both give the first draw's logits (``logits``), step
(``step``) and drop stopped rows in place (``keep_rows``); :func:`mia_fast.pipeline.sampling.generate` drives them.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from mia_fast.pipeline.attention import attention_with_lse
from mia_fast.pipeline.packed import PackedDecoder


class _RowsLayer(CacheLayerMixin):
    """One layer's keys and values of every row of the batch, in buffers of the cache's capacity."""

    def __init__(self, cache: _RowsCache) -> None:
        super().__init__()
        self.cache = cache

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        rows, capacity = sum(self.cache.samples), self.cache.capacity
        self.keys = key_states.new_empty((rows, key_states.shape[1], capacity, key_states.shape[3]))
        self.values = value_states.new_empty((rows, value_states.shape[1], capacity, value_states.shape[3]))
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys is None:  # the prefill, a row per prompt: the rows of its samples get a copy
            self.lazy_initialization(key_states, value_states)
            width, first = key_states.shape[2], 0
            for prompt, samples in enumerate(self.cache.samples):
                self.keys[first : first + samples, :, :width] = key_states[prompt]
                self.values[first : first + samples, :, :width] = value_states[prompt]
                first += samples
            return key_states, value_states
        start = self.cache.filled
        end = start + key_states.shape[2]
        self.keys[:, :, start:end] = key_states
        self.values[:, :, start:end] = value_states
        return self.keys[:, :, :end], self.values[:, :, :end]

    def keep_rows(self, rows: torch.Tensor) -> None:
        count, filled = rows.numel(), self.cache.filled
        self.keys[:count, :, :filled] = self.keys[rows, :, :filled]
        self.values[:count, :, :filled] = self.values[rows, :, :filled]
        self.keys, self.values = self.keys[:count], self.values[:count]

    def get_mask_sizes(self, query: int | torch.Tensor) -> tuple[int, int]:
        # transformers 5 passes the query's length, 4.x its cache positions.
        return self.cache.filled + (query if isinstance(query, int) else len(query)), 0

    def get_seq_length(self) -> int:
        return self.cache.filled

    def get_max_length(self) -> int:
        return self.cache.capacity

    get_max_cache_shape = get_max_length  # its name in transformers 4.x


class _RowsCache(Cache):
    """The cache of a batch of sampled rows, ``samples[p]`` consecutive rows for prompt p; ``filled`` slots of
    ``capacity`` hold keys and values, the same slot of every row filled at each step."""

    def __init__(self, layers: int, samples: list[int], capacity: int) -> None:
        self.samples = samples
        self.capacity = capacity
        self.filled = 0
        super().__init__(layers=[_RowsLayer(self) for _ in range(layers)])

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps the rows ``rows`` (int64, increasing) of the batch, in that order, in place."""
        for layer in self.layers:
            layer.keep_rows(rows)


def _cache_argument(model: torch.nn.Module) -> str:
    """The name under which the model's forward takes its cache (``past_key_values`` before transformers 5)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class ModelDecoding:
    """Rows sampled after prompts, decoded a token a step through the model's own forward (any decoder transformers
    runs), as :class:`PackedDecoding` decodes them through the packed one: the prompts
    run once, left-padded to the longest, their last logits giving each row's first draw (:attr:`logits`)."""

    def __init__(
        self, model: torch.nn.Module, prompts: Sequence[list[int]], samples: Sequence[int], capacity: int
    ) -> None:
        self.model = model
        device = next(model.parameters()).device
        self.cache = _RowsCache(model.config.get_text_config().num_hidden_layers, list(samples), capacity)
        self.cache_argument = _cache_argument(model)
        width = max(map(len, prompts))
        ids = torch.zeros((len(prompts), width), dtype=torch.int64)
        slots = torch.zeros((len(prompts), capacity), dtype=torch.int64)
        for p, prompt in enumerate(prompts):
            ids[p, width - len(prompt) :] = torch.tensor(prompt)
            slots[p, width - len(prompt) : width] = 1
        positions = (slots[:, :width].cumsum(-1) - 1).clamp(min=0)
        last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        logits = model(
            input_ids=ids.to(device),
            attention_mask=slots[:, :width].to(device),
            position_ids=positions.to(device),
            use_cache=True,
            **{self.cache_argument: self.cache},
            **last_only,
        ).logits[:, -1]
        self.cache.filled = width
        row_prompt = torch.repeat_interleave(torch.arange(len(prompts)), torch.tensor(samples)).to(device)
        self.logits = logits.index_select(0, row_prompt)
        # Which of the cache's slots hold a token, and the position of each row's next token.
        self.slots = slots.to(device).index_select(0, row_prompt)
        self.positions = (positions[:, -1].to(device) + 1).index_select(0, row_prompt)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps the rows ``rows`` (int64, increasing) of the batch, in that order, in place."""
        self.cache.keep_rows(rows)
        self.slots, self.positions = self.slots[rows], self.positions[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The logits [rows, vocab] after each row's next token ``tokens`` [rows]."""
        self.slots[:, self.cache.filled] = 1
        logits = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.slots[:, : self.cache.filled + 1],
            position_ids=self.positions[:, None],
            use_cache=True,
            **{self.cache_argument: self.cache},
        ).logits[:, -1]
        self.cache.filled += 1
        self.positions = self.positions + 1
        return logits


class PackedDecoding:
    """Rows sampled after prompts, decoded a token a step through a :class:`PackedDecoder`: ``samples[p]``
    consecutive rows follow prompt p, and each row draws up to ``new_tokens`` tokens.

    The prompts run once, packed; their last logits give each row's first draw (:attr:`logits`). A prompt's keys
    and values are kept once, not once per row: a row's attention is split in two, its prompt's part computed for
    all the rows of that prompt at once, its own tokens' part row by row, and the two merged by their log-sum-exps.
    Every row of a step reads its prompt's keys once per prompt, so a step moves about a tenth of the memory a
    cache copied into every row would (10 samples), and the generated slots are one allocation for the batch."""

    def __init__(
        self, decoder: PackedDecoder, prompts: Sequence[Sequence[int]], samples: Sequence[int], new_tokens: int
    ) -> None:
        self.decoder = decoder
        device = decoder.device
        lengths = [len(p) for p in prompts]
        width, total = max(lengths), sum(lengths)
        self.row_prompt = torch.repeat_interleave(torch.arange(len(prompts)), torch.tensor(samples)).to(device)
        starts = [0, *itertools.accumulate(lengths)]
        # Each prompt's ids padded to the widest; a pad slot takes the zero row appended after the packed ids.
        gather = torch.full((len(prompts), width), total, dtype=torch.long)
        for p, n in enumerate(lengths):
            gather[p, :n] = torch.arange(starts[p], starts[p + 1])
        gather = gather.reshape(-1).to(device)
        kept: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.inference_mode():
            ids = torch.tensor([t for p in prompts for t in p])
            x = decoder.residual(ids, lengths, [None] * len(prompts), kept)
            last = torch.tensor(starts[1:], device=device) - 1
            self.logits = decoder.logits(decoder.final_norm(x.index_select(0, last))).index_select(0, self.row_prompt)

            def padded(t: torch.Tensor) -> torch.Tensor:
                t = t.float()
                rows = torch.cat([t, t.new_zeros(1, *t.shape[1:])]).index_select(0, gather)
                return rows.view(len(prompts), width, *t.shape[1:]).transpose(1, 2).contiguous()

            self.prompt_keys = [padded(k) for k, _ in kept]
            self.prompt_values = [padded(v) for _, v in kept]
        self.prompt_bias = torch.zeros((len(prompts), 1, 1, width), device=device)
        for p, n in enumerate(lengths):
            self.prompt_bias[p, ..., n:] = -torch.inf
        shape = (len(self.row_prompt), decoder.kv_heads, new_tokens, decoder.head_dim)
        self.keys = [torch.empty(shape, device=device) for _ in kept]
        self.values = [torch.empty(shape, device=device) for _ in kept]
        self.generated = 0
        self.positions = torch.tensor(lengths, device=device).index_select(0, self.row_prompt)
        self._group_rows()

    def _group_rows(self) -> None:
        """Lays the batch's rows out [prompt, sample] (``members``, a missing sample taking row 0) for the prompts'
        part of the attention, and where each row sits in that layout (``row_slot``)."""
        counts = torch.bincount(self.row_prompt, minlength=len(self.prompt_bias))
        self.most_samples = int(counts.max())
        first_row = counts.cumsum(0) - counts
        rank = torch.arange(len(self.row_prompt), device=counts.device) - first_row[self.row_prompt]
        self.row_slot = self.row_prompt * self.most_samples + rank
        self.members = torch.zeros(len(counts) * self.most_samples, dtype=torch.long, device=counts.device)
        self.members[self.row_slot] = torch.arange(len(self.row_prompt), device=counts.device)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps the rows ``rows`` (int64, increasing) of the batch, in that order, in place; a prompt left with
        no row is dropped."""
        count, filled = rows.numel(), self.generated
        for cache in (*self.keys, *self.values):
            cache[:count, :, :filled] = cache[rows, :, :filled]
        self.keys = [k[:count] for k in self.keys]
        self.values = [v[:count] for v in self.values]
        self.positions = self.positions[rows]
        prompts, self.row_prompt = torch.unique(self.row_prompt[rows], return_inverse=True)
        if len(prompts) < len(self.prompt_bias):
            self.prompt_keys = [k[prompts] for k in self.prompt_keys]
            self.prompt_values = [v[prompts] for v in self.prompt_values]
            self.prompt_bias = self.prompt_bias[prompts]
        self._group_rows()

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The logits [rows, vocab] after each row's next token ``tokens`` [rows]."""
        decoder, slot = self.decoder, self.generated
        rows, prompts = len(tokens), len(self.prompt_bias)
        kv_heads, group, head_dim = decoder.kv_heads, decoder.heads // decoder.kv_heads, decoder.head_dim

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            q = q.float()  # a step's few queries attend in fp32, to keys and values kept in fp32
            keys, values = self.keys[index], self.values[index]
            keys[:, :, slot] = k
            values[:, :, slot] = v
            by_prompt = q.index_select(0, self.members).view(prompts, self.most_samples, kv_heads, group, head_dim)
            out_prompt, lse_prompt = attention_with_lse(
                by_prompt.transpose(1, 2).reshape(prompts, kv_heads, -1, head_dim),
                self.prompt_keys[index],
                self.prompt_values[index],
                self.prompt_bias,
            )
            out_prompt = out_prompt.view(prompts, kv_heads, self.most_samples, group, head_dim).transpose(1, 2)
            out_prompt = out_prompt.reshape(-1, kv_heads, group, head_dim).index_select(0, self.row_slot)
            lse_prompt = lse_prompt.view(prompts, kv_heads, self.most_samples, group).transpose(1, 2)
            lse_prompt = lse_prompt.reshape(-1, kv_heads, group).index_select(0, self.row_slot)
            out_own, lse_own = attention_with_lse(
                q.view(rows, kv_heads, group, head_dim), keys[:, :, : slot + 1], values[:, :, : slot + 1]
            )
            lse = torch.logaddexp(lse_prompt, lse_own)
            out = out_prompt.mul_((lse_prompt - lse).exp_().unsqueeze(-1))
            return out.add_(out_own.mul_((lse_own - lse).exp_().unsqueeze(-1))).view(rows, -1)

        x = decoder.run_layers(tokens, self.positions, attend)
        self.generated += 1
        self.positions = self.positions + 1
        return decoder.logits(decoder.final_norm(x))
