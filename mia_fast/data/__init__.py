"""Reading and writing data: labelled text files, the field's benchmark suites, and score outputs."""

from mia_fast.data.files import (
    Dataset,
    DataStream,
    input_suffixes,
    parse_label,
    read_dataset,
    read_rows,
    read_scores,
    read_texts,
)
from mia_fast.data.formats import OUTPUT_FORMATS, OutputFormat, output_suffixes, register_format
from mia_fast.data.outputs import ResultWriter
from mia_fast.data.suites import LEAKAGE, SUITES, load_suite

__all__ = [
    "LEAKAGE",
    "OUTPUT_FORMATS",
    "SUITES",
    "Dataset",
    "DataStream",
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
