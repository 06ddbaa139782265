"""Shared helpers for the benchmarks: the shared pile_test data and machine description."""

from __future__ import annotations

import gzip
import json
import os
import platform
from pathlib import Path

import torch

SHARED_DATA = Path(
    os.environ.get("MIA_FAST_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
)
RESULTS = Path(__file__).resolve().parent / "results"
# The words of the benchmarks' synthetic texts, and of their tiny models' tokenizer.
WORDS = (
    "time year people way day man thing woman life child world school state family student group country problem "
    "hand part place case week company system program question work government number night point home water room "
    "mother area money story fact month lot right study book eye job word business issue side kind head house"
).split()


def word_tokenizer():
    """A byte-level BPE tokenizer of 300 ids trained on WORDS, with start, end and pad tokens: the benchmarks' tiny
    models'."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=list(special.values()), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator([" ".join(WORDS)] * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, **special)
    return tokenizer


def pile_texts(
    subset: str = "wikipedia_en", n: int = 100, max_words: int | None = 100, root: Path = SHARED_DATA
) -> list[str]:
    """The first ``n`` texts of a pile_test subset under ``root``, each cut to its first ``max_words`` words."""
    path = root / "pile_test" / f"{subset}.jsonl.gz"
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            texts.append(" ".join(text.split()[:max_words]) if max_words else text)
            if len(texts) == n:
                break
    return texts


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    info = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info
