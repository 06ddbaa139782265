"""A tokenizer's fingerprint: equal fingerprints, equal ids for the same text. A frequency table records the
fingerprint of the tokenizer that counted it; an engine's provenance and its stats cache record the one it runs."""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of a tokenizer's vocabulary, merges and added tokens (hex).

    Equal fingerprints mean the same ids for the same text pieces. Serialisation details that vary
    between ``tokenizers`` versions (merges as "a b" strings or as pairs) are normalised away.
    """
    rust = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    with _collector_paused():  # a vocabulary is 10^5-10^6 new objects: the collector would walk them again and again
        if rust is not None and hasattr(rust, "to_str"):
            spec = msgspec.json.decode(rust.to_str())  # the values json reads, 5x faster
            model = spec.get("model", {})
            vocab = model.get("vocab", {})
            merges = [m.split(" ", 1) if isinstance(m, str) else m for m in model.get("merges", [])]
            canonical = {
                "type": model.get("type"),
                "vocab": sorted(vocab.items(), key=lambda kv: kv[1]) if isinstance(vocab, dict) else vocab,
                "merges": merges,
                "added": sorted((t["id"], t["content"]) for t in spec.get("added_tokens", [])),
            }
        else:
            canonical = {"vocab": sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])}
        text = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
