"""Which forward a model's engine runs, decided in one place: the pad-free packed decoder where the model's family is
supported (on every device), else the model's own forward; and which attention and head each runs with. The packed
decoder is built from the path (:meth:`ForwardPath.decoder`), so it runs what was decided here.

``forward`` is the user's choice: ``auto`` (packed where supported), ``packed`` (refused in one line where it is not)
or ``model`` (the model's own forward, e.g. to compare). A model whose layers a device map spreads over devices
(:mod:`mia_fast.pipeline.spread`) runs its own forward, and its path says where its layers are. The path's description
is printed with ``--verbose`` and recorded in a scores file's provenance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mia_fast.errors import MiaFastError
from mia_fast.pipeline.attention import FLASH_ATTENTION, SEGMENT_ATTENTION, AttentionBackend, why_not_flash
from mia_fast.pipeline.choices import FORWARDS
from mia_fast.pipeline.device import copies_weights, device_plan
from mia_fast.pipeline.packed import PackedDecoder, head_dim, packed_unsupported
from mia_fast.pipeline.spread import spread_of

# How a path's description names each backend's reductions.
_SAID = {"triton": "Triton", "torch": "torch"}
# On the model's own forward a row at least this long runs alone, with no padding mask (mask-free causal attention).
ALONE_FROM = 1024


@dataclass(frozen=True)
class ForwardPath:
    """``packed``: the packed decoder runs with ``attention`` (torch's flash ``varlen_attn`` or the segment-wise
    reference), its weights copied into fused, reordered ones where ``copies_weights`` (a CPU), else the model's own
    forward (``fallback`` says why). The logits are reduced to token statistics on ``backend`` (``triton``: the
    Triton kernels, or ``torch``) from the head's product a chunk of positions at a time (``plain_head``), or from the
    model's own logits; on a CPU the packed decoder streams its head a vocabulary chunk at a time
    (:attr:`streamed_head`). ``attention_note`` says why a GPU runs the segment-wise reference;
    ``wide_residual``: the packed decoder keeps a 16-bit model's residual stream in fp32 (on a CPU,
    :class:`~mia_fast.pipeline.device.DevicePlan`)."""

    packed: bool
    attention: AttentionBackend | None
    copies_weights: bool
    plain_head: bool
    backend: str
    fallback: str | None = None
    attention_note: str | None = None
    wide_residual: bool = False

    @property
    def streamed_head(self) -> bool:
        return self.packed and self.copies_weights

    def decoder(self, model: torch.nn.Module) -> PackedDecoder:
        """The packed decoder of ``model`` on this path."""
        residual = torch.float32 if self.wide_residual else None
        return PackedDecoder(model, reorder=self.copies_weights, attention=self.attention, residual_dtype=residual)

    def describe(self) -> str:
        kernels = _SAID[self.backend]
        if self.streamed_head:
            head = "streamed head"
        elif self.plain_head:
            head = f"{kernels} head"
        else:
            head = f"the model's logits, {kernels} statistics"
        if self.packed:
            attention = self.attention.name + (f" ({self.attention_note})" if self.attention_note else "")
            return f"packed, {attention}, {head}" + (", fp32 residual" if self.wide_residual else "")
        return (
            f"the model's own forward, length-sorted padded rows ({ALONE_FROM}+ ids alone), {head} (not packed: "
            f"{self.fallback})"
        )


def choose_forward(
    model: torch.nn.Module, device: torch.device, max_length: int, forward: str, backend: str, *, plain_head: bool
) -> ForwardPath:
    """The path of ``model`` on ``device`` with windows of ``max_length`` ids, the reductions' ``backend`` (``torch``
    or ``triton``) and whether its head is a plain linear layer (``plain_head``: its logits can be made a chunk at a
    time from hidden states)."""
    if forward not in FORWARDS:
        raise MiaFastError(f"unknown forward {forward!r}; choose one of {', '.join(FORWARDS)}")
    spread = spread_of(model)
    if spread is not None:  # the packed decoder runs a model whole on one device
        fallback = f"its layers are spread over devices by --device-map: {spread.describe()}"
    elif forward == "model":
        fallback = "the model's own forward was asked for"
    elif not plain_head:
        fallback = "its output head is not a plain linear layer"
    else:
        fallback = packed_unsupported(model, max_length)
    if fallback is None:
        dtype = next(model.parameters()).dtype
        plan = device_plan(device)
        refusal = why_not_flash(device, dtype, head_dim(model.config))
        return ForwardPath(
            packed=True,
            attention=FLASH_ATTENTION if refusal is None else SEGMENT_ATTENTION,
            copies_weights=copies_weights(device),
            plain_head=True,
            backend=backend,
            attention_note=refusal if plan.accelerator.vendor != "cpu" else None,
            wide_residual=dtype != torch.float32 and not plan.residual_in_model_dtype,
        )
    if forward == "packed":
        raise MiaFastError(f"cannot run this model packed: {fallback}; use --forward auto or model")
    return ForwardPath(
        packed=False, attention=None, copies_weights=False, plain_head=plain_head, backend=backend, fallback=fallback
    )
