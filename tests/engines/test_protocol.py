"""Every engine the project builds has every member the ``Engine`` protocol names; the check names what one
lacks."""

import pytest

from mia_fast.engines.protocol import Engine, EngineLimits, WeightsEngine
from mia_fast.engines.stored import CacheOnlyEngine, SavedStatsEngine
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.served.server import ServerEngine


def protocol_members(protocol: type) -> set[str]:
    """The attributes and methods a protocol and the protocols it extends declare."""
    members: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object,) or cls.__name__ in ("Protocol", "Generic"):
            continue
        members.update(getattr(cls, "__annotations__", {}))
        members.update(n for n, v in vars(cls).items() if callable(v) and not n.startswith("_"))
    return members


def lacking(engine: type, protocol: type) -> list[str]:
    """What ``engine``'s class lacks of ``protocol``: attributes set in ``__init__`` count as present."""
    init = getattr(engine, "__init__", None)
    assigned = set(getattr(getattr(init, "__code__", None), "co_names", ()))
    return sorted(m for m in protocol_members(protocol) if not hasattr(engine, m) and m not in assigned)


def test_the_protocols_name_what_scoring_calls():
    assert {"refusal", "vocabulary_stats", "weights_here"} <= protocol_members(EngineLimits)
    assert {"run", "order", "provenance", "tokenize", "scored_positions", "backend"} <= protocol_members(Engine)
    assert "derive" in protocol_members(WeightsEngine)


@pytest.mark.parametrize("engine", [CacheOnlyEngine, SavedStatsEngine, ServerEngine])
def test_every_engine_has_every_member_of_the_protocol(engine):
    assert lacking(engine, Engine) == []


def test_an_engine_whose_model_is_here_can_derive_another():
    assert lacking(StatsEngine, WeightsEngine) == []


def test_the_check_names_a_member_an_engine_lacks():
    bare = type("Bare", (), {"run": lambda self: None, "backend": "torch"})
    assert "run" not in lacking(bare, Engine)
    assert {"device", "tokenize", "refusal", "weights_here"} <= set(lacking(bare, Engine))
