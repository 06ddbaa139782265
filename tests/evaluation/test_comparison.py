"""Two reports compared by hand: per shared method, AUROC and TPR@1%FPR of each and their difference, best last
AUROC first; n/a where a report's non-members cannot resolve 1% FPR; a warning for each setting the reports differ
in, none for what only says where the scores went or what the run took; no shared method refused."""

import json
import warnings

import pytest

from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.evaluation.comparison import compare_reports


def write_metrics(directory, meta: dict, methods: dict[str, tuple[float, float | None]], nonmembers: int = 200):
    """A metrics.json of ``methods``: name -> (AUROC, TPR@1%FPR or None where undefined)."""
    directory.mkdir()
    payload = {
        "meta": meta,
        "methods": {
            name: {
                "auroc": auroc,
                "tpr_at_fpr": {"1%": tpr},
                "n_members": 100,
                "n_nonmembers": nonmembers,
                "n_excluded": 0,
            }
            for name, (auroc, tpr) in methods.items()
        },
    }
    (directory / "metrics.json").write_text(json.dumps(payload))
    return directory


def test_the_differences_by_hand(tmp_path):
    first = write_metrics(tmp_path / "a", {"model": "m", "seconds_score": 3}, {"loss": (0.6, 0.1), "zlib": (0.7, 0.2)})
    second = write_metrics(tmp_path / "b", {"model": "m", "seconds_score": 9}, {"zlib": (0.65, 0.3), "ref": (0.8, 0.5)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only the time taken differs: no warning
        lines = compare_reports(first, second).splitlines()
    assert lines[:2] == [f"A = {first}", f"B = {second}"]
    assert lines[4].split() == ["zlib", "0.700", "0.650", "-0.050", "0.200", "0.300", "+0.100"]
    assert lines[5:] == ["only in A: loss", "only in B: ref"]


def test_a_tpr_the_nonmembers_cannot_resolve_is_na(tmp_path):
    first = write_metrics(tmp_path / "a", {}, {"loss": (0.6, None)}, nonmembers=40)
    second = write_metrics(tmp_path / "b", {}, {"loss": (0.7, 0.25)})
    with pytest.warns(MiaFastWarning, match="differ in the rows scored"):
        compared = compare_reports(first, second).splitlines()
    assert compared[4].split() == ["loss", "0.600", "0.700", "+0.100", "n/a", "0.250", "n/a"]
    assert compared[5] == "n/a: TPR@1%FPR needs ≥ 100 non-members (A had fewer)"


def test_each_setting_and_the_rows_that_differ_is_a_warning(tmp_path):
    first = write_metrics(tmp_path / "a", {"model": "m", "k": [0.2]}, {"loss": (0.6, 0.1)})
    second = write_metrics(tmp_path / "b", {"model": "other", "scores": "x.jsonl"}, {"loss": (0.6, 0.1)}, nonmembers=50)
    with pytest.warns(MiaFastWarning) as caught:
        compare_reports(first, second)
    messages = [str(w.message) for w in caught]
    assert messages == [
        "the reports are not comparable: they differ in model (A: 'm'; B: 'other')",
        "the reports are not comparable: they differ in k (A: [0.2]; B: not recorded)",
        "the reports are not comparable: they differ in the rows scored (A: 100 members, 200 non-members, 0 excluded; "
        "B: 100 members, 50 non-members, 0 excluded)",
    ]


def test_reports_sharing_no_method_are_refused(tmp_path):
    first = write_metrics(tmp_path / "a", {}, {"loss": (0.6, 0.1)})
    second = write_metrics(tmp_path / "b", {}, {"zlib": (0.6, 0.1)})
    with pytest.raises(MiaFastError, match="share no method"):
        compare_reports(first, second)
    with pytest.raises(MiaFastError, match="not a mia-fast metrics file"):
        compare_reports(first, tmp_path / "missing")
