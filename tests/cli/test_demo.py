"""``mia-fast demo``: its options refused as they are parsed, its report folder checked before any work, and its
progress bars (fine-tuning steps, then scored tokens)."""

from __future__ import annotations

from helpers import refused

from mia_fast.cli.demo import _DemoBars
from mia_fast.evaluation.corpus import MIN_TEXTS


def test_too_few_texts_are_refused_as_they_are_parsed(capsys):
    line = refused(capsys, "demo", "--texts", str(MIN_TEXTS - 1))
    assert "argument --texts" in line


def test_a_report_folder_with_files_is_kept_without_overwrite(tmp_path, capsys):
    report = tmp_path / "report"
    report.mkdir()
    (report / "notes.txt").write_text("mine\n")
    line = refused(capsys, "demo", "--report", report, "--quiet", keep=[tmp_path])
    assert "--overwrite" in line


def test_the_bars_go_from_fine_tuning_steps_to_scored_tokens():
    bars = _DemoBars(steps=3, quiet=False)
    bars.on_step(1, 2.5)
    assert len(bars.bars) == 1 and bars.bars[0].n == 1 and bars.bars[0].total == 3
    bars.on_tokenized(5)
    bars.on_tokenized(3)
    bars.on_progress(4)
    assert len(bars.bars) == 2 and bars.bars[1].total == 8 and bars.bars[1].n == 4
    bars.close()
