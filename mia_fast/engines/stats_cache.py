"""A TokenStats cache on disk: re-scoring with other methods, k's or caps costs no forward pass.

A cache directory holds one folder per engine setting (model weights, tokenizer, start token, window,
dtype, device type, backend: everything that changes a token's statistics), named by the hash of that
setting and described by its ``settings.json``. In it, shards in the Arrow IPC file format (open,
columnar, read by memory map without decoding; never pickle) hold one row per text: the key (sha256 of the
pass's prefix and the text as run), its length, and the text's ``target_ids``, ``logp``, ``mu``, ``var`` and
``first_occurrence``; the shard's metadata holds its setting and a CRC-32 of all of it. Every shard is written
to a temporary name and renamed, so a killed run leaves whole shards or none.

Reads are checked: a shard that does not open, belongs to another setting, or whose checksum does not
match is refused with a message, moved aside (``.rejected``) and its texts are computed again; nothing
unchecked is ever used. A cache opened only to read (``rescore``, which has no model to compute with) leaves
such a shard as it is and stops, in one line saying how to mend the cache. Reading assembles the TokenStats of
many texts with array operations, a shard at a time, so re-scoring a million cached texts takes seconds, not a
Python loop per text.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import write_atomic
from mia_fast.engines.stats import TOKEN_STATS_COLUMNS, TokenStats
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.tokens.fingerprint import is_legacy_fingerprint, tokenizer_mismatch

CACHE_FORMAT = 2
# What of an engine's setting a scores file records: the model, tokenizer, precision, device type, back end and
# windowing (the cache's other keys say how the statistics were computed, not of what).
PROVENANCE_KEYS = (
    "weights",
    "tokenizer",
    "dtype",
    "device",
    "prepend_start",
    "max_length",
    "backend",
    "server_model",
    "server",
)
# The arrays of a TokenStats as stored: ids fit int32 in every vocabulary; first occurrences as bytes.
_STORED = {
    "target_ids": np.int32,
    "logp": np.float32,
    "mu": np.float32,
    "var": np.float32,
    "max_logp": np.float32,
    "first_occurrence": np.uint8,
}
_SETTING_KEY = b"mia_fast_setting"
_CHECKSUM_KEY = b"mia_fast_crc32"


def provenance(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an engine setting (``StatsEngine.cache_settings``) that a scores file records."""
    return {key: settings[key] for key in PROVENANCE_KEYS if key in settings}


def text_key(prefix: str, text: str) -> bytes:
    """The key of one pass over one text: sha256 of its prefix and the text as run (after its transform)."""
    return hashlib.sha256(len(prefix).to_bytes(8, "little") + prefix.encode("utf-8") + text.encode("utf-8")).digest()


def cached_stats(
    cache: StatsCache | None,
    texts: Sequence[str],
    prefixes: Sequence[str] | None,
    compute: Callable[[Sequence[str], Sequence[str]], TokenStats],
) -> TokenStats:
    """The TokenStats of ``texts`` (each after its prefix): from ``cache`` where it holds them, the others from
    ``compute(texts, prefixes)`` and added to it (all of them from ``compute`` without a cache)."""
    prefixes = list(prefixes) if prefixes is not None else [""] * len(texts)
    if cache is None or cache.unwritable:
        return compute(texts, prefixes)
    keys = [text_key(prefix, text) for prefix, text in zip(prefixes, texts)]
    stats = None
    while stats is None:  # again only when a shard was refused on reading: its texts are then missing
        missing = cache.missing(keys)
        if missing:
            computed = compute([texts[i] for i in missing], [prefixes[i] for i in missing])
            if not cache.store([keys[i] for i in missing], computed):  # the cache is left alone from now on
                return computed if len(missing) == len(keys) else compute(texts, prefixes)
        stats = cache.stats(keys)
    return stats


def _checksum(keys: np.ndarray, lengths: np.ndarray, flat: Mapping[str, np.ndarray]) -> int:
    """CRC-32 of a shard's keys, lengths and every array, as read back."""
    crc = zlib.crc32(np.ascontiguousarray(keys))
    crc = zlib.crc32(np.ascontiguousarray(lengths, dtype=np.int64), crc)
    for name, dtype in _STORED.items():
        crc = zlib.crc32(np.ascontiguousarray(flat[name], dtype=dtype), crc)
    return crc


class StatsCache:
    """The cached TokenStats of one engine setting under ``directory`` (see the module docstring).

    ``log`` receives one line per refused shard; with ``read_only`` a refused shard stops the run instead. A cache
    that cannot be written (``unwritable``) is left alone for the rest of the run: it is an optimisation, the scores
    are what was asked for.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        settings: Mapping[str, Any],
        log: Callable[[str], None] = lambda message: None,
        *,
        read_only: bool = False,
    ):
        self.settings = {"format": CACHE_FORMAT, **settings}
        canonical = json.dumps(self.settings, sort_keys=True, default=str)
        self.setting_id = hashlib.sha256(canonical.encode()).hexdigest()[:24]
        self.base = Path(directory)
        if self.base.exists() and not self.base.is_dir():
            raise MiaFastError(f"--stats-cache {self.base} is a file, not a directory")
        self.root = self.base / self.setting_id
        self.log = log
        self.read_only = read_only
        self.unwritable = False
        self._index: dict[bytes, tuple[Path, int, int]] | None = None  # key -> (shard, row, length)

    def other_settings(self) -> int:
        """How many other engine settings the directory holds stats for (a cache of another model says so)."""
        return (
            sum(1 for p in self.base.glob("*/settings.json") if p.parent.name != self.setting_id)
            if self.base.is_dir()
            else 0
        )

    def describe_others(self, model: str) -> str | None:
        """One line on what the directory holds where it holds nothing of this setting (None where it holds this
        setting, or nothing): this setting's stats under a tokenizer identity of an older mia-fast (a fingerprint of
        less than the tokenizer) or of another tokenizer, not used; else how many other settings it holds."""
        others = self.other_settings()
        if not others or self.root.exists():
            return None
        ours = json.loads(json.dumps(self.settings, default=str))
        for path in sorted(self.base.glob("*/settings.json")):
            try:
                theirs = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(theirs, dict) or {**theirs, "tokenizer": None} != {**ours, "tokenizer": None}:
                continue
            recorded = theirs.get("tokenizer")
            if is_legacy_fingerprint(recorded):
                return (
                    f"stats cache {self.base}: {path.parent.name} holds the stats of {model} from an older mia-fast, "
                    "whose tokenizer identity covered only the vocabulary, merges and added tokens; they are not "
                    "used: texts are computed and added"
                )
            differs = tokenizer_mismatch(recorded if isinstance(recorded, str) else None, ours["tokenizer"])
            return (
                f"stats cache {self.base}: {path.parent.name} holds the stats of {model} under another tokenizer "
                f"({differs}); they are not used: texts are computed and added"
            )
        return (
            f"stats cache {self.base}: it holds the stats of {others} other model setting(s), none of this one "
            f"({model}); texts are computed and added"
        )

    def _refuse(self, shard: Path, reason: str) -> None:
        if self.read_only:
            raise MiaFastError(
                f"stats cache: {shard} is damaged ({reason}); it was left as it is and its texts cannot be computed "
                "here without a model: run 'mia-fast score --stats-cache' with the model and methods that wrote it, "
                "which sets the shard aside and computes its texts again"
            )
        self.log(
            f"stats cache: {shard} refused ({reason}); its texts are computed again (the file is kept as "
            f"{shard.name}.rejected)"
        )
        shard.rename(shard.with_name(shard.name + ".rejected"))
        self._index = {key: place for key, place in self._load_index().items() if place[0] != shard}

    def _read(self, shard: Path, columns: Sequence[str]):
        import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only --stats-cache needs it)

        try:
            # The map stays open while the arrays read from it live; shards are only ever replaced, never written in
            # place.
            table = pa.ipc.open_file(pa.memory_map(str(shard))).read_all().select(list(columns))
        except (OSError, ValueError, KeyError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            self._refuse(shard, f"cannot be read: {str(exc).splitlines()[0]}")
            return None
        found = (table.schema.metadata or {}).get(_SETTING_KEY)
        if found != self.setting_id.encode():
            self._refuse(
                shard, f"written for another setting ({found.decode() if found else 'none'}), not {self.setting_id}"
            )
            return None
        return table

    def _load_index(self) -> dict[bytes, tuple[Path, int, int]]:
        if self._index is None:
            self._index = {}
            for shard in sorted(self.root.glob("*.arrow")) if self.root.is_dir() else []:
                table = self._read(shard, ["key", "length"])
                if table is not None:
                    lengths = table.column("length").to_numpy()
                    self._index.update(
                        (key, (shard, row, int(lengths[row])))
                        for row, key in enumerate(table.column("key").to_pylist())
                    )
        return self._index

    def missing(self, keys: Sequence[bytes]) -> list[int]:
        """Indices of the keys the cache does not hold (each key once)."""
        index = self._load_index()
        return list({key: i for i, key in enumerate(keys) if key not in index}.values())

    def stats(self, keys: Sequence[bytes]) -> TokenStats | None:
        """The TokenStats of ``keys`` (all held by the cache), in their order; None when a shard was refused on
        reading (its keys are then missing: compute them and ask again)."""
        index = self._load_index()
        shard_of, row_of, length_of = zip(*map(index.__getitem__, keys)) if keys else ((), (), ())
        shards = list(dict.fromkeys(shard_of))
        number_of = {shard: number for number, shard in enumerate(shards)}
        shard_numbers = np.fromiter(map(number_of.__getitem__, shard_of), dtype=np.int64, count=len(keys))
        all_rows = np.array(row_of, dtype=np.int64)
        lengths = np.array(length_of, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        out = {name: np.empty(int(offsets[-1]), dtype=dtype) for name, dtype in _STORED.items()}
        for number, shard in enumerate(shards):
            flat = self._checked_shard(shard)
            if flat is None:
                return None
            shard_offsets, arrays = flat
            picks = np.flatnonzero(shard_numbers == number)
            rows = all_rows[picks]
            if np.all(np.diff(rows) == 1) and np.all(
                np.diff(picks) == 1
            ):  # the usual case: a file scored again in its order
                source, target = (
                    slice(shard_offsets[rows[0]], shard_offsets[rows[-1] + 1]),
                    slice(offsets[picks[0]], offsets[picks[-1] + 1]),
                )
            else:
                counts = lengths[picks]
                within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
                source = np.repeat(shard_offsets[rows], counts) + within
                target = np.repeat(offsets[picks], counts) + within
            for name in _STORED:
                out[name][target] = arrays[name][source]
        return TokenStats(
            offsets=offsets,
            target_ids=out["target_ids"].astype(np.int64),
            **{name: out[name] for name in TOKEN_STATS_COLUMNS},
            first_occurrence=out["first_occurrence"].view(bool),
        )

    def _checked_shard(self, shard: Path) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """A shard's row offsets and flat arrays, after its checksum; None (the shard refused) on any problem."""
        table = self._read(shard, ["key", "length", *_STORED])
        if table is None:
            return None
        lists = {name: table.column(name).combine_chunks() for name in _STORED}
        flat = {
            name: np.asarray(lists[name].flatten().to_numpy(zero_copy_only=False), dtype=dtype)
            for name, dtype in _STORED.items()
        }
        lengths = table.column("length").to_numpy().astype(np.int64)
        keys = np.frombuffer(b"".join(table.column("key").to_pylist()), dtype=np.uint8)
        expected = int((table.schema.metadata or {}).get(_CHECKSUM_KEY, b"-1"))
        if _checksum(keys, lengths, flat) != expected:
            self._refuse(shard, "its checksum does not match: the file was changed after it was written")
            return None
        return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), flat

    def store(self, keys: Sequence[bytes], stats: TokenStats) -> bool:
        """Writes one shard with the TokenStats of ``keys`` (atomically: a temporary file renamed); whether it was
        written. One that cannot be (a full disk) is said in one warning naming the cache, its temporary file
        removed, and the cache is :attr:`unwritable` from then on."""
        import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only --stats-cache needs it)

        if not keys:
            return True
        if self.unwritable:
            return False
        flat = {name: np.ascontiguousarray(getattr(stats, name), dtype=dtype) for name, dtype in _STORED.items()}
        offsets = pa.array(stats.offsets.astype(np.int32) if stats.offsets[-1] < 2**31 else stats.offsets)
        list_type = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
        columns = {"key": pa.array(list(keys), pa.binary(32)), "length": pa.array(stats.lengths.astype(np.int32))}
        columns.update({name: list_type.from_arrays(offsets, pa.array(values)) for name, values in flat.items()})
        checksum = _checksum(np.frombuffer(b"".join(keys), dtype=np.uint8), stats.lengths, flat)
        table = pa.table(columns).replace_schema_metadata(
            {_SETTING_KEY: self.setting_id.encode(), _CHECKSUM_KEY: str(checksum).encode()}
        )
        name = f"{uuid.uuid4().hex}.arrow"
        staging = self.root / f".{name}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            manifest = self.root / "settings.json"
            if not manifest.exists():
                write_atomic(manifest, json.dumps(self.settings, indent=1, sort_keys=True, default=str) + "\n")
            with pa.OSFile(str(staging), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            os.replace(staging, self.root / name)
        except OSError as exc:  # pyarrow's IO errors are OSErrors
            staging.unlink(missing_ok=True)
            self.unwritable = True
            reason = exc.strerror or str(exc).splitlines()[0]
            warnings.warn(
                MiaFastWarning(
                    f"stats cache {self.base}: cannot be written ({reason}); the run goes on without it, and texts "
                    "it does not hold are not added"
                ),
                stacklevel=2,
            )
            return False
        index = self._load_index()
        index.update(
            (key, (self.root / name, row, int(length))) for row, (key, length) in enumerate(zip(keys, stats.lengths))
        )
        return True


def open_cache(
    directory: str | os.PathLike, setting: str | None = None, log: Callable[[str], None] = lambda message: None
) -> StatsCache:
    """The stats cache already in ``directory``, opened to read only: its only setting, or the one whose folder name
    starts with ``setting``."""
    folders = sorted(p.parent for p in Path(directory).glob("*/settings.json"))
    if not folders:
        raise MiaFastError(
            f"{directory} holds no stats cache; write one with 'mia-fast score ... --stats-cache {directory}'"
        )
    chosen = [f for f in folders if setting is None or f.name.startswith(setting)]
    if len(chosen) != 1:
        listed = "; ".join(f"{f.name} ({_describe(f)})" for f in folders)
        which = f"{len(chosen)} match --setting {setting!r}" if setting else f"it holds {len(folders)} settings"
        raise MiaFastError(f"{directory}: {which}; pick one with --setting: {listed}")
    settings = json.loads((chosen[0] / "settings.json").read_text())
    if settings.pop("format", None) != CACHE_FORMAT:
        raise MiaFastError(f"{chosen[0]}: not a stats cache of format {CACHE_FORMAT}")
    cache = StatsCache(directory, settings, log, read_only=True)
    if cache.setting_id != chosen[0].name:
        raise MiaFastError(
            f"{chosen[0]}/settings.json does not match its folder: edited, or not a mia-fast stats cache"
        )
    return cache


def _describe(folder: Path) -> str:
    settings = json.loads((folder / "settings.json").read_text())
    return f"weights {str(settings.get('weights'))[:12]}, {settings.get('dtype')} on {settings.get('device')}"
