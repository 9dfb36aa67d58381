"""Runs JaxStep in its own process for tests/step/test_jax_step.py (the test process runs Keras on
TensorFlow, and Keras picks its backend once per process). One process runs every job the tests need,
so the import of JAX and Keras is paid once.

    KERAS_BACKEND=jax python tests/step/jax_step_runner.py DIR

DIR holds the jobs, NAME.job.npz each; the runner runs them one after another (sorted by name) and
writes NAME.out.npz with what the job's mode measured, or, if the job raised, NAME.error.txt with the
traceback (printed to stderr too, under a line `== job NAME`, which starts each job's part of stderr)
and goes on with the next; it exits 1 if any job failed. Before the first job it writes
DIR/imports.json: the backend, and whether `tensorflow` is still blocked after importing the JAX step.

A job holds: `mode` ("steps" or "overflow"), `policy`, `width`, `jit`, the initial weights
(`weights/<model>/<i>` with `paths/<model>/<i>`, in each model's `variables` order), the batch (`images`,
`labels`, `z`, `fake_labels`, made with numpy), and optional overrides written into the step's state:
`d_learning_rate`, `scale/<d|g|q>` (pinned loss scales), `steps`, `q_learns_from_fakes`, `g_learns_from_q`,
`augment` (the augmentation policy's names, comma-separated), `learning_rate_scale` (set with
set_learning_rate_scale before the steps), `arch` and `shape` (the model preset and image shape; default
reference, 28x28x1), `loss` (D's and G's real/fake loss; default nonsaturating). Each job starts from a
cleared Keras session, so it builds and runs as it would in a process of its own.

TensorFlow is blocked here (sys.modules["tensorflow"] = None), so a run also shows the JAX step never
needs it.
"""

import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path

sys.modules["tensorflow"] = None  # `import tensorflow` now raises ImportError

import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import acgan.step.common  # noqa: E402,F401  (with acgan.training.health: what test_jax_step checks imports)
import acgan.training.health  # noqa: E402,F401
from acgan import presets  # noqa: E402
from acgan.model import networks, precision  # noqa: E402
from acgan.step import jax_step  # noqa: E402

NAMES = ("d", "g", "q")


def main(directory):
    directory = Path(directory)
    assert keras.backend.backend() == "jax", os.environ.get("KERAS_BACKEND")
    (directory / "imports.json").write_text(
        json.dumps(
            {
                "backend": keras.backend.backend(),
                "tensorflow_blocked": sys.modules["tensorflow"] is None,
            }
        )
    )
    failed = []
    for job_path in sorted(directory.glob("*.job.npz")):
        name = job_path.name[: -len(".job.npz")]
        print(f"== job {name}", file=sys.stderr, flush=True)
        try:
            run_job(job_path, directory / f"{name}.out.npz")
        except Exception:  # noqa: BLE001 - the job's test reports it; the other jobs still run
            failed.append(name)
            text = traceback.format_exc()
            (directory / f"{name}.error.txt").write_text(text)
            print(text, file=sys.stderr, flush=True)
    if failed:
        print(f"== failed jobs: {', '.join(failed)}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def run_job(in_path, out_path):
    job = dict(np.load(in_path))
    keras.backend.clear_session()  # a fresh start for each job (names, global policy), as in its own process
    policy = str(job["policy"])
    precision.set_policy(policy)
    shape = tuple(int(n) for n in job["shape"]) if "shape" in job else (28, 28, 1)
    models = networks.build_models(
        shape, 10, width=float(job["width"]), arch=str(job.get("arch", "reference"))
    )
    for model in models:
        for i, variable in enumerate(model.variables):
            assert variable.path == str(job[f"paths/{model.name}/{i}"]), variable.path
            variable.assign(job[f"weights/{model.name}/{i}"])
    preset = dataclasses.replace(
        presets.REFERENCE,  # the reference preset's rates and beta_1, with the job's
        q_learns_from_fakes=bool(job.get("q_learns_from_fakes", True)),
        g_learns_from_q=bool(job.get("g_learns_from_q", True)),
        augment=tuple(str(job["augment"]).split(",")) if "augment" in job else None,
        loss=str(job.get("loss", "nonsaturating")),
    )
    trainer = jax_step.JaxStep(models, 10, preset, jit=bool(job["jit"]))
    state = trainer.state()
    if "d_learning_rate" in job:
        state["optimizers/d_optimizer_adam/learning_rate"] = np.float32(job["d_learning_rate"])
    for name in NAMES:
        if f"scale/{name}" in job:
            # Through the state only: the Keras variables keep 2^15, so a scale read from them (the
            # keras#19244 trap) would show as gradients off by 2^15 / the pinned scale.
            state[f"optimizers/{name}_optimizer/dynamic_scale"] = np.float32(job[f"scale/{name}"])
    trainer.load_state(state)
    if "learning_rate_scale" in job:
        trainer.set_learning_rate_scale(float(job["learning_rate_scale"]))
    batch = tuple(job[k] for k in ("images", "labels", "z", "fake_labels"))
    out = {
        "fingerprint": np.array(trainer.weights_fingerprint()),
        "compile_mode": np.array(trainer.compile_mode),
    }
    if str(job["mode"]) == "steps":
        out.update(_steps(trainer, batch, int(job.get("steps", 1))))
    else:
        out.update(_overflow(trainer, batch))
    np.savez(out_path, **out)


def _first_moments(state, name):
    """Optimizer `name`'s Adam first moments, in the order of the variables it trains."""
    prefix = f"optimizers/{name}_optimizer_adam/"
    return [
        value
        for key, value in state.items()
        if key.startswith(prefix) and key.endswith("_momentum")
    ]


def _steps(trainer, batch, steps):
    metrics = []
    out = {}
    for i in range(steps):
        metrics.append(np.asarray(trainer.train_step(*batch).vector))
        if i == 0:
            state = trainer.state()
            for name in NAMES:
                for j, m in enumerate(_first_moments(state, name)):
                    out[f"moments/{name}/{j}"] = m
    out["metrics"] = np.stack(metrics)
    out.update({f"state/{key}": value for key, value in trainer.state().items()})
    out["step"] = np.array(int(trainer.step))
    return out


# A loss-scale counter no honest step reaches here (it doubles the scale at 2000): set in a victim's state,
# it makes that optimizer's loss overflow (_overflow).
OVERFLOW_AT = 1000


def _overflow(trainer, batch):
    """For each optimizer in turn, from one settled state: a step whose loss for that optimizer is
    scaled to inf. Saves the state before and after each injected step, and its metrics.

    One compiled step serves the honest steps and every injected one (as the TF tests' injection does):
    each loss is multiplied by inf when its optimizer's LossScaleOptimizer counter (step_counter, finite
    steps since the scale last moved: state handed to the jitted step, as its scale is) is OVERFLOW_AT,
    and by exactly 1 (x * 1 rounds to x) otherwise. Each victim starts from the settled state with its
    counter set there; the skip resets it to 0, as it resets any count."""
    honest_scale_loss = precision.scale_loss

    def overflowing_scale_loss(optimizer, loss):
        # JaxIteration.scaled calls this in a StatelessScope mapping the optimizer's variables to the step's
        # state
        at = jnp.equal(optimizer.step_counter.value, OVERFLOW_AT)
        return honest_scale_loss(optimizer, loss) * jnp.where(at, jnp.inf, 1.0).astype(loss.dtype)

    jax_step.precision.scale_loss = overflowing_scale_loss
    trainer.retrace()
    try:
        for _ in range(3):  # pinned scales of 256 leave no natural overflow; settle anyway
            trainer.train_step(*batch).read()
        out = {"settled_metrics": np.asarray(trainer.train_step(*batch).vector)}
        settled = trainer.state()
        for victim in NAMES:
            counter = f"optimizers/{victim}_optimizer/step_counter"
            trainer.load_state(dict(settled, **{counter: np.asarray(OVERFLOW_AT, np.int32)}))
            out[f"{victim}/metrics"] = np.asarray(trainer.train_step(*batch).vector)
            out.update({f"{victim}/after/{key}": value for key, value in trainer.state().items()})
            # The streak: one more honest step resets the victim's skipped_in_a_row.
            out[f"{victim}/next_metrics"] = np.asarray(trainer.train_step(*batch).vector)
    finally:
        jax_step.precision.scale_loss = honest_scale_loss
    out.update({f"settled/{key}": value for key, value in settled.items()})
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
