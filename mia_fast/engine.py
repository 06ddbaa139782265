"""The token-stats engine: texts -> token ids -> batched forward -> TokenStats.

Texts are tokenized with the start-token rule of DESIGN §2, split into sliding windows when
longer than the model context, sorted by length and packed into batches under a token budget
(right padding with an attention mask). Logits are never held in fp32 for a whole batch: when
the model's head is a plain linear layer they are computed from hidden states a chunk of
positions at a time, otherwise the model's own logits are reduced a chunk at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from mia_fast.errors import MiaFastError
from mia_fast.models import LoadedModel
from mia_fast.stats import TokenStats, token_stats_torch

# Token budget per forward batch. On CPU the forward is compute-bound and large padded batches
# fall out of cache (measured slower); a GPU wants large batches to fill its cores.
DEFAULT_BATCH_TOKENS = {"cpu": 1024, "cuda": 16384}
# Bytes of fp32 logits materialised at once: cache-sized on CPU, large on GPU.
DEFAULT_CHUNK_BYTES = {"cpu": 16 << 20, "cuda": 512 << 20}


def default_for(table: dict[str, int], device: torch.device) -> int:
    return table.get(device.type, table["cuda"])

TokenCallback = Callable[[int], None]
BACKENDS = ("auto", "torch", "triton")


def resolve_backend(backend: str, device: torch.device) -> str:
    """``auto`` picks the Triton kernels on CUDA when triton imports, the torch reference otherwise."""
    if backend not in BACKENDS:
        raise MiaFastError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "torch" or (backend == "auto" and device.type != "cuda"):
        return "torch"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise MiaFastError("the triton backend needs a CUDA device (or TRITON_INTERPRET=1, for testing on CPU)")
    try:
        import mia_fast.kernels  # noqa: F401
    except ImportError as exc:
        if backend == "auto":
            return "torch"
        raise MiaFastError(f"the triton backend needs triton: pip install triton ({exc})") from None
    return "triton"


def start_token_id(tokenizer) -> int:
    """The model's BOS token, or its EOS token where it has no BOS."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise MiaFastError("the tokenizer has neither a BOS nor an EOS token to start texts with; use prepend_start=False")


def tokenize(tokenizer, texts: Sequence[str], prepend_start: bool) -> list[list[int]]:
    """Token ids of each text with the tokenizer's own special tokens, plus the start token if asked
    for and not already there."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), add_special_tokens=True, verbose=False)["input_ids"]
    if not prepend_start:
        return [list(ids) for ids in encoded]
    start = start_token_id(tokenizer)
    return [list(ids) if ids and ids[0] == start else [start, *ids] for ids in encoded]


@dataclass(frozen=True)
class Window:
    """ids[begin:end] of one text, scoring the targets at absolute positions [first_target, end)."""

    text_index: int
    begin: int
    end: int
    first_target: int

    @property
    def length(self) -> int:
        return self.end - self.begin


def split_windows(text_index: int, n_ids: int, max_length: int) -> list[Window]:
    """Sliding windows of at most ``max_length`` ids, stride max_length // 2, each target scored once
    with as much left context as its window allows. A text of fewer than 2 ids has no target."""
    if n_ids < 2:
        return []
    if max_length < 2:
        raise MiaFastError(f"max_length must be at least 2, got {max_length}")
    stride = max_length // 2
    windows, begin, scored_until = [], 0, 1
    while True:
        end = min(begin + max_length, n_ids)
        windows.append(Window(text_index, begin, end, scored_until))
        if end == n_ids:
            return windows
        scored_until = end
        begin += stride


def plan_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Groups indices, longest first, so that rows x longest length stays within ``batch_tokens``
    (a single row longer than the budget gets a batch of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class StatsEngine:
    """Computes TokenStats for texts with one model (torch reference back end)."""

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
    ) -> None:
        batch_tokens = batch_tokens or default_for(DEFAULT_BATCH_TOKENS, loaded.device)
        chunk_bytes = chunk_bytes or default_for(DEFAULT_CHUNK_BYTES, loaded.device)
        if batch_tokens < 1:
            raise MiaFastError(f"batch_tokens must be positive, got {batch_tokens}")
        context = loaded.context_length
        if max_length is None:
            max_length = context or 2048
        elif context is not None and max_length > context:
            raise MiaFastError(f"max_length {max_length} exceeds the model context {context}")
        self.loaded = loaded
        self.prepend_start = prepend_start
        self.batch_tokens = batch_tokens
        self.max_length = max_length
        self.chunk_rows = max(1, chunk_bytes // (4 * loaded.vocab_size))
        self.head = loaded.plain_linear_head() if use_hidden_states else None
        self.backend = resolve_backend(backend, loaded.device)
        tokenizer = loaded.tokenizer
        self.pad_id = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return tokenize(self.loaded.tokenizer, texts, self.prepend_start)

    def compute(
        self,
        texts: Sequence[str],
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> TokenStats:
        """TokenStats of ``texts``, in input order. ``on_tokenized`` receives the number of ids to
        run, ``on_progress`` the ids finished after each batch."""
        all_ids = self.tokenize(texts)
        windows = [w for i, ids in enumerate(all_ids) for w in split_windows(i, len(ids), self.max_length)]
        if on_tokenized is not None:
            on_tokenized(sum(w.length for w in windows))
        results: list[dict[str, np.ndarray] | None] = [None] * len(windows)
        for batch in plan_batches([w.length for w in windows], self.batch_tokens):
            batch_windows = [windows[i] for i in batch]
            for i, stats in zip(batch, self._run_batch(batch_windows, all_ids)):
                results[i] = stats
            if on_progress is not None:
                on_progress(sum(w.length for w in batch_windows))
        per_text: list[list[dict[str, np.ndarray]]] = [[] for _ in texts]
        for window, stats in zip(windows, results):
            per_text[window.text_index].append(stats)
        return TokenStats.from_texts([_concat(parts) for parts in per_text])

    @torch.inference_mode()
    def _run_batch(self, windows: list[Window], all_ids: list[list[int]]) -> list[dict[str, np.ndarray]]:
        device = self.loaded.device
        width = max(w.length for w in windows)
        input_ids = torch.full((len(windows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(windows), width), dtype=torch.long)
        predictor_rows, predictor_cols, targets = [], [], []
        for row, w in enumerate(windows):
            ids = all_ids[w.text_index][w.begin : w.end]
            input_ids[row, : w.length] = torch.tensor(ids)
            attention_mask[row, : w.length] = 1
            # Position p predicts the id at p + 1; score targets [first_target, end) of the window.
            cols = np.arange(w.first_target - w.begin - 1, w.length - 1)
            predictor_rows.append(np.full(len(cols), row))
            predictor_cols.append(cols)
            targets.append(ids[w.first_target - w.begin :])
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        flat_index = torch.from_numpy(np.concatenate(predictor_rows) * width + np.concatenate(predictor_cols)).to(device)
        flat_targets = torch.tensor([t for row in targets for t in row], dtype=torch.long, device=device)

        if self.head is not None:
            hidden = self.loaded.model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            rows = hidden.reshape(-1, hidden.shape[-1])
        else:
            logits = self.loaded.model(input_ids=input_ids, attention_mask=attention_mask).logits
            rows = logits.reshape(-1, logits.shape[-1])
        outputs = self._reduce(rows, flat_index, flat_targets)
        logp, mu, var = (part.cpu().numpy() for part in outputs)
        flat_targets_np = flat_targets.cpu().numpy()
        split_at = np.cumsum([len(t) for t in targets])[:-1]
        return [
            {"target_ids": t, "logp": lp, "mu": m, "var": v}
            for t, lp, m, v in zip(*(np.split(a, split_at) for a in (flat_targets_np, logp, mu, var)))
        ]

    def _reduce(self, rows: torch.Tensor, index: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(logp, mu, var) of the selected rows: hidden states when there is a plain head, else logits."""
        if self.backend == "triton":
            from mia_fast.kernels import fused_linear_token_stats, token_stats

            if self.head is not None:
                return fused_linear_token_stats(rows.index_select(0, index), self.head.weight, targets, self.head.bias, chunk_rows=self.chunk_rows)
            stats = token_stats
        else:
            stats = token_stats_torch
        parts = []
        for start in range(0, len(index), self.chunk_rows):
            chunk = rows.index_select(0, index[start : start + self.chunk_rows])
            logits = self.head(chunk) if self.head is not None else chunk
            parts.append(stats(logits, targets[start : start + self.chunk_rows]))
        return tuple(torch.cat(values) for values in zip(*parts))


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return {
            "target_ids": np.zeros(0, np.int64),
            "logp": np.zeros(0, np.float32),
            "mu": np.zeros(0, np.float32),
            "var": np.zeros(0, np.float32),
        }
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
