"""Attention over packed sequences (pipeline.attention): the reference of torch's ``varlen_attn`` signature against
each segment's attention computed alone in fp64, over odd lengths, contexts, sliding windows (whose rule is checked
against transformers') and grouped heads, with grouped heads repeated only where torch's fast kernels lack them; and
the call into torch's flash varlen attention as each installed torch takes it (checked on the CPU through stand-ins
with that torch's signature)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.masking_utils import sliding_window_causal_mask_function

from mia_fast.pipeline import attention, device
from mia_fast.pipeline.attention import (
    CAUSAL,
    SEGMENT_ATTENTION,
    Segments,
    attention_backend,
    attention_with_lse,
    flash_available,
    flash_varlen_attention,
    plain_attention_with_lse,
    segment_attention,
    why_not_flash,
)
from mia_fast.pipeline.device import Accelerator, plan_for


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


def sees(query_at: torch.Tensor, key_at: torch.Tensor, window: int | None) -> torch.Tensor:
    """The keys a query at key position p sees: p - window < position <= p (no window: every position <= p)."""
    visible = key_at <= query_at
    return visible if window is None else visible & (key_at > query_at - window)


def one_segment_at_a_time(q, k, v, cu_q, cu_k, window=None) -> torch.Tensor:
    """Each segment's attention alone, in fp64, query j of a segment with c context keys standing at key c + j."""
    out = torch.empty(q.shape, dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    for i in range(len(cu_q) - 1):
        qs = q[cu_q[i] : cu_q[i + 1]].double().transpose(0, 1)
        ks = k[cu_k[i] : cu_k[i + 1]].double().repeat_interleave(group, dim=1).transpose(0, 1)
        vs = v[cu_k[i] : cu_k[i + 1]].double().repeat_interleave(group, dim=1).transpose(0, 1)
        scores = qs @ ks.transpose(-1, -2) / q.shape[-1] ** 0.5
        length, keys = qs.shape[1], ks.shape[1]
        visible = sees(torch.arange(length)[:, None] + (keys - length), torch.arange(keys)[None, :], window)
        scores = scores.masked_fill(~visible, float("-inf"))
        out[cu_q[i] : cu_q[i + 1]] = (scores.softmax(-1) @ vs).transpose(0, 1)
    return out


def max_keys(cu_k: torch.Tensor) -> int:
    return int((cu_k[1:] - cu_k[:-1]).max())


@settings(max_examples=30, deadline=None)
@given(
    segments=st.lists(st.tuples(st.integers(1, 40), st.sampled_from([0, 0, 3, 17])), min_size=1, max_size=7),
    heads=st.sampled_from([(4, 4), (4, 2), (6, 1)]),
    window=st.one_of(st.none(), st.integers(1, 64)),
)
def test_segment_attention_equals_each_segment_alone(segments, heads, window):
    lengths, contexts = [n for n, _ in segments], [c for _, c in segments]
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, *heads)
    segments = Segments(cu_q, cu_k, max(lengths), max_keys(cu_k))
    got = segment_attention(q, k, v, segments, enable_gqa=heads[0] != heads[1], window=window)
    expected = one_segment_at_a_time(q, k, v, cu_q, cu_k, window)
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-6)


# Windows of one key, shorter than, equal to (13, 16, 23 keys) and longer than the segments and their padded widths.
@pytest.mark.parametrize("window", [1, 4, 13, 16, 23, 40, 47, 1000])
@pytest.mark.parametrize("heads", [(4, 4), (6, 2)])
def test_a_sliding_window_hides_the_keys_it_leaves_behind(window, heads):
    lengths, contexts = [13, 16, 5, 40, 13], [0, 7, 0, 7, 10]
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, *heads, seed=1)
    got = segment_attention(q, k, v, Segments(cu_q, cu_k, 40, 47), enable_gqa=heads[0] != heads[1], window=window)
    torch.testing.assert_close(got.double(), one_segment_at_a_time(q, k, v, cu_q, cu_k, window), rtol=1e-6, atol=1e-6)
    if window < 47:
        causal = segment_attention(q, k, v, Segments(cu_q, cu_k, 40, 47), enable_gqa=heads[0] != heads[1])
        assert not torch.allclose(got, causal)


@pytest.mark.parametrize("window", [1, 2, 5, 12, 30])
def test_the_window_hides_what_transformers_sliding_window_hides(window):
    """transformers 5.x: ``kv_idx > q_idx - sliding_window`` and ``kv_idx <= q_idx``, positions absolute (a cached
    prefix, the context here, before the queries)."""
    query_at, key_at = torch.arange(20)[:, None], torch.arange(20)[None, :]
    theirs = sliding_window_causal_mask_function(window)(0, 0, query_at, key_at)
    assert torch.equal(sees(query_at, key_at, window), theirs)
    assert int(theirs[-1].sum()) == min(window, 20)


def test_a_segment_attends_the_same_bits_whatever_segments_are_beside_it():
    lengths, contexts = [13, 5, 40, 13, 1], [0, 7, 0, 7, 0]
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, 4, 2)
    for window in (None, 6):
        together = segment_attention(q, k, v, Segments(cu_q, cu_k, 40, 40), enable_gqa=True, window=window)
        for i in range(len(lengths)):
            qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
            offsets = cu_q[i : i + 2] - cu_q[i], cu_k[i : i + 2] - cu_k[i]
            alone = segment_attention(q[qs], k[ks], v[ks], Segments(*offsets, 40, 40), enable_gqa=True, window=window)
            assert torch.equal(together[qs], alone)


def test_segment_attention_refuses_fewer_keys_than_queries():
    q, k, v, _, _ = packed_inputs([4], [0], 2, 2)
    with pytest.raises(ValueError, match="segment 0 has fewer keys"):
        segment_attention(q, k[:3], v[:3], Segments(torch.tensor([0, 4]), torch.tensor([0, 3]), 4, 3))


@pytest.mark.parametrize("attend", [segment_attention, flash_varlen_attention])
def test_an_empty_window_or_ungrouped_heads_of_unequal_counts_are_refused(attend):
    q, k, v, cu_q, cu_k = packed_inputs([4], [0], 4, 2)
    with pytest.raises(ValueError, match=r"^a sliding window holds at least the query's own key, got window=0$"):
        attend(q, k, v, Segments(cu_q, cu_k, 4, 4), enable_gqa=True, window=0)
    with pytest.raises(ValueError, match=r"^4 query heads and 2 key heads: grouped heads need enable_gqa"):
        attend(q, k, v, Segments(cu_q, cu_k, 4, 4))


# ---- which heads scaled_dot_product_attention gets: grouped on a CPU, every query head's on a GPU ----


@pytest.mark.parametrize("cpu_flash", [True, False])
def test_grouped_heads_are_repeated_only_where_torchs_fast_kernels_lack_them(monkeypatch, cpu_flash):
    """On a GPU (stood in for by the CPU told its flash attention is absent) grouped heads would send
    ``scaled_dot_product_attention`` to its math backend, which holds every fp32 score; they are repeated, and masks
    (contexts, windows) still pass as ``attn_mask``, which the memory-efficient kernel takes. Plain causal groups keep
    ``is_causal``."""
    calls: list[dict] = []
    sdpa = F.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, is_causal=False, enable_gqa=False):
        calls.append(
            {"kv_heads": key.shape[1], "gqa": enable_gqa, "masked": attn_mask is not None, "causal": is_causal}
        )
        return sdpa(query, key, value, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa)

    monkeypatch.setattr(attention, "cpu_flash_attention", lambda device: cpu_flash)
    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    lengths, contexts, window = [9, 30, 2, 20], [0, 0, 0, 5], 10
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, 6, 2)
    got = segment_attention(q, k, v, Segments(cu_q, cu_k, 30, 30), enable_gqa=True, window=window)
    torch.testing.assert_close(got.double(), one_segment_at_a_time(q, k, v, cu_q, cu_k, window), rtol=1e-6, atol=1e-6)
    kv_heads = 2 if cpu_flash else 6
    assert all(call["kv_heads"] == kv_heads and call["gqa"] == cpu_flash for call in calls)
    # Groups: width 16 (9 and 2 queries), 32 (30), 32 after 5 context keys: a window of 10 keys hides keys in each.
    assert [call["masked"] for call in calls] == [True, True, True]
    for window, causal_groups in ((16, [True, False, False]), (40, [True, True, False]), (None, [True, True, False])):
        calls.clear()
        segment_attention(q, k, v, Segments(cu_q, cu_k, 30, 30), enable_gqa=True, window=window)
        assert [call["causal"] for call in calls] == causal_groups
        assert [call["masked"] for call in calls] == [not causal for causal in causal_groups]


# ---- torch's flash varlen attention, as each torch takes it ----


def stand_in(signature: str, calls: list):
    """A ``varlen_attn`` with the keyword parameters of a torch release, and aten's ``_flash_attention_forward`` it
    runs, each answering with the reference; both check that grouped heads arrive as they are, never repeated."""

    def answer(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, window_size, **options):
        calls.append({"kv_heads": key.shape[1], "offsets": (cu_seq_q, cu_seq_k), "window_size": window_size, **options})
        left, right = window_size
        assert right == 0 and left >= -1, "not causal"
        window = None if left == -1 else left + 1
        grouped = key.shape[1] != query.shape[1]
        segments = Segments(cu_seq_q.long(), cu_seq_k.long(), max_q, max_k)
        return segment_attention(query, key, value, segments, enable_gqa=grouped, window=window)

    def flash_attention_forward(
        query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, **options
    ):
        window_size = (options.pop("window_size_left"), options.pop("window_size_right"))
        assert dropout_p == 0.0 and not return_debug_mask and options == {}
        assert is_causal == (window_size == CAUSAL)
        out = answer(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, window_size, op="aten")
        return out, None, None, None, None

    if signature == "2.10":

        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, is_causal=False, return_aux=None):
            raise AssertionError("torch 2.10's varlen_attn takes no grouped heads and no window")

    elif signature == "2.11":

        def varlen_attn(
            query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
        ):
            raise AssertionError("torch 2.11's varlen_attn takes no enable_gqa: grouped heads would be refused")

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
            assert enable_gqa or key.shape[1] == query.shape[1], (
                "keys with fewer heads than queries, without enable_gqa"
            )
            options = {"enable_gqa": enable_gqa, "num_splits": num_splits, "op": "varlen_attn"}
            return answer(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, window_size, **options)

    return varlen_attn, flash_attention_forward


@pytest.fixture
def installed_torch(monkeypatch):
    """Installs the stand-ins of a torch release's signature; the calls they got."""
    import torch.nn.attention.varlen as varlen

    calls: list = []

    def install(signature: str) -> list:
        varlen_attn, flash_attention_forward = stand_in(signature, calls)
        monkeypatch.setattr(varlen, "varlen_attn", varlen_attn)
        monkeypatch.setattr(torch.ops.aten, "_flash_attention_forward", flash_attention_forward)
        attention._varlen_parameters.cache_clear()
        return calls

    yield install
    attention._varlen_parameters.cache_clear()


@pytest.mark.parametrize("window", [None, 1, 4, 100])
@pytest.mark.parametrize("kv_heads", [2, 8])
@pytest.mark.parametrize("signature", ["2.10", "2.11", "2.13"])
def test_flash_varlen_attention_calls_each_torch_as_it_takes_grouped_heads(
    installed_torch, signature, kv_heads, window
):
    calls = installed_torch(signature)
    lengths, contexts = [9, 30, 2], [5, 5, 0]
    q, k, v, cu_q, cu_k = packed_inputs(lengths, contexts, 8, kv_heads)
    got = flash_varlen_attention(q, k, v, Segments(cu_q, cu_k, 30, 35), enable_gqa=kv_heads != 8, window=window)
    torch.testing.assert_close(got.double(), one_segment_at_a_time(q, k, v, cu_q, cu_k, window), rtol=1e-5, atol=1e-5)
    (call,) = calls
    assert call["kv_heads"] == kv_heads  # grouped heads as they are, never repeated
    assert all(offsets.dtype == torch.int32 for offsets in call["offsets"])
    assert call["window_size"] == {None: (-1, 0), 1: (0, 0), 4: (3, 0), 100: (99, 0)}[window]
    if signature == "2.13":  # split-KV off, so the batch changes no bit
        assert call["op"] == "varlen_attn" and call["enable_gqa"] == (kv_heads != 8) and call["num_splits"] == 1
    else:  # the op varlen_attn runs underneath, which takes grouped heads
        assert call["op"] == "aten"


def test_int32_offsets_reach_varlen_attn_as_they_are(installed_torch):
    calls = installed_torch("2.13")
    q, k, v, cu_q, cu_k = packed_inputs([9, 30], [5, 0], 8, 2)
    cu_q, cu_k = cu_q.to(torch.int32), cu_k.to(torch.int32)
    flash_varlen_attention(q, k, v, Segments(cu_q, cu_k, 30, 30), enable_gqa=True)
    (call,) = calls
    assert call["offsets"][0] is cu_q and call["offsets"][1] is cu_k


@pytest.fixture
def hopper(monkeypatch):
    """A CUDA device's plan as an H100's (what differs by GPU is stood in for: this machine may have none)."""
    own = device.device_plan
    h100 = plan_for(Accelerator("nvidia", "sm_90", native_bf16=True))
    monkeypatch.setattr(device, "device_plan", lambda where: h100 if where.type == "cuda" else own(where))


def test_flash_runs_on_cuda_in_half_precision_only(hopper):
    has_varlen = "window_size" in inspect.signature(torch.nn.attention.varlen.varlen_attn).parameters
    cuda = torch.device("cuda")
    assert flash_available(cuda, torch.bfloat16, 128) == has_varlen
    assert flash_available(cuda, torch.float16, 64) == has_varlen
    assert why_not_flash(cuda, torch.float32, 128) == "flash attention takes fp16 or bf16, not float32"
    not_flash = "flash attention takes heads of 8 to 256 dims in steps of 8, not 12"
    assert why_not_flash(cuda, torch.bfloat16, 12) == not_flash


def test_flash_runs_only_on_the_gpus_whose_row_says_so(monkeypatch):
    assert why_not_flash(torch.device("cpu"), torch.bfloat16, 128) == "not a GPU"
    cuda = torch.device("cuda")
    for found, reason in (
        (Accelerator("nvidia", "sm_75", native_bf16=False), "torch's flash kernel does not run sm_75"),
        (Accelerator("amd", "gfx1100", native_bf16=True), "torch's flash kernel does not run gfx1100"),
    ):
        monkeypatch.setattr(device, "device_plan", lambda _, found=found: plan_for(found))
        assert why_not_flash(cuda, torch.float16, 64) == reason
        assert attention_backend(cuda, torch.float16, 64) is SEGMENT_ATTENTION


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


def test_the_backend_is_flash_where_it_runs_and_says_what_it_takes(hopper):
    has_varlen = "window_size" in inspect.signature(torch.nn.attention.varlen.varlen_attn).parameters
    flash = attention_backend(torch.device("cuda"), torch.bfloat16, 128)
    assert (flash.attend is flash_varlen_attention) == has_varlen
    if has_varlen:
        assert flash.in_model_dtype and not flash.offsets_on_host and flash.name == "varlen attention (flash)"
    for kind, dtype in (("cuda", torch.float32), ("cpu", torch.bfloat16)):
        assert attention_backend(torch.device(kind), dtype, 128) is SEGMENT_ATTENTION
    assert SEGMENT_ATTENTION.offsets_on_host and not SEGMENT_ATTENTION.in_model_dtype
