"""What a loaded model must hold before it scores: every weight from its own checkpoint, and an embedding row for
every id its tokenizer gives. transformers loads past both (random values in a missing weight's place; an id past the
embedding ends in IndexError deep in a forward), so each is refused here in one line."""

from __future__ import annotations

import torch

from mia_fast.errors import MiaFastError


def check_checkpoint(model: torch.nn.Module, loading: dict, name: str, *, unused_allowed: bool = False) -> None:
    """Refuses a model that its checkpoint does not fill, from ``from_pretrained``'s loading info (read with
    ``ignore_mismatched_sizes``): transformers gives every weight the checkpoint lacks, or holds in another shape,
    random values, and a score would then come from them. A tied head is no missing weight. Tensors of the
    checkpoint that the model does not use are refused too unless ``unused_allowed`` (a mask filler's checkpoint
    holds its pretraining heads)."""
    described = f"config.json describes a {model.config.model_type!r} model ({type(model).__name__})"
    mismatched = sorted(loading.get("mismatched_keys") or (), key=lambda entry: entry[0])
    if mismatched:
        key, found, wanted = mismatched[0]
        more = f" (and {len(mismatched) - 1} more tensors)" if len(mismatched) > 1 else ""
        raise MiaFastError(
            f"{name}: the checkpoint's {key} is {list(found)}{more}, where {described} that needs {list(wanted)}: "
            "config.json does not fit these weights"
        )
    missing = sorted(loading.get("missing_keys") or ())
    unused = [] if unused_allowed else sorted(loading.get("unexpected_keys") or ())
    problems = [
        f"{len(keys)} {what} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
        for keys, what in (
            (missing, "weights it needs are not in the checkpoint"),
            (unused, "tensors of the checkpoint are not used"),
        )
        if keys
    ]
    if problems:
        raise MiaFastError(
            f"{name}: {described}, but {' and '.join(problems)}; its scores would not be this checkpoint's "
            "(is config.json the one saved with these weights?)"
        )


def check_vocabulary(tokenizer, model: torch.nn.Module, name: str) -> None:
    """Refuses a tokenizer whose vocabulary has ids past the model's embedding: any text may be given one, and
    scoring would index past it. An added token past it (a padding token, an end token no text is given) is not
    refused: most texts never meet it."""
    embedding = model.get_input_embeddings()
    rows = getattr(embedding, "num_embeddings", None)
    largest = tokenizer.vocab_size - 1
    if rows is not None and largest >= rows:
        raise MiaFastError(
            f"{name}: its tokenizer gives ids up to {largest}, but the model's embedding has {rows} rows (ids 0-"
            f"{rows - 1}): the tokenizer is not this model's, or the model's vocabulary was cut"
        )
