"""The Python API's front door (mia_fast.api): every name it exports, and score_file, the resumable block-by-block
scoring behind ``mia-fast score``, used as a library."""

import numpy as np
import pytest

from mia_fast import (
    ComputeConfig,
    Detector,
    ModelConfig,
    OutputConfig,
    RecallSettings,
    RunConfig,
    ScoringConfig,
    score_file,
)
from mia_fast.data import Dataset, read_scores
from mia_fast.errors import MiaFastError


@pytest.fixture(scope="module")
def dataset():
    texts = ["the quick brown fox", "all that glitters is not gold", "", "to be or not to be"] * 3
    return Dataset(texts=texts, ids=[f"t{i}" for i in range(len(texts))], labels=[i % 2 for i in range(len(texts))])


def test_score_file_equals_detector_scores(tiny_model_dir, dataset, tmp_path):
    detector = Detector(str(tiny_model_dir))
    notes = []
    out = score_file(
        dataset,
        RunConfig(
            OutputConfig(tmp_path / "s.jsonl", block_rows=5),
            scoring=ScoringConfig(methods=["loss", "mink"], k=[0.5]),
            compute=ComputeConfig(progress=False),
        ),
        detector=detector,
        log=notes.append,
    )
    written = read_scores(out, ["loss", "mink_0.5"])
    expected = detector.score(dataset.texts, methods=["loss", "mink"], k=[0.5])
    for column in written:
        np.testing.assert_allclose(written[column], expected[column], rtol=1e-6)
    assert notes == ["warning: 3 texts could not be scored; their scores are NaN, see the 'warning' column"]


def test_a_finished_output_loads_no_model(tiny_model_dir, dataset, tmp_path, monkeypatch):
    out = tmp_path / "s.csv"
    score_file(
        dataset,
        RunConfig(
            OutputConfig(out),
            ModelConfig(str(tiny_model_dir)),
            ScoringConfig(methods=["loss"]),
            ComputeConfig(progress=False),
        ),
    )
    notes = []
    monkeypatch.setattr("mia_fast.scoring.runner.Detector", None)
    score_file(
        dataset,
        RunConfig(
            OutputConfig(out, resume=True),
            ModelConfig(str(tiny_model_dir)),
            ScoringConfig(methods=["loss"]),
            ComputeConfig(progress=False),
        ),
        log=notes.append,
    )
    assert notes == [f"{out}: all {len(dataset.texts)} rows already scored"]


def test_needs_are_checked_before_a_model_is_loaded(tiny_model_dir, dataset, tmp_path, monkeypatch):
    monkeypatch.setattr("mia_fast.scoring.runner.Detector", None)
    model = str(tiny_model_dir)
    with pytest.raises(MiaFastError, match="needs a reference model"):
        score_file(
            dataset, RunConfig(OutputConfig(tmp_path / "a.jsonl"), ModelConfig(model), ScoringConfig(methods=["ref"]))
        )
    with pytest.raises(MiaFastError, match="also prefix texts"):
        score_file(
            dataset,
            RunConfig(
                OutputConfig(tmp_path / "b.jsonl"),
                ModelConfig(model),
                ScoringConfig(methods=["recall"], settings=[RecallSettings(prefix_nonmembers=[dataset.texts[0]])]),
            ),
        )
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()


def test_every_name_the_api_exports_is_there_and_the_package_exports_it_too():
    import mia_fast
    from mia_fast import api

    assert len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert api.Detector is mia_fast.Detector and api.score_file is mia_fast.score_file
