"""The methods' settings from a command's flat values."""

from mia_fast.cli.setting_flags import settings_from_values
from mia_fast.methods import REGISTRY, PacSettings, SamiaSettings
from mia_fast.methods.settings import MethodSettings


def test_settings_from_flat_values():
    settings = settings_from_values({"samia_samples": 3, "method_seed": 7, "pac_copies": None})
    assert settings.of(SamiaSettings) == SamiaSettings(samples=3, seed=7)
    assert settings.of(PacSettings) == PacSettings(seed=7)  # the shared seed sets every class that reads it
    assert settings_from_values({}) == MethodSettings()  # a class with no value given stays at its defaults
    only_samia = settings_from_values({"method_seed": 7}, [REGISTRY["samia"]])
    assert only_samia == MethodSettings(SamiaSettings(seed=7))
