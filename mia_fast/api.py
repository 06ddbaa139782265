"""The Python API: ``Detector`` scores texts with every requested method, running each pass the methods
need once; ``score_file`` scores a dataset into a file block by block, resumably."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.files import Dataset, DataStream, ResultWriter
from mia_fast.errors import MiaFastError
from mia_fast.frequency.table import FrequencyTable, model_log_frequencies
from mia_fast.methods import registry
from mia_fast.methods.online import DEFAULT_ONLINE_METHOD, OnlineSetting, TextWindows, online_scores
from mia_fast.methods.probe import Probe
from mia_fast.methods.registry import (
    DEFAULT_A,
    DEFAULT_GAMMA,
    DEFAULT_GRADNORM_NORM,
    DEFAULT_KS,
    DEFAULT_METHODS,
    DEFAULT_PAC_COPIES,
    DEFAULT_SAMIA_SAMPLES,
    NEEDS_MEMBER_PREFIX,
    NEEDS_NEIGHBORS,
    NEEDS_NONMEMBER_PREFIX,
    NEEDS_TEXT,
    MethodOptions,
    MethodRequest,
    ScoringInputs,
)
from mia_fast.pipeline.engine import StatsEngine, TokenCallback
from mia_fast.pipeline.models import LoadedModel, load_model
from mia_fast.pipeline.neighbors import NeighborSource
from mia_fast.pipeline.passes import PLAIN, REFERENCE, TARGET, Pass
from mia_fast.pipeline.stats import TokenStats
from mia_fast.pipeline.stats_cache import CacheOnlyEngine, SavedStatsEngine, open_cache

UNSCORABLE_WARNING = "nothing to score: empty text, or one token with no start token before it"
DEFAULT_BLOCK_ROWS = 512
ONLINE_COLUMNS = ("online_max", "online_start", "online_end", "online_text")
# Rough characters per token, only to size the progress bar before a block is tokenized.
_CHARS_PER_TOKEN = 4


@dataclass
class OnlineScores:
    """Online detection: ``setting.method`` on every window of ``setting.window`` scored tokens of each text
    (``windows[i]``), and each text's best window: its score, its span ``[span_start, span_end)`` in scored
    tokens (-1 for a text with no scored token) and its decoded text (None there). Scored token ``t`` is the
    id after the first of the text's ids as the detector tokenizes it (``detector.target.tokenize``)."""

    setting: OnlineSetting
    windows: list[TextWindows]
    span_text: list[str | None]

    @property
    def max_score(self) -> np.ndarray:
        return np.array([w.max_score for w in self.windows], dtype=np.float64)

    @property
    def span_start(self) -> np.ndarray:
        return np.array([w.best_span[0] for w in self.windows], dtype=np.int64)

    @property
    def span_end(self) -> np.ndarray:
        return np.array([w.best_span[1] for w in self.windows], dtype=np.int64)


@dataclass
class Scores(Mapping[str, np.ndarray]):
    """Columnar scores: one float64 array per score column, in input order.

    ``n_tokens`` is the number of scored positions per text; ``warnings`` holds a message for each
    text that could not be scored (its scores are NaN) and None elsewhere; ``online`` the online
    detection, when asked for.
    """

    columns: dict[str, np.ndarray]
    n_tokens: np.ndarray
    warnings: list[str | None]
    online: OnlineScores | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def load_probe(probe: str | os.PathLike | Probe | None, normalization: str | None = None) -> Probe | None:
    """A probe (or its directory), with its normalisation replaced by ``normalization`` if given."""
    if probe is None:
        return None
    probe = probe if isinstance(probe, Probe) else Probe.load(probe)
    return probe.with_normalization(normalization) if normalization else probe


def method_options(a: float, probe: Probe | None, **settings: Any) -> MethodOptions:
    """The methods' settings from the Detector's keyword arguments named in ``METHOD_SETTINGS`` (checked
    here, before any text is scored)."""
    gamma = settings.pop("conrecall_gamma", DEFAULT_GAMMA)
    texts = {
        name: tuple(settings.pop(name, None) or ())
        for name in ("prefix_nonmembers", "prefix_members", "gradnorm_params")
    }
    return MethodOptions(a=a, probe=probe, gamma=gamma, **texts, **settings)


# The Detector's arguments that are method settings, passed on to ``method_options`` as they are.
METHOD_SETTINGS = (
    "prefix_nonmembers",
    "prefix_members",
    "conrecall_gamma",
    "neighbors",
    "samia_samples",
    "pac_copies",
    "gradnorm_norm",
    "gradnorm_params",
    "seed",
)


def check_method_inputs(texts: Sequence[str], options: MethodOptions, needs: frozenset[str]) -> None:
    """What the methods read besides the texts must fit the texts: no prefix text among them, a neighbour list for each."""
    refuse_prefix_overlap(texts, options, needs)
    if NEEDS_NEIGHBORS in needs:
        options.neighbors.check_covers(texts)


def refuse_prefix_overlap(texts: Sequence[str], options: MethodOptions, needs: frozenset[str]) -> None:
    """A text used in a prefix (known member or non-member) must not also be judged: it would bias its own score."""
    prefix = {p.strip() for p in options.prefix_nonmembers} if NEEDS_NONMEMBER_PREFIX in needs else set()
    if NEEDS_MEMBER_PREFIX in needs:
        prefix |= {p.strip() for p in options.prefix_members}
    shared = [t for t in texts if t.strip() and t.strip() in prefix]
    if shared:
        example = shared[0] if len(shared[0]) <= 60 else shared[0][:57] + "..."
        raise MiaFastError(
            f"{len(shared)} scored text(s) are also prefix texts (e.g. {example!r}); "
            "a prefix must be made of known texts that are not themselves scored"
        )


class Detector:
    """Pretraining-data detector around a target model (and optionally a reference model).

    >>> detector = Detector()                       # built-in SmolLM2-135M
    >>> scores = detector.score(["some text"], methods=["loss", "mink", "minkpp"], k=[0.2])
    >>> scores["mink_0.2"]

    ``model`` and ``ref_model`` also take a :class:`LoadedModel` already in memory (e.g. one just
    fine-tuned); ``device`` and ``dtype`` then apply only to models loaded here. ``backend`` picks
    the Triton kernels or the reference for the token statistics and the per-text reductions alike.
    ``prefix_nonmembers`` and ``prefix_members`` are known non-member and member texts, the prefixes of
    ``recall`` and ``conrecall`` (with ``conrecall_gamma``, its γ); ``neighbors`` the neighbour texts of
    each text to be scored, given or generated (``mia_fast.pipeline.neighbors``), for ``neighbor``; ``probe`` is a trained
    probe or its directory (``mia-fast probe train``), for ``probe``, scored with its own normalisation
    or ``probe_normalization``. ``samia_samples`` is SaMIA's samples per text, ``pac_copies`` PAC's word-swapped copies
    per text, ``seed`` seeds both; ``gradnorm_norm`` (1, 2 or inf) and ``gradnorm_params`` (fnmatch patterns of parameter
    names; default all) set the gradient norm. With ``stats_cache`` (a directory), every pass's TokenStats are kept
    there (``mia_fast.pipeline.stats_cache``): texts scored before, with any methods, k or cap, need no forward pass.
    """

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        *,
        gguf: str | os.PathLike | None = None,
        ref_model: str | LoadedModel | None = None,
        frequencies: str | os.PathLike | np.ndarray | FrequencyTable | None = None,
        prefix_nonmembers: Sequence[str] | None = None,
        prefix_members: Sequence[str] | None = None,
        conrecall_gamma: float = DEFAULT_GAMMA,
        neighbors: NeighborSource | None = None,
        samia_samples: int = DEFAULT_SAMIA_SAMPLES,
        pac_copies: int = DEFAULT_PAC_COPIES,
        gradnorm_norm: float = DEFAULT_GRADNORM_NORM,
        gradnorm_params: Sequence[str] | None = None,
        seed: int = 0,
        probe: str | os.PathLike | Probe | None = None,
        probe_normalization: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        prepend_start: bool = True,
        batch_tokens: int | None = None,
        max_length: int | None = None,
        backend: str = "auto",
        stats_cache: str | os.PathLike | None = None,
    ) -> None:
        engine_options = dict(prepend_start=prepend_start, batch_tokens=batch_tokens, backend=backend)

        def loaded(name: str | LoadedModel | None, **options) -> LoadedModel:
            return name if isinstance(name, LoadedModel) else load_model(name, device=device, dtype=dtype, **options)

        self.target = StatsEngine(loaded(model, gguf=gguf), max_length=max_length, **engine_options)
        self.reference = StatsEngine(loaded(ref_model), **engine_options) if ref_model is not None else None
        self.engines = {TARGET: self.target, **({REFERENCE: self.reference} if self.reference else {})}
        if stats_cache is not None:
            for engine in self.engines.values():
                engine.use_cache(stats_cache, log=lambda message: print(message, file=sys.stderr))
        self.backend = self.target.backend
        loaded_target = self.target.loaded
        self.log_frequencies = (
            model_log_frequencies(frequencies, loaded_target.tokenizer, loaded_target.vocab_size)
            if frequencies is not None
            else None
        )
        self.probe = load_probe(probe, probe_normalization)
        if self.probe is not None:
            model = loaded_target.model
            self.probe.check_model(
                loaded_target.name,
                model.config.hidden_size,
                model.config.num_hidden_layers,
                loaded_target.weights_fingerprint(),
            )
        self.method_options = method_options(
            DEFAULT_A,
            self.probe,
            prefix_nonmembers=prefix_nonmembers,
            prefix_members=prefix_members,
            conrecall_gamma=conrecall_gamma,
            neighbors=neighbors,
            samia_samples=samia_samples,
            pac_copies=pac_copies,
            gradnorm_norm=gradnorm_norm,
            gradnorm_params=gradnorm_params,
            seed=seed,
        )

    @classmethod
    def from_stats_cache(cls, directory: str | os.PathLike, setting: str | None = None, **settings: Any) -> Detector:
        """A detector that scores from a stats cache alone (``mia-fast rescore``): no model is loaded, nothing runs
        forward, and a text or pass the cache does not hold is refused. ``setting`` picks one of the cache's
        model settings (a folder name or its start) where it holds several; ``settings`` are method settings
        of ``METHOD_SETTINGS`` (e.g. the prefixes of ``recall``)."""
        return cls._without_model(
            CacheOnlyEngine(open_cache(directory, setting, log=lambda message: print(message, file=sys.stderr))),
            settings,
        )

    @classmethod
    def from_token_stats(cls, stats: str | os.PathLike | TokenStats, texts: Sequence[str], **settings: Any) -> Detector:
        """A detector that scores ``texts`` from their saved TokenStats (:meth:`token_stats`, ``TokenStats.save``;
        row i is text i) alone: methods reading only the plain pass (loss, zlib, mink, minkpp, and lowercase where a
        text is its own lowercase copy). ``settings`` as in :meth:`from_stats_cache`."""
        source = "the TokenStats" if isinstance(stats, TokenStats) else str(stats)
        loaded = stats if isinstance(stats, TokenStats) else TokenStats.load(stats)
        return cls._without_model(SavedStatsEngine(loaded, texts, source), settings)

    @classmethod
    def _without_model(cls, engine: CacheOnlyEngine | SavedStatsEngine, settings: dict[str, Any]) -> Detector:
        detector = cls.__new__(cls)
        detector.target, detector.reference, detector.engines = engine, None, {TARGET: engine}
        detector.backend, detector.log_frequencies, detector.probe = engine.backend, None, None
        detector.method_options = method_options(DEFAULT_A, None, **settings)
        return detector

    def token_stats(self, texts: Sequence[str]) -> TokenStats:
        """TokenStats of ``texts`` under the target model (save them to re-score without a forward pass)."""
        return self.target.compute(texts)

    def options(self, a: float = DEFAULT_A) -> MethodOptions:
        return replace(self.method_options, a=a)

    def score(
        self,
        texts: Sequence[str],
        methods: Sequence[str] = DEFAULT_METHODS,
        k: Sequence[float] = DEFAULT_KS,
        a: float = DEFAULT_A,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> Scores:
        """Scores every text with every method (higher = more likely a member)."""
        return self.score_requests(texts, self.requests(methods, k), a, on_tokenized, on_progress)

    def score_online(
        self, texts: Sequence[str], window: int, stride: int | None = None, method: str = DEFAULT_ONLINE_METHOD
    ) -> OnlineScores:
        """Online detection (Min-K%++ §4.4): ``method`` (``loss``, ``mink_<k>`` or ``minkpp_<k>``) on every window
        of ``window`` scored tokens, one every ``stride`` (default ``window // 2``), from each text's one forward
        pass; a text's maximum window points at the span that looks most like a member."""
        return self.score_requests(texts, [], online=OnlineSetting(window, stride, method)).online

    def requests(self, methods: Sequence[str], k: Sequence[float] = DEFAULT_KS) -> list[MethodRequest]:
        """Resolves method names and checks that this detector can serve them."""
        requests = registry.resolve_methods(methods, k)
        registry.check_available(
            requests, self.options(), models=list(self.engines), has_frequencies=self.log_frequencies is not None
        )
        return requests

    def score_requests(
        self,
        texts: Sequence[str],
        requests: Sequence[MethodRequest],
        a: float = DEFAULT_A,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
        online: OnlineSetting | None = None,
    ) -> Scores:
        """Scores every text with resolved ``requests``, plus the online detection of ``online`` from the same pass."""
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise MiaFastError("every text must be a string")
        needs = registry.needs_of(requests)
        options = self.options(a)
        check_method_inputs(texts, options, needs)
        # Whitespace-only texts are scored as empty: NaN scores and a warning, never a crash.
        cleaned = [t if t.strip() else "" for t in texts]
        if NEEDS_NEIGHBORS in needs:
            options.neighbors.prepare(cleaned)
        passes = registry.passes_of(requests, options)
        if online is not None and PLAIN not in passes:
            passes.append(PLAIN)
        results = self.run_passes(cleaned, passes, on_tokenized, on_progress)
        plain = results.pop(PLAIN, None)
        inputs = ScoringInputs(
            stats=plain,
            passes=results,
            texts=cleaned if NEEDS_TEXT in needs else None,
            log_frequencies=self.log_frequencies,
            options=options,
            impl=self.backend,
            device=self.target.device,
        )
        columns = registry.score(inputs, requests)
        n_tokens = plain.lengths if plain is not None else self.scored_positions(cleaned)
        warnings = [UNSCORABLE_WARNING if n == 0 else None for n in n_tokens]
        for name in columns:
            columns[name][n_tokens == 0] = np.nan
        return Scores(
            columns=columns,
            n_tokens=n_tokens,
            warnings=warnings,
            online=self._online_detection(cleaned, plain, online) if online is not None else None,
        )

    def _online_detection(self, texts: Sequence[str], stats: TokenStats, online: OnlineSetting) -> OnlineScores:
        """The windows of ``online`` over ``texts``' plain-pass ``stats``, and each text's best span decoded."""
        windows = online_scores(stats, online, self.backend, self.target.loaded.device)
        tokenizer = self.target.loaded.tokenizer
        # Scored token t predicts ids[t + 1]: the engine's context windows score every id after the first, in order.
        span_text = [
            tokenizer.decode(ids[start + 1 : end + 1]) if start >= 0 else None
            for ids, (start, end) in zip(self.target.tokenize(texts), (w.best_span for w in windows))
        ]
        return OnlineScores(online, windows, span_text)

    def scored_positions(self, texts: Sequence[str]) -> np.ndarray:
        """Positions the plain pass would score in each text (every id after the first), without a forward."""
        return np.array([max(len(ids) - 1, 0) for ids in self.target.tokenize(texts)], dtype=np.int64)

    def run_passes(
        self,
        texts: Sequence[str],
        passes: Sequence[Pass],
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> dict[Pass, Any]:
        """The result of every pass over ``texts``: TokenStats, or an array with a row per text for the other readouts.

        Each distinct (model, prefix, transformed text, readout) runs once, and all of a model's work
        for one readout is batched together under its token budget.
        """
        groups: dict[tuple[str, Any], dict[tuple[str, str], int]] = {}
        positions: dict[Pass, list[int]] = {}
        for p in passes:
            if p.model not in self.engines:
                raise MiaFastError(f"a pass needs the {p.model} model, which this detector does not hold")
            units = groups.setdefault((p.model, p.readout), {})
            positions[p] = [units.setdefault((p.prefix, p.transform(t)), len(units)) for t in texts]
        computed = {}
        for (model, readout), units in groups.items():
            engine = self.engines[model]
            prefixes, unit_texts = [u[0] for u in units], [u[1] for u in units]
            computed[model, readout] = engine.run(readout, unit_texts, prefixes, on_tokenized, on_progress)
        results = {}
        for p, indices in positions.items():
            result = computed[p.model, p.readout]
            if len(result) == len(indices) and indices == list(range(len(indices))):
                results[p] = result  # every text its own unit, in order: nothing to gather
            else:
                results[p] = result.take(indices) if isinstance(result, TokenStats) else result[indices]
        return results


def output_columns(
    dataset: Dataset, requests: Sequence[MethodRequest], id_field: str, label_field: str, online: bool = False
) -> list[str]:
    """The columns of a scores file: the input's id and label (where it has them), n_tokens, every score, the
    online detection's best window (with ``online``), warning."""
    columns = []
    if dataset.ids is not None:
        columns.append(id_field)
    if dataset.labels is not None:
        columns.append(label_field)
    columns.append("n_tokens")
    columns.extend(c for r in requests for c in r.columns)
    if online:
        columns.extend(ONLINE_COLUMNS)
    columns.append("warning")
    return columns


def windows_path(out: str | os.PathLike) -> Path:
    """Where ``score_file`` writes every online window's score beside ``out``: ``<out stem>.windows.jsonl``."""
    return Path(out).with_suffix(".windows.jsonl")


def _windows_columns(dataset: Dataset, id_field: str) -> list[str]:
    return [
        "row",
        *([id_field] if dataset.ids is not None else []),
        "method",
        "window",
        "stride",
        "starts",
        "ends",
        "scores",
    ]


def _resume_windows(path: Path, online: OnlineSetting, rows: int) -> None:
    """Cuts an interrupted windows file back to the ``rows`` rows of the scores file (it is written first, so it
    holds at least those), after checking that they hold ``online``'s windows."""
    raw = path.read_bytes() if path.exists() else b""
    lines = raw.split(b"\n")[:-1]
    if len(lines) < rows:
        raise MiaFastError(
            f"{path} holds {len(lines)} rows but the scores file {rows}; pass --overwrite to start again"
        )
    if rows:
        try:
            first = json.loads(lines[0])
            written = OnlineSetting(first["window"], first["stride"], first["method"])
        except (ValueError, KeyError, TypeError, MiaFastError):
            raise MiaFastError(f"{path}:1: not a windows row; cannot resume") from None
        if written != online:
            raise MiaFastError(
                f"{path} holds the windows of {written}, not of {online}; cannot resume with other online settings"
            )
    if path.exists():
        with open(path, "r+b") as f:
            f.truncate(sum(len(line) + 1 for line in lines[:rows]))


class _TokenProgress:
    """A tqdm bar over tokens. Its total is guessed from the input's size (characters of a dataset, bytes of a
    file) until blocks are measured, then rescaled after each block by the tokens per byte so far, and corrected
    as each block is tokenized."""

    def __init__(self, size: int, start: int, passes: int, disable: bool):
        from tqdm.auto import tqdm

        self.size, self.start, self.passes = size, start, passes
        total = max(1, passes * (size - start) // _CHARS_PER_TOKEN)
        self.bar = tqdm(total=total, unit="tok", unit_scale=True, dynamic_ncols=True, disable=disable, file=sys.stderr)
        self.rows_done = 0
        self.block_estimate = 0

    def start_block(self, block: Dataset) -> None:
        self.block_estimate = self.passes * block.size // _CHARS_PER_TOKEN

    def tokenized(self, tokens: int) -> None:
        self.bar.total = max(self.bar.n, self.bar.total - self.block_estimate + tokens)
        self.block_estimate = 0
        self.bar.refresh()

    def advance(self, tokens: int) -> None:
        self.bar.update(tokens)

    def finish_block(self, rows: int, position: int) -> None:
        self.rows_done += rows
        if position > self.start:
            per_byte = self.bar.n / (position - self.start)
            self.bar.total = max(self.bar.n, round(self.bar.n + per_byte * (self.size - position)))
        self.bar.set_postfix_str(f"{self.rows_done} texts")

    def close(self) -> None:
        self.bar.close()


@dataclass
class _Block:
    """Rows of the input to score: row ``first_row`` on, read from byte (or character) ``start`` to ``end``."""

    first_row: int
    rows: Dataset
    start: int
    end: int


def _unscored_blocks(
    blocks: Iterator[tuple[Dataset, int]], done: int, written_ids: Iterator[Any] | None, out: Path, data_name: str
) -> Iterator[_Block]:
    """The blocks after the first ``done`` rows, which are checked against the ids already written."""
    row, position = 0, 0
    for dataset, end in blocks:
        count, skip = len(dataset.texts), max(min(done - row, len(dataset.texts)), 0)
        if written_ids is not None and skip:
            if [str(v) for v in itertools.islice(written_ids, skip)] != [str(v) for v in dataset.ids[:skip]]:
                raise MiaFastError(f"{out} was written for other input rows (ids differ); not resuming")
        if skip < count:
            yield _Block(row + skip, dataset.rows(skip, count) if skip else dataset, position, end)
        row, position = row + count, end
    if row < done:
        raise MiaFastError(f"{out} holds {done} rows but {data_name} only {row}; not the same input")


class _InlineExecutor:
    """Runs each job when it is submitted, on the calling thread."""

    def __enter__(self) -> _InlineExecutor:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None

    def submit(self, job: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(job(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def _read_ahead(blocks: Iterator[_Block], detector: Detector | None) -> _Block | None:
    """The next block, tokenized for the detector's target model where there is one (runs on the read-ahead thread)."""
    block = next(blocks, None)
    if block is not None and detector is not None:
        detector.target.tokenize_ahead(block.rows.texts)
    return block


def score_file(
    dataset: Dataset | DataStream,
    out: str | os.PathLike,
    *,
    methods: Sequence[str] = DEFAULT_METHODS,
    k: Sequence[float] = DEFAULT_KS,
    a: float = DEFAULT_A,
    detector: Detector | None = None,
    resume: bool = False,
    overwrite: bool = False,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    id_field: str = "id",
    label_field: str = "label",
    progress: bool = True,
    data_name: str = "the input",
    log: Callable[[str], None] = lambda message: None,
    online: OnlineSetting | None = None,
    overlap: bool = True,
    **detector_options: Any,
) -> Path:
    """Scores ``dataset`` (in memory, or a :class:`DataStream` read block by block, so memory stays flat
    whatever the file's size) into ``out`` (.jsonl, .csv or .parquet), one row per text in input order, each
    block appended and fsync'ed. With ``resume`` a killed run continues after its last complete row; an
    existing output is never replaced without ``overwrite``.

    The next block is read and tokenized on one thread while a block is scored, and the scored block is
    written on another: the model does not wait on either, and the scores are the same as one thread's
    (``overlap=False`` does all three in turn on the calling thread).

    Everything that can be checked without a model is checked before one is loaded: the methods, the
    models and inputs they need, the output, and whether a resumed output belongs to this input. The
    detector is ``detector``, or one made from ``detector_options`` (see :class:`Detector`) only when
    rows remain to be scored. ``log`` receives one-line notes (resuming, texts that could not be scored).

    With ``online``, each row also gets its best window (``ONLINE_COLUMNS``) and every window's score goes to
    :func:`windows_path`, one row per text, each block written there before its scores rows.
    """
    out = Path(out)
    if block_rows < 1:
        raise MiaFastError("--block-rows must be positive")
    requests = registry.resolve_methods(methods, k)
    if detector is not None:
        options, models, has_frequencies = (
            detector.options(a),
            list(detector.engines),
            detector.log_frequencies is not None,
        )
    else:
        probe = load_probe(detector_options.get("probe"), detector_options.get("probe_normalization"))
        options = method_options(a, probe, **{k: v for k, v in detector_options.items() if k in METHOD_SETTINGS})
        detector_options = {**detector_options, "probe": probe, "probe_normalization": None}
        models = [REFERENCE] if detector_options.get("ref_model") is not None else []
        has_frequencies = detector_options.get("frequencies") is not None
    registry.check_available(requests, options, models=models, has_frequencies=has_frequencies)
    needs = registry.needs_of(requests)
    pooled = [r.method.name for r in requests if r.method.pooled(options)]
    blocks = dataset.blocks(sys.maxsize if pooled else block_rows)
    first, first_end = next(blocks)
    check_method_inputs(first.texts, options, needs)
    if pooled and len(first.texts) > block_rows:
        log(
            f"{', '.join(pooled)} standardises over all the texts scored together: scoring {len(first.texts)} rows in one block"
        )
    windows_out = windows_path(out)
    if online is not None and windows_out.exists() and not (resume or overwrite):
        raise MiaFastError(f"{windows_out} exists; pass --resume to continue it or --overwrite to replace it")
    writer = ResultWriter(
        out,
        output_columns(first, requests, id_field, label_field, online is not None),
        resume=resume,
        overwrite=overwrite,
    )
    done = writer.done_rows
    if pooled and 0 < done < len(first.texts):
        raise MiaFastError(
            f"{out} holds {done} of {len(first.texts)} rows, but {', '.join(pooled)} must score all rows "
            "together; pass --overwrite to start again"
        )
    windows_writer = None
    if online is not None:
        if resume:
            _resume_windows(windows_out, online, done)
        windows_writer = ResultWriter(
            windows_out, _windows_columns(first, id_field), resume=resume, overwrite=overwrite
        )
    written_ids = iter(writer.written_column(id_field)) if done and first.ids is not None else None
    unscored = _unscored_blocks(itertools.chain([(first, first_end)], blocks), done, written_ids, out, data_name)

    def write(block: _Block, scores: Scores) -> None:
        if windows_writer is not None:
            windows_writer.write(_window_rows(block, scores.online, id_field))
        writer.write(_rows(block, scores, id_field, label_field))

    bar = None
    executor = (lambda name: ThreadPoolExecutor(1, name)) if overlap else (lambda name: _InlineExecutor())
    with executor("mia-fast-read") as reading, executor("mia-fast-write") as writing:
        upcoming = reading.submit(_read_ahead, unscored, None)
        written = None
        try:
            while (block := upcoming.result()) is not None:
                if bar is None:
                    if done:
                        log(f"resuming {out} after {done} rows")
                    detector = detector or Detector(**detector_options)
                    requests = detector.requests(methods, k)
                    passes = len(registry.passes_of(requests, detector.options(a)))
                    bar = _TokenProgress(dataset.size, block.start, passes, disable=not progress)
                    # The first call copies the tokenizer for the read-ahead thread: done here, before that thread runs.
                    detector.target.tokenize_ahead(block.rows.texts)
                upcoming = reading.submit(_read_ahead, unscored, detector)
                check_method_inputs(block.rows.texts, options, needs)
                bar.start_block(block.rows)
                scores = detector.score_requests(block.rows.texts, requests, a, bar.tokenized, bar.advance, online)
                if written is not None:
                    written.result()
                written = writing.submit(write, block, scores)
                bar.finish_block(len(block.rows.texts), block.end)
            if written is not None:
                written.result()
        finally:  # leaving the executors waits for the block being written: what was scored is kept
            if bar is not None:
                bar.close()
    writer.close()
    if bar is None:
        log(f"{out}: all {writer.done_rows} rows already scored")
        return out
    unscorable = sum(1 for w in writer.written_column("warning") if w not in (None, ""))
    if unscorable:
        log(f"warning: {unscorable} texts could not be scored; their scores are NaN, see the 'warning' column")
    return out


def _rows(block: _Block, scores: Scores, id_field: str, label_field: str) -> list[dict]:
    rows, data = [], block.rows
    for j in range(len(data.texts)):
        row: dict = {}
        if data.ids is not None:
            row[id_field] = data.ids[j]
        if data.labels is not None:
            row[label_field] = data.labels[j]
        row["n_tokens"] = int(scores.n_tokens[j])
        row.update({name: float(values[j]) for name, values in scores.items()})
        if scores.online is not None:
            start, end = scores.online.windows[j].best_span
            spanned = start >= 0
            row.update(
                online_max=scores.online.windows[j].max_score,
                online_start=start if spanned else None,
                online_end=end if spanned else None,
                online_text=scores.online.span_text[j],
            )
        row["warning"] = scores.warnings[j]
        rows.append(row)
    return rows


def _window_rows(block: _Block, online: OnlineScores, id_field: str) -> list[dict]:
    rows, data = [], block.rows
    for j, windows in enumerate(online.windows):
        rows.append(
            {
                "row": block.first_row + j,
                **({id_field: data.ids[j]} if data.ids is not None else {}),
                "method": online.setting.method,
                "window": online.setting.window,
                "stride": online.setting.stride,
                "starts": windows.starts.tolist(),
                "ends": windows.ends.tolist(),
                "scores": windows.scores.tolist(),
            }
        )
    return rows
