"""The protocol every engine follows (``Engine``), what an engine cannot give (``EngineLimits``), and an engine whose
model's weights are here (``WeightsEngine``): what the detector, the planner and the file runner call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mia_fast.engines.passes import QUIET, Prefixes, Progress, Readout, Texts


class EngineLimits(Protocol):
    """What an engine cannot give, known before any work: an engine kind's, before its engine is built
    (``mia_fast.scoring.engines``), and every engine's own.

    ``refusal`` says, in one line, why it cannot serve a readout (None: it can). ``vocabulary_stats`` says whether
    its TokenStats hold the exact mean and variance over the vocabulary (a server gives none). ``weights_here``
    says whether the model's weights are here, so that the models made from them (``methods.derived.DERIVED_MODELS``,
    e.g. FSD's fine-tuned copy) run too, on engines it makes (``WeightsEngine.derive``).
    """

    vocabulary_stats: bool
    weights_here: bool

    def refusal(self, readout: Readout) -> str | None:
        """Why this engine cannot serve ``readout``, or None."""


class Engine(EngineLimits, Protocol):
    """What scoring needs of an engine: one model's passes over texts, whatever serves them (a model run here,
    a stats cache, saved TokenStats, a model behind a server). Everything the detector, the planner and the file
    runner call is here.

    ``run`` returns what ``readout`` reads out of ``texts`` (each after its prefix): TokenStats, or an array
    with a row per text; the engine itself picks how, by the readout's type. ``loaded`` is the model where the
    engine holds one (None otherwise: settings that need the model, such as a frequency table mapped onto its
    vocabulary, are then refused). ``backend`` and ``device`` say where the per-text reductions run.
    """

    backend: str
    device: Any
    loaded: Any

    def order(self, readout: Readout) -> int:
        """Where ``readout`` runs among this engine's readouts over the same texts, lowest first (a server fetches
        the top log-probs first and serves the plain pass from the same answers)."""

    def run(self, readout: Readout, texts: Texts, prefixes: Prefixes = None, progress: Progress = QUIET) -> Any: ...

    def provenance(self) -> dict[str, Any]:
        """What a scores file records of the model behind this engine (weights, tokenizer, dtype, device type, back
        end, windowing): a resumed file must come from the same."""

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text as its plain pass runs them (online detection decodes its best spans from them)."""

    def tokenize_ahead(self, texts: Sequence[str]) -> None:
        """Prepares texts about to be scored, on another thread than the scoring one (may do nothing)."""

    def scored_positions(self, texts: Sequence[str]) -> Any:
        """The positions the plain pass scores in each text (int64 [texts])."""


class WeightsEngine(Engine, Protocol):
    """An engine whose model's weights are here (``weights_here``)."""

    def derive(self, loaded: Any) -> Engine:
        """An engine set up as this one (start token, batch budget, window, back end, stats cache) over ``loaded``,
        a model made from this one's weights."""
