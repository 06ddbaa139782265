"""The pass planner (scoring.planner), on an engine made here that records what it runs: each distinct (model,
prefix, transformed text, readout) runs once, a model's work for one readout in one call, engines order their
readouts, and every pass gets its texts' results back in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from mia_fast.engines.passes import PLAIN, QUIET, REFERENCE, TARGET, HiddenStatesReadout, Pass, Progress, Readout
from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.scoring.planner import run_passes


@dataclass(frozen=True)
class Lower:
    def __call__(self, text: str) -> str:
        return text.lower()


class Recording:
    """An engine whose TokenStats hold one token per text, log-prob -(the text's length + its prefix's); other
    readouts give the text's length. It records each run as (readout, texts, prefixes)."""

    def __init__(self, first: type | None = None) -> None:
        self.runs: list[tuple[Readout, list[str], list[str]]] = []
        self.first = first

    def order(self, readout: Readout) -> int:
        return 0 if self.first is not None and isinstance(readout, self.first) else 1

    def run(self, readout: Readout, texts, prefixes=None, progress: Progress = QUIET) -> Any:
        self.runs.append((readout, list(texts), list(prefixes)))
        if not readout.token_stats:
            return np.array([len(text) for text in texts])
        return TokenStats.from_texts(
            [{"target_ids": [0], "logp": [-float(len(p + t))], "mu": [0], "var": [1]} for p, t in zip(prefixes, texts)]
        )


def test_a_text_asked_for_twice_runs_once_and_each_pass_gets_its_texts_in_order():
    engine = Recording()
    lower = Pass(transform=Lower())
    results = run_passes({TARGET: engine}, ["Ab", "ab", "xyz"], [PLAIN, lower])
    # "Ab" lowered is "ab", already a unit of the plain pass: three units, one run.
    assert engine.runs == [(PLAIN.readout, ["Ab", "ab", "xyz"], ["", "", ""])]
    assert results[PLAIN].logp.tolist() == [-2.0, -2.0, -3.0]
    assert results[lower].logp.tolist() == [-2.0, -2.0, -3.0] and len(results[lower]) == 3


def test_repeated_texts_are_run_once_and_given_back_to_each():
    engine = Recording()
    results = run_passes({TARGET: engine}, ["a", "bb", "a"], [PLAIN])
    assert engine.runs == [(PLAIN.readout, ["a", "bb"], ["", ""])]
    assert results[PLAIN].logp.tolist() == [-1.0, -2.0, -1.0]


def test_a_prefix_makes_another_unit_of_the_same_readout():
    engine = Recording()
    prefixed = Pass(prefix="pre ")
    results = run_passes({TARGET: engine}, ["a", "bb"], [PLAIN, prefixed])
    assert engine.runs == [(PLAIN.readout, ["a", "bb", "a", "bb"], ["", "", "pre ", "pre "])]
    assert results[prefixed].logp.tolist() == [-5.0, -6.0]


def test_each_readout_and_model_is_its_own_call_in_the_engines_order():
    target, reference = Recording(first=HiddenStatesReadout), Recording()
    hidden = Pass(readout=HiddenStatesReadout())
    on_reference = Pass(model=REFERENCE)
    results = run_passes({TARGET: target, REFERENCE: reference}, ["a", "bb", "a"], [PLAIN, hidden, on_reference])
    assert [run[0] for run in target.runs] == [hidden.readout, PLAIN.readout]  # the engine put hidden states first
    assert results[hidden].tolist() == [1, 2, 1]
    assert reference.runs == [(PLAIN.readout, ["a", "bb"], ["", ""])]
    assert results[on_reference].logp.tolist() == [-1.0, -2.0, -1.0]


def test_a_pass_on_a_model_the_detector_lacks_is_refused():
    with pytest.raises(MiaFastError, match="^a pass needs the reference model, which this detector does not hold$"):
        run_passes({TARGET: Recording()}, ["a"], [Pass(model=REFERENCE)])


def test_no_texts_give_empty_results():
    results = run_passes({TARGET: Recording()}, [], [PLAIN])
    assert len(results[PLAIN]) == 0
