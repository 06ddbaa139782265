"""Bounded fuzzing of the untrusted-file parsers (atheris) and the native core's own tests built with
AddressSanitizer and UBSan. Longer fuzz runs: ``python benchmarks/fuzz.py TARGET -max_total_time=600``."""

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["table", "megatron", "runfile", "url"])
def test_bounded_fuzz_run_finds_nothing(target, tmp_path):
    pytest.importorskip("atheris")
    # A child starts with its parent's peak RSS on Linux (kept across fork and exec), and libFuzzer
    # compares peak RSS with its limit: allow its usual 2 GB on top of what this pytest process holds.
    rss_limit_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + 2048
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "fuzz.py"),
            target,
            "-runs=60000",
            "-seed=1",
            f"-rss_limit_mb={rss_limit_mb}",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"TMPDIR": str(tmp_path)},  # the seeds and the files a target writes, kept with the test's
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 60000 runs" in result.stderr
    assert not list(tmp_path.glob("crash-*"))


@pytest.mark.slow
def test_native_core_tests_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    cmake = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
    if cmake is None or shutil.which("c++") is None:
        pytest.skip("needs cmake and a C++ compiler")
    configure = [
        cmake,
        "-S",
        str(ROOT),
        "-B",
        str(tmp_path),
        "-DMIA_FAST_CXX_TESTS=ON",
        "-DMIA_FAST_SANITIZE=ON",
        "-DCMAKE_BUILD_TYPE=Debug",
    ]
    for command in (configure, [cmake, "--build", str(tmp_path), "-j2"]):
        built = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    env = {
        **os.environ,
        "ASAN_OPTIONS": "halt_on_error=1:detect_leaks=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    result = subprocess.run([str(tmp_path / "test_counting")], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "all native core tests passed" in result.stdout
