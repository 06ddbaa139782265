"""Artefacts written and read back (probes, thresholds, reports, TokenStats files): each round-trips as valid
JSON or .npz with a checksum, is replaced only by a complete new file, and every damaged, tampered, foreign or
outdated one is refused in one line with every file already there left byte-identical."""

import json
import math
import shutil
import warnings
from dataclasses import replace

import numpy as np
import pytest
from helpers import refused, run_cli, stats_of, write_jsonl

from mia_fast import Detector, ProbeSettings, load_model
from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.comparison import compare_reports
from mia_fast.evaluation.metrics import MethodMetrics
from mia_fast.evaluation.report import write_report
from mia_fast.evaluation.thresholds import Threshold, calibrate, write_classification
from mia_fast.methods.probe import Probe

TEXTS = ["the quick brown fox jumps over the lazy dog", "to be or not to be", "all that glitters is not gold"]


def strict_json(text: str):
    """JSON as the standard has it: no NaN, Infinity or -Infinity."""
    return json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} is not JSON"))


def files_left_beside(path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.endswith(".tmp"))


# ---- probes ----


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    return load_model(str(tiny_model_dir))


@pytest.fixture
def probe_dir(tiny_model, tmp_path):
    """A probe for the tiny model, made by hand (no training): layer 1, the training split's statistics."""
    rng = np.random.default_rng(0)
    hidden = tiny_model.model.config.hidden_size
    card = {"model": {"name": tiny_model.name, "weights_fingerprint": tiny_model.weights_fingerprint()}}
    probe = Probe(
        rng.normal(size=hidden).astype(np.float32),
        1,
        "train",
        rng.normal(size=hidden).astype(np.float32),
        np.ones(hidden, np.float32),
        card,
    )
    return probe.save(tmp_path / "probe")


def score_with_probe(tiny_model_dir, tmp_path, probe):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    return ("score", tmp_path / "in.jsonl", "--model", tiny_model_dir, "--methods", "probe", "--probe", probe)


def test_a_probe_round_trips_with_checksums_of_its_card_and_weights(tiny_model, probe_dir):
    probe = Probe.load(probe_dir)
    card = strict_json((probe_dir / "probe.json").read_text())
    assert card["format"] == "mia-fast probe v2" and len(card["sha256"]) == len(card["weights_sha256"]) == 64
    again = Probe.load(probe.save(probe_dir))
    np.testing.assert_array_equal(again.weight, probe.weight)
    np.testing.assert_array_equal(again.train_mean, probe.train_mean)
    assert (again.layer, again.normalization, again.card) == (1, "train", probe.card)
    assert not files_left_beside(probe_dir / "probe.json")
    scores = Detector(tiny_model, [ProbeSettings(probe_dir)]).score(TEXTS, methods=["probe"])["probe"]
    assert ((scores > 0) & (scores < 1)).all()


def test_a_probe_with_a_tampered_weight_is_refused(tiny_model_dir, probe_dir, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(probe_dir / "probe.safetensors"))
    tensors["weight"][0] = 1e6
    save_file(tensors, str(probe_dir / "probe.safetensors"))
    args = score_with_probe(tiny_model_dir, tmp_path, probe_dir)
    line = refused(capsys, *args, "--out", tmp_path / "s.jsonl", keep=[tmp_path])
    assert "probe.safetensors: checksum mismatch: the file was changed after it was written" in line
    assert "train the probe again (mia-fast probe train)" in line


def test_a_probe_with_a_tampered_card_is_refused(tiny_model_dir, probe_dir, tmp_path, capsys):
    card = json.loads((probe_dir / "probe.json").read_text())
    (probe_dir / "probe.json").write_text(json.dumps({**card, "layer": 0}))
    args = score_with_probe(tiny_model_dir, tmp_path, probe_dir)
    line = refused(capsys, *args, "--out", tmp_path / "s.jsonl", keep=[tmp_path])
    assert "probe.json: checksum mismatch" in line


def test_a_probe_cut_off_before_its_card_was_written_is_refused(tiny_model_dir, probe_dir, tmp_path, capsys):
    (probe_dir / "probe.json").unlink()
    args = score_with_probe(tiny_model_dir, tmp_path, probe_dir)
    assert "cannot read" in refused(capsys, *args, "--out", tmp_path / "s.jsonl", keep=[tmp_path])


def test_a_probe_from_an_older_mia_fast_is_refused(tiny_model_dir, probe_dir, tmp_path, capsys):
    card = json.loads((probe_dir / "probe.json").read_text())
    old = {k: v for k, v in card.items() if k not in ("sha256", "weights_sha256")}
    (probe_dir / "probe.json").write_text(json.dumps({**old, "format": "mia-fast probe v1"}))
    args = score_with_probe(tiny_model_dir, tmp_path, probe_dir)
    line = refused(capsys, *args, "--out", tmp_path / "s.jsonl", keep=[tmp_path])
    assert "is not a mia-fast probe v2 file; mia-fast probe train writes one" in line


def test_probe_train_refuses_a_file_as_its_output_directory(tiny_model_dir, tmp_path, capsys):
    labelled = write_jsonl(tmp_path / "train.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(TEXTS)])
    (tmp_path / "probe").write_text("kept\n")
    args = ("probe", "train", "--train", labelled, "--dev", labelled, "--model", tiny_model_dir, "--quiet")
    line = refused(capsys, *args, "--out", tmp_path / "probe", keep=[tmp_path])
    assert "probe is a file; --out names a folder to write into" in line


def test_extreme_probe_logits_give_0_or_1_without_a_numpy_warning():
    probe = Probe(np.array([1e4, 0.0], np.float32), 0, "train", np.zeros(2, np.float32), np.ones(2, np.float32))
    activations = np.array([[-1.0, 0.0], [1.0, 0.0], [1e-3, 5.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = probe.score(activations)
    np.testing.assert_allclose(scores, [0.0, 1.0, 1 / (1 + math.exp(-10.0))], rtol=1e-6)


# ---- thresholds ----


@pytest.mark.parametrize(
    "labels, scores, value",
    [([1, 0, 0, 0], [0.1, 0.9, 0.8, 0.7], math.inf), ([1, 1, 0], [-math.inf, 0.5, -math.inf], 0.5)],
)
def test_a_threshold_round_trips_as_valid_json_even_when_infinite(tmp_path, labels, scores, value):
    threshold = calibrate(labels, scores, "loss", settings={"model": "m"})
    assert threshold.value == value
    path = threshold.save(tmp_path / "t.json")
    assert strict_json(path.read_text())["value"] == (value if math.isfinite(value) else "inf")
    assert Threshold.load(path) == threshold
    flag_all = Threshold("loss", -math.inf, "accuracy", None, {}, {})
    assert Threshold.load(flag_all.save(tmp_path / "all.json")) == flag_all
    assert not files_left_beside(path)


@pytest.fixture
def threshold_file(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    return calibrate([1, 0, 1, 0], [0.9, 0.1, 0.8, 0.2], "loss").save(tmp_path / "t.json")


def test_a_tampered_threshold_is_refused(tiny_model_dir, threshold_file, tmp_path, capsys):
    saved = json.loads(threshold_file.read_text())
    threshold_file.write_text(json.dumps({**saved, "value": 0.0}, indent=1))
    line = refused(
        capsys,
        "classify",
        tmp_path / "in.jsonl",
        "--model",
        tiny_model_dir,
        "--threshold",
        threshold_file,
        "--out",
        tmp_path / "f.jsonl",
        keep=[tmp_path],
    )
    assert "t.json: checksum mismatch: the file was changed after it was written; mia-fast calibrate again" in line


def test_a_threshold_from_an_older_mia_fast_is_refused(tiny_model_dir, tmp_path, capsys):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    old = {"format": "mia-fast threshold v1", "method": "loss", "value": math.inf, "rule": "accuracy"}
    (tmp_path / "old.json").write_text(json.dumps({**old, "target_fpr": None, "validation": {}, "settings": {}}))
    args = ("classify", tmp_path / "in.jsonl", "--model", tiny_model_dir, "--threshold", tmp_path / "old.json")
    line = refused(capsys, *args, "--out", tmp_path / "f.jsonl", keep=[tmp_path])
    assert "old.json is not a mia-fast threshold v2 file; mia-fast calibrate writes one" in line


def test_calibrate_and_classify_never_replace_an_output_without_overwrite(
    tiny_model_dir, threshold_file, tmp_path, capsys
):
    (tmp_path / "f.jsonl").write_text("kept\n")
    calibrate_args = ("calibrate", tmp_path / "in.jsonl", "--model", tiny_model_dir, "--method", "loss")
    line = refused(capsys, *calibrate_args, "--out", threshold_file, keep=[tmp_path])
    assert "t.json exists; pass --overwrite to replace it" in line
    classify_args = ("classify", tmp_path / "in.jsonl", "--model", tiny_model_dir, "--threshold", threshold_file)
    line = refused(capsys, *classify_args, "--out", tmp_path / "f.jsonl", keep=[tmp_path])
    assert "f.jsonl exists; pass --overwrite to replace it" in line


def test_classification_outputs_are_replaced_only_by_complete_ones(tmp_path):
    threshold = calibrate([1, 0], [0.9, 0.1], "loss")
    out, rates = tmp_path / "f.jsonl", tmp_path / "f.rates.json"
    out.write_text("kept\n")
    with pytest.raises(IndexError):  # the rows' ids run out part way through
        write_classification(out, rates, threshold, "t.json", np.array([0.9, 0.1, 0.5]), ["a"], None, None)
    assert out.read_text() == "kept\n" and not rates.exists() and not files_left_beside(out)
    scores = np.array([0.9, np.nan, 0.1])
    write_classification(out, rates, threshold, "t.json", scores, None, None, ["book A", "book B", "book A"])
    assert [json.loads(line)["member"] for line in out.read_text().splitlines()] == [True, None, False]
    groups = strict_json(rates.read_text())["groups"]
    assert [(g["group"], g["rate"]) for g in groups] == [("book A", 0.5), ("book B", None)]


# ---- reports ----


@pytest.fixture
def report(tmp_path):
    """A report whose AUROC CI is undefined (as when every bootstrap resample misses a class)."""
    labels = np.array([1, 0, 1, 0])
    columns = {"loss": np.array([0.9, 0.1, np.nan, np.nan])}
    loss = MethodMetrics(1.0, (math.nan, math.nan), {"0.1%": 1.0, "1%": 1.0, "5%": 1.0}, 0.0, 1, 1, 2)
    meta = {"data": "a.jsonl", "model": "m", "methods": "loss", "k": [0.2], "scores": "a/scores.jsonl"}
    write_report(tmp_path / "a", labels, columns, {"loss": loss}, meta)
    return tmp_path / "a"


def test_metrics_json_is_valid_json_when_a_metric_is_undefined_and_reads_back(report):
    metrics = strict_json((report / "metrics.json").read_text())
    assert metrics["methods"]["loss"]["auroc_ci"] == [None, None] and metrics["methods"]["loss"]["auroc"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = compare_reports(report, report)
    assert "loss" in table and "+0.000" in table
    assert not files_left_beside(report / "metrics.json")


def test_comparing_reports_made_differently_warns_once_per_difference(report, tmp_path, capsys):
    other = tmp_path / "b"
    shutil.copytree(report, other)
    metrics = json.loads((other / "metrics.json").read_text())
    metrics["meta"] |= {"data": "b.jsonl", "model": "n", "scores": "b/scores.jsonl", "max_length": 32}
    metrics["methods"]["loss"]["n_excluded"] = 0
    (other / "metrics.json").write_text(json.dumps(metrics))
    assert run_cli("eval", "--compare", report, other) == 0
    captured = capsys.readouterr()
    warned = [line for line in captured.err.splitlines() if line.startswith("mia-fast: warning: ")]
    prefix = "mia-fast: warning: the reports are not comparable: they differ in "
    assert warned == [
        prefix + "data (A: 'a.jsonl'; B: 'b.jsonl')",
        prefix + "model (A: 'm'; B: 'n')",
        prefix + "max_length (A: not recorded; B: 32)",
        prefix + "the rows scored (A: 1 members, 1 non-members, 2 excluded; B: 1 members, 1 non-members, 0 excluded)",
    ]
    assert "+0.000" in captured.out
    assert run_cli("eval", "--compare", report, report) == 0
    assert "warning" not in capsys.readouterr().err


# ---- TokenStats files (rescore --stats) ----


def test_token_stats_round_trip_with_a_checksum_and_the_npz_suffix(tmp_path):
    stats = stats_of([-1.0, -2.0, -0.5], [], [-3.0])
    path = stats.save(tmp_path / "stats")
    assert path == tmp_path / "stats.npz" and stats.save(path) == path
    loaded = TokenStats.load(path)
    for name in ("offsets", "target_ids", "logp", "mu", "var", "first_occurrence"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(stats, name))
        assert getattr(loaded, name).dtype == getattr(stats, name).dtype
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.npz"]


def _tampered(path):
    with np.load(path) as archive:
        arrays = dict(archive)
    arrays["logp"] = arrays["logp"] + 1.0
    np.savez(path, **arrays)


def _version_1(path):
    stats = stats_of([-1.0, -2.0], [-0.5], [-3.0])
    fields = ("offsets", "first_occurrence", "target_ids", "logp", "mu", "var")
    np.savez(path, format_version=np.int64(1), **{name: getattr(stats, name) for name in fields})


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _npy(path):
    with open(path, "wb") as f:  # np.save would add .npy to the name
        np.save(f, np.arange(3))


def _inconsistent(path):
    replace(stats_of([-1.0, -2.0], [-0.5], [-3.0]), offsets=np.array([0, 2, 3, 9])).save(path)


BAD_STATS = {
    "missing": (lambda path: path.unlink(), "stats.npz: no such file"),
    "a directory": (lambda path: path.unlink() or path.mkdir(), "stats.npz: a directory, not a file"),
    "text named .npz": (lambda path: path.write_text("id,logp\n1,-2.0\n"), "(not an .npz archive)"),
    "truncated": (_truncated, "(not an .npz archive)"),
    "a .npy array": (_npy, "(a single array, not an .npz archive)"),
    "object arrays": (
        lambda path: np.savez(path, format_version=np.int64(3), logp=np.array([{"x": 1}], dtype=object)),
        "(it holds arrays of Python objects)",
    ),
    "missing fields": (
        lambda path: np.savez(path, format_version=np.int64(3), offsets=np.array([0, 1])),
        "(no first_occurrence, target_ids, logp, mu, var, max_logp)",
    ),
    "no format version": (lambda path: np.savez(path, logp=np.zeros(3)), "(no format version)"),
    "inconsistent offsets": (_inconsistent, "(its offsets do not split its token arrays into texts)"),
    "tampered": (_tampered, "stats.npz: checksum mismatch: the file was changed after it was written"),
    "an older version": (_version_1, "holds TokenStats of format 1, written by an older mia-fast"),
}


@pytest.mark.parametrize("damage", list(BAD_STATS))
def test_a_bad_token_stats_file_is_refused_in_one_line(tmp_path, capsys, damage):
    spoil, expected = BAD_STATS[damage]
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    stats = stats_of([-1.0, -2.0], [-0.5], [-3.0]).save(tmp_path / "stats.npz")
    spoil(stats)
    args = ("rescore", tmp_path / "in.jsonl", "--stats", stats, "--methods", "loss", "--quiet")
    line = refused(capsys, *args, "--out", tmp_path / "r.jsonl", keep=[tmp_path])
    assert expected in line
    if damage not in ("missing", "a directory"):
        with pytest.raises(MiaFastError, match="Detector.token_stats"):
            TokenStats.load(stats)


def test_token_stats_of_another_number_of_texts_are_refused(tmp_path, capsys):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS[:2]])
    stats = stats_of([-1.0, -2.0], [-0.5], [-3.0]).save(tmp_path / "stats.npz")
    args = ("rescore", tmp_path / "in.jsonl", "--stats", stats, "--methods", "loss", "--quiet")
    line = refused(capsys, *args, "--out", tmp_path / "r.jsonl", keep=[tmp_path])
    assert "holds the stats of 3 texts but the input has 2" in line


def test_rescore_leaves_a_damaged_cache_shard_as_it_is_in_one_line(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    """rescore has no model to compute a damaged shard's texts again: one line says how to mend the cache, and the
    shard is neither moved nor changed (score --stats-cache, which can compute them, sets it aside)."""
    cache, out = tmp_path / "cache", tmp_path / "scores.jsonl"
    common = ["--methods", "loss", "--quiet"]
    assert (
        run_cli("score", labelled_jsonl, "--model", tiny_model_dir, *common, "--stats-cache", cache, "--out", out) == 0
    )
    (shard,) = cache.glob("*/*.arrow")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    line = refused(
        capsys,
        "rescore",
        labelled_jsonl,
        "--stats-cache",
        cache,
        *common,
        "--out",
        tmp_path / "r.jsonl",
        keep=[tmp_path],
    )
    assert f"{shard} is damaged (its checksum does not match" in line and "left as it is" in line
    assert "computes its texts again" in line and "'mia-fast score --stats-cache'" in line
