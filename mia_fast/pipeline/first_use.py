"""What no machine here runs proves itself on first use, on every device whose plan says so (a GPU:
:attr:`mia_fast.pipeline.device.DevicePlan.self_checks`):

- the Triton kernels, against the torch reference (:mod:`mia_fast.ops.self_check`), once a process for each device,
  dtype and vocabulary;
- the packed forward of a loaded model, against the model's own forward on one short text: the final-normed hidden
  states, within the packed decoder tests' tolerances taken relative to their largest value (:data:`FORWARD_TOLERANCE`).

Where either differs (or fails), one warning line says so (the device, what differed, by how much), the reference
runs for the rest of the process (the torch reductions; the packed forward with the segment-wise attention where
flash attention was the difference, else the model's own forward) and the forward path the scores' provenance records
says why (where the kernels were set aside, the provenance's ``kernels_set_aside``). A healthy device is told
nothing and its path is as chosen.
"""

from __future__ import annotations

import dataclasses
import warnings
from weakref import WeakKeyDictionary

import torch

from mia_fast.errors import MiaFastWarning
from mia_fast.ops.backend import resolve_backend
from mia_fast.ops.self_check import kernels_disagree
from mia_fast.pipeline.attention import SEGMENT_ATTENTION
from mia_fast.pipeline.device import device_plan
from mia_fast.pipeline.forward_path import ForwardPath
from mia_fast.pipeline.models import LoadedModel
from mia_fast.pipeline.packed import PackedDecoder

# The largest |packed - own| of the final hidden states, over their largest |own|, that passes: the packed decoder
# tests' tolerances, taken relative to the states' scale, since a real model's are far larger than a tiny model's
# (the built-in SmolLM2-135M on a CPU: in fp32 3.7e-5 apart, 1.1e-6 of the largest value 34; in bf16 0.5, 1.5e-2 of it;
# a wrong attention moves them by a sizeable part of it).
FORWARD_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-2}
PROBE_TEXT = "The first of the two ships left the harbour at dawn, and the second followed it before noon."
PROBE_IDS = 32

# Per model (gone with it), per path: the path that passed.
_forward_verdicts: WeakKeyDictionary[torch.nn.Module, dict[str, ForwardPath]] = WeakKeyDictionary()


def proven_backend(backend: str, loaded: LoadedModel) -> tuple[str, str | None]:
    """What ``backend`` (``auto``, ``torch`` or ``triton``) runs for ``loaded``: the Triton kernels where its
    device's plan says they run, unless they differ from the torch reference there (then the reference, and why)."""
    plan = device_plan(loaded.device)
    resolved = resolve_backend(backend, loaded.device, kernels_run=plan.triton_kernels)
    if resolved != "triton" or not plan.self_checks:
        return resolved, None
    verdict, new = kernels_disagree(loaded.device, loaded.dtype, loaded.vocab_size)
    if verdict is None:
        return resolved, None
    if new:
        _warn(loaded.device, f"{verdict}; the torch reference runs instead for the rest of this process")
    return "torch", verdict


def proven_path(path: ForwardPath, loaded: LoadedModel) -> tuple[ForwardPath, PackedDecoder | None]:
    """``path`` where the plan checks nothing or its packed forward gives the model's own hidden states on a short
    text, else the first of the references that does (the segment-wise attention, then the model's own forward); and
    the packed decoder that passed, for the engine to keep (None where none was made)."""
    model, device = loaded.model, loaded.device
    if not path.packed or not device_plan(device).self_checks:
        return path, None
    verdicts = _forward_verdicts.setdefault(model, {})
    if path.describe() in verdicts:
        return verdicts[path.describe()], None
    ids = _probe_ids(loaded.tokenizer, model.config.vocab_size)
    own = _own_hidden(model, ids)
    tolerance = FORWARD_TOLERANCE.get(own.dtype, 5e-2)
    tried = path
    while True:
        decoder = tried.decoder(model)
        difference = _difference(decoder, ids, own, tolerance)
        if difference is None:
            break
        said = "failed" if isinstance(difference, str) else f"differed from the model's own by {difference:.3g}"
        if tried.attention is not SEGMENT_ATTENTION:
            note = f"{tried.attention.name} {said} on this device"
            tried = dataclasses.replace(tried, attention=SEGMENT_ATTENTION, attention_note=note)
            continue
        fallback = f"the packed forward {said} on this device"
        tried = dataclasses.replace(tried, packed=False, attention=None, copies_weights=False, fallback=fallback)
        decoder = None
        break
    if tried is not path:
        instead = "the packed forward with segment-wise attention" if tried.packed else "the model's own forward"
        _warn(device, f"{tried.attention_note or tried.fallback}; {instead} runs for the rest of this process")
    verdicts[path.describe()] = tried
    return tried, decoder


def _probe_ids(tokenizer, vocab_size: int) -> list[int]:
    ids = [i for i in tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"] if 0 <= i < vocab_size]
    return ids[:PROBE_IDS] or list(range(min(PROBE_IDS, vocab_size)))


@torch.inference_mode()
def _own_hidden(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    return model.base_model(input_ids=torch.tensor([ids], device=device), use_cache=False).last_hidden_state[0]


def _difference(decoder: PackedDecoder, ids: list[int], own: torch.Tensor, tolerance: float) -> float | str | None:
    """The largest |packed - own| where it exceeds ``tolerance`` times the largest |own|, "failed" where the packed
    forward raised, None where they agree."""
    try:
        packed = decoder.hidden(torch.tensor(ids), [len(ids)])
    except Exception:  # a kernel that does not run this device is the finding: the reference runs instead
        return "failed"
    error = float(torch.nan_to_num((packed.float() - own.float()).abs(), nan=torch.inf).max())
    if error <= tolerance * max(float(own.float().abs().max()), 1.0):
        return None
    return error


def _warn(device: torch.device, message: str) -> None:
    warnings.warn(f"self-check on {device}: {message}", MiaFastWarning, stacklevel=3)
