"""The settings' options: one per flag, over the fields that share it, with the methods that read it."""

from dataclasses import dataclass

import pytest

from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import Method
from mia_fast.methods.setting_options import setting_options
from mia_fast.methods.settings import setting


def test_fields_sharing_a_flag_must_agree():
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


def test_an_option_names_its_readers_key_and_default_in_its_help():
    @dataclass(frozen=True)
    class Seeded:
        seed: int = setting(4, "a seed", "toy-seed")
        hidden: int = setting(1, "set from Python only")

    readers = [Method(name, lambda inputs: None, settings=(Seeded,)) for name in ("a", "b")]
    (option,) = setting_options(readers)
    assert (option.key, option.default, option.methods) == ("toy_seed", 4, ("a", "b"))
    assert option.help == "for a, b: a seed (default 4)"
    assert {o.flag.name for o in setting_options()} >= {"method-seed", "nonmembers"}  # every registered method's
