"""A tokenizer's identity: equal fingerprints, equal ids for the same text. A frequency table records the
fingerprint of the tokenizer that counted it; an engine's provenance, its stats cache and the resume manifests of
``score`` and ``freq build`` record the one they run.

The fingerprint covers every part of ``tokenizer.json`` that can change an id, each with its own digest so that a
mismatch names the part that differs::

    tok2:<16 hex over all parts>:model=<12 hex>,normalizer=<12 hex>,pre_tokenizer=<12 hex>,
         post_processor=<12 hex>,added_tokens=<12 hex>          (one line, no spaces)

``model`` is the model section whole (type, vocabulary, merges and options such as dropout, byte_fallback, unk_token,
continuing_subword_prefix, fuse_unk, ignore_merges); ``added_tokens`` are the added tokens with every flag (special,
single_word, lstrip, rstrip, normalized). The decoder, padding and truncation cannot change an id and are left out.
The model's vocabulary and merges are hashed as tokenizers serialises them, undecoded (decoding a 262k vocabulary
costs a second): ordered by id and by rank, merges as pairs in every version this package supports (>= 0.22.1). Its
options are decoded, and one absent or written at its default (null, false) counts as the same, as versions add
options. A tokenizer without a ``tokenizer.json`` (a slow one) is known by its vocabulary alone:
``tok2:<16 hex>:vocab=<12 hex>``.

The model's digest is the costly part (0.4 s for a 262k vocabulary, nearly all of it tokenizers serialising the
model). A tokenizer loaded from a ``tokenizer.json`` (:func:`note_tokenizer_file`) keeps it on disk, keyed by the
file's sha256 as it was loaded, the model's type, size and options, and the tokenizers and transformers versions
that built it: a second load of the same file costs its sha256 (30 ms for 33 MB).

Fingerprints written before this identity (64 hex, over the model type, vocabulary, merges and added tokens' ids and
contents only) are recognised by ``is_legacy_fingerprint``; ``tokenizer_mismatch`` says what can be said of them.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import re
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from mia_fast.data.outputs import digest_parts

PREFIX = "tok2"
_DIFFERS = {
    "model": "their models differ (vocabulary, merges or options such as dropout, byte_fallback and unk_token)",
    "normalizer": "their normalizers differ",
    "pre_tokenizer": "their pre-tokenizers differ",
    "post_processor": "their post-processors differ",
    "added_tokens": "their added tokens differ (flags included)",
    "vocab": "their vocabularies differ",
}
_LEGACY = re.compile(r"[0-9a-f]{64}")
# The tokenizer objects already fingerprinted: their model's type, size and options, and the model's digest.
_MEMO: weakref.WeakKeyDictionary[Any, tuple[tuple, str]] = weakref.WeakKeyDictionary()
# The tokenizer objects loaded from a tokenizer.json: the file's sha256 when it was loaded, and the folder that keeps
# model digests by it.
_FILES: weakref.WeakKeyDictionary[Any, tuple[str, Path]] = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """The identity of everything in ``tokenizer`` that can change an id (see the module's docstring for its form).

    The model's digest, the costly part (its whole vocabulary and merges), is computed once per tokenizer object and
    kept while the model's type, size and options stay the same: its vocabulary and merges cannot change in place
    (only a model replaced whole by one of the same type, size and options would go unseen; mia-fast replaces none).
    """
    rust = _backend(tokenizer)
    if rust is None:
        return _render({"vocab": _digest(sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]))})
    shape = _model_shape(rust)
    try:
        known = _MEMO.get(tokenizer)
    except TypeError:  # an object that takes no weak reference (or no hash) is fingerprinted in full each time
        known = None
    if known is not None and known[0] == shape:
        model = known[1]
    else:
        model = _kept_model_digest(tokenizer, rust, shape)
        with contextlib.suppress(TypeError):
            _MEMO[tokenizer] = (shape, model)
    added = rust.get_added_tokens_decoder()
    return _render(
        {
            "model": model,
            "normalizer": _digest(_state(rust.normalizer)),
            "pre_tokenizer": _digest(_state(rust.pre_tokenizer)),
            "post_processor": _digest(_state(rust.post_processor)),
            "added_tokens": _added_tokens_digest(added),
        }
    )


def note_tokenizer_file(tokenizer: Any, path: Path, kept_in: Path) -> None:
    """Records that ``tokenizer`` was just loaded from ``path`` (a tokenizer.json), so that its model's digest is kept
    in the folder ``kept_in`` by the file's content (see the module's docstring). No file, or one that cannot be read:
    the digest is computed each time, as for a tokenizer built in memory."""
    try:
        _FILES[tokenizer] = (hashlib.sha256(path.read_bytes()).hexdigest(), kept_in)
    except (OSError, TypeError):
        return


def is_legacy_fingerprint(value: object) -> bool:
    """Whether ``value`` is a fingerprint of an older mia-fast (64 hex: vocabulary, merges and added tokens only)."""
    return isinstance(value, str) and _LEGACY.fullmatch(value) is not None


def tokenizer_mismatch(recorded: str | None, current: str, tokenizer: Any = None) -> str | None:
    """None when ``recorded`` and ``current`` name the same tokenizer; else a lower-case clause saying what differs.

    A legacy ``recorded`` fingerprint is compared with the legacy fingerprint of ``tokenizer`` (the one ``current``
    was computed from): either even its vocabulary, merges or added tokens differ, or a match cannot be proven.
    """
    if recorded == current:
        return None
    if recorded is None:
        return "the recorded tokenizer is unknown"
    if is_legacy_fingerprint(recorded):
        if tokenizer is not None and recorded != _legacy_fingerprint(tokenizer):
            return "even their vocabularies, merges or added tokens differ"
        return (
            "it was recorded by an older mia-fast whose fingerprint covered only the vocabulary, merges and added "
            "tokens, so a match cannot be proven"
        )
    theirs, ours = _parts(recorded), _parts(current)
    if theirs is None or ours is None:
        return f"their fingerprints differ ({recorded[:24]!r}, {current[:24]!r})"
    differing = [_DIFFERS.get(part, f"their {part} differ") for part in theirs if theirs[part] != ours.get(part)]
    differing += [_DIFFERS.get(part, f"their {part} differ") for part in ours if part not in theirs]
    return "; ".join(dict.fromkeys(differing)) or "their fingerprints differ"


def legacy_parts_match(recorded: str, tokenizer: Any) -> bool:
    """Whether a legacy fingerprint equals ``tokenizer``'s legacy one: its vocabulary, merges and added tokens agree."""
    return recorded == _legacy_fingerprint(tokenizer)


def _backend(tokenizer: Any) -> Any:
    rust = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    return rust if rust is not None and hasattr(rust, "to_str") else None


def _model_shape(rust: Any) -> tuple:
    model = rust.model
    options = tuple((name, getattr(model, name)) for name in sorted(dir(model)) if _is_option(model, name))
    return type(model).__name__, rust.get_vocab_size(with_added_tokens=False), options


def _is_option(model: Any, name: str) -> bool:
    return not name.startswith("_") and not callable(getattr(model, name))


def _kept_model_digest(tokenizer: Any, rust: Any, shape: tuple) -> str:
    """The model's digest: read from where :func:`note_tokenizer_file` keeps it, else computed (and kept there; a
    folder that cannot be written only costs the next load the computation again)."""
    try:
        source = _FILES.get(tokenizer)
    except TypeError:
        source = None
    if source is None:
        return _model_digest(rust.model.__getstate__())
    file_sha256, kept_in = source
    versions = [getattr(sys.modules.get(name), "__version__", None) for name in ("tokenizers", "transformers")]
    key = hashlib.sha256(repr((file_sha256, shape, versions)).encode()).hexdigest()[:32]
    kept = kept_in / f"{key}.model"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = kept.read_text(encoding="ascii")
        if _LEGACY.fullmatch(text):  # a sha256, as the legacy fingerprints are
            return text
    digest = _model_digest(rust.model.__getstate__())
    temporary = kept_in / f".{key}.{os.getpid()}.tmp"
    try:
        kept_in.mkdir(parents=True, exist_ok=True)
        temporary.write_text(digest, encoding="ascii")
        os.replace(temporary, kept)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return digest


def _model_digest(state: bytes) -> str:
    """sha256 of a model section as tokenizers serialises it: its options before the vocabulary with those absent or at
    their default (null, false) dropped, the vocabulary and all after it (merges, ...) as written, undecoded; a
    Unigram's scores are floats, whose text tokenizers' versions write differently, so its vocabulary is decoded."""
    head, found, body = state.partition(b',"vocab":')
    options = msgspec.json.decode(head + b"}" if found else state)
    if options.get("type") == "Unigram":
        options = msgspec.json.decode(state)
        body = _canonical(options.pop("vocab", None))
    kept = {k: v for k, v in options.items() if v is not None and v is not False}
    return hashlib.sha256(_canonical(kept) + b"\0" + body).hexdigest()


def _state(part: Any) -> Any:
    """A normalizer's, pre-tokenizer's or post-processor's section; an empty Sequence (as some conversions write) is
    none."""
    state = None if part is None else msgspec.json.decode(part.__getstate__())
    empty = (
        isinstance(state, dict)
        and state.get("type") == "Sequence"
        and not any(state.get(k) for k in state if k != "type")
    )
    return None if empty else state


def _added_tokens_digest(added: dict[int, Any]) -> str:
    """sha256 of each added token's id, content and flags (special, single_word, lstrip, rstrip, normalized), in id
    order: as rows, not objects (Gemma-3 has 6,384)."""
    rows = [
        (index, t.content, t.special, t.single_word, t.lstrip, t.rstrip, t.normalized)
        for index, t in sorted(added.items())
    ]
    return hashlib.sha256(msgspec.json.encode(rows)).hexdigest()


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _canonical(value: Any) -> bytes:
    """JSON with sorted keys (msgspec sorts them only from 0.18.5 on; these parts are small)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _render(digests: dict[str, str]) -> str:
    overall = hashlib.sha256("".join(f"{k}={v};" for k, v in digests.items()).encode()).hexdigest()
    return f"{PREFIX}:{overall[:16]}:" + ",".join(f"{k}={v[:12]}" for k, v in digests.items())


def _parts(fingerprint: str) -> dict[str, str] | None:
    return digest_parts(fingerprint) if fingerprint.startswith(f"{PREFIX}:") else None


def _legacy_fingerprint(tokenizer: Any) -> str:
    """The fingerprint older mia-fast wrote: sha256 (hex) of the model type, vocabulary, merges and added tokens."""
    rust = _backend(tokenizer)
    with _collector_paused():
        if rust is not None:
            spec = msgspec.json.decode(rust.to_str())
            model = spec.get("model", {})
            vocab = model.get("vocab", {})
            canonical = {
                "type": model.get("type"),
                "vocab": sorted(vocab.items(), key=lambda kv: kv[1]) if isinstance(vocab, dict) else vocab,
                "merges": [m.split(" ", 1) if isinstance(m, str) else m for m in model.get("merges", [])],
                "added": sorted((t["id"], t["content"]) for t in spec.get("added_tokens", [])),
            }
        else:
            canonical = {"vocab": sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])}
        text = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
