"""Length-sorted batches under a token budget: rows x longest row stays within the budget."""

from __future__ import annotations

from typing import Sequence


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
