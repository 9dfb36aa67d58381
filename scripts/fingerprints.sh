#!/usr/bin/env bash
# The weights fingerprints of 30-step runs, both presets x float32/mixed_float16 x TensorFlow/JAX: what a
# change that must not alter training (a restructuring) is checked with. Run it at the old and the new
# commit, each from its own checkout, and compare the two files line by line (diff).
# Usage: [BACKENDS=jax] scripts/fingerprints.sh OUT.txt [OUTPUT_ROOT]   (from the repository root)
set -euo pipefail
out=$1
root=${2:-outputs/fingerprint-runs}
python=${PYTHON:-.venv/bin/python}
common=(--steps 30 --batch 16 --width 0.25 --max_per_class 50 --warmup_steps 5 --log_every 5 --sample_every 30
        --checkpoint_every 30 --data_dir data)
mkdir -p "$root"
: > "$out"
for backend in ${BACKENDS:-tensorflow jax}; do
  for arch in reference acgan_cifar; do
    dataset=doodles; [ "$arch" = acgan_cifar ] && dataset=swatches
    for policy in float32 mixed_float16; do
      name=$backend-$arch-$policy
      rm -rf "${root:?}/$name"
      "$python" -m acgan.train "${common[@]}" --backend "$backend" --arch "$arch" --dataset "$dataset" \
        --policy "$policy" --output_dir "$root/$name" > "$root/$name.log" 2>&1
      "$python" -c 'import json, sys; print(sys.argv[2], json.load(open(sys.argv[1]))["weights_fingerprint"])' \
        "$root/$name/report.json" "$name" | tee -a "$out"
    done
  done
done
