"""Model-free ("blind") baselines: can a benchmark's members be told from its non-members without the model?

Das et al. ("Blind Baselines Beat Membership Inference Attacks for Foundation Models", 2024) separate
WikiMIA's members from its non-members at AUROC 0.99 with a bag-of-words classifier, and other
benchmarks with a date detector: the splits leak through topics and dates, so a method's AUROC on
them is no evidence of membership. Two classifiers here, each scored out of fold (stratified k-fold,
seeded: every text is scored by a classifier that never saw it), so their scores are evaluated like
any method's, on the same rows and bootstrap resamples:

- ``blind_bow``: logistic regression (trained by SGD: seconds on 10k texts where an exact solver takes
  minutes) on TF-IDF word 1-2-grams, hashed so that nothing is fitted on the held-out fold (the IDF
  weights are fitted per fold);
- ``blind_dates``: logistic regression on the years and dates a text mentions (the latest and the
  earliest year from 1000 to 2099, how many years and month-name dates it holds).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation.metrics import MethodMetrics

BLIND_COLUMNS = ("blind_bow", "blind_dates")
DEFAULT_FOLDS = 5
_HASHED_FEATURES = 2**20
_YEAR = re.compile(r"(?<![\d.,])(1[0-9]{3}|20[0-9]{2})(?!\d|[.,]\d)")
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
# Matched on lower-cased text: IGNORECASE makes this alternation several times slower.
_DATE = re.compile(
    rf"\b(?:(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{_MONTHS})\b|\d{{4}}-\d{{2}}-\d{{2}}\b)"
)


def date_features(texts: Sequence[str]) -> np.ndarray:
    """[n, 5]: has a year; the latest and the earliest year (centred on 2000, in centuries; 0 without one);
    log(1 + years mentioned); log(1 + month-name or ISO dates)."""
    features = np.zeros((len(texts), 5))
    for row, text in enumerate(texts):
        years = [int(y) for y in _YEAR.findall(text)]
        if years:
            features[row, :3] = 1.0, (max(years) - 2000) / 100, (min(years) - 2000) / 100
        features[row, 3] = np.log1p(len(years))
        features[row, 4] = np.log1p(len(_DATE.findall(text.lower())))
    return features


def _bag_of_words(texts: Sequence[str]):
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(
        n_features=_HASHED_FEATURES, alternate_sign=False, norm=None, ngram_range=(1, 2)
    ).transform(texts)


def cross_validation_folds(labels: Sequence[int], folds: int = DEFAULT_FOLDS) -> int:
    """The folds the blind baselines will use (at most one per text of the smaller class); refuses fewer than 2 of
    a class."""
    labels = np.asarray(labels, dtype=np.int64)
    smaller = int(min(labels.sum(), len(labels) - labels.sum()))
    if smaller < 2:
        raise MiaFastError(
            "blind baselines need at least 2 members and 2 non-members to cross-validate; "
            f"found {smaller} of one class (turn them off with --no-blind)"
        )
    return min(folds, smaller)


def blind_scores(
    texts: Sequence[str], labels: Sequence[int], folds: int = DEFAULT_FOLDS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Out-of-fold member scores (the classifiers' decision values) of both blind baselines."""
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.linear_model import LogisticRegression, SGDClassifier
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(labels):
        raise MiaFastError(f"{len(texts)} texts but {len(labels)} labels")
    splitter = StratifiedKFold(n_splits=cross_validation_folds(labels, folds), shuffle=True, random_state=seed)
    classifiers = {
        "blind_bow": (
            make_pipeline(
                TfidfTransformer(sublinear_tf=True), SGDClassifier(loss="log_loss", alpha=1e-5, random_state=seed)
            ),
            _bag_of_words(texts),
        ),
        "blind_dates": (make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)), date_features(texts)),
    }
    return {
        name: cross_val_predict(classifier, features, labels, cv=splitter, method="decision_function").astype(
            np.float64
        )
        for name, (classifier, features) in classifiers.items()
    }


def blind_verdict(results: Mapping[str, MethodMetrics]) -> str | None:
    """What the blind baselines say of the benchmark, in plain words (None without them or without a method)."""
    blind = {n: r for n, r in results.items() if n in BLIND_COLUMNS}
    methods = {n: r for n, r in results.items() if n not in BLIND_COLUMNS}
    if not blind or not methods:
        return None
    blind_name, b = max(blind.items(), key=lambda item: item[1].auroc)
    best_name, m = max(methods.items(), key=lambda item: item[1].auroc)
    blind_text = (
        f"the model-free baseline {blind_name} reaches AUROC {b.auroc:.3f} [{b.auroc_ci[0]:.3f}, {b.auroc_ci[1]:.3f}]"
    )
    best_text = f"the best method, {best_name}, {m.auroc:.3f} [{m.auroc_ci[0]:.3f}, {m.auroc_ci[1]:.3f}]"
    if b.auroc_ci[0] <= 0.5:
        return (
            f"Model-free baselines are at chance ({blind_text}; its CI holds 0.5; {best_text}): "
            "no sign that this split leaks through words or dates."
        )
    if b.auroc >= m.auroc_ci[0] or b.auroc_ci[1] >= m.auroc:
        return (
            f"WARNING: {blind_text}, within the CI of (or above) {best_text}. This benchmark's members and non-members "
            "are separable without the model, so these scores cannot be read as membership evidence."
        )
    return (
        f"{blind_text[0].upper()}{blind_text[1:]}, above chance but below {best_text}: the split leaks somewhat, "
        "so part of each method's AUROC may come from the split rather than from membership."
    )
