#!/usr/bin/env bash
# Reproduces the README's per-policy table: one 500-step run per policy on doodles, then their figures.
# Usage: scripts/policy_runs.sh [STEPS] [BATCH]   (run from the repository root, after `make setup`)
set -euo pipefail
steps=${1:-500}
batch=${2:-64}
python=${PYTHON:-.venv/bin/python}
root=outputs/policy-runs-$(date +%Y%m%d-%H%M%S)
for policy in float32 mixed_float16 mixed_bfloat16; do
  "$python" -m acgan.train --steps "$steps" --batch "$batch" --policy "$policy" --output_dir "$root/$policy"
done
"$python" - "$root" <<'PY'
import json, sys
from pathlib import Path
print("| policy | compile | time per batch, wall (mean / median) | bare step | wall / bare | time per 1000 samples | samples/s | peak memory |")
print("|---|---|---|---|---|---|---|---|")
for run in sorted(Path(sys.argv[1]).iterdir()):
    r = json.loads((run / "report.json").read_text()); t = r["timing"]
    print(f"| {r['policy']} | {r['compile_seconds']:.1f} s | {t['time_per_batch_ms']:.1f} / "
          f"{t['time_per_batch_median_ms']:.1f} ms | {t['bare_step_ms']:.1f} ms | {t['wall_over_bare']:.2f} | "
          f"{t['time_per_1000_samples_ms']:,.0f} ms | "
          f"{t['samples_per_second']:.1f} | {r['peak_memory_bytes'] / 2**20:,.0f} MiB |")
PY
echo "grids: $root/*/samples/final.png"
