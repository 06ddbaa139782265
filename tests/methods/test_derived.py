"""The models a pass may run on besides the target: how each is supplied, and those made from the target's weights."""

from mia_fast.engines.passes import REFERENCE
from mia_fast.methods import FsdSettings
from mia_fast.methods.derived import DERIVED_MODELS, MODEL_SUPPLY, derive_model, model_supply


def test_a_derived_model_is_declared_with_its_settings_maker_and_supply():
    assert DERIVED_MODELS["finetuned"].settings is FsdSettings  # FSD's, declared by its module
    assert model_supply(REFERENCE) == "a reference model (--ref-model)"
    assert model_supply("nowhere") == "the nowhere model"

    def make(target, value, log):
        return target

    try:
        derive_model("toy_copy", FsdSettings, make, "the target's weights here (a toy)")
        assert DERIVED_MODELS["toy_copy"].make is make
        assert model_supply("toy_copy") == "the target's weights here (a toy)"
    finally:
        DERIVED_MODELS.pop("toy_copy", None)
        MODEL_SUPPLY.pop("toy_copy", None)
