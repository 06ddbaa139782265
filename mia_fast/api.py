"""The Python API, one front door: ``Detector`` scores texts with every requested method, running each pass the
methods need once; ``score_file`` scores a dataset into a file block by block, resumably; a run is described by
the typed configs of ``mia_fast.scoring.config`` and the methods' own settings classes.

>>> from mia_fast.api import Detector, RecallSettings
>>> detector = Detector("HuggingFaceTB/SmolLM2-135M", [RecallSettings(prefix_nonmembers=("a known non-member",))])
>>> detector.score(["a text"], methods=["loss", "mink", "recall"], k=[0.2])["recall"]
"""

from __future__ import annotations

from mia_fast.methods import (
    DEFAULT_KS,
    DEFAULT_METHODS,
    CamiaSettings,
    ConRecallSettings,
    DcpddSettings,
    FsdSettings,
    GapkSettings,
    GradnormSettings,
    LogFrequencies,
    MethodSettings,
    NeighborSettings,
    NgramCoverageSettings,
    PacSettings,
    ProbeSettings,
    RecallSettings,
    SamiaSettings,
    SurpSettings,
    WbcSettings,
)
from mia_fast.methods.online import OnlineSetting
from mia_fast.scoring.config import (
    DEFAULT_BLOCK_ROWS,
    ComputeConfig,
    ModelConfig,
    OutputConfig,
    RunConfig,
    ScoringConfig,
)
from mia_fast.scoring.detector import UNSCORABLE_WARNING, Detector, OnlineScores, Scores
from mia_fast.scoring.runner import ONLINE_COLUMNS, check_before_loading, output_columns, score_file, windows_path

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "ONLINE_COLUMNS",
    "UNSCORABLE_WARNING",
    "CamiaSettings",
    "ComputeConfig",
    "ConRecallSettings",
    "DcpddSettings",
    "Detector",
    "FsdSettings",
    "GapkSettings",
    "GradnormSettings",
    "LogFrequencies",
    "MethodSettings",
    "ModelConfig",
    "NeighborSettings",
    "NgramCoverageSettings",
    "OnlineScores",
    "OnlineSetting",
    "OutputConfig",
    "PacSettings",
    "ProbeSettings",
    "RecallSettings",
    "RunConfig",
    "SamiaSettings",
    "Scores",
    "ScoringConfig",
    "SurpSettings",
    "WbcSettings",
    "check_before_loading",
    "output_columns",
    "score_file",
    "windows_path",
]
