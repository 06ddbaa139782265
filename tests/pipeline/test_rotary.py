"""A text scores the same alone and in any company, on every family and rope type, on both forwards: transformers
picks a longrope model's factors by the longest sequence of a batch, and a dynamic model's base by the longest it has
seen, so without care a short text's score changed with the texts beside it (by 0.565 in mink_0.1 on a Phi-3-style
model) and with those before it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import random_sentence, train_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.models import LoadedModel
from mia_fast.pipeline.rotary import frequency_group, length_dependent
from pipeline.test_packed import ARCHITECTURES

pytestmark = pytest.mark.lower_bounds

CONTEXT = 64
ORIGINAL = 16  # longrope's pretraining context: texts past it get the long factors


def rope_parameters(kind: str, family: str) -> dict | None:
    half = 2 if family == "gpt_neox" else 4  # rotary dims / 2: gpt_neox turns half of each 8-dim head here
    return {
        "default": None,
        "linear": {"rope_type": "linear", "factor": 2.0},
        "dynamic": {"rope_type": "dynamic", "factor": 2.0},
        "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
        "llama3": {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": ORIGINAL,
        },
        "longrope": {
            "rope_type": "longrope",
            "short_factor": [1.0 + i / 4 for i in range(half)],
            "long_factor": [3.0 + i for i in range(half)],
            "original_max_position_embeddings": ORIGINAL,
        },
    }[kind]


ROPE_TYPES = ["default", "linear", "dynamic", "yarn", "llama3", "longrope"]
_TOKENIZER: list = []
_ENGINES: dict = {}


def tokenizer():
    if not _TOKENIZER:
        _TOKENIZER.append(train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}))
    return _TOKENIZER[0]


def loaded_model(family: str, rope: str, seed: int = 0) -> LoadedModel:
    import transformers

    config_name, model_name, defaults = ARCHITECTURES[family]
    shape = {"num_attention_heads": 4, "hidden_size": 32, "max_position_embeddings": CONTEXT}
    if family != "gpt_neox":
        shape.update(num_key_value_heads=2, head_dim=8)
    scaling = rope_parameters(rope, family)
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer()),
        intermediate_size=40,
        num_hidden_layers=2,
        **shape,
        # dynamic's base divides by (rotary dims - 2): the family's usual quarter of an 8-dim head leaves 2
        **{**defaults, **({"rotary_pct": 0.5} if family == "gpt_neox" else {})},
        **({"rope_scaling": scaling} if scaling else {}),
    )
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.normal_(0, 0.5)
    return LoadedModel(
        model=model, tokenizer=tokenizer(), name=f"{family}-{rope}", device=torch.device("cpu"), dtype=torch.float32
    )


def texts() -> list[str]:
    rng = random.Random(5)
    return [random_sentence(rng, n) for n in (1, 2, 3, 5, 8, 12, 20, 30, 45, 60)]


def engines(family: str, rope: str) -> dict:
    key = (family, rope)
    if key not in _ENGINES:
        loaded = loaded_model(family, rope)
        both = {forward: StatsEngine(loaded, forward=forward) for forward in ("packed", "model")}
        alone = {forward: [engine.compute([text]) for text in texts()] for forward, engine in both.items()}
        _ENGINES[key] = {"engines": both, "alone": alone}
    return _ENGINES[key]


@pytest.mark.parametrize("rope", ROPE_TYPES)
@pytest.mark.parametrize("family", sorted(ARCHITECTURES))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_a_text_scores_the_same_alone_and_in_any_company(family, rope, data):
    built = engines(family, rope)
    forward = data.draw(st.sampled_from(["packed", "model"]))
    engine = built["engines"][forward]
    assert length_dependent(engine.loaded.model.base_model.rotary_emb) == (rope in ("dynamic", "longrope"))
    order = data.draw(st.permutations(range(len(texts()))))
    company = order[: data.draw(st.integers(1, len(order)))]
    engine.batch_tokens = data.draw(st.integers(1, 400))
    together = engine.compute([texts()[i] for i in company])
    for position, i in enumerate(company):
        alone = built["alone"][forward][i].text(0)
        for name in ("logp", "mu", "var"):
            np.testing.assert_allclose(together.text(position)[name], alone[name], rtol=0, atol=1e-5)


def test_longrope_texts_on_both_sides_of_the_original_context_get_their_own_factors():
    """The test above would pass if no text crossed the original context: the texts here do, and a short text in
    company with a long one scores differently through transformers' own batch."""
    loaded = loaded_model("llama", "longrope")
    rotary = loaded.model.base_model.rotary_emb
    lengths = [len(loaded.tokenizer(text)["input_ids"]) for text in texts()]
    assert min(lengths) <= ORIGINAL < max(lengths)
    assert {int(frequency_group(rotary, n)) for n in lengths} == {0, 1}
    short, long = (loaded.tokenizer(texts()[i])["input_ids"] for i in (0, -1))
    ids = torch.zeros((2, len(long)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    ids[0, : len(short)], ids[1] = torch.tensor(short), torch.tensor(long)
    mask[0, : len(short)], mask[1] = 1, 1
    with torch.inference_mode():
        alone = loaded.model(input_ids=torch.tensor([short])).logits[0]
        beside = loaded.model(input_ids=ids, attention_mask=mask).logits[0, : len(short)]
    assert (alone - beside).abs().max() > 1e-3


def test_a_dynamic_model_that_saw_a_long_sequence_scores_as_a_fresh_one():
    """A dynamic rotary embedding keeps the base it grew for the longest sequence it has seen, and transformers sets it
    back only for a sequence shorter than the model's context: a text cut into windows of the whole context would
    keep it. The engine sets it for each batch."""
    scored = [*texts()[:3], random_sentence(random.Random(3), 150)]
    fresh = StatsEngine(loaded_model("llama", "dynamic"), forward="model").compute(scored)
    assert len(fresh.text(3)["logp"]) > CONTEXT  # windows of the whole context
    loaded = loaded_model("llama", "dynamic")
    with torch.inference_mode():
        loaded.model(input_ids=torch.zeros((1, 3 * CONTEXT), dtype=torch.long))
    assert loaded.model.base_model.rotary_emb.max_seq_len_cached == 3 * CONTEXT
    for forward in ("model", "packed"):
        again = StatsEngine(loaded, forward=forward).compute(scored)
        for position in range(len(scored)):
            np.testing.assert_allclose(again.text(position)["logp"], fresh.text(position)["logp"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_texts_after_a_shared_prefix_score_as_alone_on_both_forwards(family):
    """A shared prefix's keys are turned for the whole sequence after it: a prefix within the original context before
    a text that ends past it gets the long factors, as the model's own forward gives the two together."""
    prefix = random_sentence(random.Random(9), 6)
    loaded = loaded_model(family, "longrope")
    scored = {}
    for forward in ("packed", "model"):
        engine = StatsEngine(loaded, forward=forward, batch_tokens=400)
        together = engine.compute(texts(), [prefix] * len(texts()))
        alone = [engine.compute([text], [prefix]) for text in texts()]
        for position in range(len(texts())):
            np.testing.assert_allclose(
                together.text(position)["logp"], alone[position].text(0)["logp"], rtol=0, atol=1e-5
            )
        scored[forward] = alone
    for packed, model in zip(scored["packed"], scored["model"]):
        np.testing.assert_allclose(packed.text(0)["logp"], model.text(0)["logp"], rtol=0, atol=1e-4)
