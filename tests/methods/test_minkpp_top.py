"""Min-K%++ from a server's top log-probs: one method per K, reading its own pass, and the default methods of a
served model."""

import numpy as np
import pytest
from helpers import HAND_STATS, method_scores

from mia_fast.engines.passes import TopLogprobsReadout
from mia_fast.methods import REGISTRY, MethodSettings
from mia_fast.methods.minkpp_top import TOP_KS, served_defaults


@pytest.mark.parametrize("top", TOP_KS)
def test_each_top_k_reads_its_own_pass_and_scores_as_minkpp_on_it(top):
    method = REGISTRY[f"minkpp_top{top}"]
    (scored,) = method.passes(MethodSettings())
    assert scored.readout == TopLogprobsReadout(top) and method.takes_k and not method.vocabulary
    got = method_scores(None, [f"minkpp_top{top}"], passes={scored: HAND_STATS})[f"minkpp_top{top}_0.5"]
    exact = method_scores(HAND_STATS, ["minkpp"])["minkpp_0.5"]
    np.testing.assert_array_equal(got, exact)


def test_a_served_model_runs_the_defaults_that_need_no_vocabulary_statistic():
    assert served_defaults(vocabulary_size_known=False) == ("loss", "zlib", "mink")
    assert served_defaults(vocabulary_size_known=True) == ("loss", "zlib", "mink", "minkpp_top20")
