"""The forward's choices and per-device defaults are one table each, read by the pipeline that decides and by the
CLI that lists them, in a module that imports no torch."""

import ast
import inspect

import pytest
import torch

from mia_fast.errors import MiaFastError
from mia_fast.pipeline import choices, device, engine, forward_path


def test_the_table_imports_nothing_but_annotations():
    imported = [
        n for n in ast.walk(ast.parse(inspect.getsource(choices))) if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    assert [getattr(n, "module", None) for n in imported] == ["__future__"]


def test_the_pipeline_decides_from_the_same_tables():
    assert engine.DEFAULT_BATCH_TOKENS is choices.DEFAULT_BATCH_TOKENS
    assert tuple(device.DTYPES) == choices.DTYPE_NAMES
    assert device.resolve_dtype("fp16", torch.device("cpu")) == torch.float16
    with pytest.raises(MiaFastError, match="choose one of auto, packed, model"):
        forward_path.choose_forward(None, torch.device("cpu"), 8, "fast", "torch", plain_head=True)


def test_the_default_batch_budget_is_said_from_the_table(monkeypatch):
    assert choices.batch_tokens_default() == "1024 on CPU, 16384 on GPU"
    monkeypatch.setitem(choices.DEFAULT_BATCH_TOKENS, "cuda", 8)
    assert choices.batch_tokens_default() == "1024 on CPU, 8 on GPU"
