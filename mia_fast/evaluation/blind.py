"""Model-free ("blind") baselines: can a benchmark's members be told from its non-members without the model?

Das et al. ("Blind Baselines Beat Membership Inference Attacks for Foundation Models", 2024) separate
WikiMIA's members from its non-members at AUROC 0.99 with a bag-of-words classifier, and other
benchmarks with a date detector: the splits leak through topics and dates, so a method's AUROC on
them is no evidence of membership. Three classifiers here, each scored out of fold (stratified k-fold,
seeded: every text is scored by a classifier that never saw it), so their scores are evaluated like
any method's, on the same rows and bootstrap resamples:

- ``blind_bow``: logistic regression (trained by SGD: seconds on 10k texts where an exact solver takes
  minutes) on TF-IDF word 1-2-grams, hashed so that nothing is fitted on the held-out fold (the IDF
  weights are fitted per fold);
- ``blind_dates``: logistic regression (solved by Newton's method: exact, where the default solver stops at a
  tolerance, and quicker on five features) on the years and dates a text mentions (the latest and the
  earliest year from 1000 to 2099, how many years and month-name dates it holds);
- ``blind_ngrams``: the greedy selection of Das et al. (``ethz-spylab/Blind-MIA``,
  ``greedy_selection_basic``): on the training folds, repeatedly pick the character 1-5-gram with the
  most not-yet-flagged members per not-yet-flagged non-member plus one, and flag every text holding it.
  A held-out text scores by the step that first flags it: minus the training non-members flagged up
  to that step (plus a fraction for the step), over the training non-members, so its ROC is the public
  code's curve of steps and scores of different folds share one scale (about the training FPR at which
  it is flagged). Two deliberate deviations: a tie goes to the longest n-gram, then the alphabetically
  first (the public code takes the alphabetically first, which names a planted "2026" as " 2"), and
  n-grams are read from a text's first 2,000 characters, which bounds memory on long documents.

**Their p-values refit.** A baseline's out-of-fold scores were fitted on the labels, so shuffling the labels over
fixed scores is no null for them: a search over thousands of n-grams finds chance associations that are properties
of the whole sample, and so hold across folds (on random splits of 20 + 20 texts, that fixed-score p-value fell
below 0.01 several times in sixteen). :func:`refit_permutation_tests` repeats the whole out-of-fold procedure, the
fold split and the greedy selection inside each fold included, on each shuffle of the labels: a true null. A
baseline's shuffles stop once ``STOP_AFTER`` of them reach its observed AUROC (Besag and Clifford's sequential
p-value, valid wherever it stops), so a split at chance costs a few dozen refits; larger samples draw fewer
shuffles (:func:`refit_permutations`).

Telltales, the n-grams that give members away, are checked held out: an n-gram picked among the first steps on a
fold's training rows is counted on that fold's held-out rows, and named only where those counts favour members
(Fisher's exact test, one-sided, at ``metrics.SIGNIFICANCE``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics

BLIND_COLUMNS = ("blind_bow", "blind_dates", "blind_ngrams")
DEFAULT_FOLDS = 5
_HASHED_FEATURES = 2**20
NGRAM_MAX = 5
NGRAM_CHARACTERS = 2000
TELLTALES = 3
# Refit shuffles: MOST_PERMUTATIONS up to FULL_PERMUTATION_ROWS texts, fewer in proportion above, never below
# FEWEST_PERMUTATIONS (p down to 0.01, below Holm's first threshold over the three baselines, 0.05 / 3).
MOST_PERMUTATIONS = 499
FULL_PERMUTATION_ROWS = 1000
FEWEST_PERMUTATIONS = 99
STOP_AFTER = 10
NULL_DRAWS = 100


def null_draws(most: int) -> int:
    """The fewest shuffles drawn for the null's spread (the minimum detectable AUROC), past a test's stop where
    needed (its p-value stays the one at the stop): NULL_DRAWS at the full count of shuffles, fewer in proportion,
    at least twice STOP_AFTER."""
    return min(most, max(2 * STOP_AFTER, round(NULL_DRAWS * most / MOST_PERMUTATIONS)))


_YEAR = re.compile(r"(?<![\d.,])(1[0-9]{3}|20[0-9]{2})(?!\d|[.,]\d)")
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
# Matched on lower-cased text: IGNORECASE makes this alternation several times slower.
_DATE = re.compile(
    rf"\b(?:(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{_MONTHS})\b|\d{{4}}-\d{{2}}-\d{{2}}\b)"
)
Splits = list[tuple[np.ndarray, np.ndarray]]
_NONE = np.zeros(0, dtype=np.int64)


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
    """Hashed word 1-2-gram counts, keeping only the hashed columns some text holds: the others are zero in every
    fit (their IDF and weights touch no score), so dropping them changes no score and makes each fit cheaper."""
    from sklearn.feature_extraction.text import HashingVectorizer

    counts = HashingVectorizer(
        n_features=_HASHED_FEATURES, alternate_sign=False, norm=None, ngram_range=(1, 2)
    ).transform(texts)
    return counts[:, np.unique(counts.indices)]


def _character_ngrams(texts: Sequence[str]):
    """Binary [texts, n-grams] CSR matrix of the character 1..NGRAM_MAX-grams each text holds, each n-gram, and each
    one's length (the greedy selection's tie-break); of n-grams held by exactly the same texts, only the one the
    selection would pick (the longest, then the alphabetically first), so that no choice changes."""
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(
        analyzer=lambda text: _ngrams_of(text[:NGRAM_CHARACTERS]), binary=True, dtype=np.float32
    )
    matrix = vectorizer.fit_transform(texts).tocsc()
    names = vectorizer.get_feature_names_out()
    lengths = np.array([len(n) for n in names])
    kept: dict[bytes, int] = {}
    for column in np.lexsort((np.arange(len(names)), -lengths)):  # longest first, then alphabetical
        kept.setdefault(matrix.indices[matrix.indptr[column] : matrix.indptr[column + 1]].tobytes(), int(column))
    columns = np.sort(np.fromiter(kept.values(), dtype=np.int64, count=len(kept)))
    return matrix[:, columns].tocsr(), names[columns], lengths[columns]


def _ngrams_of(text: str) -> list[str]:
    return [text[i : i + n] for n in range(1, NGRAM_MAX + 1) for i in range(len(text) - n + 1)]


@dataclass(frozen=True)
class BlindFeatures:
    """What the baselines read from the texts, read once: every fit, each shuffle's included, reuses it."""

    words: Any  # CSR [texts, hashed word 1-2-grams]: counts
    dates: np.ndarray  # [texts, 5]: date_features
    ngrams: Any  # CSR [texts, character n-grams]: binary
    ngram_names: np.ndarray
    ngram_lengths: np.ndarray

    @classmethod
    def of(cls, texts: Sequence[str]) -> BlindFeatures:
        return cls(_bag_of_words(texts), date_features(texts), *_character_ngrams(texts))


@dataclass(frozen=True)
class GreedySelection:
    """The n-grams picked (as columns), in order, and the training non-members flagged once each is added."""

    columns: np.ndarray
    nonmembers_flagged: np.ndarray
    nonmembers: int


def greedy_ngram_selection(matrix, labels: np.ndarray, lengths: np.ndarray) -> GreedySelection:
    """Das et al.'s greedy selection over the rows of a binary [texts, n-grams] matrix: until no n-gram flags
    another member, pick the one with the most unflagged members per (unflagged non-members + 1)."""
    held_by_members = np.asarray(matrix[labels == 1].sum(axis=0)).ravel()
    columns = np.flatnonzero(held_by_members > 0)  # no other n-gram is ever picked
    rows = {1: matrix[labels == 1][:, columns], 0: matrix[labels == 0][:, columns]}
    by_ngram = {label: rows[label].tocsc() for label in (1, 0)}
    counts = {label: np.asarray(rows[label].sum(axis=0)).ravel() for label in (1, 0)}
    unflagged = {label: np.ones(rows[label].shape[0], dtype=bool) for label in (1, 0)}
    lengths = lengths[columns]
    place = np.arange(len(columns))  # where each column of ``rows`` sits in ``columns`` now; -1 once dropped
    picked, flagged = [], []
    while (counts[1] > 0).any():
        alive = np.flatnonzero(counts[1] > 0)
        if len(alive) * 2 < len(columns):
            # Most n-grams flag no member any more, and never will again: dropping them makes every later step cheaper.
            moved = np.full(len(columns), -1)
            moved[alive] = np.arange(len(alive))
            place = np.where(place >= 0, moved[np.maximum(place, 0)], -1)
            columns, lengths = columns[alive], lengths[alive]
            by_ngram = {label: by_ngram[label][:, alive] for label in (1, 0)}
            counts = {label: counts[label][alive] for label in (1, 0)}
        ratio = np.where(counts[1] > 0, counts[1] / (counts[0] + 1), -1.0)
        tied = np.flatnonzero(ratio == ratio.max())
        column = int(tied[np.argmax(lengths[tied])])  # the longest, then the alphabetically first
        for label in (1, 0):
            holding = by_ngram[label].indices[by_ngram[label].indptr[column] : by_ngram[label].indptr[column + 1]]
            newly = holding[unflagged[label][holding]]
            unflagged[label][newly] = False
            csr = rows[label]
            held = place[np.concatenate([csr.indices[csr.indptr[r] : csr.indptr[r + 1]] for r in newly] or [_NONE])]
            counts[label] -= np.bincount(held[held >= 0], minlength=len(columns)).astype(counts[label].dtype)
        picked.append(columns[column])
        flagged.append(int((~unflagged[0]).sum()))
    return GreedySelection(np.asarray(picked, dtype=np.int64), np.asarray(flagged), rows[0].shape[0])


def _greedy_scores(selection: GreedySelection, matrix) -> np.ndarray:
    """Each row's score: minus (the training non-members flagged by the step that first flags it, plus the step's
    fraction of all steps) over the training non-members; below every step for a row no n-gram flags."""
    steps = len(selection.columns)
    holds = matrix[:, selection.columns].tocsr()  # column j: the n-gram picked at step j
    first = np.full(matrix.shape[0], steps)
    flagged_rows = np.diff(holds.indptr) > 0
    if flagged_rows.any():
        first[flagged_rows] = np.minimum.reduceat(holds.indices, holds.indptr[:-1][flagged_rows])
    flagged = np.r_[selection.nonmembers_flagged, selection.nonmembers].astype(np.float64)
    return -(flagged[first] + first / (steps + 1)) / max(selection.nonmembers, 1)


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


def fold_splits(labels: np.ndarray, folds: int, seed: int) -> Splits:
    """(training rows, held-out rows) of each fold: stratified, shuffled with ``seed``."""
    from sklearn.model_selection import StratifiedKFold

    splitter = StratifiedKFold(n_splits=cross_validation_folds(labels, folds), shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(labels)), labels))


def _tf_idf(counts, train: np.ndarray):
    """The l2-normed sublinear TF-IDF of every row of ``counts`` (CSR), the IDF fitted on the ``train`` rows:
    scikit-learn's ``TfidfTransformer(sublinear_tf=True)`` (smoothed IDF), without its per-call checks, which cost
    most of a fold's fit on a small sample."""
    documents = np.bincount(counts[train].indices, minlength=counts.shape[1])
    idf = np.log((len(train) + 1) / (documents + 1.0)) + 1.0
    weighted = counts.astype(np.float64)
    weighted.data = (np.log(weighted.data) + 1.0) * idf[weighted.indices]
    rows = np.repeat(np.arange(weighted.shape[0]), np.diff(weighted.indptr))
    norms = np.sqrt(np.bincount(rows, weights=weighted.data**2, minlength=weighted.shape[0]))
    weighted.data /= np.where(norms > 0, norms, 1.0)[rows]
    return weighted


def _bow_scores(features: BlindFeatures, labels: np.ndarray, splits: Splits, seed: int) -> np.ndarray:
    from sklearn.linear_model import SGDClassifier

    scores = np.empty(len(labels))
    for train, held_out in splits:
        weighted = _tf_idf(features.words, train)
        classifier = SGDClassifier(loss="log_loss", alpha=1e-5, random_state=seed)
        scores[held_out] = classifier.fit(weighted[train], labels[train]).decision_function(weighted[held_out])
    return scores


def logistic_regression(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The weights (intercept last) of logistic regression with an l2 penalty of 1/2 on the coefficients, the
    intercept unpenalised (scikit-learn's default objective), solved by Newton's method, each step halved until the
    objective falls, to convergence: exact where scikit-learn's solvers stop at a tolerance, and on a few features a
    fraction of a millisecond."""
    design = np.c_[x, np.ones(len(x))]
    penalty = np.r_[np.ones(x.shape[1]), 0.0]
    weights = np.zeros(design.shape[1])

    def objective(w: np.ndarray) -> float:
        margins = design @ w
        return float(np.logaddexp(0.0, margins).sum() - y @ margins + 0.5 * penalty @ (w * w))

    current = objective(weights)
    for _ in range(100):
        probabilities = 0.5 * (1.0 + np.tanh(0.5 * (design @ weights)))
        gradient = design.T @ (probabilities - y) + penalty * weights
        curvature = (design * (probabilities * (1.0 - probabilities))[:, None]).T @ design + np.diag(penalty)
        step = np.linalg.lstsq(curvature, gradient, rcond=None)[0]
        if gradient @ step < 1e-10:
            # Within the quadratic convergence: this step leaves an error far below what rounding resolves.
            return weights - step
        for _ in range(60):
            candidate = objective(weights - step)
            if candidate <= current:
                break
            step = step / 2
        else:
            return weights
        weights, current = weights - step, candidate
    return weights


def _standardise(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``x`` centred and scaled by its ``train`` rows' mean and standard deviation; a column constant there
    centred on its value, unscaled (scikit-learn's ``StandardScaler``)."""
    fitted = x[train]
    constant = fitted.max(axis=0) == fitted.min(axis=0)
    mean = np.where(constant, fitted[0], fitted.mean(axis=0))
    scale = np.where(constant, 1.0, fitted.std(axis=0))
    return (x - mean) / scale


def _date_scores(features: BlindFeatures, labels: np.ndarray, splits: Splits, seed: int) -> np.ndarray:
    scores = np.empty(len(labels))
    for train, held_out in splits:
        standardised = _standardise(features.dates, train)
        weights = logistic_regression(standardised[train], labels[train].astype(np.float64))
        scores[held_out] = standardised[held_out] @ weights[:-1] + weights[-1]
    return scores


def _selections(features: BlindFeatures, labels: np.ndarray, splits: Splits) -> list[GreedySelection]:
    return [
        greedy_ngram_selection(features.ngrams[train], labels[train], features.ngram_lengths) for train, _ in splits
    ]


def _selection_scores(features: BlindFeatures, splits: Splits, selections: Sequence[GreedySelection]) -> np.ndarray:
    scores = np.empty(features.ngrams.shape[0])
    for (_, held_out), selection in zip(splits, selections):
        scores[held_out] = _greedy_scores(selection, features.ngrams[held_out])
    return scores


def _ngram_scores(features: BlindFeatures, labels: np.ndarray, splits: Splits, seed: int) -> np.ndarray:
    return _selection_scores(features, splits, _selections(features, labels, splits))


# Each baseline's out-of-fold scores from the features, the labels, the fold split and the seed.
BASELINES: dict[str, Callable[[BlindFeatures, np.ndarray, Splits, int], np.ndarray]] = {
    "blind_bow": _bow_scores,
    "blind_dates": _date_scores,
    "blind_ngrams": _ngram_scores,
}


@dataclass(frozen=True)
class Telltale:
    """An n-gram that gives members away, counted held out: over the ``folds`` whose training rows picked it among
    their first steps, how many of those folds' held-out members and non-members hold it, and Fisher's one-sided
    exact p-value that members hold it more often."""

    ngram: str
    members: int
    nonmembers: int
    held_out_members: int
    held_out_nonmembers: int
    folds: int
    p_value: float


def _checked_telltales(
    features: BlindFeatures, labels: np.ndarray, splits: Splits, selections: Sequence[GreedySelection], top: int
) -> list[Telltale]:
    """The n-grams among each fold's first ``top`` picks whose held-out counts favour members (Fisher's exact test,
    one-sided, at the report's significance level), strongest first."""
    from scipy.stats import fisher_exact

    folds_of: dict[int, list[int]] = {}
    for fold, selection in enumerate(selections):
        for column in selection.columns[:top]:
            folds_of.setdefault(int(column), []).append(fold)
    found = []
    for column, folds in folds_of.items():
        held_out = np.concatenate([splits[fold][1] for fold in folds])
        holding = features.ngrams[held_out, column].toarray().ravel() > 0
        members, nonmembers = labels[held_out] == 1, labels[held_out] == 0
        counts = int(holding[members].sum()), int(holding[nonmembers].sum())
        table = [[counts[0], int(members.sum()) - counts[0]], [counts[1], int(nonmembers.sum()) - counts[1]]]
        p = float(fisher_exact(table, alternative="greater").pvalue)
        if p < metrics.SIGNIFICANCE:
            name = str(features.ngram_names[column])
            found.append(Telltale(name, *counts, int(members.sum()), int(nonmembers.sum()), len(folds), p))
    return sorted(found, key=lambda t: (t.p_value, -t.folds, t.ngram))[:top]


def telltale_ngrams(
    texts: Sequence[str], labels: Sequence[int], top: int = TELLTALES, folds: int = DEFAULT_FOLDS, seed: int = 0
) -> list[Telltale]:
    """The n-grams that give members away, each picked on training folds and confirmed on the held-out ones."""
    labels = np.asarray(labels, dtype=np.int64)
    features = BlindFeatures.of(texts)
    splits = fold_splits(labels, folds, seed)
    return _checked_telltales(features, labels, splits, _selections(features, labels, splits), top)


def refit_permutations(rows: int) -> int:
    """The most label shuffles the refit test draws per baseline for ``rows`` texts: MOST_PERMUTATIONS up to
    FULL_PERMUTATION_ROWS, then fewer in proportion (each refit costs about as much as the rows), never below
    FEWEST_PERMUTATIONS."""
    if rows <= FULL_PERMUTATION_ROWS:
        return MOST_PERMUTATIONS
    return max(FEWEST_PERMUTATIONS, round(MOST_PERMUTATIONS * FULL_PERMUTATION_ROWS / rows))


@dataclass(frozen=True)
class RefitTest:
    """A baseline's permutation test with every shuffle refitted: its p-value, the shuffles it rests on (fewer than
    ``most`` where STOP_AFTER of them met the observed AUROC first), and the AUROCs of every shuffle drawn (the null,
    at least :func:`null_draws` of them, for its spread)."""

    p_value: float
    permutations: int
    most: int
    null_aurocs: np.ndarray


def refit_permutation_tests(
    features: BlindFeatures,
    labels: np.ndarray,
    observed: Mapping[str, float],
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    permutations: int | None = None,
    on_permutation: Callable[[], None] | None = None,
) -> dict[str, RefitTest]:
    """One-sided permutation p-value of each baseline's ``observed`` AUROC, every shuffle of the labels refitted
    from its fold split on (:data:`BASELINES`): (1 + #{shuffles reaching it}) / (1 + shuffles), or STOP_AFTER / s
    where the s-th shuffle is the STOP_AFTER-th to reach it (Besag and Clifford 1991). The same seeded shuffles for
    every baseline; ``permutations`` (default :func:`refit_permutations`) caps each."""
    labels = np.asarray(labels, dtype=np.int64)
    most = refit_permutations(len(labels)) if permutations is None else permutations
    if most < 1:
        raise MiaFastError(f"the refit test needs at least 1 permutation, got {most}")
    import sklearn

    rng = np.random.default_rng(seed)
    fewest = null_draws(most)
    nulls: dict[str, list[float]] = {column: [] for column in observed}
    reached = dict.fromkeys(observed, 0)
    stopped: dict[str, int] = {}
    for _ in range(most):
        active = [c for c in observed if c not in stopped or len(nulls[c]) < fewest]
        if not active:
            break
        shuffled = rng.permutation(labels)
        splits = fold_splits(shuffled, folds, seed)
        for column in active:
            # The features are the baselines' own, finite by construction: sklearn's checks of them, per fit, are
            # most of a small sample's cost.
            with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
                null = metrics.auroc(shuffled, BASELINES[column](features, shuffled, splits, seed))
            nulls[column].append(null)
            if column not in stopped:
                reached[column] += null >= observed[column] - 1e-12
                if reached[column] == STOP_AFTER:
                    stopped[column] = len(nulls[column])
        if on_permutation is not None:
            on_permutation()
    tests = {}
    for column, drawn in nulls.items():
        if column in stopped:
            count, p = stopped[column], STOP_AFTER / stopped[column]
        else:
            count, p = len(drawn), (reached[column] + 1) / (len(drawn) + 1)
        tests[column] = RefitTest(p, count, most, np.asarray(drawn))
    return tests


@dataclass(frozen=True)
class BlindBaselines:
    scores: dict[str, np.ndarray]  # column -> out-of-fold score of every text
    telltales: list[Telltale]  # checked held out; named in a verdict only where a baseline is significant
    tests: dict[str, RefitTest]  # column -> its refit permutation test (empty without one)


def blind_scores(
    texts: Sequence[str], labels: Sequence[int], folds: int = DEFAULT_FOLDS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Out-of-fold member scores of the three blind baselines (the classifiers' decision values; the greedy
    selection's step score)."""
    return blind_baselines(texts, labels, folds, seed, permutations=0).scores


def blind_baselines(
    texts: Sequence[str],
    labels: Sequence[int],
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    telltales: int = TELLTALES,
    permutations: int | None = None,
    progress: bool = False,
) -> BlindBaselines:
    """Out-of-fold scores of the three baselines, their held-out telltales and their refit permutation tests
    (``permutations``: the most shuffles per baseline, default :func:`refit_permutations`; 0: no test), the texts
    read once. ``progress`` shows a bar over the shuffles."""
    labels = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(labels):
        raise MiaFastError(f"{len(texts)} texts but {len(labels)} labels")
    splits = fold_splits(labels, folds, seed)
    features = BlindFeatures.of(texts)
    selections = _selections(features, labels, splits)
    scores = {
        "blind_bow": _bow_scores(features, labels, splits, seed),
        "blind_dates": _date_scores(features, labels, splits, seed),
        "blind_ngrams": _selection_scores(features, splits, selections),
    }
    found = _checked_telltales(features, labels, splits, selections, telltales)
    if permutations == 0:
        return BlindBaselines(scores, found, {})
    from tqdm.auto import tqdm

    most = refit_permutations(len(labels)) if permutations is None else permutations
    observed = {column: metrics.auroc(labels, values) for column, values in scores.items()}
    with tqdm(total=most, desc="blind baselines, refit shuffles", unit="shuffle", disable=not progress) as bar:
        tests = refit_permutation_tests(features, labels, observed, folds, seed, most, on_permutation=bar.update)
        bar.total = bar.n  # a split at chance stops early: done, not cut short
        bar.refresh()
    return BlindBaselines(scores, found, tests)


def leaking_baselines(results: Mapping[str, metrics.MethodMetrics]) -> set[str]:
    """The blind baselines whose (refit) permutation p-values Holm's procedure rejects over the baselines present."""
    return metrics.holm_rejections({n: r.significance.permutation_p for n, r in results.items() if n in BLIND_COLUMNS})
