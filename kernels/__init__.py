"""Triton kernels over logits and per-token values (they import only torch and triton).

Shipped in the wheel as ``mia_fast.kernels``. On a machine without a GPU they run only under
Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is imported), which is how the
tests check them; ``tests/ops/test_kernels_compile.py`` compiles them for real GPUs without one.
"""

from .aggregate import bottom_k_means, capped_first_occurrence_mean
from .token_stats import token_stats

__all__ = ["bottom_k_means", "capped_first_occurrence_mean", "token_stats"]
