"""Attention over packed sequences (pipeline.attention): the reference of torch's ``varlen_attn`` signature against
each segment's attention computed alone in fp64, over odd lengths, contexts and grouped heads; and the call into
torch's flash ``varlen_attn`` as each installed torch takes it (checked on the CPU through a stand-in with that
torch's signature)."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.pipeline import attention
from mia_fast.pipeline.attention import (
    CAUSAL,
    attention_with_lse,
    flash_available,
    flash_varlen_attention,
    plain_attention_with_lse,
    segment_attention,
)


def packed_inputs(lengths, contexts, heads, kv_heads, head_dim=8, seed=0, dtype=torch.float32):
    """q for segments of ``lengths``; k and v for each segment's context then its own tokens; the offsets."""
    generator = torch.Generator().manual_seed(seed)
    q_total, k_total = sum(lengths), sum(lengths) + sum(contexts)
    q = torch.randn(q_total, heads, head_dim, generator=generator).to(dtype)
    k = torch.randn(k_total, kv_heads, head_dim, generator=generator).to(dtype)
    v = torch.randn(k_total, kv_heads, head_dim, generator=generator).to(dtype)
    cu_q = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    cu_k = torch.tensor([0, *(torch.tensor(lengths) + torch.tensor(contexts)).cumsum(0).tolist()])
    return q, k, v, cu_q, cu_k


def one_segment_at_a_time(q, k, v, cu_q, cu_k) -> torch.Tensor:
    """Each segment's attention alone, in fp64: query j of a segment with c context keys sees keys 0 .. c + j."""
    out = torch.empty(q.shape, dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    for i in range(len(cu_q) - 1):
        qs = q[cu_q[i] : cu_q[i + 1]].double().transpose(0, 1)
        ks = k[cu_k[i] : cu_k[i + 1]].double().repeat_interleave(group, dim=1).transpose(0, 1)
        vs = v[cu_k[i] : cu_k[i + 1]].double().repeat_interleave(group, dim=1).transpose(0, 1)
        scores = qs @ ks.transpose(-1, -2) / q.shape[-1] ** 0.5
        length, keys = qs.shape[1], ks.shape[1]
        visible = torch.arange(keys)[None, :] <= torch.arange(length)[:, None] + (keys - length)
        scores = scores.masked_fill(~visible, float("-inf"))
        out[cu_q[i] : cu_q[i + 1]] = (scores.softmax(-1) @ vs).transpose(0, 1)
    return out


@settings(max_examples=30, deadline=None)
@given(
    segments=st.lists(st.tuples(st.integers(1, 40), st.sampled_from([0, 0, 3, 17])), min_size=1, max_size=7),
    heads=st.sampled_from([(4, 4), (4, 2), (6, 1)]),
)
def test_segment_attention_equals_each_segment_alone(segments, heads):
    lengths, contexts = [n for n, _ in segments], [c for _, c in segments]
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, *heads)
    max_k = int((cu_k[1:] - cu_k[:-1]).max())
    got = segment_attention(q, k, v, cu_q, cu_k, max(lengths), max_k, enable_gqa=heads[0] != heads[1])
    torch.testing.assert_close(got.double(), one_segment_at_a_time(q, k, v, cu_q, cu_k), rtol=1e-5, atol=1e-5)


def test_a_segment_attends_the_same_bits_whatever_segments_are_beside_it():
    lengths, contexts = [13, 5, 40, 13, 1], [0, 7, 0, 7, 0]
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, 4, 2)
    together = segment_attention(q, k, v, cu_q, cu_k, 40, 40, enable_gqa=True)
    for i in range(len(lengths)):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        alone = segment_attention(
            q[qs], k[ks], v[ks], cu_q[i : i + 2] - cu_q[i], cu_k[i : i + 2] - cu_k[i], 40, 40, enable_gqa=True
        )
        assert torch.equal(together[qs], alone)


def test_segment_attention_refuses_fewer_keys_than_queries():
    q, k, v, _, _ = packed_inputs([4], [0], 2, 2)
    with pytest.raises(ValueError, match="segment 0 has fewer keys"):
        segment_attention(q, k[:3], v[:3], torch.tensor([0, 4]), torch.tensor([0, 3]), 4, 3)


# ---- torch's flash varlen_attn, as each torch takes it ----


def stand_in(signature: str, calls: list):
    """A ``varlen_attn`` with the keyword parameters of a torch release, answering with the reference (which checks
    that keys and values arrive with as many heads as the call says)."""

    def answer(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, options):
        calls.append({"options": options, "kv_heads": key.shape[1], "offsets": (cu_seq_q.dtype, cu_seq_k.dtype)})
        assert options.get("window_size") == CAUSAL or options.get("is_causal"), "not causal"
        gqa = options.get("enable_gqa", False)
        assert gqa or key.shape[1] == query.shape[1], "keys with fewer heads than queries, without enable_gqa"
        return segment_attention(query, key, value, cu_seq_q.long(), cu_seq_k.long(), max_q, max_k, enable_gqa=gqa)

    if signature == "2.10":

        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, is_causal=False, return_aux=None):
            return answer(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, {"is_causal": is_causal})

    elif signature == "2.11":

        def varlen_attn(
            query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
        ):
            return answer(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, {"window_size": window_size})

    else:

        def varlen_attn(
            query,
            key,
            value,
            cu_seq_q,
            cu_seq_k,
            max_q,
            max_k,
            *,
            return_aux=None,
            scale=None,
            window_size=(-1, -1),
            enable_gqa=False,
            num_splits=None,
        ):
            options = {"window_size": window_size, "enable_gqa": enable_gqa, "num_splits": num_splits}
            return answer(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, options)

    return varlen_attn


@pytest.mark.parametrize("signature", ["2.10", "2.11", "2.13"])
def test_flash_varlen_attention_calls_each_torchs_varlen_attn_as_it_takes_it(monkeypatch, signature):
    import torch.nn.attention.varlen as varlen

    calls: list = []
    monkeypatch.setattr(varlen, "varlen_attn", stand_in(signature, calls))
    attention._varlen_parameters.cache_clear()
    try:
        lengths, contexts = [9, 30, 2], [5, 5, 0]
        q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, 8, 2)
        got = flash_varlen_attention(q, k, v, cu_q, cu_k, 30, 35, enable_gqa=True)
    finally:
        attention._varlen_parameters.cache_clear()
    torch.testing.assert_close(got.double(), one_segment_at_a_time(q, k, v, cu_q, cu_k), rtol=1e-5, atol=1e-5)
    (call,) = calls
    assert call["offsets"] == (torch.int32, torch.int32)
    if signature == "2.13":  # grouped heads passed as they are; split-KV off, so the batch changes no bit
        assert call["kv_heads"] == 2 and call["options"]["enable_gqa"] and call["options"]["num_splits"] == 1
    else:  # keys and values repeated to every query head
        assert call["kv_heads"] == 8
    if signature == "2.10":
        assert call["options"] == {"is_causal": True}
    else:
        assert call["options"]["window_size"] == CAUSAL


def test_flash_runs_on_cuda_in_half_precision_only():
    has_varlen = "window_size" in inspect.signature(torch.nn.attention.varlen.varlen_attn).parameters
    cuda = torch.device("cuda")
    assert flash_available(cuda, torch.bfloat16, 128) == has_varlen
    assert flash_available(cuda, torch.float16, 64) == has_varlen
    assert not flash_available(cuda, torch.float32, 128)
    assert not flash_available(cuda, torch.bfloat16, 12)  # not a multiple of 8
    assert not flash_available(torch.device("cpu"), torch.bfloat16, 128)


# ---- attention split over key sets, merged by log-sum-exp (sampling's decoding steps) ----


def test_plain_attention_with_lse_gives_what_the_cpu_kernel_gives():
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(3, 2, 5, 8, generator=generator)
    k, v = torch.randn(3, 2, 11, 8, generator=generator), torch.randn(3, 2, 11, 8, generator=generator)
    bias = torch.zeros(3, 1, 1, 11)
    bias[1, ..., 7:] = -torch.inf
    for mask in (None, bias):
        out, lse = attention_with_lse(q, k, v, mask)
        plain_out, plain_lse = plain_attention_with_lse(q, k, v, mask)
        torch.testing.assert_close(plain_out, out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(plain_lse, lse, rtol=1e-5, atol=1e-5)
