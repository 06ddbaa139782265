"""mia-fast scoring through a real vLLM server, against vLLM's own offline best and against scoring locally.

    python benchmarks/server_throughput.py [--rounds 3] [--in-flight 1,4,16] [--request-tokens 8192]
                                           [--vllm-python .vllm-venv/bin/python]

The built-in SmolLM2-135M (its safetensors directory, ``default_model_dir()``) in fp32 on the first 100
wikipedia_en texts cut to 100 words (``peer_vllm.py``'s builtin model). Contenders, all in one run, each warmed up
once and then timed in turn round by round (ours-local, server-1, server-4, server-16, vllm-offline, ...);
medians over the rounds:

- ``local``: ``Detector.score`` with loss, zlib and mink (10 k's) on the model loaded here;
- ``server-N``: the same call through ``ServerConfig(url, "smollm2-135m", tokenizer=MODEL_DIR,
  requests=RequestSettings(in_flight=N))``:
  token ids are sent, so both sides score the same tokens; the server is started here
  (``vllm.entrypoints.openai.api_server``, fp32, both cores, a random API key, a free port) and its process
  group is stopped at the end, also on error;
- ``vllm-offline``: ``LLM.generate`` with ``prompt_logprobs=0`` on the same ids in a worker of the vLLM
  environment (``peer_vllm.py``'s worker): the log-prob of every prompt token and nothing else.

Also the largest difference between the server's and the local fp32 scores, per column, over the texts. Writes
``results/<--name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
METHODS = ("loss", "zlib", "mink")
SERVED_MODEL = "smollm2-135m"
KEY_VARIABLE = "MIA_FAST_BENCH_SERVER_KEY"
BASELINE = "vllm-offline"


def summarize(times: Mapping[str, Sequence[float]], tokens: int, texts: int, baseline: str = BASELINE) -> dict:
    """Per contender: median seconds, tokens/s and texts/s at the median, and speed against ``baseline`` (> 1:
    faster than it)."""
    medians = {name: statistics.median(t) for name, t in times.items()}
    return {
        name: {
            "median_s": median,
            "tokens_per_s": tokens / median,
            "texts_per_s": texts / median,
            f"speed_vs_{baseline}": medians[baseline] / median if baseline in medians else None,
        }
        for name, median in medians.items()
    }


def differences(scores: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> dict:
    """Per column of ``reference``: the largest absolute and relative difference of ``scores`` over the texts."""
    result = {}
    for name, expected in reference.items():
        expected = np.asarray(expected, dtype=np.float64)
        got = np.asarray(scores[name], dtype=np.float64)
        gap = np.abs(got - expected)
        result[name] = {
            "max_abs": float(np.nanmax(gap)),
            "max_rel": float(np.nanmax(gap / np.maximum(np.abs(expected), 1e-12))),
        }
    return result


def table(summary: Mapping[str, dict], tokens: int, texts: int, baseline: str = BASELINE) -> str:
    lines = [
        f"| contender ({texts} texts, {tokens:,} tokens) | median s | tokens/s | texts/s | speed vs {baseline} |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, entry in summary.items():
        ratio = entry[f"speed_vs_{baseline}"]
        lines.append(
            f"| {name} | {entry['median_s']:.2f} | {entry['tokens_per_s']:,.0f} | {entry['texts_per_s']:.2f} | "
            f"{'—' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--vllm-python", default=str(REPO / ".vllm-venv" / "bin" / "python"), help="python of the vLLM environment"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", default="1,4,16", help="requests in flight of each server contender")
    parser.add_argument(
        "--request-tokens", type=int, default=None, help="prompt tokens per request (default: mia-fast's)"
    )
    parser.add_argument("--name", default="server-throughput")
    args = parser.parse_args()
    sys.path[:0] = [str(HERE), str(REPO / "tests")]
    from common import RESULTS, machine, pile_texts
    from peer_vllm import VLLM_SETUP, VllmWorker, load_average
    from vllm_server import VllmServer

    from mia_fast import Detector, ModelConfig
    from mia_fast.methods import DEFAULT_KS
    from mia_fast.pipeline.models import default_model_dir
    from mia_fast.served.client import RequestSettings, ServerConfig

    if not Path(args.vllm_python).exists():
        raise SystemExit(f"the vLLM environment {args.vllm_python} is missing; make it with:\n  {VLLM_SETUP}")
    in_flights = [int(n) for n in args.in_flight.split(",")]
    request = {} if args.request_tokens is None else {"request_tokens": args.request_tokens}
    loads = {"start": load_average()}
    model_dir = default_model_dir()
    texts = pile_texts("wikipedia_en", n=100, max_words=100)

    def score(detector: Detector) -> dict[str, np.ndarray]:
        return dict(detector.score(texts, methods=METHODS, k=DEFAULT_KS))

    scratch = Path(tempfile.mkdtemp(prefix="server-throughput-"))
    server = VllmServer(model_dir, scratch / "server.log", python=args.vllm_python, model=SERVED_MODEL)
    # Built before the server starts (they only connect in Detector), so that a wrong setting fails at once.
    served = {
        f"server-{n}": ModelConfig(
            ServerConfig(
                server.url,
                SERVED_MODEL,
                api_key_env=KEY_VARIABLE,
                tokenizer=model_dir,
                requests=RequestSettings(in_flight=n, **request),
            )
        )
        for n in in_flights
    }
    worker = None
    try:
        started = time.perf_counter()
        local = Detector(ModelConfig(model_dir, device="cpu", dtype="fp32"))
        load_s = {"local": time.perf_counter() - started}
        ids = local.target.tokenize(texts)
        tokens = sum(map(len, ids))
        started = time.perf_counter()
        server.start(timeout=900)
        load_s["server"] = time.perf_counter() - started
        print(f"vLLM server up on {server.url} in {load_s['server']:.1f} s (log {server.log_path})", flush=True)
        os.environ[KEY_VARIABLE] = server.key
        contenders = {"local": local, **{name: Detector(config) for name, config in served.items()}}
        ids_file = scratch / "ids.json"
        ids_file.write_text(json.dumps(ids))
        started = time.perf_counter()
        worker = VllmWorker(args.vllm_python, model_dir, "fp32", str(ids_file), scratch / "offline-worker.log")
        load_s[BASELINE] = time.perf_counter() - started
        print(f"vLLM offline loaded in {load_s[BASELINE]:.1f} s", flush=True)

        # Warm-up: the local model's packed weights, the server's first requests, vLLM's first pass.
        first = {name: score(detector) for name, detector in contenders.items()}
        offline_first = worker.run()
        times: dict[str, list[float]] = {name: [] for name in [*contenders, BASELINE]}
        round_loads = []
        for index in range(args.rounds):
            round_loads.append(load_average())
            for name, detector in contenders.items():
                started = time.perf_counter()
                score(detector)
                times[name].append(time.perf_counter() - started)
            times[BASELINE].append(worker.run()["seconds"])
            print(f"round {index + 1}: " + ", ".join(f"{c} {t[-1]:.2f} s" for c, t in times.items()), flush=True)
        worker.close()
        worker = None
    finally:
        if worker is not None:
            worker.process.terminate()
            worker.process.wait(timeout=60)
        server.stop()
    loads["end"] = load_average()

    reference = first["local"]
    deviations = {name: differences(columns, reference) for name, columns in first.items() if name != "local"}
    offline_loss = np.asarray(offline_first["mean_logp"])
    deviations[BASELINE] = differences({"loss": offline_loss}, {"loss": reference["loss"]})
    summary = summarize(times, tokens, len(texts))
    result = {
        "benchmark": "server-throughput",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python", *sys.argv]),
        "load_average": {**loads, "per_round": round_loads},
        "settings": {
            "model": f"{model_dir} (fp32, served as {SERVED_MODEL})",
            "texts": len(texts),
            "tokens": tokens,
            "methods": list(METHODS),
            "k": list(DEFAULT_KS),
            "in_flight": in_flights,
            "request_tokens": RequestSettings(**request).request_tokens,
            "rounds": args.rounds,
        },
        "load_s": load_s,
        "seconds": times,
        "summary": summary,
        "max_diff_vs_local_fp32": deviations,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(summary, tokens, len(texts)))
    for name, columns in deviations.items():
        worst = max(columns, key=lambda c: columns[c]["max_rel"])
        print(
            f"{name} vs local fp32: loss max abs {columns['loss']['max_abs']:.1e}; worst column {worst} "
            f"(max abs {columns[worst]['max_abs']:.1e}, max rel {columns[worst]['max_rel']:.1e})"
        )
    print(f"load average {loads['start']} -> {loads['end']}; wrote {path}")


if __name__ == "__main__":
    main()
