"""The tokenizers a text build counts with, and the check that earns the fast one its place.

Three libraries can tokenize a corpus as the model does: ``fastokens`` (its flat buffers of ids go straight to the
native counter, no Python object per token), HF ``tokenizers`` (the model's own Rust tokenizer: exact by definition)
and a slow Python tokenizer of transformers, where that is all a model has. ``choose_counter`` picks one for a
backend (``auto``, ``fast``, ``exact``): the fast library counts only after it has tokenized a sample of the corpus
and a fixed set of hard strings exactly as the model's own tokenizer does. A :class:`CounterRecipe` is what a worker
process builds its counting tokenizer from, so every worker counts with the library the check accepted.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import itertools
import json
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from mia_fast.data.text import replace_lone_surrogates
from mia_fast.errors import MiaFastError, one_line, shown

TOKENIZER_BACKENDS = ("auto", "fast", "exact")
FAST, EXACT, PYTHON = "fastokens", "tokenizers", "transformers"
# Added tokens spelled inside the hard strings: enough to cover every kind a tokenizer has, few enough to stay quick.
SPELLED_SPECIAL_TOKENS = 64

# Strings where tokenizer implementations part ways: whitespace runs and line ends, scripts without spaces,
# grapheme clusters, combining marks, invisible characters, lone surrogates (cleaned as the build cleans them), very
# long words and digits. The check tokenizes each of them, and the corpus's first documents, with both libraries.
HARD_STRINGS = (
    "",
    " ",
    "  leading and trailing spaces  ",
    "a  b   c    d\t\te\t \tf",
    "line one\nline two\n\n\nafter blank lines\n",
    "windows\r\nline\r\nends\r\n\r\n",
    "a lone\rcarriage return",
    "\n\n\n\n",
    "\t\t\t\tindented\n    four spaces\n        eight",
    "    def f(x):\n        return x ** 2  # comment\n",
    "预训练数据检测需要一个可靠的词频表。他说：“明天再来。”",
    "日本語のテキストとカタカナ、ひらがな。漢字も。",
    "한국어 텍스트입니다. 띄어쓰기가 있습니다.",
    "العربية من اليمين إلى اليسار، مع أرقام ١٢٣",
    "हिन्दी में लिखा गया पाठ, क्षत्रिय",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Ελληνικά και кириллица вместе",
    "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs, 🇺🇸🇯🇵 flags, 😀😃😄",
    "e\u0301 a\u0308 n\u0303 o\u0302\u0323 Z\u0335\u0321\u031b\u0330a\u0337lgo",
    "caf\u00e9 vs cafe\u0301 (NFC vs NFD)",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u00a0nbsp\u2028line\u2029para",
    "control \x00 \x01 \x1b[31m \x7f \x85 characters",
    "replacement \ufffd and private use \ue000 \U000f0000",
    "lone \ud800 high and \udfff low surrogates",
    "\udbff\udc00 reversed pair \udc00\ud800",
    "x" * 5000,
    "Pneumonoultramicroscopicsilicovolcanoconiosis" * 40,
    "https://example.com/a/very/long/path?query=value&other=1#fragment_" + "z" * 300,
    "1234567890" * 60,
    "3.14159 2,718,281 1e-10 0x1F 007 -42 +17 ½ ² ① ٣",
    "MiXeD CaSe, ALLCAPS, snake_case, camelCaseWord, kebab-case",
    "punctuation!!! ??? ... --- ''' \"\"\" ((([[[{{{}}}]]])))",
    "’curly’ “quotes” «guillemets» „low“ ‹single›",
)


class CountingTokenizer(Protocol):
    """A tokenizer as a build counts with it: the library and version that tokenized, whether its encoding lets
    other threads run (else a build's workers are processes), and the ids of a batch of texts as one flat buffer."""

    library: str
    releases_gil: bool

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids as uint32, int64 offsets of len(texts) + 1: text i's ids are ids[offsets[i]:offsets[i + 1]])."""
        ...


def library_version(name: str) -> str:
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def _flat(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    offsets = np.zeros(len(id_lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.uint32, count=int(offsets[-1]))
    return ids, offsets


class FastokensCounter:
    """``fastokens`` over the model's ``tokenizer.json``: one flat buffer of ids per batch. A text it refuses (a byte
    the vocabulary has no token for, where the model's tokenizer drops it) is the model's own tokenizer's."""

    releases_gil = True

    def __init__(self, tokenizer_json: str):
        import fastokens  # noqa: PLC0415 (may be missing: choose_counter falls back to tokenizers)

        self._tokenizer = fastokens.Tokenizer.from_json_str(tokenizer_json)
        self._spec = tokenizer_json
        self._exact: RustCounter | None = None
        self.library = library_version("fastokens")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            ids, offsets = self._tokenizer.encode_batch_flat(texts, add_special_tokens=False)
        except ValueError:
            return _flat([self._ids(text) for text in texts])
        return np.frombuffer(ids, dtype="<u4"), np.frombuffer(offsets, dtype="<u8").view(np.int64)

    def _ids(self, text: str) -> list[int]:
        try:
            return np.frombuffer(self._tokenizer.encode_batch_flat([text])[0], dtype="<u4").tolist()
        except ValueError:
            self._exact = self._exact or RustCounter(self._spec)
            return self._exact.encode([text])[0].tolist()


class RustCounter:
    """The model's own HF ``tokenizers`` tokenizer: built from its ``tokenizer.json``, or the model's object itself
    where it neither truncates nor pads (it is only read)."""

    releases_gil = True

    def __init__(self, tokenizer: str | Any):
        self._tokenizer = Tokenizer.from_str(tokenizer) if isinstance(tokenizer, str) else tokenizer
        self._encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self.library = library_version("tokenizers")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return _flat([encoding.ids for encoding in self._encode(texts, add_special_tokens=False)])


class PythonCounter:
    """A slow (Python) tokenizer of transformers, where a model has no ``tokenizer.json``: it holds the GIL."""

    releases_gil = False

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self.library = library_version("transformers")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return _flat([self._tokenizer.encode(text, add_special_tokens=False) for text in texts])


_BUILDERS = {FAST: FastokensCounter, EXACT: RustCounter, PYTHON: PythonCounter}
# Counting tokenizers built in this process, by recipe key: a worker builds its own once, from its recipe; a thread
# that wants one another thread is building waits for it.
_LOADED: dict[str, CountingTokenizer] = {}
_BUILDING: dict[str, threading.Lock] = {}
_BUILDING_GUARD = threading.Lock()


@dataclass(frozen=True, eq=False)
class CounterRecipe:
    """What a counting tokenizer is built from, sent once to each worker process: ``kind`` names the library and
    ``source`` is the ``tokenizer.json`` text (``fastokens``, ``tokenizers``) or the slow tokenizer itself."""

    kind: str
    source: Any

    @functools.cached_property  # a hash of the whole tokenizer.json (tens of MB for a large vocabulary): once
    def key(self) -> str:
        if isinstance(self.source, str):
            return f"{self.kind}:{hashlib.sha256(self.source.encode('utf-8')).hexdigest()}"
        return f"{self.kind}:{id(self.source)}"

    def load(self) -> CountingTokenizer:
        """The counting tokenizer, built once per process."""
        key = self.key
        with _BUILDING_GUARD:
            building = _BUILDING.setdefault(key, threading.Lock())
        with building:
            if key not in _LOADED:
                _LOADED[key] = _BUILDERS[self.kind](self.source)
        return _LOADED[key]


def loaded(key: str) -> CountingTokenizer:
    """The counting tokenizer this process built for the recipe with ``key``."""
    return _LOADED[key]


def forget_loaded() -> None:
    """Drops the counting tokenizers this process built, so that the next build loads its own anew (as a user's
    build does: a benchmark's rounds would otherwise share one, and its word cache)."""
    _LOADED.clear()


# A build runs one worker per core, so each library encodes on the thread that calls it: their own pools would
# oversubscribe the cores (measured: 2 workers 1.2x slower with them).
_ONE_THREAD = {"RAYON_NUM_THREADS": "1", "FASTOKENS_BPE_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def one_thread_per_worker() -> None:
    """Keeps the tokenizer libraries of this process to the thread that calls them, unless the environment says
    otherwise; it must run before either library first encodes (their thread pools start then)."""
    for name, value in _ONE_THREAD.items():
        os.environ.setdefault(name, value)


def start_worker(recipe: CounterRecipe) -> None:
    """A worker process's start: its libraries on one thread, Ctrl-C left to the build (which stops the workers), and
    its counting tokenizer built."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(_ONE_THREAD)
    recipe.load()


def tokenizer_json(tokenizer: Any) -> str | None:
    """The ``tokenizer.json`` of a transformers fast tokenizer or a ``tokenizers.Tokenizer``, without truncation or
    padding (a count covers every token of a document); None for a slow tokenizer."""
    rust = _rust(tokenizer)
    if rust is None:
        return None
    if _plain(rust):
        return rust.to_str()
    spec = json.loads(rust.to_str())
    spec["truncation"] = spec["padding"] = None
    return json.dumps(spec, ensure_ascii=False)


def _rust(tokenizer: Any) -> Any:
    rust = getattr(tokenizer, "backend_tokenizer", tokenizer)
    return rust if hasattr(rust, "to_str") else None


def _plain(rust: Any) -> bool:
    """Whether a ``tokenizers.Tokenizer`` neither truncates nor pads."""
    return getattr(rust, "truncation", None) is None and getattr(rust, "padding", None) is None


def check_strings(tokenizer_spec: str) -> list[str]:
    """The hard strings, and each of the tokenizer's first added tokens spelled inside a text."""
    added = [token.get("content", "") for token in json.loads(tokenizer_spec).get("added_tokens", [])]
    spelled = [f"text{content}spells {content}{content} it" for content in added[:SPELLED_SPECIAL_TOKENS] if content]
    return [*HARD_STRINGS, *spelled]


@dataclass(frozen=True)
class CheckEncoding:
    """The ids a counting tokenizer gives the check's texts, and its library."""

    library: str
    ids: np.ndarray
    offsets: np.ndarray


def check_encoding(counter: CountingTokenizer, texts: Sequence[str]) -> CheckEncoding:
    """``texts`` tokenized by ``counter``, each lone surrogate replaced as a build replaces it."""
    ids, offsets = counter.encode([replace_lone_surrogates(text)[0] for text in texts])
    return CheckEncoding(counter.library, ids, offsets)


def first_difference(fast: CheckEncoding, exact: CheckEncoding) -> tuple[int, str] | None:
    """(index of the first text the two encodings tokenize differently, what differs), or None when every id
    agrees."""
    if np.array_equal(fast.offsets, exact.offsets) and np.array_equal(fast.ids, exact.ids):
        return None
    for index in range(len(fast.offsets) - 1):
        a = fast.ids[fast.offsets[index] : fast.offsets[index + 1]].tolist()
        b = exact.ids[exact.offsets[index] : exact.offsets[index + 1]].tolist()
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return index, (
                f"from token {at}: {fast.library.split()[0]} gives {a[at : at + 4]}, "
                f"{exact.library.split()[0]} {b[at : at + 4]} ({len(a)} vs {len(b)} tokens)"
            )
    return None  # the same ids, cut into texts at the same places


@dataclass(frozen=True)
class CounterChoice:
    """The counting tokenizer a build uses (its recipe, and the tokenizer loaded here) and, where the fast library
    was wanted and refused, the one line that says why."""

    recipe: CounterRecipe
    counter: CountingTokenizer
    fell_back: str | None = None


def preload_fast(tokenizer: Any, backend: str = "auto") -> None:
    """Builds the fast library's counting tokenizer ahead of :func:`choose_counter`, on a thread of its own: it lets
    other threads run while it builds (0.4 s for a 49k vocabulary), so a build computes its settings and the model's
    tokenizer encodes the check's texts meanwhile. A failure is left for ``choose_counter`` to report."""
    spec = tokenizer_json(tokenizer) if backend != "exact" else None
    if spec is not None:
        try:
            CounterRecipe(FAST, spec).load()
        except Exception:  # said in one line by choose_counter, which tries again
            pass


def choose_counter(tokenizer: Any, backend: str = "auto", sample: Sequence[str] = ()) -> CounterChoice:
    """The counting tokenizer for ``backend``: ``exact`` counts with the model's own tokenizer (HF ``tokenizers``, or
    the slow tokenizer a model may have instead); ``fast`` with ``fastokens``, refused in one line where it cannot
    load the tokenizer or gives another id than the model's tokenizer for any text of ``sample`` (the corpus's first
    documents) or of the hard strings; ``auto`` with ``fastokens`` where ``fast`` would, else exactly, with the reason
    in ``fell_back``."""
    if backend not in TOKENIZER_BACKENDS:
        raise MiaFastError(
            f"the tokenizer backend must be one of {', '.join(TOKENIZER_BACKENDS)}, got {shown(backend)}"
        )
    spec = tokenizer_json(tokenizer)
    if spec is None:
        if backend == "fast":
            raise MiaFastError(
                "--tokenizer-backend fast needs a fast tokenizer (a tokenizer.json); this one is a slow Python "
                "tokenizer: use --tokenizer-backend exact"
            )
        return _exact(CounterRecipe(PYTHON, tokenizer))
    exact_recipe = CounterRecipe(EXACT, spec)
    if _plain(_rust(tokenizer)):  # the model's own object counts as it is: no copy to build
        _LOADED.setdefault(exact_recipe.key, RustCounter(_rust(tokenizer)))
    exact = _exact(exact_recipe)
    if backend == "exact":
        return exact
    texts = [*sample, *check_strings(spec)]
    expected = check_encoding(exact.counter, texts)  # meanwhile preload_fast may be building the fast one
    fast = CounterRecipe(FAST, spec)
    try:
        counter = fast.load()
    except ImportError:
        reason = "fastokens is not installed (pip install fastokens)"
    except Exception as exc:  # the library's own refusal of a tokenizer.json: any type, said in one line
        reason = f"{library_version('fastokens')} cannot load this tokenizer ({one_line(exc, 200)})"
    else:
        difference = first_difference(check_encoding(counter, texts), expected)
        if difference is None:
            return CounterChoice(fast, counter)
        index, what = difference
        where = f"the check string {shown(texts[index])}"
        if index < len(sample):
            where = f"document {index + 1} of the corpus"
        reason = f"{counter.library} tokenizes {where} differently from {exact.counter.library}, {what}"
    if backend == "fast":
        raise MiaFastError(f"{reason}; count with --tokenizer-backend exact (or auto)")
    return CounterChoice(exact.recipe, exact.counter, f"{reason}: counting with {exact.counter.library} instead")


def _exact(recipe: CounterRecipe) -> CounterChoice:
    return CounterChoice(recipe, recipe.load())
