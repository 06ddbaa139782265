"""Con-ReCall on hand-built TokenStats: (loss after the non-member prefix − γ · loss after the member prefix) over the
loss alone, its member prefix, and its weight's range."""

import pytest
from helpers import HAND_STATS, make_stats, method_scores

from mia_fast.errors import MiaFastError
from mia_fast.methods import ConRecallSettings, MethodSettings, RecallSettings
from mia_fast.methods.conrecall import member_prefix_pass
from mia_fast.methods.recall import recall_pass


def test_conrecall_contrasts_the_two_prefixes_by_gamma():
    settings = [RecallSettings(("not seen. ",)), ConRecallSettings(("seen. ",), gamma=0.5)]
    given = MethodSettings(*settings)
    after_nonmembers = make_stats([(5, -4.0, 0, 1)], [(1, -6.0, 0, 1)], [])
    after_members = make_stats([(5, -1.0, 0, 1)], [(1, -2.0, 0, 1)], [])
    passes = {recall_pass(given): after_nonmembers, member_prefix_pass(given): after_members}
    got = method_scores(HAND_STATS, ["conrecall"], settings=settings, passes=passes)["conrecall"]
    assert got[0] == pytest.approx((4.0 - 0.5 * 1.0) / 1.625) and got[1] == pytest.approx((6.0 - 0.5 * 2.0) / 4.0)


def test_its_member_prefix_and_gamma():
    assert member_prefix_pass(MethodSettings(ConRecallSettings(["a. ", "b. "]))).prefix == "a. b. "
    with pytest.raises(MiaFastError, match=r"ConRecallSettings.gamma \(--conrecall-gamma\) must be a number in"):
        ConRecallSettings(("a",), gamma=101)
    with pytest.raises(MiaFastError, match="are also prefix texts"):
        ConRecallSettings(("a member",)).check_texts(["a member"])
