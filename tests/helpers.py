"""Helpers shared by tests of several stages: running the CLI, counting forwards, hand-built stats."""

import dataclasses
import errno
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mia_fast.cli import main
from mia_fast.engines.stats import TokenStats

FAST = ["--methods", "loss,zlib,mink,minkpp", "--k", "0.2,1.0", "--quiet"]
# The one-pass methods every engine test scores, and every k fraction they score.
ONE_PASS_METHODS = ["loss", "zlib", "mink", "minkpp"]
ALL_KS = [0.1, 0.2, 0.5, 1.0]
ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def script(name: str):
    """``scripts/NAME.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# The longest a loaded 2-core machine may take to start a Python process, import mia-fast, load a tiny model and show
# the progress a test waits for.
PROGRESS_CAP_S = 600


def wait_until(done: Callable[[], bool], what: str, process: subprocess.Popen | None = None) -> None:
    """Waits for a step of a process's own progress (``done``): fails at once where ``process`` ended before it, and
    after PROGRESS_CAP_S seconds with a line that says the machine was too slow, not with a later symptom."""
    started = time.monotonic()
    while not done():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended (exit {process.returncode}) before {what}")
        if time.monotonic() - started > PROGRESS_CAP_S:
            raise AssertionError(f"{what} took over {PROGRESS_CAP_S} s: this machine is too slow or busy for the test")
        time.sleep(0.02)


def rows_in(path: Path) -> int:
    """The lines of a file that may not exist yet (0)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_cli(*args):
    return main([str(a) for a in args])


def fail(capsys, *args) -> str:
    """Runs the CLI expecting a clean failure; returns its one-line error."""
    assert run_cli(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mia-fast: error: ")
    return err[-1]


def digests(*places) -> dict[str, str]:
    """The SHA-256 of every file under (or at) each place, by path."""
    found = {}
    for place in map(Path, places):
        files = sorted(p for p in place.rglob("*") if p.is_file()) if place.is_dir() else [place] * place.is_file()
        found.update({str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
    return found


def refused(capsys, *args, keep=()) -> str:
    """Runs the CLI expecting it to refuse: exit 2, exactly one line on stderr, and every file under ``keep``
    (directories or files) byte-identical after, none added or removed. Returns the line."""
    before = digests(*keep)
    capsys.readouterr()
    code = run_cli(*args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, f"exit {code}; stderr: {err}"
    assert len(err) == 1 and err[0].startswith("mia-fast: error: "), err
    after = digests(*keep)
    assert after == before, {
        path: (before.get(path), after.get(path)) for path in {*before, *after} if before.get(path) != after.get(path)
    }
    return err[0]


def fail_writes(monkeypatch, from_block: int) -> None:
    """Makes the disk fill up while scores block ``from_block`` (0-based, counted over every staged rows file) is
    written: half of it reaches the file, then ENOSPC, as it does for every later write."""
    real_write = os.write
    blocks = [0]

    def write(fd, data):
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if target.name not in ("rows.jsonl", "rows.csv") or not target.parent.name.endswith(".partial"):
            return real_write(fd, data)
        if blocks[0] >= from_block:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        blocks[0] += 1
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


PREFIX = ["the rain in spain ", "all that glitters"]


MEMBER_PREFIX = ["once upon ", "a time"]


def count_forwards(engine) -> list[int]:
    """Forward batches of TokenStats the engine runs (packed or padded)."""
    return _count(engine, lambda rows: 1)


def count_sequences(engine) -> list[int]:
    """Sequences (batch rows) the engine's model runs on for TokenStats."""
    return _count(engine, len)


def record_generations(monkeypatch) -> list[tuple]:
    """The arguments after the model of every call of the sampler's ``generate`` (prompts, keys, new tokens, then
    the rest), each call still made."""
    import mia_fast.pipeline.sampling as sampling

    calls = []
    original = sampling.generate

    def recorded(model, *arguments):
        calls.append(arguments)
        return original(model, *arguments)

    monkeypatch.setattr(sampling, "generate", recorded)
    return calls


def _count(engine, measure) -> list[int]:
    total = [0]
    run_batch = engine._run_batch

    def counted(rows):
        total[0] += measure(rows)
        return run_batch(rows)

    engine._run_batch = counted
    return total


def stats_of(*texts: list[float]) -> TokenStats:
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.arange(len(t)),
                "logp": np.array(t, np.float32),
                "mu": np.zeros(len(t), np.float32),
                "var": np.ones(len(t), np.float32),
            }
            for t in texts
        ]
    )


def recomputing_prefixes(engine):
    """``engine`` running each row's prefix inside the row, as every pass with a prefix ran before prefixes were
    computed once: the path a shared prefix must agree with."""
    run_batch = engine._run_batch
    engine._run_batch = lambda rows: run_batch([dataclasses.replace(row, context=0) for row in rows])
    return engine


def parsed(argv: list[str]):
    """``argv`` (a command and its options) parsed by the parser of that command alone."""
    from mia_fast.cli.main import build_parser

    return build_parser([argv[0]]).parse_args(argv)


def run_file_of(argv: list[str]) -> str:
    """The run file the CLI writes for the command line ``argv``."""
    from mia_fast.cli.main import build_parser
    from mia_fast.cli.runfile import RunFileLayout, command_parser

    return RunFileLayout(command_parser(build_parser([argv[0]]), argv[0]), argv[0]).write(parsed(argv))


def written(folder: Path, text: str, name: str = "run.toml") -> str:
    """``text`` written to ``folder/name``; its path."""
    path = folder / name
    path.write_text(text)
    return str(path)


def make_stats(*texts: list[tuple[int, float, float, float]]) -> TokenStats:
    """TokenStats from per-text lists of (target id, logp, mu, var)."""
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.array([t[0] for t in rows], dtype=np.int64),
                "logp": np.array([t[1] for t in rows], dtype=np.float32),
                "mu": np.array([t[2] for t in rows], dtype=np.float32),
                "var": np.array([t[3] for t in rows], dtype=np.float32),
            }
            for rows in texts
        ]
    )


# Three hand-built texts for the methods' formulas: four tokens (id 5 twice), one token, none.
HAND_STATS = make_stats(
    [(5, -1.0, -2.0, 1.0), (6, -3.0, -2.0, 4.0), (5, -0.5, -1.0, 0.25), (7, -2.0, -2.0, 1.0)],
    [(1, -4.0, -3.0, 1.0)],
    [],
)


def token_stats(*texts: dict) -> TokenStats:
    """TokenStats of texts given as dicts of per-token ``logp`` and, where not the default, ``mu`` (-1), ``var`` (1) and
    ``max_logp`` (0)."""
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.arange(len(t["logp"])),
                "logp": np.array(t["logp"], np.float32),
                "mu": np.array(t.get("mu", [-1.0] * len(t["logp"])), np.float32),
                "var": np.array(t.get("var", [1.0] * len(t["logp"])), np.float32),
                "max_logp": np.array(t.get("max_logp", [0.0] * len(t["logp"])), np.float32),
            }
            for t in texts
        ]
    )


def method_scores(stats: TokenStats, names: list[str], ks=(0.5,), settings=(), **inputs) -> dict[str, np.ndarray]:
    """The registered methods ``names`` on ``stats`` (at ``ks``), with ``settings`` objects and other ScoringInputs."""
    from mia_fast.methods import MethodSettings, resolve_methods
    from mia_fast.methods.inputs import ScoringInputs
    from mia_fast.scoring.method_runs import score

    given = ScoringInputs(stats=stats, settings=MethodSettings(*settings), **inputs)
    return score(given, resolve_methods(names, ks))


def paired_stats(*texts: dict) -> TokenStats:
    """TokenStats of the token-level reference attacks' texts: per-text ``logp`` and ``max_logp`` (default: ``logp``,
    every token the model's top choice) lists."""
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.arange(len(t["logp"])),
                "logp": np.array(t["logp"], np.float32),
                "mu": np.zeros(len(t["logp"]), np.float32),
                "var": np.ones(len(t["logp"]), np.float32),
                "max_logp": np.array(t.get("max_logp", t["logp"]), np.float32),
            }
            for t in texts
        ]
    )


def span_lists(*per_text: list) -> np.ndarray:
    """The token-span readout of texts: per text, its tokens' [start, end) character spans."""
    out = np.empty(len(per_text), dtype=object)
    for i, text in enumerate(per_text):
        out[i] = np.array(text, np.int64).reshape(-1, 2)
    return out


def word_spans(n: int) -> list:
    """The spans of ``n`` one-character tokens."""
    return [(i, i + 1) for i in range(n)]


def paired_inputs(target: TokenStats, reference: TokenStats, target_spans, reference_spans, settings=()):
    """ScoringInputs of the token-level reference attacks: both models' statistics and token spans."""
    from mia_fast.methods import MethodSettings
    from mia_fast.methods.inputs import ScoringInputs
    from mia_fast.methods.reference import REFERENCE_PASS
    from mia_fast.methods.reference_tokens import REFERENCE_SPANS, TARGET_SPANS

    passes = {REFERENCE_PASS: reference, TARGET_SPANS: target_spans, REFERENCE_SPANS: reference_spans}
    return ScoringInputs(target, passes, texts=["x"] * len(target), settings=MethodSettings(*settings))


def check_scores_alone(methods: list[str], lengths: list[int], seed: int) -> None:
    """Asserts that each of random texts of ``lengths`` tokens scores with ``methods`` (at the default ks) alone as it
    does among the others: a score that depends on the text's own tokens only."""
    rng = np.random.default_rng(seed)
    texts = [
        {
            "logp": -rng.exponential(2.0, n),
            "mu": -rng.exponential(2.0, n),
            "var": rng.exponential(1.0, n),
            "max_logp": -rng.exponential(0.2, n),
        }
        for n in lengths
    ]
    from mia_fast.methods import DEFAULT_KS

    together = method_scores(token_stats(*texts), methods, DEFAULT_KS)
    for i, text in enumerate(texts):
        alone = method_scores(token_stats(text), methods, DEFAULT_KS)
        for column in together:
            np.testing.assert_array_equal(together[column][i], alone[column][0], err_msg=column)


def assert_scores_close(a, b, rtol=1e-4, atol=1e-6):
    """Two score mappings hold the same columns, in order, each equal within the tolerances."""
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_allclose(np.asarray(a[name]), np.asarray(b[name]), rtol=rtol, atol=atol, err_msg=name)


def package_copy_with(tmp_path: Path, relative: str, source: str) -> Path:
    """A copy of the installed package (its compiled core included, the kernels linked in as a wheel installs them)
    with ``source`` added as ``mia_fast/<relative>`` (e.g. ``methods/toy.py``); returns the folder to put on
    PYTHONPATH."""
    package = tmp_path / "site" / "mia_fast"
    shutil.copytree(ROOT / "mia_fast", package, ignore=shutil.ignore_patterns("__pycache__"))
    native = importlib.util.find_spec("mia_fast._native")
    if native is not None and not (package / Path(native.origin).name).exists():
        shutil.copy2(native.origin, package)
    (package / "kernels").symlink_to(ROOT / "kernels", target_is_directory=True)
    (package / relative).write_text(source)
    return package.parent


def stand_in_gpu(monkeypatch, found, *, self_checks: bool = True) -> None:
    """Every CUDA device reports ``found`` (a :class:`~mia_fast.pipeline.device.Accelerator`: what differs by GPU is
    stood in for, this machine having none), its plan checking itself on first use where ``self_checks``."""
    from mia_fast.pipeline import device

    own_accelerator, own_plan_for = device.accelerator, device.plan_for
    monkeypatch.setattr(device, "accelerator", lambda where: found if where.type == "cuda" else own_accelerator(where))

    def plan_for(reported):
        plan = own_plan_for(reported)
        return dataclasses.replace(plan, self_checks=self_checks) if reported is found else plan

    monkeypatch.setattr(device, "plan_for", plan_for)


# A device map of the 4-layer Llama (conftest's four_layers): two layers and the embedding on the CPU, two
# layers, the final norm and the head on the disk.
ON_DISK = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "cpu",
    "model.layers.2": "disk",
    "model.layers.3": "disk",
    "model.norm": "disk",
    "lm_head": "disk",
}


def own_cache_directory(tmp_path, monkeypatch) -> Path:
    """A test's own cache directory (MIA_FAST_CACHE), where a device map's offload folders are made: a fixture of the
    modules that make it one (``own_cache = pytest.fixture(autouse=True)(own_cache_directory)``)."""
    monkeypatch.setenv("MIA_FAST_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def offload_folders(cache: Path) -> list[Path]:
    """The offload folders a device map left in ``cache``."""
    root = cache / "offload"
    return sorted(root.iterdir()) if root.is_dir() else []


def process_start(pid: int) -> int | None:
    """When a running process started (clock ticks after boot; with its pid it names one process, even once the pid
    is reused), None once it has ended (a zombie has). Linux only: it reads /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def child_processes(parent: int) -> set[tuple[int, int]]:
    """(pid, start) of every running child of ``parent`` (:func:`process_start`)."""
    children = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent and fields[0] not in ("Z", "X"):
                children.add((int(entry.name), int(fields[19])))
    return children


def processes_ended(processes: set[tuple[int, int]]) -> bool:
    """Whether every process of ``processes`` ((pid, start) pairs) has ended."""
    return all(process_start(pid) != start for pid, start in processes)


def end_processes(processes: set[tuple[int, int]]) -> None:
    """SIGKILLs those of ``processes`` ((pid, start) pairs) still running: what a failed test leaves ends with it."""
    for pid, start in processes:
        if process_start(pid) == start:
            os.kill(pid, signal.SIGKILL)


def gguf_tokenizer(part: Path, tmp: Path):
    """The tokenizer of a GGUF file of which a package ships the first part: the header says it holds no tensors,
    so the metadata, where the tokenizer lives, is all that is read."""
    from transformers import AutoTokenizer

    with open(part, "rb") as src, open(tmp / "model.gguf", "wb") as dst:
        header = bytearray(src.read(24))
        header[8:16] = struct.pack("<Q", 0)
        dst.write(header)
        shutil.copyfileobj(src, dst)
    return AutoTokenizer.from_pretrained(tmp, gguf_file="model.gguf")
