"""An engine is added from this file alone: a toy model (every byte equally likely) claims the model sources
``toy:NAME`` by one entry in the engine registry, ``mia-fast score --model toy:x`` writes its scores, and a method
that needs what it cannot give is refused in one line before it is built. No other file of the project knows of
it (docs/adding-an-engine.md walks through the same steps)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from mia_fast.cli import main
from mia_fast.engines.passes import QUIET, Progress, Readout, TokenStatsReadout
from mia_fast.engines.stats import TokenStats
from mia_fast.scoring.engines import ENGINES, EngineKind

UNIFORM_LOGP = -math.log(256)


class ToyEngine:
    """A model that knows nothing: a text's ids are its UTF-8 bytes, each as likely as any other whatever comes
    before it (so a pass's prefix changes nothing). It reads out token statistics, and nothing else."""

    backend = "torch"
    device = None
    loaded = None  # no model object here: settings that need one (a probe, a frequency table) are refused
    vocabulary_stats = True  # the mean and variance over its 256 bytes are exact
    weights_here = False

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def refusal(readout: Readout) -> str | None:
        if isinstance(readout, TokenStatsReadout):
            return None
        return "more than token statistics, which are all a toy model gives"

    def order(self, readout: Readout) -> int:
        return 0

    def run(
        self, readout: Readout, texts: Sequence[str], prefixes: Sequence[str] | None = None, progress: Progress = QUIET
    ) -> TokenStats:
        ids = self.tokenize(texts)
        progress.planned(sum(map(len, ids)))
        per_text = []
        for text_ids in ids:
            targets = np.array(text_ids[1:], dtype=np.int64)  # every byte after the first is scored
            uniform = np.full(len(targets), UNIFORM_LOGP, dtype=np.float32)
            per_text.append(
                {
                    "target_ids": targets,
                    "logp": uniform,
                    "mu": uniform,
                    "var": np.zeros_like(uniform),
                    "max_logp": uniform,
                }
            )
        progress.advanced(sum(map(len, ids)))
        return TokenStats.from_texts(per_text)

    def provenance(self) -> dict[str, str]:
        return {"toy": self.name}

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(text.encode("utf-8")) for text in texts]

    def tokenize_ahead(self, texts: Sequence[str]) -> None:
        """Nothing to prepare."""

    def scored_positions(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([max(len(ids) - 1, 0) for ids in self.tokenize(texts)], dtype=np.int64)


@pytest.fixture
def registered():
    ENGINES["toy"] = EngineKind(
        claims=lambda source: isinstance(source, str) and source.startswith("toy:"),
        build=lambda config, compute, log: ToyEngine(config.model.removeprefix("toy:")),
        limits=lambda config: ToyEngine,  # its class says what it refuses
    )
    yield
    del ENGINES["toy"]


def score(tmp_path, *args: str) -> int:
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["a fox", "the lazy dog sleeps", ""]))
    return main(["score", str(data), "--model", "toy:x", "--out", str(tmp_path / "s.jsonl"), "--quiet", *args])


def test_mia_fast_score_writes_the_toy_models_scores(registered, tmp_path):
    assert score(tmp_path, "--methods", "loss,mink", "--k", "0.5") == 0
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [row["n_tokens"] for row in rows] == [4, 18, 0]
    # Higher means member: every score here is the mean log-probability of the uniform model's tokens.
    np.testing.assert_allclose([[row["loss"], row["mink_0.5"]] for row in rows[:2]], UNIFORM_LOGP, rtol=1e-6)
    assert rows[2]["loss"] is None and rows[2]["warning"]


def test_its_limit_refuses_a_method_in_one_line_before_it_is_built(registered, tmp_path, capsys):
    assert score(tmp_path, "--methods", "gradnorm") == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "mia-fast: error: method 'gradnorm' needs more than token statistics, which are all a toy model gives"
    ]
    assert not (tmp_path / "s.jsonl").exists()
