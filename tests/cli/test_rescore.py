"""``mia-fast rescore``: one source of statistics, and a setting name only for a stats cache."""

from __future__ import annotations

from helpers import refused, write_jsonl


def test_a_setting_is_for_a_stats_cache_not_a_stats_file(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "the quick brown fox"}])
    line = refused(
        capsys, "rescore", data, "--stats", tmp_path / "s.npz", "--setting", "x", "--out", tmp_path / "o.jsonl"
    )
    assert line.endswith("--setting picks a model setting of a --stats-cache; a --stats file holds one")
    assert not (tmp_path / "o.jsonl").exists()


def test_the_stats_come_from_a_cache_or_a_file_not_both(tmp_path, capsys):
    line = refused(capsys, "rescore", "d.jsonl", "--stats", "s.npz", "--stats-cache", "c", "--out", "o.jsonl")
    assert "not allowed with argument" in line
    assert "one of the arguments --stats-cache --stats is required" in refused(
        capsys, "rescore", "d.jsonl", "--out", "o.jsonl"
    )
