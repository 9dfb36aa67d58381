"""What XLA compiles the train step into, counted by instruction kind: a restructuring that must not change
the step's speed is checked by running this at the old and the new commit, each from its own checkout,
and comparing the two outputs (equal counts: the same program, whatever the machine's timing noise).

Usage (from the repository root):
    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python scripts/step_program.py float32 acgan_cifar
    PYTHONPATH=. KERAS_BACKEND=jax .venv/bin/python scripts/step_program.py mixed_float16 reference
Width 0.5, batch 64; the preset's data shape (acgan_cifar: 32x32x3, reference: 28x28x1).
"""

import collections
import re
import sys

import keras
import numpy as np

from acgan import presets
from acgan.model import networks, precision
from acgan.step.factory import build_step

BATCH, WIDTH = 64, 0.5


def main(policy, arch):
    precision.set_policy(policy)
    keras.utils.set_random_seed(0)
    preset = presets.PRESETS[arch]
    shape = (32, 32, 3) if arch == "acgan_cifar" else (28, 28, 1)
    models = networks.build_models(shape, 10, width=WIDTH, arch=preset)
    backend = keras.backend.backend()
    trainer = build_step(preset, backend, models, 10, jit=True)
    rng = np.random.default_rng(0)
    batch = (
        rng.integers(0, 256, (BATCH,) + shape, dtype=np.uint8),
        rng.integers(0, 10, BATCH).astype(np.int32),
        rng.normal(size=(BATCH, trainer.noise_dim)).astype(np.float32),
        rng.integers(0, 10, BATCH).astype(np.int32),
    )
    if backend == "jax":
        hlo = trainer.lowered_step(*batch).compile().as_text()
    else:  # the whole step is one XLA cluster on one replica
        hlo = trainer._step_function.experimental_get_compiler_ir(*batch)(stage="optimized_hlo")
    kinds = collections.Counter(m.group(1) for m in re.finditer(r"= \S+ (\w[\w-]*)\(", hlo))
    print(
        f"{backend} {policy} {arch}: {sum(kinds.values())} instructions, {kinds['fusion']} fusions, "
        f"{kinds['convolution']} convolutions"
    )
    print(" ".join(f"{kind}={count}" for kind, count in sorted(kinds.items())))


if __name__ == "__main__":
    main(*sys.argv[1:3])
