"""The resumable file runner: a dataset scored into a file block by block (``score_file``), also what each Ray
actor runs on its shard (``mia_fast.cluster``)."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.files import Dataset, DataStream, ResultWriter
from mia_fast.errors import MiaFastError
from mia_fast.methods import registry
from mia_fast.methods.online import OnlineSetting
from mia_fast.methods.registry import MethodRequest
from mia_fast.methods.settings import MethodSettings
from mia_fast.pipeline.passes import REFERENCE
from mia_fast.scoring.config import ModelConfig, RunConfig, ScoringConfig
from mia_fast.scoring.detector import Detector, OnlineScores, Scores

ONLINE_COLUMNS = ("online_max", "online_start", "online_end", "online_text")
# Rough characters per token, only to size the progress bar before a block is tokenized.
_CHARS_PER_TOKEN = 4


def check_before_loading(model: ModelConfig, scoring: ScoringConfig) -> tuple[list[MethodRequest], MethodSettings]:
    """What can be refused before a model loads, for a run here or on Ray: unknown methods, bad k, methods whose
    models or settings were not given. Returns the requests and the settings made ready without a model (a
    probe read from its directory)."""
    requests = registry.resolve_methods(scoring.methods, scoring.k)
    settings = registry.prepare_settings(scoring.settings, None)
    registry.check_available(requests, settings, models=[REFERENCE] if model.ref_model is not None else [])
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
    config: RunConfig,
    detector: Detector | None = None,
    log: Callable[[str], None] = lambda message: None,
    data_name: str = "the input",
) -> Path:
    """Scores ``dataset`` (in memory, or a :class:`DataStream` read block by block, so memory stays flat
    whatever the file's size) into ``config.output.out`` (.jsonl, .csv or .parquet), one row per text in input
    order, each block appended and fsync'ed. With ``resume`` a killed run continues after its last complete
    row; an existing output is never replaced without ``overwrite``.

    The next block is read and tokenized on one thread while a block is scored, and the scored block is
    written on another: the model does not wait on either, and the scores are the same as one thread's
    (``config.compute.overlap=False`` does all three in turn on the calling thread).

    Everything that can be checked without a model is checked before one is loaded: the methods, the
    models and settings they need, the output, and whether a resumed output belongs to this input. The
    detector is ``detector``, or one made from ``config`` only when rows remain to be scored. ``log``
    receives one-line notes (resuming, texts that could not be scored).

    With ``config.scoring.online``, each row also gets its best window (``ONLINE_COLUMNS``) and every window's
    score goes to :func:`windows_path`, one row per text, each block written there before its scores rows.
    """
    output, scoring, compute = config.output, config.scoring, config.compute
    out, online, id_field, label_field = output.path, scoring.online, output.id_field, output.label_field
    if output.block_rows < 1:
        raise MiaFastError("--block-rows must be positive")
    if detector is not None:
        settings = detector.with_settings(scoring.settings)
        requests = detector.requests(scoring.methods, scoring.k, settings)
    else:
        requests, settings = check_before_loading(config.model, scoring)
    pooled = registry.pooled_methods(requests, settings)
    blocks = dataset.blocks(sys.maxsize if pooled else output.block_rows)
    first, first_end = next(blocks)
    registry.call_settings_hook(settings, requests, "check_texts", first.texts)
    if pooled and len(first.texts) > output.block_rows:
        log(
            f"{', '.join(pooled)} standardises over all the texts scored together: "
            f"scoring {len(first.texts)} rows in one block"
        )
    windows_out = windows_path(out)
    if online is not None and windows_out.exists() and not (output.resume or output.overwrite):
        raise MiaFastError(f"{windows_out} exists; pass --resume to continue it or --overwrite to replace it")
    columns = output_columns(first, requests, id_field, label_field, online is not None)
    writer = ResultWriter(out, columns, resume=output.resume, overwrite=output.overwrite)
    done = writer.done_rows
    if pooled and 0 < done < len(first.texts):
        raise MiaFastError(
            f"{out} holds {done} of {len(first.texts)} rows, but {', '.join(pooled)} must score all rows "
            "together; pass --overwrite to start again"
        )
    windows_writer = None
    if online is not None:
        if output.resume:
            _resume_windows(windows_out, online, done)
        windows_writer = ResultWriter(
            windows_out, _windows_columns(first, id_field), resume=output.resume, overwrite=output.overwrite
        )
    written_ids = iter(writer.written_column(id_field)) if done and first.ids is not None else None
    unscored = _unscored_blocks(itertools.chain([(first, first_end)], blocks), done, written_ids, out, data_name)

    def write(block: _Block, scores: Scores) -> None:
        if windows_writer is not None:
            windows_writer.write(_window_rows(block, scores.online, id_field))
        writer.write(_rows(block, scores, id_field, label_field))

    bar = None
    executor = (lambda name: ThreadPoolExecutor(1, name)) if compute.overlap else (lambda name: _InlineExecutor())
    with executor("mia-fast-read") as reading, executor("mia-fast-write") as writing:
        upcoming = reading.submit(_read_ahead, unscored, None)
        written = None
        try:
            while (block := upcoming.result()) is not None:
                if bar is None:
                    if done:
                        log(f"resuming {out} after {done} rows")
                    if detector is None:
                        detector = Detector(config.model, settings, compute)
                        settings = detector.settings
                    requests = detector.requests(scoring.methods, scoring.k, settings)
                    passes = len(registry.passes_of(requests, settings))
                    bar = _TokenProgress(dataset.size, block.start, passes, disable=not compute.progress)
                    # The first call copies the tokenizer for the read-ahead thread: done here, before that thread runs.
                    detector.target.tokenize_ahead(block.rows.texts)
                upcoming = reading.submit(_read_ahead, unscored, detector)
                bar.start_block(block.rows)
                scores = detector.score_requests(
                    block.rows.texts, requests, settings, bar.tokenized, bar.advance, online
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
