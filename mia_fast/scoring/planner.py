"""The pass planner: every pass the methods asked for, over every text, each distinct unit of work run once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mia_fast.engines.passes import QUIET, Pass, Progress, Texts
from mia_fast.engines.protocol import Engine
from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError


def run_passes(
    engines: Mapping[str, Engine], texts: Texts, passes: Sequence[Pass], progress: Progress = QUIET
) -> dict[Pass, Any]:
    """The result of every pass over ``texts``: TokenStats, or an array with a row per text for the other readouts.

    Each distinct (model, prefix, transformed text, readout) runs once, and all of a model's work for one
    readout is batched together under its token budget; each engine orders its own readouts (``Engine.order``).
    """
    groups: dict[tuple[str, Any], dict[tuple[str, str], int]] = {}
    positions: dict[Pass, list[int]] = {}
    for p in passes:
        if p.model not in engines:
            raise MiaFastError(f"a pass needs the {p.model} model, which this detector does not hold")
        units = groups.setdefault((p.model, p.readout), {})
        positions[p] = [units.setdefault((p.prefix, p.transform(t)), len(units)) for t in texts]
    computed = {}
    ordered = sorted(groups.items(), key=lambda item: engines[item[0][0]].order(item[0][1]))
    for (model, readout), units in ordered:
        prefixes, unit_texts = [u[0] for u in units], [u[1] for u in units]
        computed[model, readout] = engines[model].run(readout, unit_texts, prefixes, progress)
    results = {}
    for p, indices in positions.items():
        result = computed[p.model, p.readout]
        if len(result) == len(indices) and indices == list(range(len(indices))):
            results[p] = result  # every text its own unit, in order: nothing to gather
        else:
            results[p] = result.take(indices) if isinstance(result, TokenStats) else result[indices]
    return results
