#!/usr/bin/env bash
# Reproduces the doodles per-policy tables in docs/results.md ("Doodles per-policy runs", and the
# trainer's TensorFlow-against-JAX table): one run per policy (and per backend) on doodles, then their
# figures. Backends alternate within each policy, so a side-by-side ratio sees the same machine load.
# Usage: [BACKENDS="tensorflow jax"] scripts/policy_runs.sh [STEPS] [BATCH]
#        (run from the repository root, after `make setup`; BACKENDS defaults to tensorflow)
set -euo pipefail
steps=${1:-500}
batch=${2:-64}
backends=${BACKENDS:-tensorflow}
python=${PYTHON:-.venv/bin/python}
root=outputs/policy-runs-$(date +%Y%m%d-%H%M%S)
for policy in float32 mixed_float16 mixed_bfloat16; do
  for backend in $backends; do
    "$python" -m acgan.train --backend "$backend" --steps "$steps" --batch "$batch" --policy "$policy" \
      --output_dir "$root/$policy-$backend"
  done
done
"$python" - "$root" <<'PY'
import json, sys
from pathlib import Path
print("| policy | backend | compile | time per batch, wall (mean / median) | bare step | wall / bare | time per 1000 samples | samples/s | peak memory |")
print("|---|---|---|---|---|---|---|---|---|")
for run in sorted(Path(sys.argv[1]).iterdir()):
    r = json.loads((run / "report.json").read_text()); t = r["timing"]
    print(f"| {r['config']['policy']} | {r['config'].get('backend', 'tensorflow')} | {r['compile_seconds']:.1f} s | "
          f"{t['time_per_batch_ms']:.1f} / {t['time_per_batch_median_ms']:.1f} ms | {t['bare_step_ms']:.1f} ms | "
          f"{t['wall_over_bare']:.2f} | {t['time_per_1000_samples_ms']:,.0f} ms | "
          f"{t['samples_per_second']:.1f} | {r['peak_memory_bytes'] / 2**20:,.0f} MiB |")
PY
echo "grids: $root/*/samples/final.png"
