import json

import pytest
from conftest import train_tokenizer

from mia_fast.tokens.fingerprint import tokenizer_fingerprint

pytestmark = pytest.mark.lower_bounds


def test_fingerprint_tells_tokenizers_apart_and_is_stable():
    first = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    again = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    other = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=290)
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(again)
    assert tokenizer_fingerprint(first) != tokenizer_fingerprint(other)
    assert len(tokenizer_fingerprint(first)) == 64


# A vocabulary with an added token that JSON must escape, CJK, and Unigram scores whose shortest repr is not their
# decimal one: fingerprints as the json module computed them before tables were first written, pinned.
_VOCAB = {"<s>": 0, 'é\u2028"\\': 1, "a": 2, "b": 3, "ab": 4, "abb": 5, "[UNK]": 6, "中": 7, "文": 8, "中文": 9}
_SCORES = [
    0.0,
    0.0,
    -1e-05,
    -3.3333333333333335,
    -0.1,
    -12.5,
    -100.0,
    -2.220446049250313e-16,
    -7.0,
    -1.7976931348623157e308,
]
_MODELS = {
    "bd8cde0da351394f1fa3797f3b53b9902a35250e04de30d45a50f5a297104ea2": {
        "type": "BPE",
        "unk_token": "[UNK]",
        "vocab": _VOCAB,
        "merges": [["a", "b"], ["ab", "b"], ["中", "文"]],
    },
    "d9fa48d17a885d62d862949558cd7fab2326b5b6329eec6951a7dd5f4a4df6e0": {
        "type": "Unigram",
        "unk_id": 6,
        "vocab": [[piece, score] for piece, score in zip(_VOCAB, _SCORES)],
    },
    "a013bb46a83c47fb43f341c5f0d60d8b1ed588f81533e7cdb722fad7da05e2b4": {
        "type": "WordPiece",
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
        "vocab": _VOCAB,
    },
}


@pytest.mark.parametrize("expected", list(_MODELS), ids=[model["type"] for model in _MODELS.values()])
def test_a_fingerprint_is_the_one_tables_already_carry(expected):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    added = [(0, "<s>", True), (1, 'é\u2028"\\', False)]
    spec = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": c,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": not special,
                "special": special,
            }
            for i, c, special in added
        ],
        "pre_tokenizer": {"type": "Whitespace"},
        "model": _MODELS[expected],
    }
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))
    assert tokenizer_fingerprint(tokenizer) == expected
