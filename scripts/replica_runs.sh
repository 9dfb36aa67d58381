#!/usr/bin/env bash
# Reproduces the replica table in docs/results.md ("Replicas on a 2-core AMD EPYC"; see docs/scaling.md):
# one device, two CPU replicas (synchronized batch norm and not), and two workers on localhost, same
# global batch, then their figures.
# Usage: scripts/replica_runs.sh [STEPS] [BATCH] [POLICY]   (from the repository root, after `make setup`)
set -euo pipefail
steps=${1:-100}
batch=${2:-64}
policy=${3:-float32}
python=${PYTHON:-.venv/bin/python}
root=outputs/replica-runs-$(date +%Y%m%d-%H%M%S)
common=(--steps "$steps" --batch "$batch" --policy "$policy" --sample_every "$steps")
"$python" -m acgan.train "${common[@]}" --strategy default --output_dir "$root/1-default"
"$python" -m acgan.train "${common[@]}" --devices cpu:0,cpu:1 --output_dir "$root/2-mirrored"
"$python" -m acgan.train "${common[@]}" --devices cpu:0,cpu:1 --nosync_bn --output_dir "$root/3-mirrored-nosync_bn"
ports=$("$python" -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("localhost", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r p0 p1 <<<"$ports"
for index in 1 0; do
  TF_CONFIG="{\"cluster\": {\"worker\": [\"localhost:$p0\", \"localhost:$p1\"]}, \"task\": {\"type\": \"worker\", \"index\": $index}}" \
    "$python" -m acgan.train "${common[@]}" --strategy multi_worker --output_dir "$root/4-two-workers" &
done
wait
"$python" - "$root" <<'PY'
import json, sys
from pathlib import Path
print("| run | replicas | XLA | compile | time per batch (mean / median) | samples/s (global / per replica) | final d / g / q loss |")
print("|---|---|---|---|---|---|---|")
for run in sorted(Path(sys.argv[1]).iterdir()):
    r = json.loads((run / "report.json").read_text()); t = r["timing"]; d = r["distribution"]; m = r["final_metrics"]
    print(f"| {run.name[2:]} | {d['replicas']} on {d['workers']} worker(s) | {d['xla']} | {r['compile_seconds']:.1f} s | "
          f"{t['time_per_batch_ms']:.1f} / {t['time_per_batch_median_ms']:.1f} ms | "
          f"{t['samples_per_second']:.1f} / {t['samples_per_second_per_replica']:.1f} | "
          f"{m['d_loss']:.3f} / {m['g_loss']:.3f} / {m['q_loss']:.3f} |")
PY
echo "grids: $root/*/samples/final.png"
