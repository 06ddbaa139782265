"""The pad-free forward (pipeline.packed) and the streamed head statistics (ops.token_stats.StreamedTokenStats):
each against the model's own forward and against an fp64 definition, over odd shapes and each dtype."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import random_sentence
from helpers import recomputing_prefixes
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast import ComputeConfig, ConRecallSettings, Detector, ModelConfig, RecallSettings
from mia_fast.engines.batching import plan_batches
from mia_fast.ops.token_stats import StreamedTokenStats, token_stats_torch
from mia_fast.pipeline.attention import SEGMENT_ATTENTION, AttentionBackend, segment_attention
from mia_fast.pipeline.device import onednn_layout
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.models import load_model
from mia_fast.pipeline.packed import KEPT_CONTEXTS, PackedDecoder, packed_unsupported

pytestmark = pytest.mark.lower_bounds

ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),  # q, k and v carry biases
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    # Pythia's family: parallel residual, a quarter of each head rotated, LayerNorm with biases, GELU; no GQA
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"rotary_pct": 0.25, "use_parallel_residual": True}),
}
# Both weight layouts: copied into fused, reordered oneDNN products (a CPU's) and the model's own weights (a GPU's).
LAYOUTS = {"reordered": True, "own weights": False}


def tiny_decoder(
    kind: str, seed: int = 0, heads: int = 4, kv_heads: int = 2, head_dim: int = 8, **extra
) -> torch.nn.Module:
    import transformers

    config_name, model_name, defaults = ARCHITECTURES[kind]
    shape = {"num_attention_heads": heads, "hidden_size": 24, "max_position_embeddings": 64}
    if kind == "gpt_neox":  # no separate head size or key/value heads: head_dim is hidden_size / heads
        shape["hidden_size"] = heads * head_dim
    else:
        shape.update(num_key_value_heads=kv_heads, head_dim=head_dim)
    config = getattr(transformers, config_name)(
        vocab_size=97, intermediate_size=40, num_hidden_layers=2, **shape, **{**defaults, **extra}
    )
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # biases and norm weights away from their 0 / 1 start, so a misplaced one shows
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)
    return model


def own_hidden(model: torch.nn.Module, rows: list[list[int]]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0].float() for ids in rows])


def random_rows(lengths: list[int], seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 97, (n,), generator=generator).tolist() for n in lengths]


def packed_hidden(decoder: PackedDecoder, rows: list[list[int]], contexts=None) -> torch.Tensor:
    return decoder.hidden(torch.tensor([i for r in rows for i in r]), [len(r) for r in rows], contexts)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 4), (6, 1)])
def test_packed_hidden_states_equal_the_model_forward(kind, heads, kv_heads, layout):
    model = tiny_decoder(kind, heads=heads, kv_heads=kv_heads)
    rows = random_rows([17, 1, 40, 5, 17, 2])  # odd lengths, a single token, ties
    packed = packed_hidden(PackedDecoder(model, reorder=LAYOUTS[layout]), rows)
    assert packed.dtype == torch.float32
    torch.testing.assert_close(packed, own_hidden(model, rows), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_sequences_after_shared_contexts_equal_the_model_forward_on_context_and_sequence(kind, layout):
    """Two prefixes' keys and values, each computed once, attended to by packed sequences (GQA where the family
    has it): each sequence's states as the model gives them after its prefix, whatever its batch holds."""
    model = tiny_decoder(kind, heads=4, kv_heads=2)
    decoder = PackedDecoder(model, reorder=LAYOUTS[layout])
    prefixes, rows = random_rows([9, 3], seed=5), random_rows([20, 1, 7, 33, 4], seed=6)
    contexts = [decoder.context(prefixes[i % 3]) if i % 3 < 2 else None for i in range(len(rows))]
    expected = torch.cat(
        [own_hidden(model, [(prefixes[i % 3] if i % 3 < 2 else []) + row])[-len(row) :] for i, row in enumerate(rows)]
    )
    torch.testing.assert_close(packed_hidden(decoder, rows, contexts), expected, rtol=1e-5, atol=1e-5)


def test_packed_rope_scaling_follows_the_model():
    model = tiny_decoder("llama", rope_scaling={"rope_type": "linear", "factor": 2.0})
    rows = random_rows([30, 9])
    for reorder in LAYOUTS.values():
        torch.testing.assert_close(
            packed_hidden(PackedDecoder(model, reorder=reorder), rows), own_hidden(model, rows), rtol=1e-5, atol=1e-5
        )


def test_gpt_neox_sequential_residual_and_full_rotary_equal_the_model_forward():
    model = tiny_decoder("gpt_neox", use_parallel_residual=False, rotary_pct=1.0, hidden_act="gelu_new")
    rows = random_rows([25, 3, 11])
    for reorder in LAYOUTS.values():
        torch.testing.assert_close(
            packed_hidden(PackedDecoder(model, reorder=reorder), rows), own_hidden(model, rows), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_packed_bf16_is_as_close_to_fp32_as_the_model_bf16_forward(kind, layout):
    """The residual stream in bf16 as the model keeps it, norms rounded once: within 10% of the model's own bf16
    error against fp32 (measured 0.94-1.04x its mean deviation over the families and layouts)."""
    model = tiny_decoder(kind, seed=3)
    rows = random_rows([48, 31, 12], seed=1)
    reference = own_hidden(model, rows).double()
    model_bf16 = tiny_decoder(kind, seed=3).to(torch.bfloat16)
    packed = packed_hidden(PackedDecoder(model_bf16, reorder=LAYOUTS[layout]), rows)
    ours = (packed.double() - reference).abs().mean()
    theirs = (own_hidden(model_bf16, rows).double() - reference).abs().mean()
    assert packed.dtype == torch.bfloat16
    assert ours <= 1.1 * theirs


@pytest.mark.parametrize("kind", ["qwen2", "gpt_neox"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_epilogues_without_onednn_give_what_onednn_gives(monkeypatch, kind, dtype):
    """The activations, the gate's product and the residual sums in oneDNN's epilogues, and as separate torch ops:
    the same hidden states, each within 1e-5 of the model's own fp32 forward in fp32."""
    if not onednn_layout(torch.device("cpu"), dtype):
        pytest.skip(f"oneDNN computes no {dtype} products on this CPU")
    model = tiny_decoder(kind, seed=4).to(dtype)
    rows = random_rows([37, 5, 20], seed=2)
    fused = PackedDecoder(model)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    separate = PackedDecoder(model)
    assert fused.layers[0].mlp.down.onednn and not separate.layers[0].mlp.down.onednn
    assert fused.layers[0].mlp.down.epilogues == (dtype == torch.float32)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        packed_hidden(separate, rows), packed_hidden(fused, rows), atol=tolerance, rtol=tolerance
    )
    if dtype == torch.float32:
        torch.testing.assert_close(packed_hidden(fused, rows), own_hidden(model, rows), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["qwen2", "gpt_neox"])
def test_packed_leaves_the_model_as_it_was(kind):
    model = tiny_decoder(kind)
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    PackedDecoder(model)
    PackedDecoder(model, reorder=False)
    for name, p in model.state_dict().items():
        assert torch.equal(p, before[name]), name


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_the_decoder_on_the_models_own_weights_copies_no_weight(kind):
    """A GPU's layout: every product reads the model's own weight tensor, so a 16 GB model stays 16 GB."""
    model = tiny_decoder(kind)
    decoder = PackedDecoder(model, reorder=False)
    own = {p.data_ptr() for p in model.parameters()}
    products = [
        product
        for layer in decoder.layers
        for product in (*layer.qkv.products, layer.out, *vars(layer.mlp).values())
        if product is not None and not isinstance(product, str)
    ] + [project for _, project in decoder.head_chunks]
    assert products and all(product.weight.data_ptr() in own for product in products)


def test_unsupported_models_say_why():
    from transformers import GPT2Config, GPT2LMHeadModel

    assert "gpt2" in packed_unsupported(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)), 64)
    assert packed_unsupported(tiny_decoder("llama"), 64) is None
    assert packed_unsupported(tiny_decoder("gpt_neox"), 64) is None
    assert "relu" in packed_unsupported(tiny_decoder("gpt_neox", hidden_act="relu"), 64)
    assert packed_unsupported(tiny_decoder("mistral", sliding_window=16), 64) is None


WINDOWED = {
    "mistral": {"sliding_window": 8},
    "qwen2": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},  # layer 0 full, layer 1 not
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", sorted(WINDOWED))
def test_a_sliding_window_packed_equals_the_model_forward_on_texts_longer_than_the_window(kind, layout):
    """Mistral attends through its window in every layer, Qwen2 in the layers its config names: texts of up to
    5 windows, alone and after a shared context, each within 1e-5 of the model's own fp32 forward."""
    model = tiny_decoder(kind, **WINDOWED[kind])
    decoder = PackedDecoder(model, reorder=LAYOUTS[layout])
    assert decoder.windows == ([8, 8] if kind == "mistral" else [None, 8])
    rows = random_rows([40, 1, 8, 9, 23], seed=7)
    torch.testing.assert_close(packed_hidden(decoder, rows), own_hidden(model, rows), rtol=1e-5, atol=1e-5)
    prefix = random_rows([11], seed=8)[0]
    contexts = [decoder.context(prefix)] * len(rows)
    expected = torch.cat([own_hidden(model, [prefix + row])[-len(row) :] for row in rows])
    torch.testing.assert_close(packed_hidden(decoder, rows, contexts), expected, rtol=1e-5, atol=1e-5)
    unwindowed = packed_hidden(PackedDecoder(tiny_decoder(kind), reorder=LAYOUTS[layout]), rows)
    assert not torch.allclose(packed_hidden(decoder, rows), unwindowed, atol=1e-3)


def flash_stand_in(calls: list):
    """Flash ``varlen_attn`` as the bf16 path calls it, answered by the reference: grouped heads must come as they
    are, offsets on the device as int32, q, k and v in the model's dtype."""

    def attend(query, key, value, segments, *, enable_gqa=False, window=None):
        assert key.shape[1] < query.shape[1] and enable_gqa, "keys and values repeated to every query head"
        assert segments.cu_seq_q.dtype == segments.cu_seq_k.dtype == torch.int32
        assert query.dtype == key.dtype == value.dtype == torch.bfloat16
        calls.append(window)
        return segment_attention(query, key, value, segments, enable_gqa=True, window=window)

    return AttentionBackend("flash stand-in", attend, offsets_on_host=False, in_model_dtype=True)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_the_bf16_flash_path_passes_grouped_heads_int32_offsets_and_windows_as_they_are(kind):
    model = tiny_decoder(kind, seed=3, heads=4, kv_heads=2, **WINDOWED.get(kind, {})).to(torch.bfloat16)
    rows, calls, prefix = random_rows([30, 3, 17], seed=1), [], random_rows([5], seed=2)[0]

    def hidden(decoder: PackedDecoder) -> torch.Tensor:
        context = decoder.context(prefix)
        return packed_hidden(decoder, rows, [context, None, context])

    decoder = PackedDecoder(model, reorder=False, attention=flash_stand_in(calls))
    got = hidden(decoder)
    assert calls == decoder.windows * 2  # the context, then the texts
    expected = hidden(PackedDecoder(model, reorder=False, attention=SEGMENT_ATTENTION))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected.float(), atol=5e-2, rtol=5e-2)


def test_engine_packs_llama_on_cpu_and_scores_as_the_padded_forward(tiny_model_dir):
    rng = random.Random(5)
    texts = ["", "a", *(random_sentence(rng, rng.randint(2, 60)) for _ in range(20))]  # some beyond the 64-id context
    loaded = load_model(str(tiny_model_dir))
    packed = StatsEngine(loaded, batch_tokens=200)
    padded = StatsEngine(loaded, batch_tokens=200, forward="model")
    assert packed.packs and packed.cache_settings()["packed"] and not padded.packs
    a, b = packed.compute(texts), padded.compute(texts)
    assert a.lengths.tolist() == b.lengths.tolist()
    np.testing.assert_array_equal(a.target_ids, b.target_ids)
    for name in ("logp", "mu", "var"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-5)


def test_engine_follows_weights_changed_after_its_first_pass(tiny_model_dir):
    """A model fine-tuned in place after a first score (the demo, the unlearning audit) is scored as it is now."""
    texts = ["the quick brown fox jumps over the lazy dog", "all that glitters is not gold"]
    loaded = load_model(str(tiny_model_dir))
    engine = StatsEngine(loaded)
    before = engine.compute(texts).logp
    with torch.no_grad():
        for parameter in loaded.model.parameters():
            parameter.mul_(1.01)
    after = engine.compute(texts).logp
    fresh = StatsEngine(loaded).compute(texts).logp
    assert np.abs(after - before).max() > 1e-3
    np.testing.assert_array_equal(after, fresh)


_ENGINES: dict = {}


@settings(max_examples=10, deadline=None)
@given(budget=st.integers(1, 400), order=st.permutations(range(12)))
def test_a_text_scores_the_same_bits_whatever_it_is_batched_with(tiny_model_dir, budget, order):
    """The products do not depend on the rows beside a row and the attention runs one sequence at a time, so
    the batch budget and the company a text keeps change no bit of its statistics (a threshold calibrated
    on some texts then holds exactly for the same texts scored among others)."""
    if "engine" not in _ENGINES:
        rng = random.Random(7)
        _ENGINES["texts"] = [random_sentence(rng, rng.randint(1, 50)) for _ in range(12)]
        _ENGINES["engine"] = StatsEngine(load_model(str(tiny_model_dir)))
        _ENGINES["alone"] = [_ENGINES["engine"].compute([t]) for t in _ENGINES["texts"]]
    engine, texts = _ENGINES["engine"], _ENGINES["texts"]
    engine.batch_tokens = budget
    together = engine.compute([texts[i] for i in order])
    for position, i in enumerate(order):
        for name in ("logp", "mu", "var"):
            np.testing.assert_array_equal(together.text(position)[name], _ENGINES["alone"][i].text(0)[name])


# ---- a shared prefix, computed once ----


@pytest.fixture(scope="module")
def prefixed_texts():
    """Texts after two prefixes and none; some texts run past the tiny model's 64-id window after their prefix."""
    rng = random.Random(11)
    texts = ["", "a", *(random_sentence(rng, rng.randint(2, 50)) for _ in range(14))]
    prefixes = [random_sentence(rng, 12), random_sentence(rng, 5)]
    return texts, [prefixes[i % 3] if i % 3 < 2 else "" for i in range(len(texts))]


def test_a_shared_prefix_scores_as_the_prefix_recomputed_in_every_row(tiny_model_dir, prefixed_texts):
    texts, prefixes = prefixed_texts
    loaded = load_model(str(tiny_model_dir))
    shared = StatsEngine(loaded, batch_tokens=120)
    recomputed = recomputing_prefixes(StatsEngine(loaded, batch_tokens=120))
    padded = StatsEngine(loaded, batch_tokens=120, forward="model")
    assert max(len(r.ids) for r in shared.rows(texts, prefixes)) > 40  # windows after a prefix, not just short rows
    a, b, c = (engine.compute(texts, prefixes=prefixes) for engine in (shared, recomputed, padded))
    for other in (b, c):
        np.testing.assert_array_equal(a.offsets, other.offsets)
        np.testing.assert_array_equal(a.target_ids, other.target_ids)
        for name in ("logp", "mu", "var", "max_logp"):
            np.testing.assert_allclose(getattr(a, name), getattr(other, name), rtol=0, atol=1e-5, err_msg=name)


def test_each_prefix_runs_once_whatever_the_batches_and_passes(tiny_model_dir, prefixed_texts, tmp_path):
    texts, _ = prefixed_texts
    texts = [t for t in texts if t]
    nonmembers, members = ("one two three four", "five six seven"), ("alpha beta", "gamma delta epsilon")
    detector = Detector(
        ModelConfig(str(tiny_model_dir)),
        [RecallSettings(prefix_nonmembers=nonmembers), ConRecallSettings(prefix_members=members)],
        ComputeConfig(batch_tokens=40),
    )
    engine = detector.engines["target"]
    run_ids: list[int] = []
    forward = PackedDecoder.residual

    def counting(decoder, ids, lengths, contexts, kept=None, **options):
        run_ids.append(int(ids.shape[0]) if kept is not None else 0)
        return forward(decoder, ids, lengths, contexts, kept, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PackedDecoder, "residual", counting)
        scores = detector.score(texts, methods=["recall", "conrecall"])
    prefix_ids = [len(engine.context_ids(p)) for p in ("".join(nonmembers), "".join(members))]
    assert sorted(n for n in run_ids if n) == sorted(prefix_ids)  # two prefixes, each run once
    assert sum(1 for n in run_ids if not n) > 3  # over many batches
    recomputed = Detector(
        ModelConfig(str(tiny_model_dir)),
        [RecallSettings(prefix_nonmembers=nonmembers), ConRecallSettings(prefix_members=members)],
        ComputeConfig(batch_tokens=40),
    )
    recomputing_prefixes(recomputed.engines["target"])
    expected = recomputed.score(texts, methods=["recall", "conrecall"])
    for column in ("recall", "conrecall"):
        np.testing.assert_allclose(scores[column], expected[column], rtol=0, atol=1e-5, err_msg=column)


_PREFIXED: dict = {}


@settings(max_examples=10, deadline=None)
@given(budget=st.integers(1, 400), order=st.permutations(range(16)))
def test_a_text_after_a_prefix_scores_the_same_bits_whatever_it_is_batched_with(
    tiny_model_dir, prefixed_texts, budget, order
):
    texts, prefixes = prefixed_texts
    if "engine" not in _PREFIXED:
        _PREFIXED["engine"] = StatsEngine(load_model(str(tiny_model_dir)))
        _PREFIXED["alone"] = [_PREFIXED["engine"].compute([t], prefixes=[p]) for t, p in zip(texts, prefixes)]
    engine = _PREFIXED["engine"]
    engine.batch_tokens = budget
    together = engine.compute([texts[i] for i in order], prefixes=[prefixes[i] for i in order])
    for position, i in enumerate(order):
        for name in ("logp", "mu", "var"):
            np.testing.assert_array_equal(together.text(position)[name], _PREFIXED["alone"][i].text(0)[name])


def test_the_decoder_keeps_the_latest_prefixes_only():
    decoder = PackedDecoder(tiny_decoder("llama"))
    first = decoder.context([1, 2, 3])
    assert decoder.context([1, 2, 3]) is first
    for n in range(KEPT_CONTEXTS):
        decoder.context([5, n])
    assert decoder.context([1, 2, 3]) is not first  # pushed out, computed again
    torch.testing.assert_close(decoder.context([1, 2, 3]).keys[1], first.keys[1], rtol=0, atol=0)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), max_size=40), budget=st.integers(1, 1000))
def test_packed_batches_hold_the_budget_and_every_row_once(lengths, budget):
    batches = plan_batches(lengths, budget, packed=True)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or sum(lengths[i] for i in batch) <= budget


# ---- streamed statistics ----


def fp64_stats(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    lp = torch.log_softmax(logits.double(), -1)
    p = lp.exp()
    live = p > 0  # a masked id (-inf) adds nothing, not 0 * inf
    mu = torch.where(live, p * lp, 0.0).sum(-1)
    var = torch.where(live, p * (lp - mu.unsqueeze(-1)).square(), 0.0).sum(-1)
    return lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), mu, var, lp.amax(-1)


def streamed(logits: torch.Tensor, targets: torch.Tensor, chunk: int, native: bool) -> tuple[torch.Tensor, ...]:
    stats = StreamedTokenStats(targets, native=native)
    for start in range(0, logits.shape[1], chunk):
        stats.add(logits[:, start : start + chunk].clone(), start)
    return stats.result()


def awkward_logits(rows: int, vocab: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    logits = torch.randn(rows, vocab) * 4
    if rows > 3:
        logits[0] = torch.randn(vocab) * 1e-3  # nearly flat
        logits[1, vocab // 2] = 60.0  # peaked, its max in a late chunk
        logits[2] = 30.0 + torch.randn(vocab) * 0.5  # far from zero
        logits[3, : vocab // 3] = -float("inf")  # a whole chunk or more masked out
    return logits.to(dtype)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "rows,vocab,chunk", [(1, 1, 1), (7, 1001, 256), (33, 4099, 4096), (5, 3000, 7), (64, 5000, 5000)]
)
def test_streamed_stats_match_fp64(native, dtype, rows, vocab, chunk):
    logits = awkward_logits(rows, vocab, dtype)
    targets = torch.randint(0, vocab, (rows,))
    if rows > 3:
        targets[3] = vocab - 1  # a live target in a row with masked logits
    expected = fp64_stats(logits.float(), targets)
    for got, want in zip(streamed(logits, targets, chunk, native), expected, strict=True):
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        np.testing.assert_allclose(got.double(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_streamed_stats_are_no_less_accurate_than_the_eager_reference(dtype):
    logits = awkward_logits(64, 49152, dtype, seed=5)
    targets = torch.randint(0, 49152, (64,))
    exact = fp64_stats(logits.float(), targets)
    eager = token_stats_torch(logits, targets)
    native = streamed(logits, targets, 4096, native=True)
    for ours, theirs, want in zip(native, eager, exact, strict=True):
        assert (ours.double() - want).abs().max() <= max(1.5 * (theirs.double() - want).abs().max(), 1e-6)


def test_native_state_is_checked():
    from mia_fast import _native

    logits = np.zeros((4, 8), np.float32)
    targets = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="state must be"):
        _native.merge_logit_chunk(logits, 0, targets, np.zeros((5, 3)), 1)
    with pytest.raises(ValueError, match="targets must be"):
        _native.merge_logit_chunk(logits, 0, np.zeros(3, np.int64), np.zeros((5, 4)), 1)
    with pytest.raises(ValueError, match="contiguous"):
        _native.merge_logit_chunk(logits[:, ::2], 0, targets, np.zeros((5, 4)), 1)
    with pytest.raises(TypeError, match="float32"):
        _native.merge_logit_chunk(logits.astype(np.float64), 0, targets, np.zeros((5, 4)), 1)


def test_native_threads_change_nothing():
    logits = awkward_logits(37, 2000, torch.float32, seed=2)
    targets = torch.randint(0, 2000, (37,))
    results, original = [], torch.get_num_threads()
    for threads in (1, 2, 5):
        torch.set_num_threads(threads)
        try:
            results.append(streamed(logits, targets, 512, native=True))
        finally:
            torch.set_num_threads(original)
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_wide_residual_keeps_a_16_bit_model_nearer_fp32(kind, dtype):
    """The residual stream in fp32 (a CPU's choice): each layer's output is added unrounded. Over 240 positions it
    moves the final hidden states less from the fp32 model's than the model's dtype does, and its output is still in
    the model's dtype."""
    model = tiny_decoder(kind, seed=4)
    rows = random_rows([60] * 4, seed=6)
    exact = packed_hidden(PackedDecoder(model, reorder=True), rows).double()
    model = model.to(dtype)
    errors = {}
    for residual in (None, torch.float32):
        got = packed_hidden(PackedDecoder(model, reorder=True, residual_dtype=residual), rows)
        assert got.dtype == dtype
        errors[residual] = (got.double() - exact).abs().mean().item()
    assert errors[torch.float32] < errors[None], errors
