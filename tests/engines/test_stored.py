"""The engines that hold token statistics and no model: a stats cache read alone (``mia-fast rescore``) and saved
TokenStats."""

import numpy as np
from helpers import run_cli, write_jsonl

from engines.test_stats_cache import PREFIX, TEXTS
from mia_fast import ComputeConfig, Detector, RecallSettings


def test_rescore_reads_the_cache_alone_with_other_methods_and_refuses_what_it_lacks(
    tiny_model_dir, tiny_reference_dir, tmp_path, monkeypatch, capsys
):
    from helpers import fail, read_jsonl

    import mia_fast.pipeline.models as models

    write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(TEXTS)])
    (tmp_path / "prefix.txt").write_text(PREFIX[0] + "\n")
    cache = tmp_path / "cache"
    assert (
        run_cli(
            "score",
            tmp_path / "in.jsonl",
            "--model",
            tiny_model_dir,
            "--stats-cache",
            cache,
            "--out",
            tmp_path / "first.jsonl",
            "--methods",
            "loss,lowercase,recall",
            "--prefix-nonmembers",
            tmp_path / "prefix.txt",
            "--quiet",
        )
        == 0
    )
    reference = Detector(str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)]).score(
        TEXTS, methods=["loss", "zlib", "mink", "minkpp", "lowercase", "recall"], k=[0.2, 0.7]
    )

    def no_model(*args, **kwargs):
        raise AssertionError("rescore loaded a model")

    monkeypatch.setattr(models, "load_model", no_model)
    rescore = ("rescore", tmp_path / "in.jsonl", "--stats-cache", cache, "--quiet")
    assert (
        run_cli(
            *rescore,
            "--out",
            tmp_path / "again.jsonl",
            "--methods",
            "loss,zlib,mink,minkpp,lowercase,recall",
            "--k",
            "0.2,0.7",
            "--prefix-nonmembers",
            tmp_path / "prefix.txt",
        )
        == 0
    )
    rows = read_jsonl(tmp_path / "again.jsonl")
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))
    for column, values in reference.items():
        np.testing.assert_allclose(
            [np.nan if r[column] is None else r[column] for r in rows], values, rtol=1e-5, atol=1e-7, err_msg=column
        )

    assert "method 'samia' needs the model, which token statistics do not hold" in fail(
        capsys, *rescore, "--out", tmp_path / "s.jsonl", "--methods", "samia"
    )
    assert "method 'ref' needs a reference model" in fail(
        capsys, *rescore, "--out", tmp_path / "r.jsonl", "--methods", "ref"
    )
    write_jsonl(tmp_path / "new.jsonl", [{"text": "never scored before"}])
    message = fail(
        capsys, "rescore", tmp_path / "new.jsonl", "--stats-cache", cache, "--out", tmp_path / "n.jsonl", "--quiet"
    )
    assert "1 pass(es) of these texts are not in the stats cache" in message and "never scored before" in message
    assert "holds no stats cache" in fail(
        capsys, *rescore[:2], "--stats-cache", tmp_path / "empty", "--out", tmp_path / "e.jsonl"
    )

    monkeypatch.undo()
    Detector(str(tiny_reference_dir), compute=ComputeConfig(stats_cache=cache)).score(TEXTS[:1], methods=["loss"])
    assert "it holds 2 settings; pick one with --setting" in fail(
        capsys, *rescore, "--out", tmp_path / "two.jsonl", "--methods", "loss"
    )
    setting = Detector(str(tiny_model_dir), compute=ComputeConfig(stats_cache=cache)).target.cache.setting_id
    assert run_cli(*rescore, "--out", tmp_path / "picked.jsonl", "--methods", "loss", "--setting", setting[:8]) == 0


def test_rescore_from_a_saved_token_stats_file_serves_the_plain_pass_and_refuses_the_rest(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    from helpers import fail, read_jsonl

    import mia_fast.pipeline.models as models

    texts = [t for t in TEXTS if t.islower() or not t]
    write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)])
    detector = Detector(str(tiny_model_dir))
    detector.token_stats(texts).save(tmp_path / "stats.npz")
    reference = detector.score(texts, methods=["loss", "zlib", "mink", "minkpp", "lowercase"], k=[0.2, 0.7])
    monkeypatch.setattr(
        models, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rescore loaded a model"))
    )
    rescore = ("rescore", tmp_path / "in.jsonl", "--stats", tmp_path / "stats.npz", "--quiet")
    assert (
        run_cli(
            *rescore,
            "--out",
            tmp_path / "again.jsonl",
            "--methods",
            "loss,zlib,mink,minkpp,lowercase",
            "--k",
            "0.2,0.7",
        )
        == 0
    )
    rows = read_jsonl(tmp_path / "again.jsonl")
    for column, values in reference.items():
        np.testing.assert_array_equal(
            [np.nan if r[column] is None else r[column] for r in rows], values, err_msg=column
        )

    (tmp_path / "prefix.txt").write_text(PREFIX[0] + "\n")
    assert "holds the plain pass only" in fail(
        capsys,
        *rescore,
        "--out",
        tmp_path / "r.jsonl",
        "--methods",
        "recall",
        "--prefix-nonmembers",
        tmp_path / "prefix.txt",
    )
    write_jsonl(tmp_path / "upper.jsonl", [{"text": t.upper()} for t in texts])
    message = fail(
        capsys,
        "rescore",
        tmp_path / "upper.jsonl",
        "--stats",
        tmp_path / "stats.npz",
        "--out",
        tmp_path / "u.jsonl",
        "--methods",
        "lowercase",
    )
    assert "holds the plain pass of the input's texts only" in message
    write_jsonl(tmp_path / "fewer.jsonl", [{"text": t} for t in texts[:2]])
    message = fail(
        capsys, "rescore", tmp_path / "fewer.jsonl", "--stats", tmp_path / "stats.npz", "--out", tmp_path / "f.jsonl"
    )
    assert f"holds the stats of {len(texts)} texts but the input has 2" in message
    assert "a --stats file holds one" in fail(capsys, *rescore, "--out", tmp_path / "x.jsonl", "--setting", "abc")
