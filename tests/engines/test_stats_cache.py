"""The TokenStats cache: a rerun with other methods, k or cap runs no forward pass and gives identical
scores; damaged, tampered or foreign shards are refused, moved aside and recomputed; another model's
cache is not used; a cache that cannot be written is left alone, said once."""

import numpy as np
import pyarrow as pa
import pytest
from helpers import run_cli, write_jsonl

from mia_fast import ComputeConfig, DcpddSettings, Detector, RecallSettings
from mia_fast.engines.stats import TokenStats
from mia_fast.engines.stats_cache import StatsCache, cached_stats, text_key
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.pipeline.engine import StatsEngine

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be",
    "",
    "all that glitters is not gold " * 12,
    "a",
]
PREFIX = ["the rain in spain stays mainly in the plain"]


@pytest.fixture
def forwards(monkeypatch):
    """Counts the forward batches every engine runs."""
    calls = []
    original = StatsEngine._run_batch

    def counted(self, rows):
        calls.append(len(rows))
        return original(self, rows)

    monkeypatch.setattr(StatsEngine, "_run_batch", counted)
    return calls


def arrays(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "target_ids": rng.integers(0, 300, n),
        "logp": rng.normal(size=n).astype(np.float32),
        "mu": rng.normal(size=n).astype(np.float32),
        "var": rng.random(n).astype(np.float32),
        "max_logp": -rng.random(n).astype(np.float32),
    }


def test_a_cache_of_an_older_format_is_computed_again_not_misread(tmp_path, monkeypatch):
    """Stats cached before max log p was kept (cache format 1) are another setting: every text is missing."""
    from mia_fast.engines import stats_cache

    monkeypatch.setattr(stats_cache, "CACHE_FORMAT", 1)
    keys = [text_key("", "ab"), text_key("", "cd")]
    StatsCache(tmp_path, {"model": "x"}).store(keys, TokenStats.from_texts([arrays(3, 0), arrays(4, 1)]))
    monkeypatch.undo()
    fresh = StatsCache(tmp_path, {"model": "x"})
    assert fresh.missing(keys) == [0, 1] and fresh.other_settings() == 1


def test_store_and_read_back_bit_for_bit_and_keys_separate_prefix_from_text(tmp_path):
    cache = StatsCache(tmp_path, {"model": "x"})
    keys = [text_key("", "ab"), text_key("a", "b"), text_key("ab", "")]
    assert len(set(keys)) == 3
    stored = TokenStats.from_texts([arrays(5, 0), arrays(0, 1), arrays(130, 2)])
    cache.store(keys, stored)
    fresh = StatsCache(tmp_path, {"model": "x"})
    assert fresh.missing([*keys, text_key("", "absent"), keys[0]]) == [3]
    read = fresh.stats([keys[2], keys[0], keys[2]])  # any order, repeats
    expected = stored.take([2, 0, 2])
    for name in ("offsets", "target_ids", "logp", "mu", "var", "max_logp", "first_occurrence"):
        assert np.array_equal(getattr(read, name), getattr(expected, name)), name
    assert StatsCache(tmp_path, {"model": "y"}).missing(keys) == [0, 1, 2]  # another setting: another folder


def test_a_rerun_with_other_methods_k_and_cap_runs_no_forward_and_scores_identically(
    tiny_model_dir, tmp_path, forwards
):
    methods = ["loss", "zlib", "mink", "minkpp", "lowercase", "recall"]
    plain = Detector(str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)]).score(
        TEXTS, methods=methods, k=[0.2, 0.5]
    )
    forwards.clear()
    first = Detector(
        str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)], ComputeConfig(stats_cache=tmp_path / "cache")
    ).score(TEXTS, methods=methods[:3], k=[0.2])
    assert forwards  # computed and stored
    forwards.clear()
    again = Detector(
        str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)], ComputeConfig(stats_cache=tmp_path / "cache")
    )
    assert np.array_equal(again.score(TEXTS, methods=methods[:3], k=[0.2])["loss"], first["loss"], equal_nan=True)
    assert forwards == []
    rescored = again.score(TEXTS, methods=methods, k=[0.2, 0.5], settings=[DcpddSettings(a=0.05)])
    assert forwards  # lowercase and recall's prefix pass are new passes: run once, then cached
    forwards.clear()
    cached = again.score(TEXTS, methods=methods, k=[0.2, 0.5], settings=[DcpddSettings(a=0.05)])
    assert forwards == []
    for column in plain:
        assert np.array_equal(cached[column], rescored[column], equal_nan=True), column  # read back bit for bit
        # Against a run without the cache, where the passes were batched otherwise: equal up to float summation order.
        np.testing.assert_allclose(cached[column], plain[column], rtol=1e-5, atol=1e-7, err_msg=column)


def test_damaged_tampered_and_foreign_shards_are_refused_and_recomputed(tiny_model_dir, tmp_path, forwards, capsys):
    cache_dir = tmp_path / "cache"
    expected = Detector(str(tiny_model_dir), compute=ComputeConfig(stats_cache=cache_dir)).score(
        TEXTS, methods=["loss"]
    )["loss"]

    def read(path):  # into memory: the file is overwritten in place below
        with pa.OSFile(str(path)) as source:
            return pa.ipc.open_file(source).read_all()

    def write(table, path):
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    (shard,) = [p for p in cache_dir.glob("*/*.arrow")]
    table = read(shard)

    def rerun() -> str:
        forwards.clear()
        scores = Detector(str(tiny_model_dir), compute=ComputeConfig(stats_cache=cache_dir)).score(
            TEXTS, methods=["loss"]
        )["loss"]
        assert forwards and np.array_equal(scores, expected, equal_nan=True)
        return capsys.readouterr().err

    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # a killed copy, a full disk
    assert "refused (cannot be read" in rerun() and shard.with_name(shard.name + ".rejected").exists()

    (shard,) = [p for p in cache_dir.glob("*/*.arrow")]
    logp = table.column("logp").to_pylist()
    logp[0] = [v + 1.0 for v in logp[0]]
    write(
        table.set_column(
            table.schema.get_field_index("logp"), "logp", pa.array(logp, table.schema.field("logp").type)
        ).replace_schema_metadata(table.schema.metadata),
        shard,
    )
    assert "its checksum does not match" in rerun()

    (shard,) = [p for p in cache_dir.glob("*/*.arrow")]
    write(read(shard).replace_schema_metadata({b"mia_fast_setting": b"0" * 24}), shard)
    assert "written for another setting" in rerun()


def test_another_models_cache_is_not_used(tiny_model_dir, tiny_reference_dir, tmp_path, forwards, capsys):
    Detector(str(tiny_reference_dir), compute=ComputeConfig(stats_cache=tmp_path / "cache")).score(
        TEXTS[:2], methods=["loss"]
    )
    forwards.clear()
    Detector(str(tiny_model_dir), compute=ComputeConfig(stats_cache=tmp_path / "cache")).score(
        TEXTS[:2], methods=["loss"]
    )
    assert forwards
    assert "holds the stats of 1 other model setting(s), none of this one" in capsys.readouterr().err
    assert len(list((tmp_path / "cache").glob("*/settings.json"))) == 2


def test_a_file_as_the_cache_directory_is_refused(tiny_model_dir, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(MiaFastError, match="is a file, not a directory"):
        Detector(str(tiny_model_dir), compute=ComputeConfig(stats_cache=tmp_path / "file"))


def test_score_with_stats_cache_reruns_without_a_forward(tiny_model_dir, tmp_path, forwards):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    common = ("score", tmp_path / "in.jsonl", "--model", tiny_model_dir, "--stats-cache", tmp_path / "cache", "--quiet")
    assert run_cli(*common, "--out", tmp_path / "a.jsonl", "--methods", "loss") == 0
    forwards.clear()
    assert run_cli(*common, "--out", tmp_path / "b.jsonl", "--methods", "mink,minkpp", "--k", "0.3") == 0
    assert forwards == [] and (tmp_path / "b.jsonl").read_text().count("\n") == len(TEXTS)


def test_a_cache_that_cannot_be_written_warns_once_removes_its_temporary_file_and_is_left_alone(tmp_path, monkeypatch):
    cache = StatsCache(tmp_path, {"model": "x"})
    keys = [text_key("", "ab"), text_key("", "cd")]
    stats = TokenStats.from_texts([arrays(3, 0), arrays(4, 1)])
    assert cache.store(keys[:1], stats.take([0]))
    real = pa.ipc.new_file

    def full_disk(sink, schema):
        real(sink, schema)
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pa.ipc, "new_file", full_disk)
    shards = sorted(cache.root.iterdir())
    computed = []

    def compute(texts, prefixes):
        computed.append(list(texts))
        return TokenStats.from_texts([arrays(len(t), 0) for t in texts])

    with pytest.warns(MiaFastWarning, match=f"stats cache {tmp_path}: cannot be written") as warned:
        # "ab" is held, "cd" is not and cannot be added: the block is computed whole, the cache left alone from then on
        assert len(cached_stats(cache, ["ab", "cd"], None, compute)) == 2
        assert len(cached_stats(cache, ["ab", "cd"], None, compute)) == 2
        assert not cache.store(keys, stats)
    assert len(warned) == 1 and cache.unwritable
    assert computed == [["cd"], ["ab", "cd"], ["ab", "cd"]]
    assert sorted(cache.root.iterdir()) == shards  # no temporary file left
