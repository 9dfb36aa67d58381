"""Runs JaxStep on one device and over a mesh of four, in its own process, for
tests/step/test_jax_sharded_step.py (the test process runs Keras on TensorFlow; four virtual CPU
devices need XLA_FLAGS=--xla_force_host_platform_device_count=4 before JAX starts).

    KERAS_BACKEND=jax XLA_FLAGS=... python tests/step/jax_sharded_runner.py OUT.npz

Both steps start from the same seeded weights and see the same global batch (numpy). float32 ("steps/"):
two steps each; OUT holds each one's metrics, Adam first moments after the first step and final state.
mixed_float16 ("overflow/", the mesh only): loss scales pinned at 256, one step in which D's real logits
of the rows on device 2 only (rows 8-11 of 16) are multiplied by inf; OUT holds the state before and
after, the step's metrics, and whether every device holds the same copy of the state.
"""

import dataclasses
import sys

sys.modules["tensorflow"] = None  # `import tensorflow` now raises ImportError

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from acgan import presets  # noqa: E402
from acgan.model import networks, precision  # noqa: E402
from acgan.step import jax_step, losses  # noqa: E402

WIDTH, BATCH, DEVICES, VICTIM = 0.125, 16, 4, 2
NAMES = ("d", "g", "q")
# with G's average: replicated like the weights
PRESET = dataclasses.replace(presets.REFERENCE, ema_decay=0.9)


def main(out_path):
    assert keras.backend.backend() == "jax" and len(jax.devices()) == DEVICES, jax.devices()
    out = {}
    for mode, policy in (("steps", "float32"), ("overflow", "mixed_float16")):
        out.update({f"{mode}/{key}": value for key, value in run(mode, policy).items()})
    np.savez(out_path, **out)


def run(mode, policy):
    precision.set_policy(policy)
    keras.utils.set_random_seed(0)
    models = networks.build_models((28, 28, 1), 10, width=WIDTH, arch="reference")
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    trainers = {"mesh": jax_step.JaxStep(models, 10, PRESET, mesh=mesh)}
    if mode == "steps":
        trainers["one"] = jax_step.JaxStep(models, 10, PRESET)
    rng = np.random.default_rng(0)
    batch = (
        rng.integers(0, 256, (BATCH, 28, 28, 1), dtype=np.uint8),
        rng.integers(0, 10, BATCH).astype(np.int32),
        rng.uniform(-1.0, 1.0, (BATCH, networks.NOISE_DIM)).astype(np.float32),
        rng.integers(0, 10, BATCH).astype(np.int32),
    )
    out = {"keys": np.array([key for key in trainers["mesh"].state()])}
    split = trainers["mesh"].shard_batch(batch)
    out["shard_rows"] = np.array([[s.data.shape[0] for s in x.addressable_shards] for x in split])
    for name, trainer in trainers.items():
        inputs = trainer.shard_batch(batch)
        if mode == "steps":
            metrics = [np.asarray(trainer.train_step(*inputs).vector)]
            for j, m in enumerate(_first_moments(trainer.state())):
                out[f"{name}/moments/{j}"] = m
            metrics.append(np.asarray(trainer.train_step(*inputs).vector))
            out[f"{name}/metrics"] = np.stack(metrics)
        else:
            out.update(_overflow(name, trainer, inputs))
        for i, value in enumerate(trainer.state().values()):
            out[f"{name}/state/{i}"] = value
    mesh_trainer = trainers["mesh"]
    # Every device holds the same copy of every state array.
    out["copies_equal"] = np.array(
        all(
            all(
                np.array_equal(np.asarray(s.data), np.asarray(x.addressable_shards[0].data))
                for s in x.addressable_shards
            )
            and len(x.addressable_shards) == DEVICES
            for x in jax.tree_util.tree_leaves(mesh_trainer._state)
        )
    )
    return out


def _first_moments(state):
    """Each optimizer's Adam first moments, in the order of the variables it trains: d, then g, then q."""
    return [
        value
        for name in NAMES
        for key, value in state.items()
        if key.startswith(f"optimizers/{name}_optimizer") and key.endswith("_momentum")
    ]


def _overflow(name, trainer, inputs):
    state = trainer.state()
    for optimizer in NAMES:  # pinned, in the state only (as tests/step/jax_step_runner.py does)
        state[f"optimizers/{optimizer}_optimizer/dynamic_scale"] = np.float32(256.0)
    trainer.load_state(state)
    before = trainer.state()
    honest = losses.d_adversarial
    rows = np.arange(BATCH)[:, None]
    share = BATCH // DEVICES
    poison = np.where(
        (rows >= VICTIM * share) & (rows < (VICTIM + 1) * share), np.float32("inf"), np.float32(1.0)
    )

    def poisoned(kind, d_real, d_fake):
        return honest(kind, d_real * jnp.asarray(poison, d_real.dtype), d_fake)

    losses.d_adversarial = poisoned
    trainer.retrace()
    try:
        metrics = np.asarray(trainer.train_step(*inputs).vector)
    finally:
        losses.d_adversarial = honest
        trainer.retrace()
    out = {f"{name}/metrics": metrics[None]}
    out.update({f"{name}/before/{i}": value for i, value in enumerate(before.values())})
    return out


if __name__ == "__main__":
    main(*sys.argv[1:])
