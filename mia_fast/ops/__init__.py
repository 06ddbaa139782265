"""Reductions behind one signature each, with ``impl="torch"`` (the reference: torch for per-row
statistics, numpy float64 for per-text reductions) or ``impl="triton"`` (the kernels of
``mia_fast.kernels``). They know nothing of models, texts or methods."""
