"""A model family is one file: a Starcoder2 spec written into a copy of the package's families folder, and nothing
else, makes ``mia-fast score --forward packed`` run Starcoder2 packed, with the model's own forward's scores, where
this checkout refuses it. And the registry refuses a model type claimed twice."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import train_tokenizer
from helpers import package_copy_with, read_jsonl, write_jsonl

from mia_fast.cli import main
from mia_fast.pipeline.families import FAMILIES, FamilySpec, register_family
from mia_fast.pipeline.families.llama import llama_layer

pytestmark = pytest.mark.lower_bounds

# A family module as its author writes it: the one file added to the package.
STARCODER2 = textwrap.dedent(
    '''
    """Starcoder2: LayerNorms with biases, q/k/v and output products with biases, a GELU MLP without a gate."""

    from mia_fast.pipeline.families import FamilySpec, register_family
    from mia_fast.pipeline.packed_layers import MLP, QKV, decoder_layer, fused_product, linear_product


    def starcoder2_layer(layer, shape, config, *, reorder):
        attention, mlp = layer.self_attn, layer.mlp
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        if reorder:
            rows = [shape.paired(shape.heads), shape.paired(shape.kv_heads), None]
            qkv = QKV((fused_product(projections, rows, reorder=reorder),), shape)
        else:
            qkv = QKV(tuple(linear_product(m, reorder=reorder) for m in projections), shape)
        up, down = linear_product(mlp.c_fc, reorder=reorder), linear_product(mlp.c_proj, reorder=reorder)
        feed_forward = MLP(up, down, activation=config.hidden_act)
        out = linear_product(attention.o_proj, reorder=reorder)
        return decoder_layer(layer, qkv, out, feed_forward, parallel=False, reorder=reorder)


    register_family(FamilySpec(("starcoder2",), starcoder2_layer, window=lambda config, layer: config.sliding_window))
    '''
)
# Runs the CLI on the package copy: the editable install's import hook is dropped first (as in test_adding_a_method).
RUN_COPY = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'ScikitBuildRedirectingFinder']
import mia_fast
from mia_fast.cli import main
print(mia_fast.__file__)
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def starcoder2_dir(tmp_path_factory) -> Path:
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    directory = tmp_path_factory.mktemp("tiny-starcoder2")
    tokenizer = train_tokenizer({"eos_token": "<|endoftext|>"}, vocab_size=280)
    torch.manual_seed(0)
    config = Starcoder2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        sliding_window=12,  # shorter than most texts: the window is the family's to say
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = Starcoder2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.5)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_a_family_module_added_to_the_folder_runs_packed_with_the_models_scores(starcoder2_dir, tmp_path, capsys):
    data = tmp_path / "texts.jsonl"
    write_jsonl(data, [{"text": t} for t in ["a fox", "the quick brown fox jumps over the lazy dog " * 3, "dog"]])
    args = ["score", str(data), "--model", str(starcoder2_dir), "--methods", "loss,mink", "--quiet"]

    assert main([*args, "--forward", "packed", "--out", str(tmp_path / "refused.jsonl")]) == 2
    assert "model type 'starcoder2' is not one of" in capsys.readouterr().err
    assert main([*args, "--forward", "model", "--out", str(tmp_path / "own.jsonl")]) == 0

    site = package_copy_with(tmp_path, "pipeline/families/starcoder2.py", STARCODER2)
    out = tmp_path / "packed.jsonl"
    ran = subprocess.run(
        [sys.executable, "-c", RUN_COPY, *args, "--forward", "packed", "--verbose", "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=tmp_path,  # not this checkout, which ``python -c`` would put first on sys.path
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr
    assert Path(ran.stdout.splitlines()[0]).parent == site / "mia_fast"
    assert "packed, segment-wise attention, streamed head" in ran.stderr
    packed, own = read_jsonl(out), read_jsonl(tmp_path / "own.jsonl")
    columns = [c for c in own[0] if c.startswith(("loss", "mink"))]
    assert len(columns) >= 2
    for column in columns:
        assert [r[column] for r in packed] == pytest.approx([r[column] for r in own], abs=1e-5), column
    assert "starcoder2" not in FAMILIES  # this checkout's package never saw it


def test_a_model_type_claimed_twice_is_refused():
    with pytest.raises(ValueError, match="'llama' already has a family"):
        register_family(FamilySpec(("llama",), llama_layer))
    assert FAMILIES["llama"].layer is llama_layer
