"""The Python API, one front door: ``Detector`` scores texts with every requested method, running each pass the
methods need once; ``score_file`` scores a dataset into a file block by block, resumably; a run is described by
the typed configs of ``mia_fast.scoring.config`` and the methods' own settings classes (every one a registered
method reads is a name here, as the method registry lists them: :func:`mia_fast.settings_classes`).

>>> from mia_fast.api import Detector, RecallSettings
>>> detector = Detector("HuggingFaceTB/SmolLM2-135M", [RecallSettings(prefix_nonmembers=("a known non-member",))])
>>> detector.score(["a text"], methods=["loss", "mink", "recall"], k=[0.2])["recall"]
"""

from __future__ import annotations

from mia_fast import settings_classes
from mia_fast.methods.dcpdd import LogFrequencies
from mia_fast.methods.online import OnlineSetting
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS
from mia_fast.methods.settings import MethodSettings
from mia_fast.pipeline.device_map import DeviceMap
from mia_fast.scoring.columns import ONLINE_COLUMNS, output_columns, windows_path
from mia_fast.scoring.config import (
    DEFAULT_BLOCK_ROWS,
    ComputeConfig,
    ModelConfig,
    OutputConfig,
    RunConfig,
    ScoringConfig,
)
from mia_fast.scoring.detector import UNSCORABLE_WARNING, Detector, OnlineScores, Scores
from mia_fast.scoring.run_plan import check_before_loading
from mia_fast.scoring.runner import score_file

# Every settings class a registered method reads (``from mia_fast.api import RecallSettings``).
SETTINGS_CLASSES = settings_classes()
globals().update(SETTINGS_CLASSES)

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "ONLINE_COLUMNS",
    "UNSCORABLE_WARNING",
    "ComputeConfig",
    "Detector",
    "DeviceMap",
    "LogFrequencies",
    "MethodSettings",
    "ModelConfig",
    "OnlineScores",
    "OnlineSetting",
    "OutputConfig",
    "RunConfig",
    "Scores",
    "ScoringConfig",
    "check_before_loading",
    "output_columns",
    "score_file",
    "windows_path",
    *SETTINGS_CLASSES,
]
