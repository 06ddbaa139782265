"""One run's assessment: the blind baselines fitted on the rows every column scored (NaN on the others), every
column's metrics with the baselines' refit p-values, and the verdicts; without the baselines, the methods alone."""

import numpy as np

from evaluation.test_blind import WORDS, random_texts
from mia_fast.evaluation.assessment import BlindSettings, assess
from mia_fast.evaluation.blind import BLIND_COLUMNS


def test_the_baselines_are_fitted_on_the_rows_every_column_scored():
    labels = np.r_[np.ones(12), np.zeros(12)].astype(int)
    texts = [f"{t} in 1850" for t in random_texts(12, 0, WORDS[:8])] + random_texts(12, 1, WORDS[8:])
    loss = labels + np.random.default_rng(0).normal(size=24)
    loss[[0, 13]] = np.nan  # one member and one non-member left unscored
    assessed = assess(texts, labels, {"loss": loss}, resamples=20, blind=BlindSettings(True, 19))
    assert set(assessed.columns) == {"loss", *BLIND_COLUMNS} == set(assessed.results)
    for name in BLIND_COLUMNS:
        assert np.flatnonzero(np.isnan(assessed.columns[name])).tolist() == [0, 13]
        test = assessed.blind.tests[name]
        assert assessed.results[name].significance.permutation_p == test.p_value and test.most == 19
    assert assessed.results["loss"].n_members == 11 and assessed.results["loss"].n_excluded == 2
    assert [v.key for v in assessed.verdicts] == ["model_free", "above_chance", "above_model_free"]


def test_without_the_baselines_only_the_methods_are_assessed():
    labels = np.r_[np.ones(10), np.zeros(10)].astype(int)
    columns = {"loss": labels + np.random.default_rng(1).normal(size=20), "zlib": np.arange(20.0)}
    assessed = assess(random_texts(20, 2), labels, columns, resamples=20, blind=BlindSettings(enabled=False))
    assert assessed.blind is None and set(assessed.results) == {"loss", "zlib"}
    assert not {"model_free", "above_model_free"} & {v.key for v in assessed.verdicts}
