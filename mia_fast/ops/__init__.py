"""Reductions behind one signature each, with ``backend="torch"`` (the reference: torch for per-row
statistics, numpy float64 for per-text reductions) or ``backend="triton"`` (the kernels of
``mia_fast.kernels``). They know nothing of models, texts or methods.

- ``backend.py``: the one choice of backend: what ``--backend`` means on a device, the reference or the kernel
  an op runs (and the kernels' device and arguments), the native core or torch for a streamed merge. No other
  module here tests a device or a backend.
- ``reductions.py``: ``Ops``, the per-text reductions on one backend and device: the one handle a method calls.
- ``token_stats.py``: per-row (logp, mu, var, max logp) of logits, whole, projected a chunk of rows at a time, or
  streamed a vocabulary chunk at a time (the native core on CPU).
- ``bottom_k.py``: Min-K% and Min-K%++'s mean of each text's max(1, floor(k n)) lowest values, every k at once.
- ``first_occurrence.py``: DC-PDD's first-occurrence flags and capped mean.
- ``top_logprobs.py``: the vocabulary's mean and variance of log p estimated from a server's top-K log-probs.
- ``segments.py``: ragged per-text arrays (flat values split by offsets): each position's text, each text's mean and
  moving averages.
"""
