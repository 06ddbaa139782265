"""FSD on a tiny random model: the fine-tuned copy really differs (the target untouched), each fsd_<base> is the base
score under the target minus under the copy scored on its own, the copy's weights are cached and read back instead
of fine-tuning again, a damaged cache entry is fine-tuned again, and the formula on hand-built passes."""

import numpy as np
import pytest
import torch
from helpers import stats_of

from mia_fast import Detector, FsdSettings, MethodSettings, ModelConfig, ScoringInputs, resolve_methods, score_stats
from mia_fast.engines.passes import PLAIN
from mia_fast.errors import MiaFastError
from mia_fast.generation import finetune
from mia_fast.methods import fsd
from mia_fast.methods.fsd import FINETUNED, fine_tuned_copy, on_finetuned
from mia_fast.methods.lowercase import LOWERCASE
from mia_fast.pipeline.models import load_model

NONMEMBERS = (
    "Mountain goats climb the cliffs where no path has ever been cut",
    "Snow falls on the high passes long before the valleys see it",
    "A shepherd counts his flock twice before the winter storms",
)
TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "a stitch in time saves nine, they say",
    "The glacier moves a little further down the valley every year",
    "Colourless green ideas sleep furiously tonight",
]
METHODS = [f"fsd_{base}" for base in fsd.BASES]
SETTINGS = FsdSettings(nonmembers=NONMEMBERS, epochs=2, learning_rate=1e-3, batch_size=2)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIA_FAST_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "fsd"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), device="cpu", dtype="fp32")


def detector(loaded, settings: FsdSettings = SETTINGS) -> Detector:
    return Detector(ModelConfig(loaded), [settings])


def counting_fine_tunes(monkeypatch) -> list[int]:
    calls = [0]
    real = finetune.fine_tune

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(finetune, "fine_tune", counted)
    return calls


def test_the_deviation_on_hand_built_passes():
    target, tuned = stats_of([-1.0, -3.0], [-2.0]), stats_of([-0.5, -1.0], [-2.5])
    lower_target, lower_tuned = stats_of([-2.0, -4.0], [-1.0]), stats_of([-1.0, -1.0], [-5.0])
    settings = MethodSettings(SETTINGS)
    passes = {
        on_finetuned(PLAIN): tuned,
        LOWERCASE: lower_target,
        on_finetuned(LOWERCASE): lower_tuned,
    }
    inputs = ScoringInputs(target, passes, texts=["Ab", "c"], settings=settings)
    got = score_stats(inputs, resolve_methods(["fsd_loss", "fsd_mink_0.5", "fsd_lowercase"]))
    # loss: mean log p under the target minus under the copy.
    np.testing.assert_allclose(got["fsd_loss"], [-2.0 - -0.75, -2.0 - -2.5])
    # Min-K% at k = 0.5: the lowest of two values (floor(0.5 * 2) = 1), the one value of one.
    np.testing.assert_allclose(got["fsd_mink_0.5"], [-3.0 - -1.0, -2.0 - -2.5])
    # lowercase: loss(lowercased) / loss(text), each model's own.
    np.testing.assert_allclose(got["fsd_lowercase"], [3.0 / 2.0 - 1.0 / 0.75, 1.0 / 2.0 - 5.0 / 2.5])
    assert on_finetuned(PLAIN).model == FINETUNED and on_finetuned(LOWERCASE).transform == LOWERCASE.transform


def test_the_copy_is_fine_tuned_and_the_target_is_untouched(loaded):
    before = loaded.weights_fingerprint()
    tuned = fine_tuned_copy(loaded, SETTINGS, log=lambda line: None)
    assert loaded.weights_fingerprint() == before
    assert tuned.weights_fingerprint() != before
    moved = [
        (a - b).abs().max().item() for a, b in zip(loaded.model.parameters(), tuned.model.parameters(), strict=True)
    ]
    assert min(moved) > 0  # a full fine-tuning: every tensor moved
    # Its likelihood of the non-member texts rose.
    before, after = (
        Detector(ModelConfig(m)).score(list(NONMEMBERS), methods=["loss"])["loss"] for m in (loaded, tuned)
    )
    assert (after > before).all(), (before, after)


def test_a_bf16_target_is_fine_tuned_in_fp32_and_scored_in_bf16(tiny_model_dir):
    target = load_model(str(tiny_model_dir), device="cpu", dtype="bf16")
    before = [p.clone() for p in target.model.parameters()]
    tuned = fine_tuned_copy(target, SETTINGS, log=lambda line: None)
    assert tuned.dtype == torch.bfloat16 and {p.dtype for p in tuned.model.parameters()} == {torch.bfloat16}
    assert all(torch.equal(a, b) for a, b in zip(before, target.model.parameters(), strict=True))
    assert not torch.equal(tuned.model.lm_head.weight, target.model.lm_head.weight)
    again = fine_tuned_copy(target, SETTINGS, log=lambda line: None)  # from the cache, as it was scored
    assert all(torch.equal(a, b) for a, b in zip(tuned.model.parameters(), again.model.parameters(), strict=True))


def test_each_deviation_is_the_base_score_under_the_target_minus_under_the_copy(loaded):
    ours = detector(loaded).score(TEXTS, methods=METHODS, k=[0.3, 1.0])
    tuned = fine_tuned_copy(loaded, SETTINGS, log=lambda line: None)  # read back from the cache
    bases = list(fsd.BASES)
    under_target = Detector(ModelConfig(loaded)).score(TEXTS, methods=bases, k=[0.3, 1.0])
    under_copy = Detector(ModelConfig(tuned)).score(TEXTS, methods=bases, k=[0.3, 1.0])
    assert set(ours) == {f"fsd_{c}" for c in under_target}
    for column in under_target:
        expected = under_target[column] - under_copy[column]
        np.testing.assert_allclose(ours[f"fsd_{column}"], expected, rtol=1e-6, atol=1e-7, err_msg=column)
        if column != "lowercase":  # TEXTS' lowercase passes are all but one their own text
            assert np.abs(expected).min() > 1e-3, column


def test_a_second_run_reads_the_cached_copy_instead_of_fine_tuning(loaded, cache, monkeypatch, capsys):
    calls = counting_fine_tunes(monkeypatch)
    first = detector(loaded).score(TEXTS, methods=METHODS, k=[0.5])
    assert calls[0] == 1
    (entry,) = cache.iterdir()
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", "weights.safetensors"]

    def refuse(*args, **kwargs):
        raise AssertionError("fine-tuned again")

    monkeypatch.setattr(finetune, "fine_tune", refuse)
    capsys.readouterr()
    second = detector(loaded).score(TEXTS, methods=METHODS, k=[0.5])
    assert "read from the cache" in capsys.readouterr().err
    for column in first:
        np.testing.assert_array_equal(second[column], first[column], err_msg=column)
    # One detector fine-tunes once for all its calls and methods; other settings are another copy.
    again = detector(loaded)
    again.score(TEXTS[:2], methods=["fsd_loss"])
    again.score(TEXTS[2:], methods=["fsd_minkpp"], k=[0.5])
    with pytest.raises(AssertionError, match="fine-tuned again"):
        again.score(TEXTS, methods=["fsd_loss"], settings=[FsdSettings(nonmembers=NONMEMBERS[:2])])


@pytest.mark.parametrize("damaged", ["weights.safetensors", "entry.json"])
def test_a_damaged_cache_entry_is_fine_tuned_again(loaded, cache, monkeypatch, capsys, damaged):
    calls = counting_fine_tunes(monkeypatch)
    first = detector(loaded).score(TEXTS, methods=["fsd_loss"])["fsd_loss"]
    (entry,) = cache.iterdir()
    path = entry / damaged
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    capsys.readouterr()
    second = detector(loaded).score(TEXTS, methods=["fsd_loss"])["fsd_loss"]
    said = [line for line in capsys.readouterr().err.splitlines() if "not used" in line]
    assert len(said) == 1 and "fine-tuning again" in said[0], said
    assert calls[0] == 2
    np.testing.assert_array_equal(second, first)
    # Written again whole: the next run reads it.
    detector(loaded).score(TEXTS, methods=["fsd_loss"])
    assert calls[0] == 2


def test_the_fingerprint_covers_texts_settings_and_target(loaded, tiny_reference_dir):
    base = SETTINGS.fingerprint(loaded)
    other_model = load_model(str(tiny_reference_dir), device="cpu", dtype="fp32")
    changed = [
        FsdSettings(nonmembers=NONMEMBERS[::-1], epochs=2, learning_rate=1e-3, batch_size=2).fingerprint(loaded),
        FsdSettings(nonmembers=NONMEMBERS, epochs=3, learning_rate=1e-3, batch_size=2).fingerprint(loaded),
        FsdSettings(nonmembers=NONMEMBERS, epochs=2, learning_rate=2e-3, batch_size=2).fingerprint(loaded),
        FsdSettings(nonmembers=NONMEMBERS, epochs=2, learning_rate=1e-3, batch_size=2, seed=1).fingerprint(loaded),
        SETTINGS.fingerprint(other_model),
    ]
    assert len({base, *changed}) == 1 + len(changed)
    assert (
        FsdSettings(nonmembers=list(NONMEMBERS), epochs=2, learning_rate=1e-3, batch_size=2).fingerprint(loaded) == base
    )


def test_a_scored_non_member_text_and_a_model_without_weights_are_refused(loaded):
    with pytest.raises(MiaFastError, match="also known non-member texts"):
        detector(loaded).score([TEXTS[0], NONMEMBERS[1]], methods=["fsd_loss"])
    with pytest.raises(MiaFastError, match="needs known non-member texts"):
        Detector(ModelConfig(loaded)).score(TEXTS, methods=["fsd_zlib"])
    stats = Detector(ModelConfig(loaded)).token_stats(TEXTS)
    saved = Detector.from_token_stats(stats, TEXTS, settings=[SETTINGS])
    with pytest.raises(MiaFastError, match="'fsd_loss' needs a copy of the target fine-tuned here"):
        saved.score(TEXTS, methods=["fsd_loss"])
    with pytest.raises(MiaFastError, match=r"must be a number in \(0, 1\]"):
        FsdSettings(nonmembers=NONMEMBERS, learning_rate=0.0)


def test_a_diverging_fine_tuning_is_refused_and_nothing_is_cached(loaded, cache):
    with pytest.raises(finetune.TrainingDiverged):
        detector(loaded, FsdSettings(nonmembers=NONMEMBERS, learning_rate=1.0)).score(TEXTS, methods=["fsd_loss"])
    assert not any(cache.glob("*/*.safetensors"))
    assert torch.isfinite(next(loaded.model.parameters())).all()
