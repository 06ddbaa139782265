"""Online detection (Min-K%++ §4.4): a token-level score on every window of a long text, from the TokenStats of
its one forward pass, so that a member passage inside non-member text shows as the text's best window.

Windows hold ``window`` scored tokens and start every ``stride`` tokens; when the stride does not land on the
end, one last window ends at the text's end, so every token is in some window and all windows have the same
length (a bottom-k count depends on it). A text shorter than ``window`` is one window. Each window is scored
by the registered method itself, as a text of its own, so a window's score is what ``Detector.score`` gives
on exactly those tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mia_fast.engines.stats import TOKEN_STATS_COLUMNS, TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import MethodRequest, resolve_methods
from mia_fast.ops.first_occurrence import first_occurrence_mask
from mia_fast.ops.reductions import REFERENCE_OPS, Ops

ONLINE_FAMILIES = ("loss", "mink", "minkpp")
DEFAULT_ONLINE_METHOD = "minkpp_0.2"
# Window values gathered and scored at once: bounds the memory of small strides over long texts.
_VALUES_PER_CHUNK = 1 << 22


@dataclass(frozen=True)
class OnlineSetting:
    """Which score column runs on the windows (``loss``, ``mink_<k>`` or ``minkpp_<k>``), the window length in
    scored tokens, and the stride (default ``window // 2``, at least 1). Checked on construction."""

    window: int
    stride: int | None = None
    method: str = DEFAULT_ONLINE_METHOD
    request: MethodRequest = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_count("window", self.window)
        stride = max(self.window // 2, 1) if self.stride is None else self.stride
        _check_count("stride", stride)
        request = _online_request(self.method)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "method", request.columns[0])
        object.__setattr__(self, "request", request)


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise MiaFastError(f"the online {name} must be a positive whole number of tokens, got {value!r}")


def _online_request(method: str) -> MethodRequest:
    problem = (
        "online detection scores one token-level column: loss, mink_<k> or minkpp_<k> "
        f"(e.g. {DEFAULT_ONLINE_METHOD}), got {method!r}"
    )
    try:
        (request,) = resolve_methods([method])
    except MiaFastError as exc:
        raise MiaFastError(f"{problem}: {exc}") from None
    if request.method.name not in ONLINE_FAMILIES or len(request.columns) != 1:
        raise MiaFastError(problem)
    return request


@dataclass(frozen=True)
class TextWindows:
    """The windows of one text: their first and one-past-last scored-token indices, and their scores."""

    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    scores: np.ndarray  # float64

    @property
    def best(self) -> int:
        """Index of the highest-scoring window (the first of equals); -1 for a text with no scored token."""
        return int(np.argmax(self.scores)) if len(self.scores) else -1

    @property
    def max_score(self) -> float:
        return float(self.scores[self.best]) if len(self.scores) else float("nan")

    @property
    def best_span(self) -> tuple[int, int]:
        """The best window's first and one-past-last scored-token index; (-1, -1) for a text with no scored token."""
        return (int(self.starts[self.best]), int(self.ends[self.best])) if len(self.scores) else (-1, -1)


def window_record(windows: TextWindows, setting: OnlineSetting) -> dict[str, Any]:
    """A text's windows as a windows file records them (after its row and id): the method, window and stride of
    ``setting``, and each window's start, end and score."""
    return {
        "method": setting.method,
        "window": setting.window,
        "stride": setting.stride,
        "starts": windows.starts.tolist(),
        "ends": windows.ends.tolist(),
        "scores": windows.scores.tolist(),
    }


def window_starts(length: int, window: int, stride: int) -> np.ndarray:
    """First scored-token index of each window of a text of ``length`` scored tokens."""
    if length == 0:
        return np.zeros(0, dtype=np.int64)
    last = max(length - window, 0)
    starts = np.arange(0, last + 1, stride, dtype=np.int64)
    return starts if starts[-1] == last else np.append(starts, last)


def online_scores(stats: TokenStats, setting: OnlineSetting, ops: Ops = REFERENCE_OPS) -> list[TextWindows]:
    """Every window's score of every text of ``stats`` (``ops`` as for the methods)."""
    per_text = [window_starts(int(n), setting.window, setting.stride) for n in stats.lengths]
    text_of = np.repeat(np.arange(len(stats), dtype=np.int64), [len(s) for s in per_text])
    starts = np.concatenate([np.zeros(0, dtype=np.int64), *per_text])
    ends = np.minimum(starts + setting.window, stats.lengths[text_of])
    flat_starts = stats.offsets[:-1][text_of] + starts
    scores = np.empty(len(starts))
    windows_per_chunk = max(_VALUES_PER_CHUNK // setting.window, 1)
    for lo in range(0, len(starts), windows_per_chunk):
        chunk = slice(lo, lo + windows_per_chunk)
        windows = _gather(stats, flat_starts[chunk], ends[chunk] - starts[chunk])
        inputs = ScoringInputs(stats=windows, ops=ops)
        scores[chunk] = setting.request.run(inputs)[setting.method]
    bounds = np.concatenate([[0], np.cumsum([len(s) for s in per_text])]).astype(np.int64)
    return [TextWindows(starts[lo:hi], ends[lo:hi], scores[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _gather(stats: TokenStats, flat_starts: np.ndarray, lengths: np.ndarray) -> TokenStats:
    """The windows as the texts of a TokenStats of their own."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    positions = np.repeat(flat_starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    target_ids = stats.target_ids[positions]
    return TokenStats(
        offsets=offsets,
        target_ids=target_ids,
        **{name: getattr(stats, name)[positions] for name in TOKEN_STATS_COLUMNS},
        first_occurrence=first_occurrence_mask(target_ids, offsets),
    )
