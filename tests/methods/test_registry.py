"""The registry: method names and k resolved, a request running its method, the score columns' names, and the package
finding every method module of its folder."""

import numpy as np
import pytest
from helpers import HAND_STATS

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


def test_a_request_runs_its_method_into_its_columns_unchecked():
    from mia_fast.methods.inputs import ScoringInputs

    inputs = ScoringInputs(stats=HAND_STATS)
    loss, mink = resolve_methods(["loss", "mink"], ks=(0.5, 1.0))
    assert list(loss.run(inputs)) == ["loss"] and list(mink.run(inputs)) == ["mink_0.5", "mink_1.0"]
    np.testing.assert_array_equal(mink.run(inputs)["mink_1.0"], loss.run(inputs)["loss"])
