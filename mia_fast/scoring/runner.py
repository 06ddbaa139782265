"""The resumable file runner: a dataset scored into a file block by block (``score_file``), also what each Ray
actor runs on its shard (``mia_fast.cluster``)."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.artefacts import OutputLock
from mia_fast.data.files import Dataset, DataStream
from mia_fast.data.gate import Output, refuse_inputs
from mia_fast.data.outputs import ResultWriter
from mia_fast.engines.passes import REFERENCE, TARGET
from mia_fast.errors import MiaFastError
from mia_fast.methods import registry
from mia_fast.methods.registry import MethodRequest
from mia_fast.methods.settings import MethodSettings
from mia_fast.pipeline.models import check_device
from mia_fast.scoring.config import ModelConfig, RunConfig, ScoringConfig
from mia_fast.scoring.detector import Detector, OnlineScores, Scores, check_served
from mia_fast.scoring.engines import check_weights, engine_kind

ONLINE_COLUMNS = ("online_max", "online_start", "online_end", "online_text")
# Rough characters per token, only to size the progress bar before a block is tokenized.
_CHARS_PER_TOKEN = 4


def check_before_loading(model: ModelConfig, scoring: ScoringConfig) -> tuple[list[MethodRequest], MethodSettings]:
    """What can be refused before a model loads, for a run here or on Ray: unknown methods, bad k, methods whose
    models or settings were not given, methods the target's engine cannot serve (its kind's limits), a device this
    machine lacks, a model that cannot load (its kind's check: a missing directory or part of one, a corrupt GGUF
    file, a hub name neither cached nor reachable). Returns the requests and the settings made ready without a
    model (a probe read from its directory)."""
    requests = registry.resolve_methods(scoring.methods, scoring.k)
    settings = registry.prepare_settings(scoring.settings, None)
    kind = engine_kind(model.model)
    limits = kind.limits(model)
    models = [REFERENCE] if model.ref_model is not None else []
    if limits.weights_here:  # the models made from them are available too
        models += list(registry.DERIVED_MODELS)
    registry.check_available(requests, settings, models=models)
    check_device(model.device, model.dtype)
    check_served(requests, settings, {TARGET: limits})
    kind.check(model)
    if model.ref_model is not None:
        check_weights(model.ref_model)
    return requests, settings


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


def _align_windows(windows: ResultWriter, rows: int, out: Path) -> None:
    """A windows file is written before its scores rows, so an interrupted one may hold more: those are cut."""
    kept = [block for block in windows.blocks if block.rows <= rows]
    if (kept[-1].rows if kept else 0) != rows:
        raise MiaFastError(
            f"{windows.path} holds {windows.done_rows} rows but {out} {rows}; pass --overwrite to start again"
        )
    windows.blocks = kept


def refuse_input_as_output(dataset: Dataset | DataStream, out: Path, online: bool) -> None:
    """Scores are never written over the texts they come from, whatever the flags."""
    source = dataset.path if isinstance(dataset, DataStream) else dataset.source
    written = [out, *([windows_path(out)] if online else [])]
    for path in written:
        refuse_inputs(Output(path, staged=True), [source])


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


def _unscored_blocks(blocks: Iterator[tuple[Dataset, int]], writer: ResultWriter, data_name: str) -> Iterator[_Block]:
    """The blocks after the rows the output already holds, which are checked to be the rows it was scored from."""
    row, position, done = 0, 0, writer.done_rows
    for dataset, end in blocks:
        count, skip = len(dataset.texts), max(min(done - row, len(dataset.texts)), 0)
        if skip:
            writer.check_input_rows(dataset.rows(0, skip).fingerprints(), data_name)
        if skip < count:
            yield _Block(row + skip, dataset.rows(skip, count) if skip else dataset, position, end)
        row, position = row + count, end
    if row < done:
        raise MiaFastError(f"{writer.path} holds {done} rows but {data_name} only {row}; not the same input")


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
    config: RunConfig,
    detector: Detector | None = None,
    log: Callable[[str], None] = lambda message: None,
    data_name: str = "the input",
) -> Path:
    """Scores ``dataset`` (in memory, or a :class:`DataStream` read block by block, so memory stays flat
    whatever the file's size) into ``config.output.out`` (.jsonl, .csv or .parquet), one row per text in input
    order, through a stage (``mia_fast.data.outputs``): each block appended and fsync'ed, the output renamed into
    place only when complete, so an existing output is never touched before then (and replaced only with
    ``overwrite``). With ``resume`` a killed run continues after its last finished block, once the output's
    manifest shows the same settings, model and input rows. One run writes an output at a time (a lock).

    Everything that can be checked without a model is checked before one is loaded, and before any file is
    written: the methods, the models and settings they need, the device, every row of a streamed input, the
    output and whether a resumed output belongs to this run. The detector is ``detector``, or one made from
    ``config`` only when rows remain to be scored. ``log`` receives one-line notes (resuming, texts that could not
    be scored).

    The next block is read and tokenized on one thread while a block is scored, and the scored block is
    written on another: the model does not wait on either, and the scores are the same as one thread's
    (``config.compute.overlap=False`` does all three in turn on the calling thread).

    With ``config.scoring.online``, each row also gets its best window (``ONLINE_COLUMNS``) and every window's
    score goes to :func:`windows_path`, one row per text, each block written there before its scores rows.
    """
    output, scoring = config.output, config.scoring
    out, online = output.path, scoring.online
    refuse_input_as_output(dataset, out, online is not None)
    if output.block_rows < 1:
        raise MiaFastError("--block-rows must be positive")
    if detector is not None:
        settings = detector.with_settings(scoring.settings)
        requests = detector.requests(scoring.methods, scoring.k, settings)
    else:
        requests, settings = check_before_loading(config.model, scoring)
    pooled = registry.pooled_methods(requests, settings)
    if isinstance(dataset, DataStream):
        dataset.check()
    blocks = dataset.blocks(sys.maxsize if pooled else output.block_rows)
    first, first_end = next(blocks)
    registry.call_settings_hook(settings, requests, "check_texts", first.texts)
    if pooled and len(first.texts) > output.block_rows:
        log(
            f"{', '.join(pooled)} standardises over all the texts scored together: "
            f"scoring {len(first.texts)} rows in one block"
        )
    recorded = run_record(config)
    with OutputLock(out):
        columns = output_columns(first, requests, output.id_field, output.label_field, online is not None)
        writer = ResultWriter(out, columns, output.resume, output.overwrite, recorded, output.run_file)
        writers = [writer]
        if online is not None:
            windows_columns = _windows_columns(first, output.id_field)
            windows = ResultWriter(windows_path(out), windows_columns, output.resume, output.overwrite, recorded)
            _align_windows(windows, writer.done_rows, out)
            writers.insert(0, windows)  # written, and closed, first: it may hold more rows, never fewer
        unscored = _unscored_blocks(itertools.chain([(first, first_end)], blocks), writer, data_name)
        try:
            scored = _score_blocks(dataset, unscored, config, _Writing(writers, detector, settings, log))
        except BaseException:
            for each in writers:
                each.abandon()
            raise
        for each in writers:
            each.close()
    if not scored:
        log(f"{out}: all {writer.done_rows} rows already scored")
        return out
    unscorable = sum(1 for w in writer.written_column("warning") if w not in (None, ""))
    if unscorable:
        log(f"warning: {unscorable} texts could not be scored; their scores are NaN, see the 'warning' column")
    return out


def run_record(config: RunConfig) -> dict[str, Any]:
    """What a scores file records of its run and a resumed run must repeat. The models are recorded by what they
    are (weights, tokenizer: ``Detector.provenance``), not by the names or paths they were given."""
    recorded = config.recorded()
    for name in ("model", "gguf", "ref_model", "server"):
        recorded.pop(name, None)
    return recorded


@dataclass
class _Writing:
    """The writers of a run (the windows file's first), and the detector and settings, made when first needed."""

    writers: list[ResultWriter]
    detector: Detector | None
    settings: MethodSettings
    log: Callable[[str], None]


def _score_blocks(dataset: Dataset | DataStream, unscored: Iterator[_Block], config: RunConfig, run: _Writing) -> bool:
    """Scores and writes every unscored block; whether there was any."""
    output, scoring, compute = config.output, config.scoring, config.compute
    *windows_writer, writer = run.writers

    def write(block: _Block, scores: Scores) -> None:
        fingerprints = block.rows.fingerprints()
        try:
            if windows_writer:
                windows_writer[0].write(_window_rows(block, scores.online, output.id_field), fingerprints)
            writer.write(_rows(block, scores, output.id_field, output.label_field), fingerprints)
        except OSError as exc:
            kept = f"the {writer.done_rows} rows finished are kept: continue with --resume" if writer.done_rows else ""
            raise MiaFastError(
                f"cannot write {writer.path}: {exc.strerror or exc}; {kept or 'nothing was written'}"
            ) from None

    bar, detector, settings = None, run.detector, run.settings
    executor = (lambda name: ThreadPoolExecutor(1, name)) if compute.overlap else (lambda name: _InlineExecutor())
    with executor("mia-fast-read") as reading, executor("mia-fast-write") as writing:
        upcoming = reading.submit(_read_ahead, unscored, None)
        written = None
        try:
            while (block := upcoming.result()) is not None:
                if bar is None:
                    if detector is None:
                        detector = Detector(config.model, settings, compute)
                        settings = detector.settings
                    provenance = detector.provenance()
                    for each in run.writers:
                        each.check_engines(provenance)
                    if writer.done_rows:
                        run.log(f"resuming {writer.path} after {writer.done_rows} rows")
                    requests = detector.requests(scoring.methods, scoring.k, settings)
                    passes = len(registry.passes_of(requests, settings))
                    bar = _TokenProgress(dataset.size, block.start, passes, disable=not compute.progress)
                    # The first call copies the tokenizer for the read-ahead thread: done here, before that thread runs.
                    detector.target.tokenize_ahead(block.rows.texts)
                upcoming = reading.submit(_read_ahead, unscored, detector)
                bar.start_block(block.rows)
                scores = detector.score_requests(
                    block.rows.texts, requests, settings, bar.tokenized, bar.advance, scoring.online
                )
                if written is not None:
                    written.result()
                written = writing.submit(write, block, scores)
                bar.finish_block(len(block.rows.texts), block.end)
            if written is not None:
                written.result()
        finally:  # leaving the executors waits for the block being written: what was scored is kept
            if bar is not None:
                bar.close()
    return bar is not None


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
