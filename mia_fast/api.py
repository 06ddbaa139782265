"""The Python API, one front door: ``Detector`` scores texts with every requested method, running each pass the
methods need once; ``score_file`` scores a dataset into a file block by block, resumably; a run is described by
the typed configs of ``mia_fast.scoring.config`` and the methods' own settings classes.

>>> from mia_fast.api import Detector, RecallSettings
>>> detector = Detector("HuggingFaceTB/SmolLM2-135M", [RecallSettings(prefix_nonmembers=("a known non-member",))])
>>> detector.score(["a text"], methods=["loss", "mink", "recall"], k=[0.2])["recall"]
"""

from __future__ import annotations

from mia_fast.methods.camia import CamiaSettings
from mia_fast.methods.conrecall import ConRecallSettings
from mia_fast.methods.dcpdd import DcpddSettings, LogFrequencies
from mia_fast.methods.fsd import FsdSettings
from mia_fast.methods.gapk import GapkSettings
from mia_fast.methods.gradnorm import GradnormSettings
from mia_fast.methods.neighbor import NeighborSettings
from mia_fast.methods.ngram_coverage import NgramCoverageSettings
from mia_fast.methods.online import OnlineSetting
from mia_fast.methods.pac import PacSettings
from mia_fast.methods.probe import ProbeSettings
from mia_fast.methods.recall import RecallSettings
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS
from mia_fast.methods.samia import SamiaSettings
from mia_fast.methods.settings import MethodSettings
from mia_fast.methods.surp import SurpSettings
from mia_fast.methods.wbc import WbcSettings
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
