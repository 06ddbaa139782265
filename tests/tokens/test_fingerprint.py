import copy
import json

import pytest
from conftest import train_tokenizer

from mia_fast.tokens import fingerprint as fp
from mia_fast.tokens.fingerprint import is_legacy_fingerprint, tokenizer_fingerprint, tokenizer_mismatch

pytestmark = pytest.mark.lower_bounds


def test_fingerprint_tells_tokenizers_apart_and_is_stable():
    first = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    again = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    other = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=290)
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(again)
    assert tokenizer_fingerprint(first) != tokenizer_fingerprint(other)
    assert tokenizer_mismatch(tokenizer_fingerprint(first), tokenizer_fingerprint(other)) == (
        "their models differ (vocabulary, merges or options such as dropout, byte_fallback and unk_token)"
    )
    assert tokenizer_fingerprint(first).startswith("tok2:") and not is_legacy_fingerprint(tokenizer_fingerprint(first))


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


def _spec(model: dict) -> dict:
    added = [(0, "<s>", True), (1, 'é\u2028"\\', False)]
    return {
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
        "model": copy.deepcopy(model),
    }


def _tokenizer(spec: dict):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))


@pytest.mark.parametrize("legacy", list(_MODELS), ids=[model["type"] for model in _MODELS.values()])
def test_a_fingerprint_of_an_older_mia_fast_is_recognised_and_never_taken_as_a_match(legacy):
    tokenizer = _tokenizer(_spec(_MODELS[legacy]))
    current = tokenizer_fingerprint(tokenizer)
    assert is_legacy_fingerprint(legacy) and fp.legacy_parts_match(legacy, tokenizer)
    assert tokenizer_mismatch(legacy, current, tokenizer) == (
        "it was recorded by an older mia-fast whose fingerprint covered only the vocabulary, merges and added "
        "tokens, so a match cannot be proven"
    )
    other = _tokenizer(_spec({**_MODELS[legacy], "vocab": _MODELS[legacy]["vocab"]}) | {"added_tokens": []})
    assert not fp.legacy_parts_match(legacy, other)
    assert tokenizer_mismatch(legacy, tokenizer_fingerprint(other), other) == (
        "even their vocabularies, merges or added tokens differ"
    )


_BASE = _spec(_MODELS["bd8cde0da351394f1fa3797f3b53b9902a35250e04de30d45a50f5a297104ea2"])
_TEMPLATE = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}},
}


def _changed(path: str, value):
    spec = copy.deepcopy(_BASE)
    *outer, last = path.split(".")
    place = spec
    for key in outer:
        place = place[int(key)] if isinstance(place, list) else place[key]
    place[int(last) if isinstance(place, list) else last] = value
    return spec


# Each field that can change an id, and the part of the fingerprint that then differs.
_PARTS = {
    "normalizer": ("normalizer", {"type": "Lowercase"}, "their normalizers differ"),
    "pre_tokenizer": ("pre_tokenizer", {"type": "WhitespaceSplit"}, "their pre-tokenizers differ"),
    "post_processor": ("post_processor", _TEMPLATE, "their post-processors differ"),
    "model.dropout": ("model.dropout", 0.1, None),
    "model.byte_fallback": ("model.byte_fallback", True, None),
    "model.unk_token": ("model.unk_token", "a", None),
    "model.fuse_unk": ("model.fuse_unk", True, None),
    "model.ignore_merges": ("model.ignore_merges", True, None),
    "model.merges": ("model.merges", [["a", "b"]], None),
    **{
        f"added_tokens.{flag}": (f"added_tokens.1.{flag}", True, "their added tokens differ (flags included)")
        for flag in ("special", "single_word", "lstrip", "rstrip")
    },
    "added_tokens.normalized": ("added_tokens.1.normalized", False, "their added tokens differ (flags included)"),
}


@pytest.mark.parametrize("field", list(_PARTS))
def test_each_field_that_can_change_an_id_changes_the_part_it_belongs_to(field):
    path, value, clause = _PARTS[field]
    base, changed = _tokenizer(_BASE), _tokenizer(_changed(path, value))
    before, after = tokenizer_fingerprint(base), tokenizer_fingerprint(changed)
    assert before != after
    expected = (
        clause or "their models differ (vocabulary, merges or options such as dropout, byte_fallback and unk_token)"
    )
    assert tokenizer_mismatch(before, after) == expected
    differing = [a for a, b in zip(before.split(":")[2].split(","), after.split(":")[2].split(",")) if a != b]
    assert [part.split("=")[0] for part in differing] == [path.split(".")[0]]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("decoder", {"type": "WordPiece", "prefix": "##", "cleanup": True}),
        ("padding", {"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": None, "pad_id": 0,
                     "pad_type_id": 0, "pad_token": "<s>"}),
        ("truncation", {"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0}),
        ("normalizer", {"type": "Sequence", "normalizers": []}),  # as some GGUF conversions write none
    ],
    ids=["decoder", "padding", "truncation", "empty normalizer"],
)  # fmt: skip
def test_what_cannot_change_an_id_leaves_the_fingerprint_alone(path, value):
    base, changed = _tokenizer(_BASE), _tokenizer(_changed(path, value))
    assert changed.backend_tokenizer.to_str() != base.backend_tokenizer.to_str()
    assert tokenizer_fingerprint(changed) == tokenizer_fingerprint(base)


def test_an_option_a_tokenizers_version_does_not_write_is_one_written_at_its_default():
    state = _tokenizer(_BASE).backend_tokenizer.model.__getstate__()
    assert b'"ignore_merges":false,' in state
    older = state.replace(b'"ignore_merges":false,', b"")
    assert fp._model_digest(older) == fp._model_digest(state)
    assert fp._model_digest(state.replace(b'"ignore_merges":false', b'"ignore_merges":true')) != fp._model_digest(state)


def test_a_tokenizer_changed_in_place_gets_its_new_fingerprint():
    tokenizer = _tokenizer(_BASE)
    first = tokenizer_fingerprint(tokenizer)
    assert tokenizer_fingerprint(tokenizer) == first  # remembered: the model is digested once
    tokenizer.backend_tokenizer.model.dropout = 0.5
    with_dropout = tokenizer_fingerprint(tokenizer)
    assert with_dropout != first and tokenizer_mismatch(first, with_dropout).startswith("their models differ")
    tokenizer.backend_tokenizer.model.dropout = None
    tokenizer.add_tokens(["xyz"])
    assert tokenizer_mismatch(first, tokenizer_fingerprint(tokenizer)) == "their added tokens differ (flags included)"


def test_several_parts_are_all_named():
    spec = _changed("normalizer", {"type": "Lowercase"})
    spec["post_processor"] = _TEMPLATE
    assert tokenizer_mismatch(tokenizer_fingerprint(_tokenizer(_BASE)), tokenizer_fingerprint(_tokenizer(spec))) == (
        "their normalizers differ; their post-processors differ"
    )


def test_a_tokenizer_loaded_from_its_file_keeps_its_model_digest_by_the_files_content(tmp_path, monkeypatch):
    """A second load of the same tokenizer.json reads the model's digest kept on disk (the 0.4 s of a 262k
    vocabulary), equal to the one computed; another file's content, another digest; a folder that cannot be written
    costs only the computation."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    saved = tmp_path / "tokenizer"
    tokenizer.save_pretrained(saved)
    kept_in = tmp_path / "kept"

    def loaded(folder):
        fresh = PreTrainedTokenizerFast.from_pretrained(folder)
        fp.note_tokenizer_file(fresh, folder / "tokenizer.json", kept_in)
        return fresh

    expected = tokenizer_fingerprint(tokenizer)
    assert tokenizer_fingerprint(loaded(saved)) == expected
    assert [p.suffix for p in kept_in.iterdir()] == [".model"]
    computed = []
    monkeypatch.setattr(fp, "_model_digest", lambda state: computed.append(state) or "0" * 64)
    assert tokenizer_fingerprint(loaded(saved)) == expected and not computed
    spec = json.loads((saved / "tokenizer.json").read_text())
    spec["model"]["merges"] = spec["model"]["merges"][:-1]
    (saved / "tokenizer.json").write_text(json.dumps(spec))
    tokenizer_fingerprint(loaded(saved))
    assert len(computed) == 1
    monkeypatch.undo()
    kept_in.rename(tmp_path / "moved")
    kept_in.write_text("a file where the folder was")
    assert tokenizer_fingerprint(loaded(tmp_path / "tokenizer")) != expected
    assert kept_in.read_text() == "a file where the folder was" and not list(tmp_path.glob("*.tmp"))
