"""Every case of ``scripts/bad_inputs.py`` on a tiny model: each bad input refused in one clear line (or, for a
doubtful one, accepted with one warning line), nothing that was there changed, no traceback."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bad_inputs.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bad_inputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_bad_input_is_refused_in_one_clear_line(tiny_model_dir, tmp_path):
    bad_inputs = load_script()
    results = bad_inputs.run_cases(str(tiny_model_dir), tmp_path)
    wrong = [
        f"{r['outcome']}: {r['case']}: {r['stderr']}" for r in results if r["outcome"] not in ("refused", "accepted")
    ]
    assert not wrong, "\n".join(wrong)
    counts = Counter(r["outcome"] for r in results)
    assert counts["refused"] >= 100 and counts["accepted"] >= 1
