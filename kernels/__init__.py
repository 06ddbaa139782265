"""Triton kernels over logits and hidden states (import only torch and triton).

Shipped in the wheel as ``mia_fast.kernels``; the kernels arrive with the kernel issue.
"""
