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
#                       with an optional fourth field of benchmark flags (|--arch acgan_cifar)
#   ACGAN_GPU_BATCH [2048]  ACGAN_GPU_STEPS [50]  ACGAN_GPU_REPEATS [3]  ACGAN_GPU_WARMUP [5]
#   ACGAN_GPU_WIDTH [1.0]  ACGAN_GPU_BUDGET_S [480: a variant starts only if its estimate fits in it]
#   ACGAN_GPU_CONFIG_S [35: seconds a configuration is assumed to take]  ACGAN_GPU_TRACES [0]
#   ACGAN_GPU_PYTHON [python3]  ACGAN_GPU_WHEELS [.whl]  ACGAN_GPU_SITE [/tmp/site]  ACGAN_GPU_INSTALL [1]
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/gpu_env.sh   # PY, WHEELS, SITE; gpu_check_wheels, gpu_install

# The baseline first; then acgan's two JAX formulations that target the mixed step's largest costs, each
# alone and together (docs/jax-and-gpus.md#where-the-mixed-steps-time-goes): G's transposed convolutions'
# forward pass as the strided convolution's transpose (which cuDNN runs as a backward-input convolution),
# and batch norm's statistics in one pass with a hand-written backward pass; last, the colour preset
# (acgan_cifar, 32x32x3) under the three policies. XLA's own settings (TF32 explicitly, NHWC convolutions,
# no command buffers) were measured before and changed nothing (docs/results.md); to try one again, or
# XLA_FLAGS=--xla_gpu_enable_triton_gemm=false (no result yet), name it in ACGAN_GPU_VARIANTS.
VARIANTS=${ACGAN_GPU_VARIANTS:-"default||float32,mixed_float16,mixed_bfloat16;\
conv-forward||float32,mixed_float16|--jax_conv_transpose linear_transpose;\
fused-bn||mixed_float16|--jax_batch_norm fused;\
both||mixed_float16|--jax_conv_transpose linear_transpose --jax_batch_norm fused;\
colour||float32,mixed_float16,mixed_bfloat16|--arch acgan_cifar"}
BATCH=${ACGAN_GPU_BATCH:-2048}
BUDGET=${ACGAN_GPU_BUDGET_S:-480}
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
    IFS='|' read -r name settings policies flags <<< "$spec"
    read -r -a assignments <<< "$settings"
    read -r -a extra <<< "$flags"
    count=$(awk -F, '{print NF}' <<< "$policies")
    elapsed=$((SECONDS - STARTED))
    if [ $((elapsed + (count + 1) * PER_CONFIG)) -gt "$BUDGET" ]; then
        echo "variant $name skipped: ${elapsed} s gone, budget ${BUDGET} s"
        continue
    fi
    echo "variant $name: ${settings:-no settings}; $policies${flags:+; $flags}"
    # The rows' device: the GPU and what the variant changed ("default" for the baseline alone).
    label="$settings${settings:+${flags:+, }}$flags"
    status=0
    env "${assignments[@]}" timeout $((BUDGET + 120 - elapsed)) "$PY" -m acgan.benchmark \
        --backends jax --synthetic --jit on --policies "$policies" --batches "$BATCH" \
        --steps "${ACGAN_GPU_STEPS:-50}" --repeats "${ACGAN_GPU_REPEATS:-3}" --warmup "${ACGAN_GPU_WARMUP:-5}" \
        --width "${ACGAN_GPU_WIDTH:-1.0}" --no-overhead --device_name "$DEVICE, ${label:-default}" \
        --profile "$WORK/$name/profiles" --output_dir "$WORK/$name/bench" "${extra[@]}" > "$WORK/$name.out" 2>&1 \
        || status=$?
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
