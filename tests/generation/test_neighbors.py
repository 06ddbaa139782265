"""Neighbour texts (mia_fast.generation.neighbors): a masked LM's best swaps, seeded and cached on disk, and
word-drop."""

from __future__ import annotations

import torch
from conftest import SENTENCES

from mia_fast.generation.neighbors import MaskedLMNeighbors, WordDropNeighbors


def test_without_dropout_the_masked_lm_neighbours_are_its_best_weighted_swaps(tiny_masked_lm):
    """With p = 0 the recipe reduces to one forward: every (position, top-6 candidate ≠ original, not
    special) weighed p(c) / (1 − p(original)), the best ``count`` distinct rewrites spliced into the text."""
    generator = MaskedLMNeighbors(count=5, model_name=str(tiny_masked_lm), dropout=0.0)
    model, tokenizer, _ = generator.model()
    text = SENTENCES[1]
    encoded = tokenizer(text, return_offsets_mapping=True)
    with torch.inference_mode():
        probs = torch.softmax(model(torch.tensor([encoded["input_ids"]])).logits[0], -1)
    weighted = []
    for position in range(1, len(encoded["input_ids"]) - 1):  # not [CLS] or [SEP]
        original = encoded["input_ids"][position]
        top = probs[position].topk(6)
        for p, candidate in zip(top.values.tolist(), top.indices.tolist()):
            if candidate != original and candidate not in tokenizer.all_special_ids:
                weighted.append((p / (1 - probs[position, original].item()), position, candidate))
    expected = []
    for _, position, candidate in sorted(weighted, key=lambda w: -w[0]):
        start, end = encoded["offset_mapping"][position]
        neighbour = text[:start] + tokenizer.decode([candidate]).replace("##", "").strip() + text[end:]
        if neighbour != text and neighbour not in expected and len(expected) < 5:
            expected.append(neighbour)
    assert generator.of(text) == tuple(expected) and len(expected) == 5


def test_masked_lm_neighbours_are_seeded_per_text_and_cached_on_disk(tiny_masked_lm, tmp_path):
    def made(*texts, seed=0):
        generator = MaskedLMNeighbors(
            count=4, seed=seed, model_name=str(tiny_masked_lm), cache=tmp_path / f"cache{seed}"
        )
        generator.prepare(list(texts))
        return generator

    alone, together = made(SENTENCES[0]), made(SENTENCES[2], SENTENCES[0])
    assert alone.of(SENTENCES[0]) == together.of(SENTENCES[0])  # whatever else is made beside it
    neighbours = alone.of(SENTENCES[0])
    assert len(neighbours) == 4 and len(set(neighbours)) == 4 and SENTENCES[0] not in neighbours
    assert all(
        sum(a != b for a, b in zip(n.split(" "), SENTENCES[0].split(" "))) == 1 for n in neighbours
    )  # one word swapped each
    reread = MaskedLMNeighbors(count=4, model_name=str(tiny_masked_lm), cache=tmp_path / "cache0")
    assert reread.of(SENTENCES[0]) == neighbours and reread.loaded is None  # from the cache, no model loaded
    other = MaskedLMNeighbors(count=3, model_name=str(tiny_masked_lm), cache=tmp_path / "cache0")
    assert SENTENCES[0] not in other.made  # other settings, other cache file
    assert made(SENTENCES[0], seed=1).of(SENTENCES[0]) != neighbours


def test_word_drop_neighbours_need_no_model():
    generator = WordDropNeighbors(count=3, seed=0)
    neighbours = generator.of("one two three four five")
    assert len(neighbours) == 3 and all(len(n.split()) == 4 for n in neighbours)
    assert generator.of("one two") == ("two", "one") and generator.of("single") == ()
    assert WordDropNeighbors(count=3, seed=0).of("one two three four five") == neighbours
