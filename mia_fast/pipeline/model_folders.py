"""What a local model folder holds, as ``from_pretrained`` reads it: its config, weights and tokenizer files, the
weights file transformers picks where the folder holds more than one set, and a peft adapter (``adapter_config.json``),
alone or beside the weights it applies to, merged into its base's weights so that every forward path runs it."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from mia_fast.data.artefacts import sha256_file
from mia_fast.errors import MiaFastError, MiaFastWarning, one_line

ADAPTER_CONFIG = "adapter_config.json"
INSTALL_ADAPTERS = "pip install 'mia-fast[adapters]'"
# A model directory's weights, as from_pretrained reads them, and the files a tokenizer is read from (tokenizer.json,
# or a vocabulary: vocab.json/merges.txt, vocab.txt, a sentencepiece or tiktoken model).
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_VOCABULARY_MARKS = ("vocab", "merges", ".model", ".spm", ".tiktoken")
# The weights files of a folder in the order transformers' from_pretrained looks for them: the first there loads.
_WEIGHTS_ORDER = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclass(frozen=True)
class Adapter:
    """A peft adapter in ``folder``, applied to ``base``: the base model its adapter_config.json names
    (``base_model_name_or_path``), or None where the folder holds the weights it applies to (config.json beside)."""

    folder: Path
    base: str | None

    def files(self) -> list[Path]:
        """The adapter's own files: its config and weights (``adapter_model.safetensors`` or ``.bin``)."""
        return sorted(p for p in self.folder.iterdir() if p.name.startswith("adapter_") and p.is_file())

    def record(self) -> dict[str, str]:
        """What a scores file records of the adapter: the base it names and a sha256 of its config and weights."""
        files = "".join(f"{path.name}={sha256_file(path)};" for path in self.files())
        return {"base": self.base or "the weights beside it", "sha256": hashlib.sha256(files.encode()).hexdigest()}

    def merged(self, model: torch.nn.Module, name: str) -> torch.nn.Module:
        """``model`` (the base) with the adapter merged into its weights (peft's ``merge_and_unload``)."""
        from peft import PeftModel  # noqa: PLC0415 (optional: peft, mia-fast[adapters]; 1 s at start-up)

        try:
            # peft's notes (deprecations on the way) would print as Python's warnings; the one that matters, a tensor
            # the adapter's file lacks, is refused below.
            with warnings.catch_warnings(record=True) as raised:
                warnings.simplefilter("always")
                adapted = PeftModel.from_pretrained(model, str(self.folder)).merge_and_unload()
        except Exception as exc:  # peft raises many types for an adapter that does not fit its base
            raise MiaFastError(f"{name}: the adapter cannot be merged into its base model: {one_line(exc)}") from None
        missing = next((str(w.message) for w in raised if "missing adapter keys" in str(w.message)), None)
        if missing is not None:
            raise MiaFastError(f"{name}: the adapter's weights file lacks tensors its config needs ({missing})")
        if self.base is None:
            warnings.warn(
                MiaFastWarning(
                    f"{name} holds an adapter ({ADAPTER_CONFIG}) beside its weights: it is merged into them and the "
                    "scores are the adapted model's; to score the weights alone, move the adapter's files out"
                ),
                stacklevel=3,
            )
        return adapted


@contextlib.contextmanager
def base_weights(adapter: Adapter | None, source: str) -> Iterator[str]:
    """What ``from_pretrained`` loads the weights from: ``source``, or, where they lie beside an adapter, a temporary
    folder of links to the folder's files but the adapter's: transformers, where peft is installed, would apply the
    adapter itself, unmerged, and give its loading info in place of the checkpoint's."""
    if adapter is None or adapter.base is not None:
        yield source
        return
    adapter_files = set(adapter.files())
    with tempfile.TemporaryDirectory(prefix="mia-fast-base-") as view:
        for path in adapter.folder.iterdir():
            if path not in adapter_files:
                (Path(view) / path.name).symlink_to(path.resolve())
        yield view


def check_no_adapter_applied(model: torch.nn.Module, name: str) -> None:
    """Refuses a model that transformers loaded with an adapter of its own accord (a hub name of an adapter, where
    peft is installed): its layers would stay unmerged, and the packed forward would read the base's weights alone."""
    if getattr(model, "peft_config", None):
        raise MiaFastError(
            f"{name} is a peft adapter on the hub: download it (hf download {name} --local-dir DIR) and pass that "
            "folder, where it is merged into its base"
        )


def find_adapter(directory: Path, name: str) -> Adapter | None:
    """The peft adapter of a model folder (None without ``adapter_config.json``); refused in one line where peft is not
    installed, or where its config cannot be read or names no base model."""
    config = directory / ADAPTER_CONFIG
    if not config.is_file():
        return None
    if importlib.util.find_spec("peft") is None:
        raise MiaFastError(
            f"{name} holds a peft adapter ({ADAPTER_CONFIG}); loading it needs the package peft: {INSTALL_ADAPTERS}"
        )
    if (directory / "config.json").is_file():
        return Adapter(directory, None)
    try:
        base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise MiaFastError(f"{config}: not a readable adapter config ({one_line(exc)})") from None
    if not isinstance(base, str) or not base:
        raise MiaFastError(f"{config} names no base model (base_model_name_or_path): pass a folder with config.json")
    return Adapter(directory, base)


def check_loaded_whole(source: str, name: str) -> None:
    """Refuses a device map for a folder holding an adapter (``source``: a directory or a hub name): the adapter is
    merged into weights loaded whole."""
    if (Path(source) / ADAPTER_CONFIG).is_file():
        raise MiaFastError(
            f"--device-map: {name} holds a peft adapter, merged into a model loaded whole: use --device, or save the "
            "merged model whole (merge_and_unload().save_pretrained) and spread that"
        )


def check_model_directory(directory: Path, name: str) -> None:
    """Refuses a model directory without config.json, weights or tokenizer files, naming what is missing, or with one
    of them that this user cannot read."""
    files = [p.name for p in directory.iterdir() if p.is_file()]
    if "config.json" not in files:
        raise MiaFastError(
            f"{name} has no config.json; a model directory holds config.json, the weights and the tokenizer files, "
            "as save_pretrained writes them"
        )
    if not any(f.endswith(_WEIGHT_SUFFIXES) for f in files):
        ggufs = sorted(f for f in files if f.endswith(".gguf"))
        hint = f"; to load its GGUF file, pass {directory / ggufs[0]} itself" if ggufs else ""
        raise MiaFastError(f"{name} has no weights (model.safetensors or pytorch_model.bin){hint}")
    if not has_tokenizer_files(str(directory)):
        raise no_tokenizer_files(name)
    read = [f for f in files if f.endswith((".json", *_WEIGHT_SUFFIXES)) or any(m in f for m in _VOCABULARY_MARKS)]
    unreadable = next((f for f in sorted(read) if not os.access(directory / f, os.R_OK)), None)
    if unreadable is not None:  # transformers says "No such file or directory" of it
        raise MiaFastError(f"{directory / unreadable}: permission denied (this user cannot read it)")


def warn_of_other_weights(source: str, name: str) -> None:
    """Says, in one line, which weights load where a folder (``source``, or a hub name) holds one file beside the index
    of sharded weights of the same format (one of them stale): the single file, as transformers chooses."""
    directory = Path(source)
    chosen = next((f for f in _WEIGHTS_ORDER if (directory / f).is_file()), None)
    if chosen is not None and not chosen.endswith(".json") and (directory / f"{chosen}.index.json").is_file():
        warnings.warn(
            MiaFastWarning(
                f"{name} holds both {chosen} and sharded weights ({chosen}.index.json); {chosen} loads, as "
                "transformers chooses: remove the stale one"
            ),
            stacklevel=3,
        )


def has_tokenizer_files(source: str) -> bool:
    """Whether ``source`` is a folder holding tokenizer files: tokenizer.json, or a vocabulary."""
    files = [p.name for p in Path(source).iterdir()] if Path(source).is_dir() else []
    return "tokenizer.json" in files or any(mark in f for f in files for mark in _VOCABULARY_MARKS)


def no_tokenizer_files(name: str) -> MiaFastError:
    return MiaFastError(
        f"{name} has no tokenizer files (tokenizer.json, or tokenizer_config.json and its vocabulary); "
        "copy them beside the weights"
    )
