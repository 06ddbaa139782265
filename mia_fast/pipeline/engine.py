"""The forward engine of one model: texts -> token ids -> batched forward -> TokenStats (or hidden states,
sampled continuations, gradient norms: the readouts of ``passes``).

Texts are tokenized with the start-token rule of DESIGN §2, placed after their context (a pass's
prefix, tokenized on its own and never scored), split into sliding windows when longer than the
model context, sorted by length and batched under a token budget. The forward is the packed decoder
(pad-free, each prefix computed once) where the model's family is supported, on every device, else the
model's own forward on right-padded rows (``mia_fast.pipeline.forward_path`` decides). Logits are never
held in fp32 for a whole batch: when the model's head is a plain linear layer they are computed from
hidden states a chunk of positions at a time, otherwise the model's own logits are reduced a chunk at a
time. A pass moves each batch's ids to the device once (from pinned memory on a GPU) and waits for the
device once, at its end.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
import torch

from mia_fast.engines.base import SPREAD_WEIGHTS, WEIGHTS_HERE, ModelEngine
from mia_fast.engines.batching import plan_batches
from mia_fast.engines.passes import (
    QUIET,
    GradientNormReadout,
    HiddenStatesReadout,
    Prefixes,
    Progress,
    SamplesReadout,
    Texts,
    TopLogprobsReadout,
)
from mia_fast.engines.stats import TOKEN_STATS_COLUMNS, TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.ops.token_stats import linear_token_stats, token_stats
from mia_fast.pipeline.choices import DEFAULT_BATCH_TOKENS
from mia_fast.pipeline.device import for_device, to_device
from mia_fast.pipeline.first_use import proven_backend, proven_path
from mia_fast.pipeline.forward_path import ALONE_FROM, ForwardPath, choose_forward
from mia_fast.pipeline.models import LoadedModel
from mia_fast.pipeline.packed import PackedDecoder
from mia_fast.pipeline.rotary import batches_alone, pin
from mia_fast.pipeline.spread import onloaded
from mia_fast.tokens.fingerprint import tokenizer_fingerprint
from mia_fast.tokens.tokenize import Row, per_text

# Bytes of fp32 logits reduced at once: cache-sized on CPU, where the reference's temporaries must
# stay in cache (measured 2.5x faster than 16 MB at V = 151936), large on GPU.
DEFAULT_CHUNK_BYTES = {"cpu": 4 << 20, "cuda": 512 << 20}
# Rows the output head projects at once, at the least: its weight (545 MB for a 151936 x 896 head in
# fp32) is read once per projection, so a few dozen rows at a time would make the head memory-bound.
# The projection buffer is then at most MIN_HEAD_ROWS x V floats.
MIN_HEAD_ROWS = 512
# Sampling decodes one token per row per step, so a batch holds this many times the forward budget: more rows
# share each read of the weights (on CPU, SmolLM2-135M's samples ran 1.9x the tokens/s at 16 as at 4, and in bf16
# 1.25-1.35x at 32 as at 16, where its 160 rows fit one batch). Their cache must still fit in memory: rows x
# (longest prompt + continuation) slots, or packed, a slot per prompt id once and rows x continuation slots.
SAMPLE_BUDGET_FACTOR = {"cpu": 32, "cuda": 4}


class StatsEngine(ModelEngine):
    """Runs one model over texts; ``backend`` picks the Triton kernels or the torch reference."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        prepend_start: bool = True,
        batch_tokens: int | None = None,
        max_length: int | None = None,
        chunk_bytes: int | None = None,
        use_hidden_states: bool = True,
        backend: str = "auto",
        forward: str = "auto",
    ) -> None:
        batch_tokens = batch_tokens or for_device(DEFAULT_BATCH_TOKENS, loaded.device)
        chunk_bytes = chunk_bytes or for_device(DEFAULT_CHUNK_BYTES, loaded.device)
        if batch_tokens < 1:
            raise MiaFastError(f"batch_tokens must be positive, got {batch_tokens}")
        context = loaded.context_length
        if max_length is None:
            max_length = context or 2048
        elif context is not None and max_length > context:
            raise MiaFastError(f"max_length {max_length} exceeds the model context {context}")
        self.loaded = loaded
        self.limits = WEIGHTS_HERE if loaded.spread is None else SPREAD_WEIGHTS  # spread: fewer readouts
        self.prepend_start = prepend_start
        self.batch_tokens = batch_tokens
        self.max_length = max_length
        self.stats_rows = max(1, chunk_bytes // (4 * loaded.vocab_size))
        self.chunk_rows = max(self.stats_rows, MIN_HEAD_ROWS)
        self.head = loaded.plain_linear_head() if use_hidden_states else None
        # What the device's plan says runs there, each part checked on first use where no test here runs it.
        self.backend, self.kernels_set_aside = proven_backend(backend, loaded)
        # The packed decoder is made at the first pass, and again whenever the model's weights have changed since.
        self._packed: PackedDecoder | None = None
        self.use_forward(forward)
        tokenizer = loaded.tokenizer
        self.pad_id = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)

    @property
    def device(self) -> torch.device:
        return self.loaded.device

    def use_forward(self, forward: str) -> None:
        """Runs the forward passes from now on as ``forward`` says (``auto``, ``packed`` or ``model``: see
        :mod:`mia_fast.pipeline.forward_path`)."""
        path = choose_forward(
            self.loaded.model, self.device, self.max_length, forward, self.backend, plain_head=self.head is not None
        )
        self.path: ForwardPath
        self.path, decoder = proven_path(path, self.loaded)
        self._packed = decoder or self._packed
        self.forward = forward

    @property
    def packs(self) -> bool:
        """Whether the pad-free packed decoder runs this engine's forward passes."""
        return self.path.packed

    def cache_settings(self) -> dict[str, Any]:
        """Everything that changes a token's statistics, for the stats cache: the same for the same model
        wherever it is loaded from."""
        loaded = self.loaded
        return {
            "weights": loaded.weights_fingerprint(),
            "tokenizer": tokenizer_fingerprint(loaded.tokenizer),
            "dtype": str(loaded.dtype),
            "device": loaded.device.type,
            "prepend_start": self.prepend_start,
            "max_length": self.max_length,
            "backend": self.backend,
            "fused_head": self.head is not None,
            "packed": self.packs,
            # Named only where it is fp32, so every setting from before it was recorded keeps its cache.
            **({"residual": "fp32"} if self.path.wide_residual else {}),
        }

    def provenance(self) -> dict[str, Any]:
        """What a scores file records of this engine, and the path its forward takes."""
        set_aside = {"kernels_set_aside": self.kernels_set_aside} if self.kernels_set_aside else {}
        adapter = {"adapter": self.loaded.adapter} if self.loaded.adapter else {}  # a peft adapter merged in
        return {**super().provenance(), "forward": self.path.describe(), **set_aside, **adapter}

    def model_name(self) -> str:
        return self.loaded.name

    def derive(self, loaded: LoadedModel) -> StatsEngine:
        """An engine set up as this one (start token, batch budget, window, back end, stats cache) over ``loaded``,
        a model made from this one's weights (``methods.derived.DERIVED_MODELS``)."""
        engine = StatsEngine(
            loaded,
            prepend_start=self.prepend_start,
            batch_tokens=self.batch_tokens,
            max_length=self.max_length,
            backend=self.backend,
            forward=self.forward,
        )
        if self._cache_place is not None:
            engine.use_cache(*self._cache_place)
        return engine

    def _missing_stats(self, texts: Texts, prefixes: Sequence[str], progress: Progress) -> TokenStats:
        rows = self.rows(texts, prefixes)
        # Packed, a row's prefix runs once (PackedDecoder.context) and the row runs its text's ids only.
        lengths = [len(r.ids) - r.context if self.packs else len(r.ids) for r in rows]
        progress.planned(sum(lengths))
        # Each batch's statistics stay on the device until the last batch is queued: one host sync per pass, so
        # a GPU never waits for the host to build the next batch.
        order: list[int] = []
        outputs: list[tuple[torch.Tensor, ...]] = []
        alone_from = None if self.packs else ALONE_FROM
        for batch in self._batches(lengths, packed=self.packs, alone_from=alone_from):
            order.extend(batch)
            outputs.append(self._run_batch([rows[i] for i in batch]))
            progress.advanced(sum(lengths[i] for i in batch))
        columns = [torch.cat(parts).cpu().numpy() for parts in zip(*outputs)] or [np.zeros(0, np.float32)] * 4
        targets = [np.asarray(rows[i].ids[rows[i].first_scored :], dtype=np.int64) for i in order]
        results: list[dict[str, np.ndarray]] = [{}] * len(rows)
        for i, t, *values in zip(
            order, targets, *(np.split(a, np.cumsum([len(t) for t in targets])[:-1]) for a in columns)
        ):
            results[i] = {"target_ids": t, **dict(zip(TOKEN_STATS_COLUMNS, values))}
        return TokenStats.from_texts(per_text(rows, results, len(texts)))

    def _rotary(self) -> torch.nn.Module | None:
        """The model's rotary embedding, which :func:`~mia_fast.pipeline.rotary.batches_alone` pins per batch."""
        return getattr(self.loaded.model.base_model, "rotary_emb", None)

    def _batches(
        self, lengths: Sequence[int], *, packed: bool = False, alone_from: int | None = None
    ) -> Iterator[list[int]]:
        """Batches of rows under the token budget (:func:`plan_batches`). Packed, every segment is turned with its own
        rotary frequencies (PackedDecoder); padded, a batch holds texts that get the same ones alone."""
        plan = functools.partial(plan_batches, batch_tokens=self.batch_tokens, packed=packed, alone_from=alone_from)
        return batches_alone(None if packed else self._rotary(), lengths, plan)

    def _padded(self, rows: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for row, ids in enumerate(rows):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        return to_device(input_ids, self.loaded.input_device), to_device(attention_mask, self.loaded.input_device)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return to_device(tensor, self.loaded.device)

    def _run_batch(self, rows: list[Row]) -> tuple[torch.Tensor, ...]:
        """log p(target), vocabulary mean and variance of log p and max log p at every scored position of the rows,
        in order, on the device."""
        return self._run_packed(rows) if self.packs else self._run_padded(rows)

    def _scored(self, rows: list[Row], starts: Sequence[int], skipped: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """(positions, targets) on the device, in one copy: where in the forward's output each row's scored ids are
        predicted (row i's output starts at ``starts[i]`` and begins ``skipped[i]`` ids into it) and those ids."""
        # Position p predicts the id at p + 1: score targets ids[first_scored:] of each row.
        index = [
            start - skip + np.arange(r.first_scored - 1, len(r.ids) - 1)
            for r, start, skip in zip(rows, starts, skipped)
        ]
        targets = [np.asarray(r.ids[r.first_scored :], dtype=np.int64) for r in rows]
        both = np.concatenate([*index, *targets]).astype(np.int64)
        return self._to_device(torch.from_numpy(both)).chunk(2)

    def _head_stats(self, selected: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Token statistics of the head's logits at final hidden states ``selected``, a chunk of positions at a time."""
        with onloaded(self.head):  # a head a device map keeps offloaded, read in
            return linear_token_stats(
                selected.to(self.head.weight.dtype),
                self.head.weight,
                targets,
                self.head.bias,
                chunk_rows=self.chunk_rows,
                stats_rows=self.stats_rows,
                backend=self.backend,
            )

    @torch.inference_mode()
    def _run_padded(self, rows: list[Row]) -> tuple[torch.Tensor, ...]:
        """:meth:`_run_batch` through the model's own forward, the rows right-padded to the longest (a row alone runs
        with no mask)."""
        input_ids, attention_mask = self._padded([r.ids for r in rows])
        if len(rows) == 1:
            attention_mask = None
        width = input_ids.shape[1]
        index, targets = self._scored(rows, [row * width for row in range(len(rows))], [0] * len(rows))
        # No cache: transformers would build one per batch (0.8 GB for a 6,000-id row of an 8B model) for nothing.
        if self.head is not None:
            base = self.loaded.model.base_model
            hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
            hidden = hidden.reshape(-1, hidden.shape[-1]).to(index.device)  # a spread model's last layer's device
            return self._head_stats(hidden.index_select(0, index), targets)
        logits = self.loaded.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return self._reduce_logits(logits.reshape(-1, logits.shape[-1]), index, targets)

    @torch.inference_mode()
    def _run_packed(self, rows: list[Row]) -> tuple[torch.Tensor, ...]:
        """:meth:`_run_batch` with the rows packed end to end through the :class:`PackedDecoder`, each row's prefix
        computed once and attended to by every row after it."""
        packed = self.packed_decoder()
        contexts = [packed.context(r.ids[: r.context], len(r.ids)) if r.context else None for r in rows]
        lengths = [len(r.ids) - r.context for r in rows]
        index, targets = self._scored(rows, np.cumsum([0, *lengths[:-1]]).tolist(), [r.context for r in rows])
        hidden = packed.hidden(torch.tensor([t for r in rows for t in r.ids[r.context :]]), lengths, contexts)
        selected = hidden.index_select(0, index)
        if self.path.streamed_head:
            return packed.token_stats(selected, targets)
        return self._head_stats(selected, targets)

    def packed_decoder(self) -> PackedDecoder:
        """The model's packed decoder, made again whenever the model's weights have changed since."""
        packed = self._packed
        if (
            packed is None
            or packed.attention is not self.path.attention
            or packed.source != PackedDecoder.stamp(self.loaded.model)
        ):
            self._packed = self.path.decoder(self.loaded.model)
        return self._packed

    def _reduce_logits(
        self, rows: torch.Tensor, index: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """(logp, mu, var, max_logp) of the selected rows of the model's own logits, a chunk at a time."""
        parts = []
        for start in range(0, len(index), self.stats_rows):
            chunk = rows.index_select(0, index[start : start + self.stats_rows].to(rows.device)).to(index.device)
            parts.append(token_stats(chunk, targets[start : start + self.stats_rows], self.backend))
        return tuple(torch.cat(values) for values in zip(*parts))

    @torch.inference_mode()
    def top_logprobs(
        self, texts: Texts, readout: TopLogprobsReadout, prefixes: Prefixes = None, progress: Progress = QUIET
    ) -> TokenStats:
        """TokenStats with mu and var estimated from the ``readout.k`` likeliest log-probs of each position, as a
        server would return them (to compare the estimate with the exact plain pass on the same model)."""
        rows = self.rows(texts, prefixes)
        progress.planned(sum(len(r.ids) for r in rows))
        per_row: list[dict[str, np.ndarray]] = [{}] * len(rows)
        for batch in self._batches([len(r.ids) for r in rows]):
            input_ids, attention_mask = self._padded([rows[i].ids for i in batch])
            logits = self.loaded.model(input_ids=input_ids, attention_mask=attention_mask).logits
            for j, i in enumerate(batch):
                row = rows[i]
                logprobs = torch.log_softmax(logits[j, row.first_scored - 1 : len(row.ids) - 1].float(), dim=-1)
                targets = torch.tensor(row.ids[row.first_scored :], device=logprobs.device)
                top, top_ids = logprobs.topk(min(readout.k, logprobs.shape[-1]), dim=-1)
                per_row[i] = {
                    "target_ids": targets.cpu().numpy(),
                    "logp": logprobs.gather(1, targets[:, None])[:, 0].cpu().numpy(),
                    "top": top.cpu().numpy(),
                    "target_in_top": (top_ids == targets[:, None]).any(dim=-1).cpu().numpy(),
                }
            progress.advanced(sum(len(rows[i].ids) for i in batch))
        return TokenStats.from_top_logprobs(per_text(rows, per_row, len(texts), readout.k), self.loaded.vocab_size)

    @torch.inference_mode()
    def hidden_states(
        self, texts: Texts, readout: HiddenStatesReadout, prefixes: Prefixes = None, progress: Progress = QUIET
    ) -> np.ndarray:
        """The output of decoder layers ``readout.layers`` at the last token of each (prefix + text):
        float32 [texts, layers, hidden]; NaN for a text with no token. A sequence longer than the window
        keeps its last ``max_length`` ids, so the last token sees as much context as fits. Only the last
        token's state of each wanted layer is kept, and the forward stops after the deepest of them."""
        decoder = self.loaded.decoder_layers()
        layers = tuple(range(len(decoder))) if readout.layers is None else readout.layers
        if not layers or not all(0 <= layer < len(decoder) for layer in layers):
            raise MiaFastError(f"layers {list(layers)} out of range: the model has {len(decoder)} decoder layers")
        prefixes = prefixes if prefixes is not None else [""] * len(texts)
        sequences = [(self.context_ids(p) + ids)[-self.max_length :] for ids, p in zip(self.tokenize(texts), prefixes)]
        progress.planned(sum(map(len, sequences)))
        model = self.loaded.model
        base = model.base_model if model.base_model is not model else model
        result = np.full((len(texts), len(layers), model.config.hidden_size), np.nan, dtype=np.float32)
        captured: dict[int, torch.Tensor] = {}
        picked = {"rows": None, "last": None}

        def capture(layer: int):
            def hook(module, inputs, output):
                hidden = output[0] if isinstance(output, tuple) else output
                rows, last = picked["rows"].to(hidden.device), picked["last"].to(hidden.device)  # spread: the layer's
                captured[layer] = hidden[rows, last].float().to(picked["rows"].device)
                if layer == max(layers):
                    raise _DeepestLayerReached

            return hook

        handles = [decoder[layer].register_forward_hook(capture(layer)) for layer in set(layers)]
        try:
            present = [i for i, ids in enumerate(sequences) if ids]
            for batch in self._batches([len(sequences[i]) for i in present]):
                indices = [present[j] for j in batch]
                input_ids, attention_mask = self._padded([sequences[i] for i in indices])
                picked["rows"] = torch.arange(len(indices), device=input_ids.device)
                picked["last"] = torch.tensor([len(sequences[i]) - 1 for i in indices], device=input_ids.device)
                try:
                    base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
                except _DeepestLayerReached:
                    pass
                result[indices] = torch.stack([captured[layer] for layer in layers], dim=1).cpu().numpy()
                progress.advanced(sum(len(sequences[i]) for i in indices))
        finally:
            for handle in handles:
                handle.remove()
        return result

    def sample(
        self, texts: Texts, readout: SamplesReadout, prefixes: Prefixes = None, progress: Progress = QUIET
    ) -> np.ndarray:
        """``readout.count`` continuations of each (prefix + text), decoded: object [texts, count] of str
        (:func:`mia_fast.pipeline.sampling.sample_texts`); an empty text gets empty continuations."""
        from mia_fast.pipeline.sampling import SampleRequest, sample_texts  # noqa: PLC0415 (transformers, 2 s: its decoding imports it; a served run loads none)

        prompts = self.sample_prompts(texts, readout, prefixes)
        prefixes = prefixes if prefixes is not None else [""] * len(texts)
        request = SampleRequest(
            readout,
            [f"{prefix}\0{text}" for prefix, text in zip(prefixes, texts)],
            prompts,
            self.batch_tokens * for_device(SAMPLE_BUDGET_FACTOR, self.device),
        )
        # The packed decoding attends to every earlier key: a model with a sliding window decodes through its own.
        packed = self.packs and prompts and not any(self.packed_decoder().windows)
        model = self.packed_decoder() if packed else self.loaded.model
        return sample_texts(model, self.loaded.tokenizer, request, progress)

    def gradient_norms(
        self, texts: Texts, readout: GradientNormReadout, prefixes: Prefixes = None, progress: Progress = QUIET
    ) -> np.ndarray:
        """Per text, the mean over the chosen parameter tensors of the ``readout.norm``-norm of the gradient
        of its mean token loss (the plain pass's targets, every window): float64 [texts]. One text at a
        time: a batch's backward sums the texts' gradients, and per-text gradients in a batch would hold
        a copy of the chosen parameters per text."""
        model = self.loaded.model
        chosen = [
            parameter
            for name, parameter in model.named_parameters()
            if not readout.parameters or any(fnmatchcase(name, pattern) for pattern in readout.parameters)
        ]
        if not chosen:
            raise MiaFastError(f"no parameter of {self.loaded.name} matches {', '.join(readout.parameters)}")
        rows = self.rows(texts, prefixes)
        progress.planned(sum(len(r.ids) for r in rows))
        per_text: dict[int, list[Row]] = {}
        for row in rows:
            per_text.setdefault(row.text_index, []).append(row)
        norms = np.full(len(texts), np.nan)
        trainable = [p.requires_grad for p in model.parameters()]
        chosen_ids = {id(p) for p in chosen}
        try:
            for parameter in model.parameters():
                parameter.requires_grad_(id(parameter) in chosen_ids)
                parameter.grad = None
            with torch.enable_grad():
                for i, text_rows in per_text.items():
                    targets = sum(len(r.ids) - r.first_scored for r in text_rows)
                    for row in text_rows:
                        pin(self._rotary(), len(row.ids))  # a dynamic rotary embedding forgets the rows before
                        ids = torch.tensor([row.ids], device=self.loaded.device)
                        logits = model(input_ids=ids, use_cache=False).logits[0, row.first_scored - 1 : -1].float()
                        (
                            torch.nn.functional.cross_entropy(logits, ids[0, row.first_scored :], reduction="sum")
                            / targets
                        ).backward()
                        progress.advanced(len(row.ids))
                    grads = [p.grad.float() for p in chosen if p.grad is not None]
                    norms[i] = torch.stack([torch.linalg.vector_norm(g, ord=readout.norm) for g in grads]).mean().item()
                    for parameter in chosen:
                        parameter.grad = None
        finally:
            for parameter, flag in zip(model.parameters(), trainable):
                parameter.requires_grad_(flag)
                parameter.grad = None
        return norms


class _DeepestLayerReached(Exception):
    """Ends a forward once the deepest layer a readout wants has run: the rest would be wasted."""
