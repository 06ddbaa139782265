"""Reading and writing data: labelled text files, the field's benchmark suites, and score outputs.

- ``readers``: reading each file format, streamed (lines, JSON lines, csv, parquet, JSON arrays), with positions
- ``fields``: which fields of a row hold what (``Fields``), and each read from a row (text, label, neighbours)
- ``files``: a data file as a ``Dataset`` or a ``DataStream``, checked before scoring; records from a row position
- ``formats``: the output formats, one class each, and their registry (``OUTPUT_FORMATS``)
- ``outputs``: ``ResultWriter``, a resumable output written block by block, and its manifest
- ``run_outputs``: ``RunOutputs``, the one owner of a run's files (the scores and the files beside them)
- ``side_files``: the paths beside an output (stage, manifest, run file) and their check
- ``gate``: the output gate every writing command passes first
- ``artefacts``: atomic replacement, checksummed JSON artefacts, the exclusive lock on an output
- ``suites``: the field's benchmarks (``SUITES``), their layout and leakage; ``suite_loading``: loading one, from
  the hub or local files
- ``text``: words as the benchmarks count them
"""

from mia_fast.data.fields import Fields, parse_label
from mia_fast.data.files import (
    Dataset,
    DataStream,
    input_suffixes,
    read_dataset,
    read_rows,
    read_scores,
    read_texts,
)
from mia_fast.data.formats import OUTPUT_FORMATS, OutputFormat, output_suffixes, register_format
from mia_fast.data.outputs import ResultWriter
from mia_fast.data.suite_loading import load_suite
from mia_fast.data.suites import SUITES

__all__ = [
    "OUTPUT_FORMATS",
    "SUITES",
    "Dataset",
    "DataStream",
    "Fields",
    "OutputFormat",
    "ResultWriter",
    "input_suffixes",
    "load_suite",
    "output_suffixes",
    "parse_label",
    "read_dataset",
    "read_rows",
    "read_scores",
    "read_texts",
    "register_format",
]
