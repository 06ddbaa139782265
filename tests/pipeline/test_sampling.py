"""The sampling decoder (pipeline.sampling): each prompt prefilled once for all its samples, the same tokens as
transformers' own ``generate`` with the same warpers and keyed noise, through the model's forward or the packed
decoder, and samples that do not depend on the batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

from mia_fast import ComputeConfig, Detector, SamiaSettings
from mia_fast.methods.samia import samia_pass
from mia_fast.pipeline.decoding import PackedDecoding
from mia_fast.pipeline.packed import PackedDecoder
from mia_fast.pipeline.sampling import _draw, generate, gumbel_noise, plan_prompt_batches
from mia_fast.scoring.planner import run_passes

VOCAB = 97
SETTINGS = [(5, 1.0), (0, 0.8), (10, 0.9), (0, 1.0)]  # (top_k, top_p)


def tiny(kind: str) -> torch.nn.Module:
    """A random decoder: Llama (rotary, grouped heads), Qwen2 (biased q, k and v), GPT-2 (learned positions), Mistral
    with a sliding window shorter than the rows, Gemma 2 (alternating windows, soft-capped logits, eager attention)."""
    # An output head of its own: tied to the input embeddings, the scaled-up head makes each row repeat its token.
    head = {"vocab_size": VOCAB, "bos_token_id": None, "eos_token_id": None, "tie_word_embeddings": False}
    common = {**head, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
    configs = {
        "llama": lambda: transformers.LlamaConfig(**common, **heads),
        "qwen2": lambda: transformers.Qwen2Config(**common, **heads),
        "gpt2": lambda: transformers.GPT2Config(**head, n_embd=32, n_layer=2, n_head=4, n_positions=64),
        "mistral": lambda: transformers.MistralConfig(**common, **heads, sliding_window=5),
        "gemma2": lambda: transformers.Gemma2Config(**common, **heads, head_dim=8, sliding_window=5),
    }
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(configs[kind]()).eval()
    with torch.no_grad():  # peaked, varied distributions rather than near-uniform ones
        model.get_output_embeddings().weight.normal_(0, 0.5)
    return model


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    return tiny("llama")


@pytest.fixture(scope="module", params=["model", "packed"])
def llama_decoder(request, llama) -> torch.nn.Module | PackedDecoder:
    """The tiny Llama, decoded through its own forward or through the packed decoder."""
    return llama if request.param == "model" else PackedDecoder(llama)


def random_prompts(lengths: list[int], samples: int, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in lengths]
    keys = [[tuple(k) for k in torch.randint(0, 1 << 32, (samples, 2), generator=generator).tolist()] for _ in lengths]
    return prompts, keys


class KeyedNoise(LogitsProcessor):
    def __init__(self, keys: torch.Tensor) -> None:
        self.keys, self.step = keys, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        noise = gumbel_noise(self.keys, self.step, scores.shape[-1])
        self.step += 1
        return scores.float() + noise


def reference(model, prompts, keys, new_tokens, top_k, end_ids, top_p) -> list[list[list[int]]]:
    """The decoder before it: one left-padded row per sample through transformers' ``generate``."""
    rows = [(prompt, key, new) for prompt, prompt_keys, new in zip(prompts, keys, new_tokens) for key in prompt_keys]
    width = max(len(prompt) for prompt, _, _ in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for r, (prompt, _, _) in enumerate(rows):
        input_ids[r, width - len(prompt) :] = torch.tensor(prompt)
        attention_mask[r, width - len(prompt) :] = 1
    warpers = ([TopKLogitsWarper(top_k)] if top_k else []) + ([TopPLogitsWarper(top_p)] if top_p < 1 else [])
    config = GenerationConfig(
        max_new_tokens=max(new_tokens), do_sample=False, pad_token_id=0, eos_token_id=list(end_ids) or None
    )
    output = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        generation_config=config,
        logits_processor=LogitsProcessorList([*warpers, KeyedNoise(torch.tensor([key for _, key, _ in rows]))]),
    )
    samples = iter(output[:, width:].tolist())
    result = []
    for prompt_keys, new in zip(keys, new_tokens):
        result.append([])
        for _ in prompt_keys:
            row = next(samples)[:new]
            end = next((i for i, token in enumerate(row) if token in end_ids), len(row))
            result[-1].append(row[:end])
    return result


@pytest.mark.parametrize("kind", ["llama", "gpt2", "mistral", "gemma2"])
@pytest.mark.parametrize(("top_k", "top_p"), SETTINGS)
def test_the_decoder_draws_what_transformers_generate_draws(kind, top_k, top_p):
    model = tiny(kind)
    prompts, keys = random_prompts([3, 7, 12], samples=3)
    new_tokens = [6, 9, 4]  # rows stop at different steps: the batch is compacted on the way
    endless = reference(model, prompts, keys, new_tokens, top_k, [], top_p)
    assert generate(model, prompts, keys, new_tokens, top_k, [], top_p) == endless
    # An end token that a sample draws second (and not first): it ends there, the others when they draw it.
    first, second = next(sample[:2] for samples in endless for sample in samples if sample[1] != sample[0])
    expected = reference(model, prompts, keys, new_tokens, top_k, [second], top_p)
    assert [first] in (sample for samples in expected for sample in samples)
    assert generate(model, prompts, keys, new_tokens, top_k, [second], top_p) == expected


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize(("top_k", "top_p"), SETTINGS)
def test_the_packed_decoder_draws_what_the_models_forward_draws(kind, top_k, top_p):
    model = tiny(kind)
    packed = PackedDecoder(model)
    prompts, keys = random_prompts([3, 7, 12, 5], samples=3)
    new_tokens = [6, 9, 4, 2]  # the batch is compacted twice, the last prompts' rows leaving it
    endless = generate(model, prompts, keys, new_tokens, top_k, [], top_p)
    assert generate(packed, prompts, keys, new_tokens, top_k, [], top_p) == endless
    # An end token that a sample draws second and not first: the rows that draw it leave the batch there.
    end = next(sample[1] for samples in endless for sample in samples if sample[1:2] not in ([], sample[:1]))
    assert generate(packed, prompts, keys, new_tokens, top_k, [end], top_p) == generate(
        model, prompts, keys, new_tokens, top_k, [end], top_p
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kept_tokens_are_the_warpers_with_ties_at_the_boundary(dtype):
    # Logits with many ties, more than twice k at the k-th: top-k keeps every token tied with the k-th, top-p cuts
    # in its sort; the warpers see them in float32, as transformers' generate passes them.
    logits = (torch.randint(0, 6, (64, VOCAB), generator=torch.Generator().manual_seed(0)) / 2.0).to(dtype)
    keys = torch.randint(0, 1 << 32, (64, 2), generator=torch.Generator().manual_seed(1))
    for top_k, top_p in [*SETTINGS, (1, 1.0), (40, 1.0), (VOCAB + 5, 1.0)]:
        warped = logits.float()
        for warper in ([TopKLogitsWarper(top_k)] if top_k else []) + ([TopPLogitsWarper(top_p)] if top_p < 1 else []):
            warped = warper(None, warped)
        for step in range(3):
            expected = (warped + gumbel_noise(keys, step, VOCAB)).argmax(-1)
            assert torch.equal(_draw(logits, keys, step, top_k, top_p), expected)


def test_a_removed_token_is_never_drawn_even_where_its_noise_is_infinite():
    # The second key's noise at step 0 is +inf at token 93 (its uniform rounds to 1): the decoder before this one
    # added it to the -inf of a removed token and drew the NaN. Here token 93 is removed but among the candidates:
    # the 2k likeliest of its row, or as wide a nucleus as the first row's, which keeps every token.
    keys = torch.tensor([[1, 2], [4100072193, 3442187257]])
    noise = gumbel_noise(keys, 0, VOCAB)
    assert torch.isinf(noise[1, 93])
    tail = -20 - torch.arange(VOCAB - 47) / 100  # far below 47 equally likely tokens, in the order of their ids
    logits = torch.stack([torch.zeros(VOCAB), torch.cat([torch.zeros(47), tail])])
    for top_k, top_p in [(47, 1.0), (0, 0.99), (60, 0.99)]:
        warped = logits
        for warper in ([TopKLogitsWarper(top_k)] if top_k else []) + [TopPLogitsWarper(top_p)]:
            warped = warper(None, warped)
        expected = torch.where(warped == -torch.inf, -torch.inf, warped + noise).argmax(-1)
        assert expected[1] < 47 and torch.equal(_draw(logits, keys, 0, top_k, top_p), expected)
    assert _draw(logits, keys, 0, 0, 1.0)[1].item() == 93  # kept, it wins


def record_forwards(model: torch.nn.Module) -> list[tuple[int, int, int]]:
    """(rows, positions per row, ids other than padding) of each forward of ``model`` from now on."""
    fed = []

    def record(module, args, kwargs):
        ids = kwargs["input_ids"]
        fed.append((*ids.shape, ids.shape[0] if ids.shape[1] == 1 else int(kwargs["attention_mask"].sum())))

    model.register_forward_pre_hook(record, with_kwargs=True)
    return fed


def test_each_prompt_is_prefilled_once_for_all_its_samples():
    model = tiny("llama")
    fed = record_forwards(model)
    prompts, keys = random_prompts([9], samples=5)
    assert len(generate(model, prompts, keys, [6], 5, [], 1.0)[0]) == 5
    assert fed == [(1, 9, 9)] + [(5, 1, 5)] * 5  # the prompt once, then a token per sample per step
    fed.clear()
    prompts, keys = random_prompts([4, 9, 6], samples=4)
    generate(model, prompts, keys, [3, 3, 3], 0, [], 1.0)
    assert fed == [(3, 9, 4 + 9 + 6)] + [(12, 1, 12)] * 2


def record_packed(monkeypatch) -> list[tuple[list[int], int]]:
    """(the prompts' lengths, rows) of each packed decoding from now on, and a (``[]``, rows) per step."""
    fed = []
    start, step = PackedDecoding.__init__, PackedDecoding.step

    def recorded_start(self, decoder, prompts, samples, new_tokens):
        fed.append(([len(p) for p in prompts], sum(samples)))
        start(self, decoder, prompts, samples, new_tokens)

    def recorded_step(self, tokens):
        fed.append(([], len(tokens)))
        return step(self, tokens)

    monkeypatch.setattr(PackedDecoding, "__init__", recorded_start)
    monkeypatch.setattr(PackedDecoding, "step", recorded_step)
    return fed


def test_the_engine_prefills_each_text_once(tiny_model_dir, monkeypatch):
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be that is the question", "all that"]
    detector = Detector(str(tiny_model_dir), [SamiaSettings(samples=10)])
    fed = record_packed(monkeypatch)
    samia = samia_pass(detector.settings)
    samples = run_passes(detector.engines, texts, [samia])[samia]
    prompts = detector.target.tokenize([samia.transform(t) for t in texts])
    assert samples.shape == (3, 10)
    assert sorted(n for lengths, _ in fed for n in lengths) == sorted(map(len, prompts))
    assert fed[0][1] == 30  # every sample in one batch, a step decoding a token of each


def test_the_samples_of_a_text_beyond_the_budget_are_split_across_batches(tiny_model_dir, monkeypatch):
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be that is the question"]
    samples, widest = [], []
    for budget in (1, None):  # a cache of 32 slots, fewer than a text's samples need; all 12 rows in one
        detector = Detector(str(tiny_model_dir), [SamiaSettings(samples=6)], compute=ComputeConfig(batch_tokens=budget))
        fed = record_packed(monkeypatch)
        samia = samia_pass(detector.settings)
        samples.append(run_passes(detector.engines, texts, [samia])[samia])
        widest.append(max(rows for _, rows in fed))
    np.testing.assert_array_equal(samples[0], samples[1])
    assert widest[0] < 6 and widest[1] == 12


def test_the_engine_samples_through_the_models_forward_where_it_cannot_pack(tiny_model_dir, monkeypatch):
    texts = ["the quick brown fox jumps over the lazy dog", "all that"]
    detector = Detector(str(tiny_model_dir), [SamiaSettings(samples=4)])
    samia = samia_pass(detector.settings)
    packed = run_passes(detector.engines, texts, [samia])[samia]
    detector.target.use_forward("model")
    fed = record_forwards(detector.target.loaded.model)
    np.testing.assert_array_equal(run_passes(detector.engines, texts, [samia])[samia], packed)
    assert fed and fed[0][0] == 2  # the two prompts, once


@settings(max_examples=12, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    samples=st.integers(1, 4),
    splits=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    top_k=st.sampled_from([0, 4]),
    seed=st.integers(0, 1000),
)
def test_samples_do_not_depend_on_the_batch(llama_decoder, lengths, samples, splits, top_k, seed):
    llama = llama_decoder
    prompts, keys = random_prompts(lengths, samples, seed)
    new_tokens = [1 + (length * 7 + seed) % 8 for length in lengths]
    together = generate(llama, prompts, keys, new_tokens, top_k, [3], 1.0)
    apart, start, cuts = [], 0, iter(splits * len(lengths))
    while start < len(prompts):  # the prompts in batches of the sizes drawn, each sample alone in the last
        end = start + next(cuts)
        if end >= len(prompts):
            apart += [
                [generate(llama, [p], [[k]], [n], top_k, [3], 1.0)[0][0] for k in ks]
                for p, ks, n in zip(prompts[start:], keys[start:], new_tokens[start:])
            ]
        else:
            apart += generate(llama, prompts[start:end], keys[start:end], new_tokens[start:end], top_k, [3], 1.0)
        start = end
    assert apart == together


@given(row_lengths=st.lists(st.integers(1, 50), max_size=20), rows=st.lists(st.integers(1, 10), min_size=20))
def test_prompt_batches_hold_their_rows_within_the_budget(row_lengths, rows):
    batches = plan_prompt_batches(row_lengths, rows, 100)
    assert sorted(i for batch in batches for i in batch) == list(range(len(row_lengths)))
    for batch in batches:
        longest = max(row_lengths[i] for i in batch)
        assert len(batch) == 1 or sum(rows[i] for i in batch) * longest <= 100


def test_a_model_with_a_sliding_window_scores_packed_and_samples_through_its_own_forward(tmp_path, monkeypatch):
    """The packed decoding attends to every earlier key, so a windowed model (Mistral's window of 4 ids, shorter than
    the prompts) samples through its own forward, as ``--forward model`` does, while its scores run packed."""
    from conftest import train_tokenizer

    tokenizer = train_tokenizer({"eos_token": "<|endoftext|>"}, vocab_size=280)
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        sliding_window=4,
        eos_token_id=tokenizer.eos_token_id,
    )
    transformers.MistralForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be that is the question"]
    detector = Detector(str(tmp_path), [SamiaSettings(samples=3)])
    assert detector.target.packs and detector.target.packed_decoder().windows == [4, 4]
    samia = samia_pass(detector.settings)
    fed = record_packed(monkeypatch)
    windowed = run_passes(detector.engines, texts, [samia])[samia]
    assert fed == []
    detector.target.use_forward("model")
    np.testing.assert_array_equal(run_passes(detector.engines, texts, [samia])[samia], windowed)
