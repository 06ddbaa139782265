"""Every bad input gives one clear line, early: each numeric option of each command and every method list is
checked as it is parsed, from one declaration (a method setting's Range is also its class's own check); an empty
corpus is refused before a tokenizer is loaded and leaves no partial build; a diverging demo fine-tuning stops
before anything is scored; dataset inference refuses a validation set that is the suspect set or shares its
texts. Each refusal is exit 2, one line, and every file that was there byte-identical, none added (``refused``)."""

from __future__ import annotations

import math
import time

import pytest
from conftest import CORPUS
from helpers import refused, write_jsonl

from mia_fast.errors import MiaFastError
from mia_fast.frequency import text_build
from mia_fast.methods import ConRecallSettings, DcpddSettings, PacSettings, SamiaSettings
from mia_fast.methods.setting_options import setting_options
from mia_fast.pipeline import models

# Every number has a finite maximum, which differs from option to option.
POSITIVE_INT = "must be a whole number in [1, "
NON_NEGATIVE_INT = "must be a whole number in [0, "
POSITIVE = "must be a number in (0, "
FRACTION = "must be a number in (0, 1]"
FRACTIONS = "each a number in (0, 1]"

# The options of the scoring commands, added by mia_fast.cli.options: (bad value, what the line says).
SCORING = {
    "--batch-tokens": ("0", POSITIVE_INT),
    "--max-length": ("1", "must be a whole number in [2, "),
    "--neighbor-count": ("-3", POSITIVE_INT),
    "--block-rows": ("0", POSITIVE_INT),
    "--a": ("-1", POSITIVE),
    "--samia-samples": ("2.5", POSITIVE_INT),
    "--pac-copies": ("0", POSITIVE_INT),
    "--method-seed": ("x", "must be a whole number in [0, 4294967295], got 'x'"),
    "--conrecall-gamma": ("nan", "must be a number in [-100, 100]"),
}
INPUT = {"--max-words": ("0", POSITIVE_INT)}
METHODS = {"--methods": (",", "no method given"), "--k": ("0,0.5", FRACTIONS)}


OPTIONS = {
    "score": {
        **SCORING,
        **INPUT,
        **METHODS,
        "--online": ("0", POSITIVE_INT),
        "--online-stride": ("-1", POSITIVE_INT),
        "--ray-workers": ("0", POSITIVE_INT),
        "--shard-rows": ("0", POSITIVE_INT),
    },
    "eval": {
        **SCORING,
        **INPUT,
        **METHODS,
        "--bootstrap": ("0", POSITIVE_INT),
        "--seed": ("-1", NON_NEGATIVE_INT),
        "--buckets": ("32,0", "each a whole number in [1, "),
    },
    "rescore": {**INPUT, **METHODS, "--block-rows": ("0", POSITIVE_INT), "--a": ("0", POSITIVE)},
    "calibrate": {**SCORING, **INPUT},
    "classify": {**SCORING, **INPUT},
    "audit-unlearning": {**SCORING, **INPUT, "--ratio": ("1.5", FRACTION)},
    "dataset-inference": {**SCORING, **METHODS, "--seed": ("-1", NON_NEGATIVE_INT)},
    "demo": {
        **METHODS,
        "--texts": ("4", "must be a whole number in [8, "),
        "--epochs": ("0", POSITIVE_INT),
        "--lr": ("0", POSITIVE),
        "--batch-size": ("0", POSITIVE_INT),
        "--max-tokens": ("-1", POSITIVE_INT),
        "--seed": ("-1", NON_NEGATIVE_INT),
        "--prefix-shots": ("0", POSITIVE_INT),
        "--probe-texts": ("0", POSITIVE_INT),
        "--probe-lr": ("-0.001", POSITIVE),
        "--neighbor-count": ("0", POSITIVE_INT),
        "--bootstrap": ("0", POSITIVE_INT),
    },
    "freq build": {
        "--workers": ("0", POSITIVE_INT),
        "--vocab-size": ("0", POSITIVE_INT),
        "--max-tokens-per-doc": ("0", POSITIVE_INT),
    },
    "freq build-tokens": {
        "--vocab-size": ("-10", POSITIVE_INT),
        "--doc-separator": ("-1", NON_NEGATIVE_INT),
        "--threads": ("-1", NON_NEGATIVE_INT),
        "--max-tokens-per-doc": ("0", POSITIVE_INT),
    },
    "freq info": {"--top": ("0", POSITIVE_INT)},
}
CASES = [(command, option) for command, options in OPTIONS.items() for option in options]


def arguments(command: str, tmp_path) -> list:
    """The command's arguments but the bad one; no file need exist, as nothing is read."""
    data, out, report = tmp_path / "d.jsonl", tmp_path / "o.jsonl", tmp_path / "report"
    return {
        "score": ["score", data, "--out", out],
        "eval": ["eval", data, "--report", report],
        "rescore": ["rescore", data, "--stats", tmp_path / "s.npz", "--out", out],
        "calibrate": ["calibrate", data, "--method", "loss", "--out", out],
        "classify": ["classify", data, "--threshold", tmp_path / "t.json", "--out", out],
        "audit-unlearning": [
            "audit-unlearning",
            data,
            "--before",
            "m",
            "--after",
            "m",
            "--method",
            "loss",
            "--report",
            report,
        ],
        "dataset-inference": ["dataset-inference", data, tmp_path / "v.jsonl", "--report", report],
        "demo": ["demo", "--report", report],
        "freq build": ["freq", "build", tmp_path / "c.jsonl", "--tokenizer", "t", "--out", tmp_path / "t.freq"],
        "freq build-tokens": [
            "freq",
            "build-tokens",
            tmp_path / "ids.bin",
            "--vocab-size",
            "10",
            "--out",
            tmp_path / "t.freq",
        ],
        "freq info": ["freq", "info", tmp_path / "t.freq"],
    }[command]


@pytest.mark.parametrize(("command", "option"), CASES, ids=[f"{c}{o}" for c, o in CASES])
def test_a_numeric_option_out_of_range_is_refused_as_it_is_parsed(command, option, tmp_path, capsys):
    value, expected = OPTIONS[command][option]
    (tmp_path / "kept.txt").write_text("kept\n")
    line = refused(capsys, *arguments(command, tmp_path), option, value, keep=[tmp_path])
    assert f"argument {option}: " in line and expected in line


def test_the_settings_classes_refuse_what_their_flags_refuse():
    """The Range a setting declares is both its flag's parser and its class's check."""
    bounded = [option for option in setting_options() if option.spec.bounds is not None]
    assert {option.flag.name for option in bounded} >= {"a", "samia-samples", "pac-copies", "method-seed"}
    for option in bounded:
        bounds = option.spec.bounds
        bad = math.nan if bounds.minimum is None else bounds.minimum - (0 if bounds.exclusive_minimum else 1)
        for field in option.fields:
            with pytest.raises(MiaFastError, match=rf"{field.owner.__name__}.{field.name} \(--{option.flag.name}\)"):
                field.owner(**{field.name: bad})
    for make, message in [
        (lambda: DcpddSettings(a=-1), r"DcpddSettings.a \(--a\) must be a number in \(0, 100\], got -1"),
        (lambda: SamiaSettings(samples=True), r"SamiaSettings.samples .* must be a whole number in \[1, 1000\]"),
        (
            lambda: PacSettings(seed=0.5),
            r"PacSettings.seed \(--method-seed\) must be a whole number in \[0, 4294967295\], got 0.5",
        ),
        (lambda: ConRecallSettings(gamma=math.inf), r"must be a number in \[-100, 100\], got inf"),
    ]:
        with pytest.raises(MiaFastError, match=message):
            make()


@pytest.mark.parametrize(
    ("methods", "expected"),
    [
        (",", "no method given; known methods: "),
        ("loss,nope", "unknown method 'nope'; known methods: "),
        ("mink_1.5", "k must be a fraction in (0, 1], got 1.5"),
        ("mink_x", "bad k in method 'mink_x'"),
    ],
)
@pytest.mark.parametrize("command", ["score", "eval", "rescore", "dataset-inference", "demo"])
def test_a_bad_method_list_is_refused_as_it_is_parsed(command, methods, expected, tmp_path, capsys):
    started = time.perf_counter()
    line = refused(capsys, *arguments(command, tmp_path), "--methods", methods, keep=[tmp_path])
    assert "argument --methods: " in line and expected in line
    assert time.perf_counter() - started < 2


def test_an_empty_corpus_is_refused_before_the_tokenizer_and_leaves_no_partial_build(tmp_path, capsys, monkeypatch):
    def no_tokenizer(name):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(models, "load_tokenizer", no_tokenizer)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "empty.jsonl").write_text("")
    (tmp_path / "corpus" / "blank.txt").write_text("\n  \n\n")
    write_jsonl(tmp_path / "corpus" / "no-text.jsonl", [{"text": ""}, {"text": ""}])
    out = tmp_path / "t.freq"
    started = time.perf_counter()
    line = refused(
        capsys, "freq", "build", tmp_path / "corpus", "--tokenizer", "default", "--out", out, keep=[tmp_path]
    )
    assert time.perf_counter() - started < 2
    assert "the corpus (3 file(s)) holds no tokens to count" in line
    assert not out.with_name("t.freq.partial").exists()


def test_a_build_that_fails_before_counting_anything_leaves_no_partial_directory(tiny_model_dir, tmp_path, monkeypatch):
    def disk_full(*args):
        raise OSError(28, "No space left on device")

    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "the fox"}])
    tokenizer = models.load_tokenizer(str(tiny_model_dir))
    monkeypatch.setattr(text_build, "count_piece", disk_full)
    with pytest.raises(OSError, match="No space left"):
        text_build.build_from_text([corpus], tokenizer, checkpoint_dir=tmp_path / "t.freq.partial")
    assert not (tmp_path / "t.freq.partial").exists()


def test_empty_token_files_are_refused(tmp_path, capsys):
    (tmp_path / "ids.bin").write_bytes(b"")
    line = refused(
        capsys,
        "freq",
        "build-tokens",
        tmp_path / "ids.bin",
        "--dtype",
        "uint16",
        "--vocab-size",
        "10",
        "--out",
        tmp_path / "t.freq",
        keep=[tmp_path],
    )
    assert "the token files (1) hold no tokens to count" in line


def test_a_diverging_demo_is_refused_before_anything_is_scored(tiny_model_dir, tmp_path, capsys):
    words = " ".join(CORPUS).split()
    corpus = write_jsonl(
        tmp_path / "corpus.jsonl", [{"text": " ".join(words[i : i + 12])} for i in range(0, len(words) - 12, 2)]
    )
    report = tmp_path / "report"
    line = refused(
        capsys,
        "demo",
        "--model",
        tiny_model_dir,
        "--corpus",
        corpus,
        "--texts",
        "16",
        "--epochs",
        "2",
        "--max-tokens",
        "16",
        "--batch-size",
        "4",
        "--methods",
        "loss",
        "--lr",
        "1",
        "--quiet",
        "--report",
        report,
        keep=[corpus, tiny_model_dir],
    )
    assert "fine-tuning diverged: the last epoch's mean loss" in line
    assert "lower the learning rate (--lr 1)" in line
    assert "stopped" in (report / "report.md").read_text()
    assert not (report / "metrics.json").exists() and not (report / "scores.jsonl").exists()


def texts(prefix: str, count: int = 12) -> list[dict]:
    return [{"text": f"{prefix} {CORPUS[i % len(CORPUS)]} {i}"} for i in range(count)]


@pytest.mark.parametrize("spelling", ["symlink", "dotted"])
def test_dataset_inference_refuses_one_file_as_both_sets(spelling, tiny_model_dir, tmp_path, capsys):
    suspect = write_jsonl(tmp_path / "suspect.jsonl", texts("suspect"))
    if spelling == "symlink":
        validation = tmp_path / "validation.jsonl"
        validation.symlink_to(suspect)
    else:
        (tmp_path / "sub").mkdir()
        validation = tmp_path / "sub" / ".." / "." / "suspect.jsonl"
    line = refused(
        capsys,
        "dataset-inference",
        suspect,
        validation,
        "--model",
        tiny_model_dir,
        "--report",
        tmp_path / "report",
        keep=[tmp_path],
    )
    assert "are the same file; the validation set must be other texts" in line


def test_dataset_inference_refuses_sets_that_share_texts(tiny_model_dir, tmp_path, capsys):
    suspect_rows, validation_rows = texts("suspect"), texts("validation")
    suspect = write_jsonl(tmp_path / "suspect.jsonl", suspect_rows)
    validation = write_jsonl(tmp_path / "validation.jsonl", validation_rows[:9] + suspect_rows[:3])
    line = refused(
        capsys,
        "dataset-inference",
        suspect,
        validation,
        "--model",
        tiny_model_dir,
        "--report",
        tmp_path / "report",
        keep=[tmp_path],
    )
    assert "the suspect and validation sets share 3 text(s)" in line and "needs disjoint sets" in line


def test_refusals_name_the_value_given(tmp_path, capsys):
    line = refused(capsys, "score", tmp_path / "d.jsonl", "--out", tmp_path / "o.jsonl", "--a", "-1")
    assert line == (
        "mia-fast: error: mia-fast score: argument --a: must be a number in (0, 100], got '-1' "
        "(see mia-fast score --help)"
    )


@pytest.mark.parametrize("blank", ["members", "non-members"])
def test_eval_with_no_text_in_a_class_is_refused_before_anything_is_scored(blank, tiny_model_dir, tmp_path, capsys):
    """It ended in an IndexError in the bootstrap, after scores.jsonl was written."""
    rows = [{"text": "  " if (i % 2 == 1) == (blank == "members") else f"text {i}", "label": i % 2} for i in range(6)]
    data = write_jsonl(tmp_path / "in" / "d.jsonl", rows)
    line = refused(
        capsys, "eval", data, "--model", tiny_model_dir, "--report", tmp_path / "report", "--quiet", keep=[tmp_path]
    )
    which = "member" if blank == "members" else "non-member"
    assert f"all 3 {which} rows have no text to score (empty or blank)" in line, line
