"""Every case of ``scripts/bad_inputs.py`` on a tiny model: each bad input refused in one clear line (or, for a
doubtful one, accepted with one warning line), nothing that was there changed, no traceback."""

from collections import Counter

from helpers import script


def test_every_bad_input_is_refused_in_one_clear_line(tiny_model_dir, tmp_path):
    bad_inputs = script("bad_inputs")
    results = bad_inputs.run_cases(str(tiny_model_dir), tmp_path)
    wrong = [
        f"{r['outcome']}: {r['case']}: {r['stderr']}" for r in results if r["outcome"] not in ("refused", "accepted")
    ]
    assert not wrong, "\n".join(wrong)
    counts = Counter(r["outcome"] for r in results)
    assert counts["refused"] >= 100 and counts["accepted"] >= 1
