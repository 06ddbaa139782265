"""``score --ray`` on a local Ray of 2 CPUs against one process: the same rows (byte for byte in .jsonl, equal
tables in .parquet); finished shards kept when a run is resumed, after a shard is lost, a model actor is killed (Ray
restarts it) or the driver is killed; settings that cannot be sharded refused in one line before Ray starts."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import random_sentence
from helpers import FAST, PROGRESS_CAP_S, fail, run_cli, wait_until

from mia_fast.errors import MiaFastError

SHARDING = ["--block-rows", "4", "--shard-rows", "8"]


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory):
    """64 labelled rows: 16 shards of 4, enough that a run can be stopped midway."""
    rng = random.Random(1)
    path = tmp_path_factory.mktemp("many") / "many.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": i, "text": random_sentence(rng, rng.choice([4, 12, 40])), "label": i % 2}) + "\n"
            for i in range(64)
        )
    )
    return path


@pytest.fixture(scope="module")
def many_rows_scored(many_rows, tiny_model_dir, tmp_path_factory):
    """``many_rows`` scored in one process, in blocks of 4."""
    return score(
        many_rows, tiny_model_dir, tmp_path_factory.mktemp("many-single") / "single.jsonl", "--block-rows", "4"
    )


def score(data, model, out, *extra):
    assert run_cli("score", data, "--model", model, "--out", out, *FAST, *extra) == 0
    return out


def shard_times(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(Path(f"{out}.shards").glob("shard-*.parquet"))}


@pytest.fixture(scope="module")
def ray_jsonl(ray_cluster, tiny_model_dir, labelled_jsonl, tmp_path_factory):
    """A --ray run of the 24 labelled rows in 3 shards, and the same rows scored in one process."""
    root = tmp_path_factory.mktemp("ray-jsonl")
    single = score(labelled_jsonl, tiny_model_dir, root / "single.jsonl", "--block-rows", "4")
    return score(
        labelled_jsonl, tiny_model_dir, root / "scores.jsonl", "--ray", "--ray-workers", "2", *SHARDING
    ), single


def test_ray_output_equals_one_process_byte_for_byte(ray_jsonl):
    out, single = ray_jsonl
    assert out.read_bytes() == single.read_bytes()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"doc-{i}" for i in range(24)] and [r["label"] for r in rows] == [
        i % 2 for i in range(24)
    ]
    directory = Path(f"{out}.shards")
    assert sorted(p.name for p in directory.iterdir()) == [
        "_manifest.json",
        "shard-00000.parquet",
        "shard-00001.parquet",
        "shard-00002.parquet",
    ]
    manifest = json.loads((directory / "_manifest.json").read_text())
    assert manifest["rows"] == 24 and manifest["finished"] == {"0": 8, "1": 8, "2": 8} and manifest["merged"]
    assert pq.read_table(directory).num_rows == 24  # the directory reads as one Parquet dataset


def test_a_rerun_is_refused_unless_resumed_with_the_same_settings(ray_jsonl, tiny_model_dir, labelled_jsonl, capsys):
    out, _ = ray_jsonl
    common = ["score", labelled_jsonl, "--model", tiny_model_dir, "--out", out, *FAST, "--ray", *SHARDING]
    error = fail(capsys, *common)
    assert f"{out} exists; pass --resume to continue it" in error  # the output gate's line, before Ray starts
    refused = fail(capsys, *common, "--resume", "--a", "0.02")
    assert "holds a run with other settings (a differ); pass --overwrite" in refused
    before = out.read_bytes(), shard_times(out)
    assert run_cli(*common, "--resume") == 0
    assert "all 24 rows already scored" in capsys.readouterr().err
    assert (out.read_bytes(), shard_times(out)) == before


def test_parquet_output_and_a_missing_shard_rescored_alone(ray_jsonl, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    """The shards of the .jsonl run written out as .parquet (their manifest does not depend on OUT's format);
    then, as if that run had stopped with one shard unwritten, a resume that scores only that shard."""
    import shutil

    single = score(labelled_jsonl, tiny_model_dir, tmp_path / "single.parquet", "--block-rows", "4")
    out = tmp_path / "scores.parquet"
    shutil.copytree(f"{ray_jsonl[0]}.shards", f"{out}.shards")
    kept = shard_times(out)
    command = [labelled_jsonl, tiny_model_dir, out, "--ray", "--ray-workers", "1", *SHARDING, "--resume"]
    capsys.readouterr()
    score(*command)
    assert "resuming: 3 of 3 shards already scored" in capsys.readouterr().err
    assert pq.read_table(out).equals(pq.read_table(single)) and shard_times(out) == kept

    out.unlink()
    Path(f"{out}.shards/shard-00001.parquet").unlink()
    score(*command)
    assert "resuming: 2 of 3 shards already scored" in capsys.readouterr().err
    after = shard_times(out)
    assert after.keys() == kept.keys() and [name for name in kept if after[name] != kept[name]] == [
        "shard-00001.parquet"
    ]
    assert pq.read_table(out).equals(pq.read_table(single))


def model_actors() -> list[int]:
    """Process ids of the running model actors (their process title names the actor class)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"MapBatches(ShardScorer)" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_killed_model_actor_is_restarted_and_the_output_is_unchanged(
    ray_cluster, tiny_model_dir, many_rows, many_rows_scored, tmp_path
):
    out = tmp_path / "scores.jsonl"
    killed, restarted = [], []

    def kill_the_actor_after_the_first_shard() -> None:
        deadline = time.time() + PROGRESS_CAP_S
        while time.time() < deadline and not list(Path(f"{out}.shards").glob("shard-*.parquet")):
            time.sleep(0.02)
        for pid in model_actors()[:1]:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        while time.time() < deadline and not restarted:
            restarted.extend(set(model_actors()) - set(killed))
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_actor_after_the_first_shard)
    killer.start()
    score(many_rows, tiny_model_dir, out, "--ray", "--ray-workers", "1", "--block-rows", "4", "--shard-rows", "4")
    killer.join()
    assert killed and restarted, f"killed {killed}, then found {restarted}"
    assert len(shard_times(out)) == 16
    assert out.read_bytes() == many_rows_scored.read_bytes()


def test_a_killed_driver_resumes_keeping_finished_shards(
    ray_cluster, tiny_model_dir, many_rows, many_rows_scored, tmp_path, capsys
):
    """The driver runs in a subprocess connected to this Ray by its address, and is killed (with its process
    group) once the first shards are written; the rerun here keeps them and scores the rest."""
    out = tmp_path / "scores.jsonl"
    command = [
        "score",
        str(many_rows),
        "--model",
        str(tiny_model_dir),
        "--out",
        str(out),
        *FAST,
        "--block-rows",
        "4",
        "--shard-rows",
        "4",
        "--ray-workers",
        "1",
    ]
    address = ray_cluster.get_runtime_context().gcs_address
    driver = subprocess.Popen(
        [sys.executable, "-m", "mia_fast.cli", *command, f"--ray={address}"],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    wait_until(lambda: len(shard_times(out)) >= 2, "two shards were written", driver)
    os.killpg(driver.pid, signal.SIGKILL)
    errors = driver.communicate()[1].decode()
    wait_until(lambda: not model_actors(), "Ray ended the dead driver's actors")
    finished = shard_times(out)
    assert 2 <= len(finished) < 16, f"the driver must be killed midway: {len(finished)} shards written; {errors}"
    assert not out.exists()

    assert run_cli(*command, "--ray", "--resume") == 0
    assert f"resuming: {len(finished)} of 16 shards already scored" in capsys.readouterr().err
    after = shard_times(out)
    assert len(after) == 16 and all(after[name] == time_ns for name, time_ns in finished.items())
    assert out.read_bytes() == many_rows_scored.read_bytes()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--shard-rows", "6"], "--shard-rows 6 must be a multiple of --block-rows 4"),
        (["--online", "8"], "--online is not available with --ray"),
        (
            ["--neighbor-field", "neighbors", "--methods", "neighbor"],
            "give a data file, without --suite or --neighbor-field",
        ),
        (["--device", "cuda:1"], "each actor is given one GPU of its own; use --device cuda"),
    ],
)
def test_settings_that_cannot_be_sharded_are_refused_before_ray_starts(
    ray_cluster, tiny_model_dir, labelled_jsonl, tmp_path, capsys, extra, message
):
    args = [
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--out",
        tmp_path / "o.jsonl",
        "--ray",
        "--block-rows",
        "4",
        *extra,
    ]
    assert message in fail(capsys, *args)


def test_ray_options_without_ray_and_a_pooled_method_are_refused(
    ray_cluster, tiny_model_dir, labelled_jsonl, tmp_path, capsys
):
    assert "--ray-workers and --shard-rows need --ray" in fail(
        capsys, "score", labelled_jsonl, "--out", tmp_path / "o.jsonl", "--ray-workers", "2"
    )
    from mia_fast.cluster import score_on_ray
    from mia_fast.data import DataStream
    from mia_fast.methods.probe import Probe, ProbeSettings
    from mia_fast.scoring.config import ModelConfig, OutputConfig, RunConfig, ScoringConfig

    probe = Probe(np.ones(32, np.float32), 0, "split", np.zeros(32, np.float32), np.ones(32, np.float32))
    with pytest.raises(MiaFastError, match="probe standardises over all the texts scored together"):
        score_on_ray(
            DataStream(labelled_jsonl),
            RunConfig(
                OutputConfig(tmp_path / "o.jsonl"),
                ModelConfig(str(tiny_model_dir)),
                ScoringConfig(methods=["probe"], settings=[ProbeSettings(probe=probe)]),
            ),
        )


def test_prefix_passes_on_ray_equal_one_process(ray_cluster, tiny_model_dir, labelled_jsonl, tmp_path):
    """Each model actor computes a prefix's keys and values once and its shards' rows attend to them: the rows equal
    one process's, byte for byte."""
    nonmembers, members = tmp_path / "nonmembers.txt", tmp_path / "members.txt"
    nonmembers.write_text("the harbour lights\nno one came back\n")
    members.write_text("a quiet road\n")
    flags = ["--methods", "loss,recall,conrecall", "--prefix-nonmembers", nonmembers, "--prefix-members", members]
    single = score(labelled_jsonl, tiny_model_dir, tmp_path / "single.jsonl", "--block-rows", "4", *flags)
    on_ray = score(
        labelled_jsonl, tiny_model_dir, tmp_path / "ray.jsonl", "--ray", "--ray-workers", "2", *SHARDING, *flags
    )
    assert on_ray.read_bytes() == single.read_bytes()
    assert all(json.loads(line)["recall"] is not None for line in single.read_text().splitlines())
