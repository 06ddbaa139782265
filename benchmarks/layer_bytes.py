"""The bytes a decoder layer moves outside its matrix products and attention, per token: the packed decoder's GPU
path against the model's own forward, counted op by op on the CPU.

A ``TorchDispatchMode`` sees every aten op of one forward through a one-layer model of a real model's shape (random
weights, the model's dtype). Each op outside the products and attention adds what it reads (its tensor inputs; a
gather or embedding only the rows it picks) and what it writes (its outputs); an op whose outputs share its inputs'
storage (a view, a cast to the same dtype) moves nothing. A cast is an op
that copies a tensor into another dtype. The packed decoder runs as on a GPU (the model's own weights, no reordered
copy) with a stand-in for flash ``varlen_attn`` (one op, as the real kernel is); the model's own forward runs with
SDPA. Both see the same ids, one sequence, so no padding is counted against either.

On a GPU the products and the attention read the same weights and the same q, k and v on both paths: what differs
is what is counted here (norms, rotary embedding, residual sums, activations, casts).

    python benchmarks/layer_bytes.py [--tokens 64]     # writes results/layer-bytes.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mia_fast.pipeline.attention import AttentionBackend, Segments, segment_attention
from mia_fast.pipeline.packed import PackedDecoder

RESULTS = Path(__file__).resolve().parent / "results"

# One decoder layer of each shape (the model's own sizes; the vocabulary is cut, its head is not run).
SHAPES: dict[str, tuple[str, dict]] = {
    "Llama-3-8B": (
        "LlamaConfig",
        dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, rope_theta=5e5),
    ),
    "Llama-3.2-1B": (
        "LlamaConfig",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            rope_theta=5e5,
        ),
    ),
    "Pythia-6.9B": (
        "GPTNeoXConfig",
        dict(hidden_size=4096, intermediate_size=16384, num_attention_heads=32, rotary_pct=0.25, hidden_act="gelu"),
    ),
}
PRODUCTS = frozenset({"linear", "matmul", "mm", "addmm", "bmm", "baddbmm", "_linear_pointwise"})
ATTENTION = frozenset(
    {
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_flash_attention_forward",
        "varlen_stand_in",
    }
)
# Ops that read only the rows their index picks (counted as the rows written, plus the index).
GATHERS = frozenset({"embedding", "index_select", "gather", "index"})


@torch.library.custom_op("mia_fast_bench::varlen_stand_in", mutates_args=())
def _varlen_stand_in(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    enable_gqa: bool,
    window: int | None,
) -> torch.Tensor:
    segments = Segments(cu_seq_q.cpu(), cu_seq_k.cpu(), max_q, max_k)
    return segment_attention(query, key, value, segments, enable_gqa=enable_gqa, window=window)


def flash_stand_in(query, key, value, segments: Segments, *, enable_gqa=False, window=None):
    """``varlen_attn``'s signature as one op, like the flash kernel, taking what it takes: grouped heads as they
    are, int32 offsets, q, k and v in one half-precision dtype."""
    if key.shape[1] == query.shape[1] and enable_gqa:
        raise AssertionError("keys and values were repeated to every query head")
    cu_seq_q, cu_seq_k = segments.cu_seq_q, segments.cu_seq_k
    if cu_seq_q.dtype != torch.int32 or cu_seq_k.dtype != torch.int32:
        raise AssertionError(f"offsets of {cu_seq_q.dtype}, not int32")
    if {query.dtype, key.dtype, value.dtype} - {torch.bfloat16, torch.float16} or len({query.dtype, key.dtype}) > 1:
        raise AssertionError(f"q, k, v of {query.dtype}, {key.dtype}, {value.dtype}")
    return _varlen_stand_in(
        query, key, value, cu_seq_q, cu_seq_k, segments.max_q, segments.max_k, enable_gqa=enable_gqa, window=window
    )


FLASH_STAND_IN = AttentionBackend("flash stand-in", flash_stand_in, offsets_on_host=False, in_model_dtype=True)


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


@dataclass
class OpBytes(TorchDispatchMode):
    """Bytes read and written by every op outside the products and attention, casts, and the ops by name."""

    read: int = 0
    written: int = 0
    casts: int = 0
    by_op: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in PRODUCTS | ATTENTION:
            return out
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        inputs = [t for t in tree_flatten((args, {k: v for k, v in kwargs.items() if k != "out"}))[0]]
        storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        in_place = name.endswith("_") or "out" in kwargs
        if not in_place and all(t.untyped_storage().data_ptr() in storages for t in outputs):
            return out  # a view, or the input itself (a cast to its own dtype)
        written = _bytes(outputs)
        if name in GATHERS:
            read = written + _bytes(t for t in inputs if isinstance(t, torch.Tensor) and not t.is_floating_point())
        else:
            read = _bytes(inputs)
        source = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        if name in ("to", "_to_copy", "copy_") and source is not None and outputs and outputs[0].dtype != source.dtype:
            if source.is_floating_point() and outputs[0].is_floating_point():
                self.casts += 1
        self.read += read
        self.written += written
        self.by_op[name] += read + written
        return out


def one_layer_model(shape: str, dtype: torch.dtype) -> torch.nn.Module:
    config_name, sizes = SHAPES[shape]
    config = getattr(transformers, config_name)(
        vocab_size=1024, num_hidden_layers=1, max_position_embeddings=4096, attn_implementation="sdpa", **sizes
    )
    torch.manual_seed(0)
    model = getattr(transformers, config_name.replace("Config", "ForCausalLM"))(config)
    return model.to(dtype).eval()


def count(forward: Callable[[], torch.Tensor]) -> OpBytes:
    with torch.inference_mode(), OpBytes() as counted:
        forward()
    return counted


def measure(shape: str, tokens: int, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Bytes per token and casts of one layer of ``shape``: the model's own forward and the packed decoder's."""
    model = one_layer_model(shape, dtype)
    ids = torch.randint(0, model.config.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0))
    decoder = PackedDecoder(model, reorder=False, attention=FLASH_STAND_IN)
    counts = {
        "model": count(lambda: model.base_model(input_ids=ids[None], use_cache=False).last_hidden_state),
        "packed": count(lambda: decoder.hidden(ids, [tokens])),
    }
    found = {
        path: {
            "bytes_per_token": (c.read + c.written) / tokens,
            "read_per_token": c.read / tokens,
            "written_per_token": c.written / tokens,
            "casts": c.casts,
            "bytes_per_token_by_op": {op: b / tokens for op, b in c.by_op.most_common()},
        }
        for path, c in counts.items()
    }
    return {
        "shape": shape,
        "dtype": str(dtype).removeprefix("torch."),
        "tokens": tokens,
        **found,
        "packed_over_model_bytes": found["packed"]["bytes_per_token"] / found["model"]["bytes_per_token"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = [measure(shape, args.tokens) for shape in SHAPES]
    print(f"{'shape':<14} {'model KB/token':>15} {'packed KB/token':>16} {'ratio':>6} {'casts model/packed':>19}")
    for row in rows:
        print(
            f"{row['shape']:<14} {row['model']['bytes_per_token'] / 1e3:>15.1f} "
            f"{row['packed']['bytes_per_token'] / 1e3:>16.1f} {row['packed_over_model_bytes']:>6.3f} "
            f"{row['model']['casts']:>9}/{row['packed']['casts']:<9}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "layer-bytes.json"
    path.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
