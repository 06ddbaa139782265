"""Triton kernels over logits, hidden states and per-token values (they import only torch and triton).

Shipped in the wheel as ``mia_fast.kernels``. On a machine without a GPU they run only under
Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is imported), which is how the
tests check them.
"""

from .aggregate import bottom_k_counts, bottom_k_means, first_occurrence_capped_mean
from .token_stats import fused_linear_token_stats, token_stats

__all__ = [
    "bottom_k_counts",
    "bottom_k_means",
    "first_occurrence_capped_mean",
    "fused_linear_token_stats",
    "token_stats",
]
