"""ReCaLL on hand-built TokenStats: the ratio of the loss after the non-member prefix to the text's own, its pass, and
prefix texts that are also scored refused."""

import math

import pytest
from helpers import HAND_STATS, make_stats, method_scores

from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, RecallSettings
from mia_fast.methods.recall import recall_pass, refuse_prefix_overlap

PREFIX = ("known one. ", "known two. ")


def test_recall_is_the_loss_after_the_prefix_over_the_loss_alone():
    settings = RecallSettings(PREFIX)
    prefixed = make_stats([(5, -3.25, 0, 1)], [(1, -2.0, 0, 1)], [])
    got = method_scores(
        HAND_STATS, ["recall"], settings=[settings], passes={recall_pass(MethodSettings(settings)): prefixed}
    )
    assert got["recall"][0] == pytest.approx(3.25 / 1.625) and got["recall"][1] == pytest.approx(2.0 / 4.0)
    assert math.isnan(got["recall"][2])


def test_the_prefix_is_the_texts_joined_with_nothing_between():
    assert recall_pass(MethodSettings(RecallSettings(list(PREFIX)))).prefix == "known one. known two. "
    assert RecallSettings(list(PREFIX)).prefix_nonmembers == PREFIX  # a list given from Python is frozen


def test_a_scored_text_that_is_also_a_prefix_text_is_refused():
    RecallSettings(PREFIX).check_texts(["another text"])
    with pytest.raises(MiaFastError, match=r"^1 scored text\(s\) are also prefix texts \(e\.g\. ' known one\. '\)"):
        RecallSettings(PREFIX).check_texts([" known one. ", "another"])
    with pytest.raises(MiaFastError, match=r"are also known non-member texts \(e\.g\. '.{57}\.\.\.'\)"):
        refuse_prefix_overlap(["x" * 80], ["x" * 80], role="known non-member")
