"""The contract every registered method keeps, checked over the whole registry on a tiny model: NaN and a warning
for an empty text, scores that do not depend on the batch, the Triton kernels agreeing with the torch reference,
and higher meaning member (on a model fine-tuned on the members). A method added to the registry is checked here
with no test of its own and no line here: it runs with the settings its own settings classes give as their example
(``example(model)``, through the registry's ``example_settings``)."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from mia_fast.api import ComputeConfig, Detector, MethodSettings, ModelConfig
from mia_fast.generation.finetune import FineTuning, fine_tune
from mia_fast.methods import REGISTRY
from mia_fast.methods.settings import setting_fields
from mia_fast.pipeline.models import LoadedModel, load_model
from mia_fast.scoring.method_runs import example_settings

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "a stitch in time saves nine, they say",
    "every good boy deserves fudge and cake",
    "colourless green ideas sleep furiously tonight",
]
MEMBERS = [
    "The members are these four sentences about a quiet harbour town",
    "Boats rest in the harbour while the gulls circle above the piers",
    "Fishermen mend their nets on the warm stones of the old quay",
    "At dusk the lighthouse turns and the harbour lights come on",
]
NONMEMBERS = [
    "Mountain goats climb the cliffs where no path has ever been cut",
    "Snow falls on the high passes long before the valleys see it",
    "A shepherd counts his flock twice before the winter storms",
    "The glacier moves a little further down the valley every year",
]
# The known non-members (``--nonmembers``) of the orientation check, which FSD fine-tunes its copy on and CAMIA compares
# with: texts of NONMEMBERS' kind, none of them scored.
KNOWN_NONMEMBERS = (
    "High on the ridge the wind bends the pines toward the valley below",
    "The mountain hut keeps a fire burning for climbers caught by the snow",
)
# Where fine-tuning a tiny random model on four texts says nothing of membership: the probe's weights are random
# here (it is trained on a proxy model in practice), and SaMIA's continuations of a half-sentence by a tiny model
# share too few words with any second half for its recall to order members (nor, for the n-gram coverage attack, to
# reproduce three words of one: 2 samples each cover nothing, 20 one member text in four).
ORIENTATION_UNTESTABLE = {
    "probe": "a random probe",
    "samia": "tiny-model samples",
    "samia_zlib": "tiny-model samples",
    "ngram_coverage": "tiny-model samples",
    "ngram_creativity": "tiny-model samples",
}


def settings_for(loaded: LoadedModel, name: str) -> MethodSettings:
    """The settings method ``name`` runs with on ``loaded``: the examples of the settings classes it reads."""
    return example_settings([REGISTRY[name]], loaded)


def with_known_nonmembers(settings: MethodSettings, texts: tuple[str, ...]) -> MethodSettings:
    """``settings`` with ``texts`` in every field of known non-members (``--nonmembers``)."""
    return settings.map(
        lambda value: replace(value, **{f.name: texts for f in setting_fields(type(value)) if f.key == "nonmembers"})
    )


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), device="cpu", dtype="fp32")


def detector(loaded: LoadedModel, name: str, backend: str = "torch", batch_tokens: int | None = None) -> Detector:
    model = ModelConfig(loaded, ref_model=loaded, backend=backend)
    return Detector(model, settings_for(loaded, name), ComputeConfig(batch_tokens=batch_tokens))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_an_empty_text_gets_nan_and_a_warning(loaded, name):
    scores = detector(loaded, name).score([TEXTS[0], "", "   "], methods=[name], k=[0.5])
    for column, values in scores.items():
        assert np.isfinite(values[0]), column
        assert np.isnan(values[1:]).all(), column
    assert scores.warnings[0] is None and scores.warnings[1] and scores.warnings[2]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_the_batch_changes_no_score(loaded, name):
    small = detector(loaded, name, batch_tokens=16).score(TEXTS, methods=[name], k=[0.3])
    large = detector(loaded, name, batch_tokens=4096).score(TEXTS, methods=[name], k=[0.3])
    for column in small:
        np.testing.assert_allclose(small[column], large[column], rtol=1e-5, atol=1e-6, err_msg=column)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_triton_kernels_agree_with_the_torch_reference(loaded, name):
    pytest.importorskip("triton")
    kernel = detector(loaded, name, backend="triton").score(TEXTS[:2], methods=[name], k=[0.3])
    reference = detector(loaded, name, backend="torch").score(TEXTS[:2], methods=[name], k=[0.3])
    for column in reference:
        np.testing.assert_allclose(kernel[column], reference[column], rtol=1e-4, atol=1e-5, err_msg=column)


@pytest.fixture(scope="module")
def fine_tuned(loaded):
    """The tiny model after fine-tuning on MEMBERS, with the untouched model as its reference."""
    untouched = LoadedModel(
        copy.deepcopy(loaded.model), loaded.tokenizer, f"{loaded.name} (untouched)", loaded.device, loaded.dtype
    )
    tuned = LoadedModel(copy.deepcopy(loaded.model), loaded.tokenizer, loaded.name, loaded.device, loaded.dtype)
    fine_tune(tuned, MEMBERS, FineTuning(epochs=30, learning_rate=3e-3, batch_size=4, max_tokens=32))
    return tuned, untouched


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - set(ORIENTATION_UNTESTABLE)))
def test_higher_means_member(fine_tuned, name):
    tuned, untouched = fine_tuned
    settings = with_known_nonmembers(settings_for(tuned, name), KNOWN_NONMEMBERS)
    scored = Detector(ModelConfig(tuned, ref_model=untouched), settings)
    scores = scored.score(MEMBERS + NONMEMBERS, methods=[name], k=[0.5])
    for column, values in scores.items():
        members, nonmembers = values[: len(MEMBERS)], values[len(MEMBERS) :]
        assert np.nanmean(members) > np.nanmean(nonmembers), (column, members, nonmembers)
