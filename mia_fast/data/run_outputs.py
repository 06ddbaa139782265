"""The files one scoring run writes, owned together: its scores and the files beside them (the online windows), each
a :class:`~mia_fast.data.outputs.ResultWriter`, under the output's lock. Opened, resumed, written and closed as one."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mia_fast.data.artefacts import OutputLock
from mia_fast.data.outputs import ResultWriter
from mia_fast.errors import MiaFastError

Rows = Sequence[Mapping[str, Any]]


class RunOutputs:
    """The scores written to ``out`` in ``columns``, and each file of ``beside`` (path: its columns) next to them, all
    recorded with ``settings``, the columns of ``text_columns`` written as text (see ResultWriter), continued with
    ``resume`` or replaced with ``overwrite``, the run file written beside the scores. A context manager: entering
    takes the lock and opens every file (only reading: see ResultWriter); leaving closes them, or after a failure
    abandons them (finished blocks stay), and lets the lock go.

    A file beside the scores is written, and closed, before them: after an interrupted run it may hold more rows than
    the scores, never fewer, and it is cut back to theirs when opened."""

    def __init__(
        self,
        out: Path,
        columns: Sequence[str],
        *,
        beside: Mapping[Path, Sequence[str]],
        resume: bool,
        overwrite: bool,
        settings: Mapping[str, Any],
        run_file: str | None,
        text_columns: Collection[str] = (),
    ) -> None:
        self.path = Path(out)
        self._lock = OutputLock(self.path)
        self._opening = (
            columns,
            dict(beside),
            {"resume": resume, "overwrite": overwrite, "settings": settings, "text_columns": text_columns},
        )
        self._run_file = run_file
        self._scores: ResultWriter | None = None
        self._beside: dict[Path, ResultWriter] = {}

    def __enter__(self) -> RunOutputs:
        self._lock.acquire()
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise
        return self

    def _open(self) -> None:
        columns, beside, options = self._opening
        self._scores = ResultWriter(self.path, columns, run_file=self._run_file, **options)
        for path, its_columns in beside.items():
            writer = ResultWriter(path, its_columns, **options)
            writer.keep_rows(self._scores.done_rows, self.path)
            self._beside[path] = writer

    def __exit__(self, kind: type[BaseException] | None, *exc_info: Any) -> None:
        try:
            for writer in self._writers():
                if kind is None:
                    writer.close()
                else:
                    writer.abandon()
        finally:
            self._lock.release()

    def _writers(self) -> list[ResultWriter]:
        """Every writer, those beside the scores first: written, and closed, first."""
        return [*self._beside.values(), self.scores]

    @property
    def scores(self) -> ResultWriter:
        if self._scores is None:
            raise MiaFastError(f"the outputs of {self.path} are not open")
        return self._scores

    @property
    def done_rows(self) -> int:
        return self.scores.done_rows

    def check_input_rows(self, fingerprints: Sequence[bytes], describe: str) -> None:
        """See :meth:`ResultWriter.check_input_rows`: the scores' blocks are those the input is checked against."""
        self.scores.check_input_rows(fingerprints, describe)

    def check_engines(self, engines: Mapping[str, Any]) -> None:
        """Each file must have been scored by the engines of ``engines`` (a new one records them)."""
        for writer in self._writers():
            writer.check_engines(engines)

    def write(self, rows: Rows, fingerprints: Sequence[bytes], beside: Mapping[Path, Rows]) -> None:
        """One block: the rows of each file beside the scores (``beside``, by path), then the scores' ``rows``, each
        with the digest of the input rows of ``fingerprints``. A failed write is refused in one line saying what
        was kept."""
        scores = self.scores
        try:
            for path, its_rows in beside.items():
                self._beside[path].write(its_rows, fingerprints)
            scores.write(rows, fingerprints)
        except OSError as exc:
            kept = f"the {scores.done_rows} rows finished are kept: continue with --resume" if scores.done_rows else ""
            raise MiaFastError(
                f"cannot write {scores.path}: {exc.strerror or exc}; {kept or 'nothing was written'}"
            ) from None

    def written_column(self, name: str) -> Iterator[Any]:
        """A column of the scores written so far."""
        return self.scores.written_column(name)
