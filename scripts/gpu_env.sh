# Sourced (not run) by scripts/gpu_benchmark.sh and scripts/gpu_quality.sh, from the checkout's root
# (documented in docs/jax-and-gpus.md): the wheels a machine with JAX and CUDA but no TensorFlow lacks
# (e.g. Python 3.12, jax[cuda], tensorboard, matplotlib, Pillow, absl-py, h5py, numpy, rich, ml-dtypes;
# no tensorflow, keras, namex or optree), fetched where PyPI is reachable and installed there.
#   gpu_download   with PyPI: `pip download --no-deps` for CPython $ACGAN_GPU_PYTHON_VERSION (3.12) on
#                  manylinux x86-64, the versions constraints.txt pins of keras and what keras needs that the
#                  machine lacks: namex, optree, packaging (keras) and typing_extensions (optree), into
#                  $WHEELS; adds /$WHEELS/ to .git/info/exclude unless git ignores it already
#   gpu_install    there: checks the wheels are all present, installs them into $SITE, puts $SITE and the
#                  checkout on PYTHONPATH, selects Keras's JAX backend, prints Keras's and JAX's versions
#                  and devices
# Environment: ACGAN_GPU_PYTHON [python3]  ACGAN_GPU_WHEELS [.whl]  ACGAN_GPU_SITE [/tmp/site]
PY=${ACGAN_GPU_PYTHON:-python3}
WHEELS=${ACGAN_GPU_WHEELS:-.whl}
SITE=${ACGAN_GPU_SITE:-/tmp/site}
# keras and what its wheels require beyond the machine's packages (see above), pinned in constraints.txt.
PACKAGES=(keras namex optree packaging typing_extensions)

pin() {  # the constraints.txt line of one package: "keras==3.15.1"
    local line
    line=$(grep -i -E "^$1==" constraints.txt | head -1)
    [ -n "$line" ] || { echo "error: constraints.txt pins no version of $1" >&2; exit 2; }
    echo "$line"
}

gpu_download() {
    local pins=() p w exclude
    for p in "${PACKAGES[@]}"; do pins+=("$(pin "$p")"); done
    rm -rf "$WHEELS"
    "$PY" -m pip download -q --no-deps --only-binary=:all: \
        --python-version "${ACGAN_GPU_PYTHON_VERSION:-3.12}" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$WHEELS" "${pins[@]}"
    # Keep the wheels out of git (in a worktree too: --git-path finds the shared exclude file).
    if [ "${WHEELS#/}" = "$WHEELS" ] && exclude=$(git rev-parse --git-path info/exclude 2>/dev/null) \
        && ! git check-ignore -q "$WHEELS"; then
        mkdir -p "$(dirname "$exclude")" && echo "/$WHEELS/" >> "$exclude"
    fi
    ls -l "$WHEELS"
    for w in "$WHEELS"/*.whl; do   # what each needs; the machine must have every name not downloaded
        echo "$(basename "$w"): $(unzip -p "$w" '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' \
            | sed 's/^Requires-Dist: //' | tr '\n' ' ')"
    done
}

gpu_check_wheels() {
    local p
    for p in "${PACKAGES[@]}"; do
        ls "$WHEELS"/"${p}"-*.whl >/dev/null 2>&1 || { echo "error: no $p wheel in $WHEELS/: run" \
            "scripts/gpu_benchmark.sh download first (with PyPI), and carry $WHEELS" >&2; exit 2; }
    done
}

gpu_install() {
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=2
    "$PY" - <<'PYTHON'
import jax
import keras

print(f"keras {keras.__version__} ({keras.__file__}) on {keras.backend.backend()}, jax {jax.__version__}, "
      f"devices: {jax.devices()}")
print(f"JAX default matmul precision: {jax.config.jax_default_matmul_precision or 'default'}")
PYTHON
}
