"""``freq build --ray`` on a local Ray of 2 CPUs: the same table and the same report as one process, bad records
skipped alike, and no checkpoint folder left behind."""

import gzip
import json

import numpy as np
from conftest import CORPUS
from helpers import run_cli

from mia_fast.frequency.table import FrequencyTable


def test_freq_build_on_ray_equals_one_process(ray_cluster, tiny_model_dir, tmp_path, capsys):
    for i in range(3):
        lines = "".join(json.dumps({"text": f"{CORPUS[(i + j) % 7]} {j}"}) + "\n" for j in range(40))
        (tmp_path / f"c4-train.{i:05d}-of-00003.json.gz").write_bytes(
            gzip.compress((lines + ("not json\n" if i == 1 else "")).encode())
        )
    common = [
        "freq",
        "build",
        *sorted(tmp_path.glob("*.json.gz")),
        "--tokenizer",
        tiny_model_dir,
        "--skip-bad-records",
        "--quiet",
    ]
    reports = []
    for out, extra in (("single.freq", []), ("ray.freq", ["--ray"])):
        assert run_cli(*common, "--out", tmp_path / out, *extra) == 0
        reports.append([line for line in capsys.readouterr().err.splitlines() if not line.startswith("done in")])
    assert reports[0] == reports[1] and "skipped 1 bad record(s), e.g.:" in reports[0]
    single, on_ray = FrequencyTable.load(tmp_path / "single.freq"), FrequencyTable.load(tmp_path / "ray.freq")
    np.testing.assert_array_equal(on_ray.counts, single.counts)
    assert on_ray.header() == single.header()
    assert not (tmp_path / "ray.freq.partial").exists()
