"""ScoringInputs: the plain pass is its TokenStats, every other pass is looked up, and a pass not run is absent."""

import numpy as np
import pytest

from mia_fast.engines.passes import PLAIN, REFERENCE, Pass
from mia_fast.engines.stats import TokenStats
from mia_fast.methods.inputs import ScoringInputs


def stats() -> TokenStats:
    text = {"target_ids": np.arange(2), "logp": np.array([-1.0, -2.0]), "mu": np.zeros(2), "var": np.ones(2)}
    return TokenStats.from_texts([text])


def test_the_plain_pass_is_the_token_stats_and_others_are_looked_up():
    reference = Pass(model=REFERENCE)
    plain = stats()
    inputs = ScoringInputs(plain, {reference: "hidden"})
    assert inputs.of(PLAIN) is plain and inputs.of(reference) == "hidden"
    assert inputs.has(PLAIN) and inputs.has(reference)


def test_a_pass_not_run_is_absent():
    inputs = ScoringInputs(None)
    assert not inputs.has(PLAIN) and not inputs.has(Pass(model=REFERENCE))
    with pytest.raises(KeyError):
        inputs.of(Pass(model=REFERENCE))
