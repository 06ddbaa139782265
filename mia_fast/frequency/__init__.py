"""Token-frequency tables of a reference corpus (for DC-PDD): the table and its file (``table``), the
native counting core (``build``), and the corpus files it reads (``sources``)."""

from mia_fast.frequency.sources import BuildReport, CorpusFormat, Counting, build_from_text, build_from_tokens
from mia_fast.frequency.table import FrequencyTable, FrequencyTableError

__all__ = [
    "BuildReport",
    "Counting",
    "CorpusFormat",
    "FrequencyTable",
    "FrequencyTableError",
    "build_from_text",
    "build_from_tokens",
]
