#!/usr/bin/env bash
# Scoring speed of two checkouts, interleaved round by round on this machine: benchmarks/cpu_score.py (the built-in
# model, Detector.score and score_file) run from BEFORE's checkout with BEFORE's Python, then from this one, ROUNDS
# times; writes results/before-after-<cores>core.json with every round, the medians, the ratios and the load.
#
#   bash benchmarks/before_after.sh BEFORE_CHECKOUT BEFORE_PYTHON [ROUNDS]
#
# BEFORE_PYTHON imports BEFORE_CHECKOUT's mia_fast from PYTHONPATH: an editable install's import hook (which sends
# `import mia_fast` to its own checkout whatever PYTHONPATH says) is dropped for that side, so BEFORE_CHECKOUT needs
# its compiled core in its package (benchmarks/peer_vllm.py's importable_checkout builds it) and its Triton kernels
# linked there as a wheel installs them (`ln -s ../kernels BEFORE_CHECKOUT/mia_fast/kernels`). Each round logs the
# mia_fast it imported.
set -euo pipefail
before_dir=$(cd "$1" && pwd); before_python=$2; rounds=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
contenders=mia_fast_score,score_file_overlap
for round in $(seq "$rounds"); do
  for side in before after; do
    if [ "$side" = before ]; then dir=$before_dir; python=$before_python; else dir=$here; python=$here/.venv/bin/python; fi
    uptime >> "$scratch/load-$side.txt"
    hook=""
    [ "$side" = before ] && hook="sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'ScikitBuildRedirectingFinder']; "
    (cd "$dir/benchmarks" && PYTHONPATH="$dir" "$python" -c "import runpy, sys; ${hook}import mia_fast; \
print('$side imports', mia_fast.__file__, file=sys.stderr); sys.argv = sys.argv[1:]; \
runpy.run_path(sys.argv[0], run_name='__main__')" cpu_score.py --models builtin --rounds 1 \
      --contenders "$contenders" --name "$scratch/$side-$round")
  done
done
"$here/.venv/bin/python" - "$scratch" "$rounds" "$before_dir" <<'PY'
import json, os, statistics, subprocess, sys
from pathlib import Path

scratch, rounds, before_dir = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
here = Path.cwd()
result = {"rounds": rounds, "before": {}, "after": {}}
for side in ("before", "after"):
    runs = [json.loads((scratch / f"{side}-{r}.json").read_text()) for r in range(1, rounds + 1)]
    result["machine"] = runs[0].get("machine")
    seconds = {c: [run["models"]["builtin"]["seconds"][c][0] for run in runs] for c in ("mia_fast_score", "score_file_overlap")}
    checkout = before_dir if side == "before" else str(here)
    commit = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result[side] = {"commit": commit, "seconds": seconds, "median_seconds": {c: statistics.median(v) for c, v in seconds.items()},
                    "load": (scratch / f"load-{side}.txt").read_text().splitlines()}
result["after_over_before"] = {c: result["after"]["median_seconds"][c] / result["before"]["median_seconds"][c]
                               for c in result["after"]["median_seconds"]}
out = here / "benchmarks" / "results" / f"before-after-{os.cpu_count()}core.json"
out.write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result["after_over_before"]), "->", out)
PY
