"""Scoring and frequency counting on a Ray cluster (``pip install 'mia-fast[ray]'``).

``score_on_ray`` cuts a data file into shards of whole blocks, so that every block is the one a single
process would score, and runs them as a Ray Data pipeline: a shard's position in the file goes to a pool
of model actors (one GPU each on a GPU cluster), each of which reads its rows itself, scores them with
:func:`mia_fast.api.score_file` into ``OUT.shards/shard-NNNNN.parquet`` (written under a hidden name and
renamed when whole) and is recorded in ``OUT.shards/_manifest.json``. A rerun with ``resume`` skips the
finished shards and continues a torn one after its last block. The shards are then concatenated into
OUT in its own format, row for row what ``score_file`` writes in one process.

``build_on_ray`` counts each corpus file of a frequency-table build in a Ray task of its own and adds the
tables in file order, as ``build_from_text`` does in one process.

Ray is imported only inside these functions.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mia_fast.data.artefacts import OutputLock, write_atomic
from mia_fast.data.files import DataStream, RowPosition, row_positions
from mia_fast.data.formats import PARQUET_CONVERSION_ROWS, output_format
from mia_fast.data.outputs import ResultWriter, manifest_path
from mia_fast.errors import MiaFastError
from mia_fast.frequency.sources import CorpusFormat, Counting

if TYPE_CHECKING:
    from mia_fast.scoring.config import RunConfig

INSTALL_HINT = "pip install 'mia-fast[ray]'"
# A shard is this many blocks unless told otherwise: large enough that an actor's per-shard cost (opening
# the input, writing a Parquet file) is small beside the forward passes, small enough to resume cheaply.
SHARD_BLOCKS = 8
MANIFEST = "_manifest.json"  # leading "_": Parquet readers of the directory (pyarrow, Ray, Spark) skip it
# Seconds to wait for a cluster's address to answer before giving up.
CONNECT_TIMEOUT_S = 5
DEFAULT_PORTS = {"ray://": 10001, "": 6379}


def require_ray() -> Any:
    """The ray module, or a one-line error saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401  (the Data library is the [data] extra)
    except ImportError:
        raise MiaFastError(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


def check_address(address: str | None) -> None:
    """Fails within CONNECT_TIMEOUT_S when nothing answers at a cluster address (Ray itself retries for minutes)."""
    if not address:
        return
    if Path(address).exists():
        raise MiaFastError(
            f"--ray took {address!r} as the cluster address, but it is a file: write --ray=ADDRESS, or put --ray "
            "after the input"
        )
    if address in ("auto", "local"):
        return
    scheme = "ray://" if address.startswith("ray://") else ""
    host, _, port = address[len(scheme) :].rpartition(":")
    if not host:
        host, port = port, str(DEFAULT_PORTS[scheme])
    if not port.isdigit():
        raise MiaFastError(f"--ray {address}: expected host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, socket.timeout) else exc.strerror or str(exc)
        raise MiaFastError(
            f"cannot reach the Ray cluster at {address}: {reason} (is the address right, and the cluster up?)"
        ) from None


@contextmanager
def _temporary_environment(**values: str) -> Iterator[None]:
    """Sets the variables the user has not set, for the duration."""
    added = [name for name in values if name not in os.environ]
    os.environ.update({name: values[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextmanager
def ray_session(address: str | None = None) -> Iterator[Any]:
    """Ray, connected: to the cluster at ``address`` (``host:port``, ``ray://host:port`` or ``auto``), or to a
    Ray started here when ``address`` is None (or the one RAY_ADDRESS names). Ray already initialized in this
    process is used as it is. Ray is shut down at the end only if it was started or connected here."""
    ray = require_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    check_address(address)
    if ray.is_initialized():
        yield ray
        return
    options: dict[str, Any] = {} if address else {"include_dashboard": False}
    # Ray's C++ core logs to the terminal (e.g. one error line per actor pool about restartable actors);
    # a connection to a cluster that does not answer is retried for a few seconds, not twenty.
    with _temporary_environment(RAY_BACKEND_LOG_LEVEL="fatal", RAY_gcs_server_port_wait_time_s=str(CONNECT_TIMEOUT_S)):
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, **options)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
            where = f"connect to the Ray cluster at {address}" if address else "start Ray here"
            raise MiaFastError(f"cannot {where}: {_last_line(exc)}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


@contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """No Ray Data progress bars or execution logs while mia-fast shows its own bar."""
    from ray.data import DataContext

    context = DataContext.get_current()
    saved = {
        name: getattr(context, name)
        for name in ("enable_progress_bars", "print_on_execution_start", "enable_auto_log_stats")
        if hasattr(context, name)
    }
    for name in saved:
        setattr(context, name, False)
    data_logger = logging.getLogger("ray.data")
    level = data_logger.level
    data_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(context, name, value)
        data_logger.setLevel(level)


def _last_line(exc: BaseException) -> str:
    """The informative line of an error Ray wraps (its last non-empty line: the original exception)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


# ---- scoring ----


@dataclass(frozen=True)
class _Shard:
    """Rows [start.row, start.row + rows) of the input, scored into ``name``."""

    index: int
    start: RowPosition
    rows: int

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}.parquet"

    @property
    def partial_name(self) -> str:
        return f".shard-{self.index:05d}.partial.parquet"

    def describe(self) -> str:
        return f"{self.name} (rows {self.start.row}-{self.start.row + self.rows - 1})"

    def to_json(self) -> str:
        return json.dumps([self.index, self.start.row, self.start.number, self.start.offset, self.rows])

    @classmethod
    def from_json(cls, text: str) -> _Shard:
        index, row, number, offset, rows = json.loads(text)
        return cls(index, RowPosition(row, number, offset), rows)


@dataclass(frozen=True)
class _ShardJob:
    """What every actor needs to score any shard (sent to each actor once)."""

    data: DataStream
    directory: Path
    config: RunConfig

    def stream(self, shard: _Shard) -> DataStream:
        return self.data.part(shard.start, shard.rows)

    def score(self, shard: _Shard, detector: Any) -> None:
        """Scores one shard into its file: under its hidden name (continued after its last block if a killed
        run left it), then renamed, so that a shard's file exists only when whole."""
        from mia_fast.scoring.runner import score_file

        partial = self.directory / shard.partial_name
        # A shard is part of OUT: the run file goes beside OUT alone.
        output = replace(self.config.output, out=partial, resume=True, overwrite=False, run_file=None)
        config = replace(self.config, output=output, compute=replace(self.config.compute, progress=False))
        score_file(self.stream(shard), config, detector, data_name=str(self.data.path))
        os.replace(partial, self.directory / shard.name)
        manifest_path(partial).unlink()


class ShardScorer:
    """A Ray Data actor: loads the model once, then scores the shards it is given, one per call. Errors
    of mia-fast (a bad row, a model that does not load) come back as values, so the driver can say which
    shard failed in one line. (Texts that could not be scored are counted by the driver, over all shards.)"""

    def __init__(self, job: _ShardJob) -> None:
        from mia_fast.scoring.detector import Detector

        self.job, self.detector, self.error = job, None, ""
        config = job.config
        try:
            self.detector = Detector(config.model, config.scoring.settings, config.compute)
        except MiaFastError as exc:
            self.error = str(exc)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        shard = _Shard.from_json(str(batch["shard"][0]))
        error = self.error
        if not error:
            try:
                self.job.score(shard, self.detector)
            except MiaFastError as exc:
                error = str(exc)
        return {"shard": [shard.to_json()], "error": [error]}


class _Manifest:
    """``OUT.shards/_manifest.json``: the run's settings, where each shard starts, which shards are finished,
    and whether OUT has been written from them."""

    def __init__(self, directory: Path, settings: dict[str, Any], resume: bool, overwrite: bool, out: Path) -> None:
        self.directory, self.path = directory, directory / MANIFEST
        if resume and overwrite:
            raise MiaFastError("--resume and --overwrite exclude each other")
        if overwrite and directory.is_dir():
            self._remove_run(directory)
        recorded = json.loads(self.path.read_text()) if self.path.is_file() else None
        if recorded is None:
            if out.exists() and not overwrite:
                raise MiaFastError(
                    f"{out} exists; pass --overwrite to replace it"
                    + ("" if not resume else f" (it was not written by a --ray run: {self.path} is missing)")
                )
            if directory.is_dir() and any(directory.iterdir()):
                raise MiaFastError(
                    f"{directory} is not the shards folder of a --ray run (no {MANIFEST}); it was left as it is: move "
                    "it away, or choose another --out"
                )
            self.content = {"settings": settings, "positions": None, "rows": None, "finished": {}, "merged": False}
            return
        if not resume:
            raise MiaFastError(
                f"{directory} holds a --ray run of {out}; pass --resume to continue it or --overwrite to start over"
            )
        changed = sorted(
            name
            for name in settings.keys() | recorded["settings"].keys()
            if settings.get(name) != recorded["settings"].get(name)
        )
        if changed:
            raise MiaFastError(
                f"{directory} holds a run with other settings ({', '.join(changed)} differ); pass --overwrite to "
                "start over"
            )
        self.content = recorded

    def _remove_run(self, directory: Path) -> None:
        """Removes an earlier --ray run's shards, only where the folder is one (it holds the run's manifest): a
        folder of the user's at that path is refused and left as it is."""
        if not self.path.is_file():
            if not any(directory.iterdir()):
                return
            raise MiaFastError(
                f"{directory} is not the shards folder of a --ray run (no {MANIFEST}); it was left as it is: move it "
                "away, or choose another --out"
            )
        shutil.rmtree(directory)

    def shards(self, data: DataStream, shard_rows: int) -> list[_Shard]:
        """The shards of the input (its row positions read once, then kept here for reruns)."""
        if self.content["positions"] is None:
            positions, rows = row_positions(data.path, shard_rows)
            if not rows:
                raise MiaFastError(f"{data.path}: the file holds no rows")
            self.content.update(positions=[[p.row, p.number, p.offset] for p in positions], rows=rows)
            self.save()
        rows = self.content["rows"]
        return [
            _Shard(i, RowPosition(*p), min(shard_rows, rows - p[0])) for i, p in enumerate(self.content["positions"])
        ]

    def finished(self, shard: _Shard) -> bool:
        """Whether the shard's file is there with its rows: an actor renames it into place only when whole, and
        only for this run's settings, so it counts even if the driver was stopped before it heard."""
        import pyarrow.parquet as pq

        path = self.directory / shard.name
        if not path.is_file():
            return False
        try:
            return pq.ParquetFile(path).metadata.num_rows == shard.rows
        except Exception:  # pyarrow raises its own error types on a damaged file: score the shard again
            return False

    def finish(self, shard: _Shard) -> None:
        self.content["finished"][str(shard.index)] = shard.rows
        self.save()

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.content, indent=1).encode())


def _run_settings(data: DataStream, config: RunConfig, shard_rows: int) -> dict[str, Any]:
    """Everything that decides the rows of OUT: the input file as it is now, the fields, the blocks and shards,
    and every setting that changes a score, of every method, requested or not (a rerun with any of them changed
    would mix two runs' scores)."""
    from mia_fast.methods.registry import REGISTRY, recorded_settings

    stat = data.path.stat()
    settings = {
        "input": [str(data.path.resolve()), stat.st_size, stat.st_mtime_ns],
        "fields": data.fields,
        "max_words": data.max_words,
        "output_fields": [config.output.id_field, config.output.label_field],
        "block_rows": config.output.block_rows,
        "shard_rows": shard_rows,
        **recorded_settings(REGISTRY.values(), config.scoring.settings),
        **config.recorded(),
    }
    return json.loads(json.dumps(settings))  # as a manifest holds them, so that the two compare


def _check_before_ray(config: RunConfig) -> None:
    """What can be refused before Ray starts: what a run here refuses before loading a model, methods that score
    all rows together, settings that cannot travel to an actor."""
    from mia_fast.methods.registry import pooled_methods
    from mia_fast.pipeline.models import LoadedModel
    from mia_fast.scoring.runner import check_before_loading

    if config.scoring.online is not None:
        raise MiaFastError("online detection (--online) is not available with --ray; score without --ray")
    for role in ("model", "ref_model"):
        if isinstance(getattr(config.model, role), LoadedModel):
            raise MiaFastError(
                f"with --ray every actor loads its own model: give {role} as a hub name or a directory, "
                "not a model in memory"
            )
    device = config.model.device
    if device is not None and device.startswith("cuda:"):
        raise MiaFastError(f"--device {device}: with --ray each actor is given one GPU of its own; use --device cuda")
    requests, settings = check_before_loading(config.model, config.scoring)
    pooled = pooled_methods(requests, settings)
    if pooled:
        raise MiaFastError(
            f"{', '.join(pooled)} standardises over all the texts scored together, so its scores cannot be cut into "
            "shards; score without --ray (or with --probe-normalization train)"
        )


def _actor_resources(
    ray: Any, device: str | None, workers: int | None, shards: int, log: Callable[[str], None]
) -> tuple[int, int, int]:
    """(actors, CPUs each, GPUs each): one actor per GPU on a cluster with GPUs (or with ``device`` cuda), one
    per node otherwise, unless ``workers`` says, and never more than ``shards``; CPU actors share the
    cluster's CPUs evenly."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    on_gpu = device.startswith("cuda") if device else gpus > 0
    if workers is None:
        workers = max(1, gpus) if on_gpu else max(1, sum(1 for node in ray.nodes() if node.get("Alive")))
    if workers < 1:
        raise MiaFastError(f"--ray-workers must be positive, got {workers}")
    workers = min(workers, shards)
    cpus_each = 1 if on_gpu else max(1, cpus // workers)
    if (gpus if on_gpu else cpus) < workers * (1 if on_gpu else cpus_each):
        kind, has = ("GPUs", gpus) if on_gpu else ("CPUs", cpus)
        log(
            f"the cluster has {has} {kind} now, not enough for {workers} actors: the run waits for nodes to join "
            "(lower --ray-workers if none will)"
        )
    return workers, cpus_each, 1 if on_gpu else 0


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide a Ray run goes: ``address`` a cluster (``host:port``, ``ray://host:port``, ``auto``), or
    None for a Ray started here (or the one RAY_ADDRESS names, or one already initialized in this process);
    ``workers`` model actors (default: one per GPU, or one per node without GPUs); ``shard_rows`` rows per
    shard, a multiple of the block rows (default ``SHARD_BLOCKS`` blocks)."""

    address: str | None = None
    workers: int | None = None
    shard_rows: int | None = None


def score_on_ray(
    data: DataStream,
    config: RunConfig,
    cluster: RayConfig | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> Path:
    """Scores the data file of ``data`` into ``config.output.out`` (any registered output format) on Ray, row for row
    what :func:`mia_fast.api.score_file` writes in one process with the same ``config`` (a
    :class:`mia_fast.scoring.config.RunConfig`; see the module docstring). The input, OUT and the model must be
    at paths every node can read (and write, for OUT), or the model a hub name; each actor makes its own
    Detector from ``config``.
    """
    cluster = cluster or RayConfig()
    out, block_rows = config.output.path, config.output.block_rows
    require_ray()
    check_address(cluster.address)
    output_format(out)  # refuses a suffix no output format is registered for
    if block_rows < 1:
        raise MiaFastError("--block-rows must be positive")
    shard_rows = cluster.shard_rows or SHARD_BLOCKS * block_rows
    if shard_rows < 1 or shard_rows % block_rows:
        raise MiaFastError(
            f"--shard-rows {shard_rows} must be a multiple of --block-rows {block_rows}, so that every block is "
            "scored as in one process"
        )
    _check_before_ray(config)
    from mia_fast.scoring.runner import refuse_input_as_output

    refuse_input_as_output(data, out, online=False)
    with OutputLock(out):
        return _score_shards_and_merge(data, config, cluster, shard_rows, log)


def _score_shards_and_merge(
    data: DataStream, config: RunConfig, cluster: RayConfig, shard_rows: int, log: Callable[[str], None]
) -> Path:
    """score_on_ray once its checks are done and OUT is locked."""
    from mia_fast.scoring.runner import run_record

    out, resume, overwrite = config.output.path, config.output.resume, config.output.overwrite
    directory = out.with_name(out.name + ".shards")
    settings = _run_settings(data, config, shard_rows)
    manifest = _Manifest(directory, settings, resume, overwrite, out)
    if manifest.content["merged"] and out.is_file():
        log(f"{out}: all {manifest.content['rows']} rows already scored")
        return out
    shards = manifest.shards(data, shard_rows)
    todo = [shard for shard in shards if not manifest.finished(shard)]
    if len(todo) < len(shards):
        log(f"resuming: {len(shards) - len(todo)} of {len(shards)} shards already scored in {directory}")
    if todo:
        job = _ShardJob(data, directory, config)
        _score_shards(job, todo, manifest, cluster, log, total_rows=manifest.content["rows"])
    missing = [shard.describe() for shard in shards if not manifest.finished(shard)]
    if missing:
        raise MiaFastError(f"the Ray run ended without {len(missing)} shard(s), e.g. {missing[0]}; rerun with --resume")
    files = [directory / shard.name for shard in shards]
    rows, unscorable = _merge_shards(files, out, run_record(config), config.output.run_file)
    manifest.content["merged"] = True
    manifest.save()
    if unscorable:
        log(f"warning: {unscorable} texts could not be scored; their scores are NaN, see the 'warning' column")
    log(f"wrote {out} ({rows} rows) from {len(shards)} shards in {directory} ({MANIFEST} records the run)")
    return out


def _score_shards(
    job: _ShardJob,
    todo: list[_Shard],
    manifest: _Manifest,
    cluster: RayConfig,
    log: Callable[[str], None],
    total_rows: int,
) -> None:
    from tqdm.auto import tqdm

    progress = job.config.compute.progress
    with ray_session(cluster.address) as ray, _quiet_ray_data():
        from ray.data import ActorPoolStrategy

        actors, cpus, gpus = _actor_resources(ray, job.config.model.device, cluster.workers, len(todo), log)
        log(
            f"scoring {len(todo)} shards of up to {todo[0].rows} rows with {actors} model actor(s) on Ray "
            f"({gpus or cpus} {'GPU' if gpus else 'CPU'}{'s' if (gpus or cpus) > 1 else ''} each)"
        )
        pipeline = ray.data.from_items(
            [{"shard": shard.to_json()} for shard in todo], override_num_blocks=len(todo)
        ).map_batches(
            ShardScorer,
            batch_size=1,
            compute=ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            num_cpus=cpus,
            num_gpus=gpus,
            fn_constructor_kwargs={"job": job},
        )
        done_rows = total_rows - sum(shard.rows for shard in todo)
        bar = tqdm(
            total=total_rows, initial=done_rows, unit="row", desc="shards", dynamic_ncols=True, disable=not progress
        )
        finished = 0
        try:
            for result in pipeline.iter_rows():
                shard = _Shard.from_json(result["shard"])
                if result["error"]:
                    raise MiaFastError(f"{shard.describe()}: {result['error']}")
                manifest.finish(shard)
                finished += 1
                bar.set_postfix_str(f"{finished}/{len(todo)} shards", refresh=False)
                bar.update(shard.rows)
        except ray.exceptions.RayError as exc:
            raise MiaFastError(
                f"the Ray run stopped: {_last_line(exc)}; finished shards are kept, rerun with --resume"
            ) from None
        finally:
            bar.close()


def _merge_shards(files: list[Path], out: Path, settings: dict[str, Any], run_file: str | None) -> tuple[int, int]:
    """Concatenates the shards into ``out`` in its own format, a few thousand rows at a time, with its manifest's
    ``settings`` and its ``run_file``; returns the rows written and how many carry a warning."""
    import pyarrow.parquet as pq

    columns = pq.read_schema(files[0]).names
    writer = ResultWriter(out, columns, overwrite=True, settings=settings, run_file=run_file)
    unscorable = 0
    for path in files:
        shard = pq.ParquetFile(path)
        if shard.schema_arrow.names != columns:
            raise MiaFastError(
                f"{path} has columns {shard.schema_arrow.names}, not {columns} as {files[0].name}: does every row "
                "have the same fields?"
            )
        for batch in shard.iter_batches(batch_size=PARQUET_CONVERSION_ROWS):
            rows = batch.to_pylist()
            unscorable += sum(1 for row in rows if row.get("warning"))
            writer.write(rows)
    writer.close()
    return writer.done_rows, unscorable


# ---- frequency tables ----


def _count_file(
    path: str, tokenizer: Any, settings: dict[str, Any], threads: int, skip_bad_records: bool
) -> tuple[Any, int, list[str], str]:
    """A Ray task: one corpus file's table, its bad-record count and examples, and an error ('' if none)."""
    from mia_fast.frequency.sources import count_text_file

    try:
        table, bad = count_text_file(
            Path(path), tokenizer, settings, workers=threads, skip_bad_records=skip_bad_records
        )
    except MiaFastError as exc:
        return None, 0, [], str(exc)
    return table, bad.count, bad.examples, ""


def build_on_ray(
    sources: Sequence[str | os.PathLike],
    tokenizer: Any,
    counting: Counting = Counting(),  # noqa: B008  (a frozen dataclass, as build_from_text's default)
    corpus: CorpusFormat = CorpusFormat(),  # noqa: B008
    *,
    address: str | None = None,
    threads: int = 1,
    checkpoint_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> Any:
    """:func:`mia_fast.frequency.sources.build_from_text` with each corpus file counted in a Ray task of its
    own (``threads`` tokenizer threads and as many CPUs each), the tables added in file order: the same
    table and report. Finished files are kept in ``checkpoint_dir`` as they come back, so a rerun skips them.
    The files must be at paths every node can read; the tables come back to this process."""
    from mia_fast.frequency.sources import (
        BAD_EXAMPLES,
        BuildReport,
        ShardCheckpoints,
        expand_sources,
        text_build_settings,
    )
    from mia_fast.frequency.table import FrequencyTable

    started = time.perf_counter()
    if threads < 1:
        raise MiaFastError(f"--workers must be positive, got {threads}")
    settings = text_build_settings(tokenizer, counting, corpus)
    files = expand_sources(sources)
    checkpoints = ShardCheckpoints(Path(checkpoint_dir), settings, files) if checkpoint_dir else None
    tables: list[Any] = [None] * len(files)
    bad_counts, examples = [0] * len(files), [[] for _ in files]
    for index in range(len(files)):
        finished = checkpoints.load(index) if checkpoints else None
        if finished is not None:
            tables[index], bad_counts[index] = finished
    resumed = sum(table is not None for table in tables)
    todo = [index for index, table in enumerate(tables) if table is None]
    sizes = [path.stat().st_size for path in files]
    if todo:
        bar = _bytes_bar(sum(sizes), sum(sizes) - sum(sizes[i] for i in todo), progress)
        with ray_session(address) as ray:
            count = ray.remote(num_cpus=threads)(_count_file)
            shared_tokenizer = ray.put(tokenizer)
            pending = {
                count.remote(str(files[i]), shared_tokenizer, settings, threads, corpus.skip_bad_records): i
                for i in todo
            }
            try:
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                    index = pending.pop(ready[0])
                    try:
                        table, bad_counts[index], examples[index], error = ray.get(ready[0])
                    except ray.exceptions.RayError as exc:
                        raise MiaFastError(
                            f"{files[index]}: the Ray task failed: {_last_line(exc)}; rerun to continue"
                        ) from None
                    if error:
                        raise MiaFastError(error)
                    tables[index] = table
                    if checkpoints:
                        checkpoints.save(index, table, bad_counts[index])
                    bar.update(sizes[index])
            finally:
                for ref in pending:
                    ray.cancel(ref)
                bar.close()
    table = FrequencyTable.merge(tables)
    if table.tokens == 0:
        raise MiaFastError(f"the corpus ({len(files)} file(s)) holds no tokens to count")
    first_examples = [example for found in examples for example in found][:BAD_EXAMPLES]
    return BuildReport(table, sum(bad_counts), first_examples, resumed, time.perf_counter() - started, sum(sizes))


def _bytes_bar(total: int, done: int, progress: bool) -> Any:
    """A progress bar over the corpus's bytes, the files already counted done."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=done,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="files",
        dynamic_ncols=True,
        disable=not progress,
    )
