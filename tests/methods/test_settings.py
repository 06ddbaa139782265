"""How a method declares its settings: a number's Range (parsed and checked), the fields and their flat keys,
CheckedSettings' checks, known texts, a run's MethodSettings, the settings as recorded, and the hooks' protocols."""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from mia_fast.errors import MiaFastError
from mia_fast.methods.settings import (
    FRACTION,
    SEED,
    CheckedSettings,
    ChecksTexts,
    Flag,
    GivesExample,
    MethodSettings,
    PreparesForModel,
    PreparesForTexts,
    Range,
    known_texts,
    recorded,
    recorded_settings,
    setting,
    setting_fields,
    settings_classes_of,
)


@dataclass(frozen=True)
class Toy(CheckedSettings):
    texts: tuple[str, ...] = known_texts(Flag("toy-texts"), "toy texts", "toy texts (--toy-texts FILE)")
    share: float = setting(0.5, "a share", "toy-share", bounds=FRACTION)
    hidden: int = setting(3, "set from Python only")


def test_a_range_says_parses_and_contains_what_it_allows():
    assert str(FRACTION) == "a number in (0, 1]" and str(SEED) == "a whole number in [0, 4294967295]"
    assert str(Range(maximum=2)) == "a number <= 2" and str(Range()) == "a finite number"
    assert FRACTION.parse("0.25") == 0.25 and SEED.parse("7") == 7
    for text in ("0", "1.5", "nan", "x"):
        with pytest.raises(ValueError, match=r"must be a number in \(0, 1\]"):
            FRACTION.parse(text)
    assert not SEED.contains(True) and not SEED.contains(1.0) and SEED.contains(np.int64(3))
    assert not Range().contains(math.inf)


def test_checked_settings_freeze_known_texts_and_check_ranges():
    toy = Toy(texts=["a", "b"])
    assert toy.texts == ("a", "b") and Toy(texts=None).texts == ()
    with pytest.raises(MiaFastError, match=r"^Toy.share \(--toy-share\) must be a number in \(0, 1\], got 2$"):
        Toy(share=2)


def test_the_fields_their_keys_labels_and_supply_text():
    texts, share, hidden = setting_fields(Toy)
    assert (texts.key, share.key, hidden.key) == ("toy_texts", "toy_share", "Toy.hidden")
    assert texts.spec.required and texts.spec.flag == Flag("toy-texts", metavar="FILE", texts_file=True)
    assert texts.spec.flag.reads_path and texts.supply_text() == "toy texts (--toy-texts FILE)"
    assert share.label == "Toy.share (--toy-share)" and share.supply_text() == "a share (--toy-share)"
    assert hidden.supply_text() == "set from Python only"
    with pytest.raises(MiaFastError, match="must be a frozen dataclass"):
        setting_fields(dict)


def test_a_runs_settings_give_each_class_once_and_defaults_for_the_rest():
    settings = MethodSettings(Toy(share=0.25))
    assert settings.of(Toy).share == 0.25 and MethodSettings().of(Toy) == Toy()
    assert settings.replace(Toy(hidden=4)).of(Toy).hidden == 4
    assert settings.map(lambda toy: Toy(share=toy.share / 5)).of(Toy).share == 0.05
    assert MethodSettings.coerce(None) == MethodSettings() and MethodSettings.coerce([Toy()]) == MethodSettings(Toy())
    with pytest.raises(MiaFastError, match="two Toy settings given"):
        MethodSettings(Toy(), Toy())


def test_recorded_values_are_json():
    assert recorded(math.inf) == "inf" and recorded(3) == 3 and recorded(None) is None
    digest = recorded(("a", "b"))
    assert digest.startswith("sha256:") and digest == recorded(["a", "b"]) and digest != recorded(("b", "a"))
    assert recorded(np.arange(3)).startswith("sha256:")
    assert recorded(Toy()) == {"type": "Toy", "texts": recorded(()), "share": 0.5, "hidden": 3}


def test_what_is_recorded_of_a_runs_settings():
    from mia_fast.methods import REGISTRY, SamiaSettings

    settings = MethodSettings(SamiaSettings(samples=3, seed=7))
    recorded_run = recorded_settings([REGISTRY["samia"]], settings)
    assert recorded_run == {"samia_samples": 3, "method_seed": 7}


def test_the_settings_classes_of_methods_each_once_in_order():
    from mia_fast.methods import REGISTRY, ConRecallSettings, RecallSettings

    classes = settings_classes_of([REGISTRY["recall"], REGISTRY["conrecall"], REGISTRY["loss"]])
    assert classes == [RecallSettings, ConRecallSettings]


def test_the_settings_classes_declare_their_hooks_by_protocol():
    """Every settings class of a registered method that defines a hook names its protocol among its bases."""
    from mia_fast.methods import REGISTRY

    hooks = {"prepare": PreparesForModel, "check_texts": ChecksTexts, "before_scoring": PreparesForTexts}
    hooks["example"] = GivesExample
    for cls in settings_classes_of(REGISTRY.values()):
        for name, protocol in hooks.items():
            assert (name in vars(cls)) == (protocol in cls.__mro__), (cls.__name__, name)
