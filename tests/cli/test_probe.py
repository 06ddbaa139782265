"""``mia-fast probe train``: the labelled sets and the output checked before any model loads."""

from __future__ import annotations

from helpers import refused, write_jsonl


def test_a_training_set_with_too_few_members_is_refused_before_the_model_loads(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": f"text {i}", "label": int(i == 0)} for i in range(6)])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": f"dev {i}", "label": i % 2} for i in range(4)])
    line = refused(capsys, "probe", "train", "--train", train, "--dev", dev, "--out", tmp_path / "p", keep=[tmp_path])
    assert "the probe's training set has 1 members and 5 non-members; it needs at least 4 of each class" in line


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": f"text {i}", "label": i % 2} for i in range(8)])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": f"dev {i}", "label": i % 2} for i in range(4)])
    refused(capsys, "probe", "train", "--train", train, "--dev", dev, "--out", dev, "--overwrite", keep=[tmp_path])
