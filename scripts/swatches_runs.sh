#!/usr/bin/env bash
# Reproduces the README's colour table: on swatches, the reference model and the acgan_cifar preset under
# each policy, every run given the same wall-clock budget, two at a time (a 2-core machine then gives each
# run about one core, so MINUTES of wall time is about MINUTES of CPU time); then each run judged on
# 10,000 samples (acgan.evaluate) and one table printed, with the CPU time /usr/bin/time measured.
# Usage: [MINUTES=20] [WIDTH=0.5] [SEED=0] [JUDGES=3] scripts/swatches_runs.sh   (from the repository root, after `make setup`)
set -euo pipefail
minutes=${MINUTES:-20}
width=${WIDTH:-0.5}
seed=${SEED:-0}
judges=${JUDGES:-3}  # each run judged by the judges of seeds 0..JUDGES-1 (the table's numbers are judge 0's)
python=${PYTHON:-.venv/bin/python}
root=outputs/swatches-runs-$(date +%Y%m%d-%H%M%S)
mkdir -p "$root"
"$python" -m acgan.train --dataset swatches --steps 1 --output_dir "$root/.warm" > /dev/null  # data and judge cache
"$python" -m acgan.evaluate --run "$root/.warm" --num_samples 100 > /dev/null && rm -rf "$root/.warm"
train() {  # NAME ARGS...: one run, its CPU time beside it
  local name=$1; shift
  /usr/bin/time -f "%U %S" -o "$root/$name.cpu" "$python" -m acgan.train --dataset swatches --minutes "$minutes" \
    --eval_every 500 --seed "$seed" --output_dir "$root/$name" "$@" > "$root/$name.log" 2>&1
}
train acgan_cifar-float32 --arch acgan_cifar --width "$width" --policy float32 &
train acgan_cifar-mixed_float16 --arch acgan_cifar --width "$width" --policy mixed_float16 &
wait
train acgan_cifar-mixed_bfloat16 --arch acgan_cifar --width "$width" --policy mixed_bfloat16 &
train reference-float32 --arch reference --policy float32 &
wait
for run in "$root"/*/; do "$python" -m acgan.evaluate --run "$run" --judges "$judges" > "${run%/}.evaluate.log"; done
"$python" - "$root" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
runs = [root / n for n in ("reference-float32", "acgan_cifar-float32", "acgan_cifar-mixed_float16",
                           "acgan_cifar-mixed_bfloat16")]
reports = [json.loads((r / "report.json").read_text()) for r in runs]
quality = [json.loads((r / "quality.json").read_text()) for r in runs]
cpu = [sum(map(float, (root / f"{r.name}.cpu").read_text().split()[-2:])) / 60 for r in runs]
ref = quality[1]["real_reference"]
base = quality[1]
def rel(q, key):
    return "" if q is base or q is quality[0] else f" ({q[key] / base[key] - 1:+.0%})"
print("| | " + " | ".join(r.name.replace("-", ", ") for r in runs) + " |")
print("|---" * (len(runs) + 1) + "|")
print("| steps reached | " + " | ".join(f"{r['steps']:,}" for r in reports) + " |")
print("| CPU time (minutes) | " + " | ".join(f"{c:.1f}" for c in cpu) + " |")
print(f"| conditional accuracy (judge; real test images {base['real_conditional_accuracy']:.1%}) | "
      + " | ".join(f"{q['conditional_accuracy']:.1%}" for q in quality) + " |")
print(f"| Fréchet distance (real vs real {ref['frechet_distance']:.2f}) | "
      + " | ".join(f"{q['frechet_distance']:.1f}{rel(q, 'frechet_distance')}" for q in quality) + " |")
print(f"| mean per-class Fréchet distance (real vs real {ref['frechet_distance_class_mean']:.2f}) | "
      + " | ".join(f"{q['frechet_distance_class_mean']:.1f}{rel(q, 'frechet_distance_class_mean')}" for q in quality) + " |")
def spread(q, key, fmt):
    a = q.get("across_judges", {}).get(key)
    return f"{format(a['min'], fmt)}-{format(a['max'], fmt)}" if a else "n/a"
n = max(len(q.get("across_judges", {}).get("judges", [])) for q in quality)
print(f"| accuracy / distance / per-class distance across {n} judges (min-max) | " + " | ".join(f"{spread(q, 'conditional_accuracy', '.1%')} / {spread(q, 'frechet_distance', '.1f')}"
                                         f" / {spread(q, 'frechet_distance_class_mean', '.1f')}" for q in quality) + " |")
print("| classifier score (1 to 10) | " + " | ".join(f"{q['classifier_score']:.2f}" for q in quality) + " |")
print("| Q's accuracy on real test images | " + " | ".join(f"{q['q_accuracy_real']:.1%}" for q in quality) + " |")
for r, q in zip(runs, quality):
    print(r.name, "per class:", {k: round(v) for k, v in q["frechet_distance_per_class"].items()},
          {k: f"{v:.0%}" for k, v in q["conditional_accuracy_per_class"].items()})
PY
echo "grids: $root/*/samples/final.png"
