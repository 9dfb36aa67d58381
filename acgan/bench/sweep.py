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
"""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

from acgan.config import (
    BACKENDS,
    POLICIES,
    non_negative_int,
    positive_int,
    positive_number,
    validate_backend,
    validate_arch,
    validate_policy,
    validate_strategy,
)
from acgan.errors import UserError
from acgan.measure import flops, prices, timing
from acgan.measure.backend_labels import describe_backend
from acgan.bench.tables import FORMAT, add_speedups, describe_machine
from acgan.util.children import child_env, last_log_line

SYNTHETIC_SHAPE = (28, 28, 1)   # the doodles / Quick-Draw shape, so synthetic timings compare
SYNTHETIC_CLASSES = 10
OVERHEAD_DIR = "overhead-trainer"


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    backends: tuple = ("tensorflow",)  # Keras backends, each configuration's worker runs on one
    policies: tuple = POLICIES
    batches: tuple = (64, 256, 1024, 2048)
    jits: tuple = (True,)
    dataset: str = "doodles"
    synthetic: bool = False         # random uint8 tensors instead of --dataset
    data_dir: str = "data"
    max_per_class: Optional[int] = None
    width: float = 1.0
    arch: str = "auto"           # model preset; auto: acgan_cifar for 32x32x3 images, else reference
    steps: int = 20                 # steps per timing
    warmup: int = 3                 # steps after the compiled first step, left out
    repeats: int = 3                # timings per configuration (median, min, max reported)
    seed: int = 0
    device_name: Optional[str] = None     # labels the device and picks the price entry
    price_per_hour: Optional[float] = None
    overhead: bool = True           # also time the full training loop at one configuration
    overhead_batch: int = 256
    log_every: Optional[int] = None  # the trainer-overhead run's --log_every (None: steps, a read per window)
    strategy: str = "auto"          # as acgan.train's --strategy; multi_worker is not swept
    devices: Optional[tuple] = None  # as acgan.train's --devices
    max_seconds: Optional[float] = None  # a configuration's worker is stopped after this long (status too_slow)
    profile: Optional[str] = None   # a folder: each configuration's profiler trace and profile.md in a subfolder

    def validate(self):
        """Raises UserError on the first bad setting; imports nothing heavy."""
        if not self.backends:
            raise UserError("--backends is empty: give one or more of " + ", ".join(BACKENDS))
        for name in self.backends:
            validate_backend(name)
        if "jax" in self.backends and self.strategy == "tpu":
            raise UserError("--strategy tpu needs --backends tensorflow: on JAX, --strategy auto or mirrored times "
                            "the step over every local TPU core")
        if not self.policies:
            raise UserError("--policies is empty: give one or more of " + ", ".join(POLICIES))
        for policy in self.policies:
            validate_policy(policy)
        if not self.batches:
            raise UserError("--batches is empty: give one or more positive integers")
        if not self.jits:
            raise UserError("--jit is empty: give on, off or on,off")
        optional = tuple(n for n in ("max_per_class", "log_every") if getattr(self, n) is not None)
        for name in ("steps", "repeats", "overhead_batch") + optional:
            positive_int(name, getattr(self, name))
        for batch in self.batches:
            positive_int("batches", batch)
        non_negative_int("warmup", self.warmup)
        positive_number("width", self.width)
        if self.max_seconds is not None:
            positive_number("max_seconds", self.max_seconds)
        validate_arch(self.arch)
        if self.price_per_hour is not None:
            positive_number("price_per_hour", self.price_per_hour)
        validate_strategy(self.strategy, self.devices)
        if self.strategy == "multi_worker":
            raise UserError("the benchmark does not sweep multi_worker runs (every worker would have to start each "
                            "configuration); time one with acgan.train, whose report has the same figures")
        if self.devices:
            self.check_batches(len(self.devices))
        return self

    def check_batches(self, replicas):
        from acgan.step.distribute import check_global_batch

        if replicas:
            for batch in self.batches + ((self.overhead_batch,) if self.overhead else ()):
                check_global_batch(batch, replicas, what="batch")

    def expected_replicas(self, gpu_count, backend="tensorflow"):
        """How many replicas each worker will run, where it is known before they start (None: a TPU, or
        JAX's mirrored over every local device of a machine with no GPUs: the worker counts them)."""
        if backend == "jax" and not self.devices:
            if self.strategy == "default" or (self.strategy == "auto" and gpu_count <= 1):
                return 1
            return gpu_count if gpu_count > 1 else None
        if self.strategy == "tpu":
            return None
        if self.devices:
            return len(self.devices)
        many_gpus = gpu_count > 1 and self.strategy in ("auto", "mirrored")
        return gpu_count if many_gpus else 1

    def configurations(self):
        """(backend, policy, batch, jit) in the order they run: per XLA setting, per batch, per policy, per
        backend (the backends of one configuration back to back, so a drifting machine load skews their
        comparison least)."""
        return [(k, p, b, j) for j in self.jits for b in self.batches for p in self.policies for k in self.backends]


def parse_backends(values):
    """["tensorflow", "jax"] -> ("tensorflow", "jax"); UserError for an unknown or uninstalled one."""
    import importlib.util

    from acgan.backend import INSTALL

    backends = tuple(dict.fromkeys(v.strip().lower() for v in values))
    for name in backends:
        validate_backend(name)
        if importlib.util.find_spec(name) is None:
            raise UserError(f"--backends {name} needs {name}, which is not installed: {INSTALL[name]}")
    return backends




def parse_batches(values):
    """["64", "256"] -> (64, 256); one clear error for anything else."""
    batches = []
    for v in values:
        try:
            batch = int(v)
        except ValueError:
            raise UserError(f"--batches must be positive integers, got {v!r}") from None
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


def default_output_dir(now=None):
    return Path("outputs") / f"benchmark-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}"


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


# ---------------------------------------------------------------------------------------------------
# The sweep (parent process)


def load_inputs(settings, count):
    """(images uint8 [count, H, W, C], labels int32 [count], class names): the tensors every worker times."""
    import numpy as np

    rng = np.random.default_rng(settings.seed)
    if settings.synthetic:
        images = rng.integers(0, 256, (count,) + SYNTHETIC_SHAPE, dtype=np.uint8)
        labels = rng.integers(0, SYNTHETIC_CLASSES, count).astype(np.int32)
        return images, labels, tuple(f"class{i}" for i in range(SYNTHETIC_CLASSES))
    from acgan import data as data_lib

    data = data_lib.load_dataset(
        settings.dataset, split="train", data_dir=settings.data_dir,
        max_per_class=settings.max_per_class, seed=settings.seed,
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
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except (RuntimeError, ValueError):  # runtime already started (e.g. inside a test process)
        pass


def probe_backend(settings, backend, image_shape, num_classes, work_dir):
    """(machine description, {policy: low-precision layer widths}) as a worker on `backend` sees them.

    UserError when the backend cannot start here, or rejects the inputs (e.g. their image shape)."""
    job = {"mode": "probe", "backend": backend, "policies": list(settings.policies), "width": settings.width,
           "arch": settings.arch,
           "image_shape": list(image_shape), "num_classes": num_classes}
    log_path = Path(work_dir) / f"probe-{backend}.log"
    result = run_worker(job, Path(work_dir), log_path, name=f"probe-{backend}",
                        extra_env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    if result["status"] == "user_error":
        raise UserError(result["reason"])
    if result["status"] != "ok":
        raise UserError(f"the {backend} backend did not start: {result['reason']}")
    return result["machine"], result["layer_widths"]


def advice_for(settings, machine, widths):
    """Per policy: the hardware advice lines for this machine and backend (one copy of each line)."""
    from acgan.measure import advice

    lines = {}
    for policy in settings.policies:
        lines[policy] = []
        for batch in [b for b in settings.batches if b % 8] or [None]:
            for line in advice.hardware_advice(policy, machine, widths.get(policy) or {}, batch):
                if line not in lines[policy]:
                    lines[policy].append(line)
    return lines


def make_run(settings, backend, machine, widths, image_shape, num_classes, command, created):
    """The benchmark document's record of one backend's run on this machine (rows refer to it)."""
    replicas = settings.expected_replicas(machine["count"] if machine["kind"] == "GPU" else 0, backend)
    settings.check_batches(replicas)
    label = settings.device_name or machine["name"]
    price = prices.choose_price(label, None if settings.device_name else machine["kind"], settings.price_per_hour)
    if replicas and replicas > 1:
        label += f" x{replicas}"  # its own group: speed-ups compare policies on the same replicas
    return {
        "device": label,
        "backend": backend,
        "matmul_precision": machine.get("jax_matmul_precision"),
        "machine": machine,
        "command": command,
        "created": created,
        "settings": dataclasses.asdict(settings),
        "inputs": {"image_shape": list(image_shape), "num_classes": num_classes,
                   "source": "synthetic" if settings.synthetic else settings.dataset},
        "price": price,
        "strategy": settings.strategy,
        "replicas": replicas,
        "advice": advice_for(settings, machine, widths),
        "layer_widths": widths,
        "overhead": None,
    }


def run_sweep(settings, output_dir=None, command=None, echo=print):
    """Runs the whole benchmark into `output_dir` and returns (output folder, the benchmark document)."""
    import shutil

    import numpy as np

    settings.validate()
    output_dir = check_output_dir(output_dir or default_output_dir())
    count = max(settings.batches + ((settings.overhead_batch,) if settings.overhead else ()))
    # Synthetic inputs double as the trainer's npz dataset, whose train split is 90% of it.
    images, labels, class_names = load_inputs(settings, 2 * count if settings.synthetic else count)
    _hide_accelerators_here()
    image_shape, num_classes = tuple(images.shape[1:]), len(class_names)
    created = datetime.now().isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="acgan-sweep-") as work:
        work = Path(work)
        runs = {}
        for backend in settings.backends:
            machine, widths = probe_backend(settings, backend, image_shape, num_classes, work)
            runs[backend] = make_run(settings, backend, machine, widths, image_shape, num_classes, command, created)
        output_dir = prepare_output_dir(output_dir)
        (output_dir / "logs").mkdir(exist_ok=True)
        for backend, run in runs.items():
            shutil.copyfile(work / f"probe-{backend}.log", output_dir / "logs" / f"probe-{backend}.log")
            echo(f"device ({describe_backend(run)}): {describe_machine(run['device'], run['machine'])}")
            echo(f"price: {run['price']['description']}")
            for policy, lines in run["advice"].items():
                for line in lines:
                    echo(f"advice ({backend}, {policy}): {line}")

        configurations = settings.configurations()
        echo(f"{len(configurations)} configurations, each in a fresh process; logs in {output_dir / 'logs'}")
        rows = []
        inputs = work / "inputs.npz"
        np.savez(inputs, images=images, labels=labels, class_names=np.array(class_names))
        for i, (backend, policy, batch, jit) in enumerate(configurations, 1):
            job = _job(settings, backend, policy, batch, jit, inputs, num_classes)
            name = _config_name(backend, policy, batch, jit)
            result = run_worker(job, work, output_dir / "logs" / f"{name}.log", max_seconds=settings.max_seconds)
            rows.append(make_row(runs[backend], policy, batch, jit, result))
            shown = (f"{result['time_per_batch_ms']:.1f} ms per batch" if result["status"] == "ok"
                     else f"{result['status']}: {result['reason']}")
            echo(f"[{i}/{len(configurations)}] {name}: {shown}")
        if settings.overhead:
            for backend, run in runs.items():
                run["overhead"] = measure_overhead(settings, run, rows, inputs, num_classes, work, output_dir, echo)
    add_speedups(rows)
    doc = {"format": FORMAT, "command": command, "created": created, "runs": list(runs.values()), "results": rows}
    return output_dir, doc


def _job(settings, backend, policy, batch, jit, inputs, num_classes, mode="bare"):
    return {
        "mode": mode, "backend": backend, "policy": policy, "batch": batch, "jit": jit, "width": settings.width,
        "arch": settings.arch,
        "steps": settings.steps, "warmup": settings.warmup, "repeats": settings.repeats,
        "seed": settings.seed, "inputs": str(inputs), "num_classes": num_classes,
        "strategy": settings.strategy,
        "devices": list(settings.devices) if settings.devices else None,
        "profile_dir": (str(Path(settings.profile).resolve() / _config_name(backend, policy, batch, jit))
                        if settings.profile and mode == "bare" else None),
    }


def _config_name(backend, policy, batch, jit):
    return f"{backend}-{policy}-b{batch}-xla_{'on' if jit else 'off'}"


def worker_env(backend, extra=None):
    """The worker's environment: this one's, with Keras set to `backend` (and acgan importable)."""
    env = child_env()
    env["KERAS_BACKEND"] = backend
    env.update(extra or {})
    return env


def run_worker(job, work_dir, log_path, name=None, extra_env=None, max_seconds=None):
    """Runs one job in a fresh Python process on the job's Keras backend; a dead worker becomes status
    'failed' with its reason, and one still running after `max_seconds` (None: no limit) is killed and
    becomes status 'too_slow' (e.g. float16 filter gradients in oneDNN's reference loop on some CPUs,
    100x slower than the other settings, whose timing would hold up the sweep for minutes)."""
    name = name or f"{job['mode']}-{_config_name(job['backend'], job['policy'], job['batch'], job['jit'])}"
    job_path, result_path = work_dir / f"{name}.job.json", work_dir / f"{name}.result.json"
    job_path.write_text(json.dumps(job))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = worker_env(job["backend"], extra_env)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "acgan.bench.worker", str(job_path), str(result_path)],
                stdout=log, stderr=subprocess.STDOUT, env=env, timeout=max_seconds,
            )
        except subprocess.TimeoutExpired:  # subprocess.run has killed the worker
            proc = None
    if proc is None:
        result = {"status": "too_slow",
                  "reason": f"stopped after {max_seconds:g} s (--max_seconds), its timing unfinished"}
    elif result_path.exists():
        result = json.loads(result_path.read_text())
    else:
        if proc.returncode < 0:
            how = f"worker killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode == -signal.SIGKILL:
                how += " (the out-of-memory killer sends this)"
        else:
            how = f"worker exited with status {proc.returncode}"
        last = last_log_line(log_path)
        result = {"status": "failed", "reason": f"{how}{': ' + last if last else ''}"}
    result["worker_seconds"] = time.perf_counter() - started
    result["log"] = str(log_path)
    return result






def make_row(run, policy, batch, jit, result):
    """One results row: the configuration, the machine, the measurement and what follows from it."""
    machine, price = run["machine"], run["price"]
    backend = run.get("backend") or machine.get("backend") or "tensorflow"
    row = {
        "device": run["device"],
        "backend": backend,
        # float32 matrix products on JAX: "default" lets a GPU use TF32, "highest" keeps full float32.
        "matmul_precision": result.get("matmul_precision") or run.get("matmul_precision"),
        "machine": machine,
        "command": run["command"],
        "policy": policy,
        "batch": batch,
        "jit": jit,
        "status": result["status"],
        "reason": result.get("reason"),
        "compile_seconds": result.get("compile_seconds"),
        "time_per_batch_ms": result.get("time_per_batch_ms"),      # median over repeats
        "time_per_batch_min_ms": result.get("time_per_batch_min_ms"),
        "time_per_batch_max_ms": result.get("time_per_batch_max_ms"),
        "repeat_ms": result.get("repeat_ms"),
        "time_per_1000_samples_ms": None,
        "samples_per_second": None,
        "replicas": result.get("replicas") or run.get("replicas") or 1,
        "xla": result.get("xla"),   # as run: "step", "forward_backward", "tpu" or "off"
        "samples_per_second_per_replica": None,
        "peak_memory_bytes": result.get("peak_memory_bytes"),
        "baseline_memory_bytes": result.get("baseline_memory_bytes"),
        "memory_counter": result.get("memory_counter"),
        "skipped_steps": result.get("skipped_steps"),
        "loss_scale": result.get("loss_scale"),
        "steps_run": result.get("steps_run"),
        "load_average": result.get("load_average"),
        "speedup_vs_float32": None,
        "price_per_hour": None,
        "price_entry": price["accelerator"] or price["source"],
        "cost_per_million_batches": None,
        "worker_seconds": result.get("worker_seconds"),
        "profile": result.get("profile"),   # measure.profile's summary of a few more steps, with --profile
        "log": result.get("log"),
    }
    ms = row["time_per_batch_ms"]
    if row["status"] == "ok" and ms:
        row["time_per_1000_samples_ms"] = ms * 1000.0 / batch
        row["samples_per_second"] = batch / (ms / 1e3)
        row["samples_per_second_per_replica"] = row["samples_per_second"] / row["replicas"]
    row.update(flops.arithmetic_summary(result.get("flops_per_batch"), result.get("flops_counted_by"),
                                        ms if row["status"] == "ok" else None, machine, policy, row["replicas"],
                                        device_name=run["device"], matmul_precision=row["matmul_precision"]))
    if price["usd_per_hour"] is not None:
        units, _ = prices.priced_units(price, row["replicas"], machine=machine)
        row["price_per_hour"] = price["usd_per_hour"] * units
        if row["samples_per_second"]:
            row["cost_per_million_batches"] = timing.cost_per_million_batches(ms / 1e3, row["price_per_hour"])
    return row



def measure_overhead(settings, run, rows, inputs, num_classes, work_dir, output_dir, echo=print):
    """The full training loop (loop.run: real input pipeline, metric reads, TensorBoard, progress bar)
    against the bare step at one configuration: the median of `repeats` windows of `steps` steps each,
    on both sides."""
    backend = run["backend"]
    policy, batch = settings.policies[0], settings.overhead_batch
    jit = True if True in settings.jits else settings.jits[0]
    name = _config_name(backend, policy, batch, jit)
    echo(f"trainer overhead: {backend}, {policy}, batch {batch}, XLA {'on' if jit else 'off'}")
    bare = next((r for r in rows if (r["backend"], r["policy"], r["batch"], r["jit"]) == (backend, policy, batch, jit)),
                None)
    if bare is None:
        job = _job(settings, backend, policy, batch, jit, inputs, num_classes)
        bare = make_row(run, policy, batch, jit, run_worker(job, work_dir, output_dir / "logs" / f"overhead-bare-{name}.log"))
    job = _job(settings, backend, policy, batch, jit, inputs, num_classes, mode="trainer")
    # One trainer run folder per backend (overhead-trainer-jax, ...) when the sweep has several.
    trainer_dir = OVERHEAD_DIR if len(settings.backends) == 1 else f"{OVERHEAD_DIR}-{backend}"
    job.update(
        dataset=f"npz:{inputs}" if settings.synthetic else settings.dataset,
        data_dir=settings.data_dir, max_per_class=settings.max_per_class,
        output_dir=str(output_dir / trainer_dir), price_per_hour=bare["price_per_hour"],
        command=run["command"], log_every=settings.log_every,
    )
    loop = run_worker(job, work_dir, output_dir / "logs" / f"overhead-trainer-{name}.log")
    out = {
        "backend": backend, "policy": policy, "batch": batch, "jit": jit,
        "status": "ok" if loop["status"] == "ok" and bare["status"] == "ok" else "failed",
        "reason": None,
        # Median against median, over the same number of windows of the same number of steps.
        "trainer_time_per_batch_ms": loop.get("time_per_batch_ms"),
        "trainer_window_ms": loop.get("window_ms"),
        "trainer_log_every": loop.get("log_every"),
        "trainer_window_steps": loop.get("window_steps"),
        "trainer_measured_steps": loop.get("measured_steps"),
        "trainer_loop_seconds": loop.get("loop_seconds"),
        "trainer_steps": loop.get("steps"),
        "trainer_run_dir": loop.get("run_dir"),
        "bare_time_per_batch_ms": bare["time_per_batch_ms"],
        "ratio": None,
    }
    if out["status"] == "ok":
        out["ratio"] = out["trainer_time_per_batch_ms"] / out["bare_time_per_batch_ms"]
    else:
        out["reason"] = loop.get("reason") if loop["status"] != "ok" else f"bare step: {bare['reason']}"
    return out


