"""The benchmark sweep: Keras backends x policies x batch sizes x XLA settings, each configuration in a
fresh worker process.

A worker (`python -m acgan.bench.worker JOB.json RESULT.json`, started by `run_sweep` with
KERAS_BACKEND set to the configuration's backend) times the bare compiled AC-GAN step on
device-resident tensors: compile, `warmup` steps, then `repeats` timings of `steps` steps each, every
timing between two device syncs (converting the step's scalars to Python floats). A fresh process per
configuration isolates its backend, its peak memory, its global dtype policy and any crash.

This (parent) process never imports Keras, TensorFlow or JAX: a "probe" worker per backend describes
the machine as that backend sees it and reports the models' layer widths, so the parent holds no
accelerator memory and one sweep can time both backends.

The pieces: jobs (what each worker is asked, one record per mode), sweep_runs (the worker processes),
results (rows and speed-ups, pure), tables and plots (benchmark.md, .csv and the figures); this module
holds the settings and runs them in order.
"""

import contextlib
import dataclasses
import importlib.util
import os
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np

from acgan import data as data_lib
from acgan.backend import INSTALL
from acgan.bench.jobs import config_name, configuration, step_job
from acgan.bench.results import FORMAT, add_speedups, make_row
from acgan.bench.sweep_runs import measure_overhead, probe_backend, run_worker
from acgan.bench.tables import describe_machine
from acgan.config import (
    BACKENDS,
    POLICIES,
    Config,
    flat_settings,
    non_negative_int,
    positive_int,
    positive_number,
    setting,
    validate_backend,
)
from acgan.errors import UserError
from acgan.measure import advice, prices
from acgan.measure.backend_labels import describe_backend
from acgan.step.distribute import check_global_batch

# The doodles / Quick-Draw shape, so synthetic timings compare; the colour preset's is CIFAR-10's.
SYNTHETIC_SHAPES = {"acgan_cifar": (32, 32, 3)}
SYNTHETIC_SHAPE = (28, 28, 1)
SYNTHETIC_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    """acgan.benchmark's settings: its flags and keyword arguments (the four sweep dimensions' flags are
    lists the command parses). `base` holds the training settings every configuration shares, its flags
    Config's (TRAINING_SETTINGS); each configuration is `base` with its backend, policy, batch and XLA."""

    # The Config fields the benchmark takes as flags; multi_worker is not swept (validate).
    TRAINING_SETTINGS: ClassVar[tuple] = (
        "dataset",
        "data_dir",
        "max_per_class",
        "width",
        "arch",
        "seed",
        "price_per_hour",
        "strategy",
        "devices",
        "jax_conv_transpose",
        "jax_batch_norm",
    )
    HELPS: ClassVar[dict] = {"seed": "Seed for the weights, the noise and the chosen images."}
    base: Config = dataclasses.field(default_factory=Config)

    backends: tuple = ("tensorflow",)  # Keras backends, each configuration's worker runs on one
    policies: tuple = POLICIES
    batches: tuple = (64, 256, 1024, 2048)
    jits: tuple = (True,)
    synthetic: bool = setting(
        False,
        "Time on random in-memory tensors (10 classes; 28x28x1, or with --arch "
        "acgan_cifar 32x32x3) instead of --dataset.",
    )
    steps: int = setting(20, "Steps per timing.")
    warmup: int = setting(3, "Steps after the compile step left out of the timing.")
    repeats: int = setting(3, "Timings per configuration (median, min and max reported).")
    device_name: Optional[str] = setting(
        None, "Name for this device in reports; also picks the price entry (e.g. T4)."
    )
    overhead: bool = setting(
        True, "Also time the full training loop at one configuration (--no-overhead to skip)."
    )
    overhead_batch: int = setting(256, "Batch size of the trainer-overhead measurement.")
    log_every: Optional[int] = setting(
        None,
        "--log_every of the trainer-overhead run (default: --steps, one metrics "
        "read, a device sync, per timed window; otherwise windows are --steps rounded "
        "up to a multiple).",
    )
    max_seconds: Optional[float] = setting(
        None,
        "Stop a configuration whose worker (start-up, compilation and timing) "
        "runs longer than this, and report it as too_slow (default: no limit).",
    )
    profile: Optional[str] = setting(
        None,
        "A folder: also record a profiler trace of --profile_length more steps of "
        "every configuration in a subfolder, with profile.md: where the device time "
        "went (summarized in benchmark.md).",
    )
    profile_length: int = setting(
        5,
        "Steps in each --profile trace (fewer for a quick look: an XLA-off step on JAX "
        "runs thousands of traced ops).",
    )

    def validate(self):
        """Raises UserError on the first bad setting; imports nothing heavy. Each configuration's Config is
        checked as a training run's (policy, backend, strategy, width, architecture, price, ...)."""
        for name, values, wanted in (
            ("backends", self.backends, "one or more of " + ", ".join(BACKENDS)),
            ("policies", self.policies, "one or more of " + ", ".join(POLICIES)),
            ("batches", self.batches, "one or more positive integers"),
            ("jit", self.jits, "on, off or on,off"),
        ):
            if not values:
                raise UserError(f"--{name} is empty: give {wanted}")
        if "jax" in self.backends and self.base.strategy == "tpu":
            raise UserError(
                "--strategy tpu needs --backends tensorflow: on JAX, --strategy auto or mirrored times "
                "the step over every local TPU core"
            )
        for name in ("steps", "repeats", "overhead_batch", "profile_length", "log_every"):
            if getattr(self, name) is not None:
                positive_int(name, getattr(self, name))
        non_negative_int("warmup", self.warmup)
        if self.max_seconds is not None:
            positive_number("max_seconds", self.max_seconds)
        # Each batch too: parse_batches (acgan.benchmark's) refused one that is not a positive integer.
        for backend, policy, batch, jit in self.configurations():
            configuration(self, backend, policy, batch, jit).validate()
        if self.base.strategy == "multi_worker":
            raise UserError(
                "the benchmark does not sweep multi_worker runs (every worker would have to start each "
                "configuration); time one with acgan.train, whose report has the same figures"
            )
        if self.base.devices:
            self.check_batches(len(self.base.devices))
        return self

    def check_batches(self, replicas):
        if replicas:
            for batch in self.batches + ((self.overhead_batch,) if self.overhead else ()):
                check_global_batch(batch, replicas, what="batch")

    def expected_replicas(self, gpu_count, backend):
        """How many replicas each worker will run, where it is known before they start (None: a TPU, or
        JAX's mirrored over every local device of a machine with no GPUs: the worker counts them)."""
        if backend == "jax" and not self.base.devices:
            if self.base.strategy == "default" or (self.base.strategy == "auto" and gpu_count <= 1):
                return 1
            return gpu_count if gpu_count > 1 else None
        if self.base.strategy == "tpu":
            return None
        if self.base.devices:
            return len(self.base.devices)
        return gpu_count if gpu_count > 1 and self.base.strategy in ("auto", "mirrored") else 1

    def configurations(self):
        """(backend, policy, batch, jit) in the order they run: per XLA setting, per batch, per policy, per
        backend (the backends of one configuration back to back, so a drifting machine load skews their
        comparison least)."""
        return [
            (k, p, b, j)
            for j in self.jits
            for b in self.batches
            for p in self.policies
            for k in self.backends
        ]


def parse_backends(values):
    """["tensorflow", "jax"] -> ("tensorflow", "jax"); UserError for an unknown or uninstalled one."""
    backends = tuple(dict.fromkeys(v.strip().lower() for v in values))
    for name in backends:
        validate_backend(name)
        if importlib.util.find_spec(name) is None:
            raise UserError(
                f"--backends {name} needs {name}, which is not installed: {INSTALL[name]}"
            )
    return backends


def parse_batches(values):
    """["64", "256"] -> (64, 256); one clear error for anything else."""
    batches = []
    for v in values:
        try:
            batch = int(v)
        except ValueError:
            batch = 0
        if batch <= 0:
            raise UserError(f"--batches must be positive integers, got {v!r}")
        batches.append(batch)
    return tuple(dict.fromkeys(batches))


def parse_jit(values):
    """["on", "off"] -> (True, False)."""
    known = {"on": True, "off": False}
    for v in values:
        if v.lower() not in known:
            raise UserError(f"--jit takes on, off or on,off, got {v!r}")
    return tuple(dict.fromkeys(known[v.lower()] for v in values))


def default_output_dir(kind="benchmark"):
    """outputs/benchmark-<timestamp> (acgan.benchmark_merge's: outputs/report-<timestamp>)."""
    return Path("outputs") / f"{kind}-{datetime.now():%Y%m%d-%H%M%S}"


def check_output_dir(path):
    """UserError for a folder that cannot become the output folder (a file, or one holding a benchmark)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"--output_dir {path} is a file, not a folder")
    if (path / "benchmark.json").exists():
        raise UserError(f"{path} already holds a benchmark; choose another --output_dir")
    return path


def prepare_output_dir(path):
    """The output folder, created; refuses a file or a folder that already holds a benchmark."""
    path = check_output_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create output folder {path}: {e.strerror}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"cannot write to output folder {path}")
    return path


def load_inputs(settings, count):
    """(images uint8 [count, H, W, C], labels int32 [count], class names): the tensors every worker times."""
    rng = np.random.default_rng(settings.base.seed)
    if settings.synthetic:
        shape = SYNTHETIC_SHAPES.get(settings.base.arch, SYNTHETIC_SHAPE)
        images = rng.integers(0, 256, (count,) + shape, dtype=np.uint8)
        labels = rng.integers(0, SYNTHETIC_CLASSES, count).astype(np.int32)
        return images, labels, tuple(f"class{i}" for i in range(SYNTHETIC_CLASSES))
    data = data_lib.load_dataset(
        settings.base.dataset,
        split="train",
        data_dir=settings.base.data_dir,
        max_per_class=settings.base.max_per_class,
        seed=settings.base.seed,
    )
    # The image shape is checked by each backend's probe worker (the models' module loads Keras).
    # Fewer images than the batch: draw with replacement (the bare step's speed does not care).
    idx = rng.choice(len(data.images), size=count, replace=len(data.images) < count)
    return data.images[idx], data.labels[idx], tuple(data.class_names)


def _hide_accelerators_here():
    """Keeps this (parent) process off the GPU, so the workers get all of its memory. Needed only where
    loading the dataset imported TensorFlow (tensorflow_datasets); otherwise no backend is loaded here."""
    if sys.modules.get("tensorflow") is None:
        return
    import tensorflow as tf  # loaded already (see above): this import finds it

    # RuntimeError, ValueError: the runtime started already (e.g. inside a test process)
    with contextlib.suppress(RuntimeError, ValueError):
        tf.config.set_visible_devices([], "GPU")


def advice_for(settings, machine, widths):
    """Per policy: the hardware advice lines for this machine and backend (one copy of each line)."""
    odd_batches = [b for b in settings.batches if b % 8] or [None]
    return {
        policy: list(
            dict.fromkeys(
                line
                for batch in odd_batches
                for line in advice.hardware_advice(
                    policy, machine, widths.get(policy) or {}, batch, xla=all(settings.jits)
                )
            )
        )
        for policy in settings.policies
    }


def make_run(settings, backend, machine, widths, image_shape, num_classes, command, created):
    """The benchmark document's record of one backend's run on this machine (rows refer to it)."""
    replicas = settings.expected_replicas(
        machine["count"] if machine["kind"] == "GPU" else 0, backend
    )
    settings.check_batches(replicas)
    label = settings.device_name or machine["name"]
    price = prices.choose_price(
        label, None if settings.device_name else machine["kind"], settings.base.price_per_hour
    )
    if replicas and replicas > 1:
        label += f" x{replicas}"  # its own group: speed-ups compare policies on the same replicas
    return {
        "device": label,
        "backend": backend,
        "matmul_precision": machine.get("jax_matmul_precision"),
        "machine": machine,
        "command": command,
        "created": created,
        "settings": flat_settings(settings),
        "inputs": {
            "image_shape": list(image_shape),
            "num_classes": num_classes,
            "source": "synthetic" if settings.synthetic else settings.base.dataset,
        },
        "price": price,
        "strategy": settings.base.strategy,
        "replicas": replicas,
        "advice": advice_for(settings, machine, widths),
        "layer_widths": widths,
        "overhead": None,
    }


def run_sweep(settings, output_dir=None, command=None, echo=print):
    """Runs the whole benchmark of validated `settings` (acgan.api.benchmark validates them) into
    `output_dir` and returns (output folder, the benchmark document)."""
    output_dir = check_output_dir(output_dir or default_output_dir())
    count = max(settings.batches + ((settings.overhead_batch,) if settings.overhead else ()))
    # Synthetic inputs double as the trainer's npz dataset, whose train split is 90% of it.
    images, labels, class_names = load_inputs(settings, 2 * count if settings.synthetic else count)
    _hide_accelerators_here()
    image_shape, num_classes = tuple(images.shape[1:]), len(class_names)
    created = datetime.now().isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="acgan-sweep-") as work:
        work = Path(work)
        runs = {
            backend: make_run(
                settings,
                backend,
                *probe_backend(
                    settings, backend, image_shape, num_classes, work
                ),  # machine, widths
                image_shape,
                num_classes,
                command,
                created,
            )
            for backend in settings.backends
        }
        output_dir = prepare_output_dir(output_dir)
        (output_dir / "logs").mkdir(exist_ok=True)
        for backend, run in runs.items():
            shutil.copyfile(
                work / f"probe-{backend}.log", output_dir / "logs" / f"probe-{backend}.log"
            )
            echo(
                f"device ({describe_backend(run)}): {describe_machine(run['device'], run['machine'])}"
            )
            echo(f"price: {run['price']['description']}")
            for policy, lines in run["advice"].items():
                for line in lines:
                    echo(f"advice ({backend}, {policy}): {line}")

        configurations = settings.configurations()
        echo(
            f"{len(configurations)} configurations, each in a fresh process; logs in {output_dir / 'logs'}"
        )
        rows = []
        inputs = work / "inputs.npz"
        np.savez(inputs, images=images, labels=labels, class_names=np.array(class_names))
        for i, (backend, policy, batch, jit) in enumerate(configurations, 1):
            name = config_name(backend, policy, batch, jit)
            result = run_worker(
                step_job(settings, backend, policy, batch, jit, inputs, num_classes),
                work,
                output_dir / "logs" / f"{name}.log",
                max_seconds=settings.max_seconds,
            )
            rows.append(make_row(runs[backend], policy, batch, jit, result))
            shown = (
                f"{result['time_per_batch_ms']:.1f} ms per batch"
                if result["status"] == "ok"
                else f"{result['status']}: {result['reason']}"
            )
            echo(f"[{i}/{len(configurations)}] {name}: {shown}")
        if settings.overhead:
            for run in runs.values():
                run["overhead"] = measure_overhead(
                    settings, run, rows, inputs, num_classes, work, output_dir, echo
                )
    return output_dir, {
        "format": FORMAT,
        "command": command,
        "created": created,
        "runs": list(runs.values()),
        "results": add_speedups(rows),
    }
