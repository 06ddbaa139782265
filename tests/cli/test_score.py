"""``mia-fast score`` and ``mia-fast eval`` end to end on a tiny model: every input format, one row per input row in
order, reports and their comparison, resuming after a torn write or a kill, and each bad input refused in one line."""

import csv
import gzip
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import FAST, fail, fail_writes, read_jsonl, rows_in, run_cli, wait_until, write_jsonl


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_score_writes_one_row_per_input_in_order(tiny_model_dir, labelled_jsonl, tmp_path, suffix):
    out = tmp_path / f"scores{suffix}"
    assert run_cli("score", labelled_jsonl, "--model", tiny_model_dir, "--out", out, "--block-rows", "5", *FAST) == 0
    if suffix == ".jsonl":
        rows = read_jsonl(out)
    elif suffix == ".csv":
        rows = list(csv.DictReader(out.open()))
    else:
        rows = pq.read_table(out).to_pylist()
        assert not (tmp_path / "scores.parquet.partial.jsonl").exists()
    inputs = read_jsonl(labelled_jsonl)
    assert [r["id"] for r in rows] == [r["id"] for r in inputs]
    assert [int(r["label"]) for r in rows] == [r["label"] for r in inputs]
    assert list(rows[0]) == [
        "id",
        "label",
        "n_tokens",
        "loss",
        "zlib",
        "mink_0.2",
        "mink_1.0",
        "minkpp_0.2",
        "minkpp_1.0",
        "warning",
    ]
    assert all(float(r["mink_1.0"]) == pytest.approx(float(r["loss"]), rel=1e-6) for r in rows)


def test_eval_writes_metrics_and_roc(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    report = tmp_path / "report"
    assert (
        run_cli("eval", labelled_jsonl, "--model", tiny_model_dir, "--report", report, "--bootstrap", "200", *FAST) == 0
    )
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics["methods"]) == {
        "loss",
        "zlib",
        "mink_0.2",
        "mink_1.0",
        "minkpp_0.2",
        "minkpp_1.0",
        "blind_bow",
        "blind_dates",
        "blind_ngrams",
    }
    loss = metrics["methods"]["loss"]
    assert loss["n_members"] == 12 and loss["n_nonmembers"] == 12
    assert loss["auroc_ci"][0] <= loss["auroc"] <= loss["auroc_ci"][1]
    assert set(loss["tpr_at_fpr"]) == {"0.1%", "1%", "5%"}
    assert (report / "roc.png").stat().st_size > 10_000
    assert (report / "scores.jsonl").exists()
    table = capsys.readouterr().out
    aurocs = [float(line.split()[1]) for line in table.splitlines()[2:10]]
    assert aurocs == sorted(aurocs, reverse=True)


def test_dcpdd_with_counts_and_reference_model(tiny_model_dir, tiny_reference_dir, labelled_jsonl, tmp_path):
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(tiny_model_dir).vocab_size
    counts = tmp_path / "counts.npy"
    np.save(counts, np.arange(vocab, dtype=np.int64))
    out = tmp_path / "s.jsonl"
    code = run_cli(
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--ref-model",
        tiny_reference_dir,
        "--freq-counts",
        counts,
        "--methods",
        "dcpdd,ref,lowercase",
        "--out",
        out,
        "--quiet",
    )
    assert code == 0
    rows = read_jsonl(out)
    assert all(0 < r["dcpdd"] <= 0.01 for r in rows)
    assert all(np.isfinite(r["ref"]) and np.isfinite(r["lowercase"]) for r in rows)


# ---- bad input: one clear line, exit 2, nothing written is lost ----


def test_empty_file(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "empty.jsonl"
    data.write_text("")
    assert "holds no rows" in fail(capsys, "score", data, "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl")


def test_row_without_text_field(tiny_model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b"}, {"body": "c"}])
    message = fail(capsys, "score", data, "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl")
    assert "line 2 has no 'text' field (fields: body)" in message


def test_malformed_json_reports_line_number(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "fine"}\n\n{"text": "broken"\n')
    assert f"{data}:3: malformed JSON" in fail(
        capsys, "score", data, "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl"
    )


def test_gzipped_jsonl_and_csv_inputs(tiny_model_dir, tmp_path):
    gz = tmp_path / "d.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(json.dumps({"text": "the fox", "label": 1}) + "\n" + json.dumps({"text": "the dog", "label": 0}) + "\n")
    plain = tmp_path / "d.csv"
    plain.write_text('text,label\n"the fox, again",1\nthe dog,0\n')
    for data in (gz, plain):
        out = tmp_path / f"{data.name}.out.jsonl"
        assert run_cli("score", data, "--model", tiny_model_dir, "--out", out, *FAST) == 0
        assert [r["label"] for r in read_jsonl(out)] == [1, 0]


@pytest.mark.parametrize("label", [2, "maybe", -1])
def test_labels_other_than_0_1(tiny_model_dir, tmp_path, capsys, label):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": 0}, {"text": "b", "label": label}])
    assert 'is neither member (1, true, "member") nor non-member' in fail(
        capsys, "eval", data, "--model", tiny_model_dir, "--report", tmp_path / "r"
    )


def test_member_nonmember_words_and_booleans_are_labels(tiny_model_dir, tmp_path):
    rows = [
        {"text": "a fox", "label": "member"},
        {"text": "the dog", "label": "Non-Member"},
        {"text": "x y", "label": True},
        {"text": "z", "label": False},
    ]
    out = tmp_path / "o.jsonl"
    assert (
        run_cli("score", write_jsonl(tmp_path / "d.jsonl", rows), "--model", tiny_model_dir, "--out", out, *FAST) == 0
    )
    assert [r["label"] for r in read_jsonl(out)] == [1, 0, 1, 0]


def test_eval_without_labels_or_one_class(tiny_model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a"}, {"text": "b"}])
    assert "needs 0/1 labels" in fail(capsys, "eval", data, "--model", tiny_model_dir, "--report", tmp_path / "r")
    data = write_jsonl(tmp_path / "d1.jsonl", [{"text": "a", "label": 1}, {"text": "b", "label": 1}])
    assert "all members" in fail(capsys, "eval", data, "--model", tiny_model_dir, "--report", tmp_path / "r")


def test_unknown_method(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    assert "unknown method 'minz'" in fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "loss,minz",
        "--out",
        tmp_path / "o.jsonl",
    )
    assert not (tmp_path / "o.jsonl").exists()


def test_dcpdd_without_counts_or_wrong_length(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert "needs a token frequency table" in fail(
        capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--methods", "dcpdd", "--out", out
    )
    counts = tmp_path / "c.npy"
    np.save(counts, np.ones(10, np.int64))
    message = fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "dcpdd",
        "--freq-counts",
        counts,
        "--out",
        out,
    )
    assert "cover 10 ids but the model's vocabulary has" in message


def test_ref_without_model_or_failing_to_load(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert "needs a reference model" in fail(
        capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--methods", "ref", "--out", out
    )
    message = fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "ref",
        "--ref-model",
        tmp_path / "missing",
        "--out",
        out,
        "--overwrite",
    )
    assert message == f"mia-fast: error: {tmp_path / 'missing'}: no such model directory"


def test_unwritable_output(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "cannot write" in fail(
        capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--out", blocker / "sub" / "o.jsonl"
    )
    assert "unsupported output format" in fail(
        capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--out", tmp_path / "o.txt"
    )


def test_cuda_requested_without_cuda(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert "CUDA is not available" in fail(
        capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--device", "cuda", "--out", tmp_path / "o.jsonl"
    )


def test_existing_output_is_never_clobbered(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    out.write_text("precious\n")
    assert "exists; pass --resume" in fail(capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--out", out)
    assert out.read_text() == "precious\n"


def test_resume_after_torn_write_equals_uninterrupted_run(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    full = tmp_path / "full.jsonl"
    assert run_cli("score", labelled_jsonl, "--model", tiny_model_dir, "--out", full, *FAST) == 0
    partial = tmp_path / "partial.jsonl"
    score = ["score", labelled_jsonl, "--model", tiny_model_dir, "--out", partial, "--block-rows", "7", *FAST]
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=1)  # the disk fills up in the middle of row 10
        assert "the 7 rows finished are kept: continue with --resume" in fail(capsys, *score)
    assert not partial.exists()
    assert run_cli(*score, "--resume") == 0
    assert "resuming" in capsys.readouterr().err
    resumed, uninterrupted = read_jsonl(partial), read_jsonl(full)
    assert [r["id"] for r in resumed] == [r["id"] for r in uninterrupted]
    assert resumed[:7] == uninterrupted[:7]  # finished rows are kept byte for byte
    for column in ("loss", "minkpp_0.2", "minkpp_1.0"):
        np.testing.assert_allclose([r[column] for r in resumed], [r[column] for r in uninterrupted], rtol=1e-6)


def test_resume_refuses_other_columns_or_inputs(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    out = tmp_path / "o.csv"
    assert run_cli("score", labelled_jsonl, "--model", tiny_model_dir, "--out", out, *FAST) == 0
    before = out.read_text()
    assert "cannot resume with other methods" in fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--out",
        out,
        "--resume",
        "--methods",
        "loss",
        "--quiet",
    )
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": f"x{i}", "text": "a b", "label": 0} for i in range(30)])
    assert "rows 1-24 of" in fail(capsys, "score", other, "--model", tiny_model_dir, "--out", out, "--resume", *FAST)
    assert out.read_text() == before


def test_killed_run_resumes_without_losing_rows(tiny_model_dir, tmp_path):
    rows = [{"id": i, "text": f"the quick brown fox number {i} jumps", "label": i % 2} for i in range(3000)]
    data = write_jsonl(tmp_path / "many.jsonl", rows)
    out = tmp_path / "o.jsonl"
    base = [
        sys.executable,
        "-m",
        "mia_fast.cli",
        "score",
        str(data),
        "--model",
        str(tiny_model_dir),
        "--methods",
        "loss",
        "--quiet",
    ]
    command = [*base, "--out", str(out), "--block-rows", "20"]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    staged = tmp_path / "o.jsonl.partial" / "rows.jsonl"
    wait_until(lambda: rows_in(staged) >= 100, "100 rows were staged", process)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written = staged.read_text().count("\n")
    assert 100 <= written < len(rows) and not out.exists(), "the run must be killed midway"
    subprocess.run([*command, "--resume"], check=True, stderr=subprocess.DEVNULL)
    result = read_jsonl(out)
    assert [r["id"] for r in result] == list(range(len(rows)))
    uninterrupted = tmp_path / "u.jsonl"
    subprocess.run([*base, "--out", str(uninterrupted), "--block-rows", "500"], check=True, stderr=subprocess.DEVNULL)
    np.testing.assert_allclose([r["loss"] for r in result], [r["loss"] for r in read_jsonl(uninterrupted)], rtol=1e-5)


def test_empty_and_one_token_texts_get_nan_and_warning(tiny_model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": ""}, {"text": "  "}, {"text": "a"}, {"text": "the fox"}])
    out = tmp_path / "o.jsonl"
    assert run_cli("score", data, "--model", tiny_model_dir, "--out", out, "--no-prepend-start", *FAST) == 0
    rows = read_jsonl(out)
    assert [r["loss"] is None for r in rows] == [True, True, True, False]
    assert [bool(r["warning"]) for r in rows] == [True, True, True, False]
    assert "3 texts could not be scored" in capsys.readouterr().err


@pytest.fixture(scope="module")
def wikimia_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("wikimia")
    words = "the quick brown fox jumps over the lazy dog while rain falls on spain".split()
    rows = [
        {"input": " ".join(words[(i + j) % len(words)] for j in range(3 + 7 * (i % 6))), "label": (i // 6) % 2}
        for i in range(36)
    ]
    write_jsonl(root / "WikiMIA_length64.jsonl", rows)
    return root


def test_eval_on_a_suite_with_buckets_writes_a_full_report(tiny_model_dir, wikimia_dir, tmp_path, capsys):
    report = tmp_path / "report"
    assert (
        run_cli(
            "eval",
            wikimia_dir,
            "--suite",
            "wikimia",
            "--split",
            "WikiMIA_length64",
            "--model",
            tiny_model_dir,
            "--report",
            report,
            "--buckets",
            "10,20",
            "--max-words",
            "30",
            "--bootstrap",
            "50",
            *FAST,
        )
        == 0
    )
    payload = json.loads((report / "metrics.json").read_text())
    assert set(payload["buckets"]) == {"≤10", "11–20", ">20"}
    assert payload["buckets"]["≤10"]["loss"]["n_members"] == 6  # lengths 3 and 10, six of each label
    # Within a bucket a blind baseline is not refitted: shuffles over its fixed scores would test nothing, so no p.
    bucket = payload["buckets"]["≤10"]
    assert bucket["blind_bow"]["significance"]["permutation_p"] is None
    assert 0 < bucket["loss"]["significance"]["permutation_p"] <= 1
    assert payload["meta"]["data"] == f"wikimia:WikiMIA_length64 ({wikimia_dir})" and payload["meta"]["max_words"] == 30
    for name in ("roc.png", "histograms.png", "report.md", "report.html", "scores.jsonl"):
        assert (report / name).stat().st_size > 0
    markdown = (report / "report.md").read_text()
    assert "AUROC by text length in words" in markdown and "![ROC curves" in markdown
    assert (
        markdown.count("data:image") == 0 and (report / "report.html").read_text().count("data:image/png;base64,") == 3
    )  # ROC, histograms, AUROC against k


def test_compare_prints_the_deltas_of_two_reports(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    for name, k in (("a", "0.2"), ("b", "0.5")):
        assert (
            run_cli(
                "eval",
                labelled_jsonl,
                "--model",
                tiny_model_dir,
                "--report",
                tmp_path / name,
                "--methods",
                "loss,mink",
                "--k",
                k,
                "--quiet",
                "--bootstrap",
                "20",
            )
            == 0
        )
    capsys.readouterr()
    assert run_cli("eval", "--compare", tmp_path / "a", tmp_path / "b") == 0
    out = capsys.readouterr().out
    assert "loss" in out and "+0.000" in out and "only in A: mink_0.2" in out and "only in B: mink_0.5" in out
    assert "not a mia-fast metrics file" in fail(capsys, "eval", "--compare", tmp_path / "a", tmp_path)
