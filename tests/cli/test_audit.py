"""``mia-fast calibrate`` and ``mia-fast classify`` end to end on a tiny model, with the bad inputs of each."""

import json

import pytest
from helpers import fail, read_jsonl, run_cli, write_jsonl


def test_calibrate_then_classify_with_per_book_rates(tiny_model_dir, tmp_path, capsys):
    words = "call me ishmael some years ago never mind how long precisely having little money in my purse".split()
    validation = [{"text": " ".join(words[i % 5 :][: 4 + i % 7]), "label": i % 2} for i in range(30)]
    write_jsonl(tmp_path / "val.jsonl", validation)
    threshold = tmp_path / "t.json"
    assert (
        run_cli(
            "calibrate",
            tmp_path / "val.jsonl",
            "--model",
            tiny_model_dir,
            "--method",
            "mink_0.2",
            "--out",
            threshold,
            "--quiet",
        )
        == 0
    )
    assert "mink_0.2 >= " in capsys.readouterr().out
    saved = json.loads(threshold.read_text())
    assert saved["method"] == "mink_0.2" and saved["settings"]["model"] == str(tiny_model_dir)

    books = [{"text": v["text"], "book": f"book {i % 3}"} for i, v in enumerate(validation)]
    write_jsonl(tmp_path / "books.jsonl", books)
    out = tmp_path / "flags.jsonl"
    assert (
        run_cli(
            "classify",
            tmp_path / "books.jsonl",
            "--model",
            tiny_model_dir,
            "--threshold",
            threshold,
            "--group-field",
            "book",
            "--out",
            out,
            "--quiet",
        )
        == 0
    )
    printed = capsys.readouterr().out
    rows = read_jsonl(out)
    assert len(rows) == 30 and {r["group"] for r in rows} == {"book 0", "book 1", "book 2"}
    rates = json.loads((tmp_path / "flags.rates.json").read_text())["groups"]
    for entry in rates:
        flagged = sum(r["member"] for r in rows if r["group"] == entry["group"])
        assert entry["flagged"] == flagged and entry["rate"] == pytest.approx(flagged / 10)
    assert "book 0" in printed and "scored texts flagged" in printed


def test_audit_bad_inputs(tiny_model_dir, tiny_reference_dir, tmp_path, capsys):
    write_jsonl(tmp_path / "nonmembers.jsonl", [{"text": f"the fox {i}", "label": 0} for i in range(4)])
    assert "the validation set has no members (with a score); a threshold needs both" in fail(
        capsys,
        "calibrate",
        tmp_path / "nonmembers.jsonl",
        "--model",
        tiny_model_dir,
        "--method",
        "loss",
        "--out",
        tmp_path / "t.json",
    )
    assert not list(tmp_path.glob("t.*"))  # refused before anything was scored or written
    write_jsonl(tmp_path / "val.jsonl", [{"text": f"the fox {'dog ' * i}", "label": i % 2} for i in range(6)])
    assert (
        run_cli(
            "calibrate",
            tmp_path / "val.jsonl",
            "--model",
            tiny_model_dir,
            "--method",
            "loss",
            "--out",
            tmp_path / "t.json",
            "--quiet",
        )
        == 0
    )
    message = fail(
        capsys,
        "classify",
        tmp_path / "val.jsonl",
        "--model",
        tiny_model_dir,
        "--threshold",
        tmp_path / "t.json",
        "--method",
        "mink_0.2",
        "--out",
        tmp_path / "f.jsonl",
    )
    assert "is a threshold for loss, not mink_0.2" in message
    message = fail(
        capsys,
        "classify",
        tmp_path / "val.jsonl",
        "--model",
        tiny_reference_dir,
        "--threshold",
        tmp_path / "t.json",
        "--out",
        tmp_path / "f.jsonl",
    )
    assert "calibrated under other scoring settings (model: calibrated with" in message
    for option, value in (("--max-length", "16"), ("--dtype", "bf16")):
        classify = ["classify", tmp_path / "val.jsonl", "--model", tiny_model_dir, "--threshold", tmp_path / "t.json"]
        message = fail(capsys, *classify, option, value, "--out", tmp_path / "f.jsonl")
        assert f"calibrated under other scoring settings ({option[2:].replace('-', '_')}: calibrated with" in message
    assert "--method takes one score column" in fail(
        capsys,
        "calibrate",
        tmp_path / "val.jsonl",
        "--model",
        tiny_model_dir,
        "--method",
        "mink",
        "--out",
        tmp_path / "u.json",
    )
    assert "val.jsonl is not a mia-fast threshold v2 file (not JSON)" in fail(
        capsys,
        "classify",
        tmp_path / "val.jsonl",
        "--model",
        tiny_model_dir,
        "--threshold",
        tmp_path / "val.jsonl",
        "--out",
        tmp_path / "f.jsonl",
    )
    assert "give DATA (a file of texts) or --suite NAME" in fail(
        capsys, "score", "--model", tiny_model_dir, "--out", tmp_path / "s.jsonl"
    )
    assert "--split and --config select within a --suite" in fail(
        capsys, "score", tmp_path / "val.jsonl", "--split", "x", "--out", tmp_path / "s.jsonl"
    )
