"""Token-frequency tables of a reference corpus (for DC-PDD).

- ``table``: the table, its checked file format, merge and smoothing
- ``build``: the Python face of the native counting core, what a table counts (``Counting``), and the batch counter
  that tokenizes with a counting tokenizer and counts
- ``corpus``: text corpus files (a file, a directory of shards, a glob) and their documents, bad records skipped
  or refused
- ``pieces``: a corpus file cut into pieces that workers read on their own
- ``counting_tokenizers``: the libraries that tokenize a build, and the check that lets fastokens count
- ``text_build``: a table from text corpora, its pieces counted by worker threads or processes, added in file order
- ``checkpoints``: the finished files of a text build kept, so that a rerun resumes
- ``token_files``: a table from pre-tokenized files (raw streams, .npy, Megatron .bin/.idx)
- ``progress``: the progress bar of a build
"""

from mia_fast.frequency.build import Counting
from mia_fast.frequency.corpus import CorpusFormat
from mia_fast.frequency.table import FrequencyTable, FrequencyTableError
from mia_fast.frequency.text_build import BuildReport, build_from_text
from mia_fast.frequency.token_files import build_from_tokens

__all__ = [
    "BuildReport",
    "Counting",
    "CorpusFormat",
    "FrequencyTable",
    "FrequencyTableError",
    "build_from_text",
    "build_from_tokens",
]
