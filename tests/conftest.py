"""Fixtures: tokenizers trained here and tiny random models saved to disk. Nothing is downloaded."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

# Without a GPU, Triton kernels run in the interpreter; it must be chosen before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

# The session-scoped real vLLM server (tests marked `vllm`); see vllm_server.py.
from vllm_server import VllmServer, vllm_server  # noqa: F401

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_module(name: str):
    """A module of benchmarks/ loaded by file path: the repository root is never put on sys.path."""
    key = f"_mia_fast_benchmarks_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


# The parity tests against the public code (marked `shared_data`) read real text from ../shared/data. Where it is
# missing they are not run, and the run's last lines say so in one line; under CI (which has it) the run stops.
SHARED_DATA_MISSING = pytest.StashKey[int]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shared_data = benchmark_module("common").SHARED_DATA
    if (shared_data / "pile_test").is_dir():
        return
    needing = [item for item in items if item.get_closest_marker("shared_data")]
    if not needing:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(
            f"{len(needing)} parity test(s) need {shared_data}, which CI must have beside the checkout "
            "(MIA_FAST_SHARED_DATA names another place)"
        )
    items[:] = [item for item in items if not item.get_closest_marker("shared_data")]
    config.hook.pytest_deselected(items=needing)
    config.stash[SHARED_DATA_MISSING] = len(needing)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    missing = config.stash.get(SHARED_DATA_MISSING, 0)
    if missing:
        terminalreporter.write_line(
            f"mia-fast: {missing} parity test(s) against the public code did not run: "
            f"{benchmark_module('common').SHARED_DATA} is missing (put shared/data beside the checkout or name it "
            "with MIA_FAST_SHARED_DATA)",
            yellow=True,
            bold=True,
        )


CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a journey of a thousand miles begins with a single step",
    "to be or not to be that is the question",
    "all that glitters is not gold",
    "the rain in spain stays mainly in the plain",
    "Numbers 0123456789 and Punctuation: commas, dots. question? yes!",
    "Zhōngwén 中文 文本 也 可以 被 分词",
]


def train_tokenizer(special: dict[str, str], vocab_size: int = 300):
    """A byte-level BPE tokenizer trained on CORPUS, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(dict.fromkeys(special.values())),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(CORPUS * 20, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, **special)


def save_tiny_llama(
    directory: Path, tokenizer, seed: int, hidden: int = 32, layers: int = 2, context: int = 64, **config
) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **config,
    )
    model = LlamaForCausalLM(cfg)
    # Larger random weights give peaked, varied distributions instead of near-uniform ones.
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.5)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer Llama with a BOS token, context 64."""
    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_eos_only_model_dir(tmp_path_factory) -> Path:
    """A tiny model whose tokenizer has an EOS token but no BOS (like GPT-2 / Pythia / Qwen)."""
    tokenizer = train_tokenizer({"eos_token": "<|endoftext|>"}, vocab_size=280)
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-eos"), tokenizer, seed=1)


@pytest.fixture(scope="session")
def tiny_reference_dir(tmp_path_factory) -> Path:
    """A reference model with a different tokenizer and vocabulary size."""
    tokenizer = train_tokenizer({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, vocab_size=260)
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-ref"), tokenizer, seed=2, hidden=16, layers=1)


def random_sentence(rng: random.Random, words: int) -> str:
    pool = " ".join(CORPUS).split()
    return " ".join(rng.choice(pool) for _ in range(words))


@pytest.fixture(scope="session")
def labelled_jsonl(tmp_path_factory) -> Path:
    """24 labelled texts of varied lengths (some longer than the tiny model's context of 64)."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "labelled.jsonl"
    with open(path, "w") as f:
        for i in range(24):
            text = random_sentence(rng, rng.choice([3, 8, 20, 60]))
            f.write(json.dumps({"id": f"doc-{i}", "text": text, "label": i % 2}) + "\n")
    return path


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray of 2 CPUs for the module's tests (skipped where Ray is not installed)."""
    ray = pytest.importorskip("ray")
    import logging

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield ray
    ray.shutdown()


def texts_of(n: int, seed: int, words: int = 8) -> list[str]:
    rng = random.Random(seed)
    return [random_sentence(rng, rng.randint(3, words)) for _ in range(n)]


@pytest.fixture(scope="module")
def trained_probe(tiny_model_dir):
    """(the model, the report of) a probe trained for the tiny Llama on 12 texts, its layer picked on 8."""
    from mia_fast import load_model
    from mia_fast.data import Dataset
    from mia_fast.evaluation.probe_training import ProbeTraining, train_probe

    loaded = load_model(str(tiny_model_dir))
    texts = texts_of(20, seed=1)
    train = Dataset(texts[:12], None, [i % 2 for i in range(12)])
    dev = Dataset(texts[12:], None, [i % 2 for i in range(8)])
    return loaded, train_probe(loaded, train, dev, ProbeTraining(probe_epochs=300))


SENTENCES = ["the cat sat on the mat", "a dog ran to the park and back", "we read the book"]


@pytest.fixture(scope="module")
def tiny_masked_lm(tmp_path_factory):
    """A 2-layer random BERT with a WordPiece vocabulary of the test sentences' words and letters."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny-bert")
    letters = sorted(set("".join(SENTENCES).replace(" ", "")))
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *sorted(set(" ".join(SENTENCES).split())),
        *letters,
        *(f"##{c}" for c in letters),
    ]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_loaded(tiny_model_dir):
    """The tiny Llama, loaded."""
    from mia_fast import load_model

    return load_model(str(tiny_model_dir))


@pytest.fixture(scope="module")
def mixed_texts():
    """30 sentences of 2 to 40 words."""
    rng = random.Random(5)
    return [random_sentence(rng, rng.randint(2, 40)) for _ in range(30)]


@pytest.fixture(scope="session")
def four_layers(tmp_path_factory) -> Path:
    """A 4-layer Llama (context 64), saved as safetensors: disk offload reads its file in place."""
    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})
    return save_tiny_llama(tmp_path_factory.mktemp("four-layers"), tokenizer, seed=3, layers=4)
