"""The local forward's choices and per-device defaults, as plain tables: the pipeline decides from them and the CLI
lists them at parse time. This module imports no torch (``mia-fast --help`` and the ``freq`` commands start without
it), nor anything that does."""

from __future__ import annotations

# What --forward may name (mia_fast.pipeline.forward_path.choose_forward decides what each runs).
FORWARDS = ("auto", "packed", "model")
# The model's precisions by name (mia_fast.pipeline.device.DTYPES gives each its torch dtype).
DTYPE_NAMES = ("fp32", "bf16", "fp16")
# Token budget per forward batch, per kind of device (a device not named takes the GPU's). On CPU the forward is
# compute-bound and large padded batches fall out of cache (measured slower); a GPU wants large batches to fill its
# cores.
DEFAULT_BATCH_TOKENS = {"cpu": 1024, "cuda": 16384}


def batch_tokens_default() -> str:
    """The default --batch-tokens, as its help says it."""
    return f"{DEFAULT_BATCH_TOKENS['cpu']} on CPU, {DEFAULT_BATCH_TOKENS['cuda']} on GPU"
