"""Sampled continuations whose draws do not depend on the batch.

Top-k (and top-p) sampling at temperature 1 is the argmax of the kept logits plus Gumbel noise. The noise of a
row is a counter-based hash of (the row's key, the step, the token id), so a text's samples are the
same whichever texts share its batch, whatever the batch size, and on CPU or GPU alike, up to the
rounding of the logits themselves; and it costs a few integer passes over the logits, drawn on the
device. Generation itself is the model's own ``generate`` with its cache and left padding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

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


def gumbel_noise(keys: torch.Tensor, step: int, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise float32 [rows, vocab] from the rows' keys (int64 [rows, 2]) at ``step``."""
    tokens = torch.arange(vocab, device=keys.device, dtype=torch.int64)
    x = _mix(tokens[None, :] ^ keys[:, :1])
    x = _mix(x ^ ((keys[:, 1:] + step * _GOLDEN) & _UINT32))
    uniform = ((x >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))  # in (0, 1), never 0 or 1
    return -torch.log(-torch.log(uniform))


class _KeyedGumbelNoise(LogitsProcessor):
    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys
        self.step = 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        noise = gumbel_noise(self.keys, self.step, scores.shape[-1])
        self.step += 1
        return scores.float() + noise


def generate(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    keys: Sequence[tuple[int, int]],
    new_tokens: Sequence[int],
    top_k: int,
    pad_id: int,
    end_ids: Sequence[int],
    top_p: float = 1.0,
) -> list[list[int]]:
    """Samples ``new_tokens[r]`` ids after each prompt (fewer where an end token comes first; the end
    token is dropped) among the ``top_k`` likeliest tokens (0: all), then the fewest of those holding ``top_p`` of
    the probability, the rows drawn with ``keys``. One left-padded ``generate`` call for all rows."""
    device = next(model.parameters()).device
    width = max(map(len, prompts))
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention_mask[row, width - len(ids) :] = 1
    config = GenerationConfig(
        max_new_tokens=max(new_tokens),
        do_sample=False,
        pad_token_id=pad_id,
        eos_token_id=list(end_ids) or None,
    )
    warpers = ([TopKLogitsWarper(top_k)] if top_k else []) + ([TopPLogitsWarper(top_p)] if top_p < 1 else [])
    noise = _KeyedGumbelNoise(torch.tensor(np.asarray(keys, dtype=np.int64), device=device))
    processors = LogitsProcessorList([*warpers, noise])
    output = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        generation_config=config,
        logits_processor=processors,
    )
    continuations = []
    for row, budget in zip(output[:, width:].tolist(), new_tokens):
        row = row[:budget]
        ends = [i for i, token in enumerate(row) if token in end_ids]
        continuations.append(row[: ends[0]] if ends else row)
    return continuations
