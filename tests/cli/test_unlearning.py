"""``mia-fast audit-unlearning``: one rule (a threshold or a ratio), one score column, checked before any model
loads."""

from __future__ import annotations

from helpers import parsed, refused

AUDIT = ["audit-unlearning", "d.jsonl", "--before", "b", "--after", "a", "--report", "r"]


def test_a_threshold_or_a_ratio_not_both(capsys):
    line = refused(capsys, *AUDIT, "--method", "loss", "--threshold", "t.json", "--ratio", "0.5")
    assert "not allowed with argument" in line
    assert "argument --ratio" in refused(capsys, *AUDIT, "--method", "loss", "--ratio", "2")


def test_the_method_is_one_score_column(tmp_path, capsys):
    line = refused(capsys, *AUDIT[:-1], tmp_path / "r", "--method", "mink", keep=[tmp_path])
    assert "--method takes one score column" in line


def test_both_models_share_the_device_options():
    args = parsed([*AUDIT, "--method", "loss", "--device", "cpu", "--dtype", "bf16"])
    assert (args.before, args.after, args.device, args.dtype) == ("b", "a", "cpu", "bf16")
