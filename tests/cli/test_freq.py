"""``mia-fast freq`` end to end on a tiny model's tokenizer: build, build-tokens, info, merge, and
the table feeding ``score --methods dcpdd``; bad input stops with one line and loses nothing."""

import gzip
import json

import numpy as np
import pytest
from conftest import CORPUS
from helpers import fail, read_jsonl, refused, run_cli
from transformers import AutoTokenizer

from mia_fast.frequency.table import FrequencyTable


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for i in range(3):
        lines = "".join(json.dumps({"text": f"{CORPUS[(i + j) % 7]} {j}"}) + "\n" for j in range(40))
        (root / f"c4-train.{i:05d}-of-00003.json.gz").write_bytes(gzip.compress(lines.encode()))
    return root


def test_build_info_and_score_with_the_table(tiny_model_dir, corpus_dir, labelled_jsonl, tmp_path, capsys):
    table_path = tmp_path / "c4.freq"
    assert (
        run_cli("freq", "build", corpus_dir, "--tokenizer", tiny_model_dir, "--out", table_path, "--workers", "2") == 0
    )
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "tokens/s, tokenized by fastokens " in captured.out
    assert "B/s" in captured.err and "tok/s" in captured.err  # the progress bar
    table = FrequencyTable.load(table_path)
    assert table.tokenized_by[0].startswith("fastokens ")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = [json.loads(line)["text"] for f in sorted(corpus_dir.iterdir()) for line in gzip.open(f, "rt")]
    ids = np.concatenate([tokenizer.encode(t, add_special_tokens=False) for t in texts])
    np.testing.assert_array_equal(table.counts, np.bincount(ids, minlength=len(tokenizer)))
    assert not (tmp_path / "c4.freq.partial").exists()

    assert run_cli("freq", "info", table_path, "--top", "3", "--tokenizer", tiny_model_dir) == 0
    info = capsys.readouterr().out
    assert f"tokens                 {len(ids)}" in info and "   1. id" in info
    assert f"tokenized_by           {table.tokenized_by[0]}" in info

    exact_path = tmp_path / "exact.freq"
    argv = ("freq", "build", corpus_dir, "--tokenizer", tiny_model_dir, "--out", exact_path, "--quiet")
    assert run_cli(*argv, "--tokenizer-backend", "exact") == 0
    assert "tokenized by tokenizers " in capsys.readouterr().out
    exact = FrequencyTable.load(exact_path)
    np.testing.assert_array_equal(exact.counts, table.counts)
    assert exact.tokenized_by[0].startswith("tokenizers ")

    out = tmp_path / "scores.jsonl"
    assert (
        run_cli(
            "score",
            labelled_jsonl,
            "--model",
            tiny_model_dir,
            "--methods",
            "dcpdd",
            "--freq-table",
            table_path,
            "--out",
            out,
            "--quiet",
        )
        == 0
    )
    assert all(0 < row["dcpdd"] <= 0.01 for row in read_jsonl(out))


def test_build_tokens_and_merge(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for i in range(2):
        rng.integers(0, 1000, 10_000).astype(np.uint16).tofile(tmp_path / f"shard{i}.bin")
    for i in range(2):
        assert (
            run_cli(
                "freq",
                "build-tokens",
                tmp_path / f"shard{i}.bin",
                "--dtype",
                "uint16",
                "--vocab-size",
                1000,
                "--out",
                tmp_path / f"t{i}.freq",
                "--quiet",
            )
            == 0
        )
    assert run_cli("freq", "merge", tmp_path / "t0.freq", tmp_path / "t1.freq", "--out", tmp_path / "all.freq") == 0
    assert "wrote" in capsys.readouterr().out
    merged = FrequencyTable.load(tmp_path / "all.freq")
    ids = np.concatenate([np.fromfile(tmp_path / f"shard{i}.bin", np.uint16) for i in range(2)])
    np.testing.assert_array_equal(merged.counts, np.bincount(ids, minlength=1000))
    assert merged.documents is None and len(merged.sources) == 2


def test_existing_output_is_never_replaced_without_overwrite(tmp_path, capsys):
    np.arange(10, dtype=np.uint16).tofile(tmp_path / "a.bin")
    out = tmp_path / "t.freq"
    assert (
        run_cli(
            "freq", "build-tokens", tmp_path / "a.bin", "--dtype", "uint16", "--vocab-size", 10, "--out", out, "--quiet"
        )
        == 0
    )
    before = out.read_bytes()
    assert "exists; pass --overwrite" in fail(
        capsys, "freq", "build-tokens", tmp_path / "a.bin", "--dtype", "uint16", "--vocab-size", 20, "--out", out
    )
    assert "is the input" in fail(capsys, "freq", "merge", out, out, "--out", out)
    assert out.read_bytes() == before
    assert (
        run_cli(
            "freq",
            "build-tokens",
            tmp_path / "a.bin",
            "--dtype",
            "uint16",
            "--vocab-size",
            20,
            "--out",
            out,
            "--overwrite",
            "--quiet",
        )
        == 0
    )
    assert FrequencyTable.load(out).vocab_size == 20


def test_bad_inputs_stop_with_one_line(tiny_model_dir, tmp_path, capsys):
    np.arange(10, dtype=np.uint16).tofile(tmp_path / "a.bin")
    for vocab, name in ((10, "v10.freq"), (12, "v12.freq")):
        run_cli(
            "freq",
            "build-tokens",
            tmp_path / "a.bin",
            "--dtype",
            "uint16",
            "--vocab-size",
            vocab,
            "--out",
            tmp_path / name,
            "--quiet",
        )
    capsys.readouterr()
    assert "v12.freq has vocab_size 12, " in fail(
        capsys, "freq", "merge", tmp_path / "v10.freq", tmp_path / "v12.freq", "--out", tmp_path / "m.freq"
    )
    assert "a.bin: token id 5 at position 5 is outside the vocabulary [0, 5)" in fail(
        capsys,
        "freq",
        "build-tokens",
        tmp_path / "a.bin",
        "--dtype",
        "uint16",
        "--vocab-size",
        5,
        "--out",
        tmp_path / "x.freq",
    )
    truncated = tmp_path / "truncated.freq"
    truncated.write_bytes((tmp_path / "v10.freq").read_bytes()[:-1])
    assert "checksum mismatch" in fail(capsys, "freq", "info", truncated)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{oops\n')
    assert "bad.jsonl:2: not valid JSON" in fail(
        capsys, "freq", "build", bad, "--tokenizer", tiny_model_dir, "--out", tmp_path / "b.freq"
    )
    assert not (tmp_path / "b.freq").exists()
    assert (
        run_cli(
            "freq",
            "build",
            bad,
            "--tokenizer",
            tiny_model_dir,
            "--out",
            tmp_path / "b.freq",
            "--skip-bad-records",
            "--quiet",
        )
        == 0
    )
    assert "skipped 1 bad record(s)" in capsys.readouterr().err
    assert "no such directory" in fail(
        capsys,
        "freq",
        "build-tokens",
        tmp_path / "a.bin",
        "--dtype",
        "uint16",
        "--vocab-size",
        10,
        "--out",
        tmp_path / "nowhere" / "t.freq",
    )
    assert "no-model: no such model directory" in fail(
        capsys, "freq", "build", bad, "--tokenizer", tmp_path / "no-model", "--out", tmp_path / "c.freq"
    )


# ---- freq merge: one tokenizer, no document counted twice; freq info --top: seen ids only (issue 67) ----


def tokenizer_folders(model_dir, root):
    """The model as it is, and the same with a Lowercase normalizer in its tokenizer.json."""
    folders = {}
    for name, normalizer in (("plain", None), ("lower", {"type": "Lowercase"})):
        folder = root / name
        folder.mkdir()
        for file in model_dir.iterdir():
            folder.joinpath(file.name).write_bytes(file.read_bytes())
        spec = json.loads((folder / "tokenizer.json").read_text())
        spec["normalizer"] = normalizer
        (folder / "tokenizer.json").write_text(json.dumps(spec))
        folders[name] = folder
    return folders


def test_merge_refuses_tables_of_a_tokenizer_with_and_without_its_normalizer(tiny_model_dir, tmp_path, capsys):
    """On 96930e1 the two merged in silence: the same text gave other ids in each."""
    folders = tokenizer_folders(tiny_model_dir, tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("".join(f"{text.upper()} {i}\n" for i, text in enumerate(CORPUS)))
    (corpus / "b.txt").write_text("".join(f"{text} {i}\n" for i, text in enumerate(CORPUS)))
    for name, source in (("lower", "a.txt"), ("plain", "b.txt")):
        argv = ("freq", "build", corpus / source, "--tokenizer", folders[name], "--out", tmp_path / f"{name}.freq")
        assert run_cli(*argv, "--quiet") == 0
    lower, plain = (FrequencyTable.load(tmp_path / f"{n}.freq") for n in ("lower", "plain"))
    assert lower.counts.tolist() != plain.counts.tolist()
    merge = ("freq", "merge", tmp_path / "lower.freq", tmp_path / "plain.freq", "--out", tmp_path / "m.freq")
    for allowing in ((), ("--allow-overlap",)):  # an overlap allowed is no tokenizer allowed
        assert refused(capsys, *merge, *allowing, keep=[tmp_path]) == (
            f"mia-fast: error: cannot merge {tmp_path / 'lower.freq'} and {tmp_path / 'plain.freq'}: they were "
            "counted with different tokenizers (their normalizers differ)"
        )


def build_tokens(source, out, *more):
    argv = ("freq", "build-tokens", source, *more, "--dtype", "uint16", "--vocab-size", 10, "--out", out, "--quiet")
    assert run_cli(*argv) == 0


def test_merge_refuses_a_shared_source_and_a_copy_unless_allowed(tmp_path, capsys):
    """On 96930e1 both merged in silence, counting a.bin's ids twice and listing it twice."""
    np.array([1, 2, 2, 3], np.uint16).tofile(tmp_path / "a.bin")
    np.array([4, 4, 5], np.uint16).tofile(tmp_path / "b.bin")
    build_tokens(tmp_path / "a.bin", tmp_path / "a.freq")
    build_tokens(tmp_path / "a.bin", tmp_path / "ab.freq", tmp_path / "b.bin")
    (tmp_path / "copy.freq").write_bytes((tmp_path / "a.freq").read_bytes())
    capsys.readouterr()
    a, ab, copy, out = (tmp_path / name for name in ("a.freq", "ab.freq", "copy.freq", "m.freq"))
    shared = refused(capsys, "freq", "merge", a, ab, "--out", out, keep=[tmp_path])
    assert shared == (
        f"mia-fast: error: cannot merge {a} and {ab}: both count {tmp_path / 'a.bin'} (the same path), whose "
        "documents would be counted twice; pass --allow-overlap (allow_overlap=True) to merge them anyway"
    )
    assert f"cannot merge {a} and {copy}: " in refused(capsys, "freq", "merge", a, copy, "--out", out, keep=[tmp_path])

    assert run_cli("freq", "merge", a, ab, "--out", out, "--allow-overlap") == 0
    merged = FrequencyTable.load(out)
    assert merged.counts.tolist() == [0, 2, 4, 2, 2, 1, 0, 0, 0, 0]
    assert [(s.path, s.counted) for s in merged.sources] == [(str(tmp_path / "a.bin"), 2), (str(tmp_path / "b.bin"), 1)]
    capsys.readouterr()
    assert run_cli("freq", "info", out) == 0
    assert (
        f"sources                2: {tmp_path / 'a.bin'} (counted twice), {tmp_path / 'b.bin'}; 1 counted more than "
        "once (merged with --allow-overlap)\n"
    ) in capsys.readouterr().out


def test_info_top_lists_only_ids_seen_and_says_when_fewer(tmp_path, capsys):
    """On 96930e1 ``--top 8`` listed ids of count 0 among the most frequent."""
    np.array([3, 3, 7, 3, 1, 7], np.uint16).tofile(tmp_path / "a.bin")
    build_tokens(tmp_path / "a.bin", tmp_path / "a.freq")
    capsys.readouterr()
    assert run_cli("freq", "info", tmp_path / "a.freq", "--top", 8) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:] == [
        "   1. id       3: 3 (50.000%)",
        "   2. id       7: 2 (33.333%)",
        "   3. id       1: 1 (16.667%)",
        "only 3 id(s) have a count above 0: fewer than --top 8",
    ]
    assert run_cli("freq", "info", tmp_path / "a.freq", "--top", 2) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "   1. id       3: 3 (50.000%)",
        "   2. id       7: 2 (33.333%)",
    ]
