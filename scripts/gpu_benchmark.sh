#!/usr/bin/env bash
# Reproduces the GPU benchmark tables in docs/results.md (documented in docs/jax-and-gpus.md): the
# mixed-precision benchmark on a machine with JAX and CUDA but no TensorFlow (e.g. Python 3.12, jax[cuda],
# tensorboard, matplotlib, Pillow, absl-py, h5py, numpy, rich, ml-dtypes; no tensorflow, keras, namex or
# optree).
#
#   scripts/gpu_benchmark.sh download   # here, with PyPI: the wheels that machine lacks, into .whl/
#   scripts/gpu_benchmark.sh            # there: install them into /tmp/site, check, time, merge
#
# download fetches the wheels (scripts/gpu_env.sh says which, and how); scripts/gpu_quality.sh, the
# quality comparison for the same machine, installs the same ones.
#
# The default mode times, on JAX with XLA, one process per configuration (python -m acgan.benchmark
# --backends jax), in small phases (a phase cut short by the budget loses only its own rows), each
# started only while its estimated time fits the budget (ACGAN_GPU_BUDGET_S):
#   1. float32, mixed_float16, mixed_bfloat16 at each of ACGAN_GPU_BATCHES (256, 2048), a phase per
#      batch (float32 at JAX's default matmul precision: TF32 on a GPU that has it); the first also
#      times the trainer's own loop against the bare step (float32: the benchmark's trainer overhead)
#   2. float32 at the same batches with JAX_DEFAULT_MATMUL_PRECISION=highest (full float32 matmuls)
#   3. the three policies at batch 4096 (an out-of-memory configuration is a row saying "oom")
#   4. on a machine with several GPUs: float32 and mixed_float16 over all of them (--strategy mirrored,
#      a jax.sharding mesh), at the first batch times the GPU count (each GPU's share as in phase 1)
# then merges the phases that finished into one benchmark.json / .md / .csv and figures
# (python -m acgan.benchmark_merge) in an output folder given by $OUT when it is set, else in
# outputs/gpu-benchmark-<time>/. Each phase's own report and worker logs are kept beside it, in phases/
# (packed as one archive, phases.tgz, when $OUT is set),
# with each configuration's profile (--profile: profile.md, profile.json and the step's hlo.txt; the
# traces themselves are left out, being large) unless ACGAN_GPU_PROFILE=0.
#
# Environment overrides (defaults in brackets), e.g. to try it on a CPU in two minutes:
#   ACGAN_GPU_BATCHES [256,2048]  ACGAN_GPU_BIG_BATCH [4096; empty: no phase 3]  ACGAN_GPU_STEPS [100]
#   ACGAN_GPU_REPEATS [3]  ACGAN_GPU_WARMUP [5]  ACGAN_GPU_WIDTH [1.0]  ACGAN_GPU_OVERHEAD [1]  ACGAN_GPU_PROFILE [1]
#   ACGAN_GPU_BUDGET_S [420: seconds from start after which no phase starts or runs on]
#   ACGAN_GPU_CONFIG_S [40: seconds a configuration is assumed to take until finished phases measure it]
#   ACGAN_GPU_PRICE [none: USD per hour, as --price_per_hour, over the shipped price table]
#   ACGAN_GPU_PYTHON [python3]  ACGAN_GPU_WHEELS [.whl]  ACGAN_GPU_SITE [/tmp/site]
#   ACGAN_GPU_PYTHON_VERSION [3.12: download mode only, the Python the wheels are for]
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/gpu_env.sh   # PY, WHEELS, SITE; gpu_download, gpu_check_wheels, gpu_install

if [ "${1:-}" = "download" ]; then
    gpu_download
    exit 0
elif [ -n "${1:-}" ]; then
    echo "error: unknown mode '$1': give no argument (run the benchmark) or 'download'" >&2
    exit 2
fi

STARTED=$SECONDS
BATCHES=${ACGAN_GPU_BATCHES:-256,2048}
BIG_BATCH=${ACGAN_GPU_BIG_BATCH-4096}
BUDGET=${ACGAN_GPU_BUDGET_S:-420}
PER_CONFIG=${ACGAN_GPU_CONFIG_S:-40}
gpu_check_wheels
STAMP=$(date +%Y%m%d-%H%M%S)
DEST=${OUT:-outputs/gpu-benchmark-$STAMP}
WORK=$(mktemp -d /tmp/acgan-gpu-XXXXXX)   # the phases' full folders (the trainer's checkpoints are big)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$DEST/phases"

# -- install ------------------------------------------------------------------------------------------
gpu_install
unset JAX_DEFAULT_MATMUL_PRECISION   # phase 2 sets it; every other phase times JAX's default
echo "installed in $((SECONDS - STARTED)) s"

# -- phases -------------------------------------------------------------------------------------------
COMMON=(--backends jax --synthetic --jit on --steps "${ACGAN_GPU_STEPS:-100}" --repeats "${ACGAN_GPU_REPEATS:-3}"
        --warmup "${ACGAN_GPU_WARMUP:-5}" --width "${ACGAN_GPU_WIDTH:-1.0}")
[ -n "${ACGAN_GPU_PRICE:-}" ] && COMMON+=(--price_per_hour "$ACGAN_GPU_PRICE")
DONE=()
SPENT=0 CONFIGS=0   # seconds and configurations (probe workers included) of the finished phases

count() { local IFS=,; set -- $1; echo $#; }

phase() {  # phase NAME CONFIGURATIONS [VAR=VALUE ...] -- BENCHMARK FLAGS...
    local name=$1 configurations=$2; shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local elapsed=$((SECONDS - STARTED))
    local estimate=$(((configurations + 1) * PER_CONFIG))   # + 1: the probe worker's start-up
    if [ $((elapsed + estimate)) -gt "$BUDGET" ]; then
        echo "phase $name skipped: ${elapsed} s gone, about ${estimate} s needed, budget ${BUDGET} s"
        return 0
    fi
    echo "phase $name: $configurations configurations (about ${estimate} s) ${envs[*]}"
    local tick=$SECONDS status=0 profile=()
    [ "${ACGAN_GPU_PROFILE:-1}" = 1 ] && profile=(--profile "$WORK/profiles-$name")
    # timeout signals the whole process group: the sweep and its worker.
    env "${envs[@]}" timeout $((BUDGET - elapsed)) "$PY" -m acgan.benchmark "${COMMON[@]}" "$@" \
        --output_dir "$WORK/$name" "${profile[@]}" > "$DEST/phases/$name.out" 2>&1 || status=$?
    tail -n 1 "$DEST/phases/$name.out"
    if [ "$status" -eq 0 ] && [ -f "$WORK/$name/benchmark.json" ]; then
        DONE+=("$WORK/$name/benchmark.json")
        mkdir -p "$DEST/phases/$name"
        cp -r "$WORK/$name"/benchmark.* "$WORK/$name"/*.png "$WORK/$name/logs" "$DEST/phases/$name/"
        if [ -d "$WORK/profiles-$name" ]; then   # the summaries and HLO, not the traces
            mkdir -p "$DEST/phases/$name/profiles"
            tar cf - -C "$WORK/profiles-$name" --exclude=plugins . | tar xf - -C "$DEST/phases/$name/profiles"
        fi
        for report in "$WORK/$name"/overhead-trainer*/report.*; do
            [ -f "$report" ] && cp "$report" "$DEST/phases/$name/"
        done
        SPENT=$((SPENT + SECONDS - tick)) CONFIGS=$((CONFIGS + configurations + 1))
        PER_CONFIG=$(( (SPENT + CONFIGS - 1) / CONFIGS ))   # measured: seconds per configuration
        echo "phase $name done in $((SECONDS - tick)) s"
    else
        echo "phase $name did not finish (status $status): see $DEST/phases/$name.out"
    fi
}

if [ "${ACGAN_GPU_OVERHEAD:-1}" = 1 ]; then   # one more process: the loop (the bare step is timed anyway)
    OVERHEAD=(--overhead --overhead_batch "${BATCHES%%,*}") EXTRA=1
else
    OVERHEAD=(--no-overhead) EXTRA=0
fi
for batch in ${BATCHES//,/ }; do
    phase 1-policies-b"$batch" $((3 + EXTRA)) -- --policies float32,mixed_float16,mixed_bfloat16 \
        --batches "$batch" "${OVERHEAD[@]}"
    OVERHEAD=(--no-overhead) EXTRA=0
done
phase 2-float32-highest "$(count "$BATCHES")" JAX_DEFAULT_MATMUL_PRECISION=highest -- --policies float32 \
    --batches "$BATCHES" --no-overhead
if [ -n "$BIG_BATCH" ]; then
    phase 3-batch-"$BIG_BATCH" 3 -- --policies float32,mixed_float16,mixed_bfloat16 --batches "$BIG_BATCH" --no-overhead
fi
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${GPUS:-0}" -gt 1 ]; then   # the step over every GPU (a jax.sharding mesh): its own " xN" rows
    phase 4-mirrored-x"$GPUS" 2 -- --strategy mirrored --policies float32,mixed_float16 \
        --batches "$((${BATCHES%%,*} * GPUS))" --no-overhead
fi

# -- merge --------------------------------------------------------------------------------------------
if [ ${#DONE[@]} -eq 0 ]; then
    echo "error: no phase finished; see $DEST/phases/" >&2
    exit 1
fi
"$PY" -m acgan.benchmark_merge "${DONE[@]}" --output_dir "$WORK/merged" > "$DEST/phases/merge.out" 2>&1 \
    || { cat "$DEST/phases/merge.out" >&2; exit 1; }   # in phases/, packed with it
cp "$WORK/merged"/benchmark.* "$WORK/merged"/*.png "$DEST/"
if [ -n "${OUT:-}" ]; then
    # In an output folder given by $OUT the phases are packed as one archive.
    tar czf "$DEST/phases.tgz" -C "$DEST" phases && rm -rf "$DEST/phases"
fi
cat "$DEST/benchmark.md"
echo "gpu benchmark: ${#DONE[@]} phase(s) merged into $DEST in $((SECONDS - STARTED)) s"
