"""The registry: method names and k resolved, what a method needs checked before it runs, the settings options and
examples it derives, and the package finding every method module of its folder."""

import numpy as np
import pytest
from helpers import HAND_STATS, method_scores

from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.methods import resolve_methods


def test_resolve_methods_names_and_errors():
    requests = resolve_methods(["loss", "mink", "minkpp_0.25", "minkpp_1"], ks=(0.1, 1.0))
    assert [c for r in requests for c in r.columns] == ["loss", "mink_0.1", "mink_1.0", "minkpp_0.25", "minkpp_1.0"]
    with pytest.raises(MiaFastError, match="unknown method 'minz'"):
        resolve_methods(["minz"])
    with pytest.raises(MiaFastError, match="k must be a fraction"):
        resolve_methods(["mink"], ks=(1.5,))
    with pytest.raises(MiaFastError, match="bad k"):
        resolve_methods(["mink_x"])
    with pytest.raises(MiaFastError, match="no method"):
        resolve_methods([" "])


def test_missing_need_is_an_error():
    # score() now names how to supply the missing setting (its declared supply text), as check_available does
    with pytest.raises(MiaFastError, match="needs a token frequency table"):
        method_scores(HAND_STATS, ["dcpdd"])


def test_token_stats_round_trip(tmp_path):
    HAND_STATS.save(tmp_path / "stats.npz")
    loaded = TokenStats.load(tmp_path / "stats.npz")
    for name in ("offsets", "target_ids", "logp", "mu", "var", "first_occurrence"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(HAND_STATS, name))
    np.testing.assert_array_equal(loaded.entropy, -HAND_STATS.mu)


def test_every_module_of_the_folder_is_imported_and_every_settings_class_exported():
    import importlib
    import pkgutil
    import sys

    import mia_fast.methods as methods

    modules = {m.name for m in pkgutil.iter_modules(methods.__path__)}
    assert {"registry", "settings", "likelihood", "fsd", "online"} <= modules
    assert all(f"mia_fast.methods.{name}" in sys.modules for name in modules - {"catalogue"})
    assert {method.fn.__module__ for method in methods.REGISTRY.values()} <= {f"mia_fast.methods.{m}" for m in modules}
    for method in methods.REGISTRY.values():
        for cls in method.settings:
            assert getattr(methods, cls.__name__) is cls and cls.__name__ in methods.__all__
    assert importlib.import_module("mia_fast.methods.dcpdd").LogFrequencies is methods.LogFrequencies


def test_methods_register_in_the_order_of_their_modules_names():
    """A module imports those it builds on first (camia imports recall), so each registers at its first import."""
    from mia_fast.methods import REGISTRY

    assert list(REGISTRY)[:4] == ["recall", "camia", "conrecall", "dcpdd"]
    assert list(REGISTRY)[-2:] == ["surp", "wbc"]


def test_column_method_and_the_log_likelihood_columns():
    from mia_fast.methods import REGISTRY
    from mia_fast.methods.registry import column_method, k_column, log_likelihood_column

    assert column_method("mink_0.2") is REGISTRY["mink"] and column_method("loss") is REGISTRY["loss"]
    assert column_method("loss_0.2") is None and column_method("nothing") is None  # loss takes no k
    assert k_column("mink", 1) == "mink_1.0"
    assert log_likelihood_column("mink_0.2") and log_likelihood_column("zlib")
    assert not log_likelihood_column("minkpp_0.2") and not log_likelihood_column("lowercase")


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    from mia_fast.pipeline.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="fp32")


def test_every_method_runs_with_the_examples_of_its_settings_classes(loaded):
    """What the contract tests rely on: no registered method lacks a required value in its examples."""
    from mia_fast.methods import REGISTRY
    from mia_fast.methods.registry import MethodRequest, check_available, example_settings

    for method in REGISTRY.values():
        settings = example_settings([method], loaded)
        models = {p.model for p in method.passes(settings)}
        check_available([MethodRequest(method, (0.5,))], settings, models)


def test_example_settings_take_each_class_example_or_its_defaults(loaded):
    from mia_fast.methods import REGISTRY, DcpddSettings, GapkSettings, RecallSettings
    from mia_fast.methods.registry import example_settings

    settings = example_settings([REGISTRY["conrecall"], REGISTRY["gapk"], REGISTRY["dcpdd"]], loaded)
    assert {type(value) for value in settings} == {RecallSettings, REGISTRY["conrecall"].settings[1], DcpddSettings}
    assert settings.of(GapkSettings) == GapkSettings()
    frequencies = settings.of(DcpddSettings).frequencies.values
    assert frequencies.shape == (loaded.vocab_size,)
    np.testing.assert_allclose(np.exp(frequencies).sum(), 1.0)  # every token equally frequent


def test_check_available_names_the_missing_setting_then_the_missing_model():
    from mia_fast.methods import MethodSettings, RecallSettings
    from mia_fast.methods.registry import check_available

    with pytest.raises(MiaFastError, match=r"^method 'recall' needs known non-member texts for its prefix"):
        check_available(resolve_methods(["recall"]), MethodSettings(), [])
    with pytest.raises(MiaFastError, match=r"^method 'ref' needs a reference model \(--ref-model\)$"):
        check_available(resolve_methods(["ref"]), MethodSettings(), [])
    check_available(resolve_methods(["recall"]), MethodSettings(RecallSettings(("a",))), [])


def test_settings_from_flat_values_and_what_is_recorded():
    from mia_fast.methods import REGISTRY, PacSettings, SamiaSettings
    from mia_fast.methods.registry import recorded_settings, settings_from_values

    settings = settings_from_values({"samia_samples": 3, "method_seed": 7, "pac_copies": None})
    assert settings.of(SamiaSettings) == SamiaSettings(samples=3, seed=7)
    assert settings.of(PacSettings) == PacSettings(seed=7)  # the shared seed sets every class that reads it
    recorded = recorded_settings([REGISTRY["samia"]], settings)
    assert recorded == {"samia_samples": 3, "method_seed": 7}


def test_fields_sharing_a_flag_must_agree():
    from dataclasses import dataclass

    from mia_fast.methods.registry import Method, setting_options
    from mia_fast.methods.settings import setting

    @dataclass(frozen=True)
    class One:
        seed: int = setting(0, "a seed", "shared-seed")

    @dataclass(frozen=True)
    class Other:
        seed: int = setting(1, "a seed", "shared-seed")

    options = setting_options([Method("a", lambda inputs: None, settings=(One,))])
    assert [(o.flag.name, o.methods) for o in options] == [("shared-seed", ("a",))]
    with pytest.raises(MiaFastError, match="--shared-seed is declared differently by One.seed and Other.seed"):
        setting_options([Method("a", lambda inputs: None, settings=(One, Other))])


def test_a_method_is_refused_a_pass_its_inputs_lack():
    with pytest.raises(MiaFastError, match=r"^method 'lowercase' needs the pass "):
        method_scores(HAND_STATS, ["lowercase"])
