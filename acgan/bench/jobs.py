"""The benchmark worker's jobs, one frozen record per mode, defined once here: what the parent hands to
`python -m acgan.bench.worker JOB.json RESULT.json` as a JSON file (Job.to_json), and what the worker
reads back (Job.from_json) as typed fields, the defaults in the fields rather than in the worker's reads.

Each job is built from the sweep's SweepSettings in one function: probe_job (the machine as a backend
sees it, and the models' layer widths), step_job (the bare compiled step, timed) and trainer_job (the
full training loop on its run's Config). The overhead section's G-EMA cost times a step job with another
decay: its config replaced (dataclasses.replace), never an edited copy.

Imports no framework: the parent, which never loads Keras, builds the jobs.
"""

import dataclasses
import json
from operator import attrgetter
from pathlib import Path
from typing import ClassVar, Optional

from acgan.config import Config


def config_name(backend, policy, batch, jit):
    """The configuration's name in log, job and profile file names: tensorflow-float32-b64-xla_on."""
    return f"{backend}-{policy}-b{batch}-xla_{'on' if jit else 'off'}"


class Job:
    """What every job shares: its mode (a class variable, the worker function that runs it), its file name,
    its JSON."""

    @property
    def name(self):
        """The stem of the job's files in the work folder: NAME.job.json, NAME.result.json."""
        return f"{self.mode}-{config_name(self.backend, self.policy, self.batch, self.jit)}"

    def to_json(self):
        return json.dumps({"mode": self.mode, **dataclasses.asdict(self)})

    @classmethod
    def from_json(cls, text):
        """The job `text` holds: Job.from_json reads any mode, a job class only its own. ValueError (naming
        the keys) for an unknown mode, a key the mode's job has no field for, or a field missing; a job is
        written and read by the same acgan, so any of these is a bug, not an old file to tolerate."""
        values = json.loads(text)
        mode = values.pop("mode", None)
        job_class = JOB_CLASSES.get(mode)
        if job_class is None or not issubclass(job_class, cls):
            wanted = sorted(m for m, c in JOB_CLASSES.items() if issubclass(c, cls))
            raise ValueError(f"job mode {mode!r}, expected {' or '.join(wanted)}")
        fields = dataclasses.fields(job_class)
        unknown = sorted(set(values) - {f.name for f in fields})
        if unknown:
            raise ValueError(f"a {mode} job has no field {', '.join(unknown)}")
        missing = [
            f.name
            for f in fields
            if f.name not in values
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ValueError(f"a {mode} job lacks {', '.join(missing)}")
        return job_class(**job_class.decoded(values))

    @classmethod
    def decoded(cls, values):
        """The fields' values from their JSON: JSON has no tuples, and every list a job holds is one."""
        return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeJob(Job):
    """Before the sweep, per backend: the machine as the backend sees it, and per policy the low-precision
    layer widths of the models the sweep times (worker.run_probe)."""

    mode: ClassVar[str] = "probe"
    backend: str
    policies: tuple
    width: float
    arch: str
    image_shape: tuple
    num_classes: int

    @property
    def name(self):
        return f"{self.mode}-{self.backend}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigJob(Job):
    """A job that runs one configuration of a run's Config: its backend, policy, batch and XLA setting are
    the Config's, not a second copy of them."""

    config: Config
    backend = property(attrgetter("config.backend"))
    policy = property(attrgetter("config.policy"))
    batch = property(attrgetter("config.batch"))
    jit = property(attrgetter("config.jit"))

    @classmethod
    def decoded(cls, values):
        return dict(
            values, config=Config.from_json(json.dumps(values["config"]), "the job's config")
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepJob(ConfigJob):
    """One configuration's bare compiled step, timed on device-resident tensors (worker.run_bare): the
    models and step `config` builds (its ema_decay None: the preset's; the G-EMA cost sets it)."""

    mode: ClassVar[str] = "bare"
    steps: int
    warmup: int
    repeats: int
    inputs: str  # the .npz of images and labels the sweep times every configuration on
    num_classes: int
    profile_dir: Optional[str] = None  # None: no profiler trace after the timings
    profile_length: int  # kw_only lets a field without a default follow one with a default


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainerJob(ConfigJob):
    """The full training loop on `config`, timed over windows of `window` steps (worker.run_trainer)."""

    mode: ClassVar[str] = "trainer"
    window: int
    command: Optional[str] = None  # the benchmark's command line, which the run's report records


JOB_CLASSES = {job.mode: job for job in (ProbeJob, StepJob, TrainerJob)}


def probe_job(settings, backend, image_shape, num_classes):
    """The probe of `backend` for the sweep of `settings` (a SweepSettings) on images of `image_shape`."""
    return ProbeJob(
        backend=backend,
        policies=tuple(settings.policies),
        width=settings.base.width,
        arch=settings.base.arch,
        image_shape=tuple(image_shape),
        num_classes=num_classes,
    )


def step_job(settings, backend, policy, batch, jit, inputs, num_classes):
    """The bare-step timing of one configuration of the sweep of `settings`, on the .npz `inputs`; with
    --profile, its trace goes to the configuration's subfolder of that folder."""
    profile_dir = (
        str(Path(settings.profile).resolve() / config_name(backend, policy, batch, jit))
        if settings.profile
        else None
    )
    return StepJob(
        config=configuration(settings, backend, policy, batch, jit),
        steps=settings.steps,
        warmup=settings.warmup,
        repeats=settings.repeats,
        inputs=str(inputs),
        num_classes=num_classes,
        profile_dir=profile_dir,
        profile_length=settings.profile_length,
    )


def configuration(settings, backend, policy, batch, jit):
    """The Config of one configuration of the sweep of `settings`: its base with the four dimensions."""
    return dataclasses.replace(settings.base, backend=backend, policy=policy, batch=batch, jit=jit)


def trainer_job(
    settings, backend, policy, batch, jit, inputs, output_dir, price_per_hour, command=None
):
    """The trainer-overhead run: its Config, and the steps in each of its timed windows; timed like the bare
    step, the median over `repeats` windows of consecutive steps of the loop's wall time per step.

    Every window must hold a device sync: on JAX, and on TensorFlow on a GPU, a step only enqueues work,
    and the loop waits for the device only when it reads the metrics (every --log_every steps), so a
    window without a read times the enqueueing alone. The loop reads once per window of `steps` steps
    (log_every = steps) unless the settings give log_every; then a window is `steps` rounded up to a
    multiple of it, so every window holds the same number of reads."""
    log_every = settings.log_every or settings.steps
    window = -(-settings.steps // log_every) * log_every
    # The compile step, the warm-up, the windows (the loop times its bare step after its last step).
    steps = 1 + settings.warmup + settings.repeats * window
    config = dataclasses.replace(
        configuration(settings, backend, policy, batch, jit),
        dataset=f"npz:{inputs}" if settings.synthetic else settings.base.dataset,
        steps=steps,
        sample_every=None,
        checkpoint_every=steps,
        keep_checkpoints=1,
        warmup_steps=settings.warmup,
        log_every=log_every,
        output_dir=str(output_dir),
        price_per_hour=price_per_hour,
    )
    return TrainerJob(config=config.validate(), window=window, command=command)
