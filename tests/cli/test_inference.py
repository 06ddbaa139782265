"""``mia-fast dataset-inference``: Maini et al.'s features by default, and one file as both sets refused."""

from __future__ import annotations

from helpers import parsed, refused, write_jsonl

from mia_fast.cli.inference import FEATURE_KS, FEATURE_METHODS, FEATURE_NEIGHBORS
from mia_fast.cli.options import fractions
from mia_fast.generation.neighbors import WORD_DROP


def test_the_features_default_to_maini_et_als():
    args = parsed(["dataset-inference", "s.jsonl", "v.jsonl", "--report", "r"])
    assert (args.methods, args.k) == (FEATURE_METHODS, fractions(FEATURE_KS))
    assert (args.neighbor_model, args.neighbor_count, args.neighbor_field) == (WORD_DROP, FEATURE_NEIGHBORS, None)


def test_one_file_as_both_sets_is_refused(tmp_path, capsys):
    texts = write_jsonl(tmp_path / "t.jsonl", [{"text": f"text {i}"} for i in range(4)])
    line = refused(capsys, "dataset-inference", texts, texts, "--report", tmp_path / "r", keep=[tmp_path])
    assert "are the same file; the validation set must be other texts" in line
