"""What a report says in plain words, each verdict with the smallest effect it could have seen.

Four verdicts, each with its minimum detectable AUROC (:mod:`mia_fast.evaluation.power`) at the run's sizes:

- ``model_free``: whether the split leaks, by the blind baselines' refit permutation p-values (Holm over the
  baselines); where none is significant, "no sign ... at this size: a leak below AUROC x would likely go unseen";
  where one is, a WARNING (within the best method's CI, or above it) or "leaks somewhat", with the telltale n-grams
  that held up out of fold;
- ``above_chance``: which methods the permutation control finds above chance (Holm over the method columns);
- ``above_model_free``: which of those are also above the best blind baseline (the paired-bootstrap CI of the AUROC
  difference above 0);
- ``known_leak``: on a suite whose leak is on record (its ``Suite.leakage``) where the blind baselines
  found none, that the suite is known to leak and whether this sample could have shown it.

A positive verdict reads as it always has; a negative one states its figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mia_fast.data.suites import Leakage
from mia_fast.evaluation import metrics, power
from mia_fast.evaluation.blind import BLIND_COLUMNS, Telltale, leaking_baselines
from mia_fast.evaluation.blind_refit import MOST_PERMUTATIONS, RefitTest

# The paired-bootstrap 95% CI of a margin excludes 0 from below at a one-sided 2.5%.
MARGIN_ALPHA = 0.025


@dataclass(frozen=True)
class Verdict:
    """One verdict: its words, whether it warns, and the smallest true AUROC its test would likely have detected
    (None: none would, at this size), at level ``alpha`` and power :data:`power.POWER`, computed as ``basis``
    says."""

    key: str
    text: str
    min_detectable_auroc: float | None
    alpha: float
    basis: str
    warning: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "warning": self.warning,
            "min_detectable_auroc": self.min_detectable_auroc,
            "alpha": self.alpha,
            "power": power.POWER,
            "basis": self.basis,
            **self.details,
        }


@dataclass(frozen=True)
class KnownLeak:
    """A suite's leak on record: its name and :class:`~mia_fast.data.suites.Leakage`."""

    suite: str
    leakage: Leakage


def unseen_clause(figure: float | None, members: int, nonmembers: int, what: str = "a leak") -> str:
    """'at this size: <what> below AUROC x would likely go unseen (m + n texts)'."""
    sizes = power.sizes_text(members, nonmembers)
    if figure is None:
        return f"at this size: even {what} that separates perfectly would likely go unseen ({sizes})"
    return f"at this size: {what} below AUROC {figure:.2f} would likely go unseen ({sizes})"


def _ci(result: metrics.MethodMetrics) -> str:
    return f"{result.auroc:.3f} [{result.auroc_ci[0]:.3f}, {result.auroc_ci[1]:.3f}]"


def _smaller(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def blind_detectable(
    results: Mapping[str, metrics.MethodMetrics], tests: Mapping[str, RefitTest]
) -> dict[str, float | None]:
    """Each blind baseline's minimum detectable AUROC at Holm's first level over the baselines present, from its
    refit null (the rank-sum null where it drew fewer than 2 shuffles)."""
    present = [n for n in BLIND_COLUMNS if n in results]
    alpha = metrics.SIGNIFICANCE / len(present)
    found = {}
    for name in present:
        r, test = results[name], tests.get(name)
        null = test.null_aurocs if test is not None else None
        smallest = 1 / (test.most + 1) if test is not None else 1 / (metrics.PERMUTATIONS + 1)
        found[name] = power.min_detectable_auroc(r.n_members, r.n_nonmembers, alpha, null=null, smallest_p=smallest)
    return found


def model_free_verdict(
    results: Mapping[str, metrics.MethodMetrics],
    tests: Mapping[str, RefitTest] | None = None,
    telltales: Sequence[Telltale] = (),
) -> Verdict | None:
    """What the blind baselines say of the benchmark (None without baselines or without a method)."""
    blind = {n: results[n] for n in BLIND_COLUMNS if n in results}
    methods = {n: r for n, r in results.items() if n not in BLIND_COLUMNS}
    if not blind or not methods:
        return None
    alpha = metrics.SIGNIFICANCE / len(blind)
    detectable = blind_detectable(results, tests or {})
    figure = _smaller(list(detectable.values()))
    refit = bool(tests)
    basis = (
        "each baseline's refit permutation null (its spread and upper tail), Hanley-McNeil's spread under a leak "
        "widened as much; the most sensitive baseline"
        if refit
        else "the rank-sum permutation null, Hanley-McNeil's spread under a leak; the most sensitive baseline"
    )
    leaking = leaking_baselines(results)
    telltales = list(telltales) if leaking else []  # named only where a baseline is significant
    details: dict[str, Any] = {
        "per_column": detectable,
        "leaking": sorted(leaking),
        "telltales": [asdict(t) for t in telltales],
    }
    if tests:
        details["refit_tests"] = {
            name: {
                "p_value": test.p_value,
                "permutations": test.permutations,
                "most": test.most,
                "null_draws": len(test.null_aurocs),
                "null_mean": float(test.null_aurocs.mean()) if len(test.null_aurocs) else None,
            }
            for name, test in tests.items()
        }
    capped = _capped(tests or {})
    holm = f"Holm's correction over the {len(blind)} baselines"
    best_name, m = max(methods.items(), key=lambda item: item[1].auroc)
    best_text = f"the best method, {best_name}, {_ci(m)}"
    some = next(iter(blind.values()))
    if not leaking:
        name, b = min(blind.items(), key=lambda item: (item[1].significance.permutation_p, -item[1].auroc))
        text = (
            f"Model-free baselines are at chance (the strongest, {name}, {_ci(b)}, "
            f"{'refit ' if refit else ''}permutation p = {b.significance.permutation_p:.3f}, not significant after "
            f"{holm}{capped}; {best_text}): no sign that this split leaks through words or dates "
            f"{unseen_clause(figure, some.n_members, some.n_nonmembers)}."
        )
        return Verdict("model_free", text, figure, alpha, basis, details=details)
    name, b = max(((n, blind[n]) for n in leaking), key=lambda item: item[1].auroc)
    blind_text = (
        f"the model-free baseline {name} reaches AUROC {_ci(b)} "
        f"({'refit ' if refit else ''}permutation p = {b.significance.permutation_p:.3f}, significant after {holm}"
        f"{capped})"
    )
    leak = _telltale_text(telltales)
    if b.auroc >= m.auroc_ci[0] or b.auroc_ci[1] >= m.auroc:
        text = (
            f"WARNING: {blind_text}, within the CI of (or above) {best_text}. This benchmark's members and "
            f"non-members are separable without the model, so these scores cannot be read as membership "
            f"evidence.{leak}"
        )
        return Verdict("model_free", text, figure, alpha, basis, warning=True, details=details)
    text = (
        f"{blind_text[0].upper()}{blind_text[1:]}, above chance but below {best_text}: the split leaks somewhat, "
        f"so part of each method's AUROC may come from the split rather than from membership.{leak}"
    )
    return Verdict("model_free", text, figure, alpha, basis, details=details)


def _capped(tests: Mapping[str, RefitTest]) -> str:
    """Where the sample's size (or the user) capped the refit shuffles below the full count, says so."""
    most = min((test.most for test in tests.values()), default=MOST_PERMUTATIONS)
    return f"; at most {most:,} refit shuffles per baseline at this size" if most < MOST_PERMUTATIONS else ""


def _telltale_text(telltales: Sequence[Telltale]) -> str:
    if not telltales:
        return ""
    named = "; ".join(
        f"{t.ngram!r} (held out, in {t.members} of {t.held_out_members} members and {t.nonmembers} of "
        f"{t.held_out_nonmembers} non-members; picked in {t.folds} training fold{'s' * (t.folds != 1)})"
        for t in telltales
    )
    return f" What gives the members away first: {named}."


def method_verdicts(results: Mapping[str, metrics.MethodMetrics], shown: Sequence[str]) -> list[Verdict]:
    """Which methods (``shown``: each k-method at its best k) are above chance by the permutation control,
    Holm-corrected over every method column, and, beside blind baselines, which of those are above the best of
    them by the paired bootstrap."""
    methods = {
        n: r for n, r in results.items() if n not in BLIND_COLUMNS and not math.isnan(r.significance.permutation_p)
    }
    if not methods:
        return []
    some = next(iter(methods.values()))
    members, nonmembers = some.n_members, some.n_nonmembers
    alpha = metrics.SIGNIFICANCE / len(methods)
    chance = power.min_detectable_auroc(members, nonmembers, alpha, smallest_p=1 / (metrics.PERMUTATIONS + 1))
    significant = metrics.holm_rejections({n: r.significance.permutation_p for n, r in methods.items()})
    passing = [n for n in shown if n in significant]
    criterion = (
        f"above chance (permutation p-value below {metrics.SIGNIFICANCE:g} after Holm's correction over the "
        f"{len(methods)} method column{'s' * (len(methods) != 1)})"
    )
    if passing:
        text = f"Methods {criterion}, each k-method at its best k: {', '.join(passing)}."
    else:
        text = f"No method is {criterion} {unseen_clause(chance, members, nonmembers, 'a method')}."
    verdicts = [
        Verdict(
            "above_chance", text, chance, alpha, "the rank-sum permutation null, Hanley-McNeil's spread under an effect"
        )
    ]
    blind = [n for n in results if n in BLIND_COLUMNS]
    if not blind:
        return verdicts
    best_blind = max(blind, key=lambda n: results[n].auroc)
    b = results[best_blind].auroc
    margin = power.min_detectable_margin_auroc(b, members, nonmembers, MARGIN_ALPHA)
    figure = None if chance is None or margin is None else max(chance, margin)
    beyond = [n for n in passing if (results[n].significance.over_baseline_ci or (math.nan,))[0] > 0]
    criterion = (
        f"above chance and above the best model-free baseline, {best_blind} (AUROC {b:.3f}; the paired-bootstrap "
        "95% CI of the AUROC difference above 0)"
    )
    if beyond:
        text = f"Methods {criterion}, each k-method at its best k: {', '.join(beyond)}."
    elif figure is None:
        text = (
            f"No method is {criterion}: at this size no AUROC would likely show both "
            f"({power.sizes_text(members, nonmembers)})."
        )
    else:
        text = (
            f"No method is {criterion}: at this size a method would need AUROC {figure:.2f} to likely show both "
            f"({power.sizes_text(members, nonmembers)})."
        )
    basis = (
        "the larger of the above-chance figure and the margin over the baseline's AUROC that the paired CI would "
        "show (Hanley-McNeil's spreads, the columns taken as independent)"
    )
    verdicts.append(Verdict("above_model_free", text, figure, MARGIN_ALPHA, basis, details={"baseline": best_blind}))
    return verdicts


def known_leak_verdict(model_free: Verdict | None, known: KnownLeak | None) -> Verdict | None:
    """On a suite whose leak is on record through a blind baseline this run also ran, where the baselines found
    none here: that the suite leaks, and whether this sample was large enough to show it."""
    if model_free is None or known is None or known.leakage.known_auroc is None or model_free.details["leaking"]:
        return None
    column, recorded = known.leakage.known_column, known.leakage.known_auroc
    if column not in model_free.details["per_column"]:
        return None
    figure = model_free.details["per_column"][column]
    on_record = f"{known.suite} is known to leak: {known.leakage.blind_note}"
    if figure is None or recorded < figure:
        unseen = "any leak" if figure is None else f"a leak below AUROC {figure:.2f} through {column}"
        text = (
            f"{on_record}. This sample is too small to show it: at its size {unseen} would likely go unseen, so its "
            "model-free baselines at chance do not clear the benchmark."
        )
    else:
        text = (
            f"{on_record}, above what this sample would likely have seen through {column} (AUROC {figure:.2f}); that "
            "it did not suggests this sample differs from the rows that figure was measured on (another split, "
            "config or filter)."
        )
    details = {"suite": known.suite, "recorded_auroc": recorded, "recorded_column": column}
    return Verdict("known_leak", text, figure, model_free.alpha, model_free.basis, warning=True, details=details)


def all_verdicts(
    results: Mapping[str, metrics.MethodMetrics],
    shown: Sequence[str],
    tests: Mapping[str, RefitTest] | None = None,
    telltales: Sequence[Telltale] = (),
    known: KnownLeak | None = None,
) -> list[Verdict]:
    """Every verdict of a report, in the order it states them."""
    model_free = model_free_verdict(results, tests, telltales)
    return [
        v
        for v in (model_free, known_leak_verdict(model_free, known), *method_verdicts(results, shown))
        if v is not None
    ]
