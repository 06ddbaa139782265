"""``freq build --ray``: each corpus file of a frequency-table build counted in a Ray task of its own, the tables
added in file order, as :func:`mia_fast.frequency.text_build.build_from_text` does in one process."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mia_fast.cluster.session import RayUnreachable, cluster_address, last_line, ray_session
from mia_fast.errors import MiaFastError
from mia_fast.frequency.build import Counting
from mia_fast.frequency.checkpoints import ShardCheckpoints, check_checkpoints
from mia_fast.frequency.corpus import BadRecords, CorpusFormat, no_tokens
from mia_fast.frequency.counting_tokenizers import CounterRecipe
from mia_fast.frequency.table import FrequencyTable
from mia_fast.frequency.text_build import BuildReport, count_text_file, settle_build


def _count_file(
    path: str, recipe: CounterRecipe, settings: dict[str, Any], threads: int, *, skip_bad_records: bool
) -> tuple[Any, BadRecords | None, str]:
    """A Ray task: one corpus file's table, its bad records, and an error ('' if none)."""
    try:
        table, bad = count_text_file(Path(path), recipe, settings, workers=threads, skip_bad_records=skip_bad_records)
    except MiaFastError as exc:
        return None, None, str(exc)
    return table, bad, ""


@contextmanager
def _ray_or_nothing_made(address: str | None, made: ShardCheckpoints | None) -> Iterator[Any]:
    """A Ray session (:func:`ray_session`); where Ray cannot be reached, the checkpoint folder ``made`` for it is
    removed: it holds only its manifest, as no task ran."""
    try:
        with ray_session(address) as ray:
            yield ray
    except RayUnreachable:
        if made:
            made.remove()
        raise


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
) -> BuildReport:
    """:func:`mia_fast.frequency.text_build.build_from_text` with each corpus file counted in a Ray task of its
    own (``threads`` workers and as many CPUs each), the tables added in file order: the same table and report.
    The counting tokenizer is chosen (and checked) here, once, as ``counting.tokenizer_backend`` says; every task
    counts with it.
    Finished files are kept in ``checkpoint_dir`` as they come back, so a rerun skips them; a cluster that cannot be
    reached leaves nothing there that was not there before.
    The files must be at paths every node can read; the tables come back to this process."""
    started = time.perf_counter()
    if threads < 1:
        raise MiaFastError(f"--workers must be positive, got {threads}")
    address = cluster_address(address)
    settings, files, choice = settle_build(sources, tokenizer, counting, corpus)
    counting_started = time.perf_counter()
    made_here = bool(checkpoint_dir) and not check_checkpoints(Path(checkpoint_dir))
    checkpoints = ShardCheckpoints(Path(checkpoint_dir), settings, files) if checkpoint_dir else None
    tables: list[Any] = [None] * len(files)
    bads = [BadRecords(skip=corpus.skip_bad_records) for _ in files]
    for index in range(len(files)):
        finished = checkpoints.load(index) if checkpoints else None
        if finished is not None:
            tables[index], bads[index].count = finished
    resumed = sum(table is not None for table in tables)
    todo = [index for index, table in enumerate(tables) if table is None]
    sizes = [path.stat().st_size for path in files]
    if todo:
        with _ray_or_nothing_made(address, checkpoints if made_here else None) as ray:
            bar = _bytes_bar(sum(sizes), sum(sizes) - sum(sizes[i] for i in todo), progress=progress)
            count = ray.remote(num_cpus=threads)(_count_file)
            shared_recipe = ray.put(choice.recipe)
            pending = {
                count.remote(
                    str(files[i]), shared_recipe, settings, threads, skip_bad_records=corpus.skip_bad_records
                ): i
                for i in todo
            }
            try:
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                    index = pending.pop(ready[0])
                    try:
                        table, found, error = ray.get(ready[0])
                    except ray.exceptions.RayError as exc:
                        raise MiaFastError(
                            f"{files[index]}: the Ray task failed: {last_line(exc)}; rerun to continue"
                        ) from None
                    if error:
                        raise MiaFastError(error)
                    tables[index], bads[index] = table, found
                    if checkpoints:
                        checkpoints.save(index, table, found.count)
                    bar.update(sizes[index])
            finally:
                for ref in pending:
                    ray.cancel(ref)
                bar.close()
    table = FrequencyTable.merge(tables, allow_overlap=True)  # distinct files (expand_sources), even if alike
    if table.tokens == 0:
        raise no_tokens(files)
    bad = BadRecords(skip=corpus.skip_bad_records)
    for found in bads:
        bad.add(found)
    seconds = time.perf_counter() - started
    counting = time.perf_counter() - counting_started
    return BuildReport(table, bad, resumed, seconds, counting, sum(sizes), choice.counter.library)


def _bytes_bar(total: int, done: int, *, progress: bool) -> Any:
    """A progress bar over the corpus's bytes, the files already counted done."""
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
