"""The texts of a controlled contamination experiment: the default corpus (passages of the Python standard library's
own documentation, the docstrings shipped with this interpreter, so it exists on every machine without a network), a
corpus file, distinct texts drawn at random and cut to a number of tokens, and the seeded i.i.d. split into members and
non-members.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.frequency.corpus import BadRecords, expand_sources, iter_documents

MIN_TEXTS = 8
STDLIB_MODULES = (
    "argparse",
    "array",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "cmath",
    "codecs",
    "collections",
    "colorsys",
    "concurrent.futures",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "graphlib",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "html.parser",
    "http.client",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "locale",
    "logging",
    "lzma",
    "math",
    "mimetypes",
    "numbers",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "platform",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "socket",
    "sqlite3",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "wave",
    "weakref",
    "xml.etree.ElementTree",
    "zipfile",
    "zlib",
)
_MIN_DOC_WORDS = 40


def stdlib_corpus(modules: Sequence[str] = STDLIB_MODULES) -> list[str]:
    """Docstrings of at least 40 words of standard-library modules, their public functions, classes and
    methods, deduplicated and in a fixed order."""
    docs: set[str] = set()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        objects: list[Any] = [module]
        for attribute in dir(module):
            value = getattr(module, attribute, None)
            if attribute.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            objects.append(value)
            if inspect.isclass(value):
                objects += [v for a, v in vars(value).items() if not a.startswith("_") and callable(v)]
        docs.update(d for d in map(inspect.getdoc, objects) if d and len(d.split()) >= _MIN_DOC_WORDS)
    if not docs:
        raise MiaFastError(
            "found no standard-library docstrings (is Python running with -OO?); pass a corpus with --corpus"
        )
    return sorted(docs)


def read_corpus(path: str | Path, text_field: str = "text") -> list[str]:
    """Texts of a corpus file, in any format ``freq build`` reads (a .txt a text per line, JSON lines, parquet)."""
    return [text for source in expand_sources([path]) for text, _ in iter_documents(source, text_field, BadRecords())]


def prepare_texts(texts: Sequence[str], tokenizer: Any, count: int, max_tokens: int, seed: int) -> list[str]:
    """``count`` distinct texts drawn at random (seeded), each cut to its first ``max_tokens`` tokens."""
    unique = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
    if len(unique) < max(count, MIN_TEXTS):
        raise MiaFastError(
            f"the corpus has {len(unique)} distinct texts; the experiment needs {max(count, MIN_TEXTS)} (at least "
            f"{MIN_TEXTS} to split)"
        )
    order = np.random.default_rng(seed).permutation(len(unique))[:count]
    cut = []
    for i in order:
        ids = tokenizer(unique[i], add_special_tokens=False)["input_ids"][:max_tokens]
        cut.append(tokenizer.decode(ids).strip())
    return cut


def split_members(texts: Sequence[str], seed: int) -> tuple[list[str], list[str]]:
    """A seeded i.i.d. split into two halves: (members, non-members)."""
    order = np.random.default_rng(seed + 1).permutation(len(texts))
    half = len(texts) // 2
    return [texts[i] for i in order[:half]], [texts[i] for i in order[half:]]
