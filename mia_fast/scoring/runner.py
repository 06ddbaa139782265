"""The resumable file runner: a dataset scored into a file block by block (``score_file``), also what each Ray
actor runs on its shard (``mia_fast.cluster``). The run is planned once (``mia_fast.scoring.run_plan``), its outputs
owned as one (``mia_fast.data.run_outputs``), and each block's rows filled in by the plan's column producers
(``mia_fast.scoring.columns``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mia_fast.data.files import Dataset, DataStream
from mia_fast.data.run_outputs import RunOutputs
from mia_fast.errors import MiaFastError
from mia_fast.methods.settings import MethodSettings
from mia_fast.scoring.columns import beside_rows, block_rows
from mia_fast.scoring.config import RunConfig
from mia_fast.scoring.detector import Detector, Scores
from mia_fast.scoring.method_runs import passes_of
from mia_fast.scoring.run_plan import Loaded, RunPlan, checked_requests, plan_run

# Rough characters per token, only to size the progress bar before a block is tokenized.
_CHARS_PER_TOKEN = 4


class _TokenProgress:
    """A tqdm bar over tokens. Its total is guessed from the input's size (characters of a dataset, bytes of a
    file) until blocks are measured, then rescaled after each block by the tokens per byte so far, and corrected
    as each block is tokenized."""

    def __init__(self, size: int, start: int, passes: int, *, disable: bool) -> None:
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


def _unscored_blocks(blocks: Iterator[tuple[Dataset, int]], writer: RunOutputs, data_name: str) -> Iterator[_Block]:
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


def _read_ahead(blocks: Iterator[_Block], detector: Detector) -> _Block | None:
    """The next block, tokenized for the detector's target model (runs on the read-ahead thread)."""
    block = next(blocks, None)
    if block is not None:
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
    plan = plan_run(dataset, config, detector, log)
    with plan.outputs() as outputs:
        unscored = _unscored_blocks(plan.blocks, outputs, data_name)
        scored = _score_blocks(dataset, unscored, plan, _Run(outputs, log))
    if not scored:
        log(f"{outputs.path}: all {outputs.done_rows} rows already scored")
        return outputs.path
    unscorable = sum(1 for w in outputs.written_column("warning") if w not in (None, ""))
    if unscorable:
        log(f"warning: {unscorable} texts could not be scored; their scores are NaN, see the 'warning' column")
    return outputs.path


@dataclass
class _Run:
    """Where a run's blocks go, and its one-line notes."""

    outputs: RunOutputs
    log: Callable[[str], None]


def _detector_for(plan: RunPlan, run: _Run) -> tuple[Detector, MethodSettings]:
    """The plan's detector, or one made from its configuration (rows remain to be scored), with the settings it
    scores under, checked against the outputs and by the one check of the run's methods, its engines now built."""
    config = plan.config
    detector = plan.detector or Detector(config.model, plan.settings, config.compute)
    settings = plan.settings if plan.detector is not None else detector.settings
    run.outputs.check_engines(detector.provenance())
    if run.outputs.done_rows:
        run.log(f"resuming {run.outputs.path} after {run.outputs.done_rows} rows")
    checked_requests(config.scoring, Loaded(detector, settings))
    return detector, settings


def _score_blocks(dataset: Dataset | DataStream, unscored: Iterator[_Block], plan: RunPlan, run: _Run) -> bool:
    """Scores and writes every unscored block; whether there was any."""
    block = next(unscored, None)
    if block is None:
        return False
    detector, settings = _detector_for(plan, run)
    scoring, compute = plan.config.scoring, plan.config.compute
    requests = plan.requests

    def write(block: _Block, scores: Scores) -> None:
        beside = beside_rows(plan.producers, block.first_row, block.rows, scores)
        run.outputs.write(block_rows(plan.producers, block.rows, scores), block.rows.fingerprints(), beside)

    passes = len(passes_of(requests, settings))
    bar = _TokenProgress(dataset.size, block.start, passes, disable=not compute.progress)
    executor = (lambda name: ThreadPoolExecutor(1, name)) if compute.overlap else (lambda name: _InlineExecutor())
    try:
        # The first call copies the tokenizer for the read-ahead thread: done here, before that thread runs.
        detector.target.tokenize_ahead(block.rows.texts)
        with executor("mia-fast-read") as reading, executor("mia-fast-write") as writing:
            written = None
            while block is not None:
                upcoming = reading.submit(_read_ahead, unscored, detector)
                bar.start_block(block.rows)
                scores = detector.score_requests(
                    block.rows.texts, requests, settings, bar.tokenized, bar.advance, scoring.online
                )
                if written is not None:
                    written.result()
                written = writing.submit(write, block, scores)
                bar.finish_block(len(block.rows.texts), block.end)
                block = upcoming.result()
            if written is not None:
                written.result()
    finally:  # leaving the executors waits for the block being written: what was scored is kept
        bar.close()
    return True
