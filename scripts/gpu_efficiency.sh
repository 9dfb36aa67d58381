#!/usr/bin/env bash
# Where a GPU step's time goes, and what XLA's settings change: the benchmark at one batch size with a
# profile of every configuration, once per XLA_FLAGS variant, merged into one page (FLOPs, TFLOP/s, share of
# peak, device time by group). Feeds docs/jax-and-gpus.md ("GPU efficiency") and docs/results.md.
#
# For a machine with JAX and CUDA but no TensorFlow (scripts/gpu_env.sh says what it installs):
#   scripts/gpu_benchmark.sh download   # with PyPI: the wheels that machine lacks, into .whl/
#   scripts/gpu_efficiency.sh           # there: install them, then time and profile each variant
#
# Writes benchmark.md / .json / .csv and the figures to $OUT when set (an output folder), else to
# outputs/gpu-efficiency-<time>/, and profiles.tgz: each configuration's profile.md, profile.json and the
# compiled step's hlo.txt (the traces too with ACGAN_GPU_TRACES=1; they are large).
#
# Environment (defaults in brackets):
#   ACGAN_GPU_VARIANTS  [see VARIANTS below] variants separated by ';', each NAME|VAR=VALUE ...|POLICIES
#   ACGAN_GPU_BATCH [2048]  ACGAN_GPU_STEPS [50]  ACGAN_GPU_REPEATS [3]  ACGAN_GPU_WARMUP [5]
#   ACGAN_GPU_WIDTH [1.0]  ACGAN_GPU_BUDGET_S [420: no variant starts after this many seconds]
#   ACGAN_GPU_CONFIG_S [35: seconds a configuration is assumed to take]  ACGAN_GPU_TRACES [0]
#   ACGAN_GPU_PYTHON [python3]  ACGAN_GPU_WHEELS [.whl]  ACGAN_GPU_SITE [/tmp/site]  ACGAN_GPU_INSTALL [1]
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/gpu_env.sh   # PY, WHEELS, SITE; gpu_check_wheels, gpu_install

# The baseline first; then float32 convolutions asked for in TF32 explicitly, NHWC layouts for float32
# convolutions too, XLA's own GEMMs off (cuBLAS for every matrix product), and command buffers off (one
# launch per kernel: what launch overhead costs).
VARIANTS=${ACGAN_GPU_VARIANTS:-"default||float32,mixed_float16,mixed_bfloat16;\
tf32|JAX_DEFAULT_MATMUL_PRECISION=tensorfloat32|float32;\
nhwc|XLA_FLAGS=--xla_gpu_force_conv_nhwc|float32,mixed_float16;\
no-triton-gemm|XLA_FLAGS=--xla_gpu_enable_triton_gemm=false|float32,mixed_float16;\
no-command-buffer|XLA_FLAGS=--xla_gpu_enable_command_buffer=|mixed_float16"}
BATCH=${ACGAN_GPU_BATCH:-2048}
BUDGET=${ACGAN_GPU_BUDGET_S:-420}
PER_CONFIG=${ACGAN_GPU_CONFIG_S:-35}
STARTED=$SECONDS
DEST=${OUT:-outputs/gpu-efficiency-$(date +%Y%m%d-%H%M%S)}
WORK=$(mktemp -d /tmp/acgan-efficiency-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$DEST"

if [ "${ACGAN_GPU_INSTALL:-1}" = 1 ]; then
    gpu_check_wheels
    gpu_install
else   # a machine with Keras already (e.g. trying the script on a CPU in the project's virtualenv)
    export KERAS_BACKEND=jax
fi
DEVICE=$("$PY" -c "import jax; print(jax.devices()[0].device_kind)")
echo "device: $DEVICE; installed in $((SECONDS - STARTED)) s"

DONE=()
IFS=';' read -r -a SPECS <<< "$VARIANTS"
for spec in "${SPECS[@]}"; do
    IFS='|' read -r name settings policies <<< "$spec"
    read -r -a assignments <<< "$settings"
    count=$(awk -F, '{print NF}' <<< "$policies")
    elapsed=$((SECONDS - STARTED))
    if [ $((elapsed + (count + 1) * PER_CONFIG)) -gt "$BUDGET" ]; then
        echo "variant $name skipped: ${elapsed} s gone, budget ${BUDGET} s"
        continue
    fi
    echo "variant $name: ${settings:-no settings}; $policies"
    status=0
    env "${assignments[@]}" timeout $((BUDGET + 120 - elapsed)) "$PY" -m acgan.benchmark \
        --backends jax --synthetic --jit on --policies "$policies" --batches "$BATCH" \
        --steps "${ACGAN_GPU_STEPS:-50}" --repeats "${ACGAN_GPU_REPEATS:-3}" --warmup "${ACGAN_GPU_WARMUP:-5}" \
        --width "${ACGAN_GPU_WIDTH:-1.0}" --no-overhead --device_name "$DEVICE, ${settings:-default}" \
        --profile "$WORK/$name/profiles" --output_dir "$WORK/$name/bench" > "$WORK/$name.out" 2>&1 || status=$?
    grep -E "^\[[0-9]+/[0-9]+\]" "$WORK/$name.out" || tail -n 5 "$WORK/$name.out"
    if [ "$status" -eq 0 ] && [ -f "$WORK/$name/bench/benchmark.json" ]; then
        DONE+=("$WORK/$name/bench/benchmark.json")
    else
        echo "variant $name did not finish (status $status)"
    fi
    cp "$WORK/$name.out" "$WORK/$name/" 2>/dev/null || true
done
[ ${#DONE[@]} -gt 0 ] || { echo "error: no variant finished" >&2; exit 1; }

"$PY" -m acgan.benchmark_merge "${DONE[@]}" --output_dir "$WORK/merged" > "$WORK/merge.out" 2>&1 \
    || { cat "$WORK/merge.out" >&2; exit 1; }
cp "$WORK/merged"/benchmark.* "$WORK/merged"/*.png "$DEST/"
# One archive: the summaries and HLO of every profile (and the traces when asked for).
excludes=()
[ "${ACGAN_GPU_TRACES:-0}" = 1 ] || excludes=(--exclude=plugins)
tar czf "$DEST/profiles.tgz" -C "$WORK" "${excludes[@]}" --exclude=merged --exclude='*.out' .
sed -n '/^## Results/,$p' "$DEST/benchmark.md"
echo "gpu efficiency: ${#DONE[@]} variant(s) merged into $DEST in $((SECONDS - STARTED)) s"
