"""Dataset inference (Maini et al. 2024, "LLM Dataset Inference: Did you train on my dataset?").

Is a *set* of texts (an author's corpus, a benchmark) in the training data, given a validation set
from the same distribution known not to be? No single text's score settles it, but many weak
per-text features, combined, shift the suspect set's distribution. The procedure:

1. features per text: score columns of the engine's methods, oriented so that higher means member;
2. each feature clipped at the 2.5th and 97.5th percentiles (of both sets pooled) and z-normalised
   with the suspect set's mean and standard deviation;
3. both sets shuffled (seeded) and halved; a linear model (L2 logistic regression) learns suspect
   against validation on the first halves;
4. on the held-out halves, a one-sided Welch t-test: are the model's outputs on the suspect texts
   greater than on the validation texts? Its p-value is reported against the number of held-out
   texts of each set used (the median over seeded draws of that many), up to all of them.

The false-positive check runs the same procedure on two halves of the validation set (one half as the
"suspect" set): it must not give a small p-value. Everything rests on the validation set being drawn
from the suspect set's distribution; a validation set that differs in topic or date (a leaky
split, see ``evaluation.blind``) makes any test "significant".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import power
from mia_fast.evaluation.figures import pyplot, save_figure

MIN_TEXTS = 10
CLIP_PERCENT = 2.5
DRAWS = 50
SIGNIFICANCE = 0.05
_SIZES = (2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)


@dataclass(frozen=True)
class InferenceTest:
    """One run of the procedure: p-values against held-out texts per set, and the linear model's weights."""

    sizes: list[int]
    p_values: list[float]  # median over draws of ``size`` held-out texts of each set; the last: all of them
    p_value: float  # with every held-out text
    weights: dict[str, float]  # per feature, on the normalised features
    train_texts: tuple[int, int]  # (suspect, validation) texts the model learned from
    test_texts: tuple[int, int]


@dataclass(frozen=True)
class DatasetInference:
    test: InferenceTest  # suspect against validation
    false_positive_check: InferenceTest  # a half of the validation set against the other half
    features: list[str]
    seed: int

    @property
    def member(self) -> bool:
        return self.test.p_value < SIGNIFICANCE

    @property
    def min_detectable_auroc(self) -> float | None:
        """The AUROC at which the model's outputs would have to separate the held-out suspect texts from the
        validation ones for the t-test to likely (:data:`~mia_fast.evaluation.power.POWER`) find it."""
        return power.min_detectable_shift_auroc(*self.test.test_texts, SIGNIFICANCE)

    def summary(self) -> str:
        t, check = self.test, self.false_positive_check
        if self.member:
            verdict = "the suspect set is distinguishable from the validation set: evidence that it was trained on"
        else:
            figure, sizes = self.min_detectable_auroc, f"{t.test_texts[0]:,} + {t.test_texts[1]:,} held-out texts"
            unseen = (
                f"a suspect set whose texts its features separate from the validation texts below AUROC {figure:.2f} "
                f"would likely go unseen ({sizes})"
                if figure is not None
                else f"even a perfectly separated suspect set would likely go unseen ({sizes})"
            )
            verdict = f"no evidence that the suspect set was trained on, at this size: {unseen}"
        sane = (
            "passed"
            if check.p_value >= SIGNIFICANCE
            else "FAILED: two halves of the validation set look different, so the test's p-value cannot be trusted"
        )
        return (
            f"dataset inference: p = {t.p_value:.3g} with {t.test_texts[0]} suspect and "
            f"{t.test_texts[1]} validation texts held out "
            f"(one-sided Welch t-test, {SIGNIFICANCE:g} level): {verdict}.\n"
            f"false-positive check (validation half against validation half): p = {check.p_value:.3g}, {sane}."
        )

    def to_dict(self) -> dict:
        return {
            "summary": self.summary(),
            "member": self.member,
            "significance": SIGNIFICANCE,
            "min_detectable_auroc": self.min_detectable_auroc,
            "power": power.POWER,
            "features": self.features,
            "seed": self.seed,
            "test": asdict(self.test),
            "false_positive_check": asdict(self.false_positive_check),
        }


def check_distinct_files(suspect: str | os.PathLike, validation: str | os.PathLike) -> None:
    """Refuses one file given as both sets (through a symlink, ``./`` or a hard link too)."""
    if os.path.exists(suspect) and os.path.exists(validation) and os.path.samefile(suspect, validation):
        raise MiaFastError(
            f"{suspect} and {validation} are the same file; the validation set must be other texts, known not to "
            "be trained on"
        )


def check_disjoint_texts(suspect: Sequence[str], validation: Sequence[str]) -> None:
    """Refuses suspect and validation sets that share texts: the test compares two disjoint sets, and a text in
    both would be taken as known not to be trained on and suspected at once."""
    shared = {t.strip() for t in suspect} & {t.strip() for t in validation}
    if shared:
        raise MiaFastError(
            f"the suspect and validation sets share {len(shared)} text(s) (e.g. {min(shared)[:60]!r}); dataset "
            "inference needs disjoint sets: remove them from one of the two"
        )


def feature_matrix(columns: Mapping[str, np.ndarray], features: Sequence[str]) -> np.ndarray:
    missing = [f for f in features if f not in columns]
    if missing:
        raise MiaFastError(f"no score column for feature(s) {', '.join(missing)}")
    return np.column_stack([np.asarray(columns[f], dtype=np.float64) for f in features])


def _check_size(count: int, what: str) -> None:
    if count < MIN_TEXTS:
        raise MiaFastError(f"dataset inference needs at least {MIN_TEXTS} {what} texts with finite scores, got {count}")


def normalise(suspect: np.ndarray, validation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clips each feature to the pooled 2.5th-97.5th percentiles, then z-normalises it with the suspect set's
    statistics."""
    low, high = np.percentile(np.vstack([suspect, validation]), [CLIP_PERCENT, 100 - CLIP_PERCENT], axis=0)
    suspect, validation = np.clip(suspect, low, high), np.clip(validation, low, high)
    mean, std = suspect.mean(axis=0), suspect.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (suspect - mean) / std, (validation - mean) / std


def _halves(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(rows)
    return order[: rows // 2], order[rows // 2 :]


def welch_p_value(suspect_outputs: np.ndarray, validation_outputs: np.ndarray) -> float:
    """One-sided Welch t-test: are the suspect outputs greater? Two constant samples: 0 when the suspect's is
    greater, else 1."""
    from scipy.stats import ttest_ind  # noqa: PLC0415 (scipy: slow at start-up; only this test needs it)

    if np.ptp(suspect_outputs) == 0 and np.ptp(validation_outputs) == 0:
        return 0.0 if suspect_outputs[0] > validation_outputs[0] else 1.0
    p = ttest_ind(suspect_outputs, validation_outputs, equal_var=False, alternative="greater").pvalue
    return float(p) if np.isfinite(p) else 1.0


def inference_test(
    suspect: np.ndarray, validation: np.ndarray, features: Sequence[str], seed: int, draws: int = DRAWS
) -> InferenceTest:
    """The procedure on two feature matrices [texts, features] (rows with NaN already dropped)."""
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415 (sklearn: slow at start-up; only the test needs it)

    rng = np.random.default_rng(seed)
    suspect, validation = normalise(suspect, validation)
    (s_train, s_test), (v_train, v_test) = _halves(len(suspect), rng), _halves(len(validation), rng)
    x = np.vstack([suspect[s_train], validation[v_train]])
    y = np.r_[np.ones(len(s_train)), np.zeros(len(v_train))]
    model = LogisticRegression(max_iter=1000).fit(x, y)
    s_out, v_out = model.decision_function(suspect[s_test]), model.decision_function(validation[v_test])
    # Draws of n texts of each set for every n below the smaller held-out half; then every held-out text.
    most = min(len(s_out), len(v_out))
    sizes = [n for n in _SIZES if n < most]
    p_values = [
        float(
            np.median(
                [
                    welch_p_value(rng.choice(s_out, n, replace=False), rng.choice(v_out, n, replace=False))
                    for _ in range(draws)
                ]
            )
        )
        for n in sizes
    ]
    p_all = welch_p_value(s_out, v_out)
    return InferenceTest(
        sizes=[*sizes, most],
        p_values=[*p_values, p_all],
        p_value=p_all,
        weights=dict(zip(features, model.coef_[0].round(6).tolist())),
        train_texts=(len(s_train), len(v_train)),
        test_texts=(len(s_out), len(v_out)),
    )


def dataset_inference(
    suspect: Mapping[str, np.ndarray],
    validation: Mapping[str, np.ndarray],
    features: Sequence[str],
    seed: int = 0,
    draws: int = DRAWS,
) -> DatasetInference:
    """Dataset inference from the score columns of the suspect and validation texts (texts with a NaN feature are
    left out)."""
    if not features:
        raise MiaFastError("dataset inference needs at least one feature")
    s, v = feature_matrix(suspect, features), feature_matrix(validation, features)
    s, v = s[np.isfinite(s).all(axis=1)], v[np.isfinite(v).all(axis=1)]
    _check_size(len(s), "suspect")
    _check_size(len(v), "validation")
    check_rng = np.random.default_rng(seed + 1)
    first, second = _halves(len(v), check_rng)
    return DatasetInference(
        test=inference_test(s, v, features, seed, draws),
        false_positive_check=inference_test(v[first], v[second], features, seed + 2, draws),
        features=list(features),
        seed=seed,
    )


def plot_p_values(path: Path, result: DatasetInference) -> Path:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for test, label, style in (
        (result.test, "suspect vs validation", "-o"),
        (result.false_positive_check, "validation half vs half (false-positive check)", "--s"),
    ):
        ax.plot(test.sizes, np.maximum(test.p_values, 1e-300), style, label=label)
    ax.axhline(SIGNIFICANCE, color="grey", linestyle=":", label=f"p = {SIGNIFICANCE:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("held-out texts of each set used in the t-test")
    ax.set_ylabel("p-value (median over draws)")
    ax.set_title("dataset inference: p-value against the number of texts")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def write_dataset_inference(directory: str | Path, result: DatasetInference, meta: Mapping[str, object]) -> list[Path]:
    """dataset_inference.json, p_values.png and report.md into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "dataset_inference.json"
    data.write_text(json.dumps({"meta": dict(meta), **result.to_dict()}, indent=2) + "\n")
    figure = plot_p_values(directory / "p_values.png", result)
    t, check = result.test, result.false_positive_check
    lines = [
        "# mia-fast dataset inference",
        "",
        *result.summary().splitlines(),
        "",
        "| held-out texts per set | p (suspect vs validation) | p (validation half vs half) |",
        "|---|---|---|",
    ]
    check_p = dict(zip(check.sizes, check.p_values))
    lines += [
        f"| {n} | {p:.3g} | {check_p[n]:.3g} |" if n in check_p else f"| {n} | {p:.3g} | – |"
        for n, p in zip(t.sizes, t.p_values)
    ]
    lines += [
        "",
        "![p-values](p_values.png)",
        "",
        "## Feature weights (normalised features; positive: higher in the suspect set)",
        "",
        "| feature | weight |",
        "|---|---|",
        *(f"| {f} | {w:+.4f} |" for f, w in sorted(t.weights.items(), key=lambda item: -abs(item[1]))),
        "",
        "## Settings",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in meta.items()),
        "",
    ]
    markdown = directory / "report.md"
    markdown.write_text("\n".join(lines))
    return [data, figure, markdown]
