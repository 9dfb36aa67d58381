"""The set-up of a run, once before its first step: the backend's runtime, the data, the models and the
step, the restored checkpoint, the run files, the hardware advice (`set_up`, giving the `Setup` that the
loop and the report read)."""

import dataclasses
from pathlib import Path
from typing import Optional

import keras

from acgan import backend, presets
from acgan import data as data_lib
from acgan.config import DEFAULT_STEPS
from acgan.errors import UserError
from acgan.measure import advice, device
from acgan.model.networks import build_models
from acgan.training import best as best_lib
from acgan.training.run_dir import write_run_files


def make_runtime(config):
    """The backend's runtime for this run: Keras must already run on config.backend."""
    running = keras.backend.backend()
    if running != config.backend:
        raise RuntimeError(
            f"Keras runs on {running}, the run asks for {config.backend} (acgan.backend.use first)"
        )
    # Here, not at the top: each runtime loads its framework, and a run loads only its own.
    if config.backend == "jax":
        from acgan.training.jax_runtime import JaxRuntime

        return JaxRuntime(config)
    from acgan.training.tf_runtime import TensorFlowRuntime

    return TensorFlowRuntime(config)


def load_data(config):
    """The run's train split and the Preset it trains on those images (presets.resolve, once: UserError
    for a shape the preset cannot build), then the batch checked against the data's size."""
    data = data_lib.load_dataset(
        config.dataset,
        split="train",
        data_dir=config.data_dir,
        classes=config.classes,
        max_per_class=config.max_per_class,
    )  # the data's own seed stays fixed: runs with other --seed values train on the same doodles
    preset = presets.resolve(config, data.image_shape)
    if config.batch > len(data.images):
        raise UserError(
            f"--batch {config.batch} is larger than the dataset ({len(data.images)} images)"
        )
    return data, preset


def total_steps(config, num_images):
    """The step to stop at, or None when the run is bounded by --minutes."""
    if config.minutes is not None:
        return None
    if config.epochs is not None:
        # Batches straddle epochs (data.pipeline), so E passes over n images take ceil(E*n/b) steps.
        return -(-config.epochs * num_images // config.batch)
    return config.steps or DEFAULT_STEPS


@dataclasses.dataclass
class Setup:
    """Everything the loop and the report need, built once before the first step."""

    runtime: object  # tf_runtime.TensorFlowRuntime or jax_runtime.JaxRuntime; .chief: it writes
    data: object
    run_dir: Path
    files_dir: Path  # run_dir on the chief; a scratch folder on other workers
    trainer: object  # the backend's step (tf_step.TensorFlowStep or jax_step.JaxStep)
    machine: dict  # device.describe_device()
    layout: dict  # runtime.layout()
    notes: list  # hardware advice, printed and reported
    earlier_sessions: list  # session_record dicts of the sessions before this one
    checkpoints: object  # the runtime's: restore(), save(step, sessions), latest_checkpoint
    best: best_lib.BestCheckpoint  # --eval_every's best checkpoint, its record (the run's)
    resumed_from: Optional[dict]  # step, checkpoint and loss scales of a resumed run
    start_step: int
    steps: Optional[int]  # the step to stop at; None under --minutes
    evaluator: object  # make_evaluator's (evaluate(trainer, step, writer), last), or None
    # the last fraction of the run the rates fall over; None: constant
    learning_rate_decay: Optional[float]


def set_up(config, preset, runtime, data, run_dir, files_dir, resume, make_evaluator=None):
    # may train the judge: before seeding
    evaluator = make_evaluator(config) if config.eval_every else None
    backend.set_random_seed(config.seed)
    with runtime.scope():
        models = build_models(data.image_shape, data.num_classes, width=config.width, arch=preset)
    trainer = runtime.make_step(preset, models, data.num_classes, config)
    machine = device.describe_device()
    layout = runtime.layout(trainer)
    notes = runtime.notes + advice.hardware_advice(
        config.policy,
        machine,
        advice.layer_widths(list(models)),
        config.batch,
        xla=trainer.compile_mode != "off",
    )
    if trainer.compile_mode == "off" and config.jit:
        notes.append(f"XLA is off: {trainer.compile_reason}")
    decay = preset.learning_rate_decay
    if decay and config.minutes is not None and layout["workers"] > 1:
        # Each worker would read its own clock, and the replicas' rates could differ for a step.
        notes.append(
            "with several workers the preset's learning-rate decay needs --steps or --epochs; "
            "with --minutes the rates stay constant"
        )
        decay = None
    for line in notes:
        print(f"note: {line}")
    if layout["replicas"] > 1 or layout["workers"] > 1:
        print(
            f"strategy {layout['strategy']}: {layout['replicas']} replicas on "
            f"{layout['workers']} worker(s), {config.batch // layout['replicas']} samples each; "
            f"XLA: {trainer.compile_mode}"
        )
    checkpoints = runtime.checkpoints(trainer, files_dir / "checkpoints", config.keep_checkpoints)
    resumed_from, earlier = None, []
    if resume:
        # Non-chief workers restore from the chief's folder (it must be on a file system they share).
        # The newest intact checkpoint; damaged newer ones are moved aside (by the chief).
        latest, earlier = checkpoints.restore(run_dir / "checkpoints", move_damaged=runtime.chief)
        if latest:
            resumed_from = {
                "step": int(trainer.step.numpy()),
                "checkpoint": latest,
                "loss_scales": trainer.loss_scales(),
            }
    best = best_lib.BestCheckpoint(checkpoints, files_dir, run_dir if resume else None)
    start_step = int(trainer.step.numpy())
    steps = total_steps(config, len(data.images))
    if steps is not None and start_step >= steps:
        raise UserError(
            f"{run_dir} already reached step {start_step}; pass a larger --steps/--epochs to go on"
        )
    write_run_files(files_dir, config, data)
    if resumed_from:
        print(f"resuming {run_dir} from step {start_step}")
    return Setup(
        runtime=runtime,
        data=data,
        run_dir=run_dir,
        files_dir=files_dir,
        trainer=trainer,
        machine=machine,
        layout=layout,
        notes=notes,
        earlier_sessions=earlier,
        checkpoints=checkpoints,
        best=best,
        resumed_from=resumed_from,
        start_step=start_step,
        steps=steps,
        evaluator=evaluator,
        learning_rate_decay=decay,
    )
