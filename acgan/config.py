"""Every training setting in one frozen dataclass, validated up front with one-line errors."""
import dataclasses
import json
from pathlib import Path
from typing import Optional

from acgan.errors import UserError
from acgan.measure.profile import parse_step_range
from acgan.presets import ADVERSARIAL_LOSSES, PRESETS, check_ema_decay

DEFAULT_STEPS = 1000
BACKENDS = ("tensorflow", "jax")
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
# Model presets' names (acgan.presets); "auto" resolves from the image shape when the data is loaded.
ARCHS = tuple(PRESETS)


def auto_arch(arch, image_shape):
    """The preset `arch` names for images of `image_shape`, with no framework loaded: "auto" is acgan_cifar
    for 32x32x3 images and reference otherwise (acgan.model.networks.resolve_arch also checks the shape)."""
    if arch != "auto":
        return arch
    return "acgan_cifar" if tuple(image_shape) == (32, 32, 3) else "reference"


def validate_arch(name):
    if name not in ("auto",) + ARCHS:
        raise UserError(f"unknown arch {name!r}: choose auto, {', '.join(ARCHS)}")


def validate_loss(name):
    if name not in ("auto",) + ADVERSARIAL_LOSSES:
        raise UserError(f"unknown loss {name!r}: choose auto, {', '.join(ADVERSARIAL_LOSSES)}")


def validate_policy(name):
    if name not in POLICIES:
        raise UserError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")


def validate_backend(name, strategy="auto"):
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "jax" and strategy == "tpu":
        raise UserError("--strategy tpu is TensorFlow's TPUStrategy; on JAX, --strategy auto or mirrored trains on "
                        "every local TPU core")


def validate_strategy(name, devices=None):
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}: choose one of {', '.join(STRATEGIES)}")
    if devices is not None and name not in ("auto", "mirrored"):
        raise UserError(f"--devices applies to --strategy mirrored, not {name}")


@dataclasses.dataclass(frozen=True)
class Config:
    # Data: "doodles", "quickdraw", "cifar10", "npz:PATH" or "folder:PATH".
    dataset: str = "doodles"
    # Quick-Draw class names (None: the original experiment's ten).
    classes: Optional[tuple] = None
    # Where downloads and caches live.
    data_dir: str = "data"
    # Cap on images per class (None: all); bounds memory on Quick-Draw.
    max_per_class: Optional[int] = None
    # Keras backend: tensorflow or jax (on JAX the strategies are a jax.sharding mesh; no tpu strategy).
    backend: str = "tensorflow"
    # Keras dtype policy: float32, mixed_float16 or mixed_bfloat16.
    policy: str = "float32"
    # Global batch size (samples per D/G/Q update).
    batch: int = 64
    # Channel multiplier for every layer; channel counts are rounded to multiples of 8.
    width: float = 1.0
    # Model preset: reference, acgan_cifar, or auto (acgan_cifar for 32x32x3 images, else reference). A run
    # saves the resolved preset; a saved config without the field is a run of the reference model.
    arch: str = "auto"
    # D's and G's real/fake loss: nonsaturating, hinge, or auto (the preset's). A run saves the resolved
    # loss; a saved config without the field is a run of the nonsaturating loss, the only one before --loss.
    loss: str = "auto"
    # The decay of the moving average of G's weights that grids and evaluations sample from (G-EMA); 0: no
    # average; None: the preset's. A run saves the resolved value; a saved config without it kept none.
    ema_decay: Optional[float] = None
    # Length: exactly one of steps / epochs / minutes; none given means DEFAULT_STEPS steps.
    steps: Optional[int] = None
    epochs: Optional[int] = None
    minutes: Optional[float] = None
    # Compile the train step with XLA (on several replicas: each replica's forward/backward pass).
    jit: bool = True
    # tf.distribute strategy: auto, default, mirrored, multi_worker or tpu (auto: mirrored on >1 GPU). On JAX
    # auto is every local device when there are several, and multi_worker starts jax.distributed.
    strategy: str = "auto"
    # Devices for the mirrored strategy (None: every GPU); naming several CPUs splits the host CPU.
    devices: Optional[tuple] = None
    # With several replicas, batch-norm statistics over the global batch (as on one device); always so on JAX.
    sync_bn: bool = True
    # JAX's multi_worker: jax.distributed.initialize's coordinator host:port, process count and this
    # process's id (None: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID, or JAX's cluster
    # detection: SLURM, Open MPI, Kubernetes, Cloud TPU).
    coordinator_address: Optional[str] = None
    num_processes: Optional[int] = None
    process_id: Optional[int] = None
    # Seeds the weights, the noise, the data order and the grid noise.
    seed: int = 0
    # Save a sample grid every N steps (and always at the end); None: only at the end.
    sample_every: Optional[int] = 250
    # Label each row of a sample grid with its class name, in a left margin (PNGs and TensorBoard).
    labels: bool = True
    # Judge sample quality every N steps (None: never during training; see acgan.evaluate).
    eval_every: Optional[int] = None
    # Generated samples per evaluation during training.
    eval_samples: int = 1000
    # Save a checkpoint every N steps (and always at the end).
    checkpoint_every: int = 500
    # How many checkpoints to keep.
    keep_checkpoints: int = 3
    # Steps after the compiled first step that are left out of the loop's timing; as many more then run
    # back to back on batches fetched beforehand, which times the bare device step (also left out).
    warmup_steps: int = 5
    # Read the step's metrics on the host (TensorBoard, progress bar, divergence check) every N steps;
    # between reads the host only enqueues steps. Checkpoints always check the step they save.
    log_every: int = 25
    # The run's folder; None: a new folder under outputs/.
    output_dir: Optional[str] = None
    # USD per hour of the machine, for the cost of a million batches.
    price_per_hour: Optional[float] = None
    # Continue the run in output_dir (re-running with an existing run's output_dir does it too).
    resume: bool = False
    # Under mixed_float16: stop when an optimizer skips more steps than this in a row.
    max_skipped_in_a_row: int = 20
    # "A:B": a profiler trace of steps A to B, with a table of where the device time went, in profile/.
    profile_steps: Optional[str] = None

    def validate(self):
        """Raises UserError on the first bad setting; cheap (loads no data, builds nothing)."""
        validate_policy(self.policy)
        validate_strategy(self.strategy, self.devices)
        validate_backend(self.backend, self.strategy)
        validate_arch(self.arch)
        validate_loss(self.loss)
        if self.ema_decay is not None:
            try:
                check_ema_decay(self.ema_decay)
            except ValueError as e:
                raise UserError(str(e)) from None
        positive_int("batch", self.batch)
        positive_number("width", self.width)
        lengths = [n for n in ("steps", "epochs", "minutes") if getattr(self, n) is not None]
        if len(lengths) > 1:
            raise UserError(f"give only one of --steps, --epochs, --minutes (got {', '.join(lengths)})")
        for name in ("steps", "epochs", "max_per_class", "sample_every", "eval_every"):
            if getattr(self, name) is not None:
                positive_int(name, getattr(self, name))
        if self.minutes is not None:
            positive_number("minutes", self.minutes)
        non_negative_int("warmup_steps", self.warmup_steps)
        for name in ("checkpoint_every", "keep_checkpoints", "max_skipped_in_a_row", "eval_samples", "log_every"):
            positive_int(name, getattr(self, name))
        if self.price_per_hour is not None:
            positive_number("price_per_hour", self.price_per_hour)
        if self.profile_steps is not None:
            try:
                parse_step_range(self.profile_steps)
            except ValueError as e:
                raise UserError(f"--profile_steps: {e}") from None
        self.validate_processes()
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            dupes = sorted({c for c in self.classes if self.classes.count(c) > 1})
            raise UserError(f"duplicate classes in --classes: {', '.join(dupes)}")
        return self

    def validate_processes(self):
        given = [n for n in ("coordinator_address", "num_processes", "process_id") if getattr(self, n) is not None]
        if given and (self.backend, self.strategy) != ("jax", "multi_worker"):
            raise UserError(f"--{given[0]} applies to --backend jax --strategy multi_worker (TensorFlow's "
                            "multi_worker reads TF_CONFIG)")
        if self.num_processes is not None:
            positive_int("num_processes", self.num_processes)
        if self.process_id is not None:
            non_negative_int("process_id", self.process_id)
            if self.num_processes is not None and self.process_id >= self.num_processes:
                raise UserError(f"--process_id {self.process_id} must be below --num_processes {self.num_processes}")

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        values = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in values.items() if k in known}
        values.setdefault("arch", "reference")  # runs from before --arch trained the reference model
        values.setdefault("loss", "nonsaturating")  # and runs from before --loss the nonsaturating loss
        values.setdefault("ema_decay", 0.0)  # and runs from before --ema_decay kept no average of G
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
        return Config.from_json(path.read_text())
    except (ValueError, TypeError) as e:
        raise UserError(f"{path} is not a valid acgan config ({e.__class__.__name__}); cannot resume") from None
