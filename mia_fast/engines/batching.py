"""Length-sorted batches under a token budget: rows x longest row stays within the budget."""

from __future__ import annotations

from collections.abc import Sequence


def plan_batches(
    lengths: Sequence[int], batch_tokens: int, *, packed: bool = False, alone_from: int | None = None
) -> list[list[int]]:
    """Groups indices, longest first, so that rows x longest length (padded rows) or the sum of the lengths
    (``packed`` rows, end to end) stays within ``batch_tokens``; a single row longer than the budget, or at least
    ``alone_from`` long, gets a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    used = 0
    for i in order:
        cost = used + lengths[i] if packed else lengths[batches[-1][0]] * (len(batches[-1]) + 1) if batches else 0
        shared = batches and (alone_from is None or lengths[batches[-1][0]] < alone_from)
        if shared and cost <= batch_tokens:
            batches[-1].append(i)
            used = cost
        else:
            batches.append([i])
            used = lengths[i]
    return batches
