#!/usr/bin/env bash
# Reproduces the trainer-overhead table in docs/results.md (see docs/benchmark.md#trainer-overhead): the
# full training loop against the bare step, median against median, at a GPU-like step time (width 0.25,
# batch 16) and at the default width (batch 64).
# Usage: scripts/overhead_runs.sh [OUTPUT_ROOT]   (from the repository root)
set -euo pipefail
root=${1:-outputs/overhead-runs}
python=${PYTHON:-.venv/bin/python}
common=(--steps 20 --warmup 5 --repeats 3 --jit on --data_dir data)
run() {  # name, then benchmark flags
  local name=$1; shift
  "$python" -m acgan.benchmark "${common[@]}" "$@" --output_dir "$root/$name" > "$root/$name.log" 2>&1
  "$python" - "$root/$name/benchmark.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))["runs"][0]["overhead"]
print(f"{o['policy']:>14} b{o['batch']:<4} loop {o['trainer_time_per_batch_ms']:8.2f} ms  "
      f"bare {o['bare_time_per_batch_ms']:8.2f} ms  ratio {o['ratio']:.3f}")
PY
}
mkdir -p "$root"
run f32-w025-b16 --policies float32 --batches 16 --overhead_batch 16 --width 0.25
run f16-w025-b16 --policies mixed_float16 --batches 16 --overhead_batch 16 --width 0.25
run f32-w1-b64 --policies float32 --batches 64 --overhead_batch 64
