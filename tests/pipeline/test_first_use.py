"""What runs on no machine here proves itself on first use (pipeline.first_use): with the CPU standing in for a GPU
whose plan checks itself, a wrong kernel and a wrong attention are caught; the run completes, warns once, records
why in the path of its provenance, and its scores equal the reference's. A healthy device is told nothing."""

import dataclasses
import importlib
import warnings
from weakref import WeakKeyDictionary

import numpy as np
import pytest
import torch
from helpers import FAST, read_jsonl, run_cli, write_jsonl

from mia_fast.errors import MiaFastWarning
from mia_fast.ops import self_check
from mia_fast.pipeline import device, first_use, forward_path
from mia_fast.pipeline.attention import AttentionBackend, segment_attention
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.packed import PackedDecoder

token_stats_kernel = importlib.import_module("mia_fast.kernels.token_stats")  # the package's name is a function
TEXTS = ["the quick brown fox jumps over the lazy dog", "a second text, a little longer than the first one is", "x"]


@pytest.fixture(autouse=True)
def checking_cpu(monkeypatch):
    """The CPU's plan checks itself as a GPU's does, in a fresh process (no verdict kept from another test)."""
    own = device.plan_for
    monkeypatch.setattr(device, "plan_for", lambda found: dataclasses.replace(own(found), self_checks=True))
    monkeypatch.setattr(self_check, "_verdicts", {})
    monkeypatch.setattr(first_use, "_forward_verdicts", WeakKeyDictionary())


def caught(build):
    """What ``build()`` returns and the package's warnings it gave."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = build()
    return result, [str(w.message) for w in seen if issubclass(w.category, MiaFastWarning)]


def stats_equal(got, want, atol=0.0):
    for name in ("logp", "mu", "var"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=0, atol=atol, err_msg=name)


def test_a_healthy_device_is_told_nothing_and_keeps_its_path(tiny_loaded):
    engine, said = caught(lambda: StatsEngine(tiny_loaded, backend="triton", forward="model"))
    assert said == [] and engine.backend == "triton"
    packed, said = caught(lambda: StatsEngine(tiny_loaded))
    assert said == [] and packed.path.describe() == "packed, segment-wise attention, streamed head"
    assert packed._packed is not None  # the decoder that passed the check is the one the engine runs


def test_a_wrong_kernel_is_caught_warned_of_once_and_the_reference_runs(tiny_loaded, monkeypatch):
    right = token_stats_kernel._token_stats

    def wrong(logits, targets, ignore_index, config):
        logp, *rest = right(logits, targets, ignore_index, config)
        return (logp + 0.5, *rest)

    monkeypatch.setattr(token_stats_kernel, "_token_stats", wrong)
    engine, said = caught(lambda: StatsEngine(tiny_loaded, backend="triton", forward="model"))
    assert said == [
        "self-check on cpu: the token_stats kernel differs from the torch reference by 0.5; the torch reference runs "
        "instead for the rest of this process"
    ]
    provenance = engine.provenance()
    assert engine.backend == "torch" and provenance["backend"] == "torch"
    assert provenance["kernels_set_aside"] == "the token_stats kernel differs from the torch reference by 0.5"
    assert "kernels_set_aside" not in StatsEngine(tiny_loaded, backend="torch").provenance()
    again, said = caught(lambda: StatsEngine(tiny_loaded, backend="triton", forward="model"))
    assert said == [] and again.backend == "torch"  # once a process
    stats_equal(engine.compute(TEXTS), StatsEngine(tiny_loaded, backend="torch", forward="model").compute(TEXTS))


def wrong_attention(query, key, value, segments, *, enable_gqa=False, window=None):
    """Attention to the values in reverse order: right shapes, wrong numbers."""
    return segment_attention(query, key, value.flip(0), segments, enable_gqa=enable_gqa, window=window)


def test_a_wrong_attention_is_caught_and_the_segment_wise_reference_runs(tiny_loaded, monkeypatch):
    reference = StatsEngine(tiny_loaded).compute(TEXTS)
    standing_in = AttentionBackend(
        "varlen attention (flash)", wrong_attention, offsets_on_host=True, in_model_dtype=False
    )
    monkeypatch.setattr(forward_path, "FLASH_ATTENTION", standing_in)
    monkeypatch.setattr(forward_path, "why_not_flash", lambda *_: None)
    engine, said = caught(lambda: StatsEngine(tiny_loaded))
    assert len(said) == 1 and said[0].startswith(
        "self-check on cpu: varlen attention (flash) differed from the model's own by "
    )
    assert said[0].endswith(
        "on this device; the packed forward with segment-wise attention runs for the rest of this process"
    )
    assert engine.path.describe().startswith("packed, segment-wise attention (varlen attention (flash) differed from")
    assert engine.provenance()["forward"] == engine.path.describe()
    stats_equal(engine.compute(TEXTS), reference)
    _, said = caught(lambda: StatsEngine(tiny_loaded))
    assert said == []


def test_a_wrong_packed_forward_falls_back_to_the_models_own(tiny_loaded, monkeypatch):
    own = StatsEngine(tiny_loaded, forward="model").compute(TEXTS)
    right = PackedDecoder.hidden
    monkeypatch.setattr(PackedDecoder, "hidden", lambda self, *args: right(self, *args) + 0.5)
    engine, said = caught(lambda: StatsEngine(tiny_loaded))
    assert said == [
        "self-check on cpu: the packed forward differed from the model's own by 0.5 on this device; the model's own "
        "forward runs for the rest of this process"
    ]
    assert not engine.packs
    assert engine.path.fallback == "the packed forward differed from the model's own by 0.5 on this device"
    stats_equal(engine.compute(TEXTS), own, atol=1e-6)


def test_a_packed_forward_that_raises_is_set_aside(tiny_loaded, monkeypatch):
    def raises(self, *args):
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")

    monkeypatch.setattr(PackedDecoder, "hidden", raises)
    engine, said = caught(lambda: StatsEngine(tiny_loaded))
    assert not engine.packs and engine.path.fallback == "the packed forward failed on this device"
    assert len(said) == 1


def test_a_cli_run_with_a_wrong_kernel_completes_warns_once_and_scores_as_the_reference(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": text} for text in TEXTS * 3])
    reference = tmp_path / "reference.jsonl"
    assert run_cli("score", data, "--model", tiny_model_dir, "--out", reference, "--backend", "torch", *FAST) == 0
    capsys.readouterr()
    right = token_stats_kernel._token_stats
    monkeypatch.setattr(token_stats_kernel, "_token_stats", lambda *a: (lambda s: (s[0] - 1.0, *s[1:]))(right(*a)))
    out = tmp_path / "out.jsonl"
    command = ["score", data, "--model", tiny_model_dir, "--out", out, "--backend", "triton", "--forward", "model"]
    assert run_cli(*command, *FAST) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "self-check" in line]
    assert lines == [
        "mia-fast: warning: self-check on cpu: the token_stats kernel differs from the torch reference by 1; the torch "
        "reference runs instead for the rest of this process"
    ]
    for ours, theirs in zip(read_jsonl(out), read_jsonl(reference), strict=True):
        for column in ("loss", "zlib", "mink_0.2", "minkpp_0.2"):
            np.testing.assert_allclose(ours[column], theirs[column], rtol=0, atol=1e-5, err_msg=column)


def test_the_check_costs_one_short_text(tiny_loaded, monkeypatch):
    calls = []
    right = PackedDecoder.hidden
    monkeypatch.setattr(PackedDecoder, "hidden", lambda self, ids, *a: calls.append(len(ids)) or right(self, ids, *a))
    StatsEngine(tiny_loaded)
    assert calls == [len(calls) and calls[0]] and 0 < calls[0] <= first_use.PROBE_IDS
    assert torch.is_inference_mode_enabled() is False
