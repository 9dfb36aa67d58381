"""Every training setting in one frozen dataclass, validated up front with one-line errors."""

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Optional

from acgan.errors import UserError
from acgan.measure.profile import parse_step_range
from acgan.model.jax_formulations import JAX_BATCH_NORM, JAX_CONV_TRANSPOSE
from acgan.presets import (
    ADVERSARIAL_LOSSES,
    EMA_STATISTICS,
    check_ema_decay,
    check_ema_statistics,
    validate_name,
)

DEFAULT_STEPS = 1000
BACKENDS = ("tensorflow", "jax")
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


def validate_policy(name):
    if name not in POLICIES:
        raise UserError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")


def validate_backend(name, strategy="auto"):
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "jax" and strategy == "tpu":
        raise UserError(
            "--strategy tpu is TensorFlow's TPUStrategy; on JAX, --strategy auto or mirrored trains on "
            "every local TPU core"
        )


def setting(default, help, choices=None):
    """A field of a settings record (Config, CompareSettings, SweepSettings): its default and the help of
    its flag, from which cli.define_setting_flags defines the flag (choices: an enum flag's values)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass(frozen=True)
class Config:
    """Every training setting: acgan.train's flags and keyword arguments, and a run's config.json."""

    dataset: str = setting(
        "doodles", "doodles, swatches, quickdraw, cifar10, npz:PATH or folder:PATH."
    )
    classes: Optional[tuple] = setting(
        None, "Quick-Draw classes (default: airplane,apple,bee,bird,book,clock,cow,dog,eye,fish)."
    )
    data_dir: str = setting("data", "Folder for downloads, caches and the judge.")
    max_per_class: Optional[int] = setting(None, "Use at most this many images per class.")
    # On JAX the strategies are a jax.sharding mesh (no tpu strategy). The commands' flag defaults to
    # KERAS_BACKEND (acgan.backend.default).
    backend: str = setting(
        "tensorflow",
        "Keras backend: tensorflow or jax (default: the KERAS_BACKEND "
        "environment variable, else tensorflow).",
    )
    policy: str = setting("float32", "Keras dtype policy.", choices=POLICIES)
    batch: int = setting(64, "Global batch size.")
    width: float = setting(1.0, "Channel multiplier (channels stay multiples of 8).")
    # A run saves the resolved preset; a saved config without the field is a run of the reference model.
    arch: str = setting(
        "auto",
        "Model preset: reference (the original experiment's design), acgan_cifar (the "
        "AC-GAN paper's CIFAR-10 networks) or auto: acgan_cifar for 32x32x3 images, else reference.",
    )
    # A run saves the resolved loss; a saved config without the field is a run of the nonsaturating loss.
    loss: str = setting(
        "auto",
        "D's and G's real/fake loss: nonsaturating (the AC-GAN paper's binary "
        "cross-entropy), hinge, or auto: the preset's (nonsaturating for both).",
    )
    # A run saves the resolved value; a saved config without it kept no average.
    ema_decay: Optional[float] = setting(
        None,
        "Decay of the moving average of G's weights that grids and "
        "evaluations sample from (G-EMA; 0: none; default: the preset's).",
    )
    # A run saves the resolved value.
    ema_statistics: Optional[str] = setting(
        None,
        f"Where the average's batch-norm statistics come from: {', '.join(EMA_STATISTICS)} "
        "(G's own, moved with the weights, or recomputed before sampling; default: the preset's).",
    )
    # Length: exactly one of steps / epochs / minutes; none given means DEFAULT_STEPS steps.
    steps: Optional[int] = setting(
        None, f"Train this many steps (default {DEFAULT_STEPS} when no length is given)."
    )
    epochs: Optional[int] = setting(None, "Train this many passes over the data.")
    minutes: Optional[float] = setting(None, "Train for this much wall-clock time.")
    # On several replicas XLA compiles each replica's forward/backward pass.
    jit: bool = setting(True, "Compile the train step with XLA (--nojit or --no-jit to turn off).")
    # The JAX backend's formulations of two layers (model/transposed_conv.py, model/batch_norm.py): the
    # same function, other programs for XLA; TensorFlow runs Keras's layers either way.
    jax_conv_transpose: str = setting(
        "adjoint",
        "On JAX, G's transposed convolutions: adjoint (Keras's forward, the strided convolution's "
        "passes as gradients), linear_transpose (the forward too as the strided convolution's "
        "transpose) or autodiff (Keras's layer).",
        choices=JAX_CONV_TRANSPOSE,
    )
    jax_batch_norm: str = setting(
        "keras",
        "On JAX, batch norm's training pass: keras (Keras's layer) or fused (its statistics and "
        "gradients each in one pass).",
        choices=JAX_BATCH_NORM,
    )
    strategy: str = setting(
        "auto",
        "tf.distribute strategy, or on JAX a device mesh (auto: mirrored when more than "
        "one GPU is visible; on JAX, every local device when there are several).",
        choices=STRATEGIES,
    )
    devices: Optional[tuple] = setting(
        None, "Devices for --strategy mirrored, e.g. gpu:0,gpu:1 (cpu:0,cpu:1 splits the CPU)."
    )
    sync_bn: bool = setting(
        True, "With several replicas, batch-norm statistics over the global batch."
    )
    # JAX's multi_worker (jax.distributed.initialize); None: the JAX_* variables, or JAX's cluster detection
    # (SLURM, Open MPI, Kubernetes, Cloud TPU). TensorFlow's multi_worker reads TF_CONFIG.
    coordinator_address: Optional[str] = setting(
        None,
        "JAX multi_worker: process 0's host:port (default: "
        "JAX_COORDINATOR_ADDRESS, or JAX's cluster detection).",
    )
    num_processes: Optional[int] = setting(
        None, "JAX multi_worker: how many processes (default: JAX_NUM_PROCESSES)."
    )
    process_id: Optional[int] = setting(
        None,
        "JAX multi_worker: this process's id, 0 to num_processes - 1 (default: "
        "JAX_PROCESS_ID); process 0 writes the run's files.",
    )
    seed: int = setting(0, "Random seed for weights, noise, data order and grids.")
    sample_every: Optional[int] = setting(250, "Save a sample grid every N steps (and at the end).")
    labels: bool = setting(
        True, "Label each row of a sample grid with its class name (--no-labels: the bare grid)."
    )
    eval_every: Optional[int] = setting(
        None,
        "Judge sample quality every N steps (conditional accuracy, FID), and keep the checkpoint "
        "judged best (the lowest FID) apart from the newest ones.",
    )
    eval_samples: int = setting(1000, "Generated samples per evaluation during training.")
    checkpoint_every: int = setting(500, "Save a checkpoint every N steps.")
    keep_checkpoints: int = setting(
        3, "How many of the newest checkpoints to keep (besides --eval_every's best one)."
    )
    # The bare-step window runs on batches fetched beforehand (training/loop.py's train_loop).
    warmup_steps: int = setting(
        5,
        "Steps after compilation left out of the timing; as many more, run back to back "
        "after the last step, time the bare step.",
    )
    # Between reads the host only enqueues steps; checkpoints always check the step they save.
    log_every: int = setting(
        25, "Read the metrics (TensorBoard, progress, divergence check) every N steps."
    )
    output_dir: Optional[str] = setting(
        None, "The run's folder (default: a new folder under outputs/)."
    )
    price_per_hour: Optional[float] = setting(
        None,
        "USD per hour of this machine, for the cost of 10^6 batches "
        "(overrides the shipped price table).",
    )
    # Re-running with an existing run's output_dir resumes it too.
    resume: bool = setting(
        False, "Continue the run in --output_dir (default: the newest run under outputs/)."
    )
    max_skipped_in_a_row: int = setting(
        20, "mixed_float16: stop when an optimizer skips more steps in a row."
    )
    profile_steps: Optional[str] = setting(
        None,
        "A:B (e.g. 20:24): record a profiler trace of steps A to B in the "
        "run's profile/ folder, with profile.md: where the device time went.",
    )

    def validate(self):
        """Raises UserError on the first bad setting; cheap (loads no data, builds nothing)."""
        validate_policy(self.policy)
        if self.strategy not in STRATEGIES:
            raise UserError(
                f"unknown strategy {self.strategy!r}: choose one of {', '.join(STRATEGIES)}"
            )
        if self.devices is not None and self.strategy not in ("auto", "mirrored"):
            raise UserError(f"--devices applies to --strategy mirrored, not {self.strategy}")
        validate_backend(self.backend, self.strategy)
        validate_name(self.arch)
        if self.loss not in ("auto",) + ADVERSARIAL_LOSSES:
            raise UserError(
                f"unknown loss {self.loss!r}: choose auto, {', '.join(ADVERSARIAL_LOSSES)}"
            )
        for name, choices in (
            ("jax_conv_transpose", JAX_CONV_TRANSPOSE),
            ("jax_batch_norm", JAX_BATCH_NORM),
        ):
            if getattr(self, name) not in choices:
                raise UserError(
                    f"--{name} {getattr(self, name)!r}: choose one of {', '.join(choices)}"
                )
        if self.ema_decay is not None:
            check_ema_decay(self.ema_decay)
        if self.ema_statistics is not None:
            check_ema_statistics(self.ema_statistics)
        lengths = [n for n in ("steps", "epochs", "minutes") if getattr(self, n) is not None]
        if len(lengths) > 1:
            raise UserError(
                f"give only one of --steps, --epochs, --minutes (got {', '.join(lengths)})"
            )
        # Each number setting and its check: first those that must be given, then those None leaves unset.
        for name, check in (
            ("batch", positive_int),
            ("width", positive_number),
            ("warmup_steps", non_negative_int),
            ("checkpoint_every", positive_int),
            ("keep_checkpoints", positive_int),
            ("max_skipped_in_a_row", positive_int),
            ("eval_samples", positive_int),
            ("log_every", positive_int),
        ):
            check(name, getattr(self, name))
        for name, check in (
            ("steps", positive_int),
            ("epochs", positive_int),
            ("minutes", positive_number),
            ("max_per_class", positive_int),
            ("sample_every", positive_int),
            ("eval_every", positive_int),
            ("price_per_hour", positive_number),
        ):
            if getattr(self, name) is not None:
                check(name, getattr(self, name))
        if self.profile_steps is not None:
            try:
                parse_step_range(self.profile_steps)
            except ValueError as e:
                raise UserError(f"--profile_steps: {e}") from None
        self.validate_processes()
        return self

    def validate_processes(self):
        given = [
            n
            for n in ("coordinator_address", "num_processes", "process_id")
            if getattr(self, n) is not None
        ]
        if given and (self.backend, self.strategy) != ("jax", "multi_worker"):
            raise UserError(
                f"--{given[0]} applies to --backend jax --strategy multi_worker (TensorFlow's "
                "multi_worker reads TF_CONFIG)"
            )
        if self.num_processes is not None:
            positive_int("num_processes", self.num_processes)
        if self.process_id is not None:
            non_negative_int("process_id", self.process_id)
            if self.num_processes is not None and self.process_id >= self.num_processes:
                raise UserError(
                    f"--process_id {self.process_id} must be below --num_processes {self.num_processes}"
                )

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text, source="the settings file"):
        """The Config a config.json holds (`source` names it in errors). UserError when its keys are not
        exactly Config's fields: another version of acgan wrote it, and this one reads only its own."""
        values = json.loads(text)
        fields = {f.name for f in dataclasses.fields(cls)}
        missing, unknown = sorted(fields - set(values)), sorted(set(values) - fields)
        if missing or unknown:
            differences = [f"no {', '.join(missing)}"] * bool(missing)
            differences += [f"unknown {', '.join(unknown)}"] * bool(unknown)
            raise UserError(
                f"{source} was written by another version of acgan ({'; '.join(differences)}): "
                "this version cannot read it"
            )
        for name in ("classes", "devices"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)


def positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"--{name} must be a positive integer, got {value!r}")


def non_negative_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"--{name} must be a non-negative integer, got {value!r}")


def positive_number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UserError(f"--{name} must be a positive number, got {value!r}")


def saved_config(run_dir):
    """The Config stored in a run folder, or None when the folder holds no run."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        return Config.from_json(path.read_text(), path)
    except (ValueError, TypeError) as e:
        raise UserError(
            f"{path} is not a valid acgan config ({e.__class__.__name__}); cannot resume"
        ) from None


# Where a run lives is not a setting a file hands on: --config takes every other one.
RUN_PLACE = ("output_dir", "resume")


def start_from_file(path, config, given):
    """(`config` with every setting that `given` (the names of the flags typed, or of the arguments
    passed) does not name taken from the settings file `path` (a Config as JSON: a run's config.json, or
    what acgan.compare writes for its runs), except RUN_PLACE; the names given now, the file's included).
    UserError (one line) for a missing or unreadable file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--config {path}: no such file")
    try:  # from_json refuses a file whose keys are not exactly Config's fields
        saved = Config.from_json(path.read_text(), f"--config {path}")
    except (ValueError, TypeError, AttributeError) as e:
        raise UserError(
            f"--config {path} is not a valid acgan config ({e.__class__.__name__})"
        ) from None
    taken = {f.name for f in dataclasses.fields(Config)} - set(RUN_PLACE) - set(given)
    config = dataclasses.replace(config, **{name: getattr(saved, name) for name in taken})
    return config, set(given) | taken


# ---- The Python calls' keywords: the same settings as the flags ----


# Flags that take a list: a call takes a list, a tuple or a comma-separated string.
# (the benchmark's list of XLA settings, `jit`, is not one here: train's and compare's `jit` is a bool)
LIST_SETTINGS = ("classes", "devices", "policies", "backends", "batches")


def setting_fields(settings_class):
    """The settings a record takes as flags and keywords: its fields, a composed record's (one with a
    `base: Config`) TRAINING_SETTINGS from Config first."""
    shared = [
        Config.__dataclass_fields__[n] for n in getattr(settings_class, "TRAINING_SETTINGS", ())
    ]
    return shared + [f for f in dataclasses.fields(settings_class) if f.name != "base"]


def settings_from(settings_class, command, given, names=None):
    """`given` keyword arguments as settings_class's settings (or as `names`, the call's parameters):
    UserError for an unknown name; list settings as tuples (a comma-separated string split; an empty one
    None, as an empty list flag gives)."""
    names = names or [f.name for f in setting_fields(settings_class)]
    for name in given:
        if name not in names:
            raise UserError(
                f"acgan.{command}() has no setting {name!r} (python -m acgan.{command} --help "
                "lists the flags, which are its settings)"
            )
    values = dict(given)
    for name in LIST_SETTINGS:
        if values.get(name) is not None:
            values[name] = as_tuple(values[name]) or None
    return values


def composed(settings_class, values):
    """A composed record from flat `values`: the TRAINING_SETTINGS into its base Config, the rest its own."""
    shared = set(getattr(settings_class, "TRAINING_SETTINGS", ()))
    own = {k: v for k, v in values.items() if k not in shared}
    if shared:
        own["base"] = Config(**{k: v for k, v in values.items() if k in shared})
    return settings_class(**own)


def flat_settings(settings):
    """A settings record as one flat dict, named as its flags name the settings (for the JSON it writes)."""
    return {
        f.name: getattr(
            settings.base if f.name in getattr(settings, "TRAINING_SETTINGS", ()) else settings,
            f.name,
        )
        for f in setting_fields(type(settings))
    }


def as_tuple(value):
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


def signature(settings_class, rename=None, more=None, **defaults):
    """The Python call's keyword-only parameters, named and defaulted as settings_class's settings (for
    help() and notebooks): `rename` gives a setting its flag's name, `more` adds {name: default}."""
    parameters = {
        (rename or {}).get(f.name, f.name): f.default for f in setting_fields(settings_class)
    }
    parameters.update(more or {})
    return inspect.Signature(
        [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(name, value)
            )
            for name, value in parameters.items()
        ]
    )


def changed(function, values):
    """The arguments in `values` that differ from `function`'s defaults (what a report shows of a call)."""
    defaults = {name: p.default for name, p in inspect.signature(function).parameters.items()}
    return {name: v for name, v in values.items() if name in defaults and v != defaults[name]}


def check_int(name, value, lowest, message):
    """UserError(message) for an integer below `lowest`; another for a value that is not an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"--{name} must be an integer, got {value!r}")
    if value < lowest:
        raise UserError(message)
