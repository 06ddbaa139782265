"""FSD, the fine-tuned score deviation (Zhang et al., ICLR 2025, "Fine-tuning can Help Detect Pretraining Data from
Large Language Models").

fsd_<base> = S(x; target) − S(x; target fine-tuned on known non-members), for a base score S oriented higher =
member: loss, zlib, mink, minkpp (each k), lowercase. Fine-tuning on a few texts the model has not seen, from the
domain of the texts judged, raises the likelihood of that domain's non-members much more than that of members, which
the model already fits, so the deviation is larger for members. The fine-tuned copy is one more model of the run
(its passes are ``Pass(model=FINETUNED)``, planned, deduplicated and batched like the target's), made from the
target's weights by the detector when a method asks for it, and kept on disk (below).

Followed: the public code (github.com/ml-stat-Sustech/Fine-tuned-Score-Deviation): ``sft.py`` and ``run_sft.sh``
fine-tune on the non-members only, 3 epochs, 8 texts per step, texts cut to 1024 tokens; ``eval.py`` scores every text
under the target and under the fine-tuned model and keeps, per score, the fine-tuned one minus the target's. Its
scores are oriented lower = member (perplexity, −Min-K%, ...); on ours, oriented higher = member, that difference is
exactly S(target) − S(fine-tuned), which is reported here. Its base scores are ``ppl``, ``ppl/lowercase_ppl``,
``ppl/zlib`` and Min-20% Prob: ours are lowercase, zlib and mink (any k), with Min-K%++ (the method FSD builds on
elsewhere in the paper) besides.

Deviations, all deliberate:
- the fine-tuning is a full one (``mia_fast.generation.finetune``: AdamW at a constant learning rate, no weight decay,
  gradients clipped to norm 1) of an fp32 copy of the target, cast back to the target's dtype to be scored, where the
  public code trains LoRA adapters (rank 16, alpha 32, dropout 0.05, on the attention's q and v projections) on an
  8-bit copy in fp16 mixed precision, at 1e-3 on a cosine schedule with 10 warm-up steps and weight decay 5e-4: no
  LoRA library is a dependency here. A full fine-tuning moves every weight, so its learning rate is far lower: 3e-5
  by default (``--fsd-lr``; on SmolLM2-135M with 32 members planted by fine-tuning and 32 known non-members, 1e-5 and
  3e-5 gave fsd_loss an AUROC of 0.70 and 0.68 against loss's 0.67, 1e-4 and 3e-4 0.55 and 0.50; fsd_minkpp fell
  below minkpp's 0.75 at every rate there, a planted setting not being the paper's). It needs memory for the fp32
  weights, gradients and AdamW states of the whole model (16 bytes a parameter: ~2 GB for 135M);
- the last partial batch of an epoch is kept (the public trainer drops it);
- ``fsd_loss`` deviates the loss (the log of the perplexity); the public ``ppl`` deviates the perplexity itself;
- mink and minkpp average the max(1, floor(k·n)) lowest values (the public code takes int(k·n), NaN for none);
- a scored text that is also a non-member text fine-tuned on is refused.

The fine-tuned weights are cached in the mia-fast cache (``$MIA_FAST_CACHE/fsd``) by a fingerprint of the target
(weights, tokenizer, dtype), the non-member texts and the fine-tuning settings: a later run with the same ones reads
them instead of fine-tuning again. The weights are written first and the entry's checked JSON (holding their sha256)
last, each atomically; an entry that does not check is fine-tuned and written again (one line says so).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mia_fast.data.artefacts import read_checked_json, replacing, sha256_file, write_checked_json
from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.errors import MiaFastError
from mia_fast.methods.derived import derive_model
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.likelihood import loss_score, zlib_score
from mia_fast.methods.lowercase import lowercase_score
from mia_fast.methods.mink import mink_score, minkpp_score
from mia_fast.methods.recall import refuse_prefix_overlap
from mia_fast.methods.registry import REGISTRY, register
from mia_fast.methods.settings import (
    BATCH_TEXTS,
    EPOCHS,
    EXAMPLE_NONMEMBERS,
    LEARNING_RATE,
    SEED,
    TOKENS,
    CheckedSettings,
    ChecksTexts,
    GivesExample,
    MethodSettings,
    known_nonmembers,
    recorded,
    setting,
)
from mia_fast.tokens.fingerprint import tokenizer_fingerprint

if TYPE_CHECKING:  # torch, and modules that import it: importing the methods does not
    import torch

    from mia_fast.generation.finetune import FineTuning
    from mia_fast.pipeline.models import LoadedModel

FINETUNED = "finetuned"
# The base scores FSD deviates, by their registered names: fsd_<name> for each.
BASES: dict[str, Callable[..., np.ndarray]] = {
    "loss": loss_score,
    "zlib": zlib_score,
    "mink": mink_score,
    "minkpp": minkpp_score,
    "lowercase": lowercase_score,
}
CACHE_FORMAT = 1
_ENTRY_KIND = "mia-fast fsd fine-tuned weights"
_WEIGHTS_FILE = "weights.safetensors"
_ENTRY_FILE = "entry.json"


@dataclass(frozen=True)
class FsdSettings(CheckedSettings, ChecksTexts, GivesExample):
    nonmembers: tuple[str, ...] = known_nonmembers()
    epochs: int = setting(3, "epochs of fsd's fine-tuning on the non-member texts", "fsd-epochs", bounds=EPOCHS)
    learning_rate: float = setting(
        3e-5, "learning rate of fsd's (full, AdamW, constant-rate) fine-tuning", "fsd-lr", bounds=LEARNING_RATE
    )
    batch_size: int = setting(8, "non-member texts per step of fsd's fine-tuning", "fsd-batch-size", bounds=BATCH_TEXTS)
    max_tokens: int = setting(
        1024,
        "tokens of each non-member text fsd fine-tunes on (the rest is cut)",
        "fsd-max-tokens",
        bounds=TOKENS,
    )
    seed: int = setting(0, "seed of fsd's fine-tuning (order of the texts, dropout)", "fsd-seed", bounds=SEED)

    def check_texts(self, texts: Sequence[str]) -> None:
        refuse_prefix_overlap(texts, self.nonmembers, role="known non-member")

    @classmethod
    def example(cls, model: Any) -> FsdSettings:
        """A short fine-tuning (2 epochs at 1e-3, two texts a step) on the examples' known non-members."""
        return cls(nonmembers=EXAMPLE_NONMEMBERS, epochs=2, learning_rate=1e-3, batch_size=2)

    @property
    def tuning(self) -> FineTuning:
        """The fine-tuning these settings say."""
        from mia_fast.generation.finetune import FineTuning  # noqa: PLC0415 (torch: 1.5 s at start-up; every command imports the methods)

        return FineTuning(self.epochs, self.learning_rate, self.batch_size, self.max_tokens, self.seed)

    def fingerprint(self, target: LoadedModel) -> str:
        """What the fine-tuned copy of ``target`` is made from: its weights, tokenizer and dtype, the
        texts and the fine-tuning."""
        texts = hashlib.sha256(json.dumps(self.nonmembers, ensure_ascii=False).encode("utf-8")).hexdigest()
        made_from = {
            "format": CACHE_FORMAT,
            "weights": target.weights_fingerprint(),
            "tokenizer": tokenizer_fingerprint(target.tokenizer),
            "dtype": str(target.dtype),
            "nonmembers": texts,
            "tuning": recorded(self.tuning),
        }
        return hashlib.sha256(json.dumps(made_from, sort_keys=True).encode()).hexdigest()


def fine_tuned_copy(target: LoadedModel, settings: FsdSettings, log: Callable[[str], None]) -> LoadedModel:
    """A copy of ``target`` fine-tuned on ``settings.nonmembers``: read from the cache where an entry
    of the same fingerprint checks, else fine-tuned (the target untouched) and cached."""
    import torch  # noqa: PLC0415 (torch: 1.5 s at start-up; every command imports the methods)

    from mia_fast.generation.finetune import fine_tune  # noqa: PLC0415 (torch: 1.5 s at start-up; every command imports the methods)
    from mia_fast.pipeline.models import LoadedModel, cache_dir  # noqa: PLC0415 (torch: 1.5 s at start-up; every command imports the methods)

    key = settings.fingerprint(target)
    entry = cache_dir() / "fsd" / key[:32]
    count = len(settings.nonmembers)
    name = f"{target.name} fine-tuned on {count} non-member texts"
    cached = _read_entry(entry, key, target, log)
    if cached is not None:
        log(f"fsd: the fine-tuned copy of the target read from the cache ({entry})")
        return LoadedModel(cached, target.tokenizer, name, target.device, target.dtype)
    # Trained in fp32 whatever the target's dtype: steps of a small learning rate would round away in bf16 weights.
    tuned = LoadedModel(copy.deepcopy(target.model).float(), target.tokenizer, name, target.device, torch.float32)
    log(
        f"fsd: fine-tuning a copy of the target on {count} known non-member texts ({settings.epochs} epochs at "
        f"learning rate {settings.learning_rate:g})"
    )
    fine_tune(tuned, settings.nonmembers, settings.tuning)
    tuned.model.to(target.dtype)
    tuned.dtype = target.dtype
    _write_entry(entry, key, tuned.model, log)
    return tuned


def _read_entry(entry: Path, key: str, target: LoadedModel, log: Callable[[str], None]) -> torch.nn.Module | None:
    """The fine-tuned model of cache entry ``entry`` (a copy of ``target``'s with its weights), or None where there is
    none, or one that does not check (said in one line)."""
    from safetensors.torch import load_model  # noqa: PLC0415 (torch: 1.5 s at start-up; every command imports the methods)

    if not (entry / _ENTRY_FILE).exists():
        return None
    weights = entry / _WEIGHTS_FILE
    try:
        recorded_entry = read_checked_json(entry / _ENTRY_FILE, _ENTRY_KIND, "an fsd_* run")
        if recorded_entry.get("key") != key:
            raise MiaFastError("it holds another fine-tuning")
        if sha256_file(weights) != recorded_entry.get("weights_sha256"):
            raise MiaFastError(f"{weights.name} was changed after it was written")
        model = copy.deepcopy(target.model)
        load_model(model, weights, strict=True, device=str(target.device))
    except (MiaFastError, OSError, RuntimeError, ValueError) as exc:
        log(f"fsd: cache entry {entry} not used ({' '.join(str(exc).split())}); fine-tuning again")
        return None
    return model.eval()


def _write_entry(entry: Path, key: str, model: torch.nn.Module, log: Callable[[str], None]) -> None:
    """Writes the weights of ``model``, then the entry holding their checksum; a disk that refuses says so in one line
    (the run goes on with the copy in memory)."""
    from safetensors.torch import save_model  # noqa: PLC0415 (torch: 1.5 s at start-up; every command imports the methods)

    try:
        entry.mkdir(parents=True, exist_ok=True)
        with replacing(entry / _WEIGHTS_FILE) as temporary:
            save_model(model, str(temporary))
            digest = sha256_file(temporary)
        write_checked_json(entry / _ENTRY_FILE, {"key": key, "weights_sha256": digest}, _ENTRY_KIND)
    except OSError as exc:
        log(f"fsd: the fine-tuned weights could not be cached in {entry}: {exc.strerror or exc}")


derive_model(
    FINETUNED,
    FsdSettings,
    fine_tuned_copy,
    "a copy of the target fine-tuned here, which needs the target's weights whole (--model or --gguf; a served model, "
    "a stats cache or a model spread by --device-map cannot be fine-tuned)",
)


def on_finetuned(p: Pass) -> Pass:
    """The same pass run on the fine-tuned copy."""
    return dataclasses.replace(p, model=FINETUNED)


def _register(base_name: str, base_score: Callable[..., np.ndarray]) -> None:
    base = REGISTRY[base_name]

    def passes(settings: MethodSettings) -> tuple[Pass, ...]:
        own = tuple(base.passes(settings))
        return (*own, *map(on_finetuned, own))

    def deviation(inputs: ScoringInputs, *ks: Sequence[float]) -> np.ndarray:
        own = base.passes(inputs.settings)
        tuned = {p: inputs.of(on_finetuned(p)) for p in own}
        on_copy = dataclasses.replace(inputs, stats=tuned.get(PLAIN), passes=tuned)
        return base_score(inputs, *ks) - base_score(on_copy, *ks)

    deviation.__doc__ = (
        f"FSD over {base_name}: {base_name} under the target minus {base_name} under its copy fine-tuned on known "
        "non-member texts."
    )
    register(
        f"fsd_{base_name}",
        settings=[FsdSettings, *base.settings],
        takes_k=base.takes_k,
        passes=passes,
        pooled=base.pooled,
        vocabulary=base.vocabulary,
    )(deviation)


for _name, _score in BASES.items():
    _register(_name, _score)
