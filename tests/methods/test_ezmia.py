"""EZ-MIA on hand-built paired tokens: the ratio, the texts with no downward shift, and statistics without the top
choice."""

import numpy as np
import pytest
from helpers import paired_inputs, paired_stats, span_lists, word_spans

from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.methods import resolve_methods
from mia_fast.methods.ezmia import MEMBER_OUTRIGHT, error_zone_ratio
from mia_fast.scoring.method_runs import score


def test_ezmia_ratio_by_hand():
    # Token 0 and token 3 are the target's own top choice (logp == max_logp): their large shifts are not read.
    target = paired_stats(
        {"logp": [-0.1, -2.0, -3.0, -1.5], "max_logp": [-0.1, -0.5, -0.2, -1.5]},
        {"logp": [-2.0, -1.0], "max_logp": [-0.5, -0.2]},
    )
    reference = paired_stats({"logp": [-5.0, -2.5, -2.0, -9.0]}, {"logp": [-2.25, -1.5]})
    given = paired_inputs(
        target, reference, span_lists(word_spans(4), word_spans(2)), span_lists(word_spans(4), word_spans(2))
    )
    got = score(given, resolve_methods(["ezmia"]))["ezmia"]
    # Text 0: shifts +0.5 and -1.0 at the mispredicted tokens: P / N = 0.5. Text 1: +0.25 and +0.5: N = 0.
    assert got[0] == pytest.approx(0.5)
    assert got[1] == pytest.approx(MEMBER_OUTRIGHT * (1 + 0.75 / 1.75))
    assert np.isfinite(got).all()


def test_ezmia_texts_with_no_downward_shift_rank_above_every_ratio_and_by_their_upward_mass():
    offsets = np.array([0, 2, 4, 6, 8, 10, 10])
    target = np.array([-3.0] * 8 + [-1.0, -1.0])
    top = np.array([-1.0] * 10)  # the fifth text's tokens are the target's top choices
    reference = np.array([-3.0 - 1e6, -3.0 + 1e-6, -4.0, -5.0, -3.5, -3.0, -3.0, -3.0, -9.0, -9.0])
    got = error_zone_ratio(target, top, reference, offsets)
    # A huge ratio, then (no downward shift) P = 3, P = 0.5, none moved, nothing mispredicted, no token.
    assert got[0] == pytest.approx(1e6 / 1e-6, rel=1e-2)
    assert got[1] > got[2] > got[3] == got[4] == MEMBER_OUTRIGHT > got[0]
    assert np.isfinite(got[:5]).all() and np.isnan(got[5])


def test_ezmia_refuses_statistics_without_the_top_choice():
    target = TokenStats.from_texts([{"target_ids": np.arange(2), "logp": [-1.0, -2.0], "mu": [0, 0], "var": [1, 1]}])
    given = paired_inputs(
        target, paired_stats({"logp": [-1, -1]}), span_lists(word_spans(2)), span_lists(word_spans(2))
    )
    with pytest.raises(MiaFastError, match="ezmia needs the log-prob of the target's own top choice"):
        score(given, resolve_methods(["ezmia"]))
