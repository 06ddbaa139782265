"""Rotary embeddings whose frequencies depend on the sequence's length, each text's as it would be alone.

transformers gives a ``longrope`` model (Phi-3's long-context models) its long or short factors by the longest
sequence of a call, and grows a ``dynamic`` model's base with the longest sequence it has seen, keeping it until a
sequence shorter than the original context comes: a text's score would depend on the texts beside it and before it.
Here a text gets the frequencies a fresh model gives it alone: on the packed forward segment by segment
(:func:`rotary_by_sequence`), on the model's own forward in batches whose texts all get the same frequencies
(:func:`frequency_group`), the embedding's state set for each batch (:func:`pin`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence

import torch


def rope_type(rotary: torch.nn.Module) -> str:
    kind = getattr(rotary, "rope_type", "default")
    return kind if isinstance(kind, str) else "default"  # a per-layer-type dict: no family here has one


def length_dependent(rotary: torch.nn.Module | None) -> bool:
    """Whether a rotary embedding's frequencies depend on the sequence's length (transformers' own test)."""
    if rotary is None:
        return False
    kind = rope_type(rotary)
    return kind == "longrope" or "dynamic" in kind


def _original_context(rotary: torch.nn.Module) -> int:
    """The length past which a sequence gets other frequencies, as transformers' update decides it."""
    if rope_type(rotary) == "longrope":
        return rotary.config.rope_parameters["original_max_position_embeddings"]
    return rotary.original_max_seq_len


def frequency_group(rotary: torch.nn.Module, length):
    """A key shared by the sequence lengths that get the same frequencies alone (of an int, or of every element of a
    tensor of lengths): for ``longrope`` within the original context (0) or past it (1); for ``dynamic`` within it
    (0), past it each length its own; else 0."""
    if not length_dependent(rotary):
        return length * 0
    beyond = length > _original_context(rotary)
    return beyond * 1 if rope_type(rotary) == "longrope" else length * beyond


def pin(rotary: torch.nn.Module | None, length: int) -> None:
    """Sets a length-dependent rotary embedding to the state a fresh model reaches on one sequence of ``length`` ids:
    its frequencies for that length, and (``dynamic``) the length it has seen, so that transformers' own update on a
    batch whose longest sequence has that length changes nothing."""
    kind = rope_type(rotary)
    if not length_dependent(rotary):
        return
    if length > _original_context(rotary):
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: PLC0415 (transformers: 2 s at start-up; a served run without --tokenizer loads none)

        inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](rotary.config, rotary.original_inv_freq.device, seq_len=length)
        if kind != "longrope":  # longrope's attention factor is the same for both sets of factors
            rotary.attention_scaling = scaling
    else:
        inv_freq = rotary.original_inv_freq.clone()
    rotary.register_buffer("inv_freq", inv_freq.to(rotary.original_inv_freq.device), persistent=False)
    if kind != "longrope":
        rotary.max_seq_len_cached = max(length, rotary.original_max_seq_len)


def rotary_by_sequence(
    rotary: torch.nn.Module, x: torch.Tensor, positions: torch.Tensor, sequence_lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [1, tokens, dims] of packed tokens at ``positions``, each with the frequencies of its sequence
    alone, ``sequence_lengths`` giving every token its whole sequence's length (a shared context's ids included: a
    context's keys are turned for the sequence that follows it). ``rotary`` is length-dependent."""
    # The embedding's own forward without transformers' update, which would look at these positions alone: every
    # decorator unwrapped (before transformers 5.24 a torch.no_grad sat outside the update, and one unwrap kept it).
    turn = inspect.unwrap(type(rotary).forward)
    groups = frequency_group(rotary, sequence_lengths)
    parts = []
    for group in torch.unique(groups).tolist():
        members = torch.nonzero(groups == group).squeeze(1)
        pin(rotary, int(sequence_lengths[members].max()))
        parts.append((members, *turn(rotary, x, positions[members].unsqueeze(0))))
    if not parts:
        return rotary(x, positions.unsqueeze(0))
    cos = parts[0][1].new_empty((1, len(positions), parts[0][1].shape[-1]))
    sin = torch.empty_like(cos)
    for members, part_cos, part_sin in parts:
        cos[0, members], sin[0, members] = part_cos[0], part_sin[0]
    return cos, sin


def batches_alone(
    rotary: torch.nn.Module | None, lengths: Sequence[int], plan: Callable[[list[int]], list[list[int]]]
) -> Iterator[list[int]]:
    """The batches ``plan`` makes of the indices of ``lengths``, made of each frequency group on its own (texts
    padded to a batch's longest get its frequencies: here, their own), the rotary embedding pinned to each batch's
    longest before the batch is yielded."""
    if not length_dependent(rotary):
        yield from plan(list(lengths))
        return
    groups: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        groups.setdefault(frequency_group(rotary, length), []).append(index)
    for members in groups.values():
        for batch in plan([lengths[i] for i in members]):
            chosen = [members[i] for i in batch]
            pin(rotary, max(lengths[i] for i in chosen))
            yield chosen
