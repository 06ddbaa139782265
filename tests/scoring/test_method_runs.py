"""Running the methods: settings made ready for the model, what a method needs checked before it runs (settings,
models, passes, calibration texts), the hooks its settings declare called by protocol, the passes, calibration sets
and pooled methods of a run, and the example settings every method runs with."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from helpers import HAND_STATS, method_scores

from mia_fast.engines.passes import PLAIN
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, resolve_methods
from mia_fast.methods.registry import Method, MethodRequest
from mia_fast.methods.settings import ChecksTexts, PreparesForModel, PreparesForTexts, setting
from mia_fast.scoring.method_runs import (
    before_scoring,
    calibration_sets,
    check_available,
    check_texts,
    example_settings,
    passes_of,
    pooled_methods,
    prepare_settings,
)


def test_missing_need_is_an_error():
    # score() names how to supply the missing setting (its declared supply text), as check_available does
    with pytest.raises(MiaFastError, match="needs a token frequency table"):
        method_scores(HAND_STATS, ["dcpdd"])


def test_a_method_is_refused_a_pass_its_inputs_lack():
    with pytest.raises(MiaFastError, match=r"^method 'lowercase' needs the pass "):
        method_scores(HAND_STATS, ["lowercase"])


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    from mia_fast.pipeline.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="fp32")


def test_every_method_runs_with_the_examples_of_its_settings_classes(loaded):
    """What the contract tests rely on: no registered method lacks a required value in its examples."""
    from mia_fast.methods import REGISTRY

    for method in REGISTRY.values():
        settings = example_settings([method], loaded)
        models = {p.model for p in method.passes(settings)}
        check_available([MethodRequest(method, (0.5,))], settings, models)


def test_example_settings_take_each_class_example_or_its_defaults(loaded):
    from mia_fast.methods import REGISTRY, DcpddSettings, GapkSettings, RecallSettings

    settings = example_settings([REGISTRY["conrecall"], REGISTRY["gapk"], REGISTRY["dcpdd"]], loaded)
    assert {type(value) for value in settings} == {RecallSettings, REGISTRY["conrecall"].settings[1], DcpddSettings}
    assert settings.of(GapkSettings) == GapkSettings()
    frequencies = settings.of(DcpddSettings).frequencies.values
    assert frequencies.shape == (loaded.vocab_size,)
    np.testing.assert_allclose(np.exp(frequencies).sum(), 1.0)  # every token equally frequent


def test_check_available_names_the_missing_setting_then_the_missing_model():
    from mia_fast.methods import RecallSettings

    with pytest.raises(MiaFastError, match=r"^method 'recall' needs known non-member texts for its prefix"):
        check_available(resolve_methods(["recall"]), MethodSettings(), [])
    with pytest.raises(MiaFastError, match=r"^method 'ref' needs a reference model \(--ref-model\)$"):
        check_available(resolve_methods(["ref"]), MethodSettings(), [])
    check_available(resolve_methods(["recall"]), MethodSettings(RecallSettings(("a",))), [])


@dataclass(frozen=True)
class Hooked(PreparesForModel, ChecksTexts, PreparesForTexts):
    """Settings declaring every hook, recording what each was called with."""

    seen: tuple = setting((), "what the hooks saw", scores=False)

    def prepare(self, model: Any) -> "Hooked":
        return Hooked((*self.seen, ("prepare", model)))

    def check_texts(self, texts) -> None:
        if "bad" in texts:
            raise MiaFastError("a bad text")

    def before_scoring(self, texts) -> None:
        raise MiaFastError(f"before scoring {list(texts)}")


@dataclass(frozen=True)
class Plain:
    """Settings declaring no hook, though a method of this name would look like one."""

    value: int = setting(0, "a value")

    def check(self, texts) -> None:
        raise AssertionError("not a hook")


HOOKED = MethodRequest(Method("hooked", lambda inputs: None, settings=(Hooked, Plain)))


def test_the_hooks_are_called_by_the_protocol_their_settings_declare():
    settings = MethodSettings(Hooked(), Plain())
    check_texts(settings, [HOOKED], ["fine"])
    with pytest.raises(MiaFastError, match="a bad text"):
        check_texts(settings, [HOOKED], ["bad"])
    with pytest.raises(MiaFastError, match=r"before scoring \['a'\]"):
        before_scoring(settings, [HOOKED], ["a"])
    before_scoring(settings, [], ["a"])  # no requested method reads Hooked


def test_settings_are_made_ready_once_in_one_place_onto_a_runs_own():
    ready = prepare_settings([Hooked()], "model")
    assert ready.of(Hooked).seen == (("prepare", "model"),) and ready.of(Plain) == Plain()
    assert prepare_settings(None, "model", onto=ready) is ready  # nothing given: the ready settings as they are
    replaced = prepare_settings([Plain(3)], "other", onto=ready)
    assert replaced.of(Plain) == Plain(3)
    assert replaced.of(Hooked).seen == (("prepare", "model"), ("prepare", "other"))
    assert prepare_settings(MethodSettings(Plain(1)), None) == MethodSettings(Plain(1))


def test_the_passes_calibration_sets_and_pooled_methods_of_a_run():
    from mia_fast.methods import CamiaSettings

    requests = resolve_methods(["loss", "lowercase", "camia"])
    settings = MethodSettings(CamiaSettings(nonmembers=("known",)))
    passes = passes_of(requests, settings)
    assert passes[0] == PLAIN and len(passes) == len(set(passes))
    sets = calibration_sets(requests, settings)
    assert list(sets) == [("known",)] and set(sets[("known",)]) <= set(passes)
    assert pooled_methods(requests, settings) == []
    assert calibration_sets(resolve_methods(["loss"]), settings) == {}
