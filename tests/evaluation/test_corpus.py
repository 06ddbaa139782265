"""The experiment's texts (mia_fast.evaluation.corpus): the standard-library corpus, the seeded split, a corpus
too small."""

from __future__ import annotations

import pytest

from evaluation.test_experiments import corpus_texts  # noqa: F401
from mia_fast import load_model
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.corpus import prepare_texts, split_members, stdlib_corpus
from mia_fast.evaluation.experiments import ExperimentDesign, run_experiment


def test_stdlib_corpus_is_real_documentation_and_stable():
    first, second = stdlib_corpus(), stdlib_corpus()
    assert first == second and len(first) > 200
    assert all(len(t.split()) >= 40 for t in first)
    assert any("JSON" in t for t in first)


def test_split_is_seeded_disjoint_and_halved(tiny_model_dir):
    tokenizer = load_model(str(tiny_model_dir)).tokenizer
    texts = prepare_texts(corpus_texts(), tokenizer, count=20, max_tokens=12, seed=5)
    assert len(texts) == 20 and all(len(tokenizer(t, add_special_tokens=False)["input_ids"]) <= 13 for t in texts)
    members, nonmembers = split_members(texts, seed=5)
    assert len(members) == len(nonmembers) == 10 and not set(members) & set(nonmembers)
    assert split_members(texts, seed=5) == (members, nonmembers) != split_members(texts, seed=6)


def test_a_corpus_too_small_to_split_is_refused(tiny_model_dir, tmp_path):
    loaded = load_model(str(tiny_model_dir))
    with pytest.raises(MiaFastError, match="the corpus has 5 distinct texts; the experiment needs 8"):
        run_experiment(loaded, ["a b", "c d", "e f", "g h", "a b", "i j"], tmp_path / "r", ExperimentDesign(texts=4))
