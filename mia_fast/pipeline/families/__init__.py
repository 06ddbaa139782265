"""The model families the packed decoder runs, each one file of this folder: a :class:`FamilySpec` registered under the
model types it serves (``config.model_type``), saying where the model keeps its embedding, final norm and rotary
embedding, how to build a decoder layer from the model's own, which layers attend through a sliding window, and what
of a config it refuses. A module added to this folder is found when the package is imported; no other file names
a family.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from mia_fast.pipeline.packed_layers import DecoderLayer, HeadShape


class LayerBuilder(Protocol):
    """A family's builder of one decoder layer (``FamilySpec.layer``)."""

    def __call__(self, module: torch.nn.Module, shape: HeadShape, config: object, *, reorder: bool) -> DecoderLayer: ...


def _no_refusal(config, max_length: int) -> str | None:
    return None


def _no_window(config, layer: int) -> int | None:
    return None


@dataclass(frozen=True)
class FamilySpec:
    """A model family as the packed decoder runs it.

    - ``layer(module, shape, config, *, reorder)``: the :class:`DecoderLayer` of one of the model's decoder layers
      (``reorder``: the weights may be copied, fused and reordered for the rotary embedding, :mod:`packed_layers`);
    - ``embedding``, ``final_norm``, ``rotary``: the attribute of the base model holding each (the rotary embedding
      is transformers' module of ``(x, position_ids) -> (cos, sin)``; each head's first rotary dims turn by halves,
      dim j with dim j + rotary_dims / 2, as ``rotate_half`` does);
    - ``window(config, layer)``: the sliding window a layer's queries attend through (None: every earlier key);
    - ``refuses(config, max_length)``: why the packed decoder cannot run this config with windows of ``max_length``
      ids (None: it can)."""

    model_types: tuple[str, ...]
    layer: LayerBuilder
    embedding: str = "embed_tokens"
    final_norm: str = "norm"
    rotary: str = "rotary_emb"
    window: Callable[[object, int], int | None] = _no_window
    refuses: Callable[[object, int], str | None] = _no_refusal


FAMILIES: dict[str, FamilySpec] = {}


def register_family(spec: FamilySpec) -> FamilySpec:
    """Adds ``spec`` under each of its model types; a type already taken is refused."""
    taken = [t for t in spec.model_types if t in FAMILIES]
    if taken:
        raise ValueError(f"model type {taken[0]!r} already has a family")
    FAMILIES.update(dict.fromkeys(spec.model_types, spec))
    return spec


def family_of(model_type: str) -> FamilySpec | None:
    """The family serving ``model_type``; None where the packed decoder runs none."""
    return FAMILIES.get(model_type)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
