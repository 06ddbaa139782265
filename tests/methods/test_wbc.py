"""WBC on hand-built paired tokens: the window votes, their mean over the window sizes, and its setting."""

import numpy as np
import pytest
from helpers import paired_inputs, paired_stats, span_lists, word_spans

from mia_fast import WbcSettings
from mia_fast.errors import MiaFastError
from mia_fast.methods import resolve_methods
from mia_fast.methods.setting_options import setting_options
from mia_fast.methods.wbc import window_sizes, window_votes
from mia_fast.scoring.method_runs import score


def test_wbc_window_votes_by_hand():
    target_loss = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    reference_loss = np.array([2.0, 1.0, 5.0, 3.0, 5.0])
    offsets = np.array([0, 3, 5, 5])
    # Text 0, windows of 2: sums 3 vs 3 (a tie is no vote) and 5 vs 6. Text 1 (2 tokens): 8 vs 8.
    np.testing.assert_allclose(window_votes(target_loss, reference_loss, offsets, 2), [0.5, 0.0, np.nan])
    np.testing.assert_allclose(window_votes(target_loss, reference_loss, offsets, 1), [2 / 3, 0.5, np.nan])
    # A window longer than a text is one window of all of it: 6 vs 8, 8 vs 8.
    np.testing.assert_allclose(window_votes(target_loss, reference_loss, offsets, 5), [1.0, 0.0, np.nan])


def test_wbc_averages_the_window_sizes_and_a_lower_target_loss_means_member():
    target = paired_stats({"logp": [-1.0, -2.0, -3.0]}, {"logp": [-0.5, -0.5, -0.5]})
    reference = paired_stats({"logp": [-2.0, -1.0, -5.0]}, {"logp": [-0.4, -0.4, -0.4]})
    given = paired_inputs(
        target,
        reference,
        span_lists(word_spans(3), word_spans(3)),
        span_lists(word_spans(3), word_spans(3)),
        [WbcSettings((1, 2, 5))],
    )
    got = score(given, resolve_methods(["wbc"]))["wbc"]
    # Text 0: 2/3 (windows of 1), 1/2 (of 2: 3 vs 3, 5 vs 6), 1 (all: 6 vs 8). Text 1: the target's loss is higher.
    np.testing.assert_allclose(got, [(2 / 3 + 1 / 2 + 1) / 3, 0.0])
    default = score(
        paired_inputs(target, reference, *(span_lists(word_spans(3), word_spans(3)),) * 2), resolve_methods(["wbc"])
    )["wbc"]
    np.testing.assert_allclose(default, [(2 / 3 + 1 + 1 + 1) / 4, 0.0])  # windows 1, 5, 10, 20


def test_wbc_windows_setting_and_flag():
    assert WbcSettings().windows == (1, 5, 10, 20)
    assert window_sizes("3,30,") == (3, 30) and WbcSettings([2, 4]).windows == (2, 4)
    for bad in ((), (0,), (2, 1.5)):
        with pytest.raises(MiaFastError, match=r"WbcSettings.windows \(--wbc-windows\) must be whole numbers >= 1"):
            WbcSettings(bad)
    with pytest.raises(ValueError):
        window_sizes("5,x")
    (option,) = [o for o in setting_options() if o.flag.name == "wbc-windows"]
    assert option.methods == ("wbc",)
