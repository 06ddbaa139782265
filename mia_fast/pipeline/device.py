"""Host-to-device copies that never make the host wait."""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``; to a GPU from pinned memory, queued without waiting for the copy (torch
    keeps the pinned block until the copy is done)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
