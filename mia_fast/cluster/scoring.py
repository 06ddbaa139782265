"""``score --ray``: a data file cut into shards of whole blocks, so that every block is the one a single process
would score, run as a Ray Data pipeline: a shard's position in the file goes to a pool of model actors (one GPU each
on a GPU cluster), each of which reads its rows itself, scores them with :func:`mia_fast.api.score_file` into its
shard file (written under a hidden name and renamed when whole) and is recorded in the run's manifest
(:mod:`mia_fast.cluster.shards`). A rerun with ``resume`` skips the finished shards and continues a torn one after its
last block. The shards are then concatenated into OUT in its own format, row for row what ``score_file`` writes in one
process."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
from tqdm.auto import tqdm

from mia_fast.cluster.session import RayUnreachable, cluster_address, last_line, ray_session, require_ray
from mia_fast.cluster.shards import MANIFEST, RayManifest, Shard, run_settings
from mia_fast.data.artefacts import OutputLock
from mia_fast.data.files import DataStream
from mia_fast.data.formats import PARQUET_CONVERSION_ROWS, output_format
from mia_fast.data.outputs import ResultWriter, manifest_path
from mia_fast.errors import MiaFastError
from mia_fast.pipeline.device_map import DeviceMap
from mia_fast.pipeline.models import LoadedModel
from mia_fast.scoring.detector import Detector
from mia_fast.scoring.method_runs import pooled_methods
from mia_fast.scoring.run_plan import check_before_loading, refuse_input_as_output, run_record
from mia_fast.scoring.runner import score_file

if TYPE_CHECKING:
    from mia_fast.scoring.config import RunConfig

# A shard is this many blocks unless told otherwise: large enough that an actor's per-shard cost (opening
# the input, writing a Parquet file) is small beside the forward passes, small enough to resume cheaply.
SHARD_BLOCKS = 8


@contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """No Ray Data progress bars or execution logs while mia-fast shows its own bar."""
    from ray.data import DataContext  # noqa: PLC0415 (optional: ray, mia-fast[ray])

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


@dataclass(frozen=True)
class _ShardJob:
    """What every actor needs to score any shard (sent to each actor once)."""

    data: DataStream
    directory: Path
    config: RunConfig

    def stream(self, shard: Shard) -> DataStream:
        return self.data.part(shard.start, shard.rows)

    def score(self, shard: Shard, detector: Any) -> None:
        """Scores one shard into its file: under its hidden name (continued after its last block if a killed
        run left it), then renamed, so that a shard's file exists only when whole."""
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
        self.job, self.detector, self.error = job, None, ""
        config = job.config
        try:
            self.detector = Detector(config.model, config.scoring.settings, config.compute)
        except MiaFastError as exc:
            self.error = str(exc)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        shard = Shard.from_json(str(batch["shard"][0]))
        error = self.error
        if not error:
            try:
                self.job.score(shard, self.detector)
            except MiaFastError as exc:
                error = str(exc)
        return {"shard": [shard.to_json()], "error": [error]}


def _check_before_ray(config: RunConfig) -> None:
    """What can be refused before Ray starts: what a run here refuses before loading a model, methods that score
    all rows together, settings that cannot travel to an actor."""
    if config.scoring.online is not None:
        raise MiaFastError("online detection (--online) is not available with --ray; score without --ray")
    for role in ("model", "ref_model"):
        if isinstance(getattr(config.model, role), LoadedModel):
            raise MiaFastError(
                f"with --ray every actor loads its own model: give {role} as a hub name or a directory, "
                "not a model in memory"
            )
    device = config.model.device
    if isinstance(device, DeviceMap):
        raise MiaFastError(
            "--device-map spreads one model over this machine's devices, and --ray gives each actor one GPU of its own "
            "with a whole model: drop --device-map, or score without --ray"
        )
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
    cluster_address(cluster.address)
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
    refuse_input_as_output(data, [out])
    with OutputLock(out):
        return _score_shards_and_merge(data, config, cluster, shard_rows, log)


def _score_shards_and_merge(
    data: DataStream, config: RunConfig, cluster: RayConfig, shard_rows: int, log: Callable[[str], None]
) -> Path:
    """score_on_ray once its checks are done and OUT is locked."""
    out, resume, overwrite = config.output.path, config.output.resume, config.output.overwrite
    directory = out.with_name(out.name + ".shards")
    settings = run_settings(data, config, shard_rows)
    manifest = RayManifest(directory, settings, resume=resume, overwrite=overwrite, out=out)
    if manifest.content["merged"] and out.is_file():
        log(f"{out}: all {manifest.content['rows']} rows already scored")
        return out
    shards = manifest.shards(data, shard_rows)
    todo = [shard for shard in shards if not manifest.finished(shard)]
    if len(todo) < len(shards):
        log(f"resuming: {len(shards) - len(todo)} of {len(shards)} shards already scored in {directory}")
    if todo:
        job = _ShardJob(data, directory, config)
        try:
            _score_shards(job, todo, manifest, cluster, log, total_rows=manifest.content["rows"])
        except RayUnreachable:
            if manifest.new:
                manifest.discard()
            raise
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
    todo: list[Shard],
    manifest: RayManifest,
    cluster: RayConfig,
    log: Callable[[str], None],
    total_rows: int,
) -> None:
    progress = job.config.compute.progress
    with ray_session(cluster.address) as ray, _quiet_ray_data():
        from ray.data import ActorPoolStrategy  # noqa: PLC0415 (optional: ray, mia-fast[ray])

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
                shard = Shard.from_json(result["shard"])
                if result["error"]:
                    raise MiaFastError(f"{shard.describe()}: {result['error']}")
                manifest.finish(shard)
                finished += 1
                bar.set_postfix_str(f"{finished}/{len(todo)} shards", refresh=False)
                bar.update(shard.rows)
        except ray.exceptions.RayError as exc:
            raise MiaFastError(
                f"the Ray run stopped: {last_line(exc)}; finished shards are kept, rerun with --resume"
            ) from None
        finally:
            bar.close()


def _merge_shards(files: list[Path], out: Path, settings: dict[str, Any], run_file: str | None) -> tuple[int, int]:
    """Concatenates the shards into ``out`` in its own format, a few thousand rows at a time, with its manifest's
    ``settings`` and its ``run_file``; returns the rows written and how many carry a warning."""
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
